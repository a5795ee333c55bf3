//! Mailboxes: a priority lane for system messages and a user lane, unbounded or bounded.

mod capacity;

use std::sync::Arc;

use tokio::sync::{Notify, mpsc};

use crate::supervision::{Decision, Failure};
use crate::watch::TerminationSink;
use crate::{Actor, ActorId, Envelope};
pub(crate) use capacity::Capacity;

/// How an actor's user lane is sized and what happens when it is full.
///
/// # Example
///
/// ```
/// use rally_actor::{MailboxConfig, Overflow};
///
/// let bounded = MailboxConfig::bounded(1_000, Overflow::DropNewest);
/// assert_eq!(bounded.capacity, Some(1_000));
/// assert_eq!(MailboxConfig::default().capacity, None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MailboxConfig {
    /// Maximum queued user messages; `None` is unbounded (the default, as in Akka).
    pub capacity: Option<usize>,
    /// What a full bounded mailbox does with one more message.
    pub overflow: Overflow,
}

impl MailboxConfig {
    /// An unbounded mailbox.
    pub fn unbounded() -> Self {
        Self::default()
    }

    /// A mailbox holding at most `capacity` user messages (at least 1).
    pub fn bounded(capacity: usize, overflow: Overflow) -> Self {
        Self {
            capacity: Some(capacity.max(1)),
            overflow,
        }
    }
}

/// The overflow policy of a bounded mailbox. System messages are never bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Overflow {
    /// The new message goes to dead letters (counted); `tell` reports success, as a full
    /// mailbox is the receiver's condition, not the sender's error. The default.
    #[default]
    DropNewest,
    /// `tell` returns [`SendError::Full`](crate::SendError::Full) with the message.
    Fail,
    /// `send().await` waits for room; `tell`, which never blocks, returns `Full`.
    Backpressure,
}

/// System messages travel on their own lane and are always handled before user messages.
pub(crate) enum SystemMsg<A: Actor> {
    Stop,
    Watch(Arc<dyn TerminationSink>),
    Unwatch(ActorId),
    /// A user-visible message that must not wait behind the user lane (`Terminated`).
    Priority(Envelope<A>),
    ChildFailed {
        child: ActorId,
        failure: Failure,
    },
    ChildStopped(ActorId),
    Supervise(Decision),
}

/// The sending side shared by every local `ActorRef` to one actor.
pub(crate) struct Mailbox<A: Actor> {
    pub(crate) id: ActorId,
    pub(crate) path: Arc<str>,
    user: mpsc::UnboundedSender<Envelope<A>>,
    system: mpsc::UnboundedSender<SystemMsg<A>>,
    pub(crate) capacity: Capacity,
    pub(crate) overflow: Overflow,
    space: Notify,
}

/// The receiving side, owned by the actor's task.
pub(crate) struct MailboxReceiver<A: Actor> {
    pub(crate) user: mpsc::UnboundedReceiver<Envelope<A>>,
    pub(crate) system: mpsc::UnboundedReceiver<SystemMsg<A>>,
}

/// Why a local enqueue failed; the envelope comes back.
pub(crate) enum EnqueueError<A: Actor> {
    Stopped(Envelope<A>),
    Full(Envelope<A>),
}

impl<A: Actor> Mailbox<A> {
    pub(crate) fn new(
        id: ActorId,
        path: Arc<str>,
        config: MailboxConfig,
    ) -> (Arc<Self>, MailboxReceiver<A>) {
        let (user_tx, user_rx) = mpsc::unbounded_channel();
        let (system_tx, system_rx) = mpsc::unbounded_channel();
        let mailbox = Arc::new(Self {
            id,
            path,
            user: user_tx,
            system: system_tx,
            capacity: Capacity::new(config.capacity),
            overflow: config.overflow,
            space: Notify::new(),
        });
        (
            mailbox,
            MailboxReceiver {
                user: user_rx,
                system: system_rx,
            },
        )
    }

    /// Enqueues on the user lane without waiting.
    pub(crate) fn enqueue(&self, envelope: Envelope<A>) -> Result<(), EnqueueError<A>> {
        if !self.capacity.try_reserve() {
            return Err(EnqueueError::Full(envelope));
        }
        self.user.send(envelope).map_err(|returned| {
            self.capacity.release();
            EnqueueError::Stopped(returned.0)
        })
    }

    /// Enqueues on the user lane, waiting for room in a full bounded mailbox.
    ///
    /// Cancel safety: dropping the future before it completes drops the envelope (the message
    /// is not enqueued).
    pub(crate) async fn enqueue_waiting(
        &self,
        mut envelope: Envelope<A>,
    ) -> Result<(), EnqueueError<A>> {
        loop {
            let room = self.space.notified();
            match self.enqueue(envelope) {
                Err(EnqueueError::Full(back)) => {
                    envelope = back;
                    if self.user.is_closed() {
                        return Err(EnqueueError::Stopped(envelope));
                    }
                    room.await;
                }
                other => return other,
            }
        }
    }

    /// Enqueues on the system lane; `Err` hands the message back when the actor has stopped.
    pub(crate) fn system(&self, msg: SystemMsg<A>) -> Result<(), SystemMsg<A>> {
        self.system.send(msg).map_err(|e| e.0)
    }

    /// Called by the actor's task after taking a user message off the queue.
    pub(crate) fn dequeued(&self) {
        self.capacity.release();
        if self.overflow == Overflow::Backpressure {
            self.space.notify_one();
        }
    }

    /// Wakes every waiting sender (the actor stopped; they will see `Stopped`).
    pub(crate) fn wake_all_senders(&self) {
        self.space.notify_waiters();
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.user.is_closed()
    }
}
