//! Mailboxes: a priority lane for system messages and a user lane, unbounded or bounded.

mod capacity;

use std::collections::VecDeque;
use std::sync::Arc;
use std::task::{Poll, Waker};

#[cfg(loom)]
use crate::sync::model::{Mutex, MutexGuard};
#[cfg(loom)]
use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use tokio::sync::Notify;

use crate::hold::Hold;
use crate::monitor::{ActorSnapshot, Probe, Slot};
use crate::supervision::{Decision, Failure};
#[cfg(not(loom))]
use crate::sync::{Mutex, MutexGuard};
use crate::watch::TerminationSink;
use crate::{Actor, ActorId, EntryFilters, Envelope};
pub(crate) use capacity::Capacity;

/// How an actor's user lane is sized and what happens when it is full.
///
/// # Example
///
/// ```
/// use rally::{MailboxConfig, Overflow};
///
/// let bounded = MailboxConfig::bounded(1_000, Overflow::DropNewest);
/// assert_eq!(bounded.capacity, Some(1_000));
/// assert_eq!(MailboxConfig::default().capacity, None);
/// ```
///
/// Non-exhaustive: made with [`bounded`](Self::bounded) or [`unbounded`](Self::unbounded).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
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

/// What the actor takes next.
pub(crate) enum Next<A: Actor> {
    System(SystemMsg<A>),
    User(Envelope<A>),
}

/// The sending side shared by every local `ActorRef` to one actor.
///
/// Both lanes sit behind one short lock; empty queues allocate nothing, so an idle actor's
/// mailbox is a few hundred bytes. The actor takes the whole user queue in one swap (one lock
/// per batch, not per message), and a flag tells it cheaply whether a system message waits.
pub(crate) struct Mailbox<A: Actor> {
    pub(crate) id: ActorId,
    pub(crate) path: Arc<str>,
    queues: Mutex<Queues<A>>,
    system_pending: AtomicBool,
    /// Set with each user message queued, cleared when the actor takes the queue (both under
    /// the lock): a hint that lets the actor see an empty queue without taking the lock.
    user_pending: AtomicBool,
    /// User messages the actor has taken from the queue and not finished: those left in its
    /// batch plus the one it is handling (0 once it looks for more and finds none), so a busy
    /// actor with an empty queue does not look idle. (32 bits, beside the flags: the mailbox
    /// stays within its allocation class.)
    in_batch: AtomicU32,
    /// When the receiver's last locked look left the actor marked parked, the data address of
    /// the waker it parked with; 0 otherwise (see `MailboxReceiver::next`). Read and written
    /// by the receiver alone: here, not in the receiver, because the mailbox's allocation has
    /// room for it and a larger task would not fit tokio's cell.
    armed: AtomicUsize,
    /// Only bounded mailboxes count reservations (see `capacity`) and wake senders waiting for
    /// room; boxed, so that an unbounded mailbox does not carry them.
    bound: Option<Box<Bound>>,
    pub(crate) overflow: Overflow,
    /// Counters, when the actor is monitored.
    pub(crate) monitor: Slot,
    /// The system's call filters, which a send from code outside any actor passes.
    pub(crate) entry: EntryFilters,
}

/// The reservations of a bounded mailbox and the senders waiting for room.
struct Bound {
    capacity: Capacity,
    space: Notify,
}

struct Queues<A: Actor> {
    user: VecDeque<Envelope<A>>,
    system: VecDeque<SystemMsg<A>>,
    closed: bool,
    /// The actor's task found both queues empty and is about to sleep (set and cleared under
    /// this lock, so a sender sees it exactly when its message would otherwise be missed).
    /// Senders wake the task only then: a busy actor's senders never touch the waker.
    parked: bool,
    /// The actor task's waker, kept from one park to the next (stored under the lock that
    /// marks the actor parked, so parking costs no atomic registration, and cloned only when
    /// the task's waker changes; a sender that finds `parked` wakes a clone).
    waker: Option<Waker>,
    /// A delivery scope's hold for the actor's next run, kept by the delivery that woke it
    /// (see [`crate::hold`]); the run takes it with the messages.
    hold: Option<Hold>,
    /// Why the actor stopped, set with `closed`. (Boxed and here, under the lock, rather than
    /// in a `OnceLock` beside it: 8 bytes instead of 16, and read only after the actor
    /// stopped.)
    reason: Option<Box<crate::TerminationReason>>,
}

/// A batch's length as `in_batch` keeps it (a batch of 4 billion saturates).
fn saturating(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

/// The messages taken and not finished, as counted in `in_batch`.
fn batch_count(in_batch: &AtomicU32) -> usize {
    in_batch.load(Ordering::Relaxed) as usize
}

/// The receiving side, owned by the actor's task.
pub(crate) struct MailboxReceiver<A: Actor> {
    mailbox: Arc<Mailbox<A>>,
    batch: VecDeque<Envelope<A>>,
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
        monitor: Slot,
        entry: EntryFilters,
    ) -> (Arc<Self>, MailboxReceiver<A>) {
        let mailbox = Arc::new(Self {
            id,
            path,
            queues: Mutex::new(Queues {
                user: VecDeque::new(),
                system: VecDeque::new(),
                closed: false,
                parked: false,
                waker: None,
                hold: None,
                reason: None,
            }),
            system_pending: AtomicBool::new(false),
            user_pending: AtomicBool::new(false),
            in_batch: AtomicU32::new(0),
            armed: AtomicUsize::new(0),
            bound: config.capacity.map(|limit| {
                Box::new(Bound {
                    capacity: Capacity::new(Some(limit)),
                    space: Notify::new(),
                })
            }),
            overflow: config.overflow,
            monitor,
            entry,
        });
        (
            mailbox.clone(),
            MailboxReceiver {
                mailbox,
                batch: VecDeque::new(),
            },
        )
    }

    fn lock(&self) -> MutexGuard<'_, Queues<A>> {
        self.queues.lock()
    }

    /// Room in the user queue (tests pin that an idle actor keeps a small buffer).
    #[cfg(test)]
    pub(crate) fn user_capacity(&self) -> usize {
        self.lock().user.capacity()
    }

    /// Enqueues on the user lane without waiting.
    pub(crate) fn enqueue(&self, envelope: Envelope<A>) -> Result<(), EnqueueError<A>> {
        if let Some(bound) = &self.bound {
            if !bound.capacity.try_reserve() {
                return Err(EnqueueError::Full(envelope));
            }
        }
        let woke = {
            let mut queues = self.lock();
            if queues.closed {
                drop(queues);
                if let Some(bound) = &self.bound {
                    bound.capacity.release();
                }
                return Err(EnqueueError::Stopped(envelope));
            }
            if queues.user.capacity() == 0 {
                // Room for one message, not the four a growing queue starts with: an idle
                // actor keeps this buffer (48 bytes less each); a burst grows it as usual.
                queues.user.reserve_exact(1);
            }
            queues.user.push_back(envelope);
            if queues.parked {
                // This delivery wakes the actor: a delivery scope's hold waits for its run.
                crate::hold::attach(&mut queues.hold);
            }
            self.user_pending.store(true, Ordering::Release);
            if let Some(counters) = self.monitor.counters() {
                // The in-batch count is read only for sampled messages.
                counters.arrived(queues.user.len(), || {
                    batch_count(&self.in_batch).saturating_sub(1)
                });
            }
            queues.wake_if_parked()
        };
        self.count_wake(woke);
        Ok(())
    }

    /// Enqueues on the user lane, waiting for room in a full bounded mailbox.
    ///
    /// Cancel safety: dropping the future before it completes drops the envelope (the message
    /// is not enqueued).
    pub(crate) async fn enqueue_waiting(
        &self,
        mut envelope: Envelope<A>,
    ) -> Result<(), EnqueueError<A>> {
        let Some(bound) = &self.bound else {
            // Unbounded: never full.
            return self.enqueue(envelope);
        };
        loop {
            let room = bound.space.notified();
            match self.enqueue(envelope) {
                Err(EnqueueError::Full(back)) => {
                    envelope = back;
                    if self.is_closed() {
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
        let woke = {
            let mut queues = self.lock();
            if queues.closed {
                return Err(msg);
            }
            queues.system.push_back(msg);
            self.system_pending.store(true, Ordering::Release);
            queues.wake_if_parked()
        };
        self.count_wake(woke);
        Ok(())
    }

    /// Counts a wake-up for the monitor.
    fn count_wake(&self, woke: bool) {
        if let Some(counters) = self.monitor.counters().filter(|_| woke) {
            counters.woke();
        }
    }

    /// User messages waiting (queued, or taken into the actor's batch and not yet started).
    pub(crate) fn len(&self) -> usize {
        self.lock().user.len() + batch_count(&self.in_batch).saturating_sub(1)
    }

    /// User messages not finished: waiting, plus the one being handled.
    pub(crate) fn load(&self) -> usize {
        self.lock().user.len() + batch_count(&self.in_batch)
    }

    /// The bound, if the mailbox is bounded.
    pub(crate) fn limit(&self) -> Option<usize> {
        self.bound.as_ref().and_then(|b| b.capacity.limit())
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Why the actor stopped, once its mailbox is closed.
    pub(crate) fn stop_reason(&self) -> Option<crate::TerminationReason> {
        self.lock().reason.as_deref().cloned()
    }
}

impl<A: Actor> Queues<A> {
    /// Marks the actor as about to sleep, keeping `waker` to wake it with.
    fn park(&mut self, waker: &Waker) {
        self.parked = true;
        if !self
            .waker
            .as_ref()
            .is_some_and(|kept| kept.will_wake(waker))
        {
            self.waker = Some(waker.clone());
        }
    }

    /// Wakes the actor if it was parked (and clears the mark); whether it did.
    ///
    /// Under the lock, by reference: a clone to wake outside the lock and its drop cost two
    /// atomic operations per wake-up (a tenth of a hop between two actors), more than the
    /// lock is held for. Waking only queues the task: no actor code runs here.
    fn wake_if_parked(&mut self) -> bool {
        let parked = std::mem::take(&mut self.parked);
        if let Some(waker) = self.waker.as_ref().filter(|_| parked) {
            // Inside a delivery scope, the wake-up waits for the scope's end (the actor is
            // not parked any more: later senders leave the waking to that).
            if !crate::hold::defer_wake(waker) {
                waker.wake_by_ref();
            }
        }
        parked
    }
}

impl<A: Actor> Probe for Mailbox<A> {
    fn snapshot(&self, reset_period: bool) -> Option<ActorSnapshot> {
        let counters = self.monitor.counters()?;
        Some(counters.snapshot(self.len(), reset_period))
    }
}

impl<A: Actor> MailboxReceiver<A> {
    /// The next message without waiting: system messages first, then the user batch.
    ///
    /// With nothing in its batch and neither flag set, it returns `None` without the lock (at
    /// one message in flight the queue is empty at every look). A message queued just after the
    /// flags were read is not lost: the actor then waits with [`next`](Self::next), which looks
    /// under the lock before it parks.
    pub(crate) fn try_next(&mut self) -> Option<Next<A>> {
        let mailbox = &*self.mailbox;
        if self.batch.is_empty()
            && !mailbox.user_pending.load(Ordering::Acquire)
            && !mailbox.system_pending.load(Ordering::Acquire)
        {
            return None;
        }
        self.take_next(None)
    }

    /// The next message; with `park`, finding none marks the actor as about to sleep, under the
    /// lock, so the next sender wakes it with that waker. Taking the only message there is with
    /// `park` marks it too (the actor handles it already parked; see [`next`](Self::next)).
    fn take_next(&mut self, park: Option<&Waker>) -> Option<Next<A>> {
        if let Some(msg) = self.try_system_if_pending() {
            return Some(Next::System(msg));
        }
        let mailbox = &*self.mailbox;
        if self.batch.is_empty() {
            // The messages the run's holds came with are handled: what the actor takes next
            // was delivered after them, so the holds end here rather than with the poll (a
            // busy actor would otherwise keep a read's batch waiting for everything after it).
            crate::hold::end_run();
            let mut queues = mailbox.lock();
            if let Some(msg) = queues.system.pop_front() {
                mailbox
                    .system_pending
                    .store(!queues.system.is_empty(), Ordering::Release);
                return Some(Next::System(msg));
            }
            std::mem::swap(&mut queues.user, &mut self.batch);
            mailbox.user_pending.store(false, Ordering::Relaxed);
            if let Some(hold) = queues.hold.take() {
                crate::hold::begin(hold);
            }
            let armed = match park.filter(|_| self.batch.len() <= 1) {
                Some(waker) => {
                    queues.park(waker);
                    waker.data() as usize
                }
                None => 0,
            };
            mailbox.armed.store(armed, Ordering::Relaxed);
            drop(queues);
            mailbox
                .in_batch
                .store(saturating(self.batch.len()), Ordering::Relaxed);
        }
        let envelope = self.batch.pop_front()?;
        self.taken();
        Some(Next::User(envelope))
    }

    /// The next message, waiting for one.
    ///
    /// Looks and, finding nothing, parks with the task's waker under the same lock: one lock
    /// per poll, and no registration when a message is there. (Callers look with
    /// [`try_next`](Self::try_next), which needs no lock when the queue is empty, before they
    /// wait.)
    ///
    /// When the look that gave the actor its last message left it parked (it took the only
    /// message there), the actor sleeps without the lock if the flags say nothing came since:
    /// at one message in flight that is one lock per message instead of two. It is sound
    /// because only senders clear the mark, and the one that does wakes the task: a message
    /// sent after that look either found the mark and woke the task, or found it cleared by a
    /// sender that did. A wake-up that reached the running task polls it again after this
    /// `Pending`, and that poll sees the sender's flag. The kept waker must be this poll's:
    /// the look notes the waker's data address, and a poll with another one takes the lock
    /// (and keeps its waker) as usual. (Wakers are told apart by that address alone, 8 bytes
    /// rather than the 16 of `Waker::will_wake`'s pair, to keep the mailbox in its allocation
    /// class; two wakers on one address with different vtables never reach an actor's task.)
    pub(crate) async fn next(&mut self) -> Next<A> {
        std::future::poll_fn(|cx| {
            let mailbox = &*self.mailbox;
            let armed = mailbox.armed.load(Ordering::Relaxed);
            if armed != 0
                && armed == cx.waker().data() as usize
                && self.batch.is_empty()
                && !mailbox.user_pending.load(Ordering::Acquire)
                && !mailbox.system_pending.load(Ordering::Acquire)
            {
                // What the locked look would have recorded: nothing taken and not finished.
                mailbox.in_batch.store(0, Ordering::Relaxed);
                return Poll::Pending;
            }
            match self.take_next(Some(cx.waker())) {
                Some(next) => Poll::Ready(next),
                None => Poll::Pending,
            }
        })
        .await
    }

    /// A system message, if the cheap flag says one waits.
    pub(crate) fn try_system_if_pending(&mut self) -> Option<SystemMsg<A>> {
        if self.mailbox.system_pending.load(Ordering::Acquire) {
            self.try_system()
        } else {
            None
        }
    }

    /// The next system message without waiting.
    pub(crate) fn try_system(&mut self) -> Option<SystemMsg<A>> {
        self.take_system(None)
    }

    /// The next system message; with `park`, finding none marks the actor as about to sleep
    /// (any message then wakes it with that waker; user messages stay queued).
    fn take_system(&mut self, park: Option<&Waker>) -> Option<SystemMsg<A>> {
        let mut queues = self.mailbox.lock();
        self.mailbox.armed.store(0, Ordering::Relaxed);
        let msg = queues.system.pop_front();
        if let Some(waker) = park.filter(|_| msg.is_none()) {
            queues.park(waker);
        }
        self.mailbox
            .system_pending
            .store(!queues.system.is_empty(), Ordering::Release);
        msg
    }

    /// The next system message, waiting for one (user messages stay queued).
    pub(crate) async fn next_system(&mut self) -> SystemMsg<A> {
        std::future::poll_fn(|cx| match self.take_system(Some(cx.waker())) {
            Some(msg) => Poll::Ready(msg),
            None => Poll::Pending,
        })
        .await
    }

    fn taken(&self) {
        let mailbox = &*self.mailbox;
        // The rest of the batch and the message now in hand.
        mailbox
            .in_batch
            .store(saturating(self.batch.len() + 1), Ordering::Relaxed);
        if let Some(bound) = &mailbox.bound {
            bound.capacity.release();
            if mailbox.overflow == Overflow::Backpressure {
                bound.space.notify_one();
            }
        }
    }

    /// Closes the mailbox (later sends fail with `Stopped`; a watch that finds it closed reads
    /// `reason`) and hands back everything left.
    pub(crate) fn close(
        &mut self,
        reason: crate::TerminationReason,
    ) -> (Vec<Envelope<A>>, Vec<SystemMsg<A>>) {
        let mailbox = &*self.mailbox;
        let (user, system, hold) = {
            let mut queues = mailbox.lock();
            queues.closed = true;
            queues.reason = Some(Box::new(reason));
            // The waker holds the task: a mailbox that outlives it (refs still held) must not,
            // nor a hold, which waits for a run that will not come.
            queues.waker = None;
            (
                std::mem::take(&mut queues.user),
                std::mem::take(&mut queues.system),
                queues.hold.take(),
            )
        };
        drop(hold);
        let mut left: Vec<Envelope<A>> = self.batch.drain(..).collect();
        left.extend(user);
        mailbox.in_batch.store(0, Ordering::Relaxed);
        if let Some(bound) = &mailbox.bound {
            for _ in &left {
                bound.capacity.release();
            }
            bound.space.notify_waiters();
        }
        (left, system.into())
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use loom::thread;

    use super::*;
    use crate::{ActorResult, Context, Handler, Message, ReplyTo};

    struct Nobody;
    impl Actor for Nobody {}
    struct Ping;
    impl Message for Ping {
        type Reply = ();
    }
    impl Handler<Ping> for Nobody {
        async fn handle(&mut self, _: Ping, _: &mut Context<Self>) -> ActorResult<()> {
            Ok(())
        }
    }

    /// Sends one `Ping`, which must be accepted.
    fn ping(mailbox: &Mailbox<Nobody>) {
        assert!(
            mailbox
                .enqueue(Envelope::new(Ping, ReplyTo::ignore()))
                .is_ok()
        );
    }

    fn mailbox() -> (Arc<Mailbox<Nobody>>, MailboxReceiver<Nobody>) {
        Mailbox::new(
            ActorId(1),
            "/user/test".into(),
            MailboxConfig::default(),
            Slot::default(),
            EntryFilters::default(),
        )
    }

    /// A sender racing the actor going to sleep never loses the wake-up.
    #[test]
    fn no_lost_wakeup_between_enqueue_and_park() {
        loom::model(|| {
            let (mailbox, mut receiver) = mailbox();
            let sender = thread::spawn(move || {
                ping(&mailbox);
            });
            assert!(matches!(
                loom::future::block_on(receiver.next()),
                Next::User(_)
            ));
            sender.join().unwrap();
        });
    }

    /// Two senders, the actor parking between their messages: both wake-ups arrive.
    #[test]
    fn every_park_is_woken() {
        loom::model(|| {
            let (mailbox, mut receiver) = mailbox();
            let senders: Vec<_> = (0..2)
                .map(|_| {
                    let mailbox = mailbox.clone();
                    thread::spawn(move || {
                        ping(&mailbox);
                    })
                })
                .collect();
            for _ in 0..2 {
                assert!(matches!(
                    loom::future::block_on(receiver.next()),
                    Next::User(_)
                ));
            }
            for sender in senders {
                sender.join().unwrap();
            }
        });
    }

    /// The actor takes the only message there is (so it handles it already parked) while a
    /// second is sent: its next wait, which may sleep without the lock, still gets the second.
    #[test]
    fn a_message_sent_while_the_only_one_is_handled_is_not_lost() {
        loom::model(|| {
            let (mailbox, mut receiver) = mailbox();
            ping(&mailbox);
            let sender = thread::spawn(move || {
                ping(&mailbox);
            });
            loom::future::block_on(async {
                for _ in 0..2 {
                    assert!(matches!(receiver.next().await, Next::User(_)));
                }
            });
            sender.join().unwrap();
        });
    }

    /// A system message sent while the actor parks wakes it too, and is taken first.
    #[test]
    fn system_messages_wake_and_overtake() {
        loom::model(|| {
            let (mailbox, mut receiver) = mailbox();
            ping(&mailbox);
            let sender = {
                let mailbox = mailbox.clone();
                thread::spawn(move || assert!(mailbox.system(SystemMsg::Stop).is_ok()))
            };
            sender.join().unwrap();
            assert!(matches!(
                loom::future::block_on(receiver.next()),
                Next::System(SystemMsg::Stop)
            ));
            assert!(matches!(
                loom::future::block_on(receiver.next()),
                Next::User(_)
            ));
        });
    }

    /// Counts the drops of the value it holds: when a hold's last clone is gone.
    struct Counted(Arc<std::sync::atomic::AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// One `Ping` delivered on another thread inside a delivery scope, taken by `receiver`
    /// (which may park first or find it there); the counter counts the drop of the scope's hold.
    fn take_a_ping_delivered_with_a_hold(
        mailbox: &Arc<Mailbox<Nobody>>,
        receiver: &mut MailboxReceiver<Nobody>,
    ) -> Arc<std::sync::atomic::AtomicUsize> {
        let dropped = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let sender = {
            let dropped = dropped.clone();
            let mailbox = mailbox.clone();
            thread::spawn(move || {
                let hold = crate::hold::Hold::new(Counted(dropped));
                crate::hold::scope(hold, || ping(&mailbox));
            })
        };
        assert!(matches!(
            loom::future::block_on(receiver.next()),
            Next::User(_)
        ));
        sender.join().unwrap();
        dropped
    }

    /// A delivery scope's hold, given with a message that may find the actor about to sleep:
    /// whether or not the delivery is the one that wakes it, no hold is left in the mailbox
    /// once the actor has taken the message (left there, it would wait for a run that does
    /// not come, and hold back a transport's write).
    #[test]
    fn a_hold_is_never_left_behind_by_a_racing_delivery() {
        loom::model(|| {
            let (mailbox, mut receiver) = mailbox();
            let dropped = take_a_ping_delivered_with_a_hold(&mailbox, &mut receiver);
            // The run that took the message ends.
            crate::hold::end_run();
            assert_eq!(
                dropped.load(std::sync::atomic::Ordering::SeqCst),
                1,
                "the hold went with the run (or was never attached), not left in the mailbox"
            );
        });
    }

    /// A hold ends once the actor has handled the messages it came with, within the run: when
    /// the actor takes a message delivered after them, the hold is gone, whether the delivery
    /// with the hold woke the actor (the hold came with it) or found it awake (it never did).
    /// A busy actor would otherwise keep a read's write waiting for everything after it.
    /// (Before holds ended here, the interleavings where the actor parked first failed.)
    #[test]
    fn a_hold_ends_when_the_messages_it_came_with_are_handled() {
        loom::model(|| {
            let (mailbox, mut receiver) = mailbox();
            let dropped = take_a_ping_delivered_with_a_hold(&mailbox, &mut receiver);
            // Delivered after the first was taken: a later batch, outside any scope.
            ping(&mailbox);
            assert!(matches!(
                loom::future::block_on(receiver.next()),
                Next::User(_)
            ));
            // The run has not ended (no `end_run` here): taking the later batch ended it.
            assert_eq!(
                dropped.load(std::sync::atomic::Ordering::SeqCst),
                1,
                "the hold outlived the messages it came with"
            );
        });
    }

    /// After `close`, a racing sender either got its message into the drained list or was
    /// told `Stopped`: nothing is lost.
    #[test]
    fn close_races_a_sender_without_losing_the_message() {
        loom::model(|| {
            let (mailbox, mut receiver) = mailbox();
            let sender = {
                let mailbox = mailbox.clone();
                thread::spawn(move || {
                    mailbox
                        .enqueue(Envelope::new(Ping, ReplyTo::ignore()))
                        .is_ok()
                })
            };
            let (left, _) = receiver.close(crate::TerminationReason::Stopped);
            let accepted = sender.join().unwrap();
            let drained_now = left.len();
            let late = receiver.try_next().is_some();
            assert_eq!(usize::from(accepted), drained_now + usize::from(late));
        });
    }
}
