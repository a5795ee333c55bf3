//! What a handler can do besides changing its own state: spawn, watch, stop, timers, stash.

use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::AbortHandle;

use crate::filter::Chain;
use crate::mailbox::Mailbox;
use crate::request_context::{RequestContext, Scope};
use crate::supervision::RestartRecord;
use crate::system::{ChildControl, ParentControl};
use crate::watch::{LocalWatcher, TerminationSink};
use crate::{
    Actor, ActorId, ActorRef, ActorResult, ActorSystem, Dispatcher, Envelope, Handler, Message,
    Props, Recipient, ReplyTo, SpawnError, Terminated, TerminationReason,
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
    pub(crate) stopping: bool,
    /// Whether the actor has call filters (kept in `extras`): in the padding after `stopping`,
    /// so that every actor's context stays as small as it was.
    filtered: bool,
    /// The reply destination of the message being handled (a boxed `Option<ReplyTo<R>>`),
    /// until the handler takes it with `reply_later`.
    pub(crate) current_reply: Option<Box<dyn Any + Send>>,
    /// Empty reply slots, one per reply type this actor has handled, reused message after
    /// message (a box per message cost 6-9% of remote ping-pong).
    reply_slots: ReplySlots,
    /// Where the message being handled came from, if a transport said so.
    pub(crate) origin: Option<crate::Origin>,
    /// What only some actors use, allocated on first use: an idle actor without children,
    /// watchers, timers or a stash does not carry ~290 bytes of empty collections.
    extras: Option<Box<Extras<A>>>,
}

/// A [`Context`]'s empty reply slots. Most actors answer one reply type, so the first slot is
/// held in place: an actor that was asked once keeps its slot and no buffer beside it (a
/// `Vec` of one cost 16 bytes more per such actor, a virtual actor at rest, say). The enum is
/// a `Vec`'s 24 bytes.
#[derive(Default)]
enum ReplySlots {
    #[default]
    None,
    One(Box<dyn Any + Send>),
    Many(Vec<Box<dyn Any + Send>>),
}

/// The rarely used part of a [`Context`].
struct Extras<A: Actor> {
    children: HashMap<ActorId, ChildEntry>,
    watchers: HashMap<ActorId, Arc<dyn TerminationSink>>,
    timers: HashMap<TimerId, AbortHandle>,
    next_timer: u64,
    stash: VecDeque<Envelope<A>>,
    unstashed: VecDeque<Envelope<A>>,
    stash_request: Option<Box<dyn Any + Send>>,
    /// Why the actor is stopping, when not simply asked to.
    stop_reason: Option<TerminationReason>,
    receive_timeout: Option<ReceiveTimeout<A>>,
    /// Futures started with `pipe`/`pipe_to`, aborted when the actor stops.
    tasks: Vec<AbortHandle>,
    /// The call filters of this actor (the system's, then its own), fixed at spawn: this
    /// actor's own `Arc`, so that taking it per message touches no line other actors share.
    filters: Option<Chain>,
    /// The virtual actor this actor is a life of, for the filters.
    grain: Option<(&'static str, Arc<str>)>,
}

impl<A: Actor> Default for Extras<A> {
    fn default() -> Self {
        Self {
            children: HashMap::new(),
            watchers: HashMap::new(),
            timers: HashMap::new(),
            next_timer: 0,
            stash: VecDeque::new(),
            unstashed: VecDeque::new(),
            stash_request: None,
            stop_reason: None,
            receive_timeout: None,
            tasks: Vec::new(),
            filters: None,
            grain: None,
        }
    }
}

/// The message an idle actor is sent, and after how long.
struct ReceiveTimeout<A: Actor> {
    idle: Duration,
    make: Box<dyn Fn() -> Envelope<A> + Send>,
}

/// The marker a handler returns (through [`Context::deferred`]) after taking its reply with
/// [`Context::reply_later`]: not a failure.
#[derive(Debug, thiserror::Error)]
#[error("the reply is deferred")]
pub(crate) struct Deferred;

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
            stopping: false,
            current_reply: None,
            reply_slots: ReplySlots::None,
            origin: None,
            filtered: false,
            extras: None,
        }
    }

    fn extras(&mut self) -> &mut Extras<A> {
        self.extras.get_or_insert_with(Box::default)
    }

    /// Fixes the actor's call filters, and the virtual actor it is a life of (kept only for
    /// them), at spawn.
    pub(crate) fn set_filters(
        &mut self,
        filters: Option<Chain>,
        grain: Option<(&'static str, Arc<str>)>,
    ) {
        self.filtered = filters.is_some();
        if filters.is_some() {
            let extras = self.extras();
            extras.filters = filters;
            extras.grain = grain;
        }
    }

    /// The virtual actor this actor is a life of, when it has call filters.
    pub(crate) fn grain(&self) -> Option<&(&'static str, Arc<str>)> {
        self.extras.as_ref()?.grain.as_ref()
    }

    /// The actor's call filters, if it has any.
    pub(crate) fn filters(&self) -> Option<&Chain> {
        if !self.filtered {
            return None;
        }
        self.extras.as_ref()?.filters.as_ref()
    }

    pub(crate) fn add_watcher(&mut self, watcher: Arc<dyn TerminationSink>) {
        self.extras().watchers.insert(watcher.watcher(), watcher);
    }

    pub(crate) fn remove_watcher(&mut self, watcher: ActorId) {
        if let Some(extras) = &mut self.extras {
            extras.watchers.remove(&watcher);
        }
    }

    /// The watchers, taken (when the actor has stopped).
    pub(crate) fn take_watchers(&mut self) -> HashMap<ActorId, Arc<dyn TerminationSink>> {
        self.extras
            .as_mut()
            .map(|e| std::mem::take(&mut e.watchers))
            .unwrap_or_default()
    }

    pub(crate) fn remove_child(&mut self, child: ActorId) {
        if let Some(extras) = &mut self.extras {
            extras.children.remove(&child);
        }
    }

    pub(crate) fn child_mut(&mut self, child: ActorId) -> Option<&mut ChildEntry> {
        self.extras.as_mut()?.children.get_mut(&child)
    }

    pub(crate) fn child_entries(&self) -> impl Iterator<Item = &ChildEntry> {
        self.extras.iter().flat_map(|e| e.children.values())
    }

    pub(crate) fn has_children(&self) -> bool {
        self.extras.as_ref().is_some_and(|e| !e.children.is_empty())
    }

    /// The next message made the next to handle by `unstash_all` or a restart.
    pub(crate) fn pop_unstashed(&mut self) -> Option<Envelope<A>> {
        self.extras.as_mut()?.unstashed.pop_front()
    }

    pub(crate) fn push_unstashed_front(&mut self, envelope: Envelope<A>) {
        self.extras().unstashed.push_front(envelope);
    }

    pub(crate) fn push_unstashed_back(&mut self, envelope: Envelope<A>) {
        self.extras().unstashed.push_back(envelope);
    }

    /// Records why the actor stops, unless a reason is already recorded.
    pub(crate) fn set_stop_reason(&mut self, reason: TerminationReason) {
        self.extras().stop_reason.get_or_insert(reason);
    }

    pub(crate) fn take_stop_reason(&mut self) -> Option<TerminationReason> {
        self.extras.as_mut()?.stop_reason.take()
    }

    /// Where the message being handled came from, when a transport delivered it with
    /// [`Envelope::with_origin`]; `None` for a local message and outside handlers. For a
    /// message from another node, `rally-remote` sets the sending node's authenticated
    /// `UniqueAddress` (read it typed with `rally::remote::RemoteContext::remote_origin`).
    ///
    /// # Example
    ///
    /// ```
    /// use rally::{Actor, ActorResult, ActorSystem, Context, Handler, Message};
    ///
    /// struct Ping;
    /// impl Message for Ping { type Reply = bool; }
    /// struct Echo;
    /// impl Actor for Echo {}
    /// impl Handler<Ping> for Echo {
    ///     async fn handle(&mut self, _: Ping, ctx: &mut Context<Self>) -> ActorResult<bool> {
    ///         Ok(ctx.origin().is_some())
    ///     }
    /// }
    /// # #[tokio::main] async fn main() {
    /// let echo = ActorSystem::new("doc").spawn(Echo).unwrap();
    /// assert_eq!(echo.ask(Ping, std::time::Duration::from_secs(1)).await, Ok(false));
    /// # }
    /// ```
    pub fn origin(&self) -> Option<&(dyn Any + Send + Sync)> {
        self.origin.as_deref()
    }

    /// The request context the message being handled came with (or the one a call filter
    /// set); `None` for a message sent outside any context, and outside handlers. The
    /// messages the handler sends carry it on, from `pipe`/`pipe_to` too.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use rally::{Actor, ActorResult, ActorSystem, Context, Handler, Message, RequestContext};
    ///
    /// struct Whose;
    /// impl Message for Whose { type Reply = Option<String>; }
    /// struct Echo;
    /// impl Actor for Echo {}
    /// impl Handler<Whose> for Echo {
    ///     async fn handle(&mut self, _: Whose, ctx: &mut Context<Self>) -> ActorResult<Option<String>> {
    ///         Ok(ctx.request_context().and_then(|c| c.get("user").map(str::to_owned)))
    ///     }
    /// }
    /// # #[tokio::main] async fn main() {
    /// let system = ActorSystem::new("doc");
    /// let echo = system.spawn(Echo).unwrap();
    /// let second = Duration::from_secs(1);
    /// assert_eq!(echo.ask(Whose, second).await, Ok(None));
    /// let alice = RequestContext::new().with_entry("user", "alice").unwrap();
    /// assert_eq!(system.in_context(alice, echo.ask(Whose, second)).await, Ok(Some("alice".to_owned())));
    /// # }
    /// ```
    pub fn request_context(&self) -> Option<RequestContext> {
        // Kept in the handler's scope, not here: every actor's context would grow for it.
        RequestContext::current()
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
        let children = &mut self.extras.get_or_insert_with(Box::default).children;
        self.system.spawn_under(
            props.into(),
            parent as Arc<dyn ParentControl>,
            self.myself.path(),
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
        self.extras.iter().flat_map(|e| e.children.keys().copied())
    }

    /// Watches another actor: this actor receives [`Terminated`] once when it stops, at once if
    /// it has already stopped. Its `reason` says why: stopped, failed (with the error), or its
    /// node went down. The watched actor may be local or on another node.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::prelude::*;
    /// use rally::{Terminated, TerminationReason};
    ///
    /// struct Worker;
    /// impl Actor for Worker {}
    ///
    /// /// Tells `report` why the worker ended.
    /// struct Watcher {
    ///     worker: ActorRef<Worker>,
    ///     report: tokio::sync::mpsc::UnboundedSender<TerminationReason>,
    /// }
    /// impl Actor for Watcher {
    ///     async fn started(&mut self, ctx: &mut Context<Self>) -> ActorResult<()> {
    ///         ctx.watch(&self.worker);
    ///         Ok(())
    ///     }
    /// }
    /// impl Handler<Terminated> for Watcher {
    ///     async fn handle(&mut self, t: Terminated, _: &mut Context<Self>) -> ActorResult<()> {
    ///         let _ = self.report.send(t.reason);
    ///         Ok(())
    ///     }
    /// }
    ///
    /// # #[tokio::main] async fn main() {
    /// let system = ActorSystem::new("doc");
    /// let worker = system.spawn(Worker).unwrap();
    /// let (report, mut reasons) = tokio::sync::mpsc::unbounded_channel();
    /// system.spawn(Watcher { worker: worker.clone(), report }).unwrap();
    /// worker.stop();
    /// assert_eq!(reasons.recv().await, Some(TerminationReason::Stopped));
    /// # system.shutdown().await.unwrap();
    /// # }
    /// ```
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
        if let Some(handle) = self.extras.as_mut().and_then(|e| e.timers.remove(&id)) {
            handle.abort();
        }
    }

    fn add_timer(&mut self, handle: AbortHandle) -> TimerId {
        // Drop the records of one-shot timers that already fired, so they cannot pile up.
        let extras = self.extras();
        if extras.timers.len() >= 64 {
            extras.timers.retain(|_, h| !h.is_finished());
        }
        extras.next_timer += 1;
        let id = TimerId(extras.next_timer);
        extras.timers.insert(id, handle);
        id
    }

    /// The parent of this actor, if it is an actor of type `P` (`None` for a top-level actor,
    /// whose parent is the system, or when the parent is of another type).
    ///
    /// # Example
    ///
    /// ```
    /// use rally::{Actor, ActorResult, Context, Handler, Message};
    ///
    /// struct Boss;
    /// impl Actor for Boss {}
    /// struct Done;
    /// impl Message for Done { type Reply = (); }
    /// impl Handler<Done> for Boss {
    ///     async fn handle(&mut self, _: Done, _: &mut Context<Self>) -> ActorResult<()> { Ok(()) }
    /// }
    ///
    /// struct Worker;
    /// impl Actor for Worker {
    ///     async fn started(&mut self, ctx: &mut Context<Self>) -> ActorResult<()> {
    ///         if let Some(boss) = ctx.parent::<Boss>() {
    ///             boss.tell(Done)?;
    ///         }
    ///         Ok(())
    ///     }
    /// }
    /// ```
    pub fn parent<P: Actor>(&self) -> Option<ActorRef<P>> {
        let mailbox = self
            .parent
            .clone()
            .as_any()?
            .downcast::<Mailbox<P>>()
            .ok()?;
        Some(ActorRef::local(mailbox, self.system.dead_letters().clone()))
    }

    /// The parent's path: `/user` for a top-level actor, whose parent is the system.
    pub fn parent_path(&self) -> &str {
        let path: &str = self.myself.path();
        path.rsplit_once('/').map_or("", |(parent, _)| parent)
    }

    /// Sends `msg` to this actor whenever it has received nothing for `idle` (Akka's receive
    /// timeout): once per idle period, again after each further period of silence. A new call
    /// replaces the previous setting; [`cancel_receive_timeout`](Self::cancel_receive_timeout)
    /// removes it.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use rally::{Actor, ActorResult, Context, Handler, Message};
    ///
    /// #[derive(Clone)]
    /// struct Idle;
    /// impl Message for Idle { type Reply = (); }
    ///
    /// struct Session;
    /// impl Actor for Session {
    ///     async fn started(&mut self, ctx: &mut Context<Self>) -> ActorResult<()> {
    ///         ctx.set_receive_timeout(Duration::from_secs(30), Idle);
    ///         Ok(())
    ///     }
    /// }
    /// impl Handler<Idle> for Session {
    ///     async fn handle(&mut self, _: Idle, ctx: &mut Context<Self>) -> ActorResult<()> {
    ///         ctx.stop(); // nobody talked to us for 30 s
    ///         Ok(())
    ///     }
    /// }
    /// ```
    pub fn set_receive_timeout<M>(&mut self, idle: Duration, msg: M)
    where
        M: Message + Clone,
        A: Handler<M>,
    {
        self.extras().receive_timeout = Some(ReceiveTimeout {
            idle,
            make: Box::new(move || Envelope::new(msg.clone(), ReplyTo::ignore())),
        });
    }

    /// Removes the receive timeout.
    pub fn cancel_receive_timeout(&mut self) {
        if let Some(extras) = &mut self.extras {
            extras.receive_timeout = None;
        }
    }

    pub(crate) fn receive_timeout(&self) -> Option<Duration> {
        self.extras
            .as_ref()?
            .receive_timeout
            .as_ref()
            .map(|t| t.idle)
    }

    pub(crate) fn receive_timeout_message(&self) -> Option<Envelope<A>> {
        self.extras
            .as_ref()?
            .receive_timeout
            .as_ref()
            .map(|t| (t.make)())
    }

    /// Runs `future` on this actor's dispatcher and sends its output to this actor as a message
    /// (Akka's `pipeTo self`): the handler returns at once and the actor keeps handling other
    /// messages meanwhile. The future is aborted if the actor stops first.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::{Actor, ActorResult, Context, Handler, Message};
    ///
    /// struct Fetch(String);
    /// impl Message for Fetch { type Reply = (); }
    /// struct Fetched(usize);
    /// impl Message for Fetched { type Reply = (); }
    ///
    /// struct Crawler { total: usize }
    /// impl Actor for Crawler {}
    /// impl Handler<Fetch> for Crawler {
    ///     async fn handle(&mut self, msg: Fetch, ctx: &mut Context<Self>) -> ActorResult<()> {
    ///         // Slow I/O runs apart from the actor; its result comes back as `Fetched`.
    ///         ctx.pipe(async move { Fetched(msg.0.len()) });
    ///         Ok(())
    ///     }
    /// }
    /// impl Handler<Fetched> for Crawler {
    ///     async fn handle(&mut self, msg: Fetched, _: &mut Context<Self>) -> ActorResult<()> {
    ///         self.total += msg.0;
    ///         Ok(())
    ///     }
    /// }
    /// ```
    pub fn pipe<M>(&mut self, future: impl Future<Output = M> + Send + 'static)
    where
        M: Message,
        A: Handler<M>,
    {
        let target = self.myself.downgrade();
        // In the handler's scope: the future's sends, and its message, carry its context.
        let handle = self.dispatcher.spawn(Scope::carry(async move {
            let msg = future.await;
            if let Some(me) = target.upgrade() {
                // Stopped meanwhile: the message is counted as a dead letter.
                let _ = me.tell(msg);
            }
        }));
        self.add_task(handle);
    }

    /// Runs `future` on this actor's dispatcher and sends its output to `recipient`. The
    /// future is aborted if this actor stops first.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::{Actor, ActorResult, Context, Handler, Message, Recipient};
    ///
    /// struct Total(u64);
    /// impl Message for Total { type Reply = (); }
    /// struct Sum { numbers: Vec<u64>, to: Recipient<Total> }
    /// impl Message for Sum { type Reply = (); }
    ///
    /// struct Adder;
    /// impl Actor for Adder {}
    /// impl Handler<Sum> for Adder {
    ///     async fn handle(&mut self, msg: Sum, ctx: &mut Context<Self>) -> ActorResult<()> {
    ///         ctx.pipe_to(async move { Total(msg.numbers.iter().sum()) }, msg.to);
    ///         Ok(())
    ///     }
    /// }
    /// ```
    pub fn pipe_to<M: Message>(
        &mut self,
        future: impl Future<Output = M> + Send + 'static,
        recipient: Recipient<M>,
    ) {
        let handle = self.dispatcher.spawn(Scope::carry(async move {
            let msg = future.await;
            // A stopped recipient is counted as a dead letter.
            let _ = recipient.tell(msg);
        }));
        self.add_task(handle);
    }

    fn add_task(&mut self, handle: AbortHandle) {
        let tasks = &mut self.extras().tasks;
        if tasks.len() >= 64 {
            tasks.retain(|h| !h.is_finished());
        }
        tasks.push(handle);
    }

    pub(crate) fn abort_tasks(&mut self) {
        let Some(extras) = &mut self.extras else {
            return;
        };
        for handle in extras.tasks.drain(..) {
            handle.abort();
        }
    }

    /// Takes the reply destination of the message being handled, to answer it later (after
    /// other messages, from another task...): an `ask` waits for what is sent through it. The
    /// handler then returns [`deferred`](Self::deferred). `None` outside a handler, when `R` is
    /// not the message's reply type, or when already taken.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use rally::{Actor, ActorResult, ActorSystem, Context, Handler, Message, ReplyTo};
    ///
    /// /// Answers each `Wait` only when `Open` arrives.
    /// #[derive(Default)]
    /// struct Gate { waiting: Vec<ReplyTo<&'static str>> }
    /// impl Actor for Gate {}
    ///
    /// struct Wait;
    /// impl Message for Wait { type Reply = &'static str; }
    /// struct Open;
    /// impl Message for Open { type Reply = (); }
    ///
    /// impl Handler<Wait> for Gate {
    ///     async fn handle(&mut self, _: Wait, ctx: &mut Context<Self>) -> ActorResult<&'static str> {
    ///         self.waiting.extend(ctx.reply_later());
    ///         ctx.deferred()
    ///     }
    /// }
    /// impl Handler<Open> for Gate {
    ///     async fn handle(&mut self, _: Open, _: &mut Context<Self>) -> ActorResult<()> {
    ///         for reply in self.waiting.drain(..) {
    ///             reply.send(Ok("open"));
    ///         }
    ///         Ok(())
    ///     }
    /// }
    ///
    /// # #[tokio::main] async fn main() {
    /// let system = ActorSystem::new("doc");
    /// let gate = system.spawn(Gate::default()).unwrap();
    /// // The ask's message is queued first, so `Wait` is handled before `Open`.
    /// let (answer, ()) = tokio::join!(gate.ask(Wait, Duration::from_secs(5)), async {
    ///     gate.tell(Open).unwrap();
    /// });
    /// assert_eq!(answer, Ok("open"));
    /// # system.shutdown().await.unwrap();
    /// # }
    /// ```
    pub fn reply_later<R: Send + 'static>(&mut self) -> Option<ReplyTo<R>> {
        self.current_reply
            .as_mut()?
            .downcast_mut::<Option<ReplyTo<R>>>()?
            .take()
    }

    /// An empty reply slot (a boxed `Option<ReplyTo<R>>`), reused if this actor has one.
    pub(crate) fn reply_slot<R: Send + 'static>(&mut self) -> Box<dyn Any + Send> {
        let fits = |slot: &Box<dyn Any + Send>| (**slot).is::<Option<ReplyTo<R>>>();
        let reused = match std::mem::take(&mut self.reply_slots) {
            ReplySlots::One(slot) if fits(&slot) => Some(slot),
            ReplySlots::Many(mut slots) => {
                let found = slots
                    .iter()
                    .position(fits)
                    .map(|index| slots.swap_remove(index));
                self.reply_slots = ReplySlots::Many(slots);
                found
            }
            kept => {
                self.reply_slots = kept;
                None
            }
        };
        reused.unwrap_or_else(|| Box::new(None::<ReplyTo<R>>))
    }

    /// Room for cached reply slots (tests pin that an idle actor keeps a small buffer).
    #[cfg(test)]
    pub(crate) fn reply_slot_capacity(&self) -> usize {
        match &self.reply_slots {
            ReplySlots::None => 0,
            ReplySlots::One(_) => 1,
            ReplySlots::Many(slots) => slots.capacity(),
        }
    }

    /// Gives back a slot taken with [`reply_slot`](Self::reply_slot), emptied.
    pub(crate) fn return_reply_slot(&mut self, slot: Box<dyn Any + Send>) {
        self.reply_slots = match std::mem::take(&mut self.reply_slots) {
            ReplySlots::None => ReplySlots::One(slot),
            ReplySlots::One(first) => ReplySlots::Many(vec![first, slot]),
            ReplySlots::Many(mut slots) => {
                slots.push(slot);
                ReplySlots::Many(slots)
            }
        };
    }

    /// What a handler returns after [`reply_later`](Self::reply_later): the reply goes out
    /// through the taken [`ReplyTo`], and this return is not a failure.
    ///
    /// # Errors
    ///
    /// Always an error value, which the runtime recognises; see
    /// [`reply_later`](Self::reply_later) for an example.
    pub fn deferred<T>(&self) -> ActorResult<T> {
        Err(Box::new(Deferred))
    }

    pub(crate) fn cancel_all_timers(&mut self) {
        let Some(extras) = &mut self.extras else {
            return;
        };
        for (_, handle) in extras.timers.drain() {
            handle.abort();
        }
    }

    /// Puts the message being handled aside, with its reply destination, until
    /// [`unstash_all`](Self::unstash_all). Pass the message the handler received; whatever the
    /// handler returns for it is ignored, and an `ask` waiting for it gets its reply when the
    /// message is handled again.
    pub fn stash<M: Message>(&mut self, msg: M) {
        self.extras().stash_request = Some(Box::new(msg));
    }

    /// Makes every stashed message the next to be handled, in the order they were stashed.
    pub fn unstash_all(&mut self) {
        let Some(extras) = &mut self.extras else {
            return;
        };
        while let Some(envelope) = extras.stash.pop_back() {
            extras.unstashed.push_front(envelope);
        }
    }

    /// Messages waiting in the stash.
    pub fn stashed(&self) -> usize {
        self.extras.as_ref().map_or(0, |e| e.stash.len())
    }

    pub(crate) fn take_stash_request(&mut self) -> Option<Box<dyn Any + Send>> {
        self.extras.as_mut()?.stash_request.take()
    }

    pub(crate) fn push_stashed(&mut self, envelope: Envelope<A>) {
        self.extras().stash.push_back(envelope);
    }

    pub(crate) fn drain_stash(&mut self) -> impl Iterator<Item = Envelope<A>> + '_ {
        self.extras
            .iter_mut()
            .flat_map(|e| e.unstashed.drain(..).chain(e.stash.drain(..)))
    }
}

impl<A: Actor> std::fmt::Debug for Context<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("actor", &self.myself().path())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first cached reply slot is held in place at no cost in the context's size.
    #[test]
    fn reply_slots_are_a_vecs_size() {
        assert_eq!(
            std::mem::size_of::<ReplySlots>(),
            std::mem::size_of::<Vec<Box<dyn Any + Send>>>()
        );
    }
}
