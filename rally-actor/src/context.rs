//! What a handler can do besides changing its own state: spawn, watch, stop, timers, stash.

use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::AbortHandle;

use crate::mailbox::Mailbox;
use crate::supervision::RestartRecord;
use crate::system::{ChildControl, ParentControl};
use crate::watch::{LocalWatcher, TerminationSink};
use crate::{
    Actor, ActorId, ActorRef, ActorSystem, Dispatcher, Envelope, Handler, Message, Props,
    SpawnError, Terminated,
};

/// Identifies a timer started with [`Context::send_after`] or [`Context::send_interval`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TimerId(u64);

/// The actor's view of the runtime, passed to every handler and hook.
pub struct Context<A: Actor> {
    myself: ActorRef<A>,
    system: ActorSystem,
    dispatcher: Dispatcher,
    pub(crate) parent: Arc<dyn ParentControl>,
    pub(crate) children: HashMap<ActorId, ChildEntry>,
    pub(crate) watchers: HashMap<ActorId, Arc<dyn TerminationSink>>,
    timers: HashMap<TimerId, AbortHandle>,
    next_timer: u64,
    stash: VecDeque<Envelope<A>>,
    pub(crate) unstashed: VecDeque<Envelope<A>>,
    stash_request: Option<Box<dyn Any + Send>>,
    pub(crate) stopping: bool,
}

/// A parent's record of one child.
pub(crate) struct ChildEntry {
    pub(crate) control: Arc<dyn ChildControl>,
    pub(crate) record: RestartRecord,
}

impl<A: Actor> Context<A> {
    pub(crate) fn new(
        myself: ActorRef<A>,
        system: ActorSystem,
        dispatcher: Dispatcher,
        parent: Arc<dyn ParentControl>,
    ) -> Self {
        Self {
            myself,
            system,
            dispatcher,
            parent,
            children: HashMap::new(),
            watchers: HashMap::new(),
            timers: HashMap::new(),
            next_timer: 0,
            stash: VecDeque::new(),
            unstashed: VecDeque::new(),
            stash_request: None,
            stopping: false,
        }
    }

    /// A handle to this actor.
    pub fn myself(&self) -> &ActorRef<A> {
        &self.myself
    }

    /// This actor's id.
    pub fn id(&self) -> ActorId {
        self.myself.id()
    }

    /// The system this actor runs in.
    pub fn system(&self) -> &ActorSystem {
        &self.system
    }

    /// The dispatcher this actor runs on.
    pub fn dispatcher(&self) -> &Dispatcher {
        &self.dispatcher
    }

    /// Stops this actor after the current message: children stop first, then `stopped` runs.
    pub fn stop(&mut self) {
        self.stopping = true;
    }

    /// Spawns a child, supervised by this actor and stopped before it.
    ///
    /// # Errors
    ///
    /// See [`SpawnError`].
    pub fn spawn<C: Actor>(
        &mut self,
        props: impl Into<Props<C>>,
    ) -> Result<ActorRef<C>, SpawnError> {
        let parent = self
            .myself
            .mailbox()
            .expect("a context always belongs to a local actor")
            .clone();
        let children = &mut self.children;
        self.system.spawn_under(
            props.into(),
            parent as Arc<dyn ParentControl>,
            &self.myself.path().clone(),
            Some(&self.dispatcher),
            |id, control| {
                children.insert(
                    id,
                    ChildEntry {
                        control,
                        record: RestartRecord::default(),
                    },
                );
            },
        )
    }

    /// Ids of the live children.
    pub fn children(&self) -> impl Iterator<Item = ActorId> + '_ {
        self.children.keys().copied()
    }

    /// Watches another actor: this actor receives [`Terminated`] once when it stops, at once if
    /// it has already stopped.
    pub fn watch<T: Actor>(&mut self, other: &ActorRef<T>)
    where
        A: Handler<Terminated>,
    {
        let mailbox: Arc<Mailbox<A>> = self
            .myself
            .mailbox()
            .expect("a context always belongs to a local actor")
            .clone();
        other.watch_with(Arc::new(LocalWatcher { mailbox }));
    }

    /// Stops watching; a `Terminated` already queued may still arrive.
    pub fn unwatch<T: Actor>(&mut self, other: &ActorRef<T>) {
        other.unwatch_with(self.id());
    }

    /// Sends `msg` to this actor after `delay`. The timer is cancelled if the actor stops.
    pub fn send_after<M>(&mut self, delay: Duration, msg: M) -> TimerId
    where
        M: Message,
        A: Handler<M>,
    {
        let target = self.myself.downgrade();
        let handle = self.dispatcher.spawn(async move {
            tokio::time::sleep(delay).await;
            if let Some(me) = target.upgrade() {
                // The actor may have stopped meanwhile; then the message is a dead letter.
                let _ = me.tell(msg);
            }
        });
        self.add_timer(handle)
    }

    /// Sends a clone of `msg` to this actor every `period`, first after one period. Cancelled
    /// by [`cancel_timer`](Self::cancel_timer) or when the actor stops.
    pub fn send_interval<M>(&mut self, period: Duration, msg: M) -> TimerId
    where
        M: Message + Clone,
        A: Handler<M>,
    {
        let target = self.myself.downgrade();
        let handle = self.dispatcher.spawn(async move {
            let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
            loop {
                ticks.tick().await;
                match target.upgrade() {
                    Some(me) if me.tell(msg.clone()).is_ok() => {}
                    _ => break,
                }
            }
        });
        self.add_timer(handle)
    }

    /// Cancels a timer; a message it already sent stays in the mailbox.
    pub fn cancel_timer(&mut self, id: TimerId) {
        if let Some(handle) = self.timers.remove(&id) {
            handle.abort();
        }
    }

    fn add_timer(&mut self, handle: AbortHandle) -> TimerId {
        // Drop the records of one-shot timers that already fired, so they cannot pile up.
        if self.timers.len() >= 64 {
            self.timers.retain(|_, h| !h.is_finished());
        }
        self.next_timer += 1;
        let id = TimerId(self.next_timer);
        self.timers.insert(id, handle);
        id
    }

    pub(crate) fn cancel_all_timers(&mut self) {
        for (_, handle) in self.timers.drain() {
            handle.abort();
        }
    }

    /// Puts the message being handled aside, with its reply destination, until
    /// [`unstash_all`](Self::unstash_all). Pass the message the handler received; whatever the
    /// handler returns for it is ignored, and an `ask` waiting for it gets its reply when the
    /// message is handled again.
    pub fn stash<M: Message>(&mut self, msg: M) {
        self.stash_request = Some(Box::new(msg));
    }

    /// Makes every stashed message the next to be handled, in the order they were stashed.
    pub fn unstash_all(&mut self) {
        while let Some(envelope) = self.stash.pop_back() {
            self.unstashed.push_front(envelope);
        }
    }

    /// Messages waiting in the stash.
    pub fn stashed(&self) -> usize {
        self.stash.len()
    }

    pub(crate) fn take_stash_request(&mut self) -> Option<Box<dyn Any + Send>> {
        self.stash_request.take()
    }

    pub(crate) fn push_stashed(&mut self, envelope: Envelope<A>) {
        self.stash.push_back(envelope);
    }

    pub(crate) fn drain_stash(&mut self) -> impl Iterator<Item = Envelope<A>> + '_ {
        self.unstashed.drain(..).chain(self.stash.drain(..))
    }
}
