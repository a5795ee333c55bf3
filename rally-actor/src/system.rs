//! The actor system: spawning, the name registry, the guardian of top-level actors, shutdown.

use std::any::Any;
use std::collections::HashMap;
use std::future::Future;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use hashbrown::HashTable;
use tokio::sync::Notify;

use crate::dispatch::DispatcherError;
use crate::filter::{self, Chain};
use crate::mailbox::{Mailbox, SystemMsg};
use crate::monitor::{ActorCounters, Monitor, Probe, Slot, Timed};
use crate::request_context::{RequestContext, Scope};
use crate::runner::{self, Cell};
use crate::supervision::{Decision, Failure, RestartRecord};
use crate::sync::Mutex;
use crate::watch::TerminationSink;
use crate::{
    Actor, ActorId, ActorRef, CallFilter, Context, DeadLetters, Dispatcher, EntryFilters,
    EventStream, LookupError, Props, ShutdownError, SpawnError, SystemConfig,
};

/// A running group of actors sharing configuration, dispatchers, a registry, an event stream
/// and dead letters. Cheap to clone.
///
/// # Example
///
/// ```
/// use rally::{Actor, ActorSystem, Props};
///
/// struct Idle;
/// impl Actor for Idle {}
///
/// # #[tokio::main] async fn main() {
/// let system = ActorSystem::new("example");
/// let idle = system.spawn(Props::new(Idle).named("idle")).unwrap();
/// assert_eq!(&**idle.path(), "/user/idle");
/// assert_eq!(system.lookup::<Idle>("/user/idle").unwrap(), idle);
/// system.shutdown().await.unwrap();
/// # }
/// ```
#[derive(Clone)]
pub struct ActorSystem {
    inner: Arc<Inner>,
}

struct Inner {
    name: Arc<str>,
    config: SystemConfig,
    default_dispatcher: Dispatcher,
    dispatchers: HashMap<String, Dispatcher>,
    next_id: AtomicU64,
    registry: Mutex<HashMap<Arc<str>, Registered>>,
    event_stream: EventStream,
    dead_letters: DeadLetters,
    guardian: Arc<Guardian>,
    monitor: Monitor,
    /// Watchers fixed at spawn ([`Props::watched_by`]), by the actor they watch: kept here,
    /// not in the actor's task, which would grow every actor's task for the few that have one.
    spawn_watchers: Mutex<HashMap<ActorId, Arc<dyn TerminationSink>>>,
    /// How many are kept: an actor that stops looks in the table only when there are some.
    spawn_watched: AtomicUsize,
    /// The system's call filters, for actors spawned from now on and for sends from code
    /// outside any actor.
    entry: EntryFilters,
}

struct Registered {
    actor: Box<dyn Any + Send + Sync>,
    type_name: &'static str,
}

impl std::fmt::Debug for ActorSystem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActorSystem")
            .field("name", &self.inner.name)
            .finish_non_exhaustive()
    }
}

impl ActorSystem {
    /// A system with default settings whose default dispatcher is the current tokio runtime.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn new(name: &str) -> Self {
        Self::with_config(name, SystemConfig::default())
    }

    /// A system with the given settings: its default dispatcher and the named dispatchers of
    /// `config` are started.
    ///
    /// # Panics
    ///
    /// When a dispatcher cannot start (see [`try_with_config`](Self::try_with_config)), e.g.
    /// a `current-runtime` default dispatcher outside a tokio runtime.
    pub fn with_config(name: &str, config: SystemConfig) -> Self {
        match Self::try_with_config(name, config) {
            Ok(system) => system,
            Err(error) => panic!("cannot start actor system {name:?}: {error}"),
        }
    }

    /// A system with the given settings, or the reason a dispatcher could not start.
    ///
    /// # Errors
    ///
    /// [`DispatcherError`] naming the dispatcher.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::{ActorSystem, SystemConfig};
    ///
    /// let config = SystemConfig::from_toml(r#"
    ///     [default-dispatcher]
    ///     type = "shared"
    ///     [dispatchers.db]
    ///     type = "blocking"
    /// "#).unwrap();
    /// // No tokio runtime needed: every dispatcher here has its own threads.
    /// let system = ActorSystem::try_with_config("app", config).unwrap();
    /// assert_eq!(system.dispatcher("db").unwrap().kind().label(), "blocking");
    /// ```
    pub fn try_with_config(name: &str, config: SystemConfig) -> Result<Self, DispatcherError> {
        let start = |d: &crate::DispatcherConfig| {
            Dispatcher::start(
                d.name.clone(),
                d.kind.clone(),
                d.throughput.unwrap_or(config.throughput),
                d.throughput_deadline.or(config.throughput_deadline),
            )
            .map(|dispatcher| dispatcher.monitored(d.monitored))
        };
        let default_dispatcher = start(&config.default_dispatcher)?;
        let others = config
            .dispatchers
            .iter()
            .map(start)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self::with_dispatchers(
            name,
            config,
            default_dispatcher,
            others,
        ))
    }

    /// A system with explicit dispatchers (the first is the default).
    pub fn with_dispatchers(
        name: &str,
        config: SystemConfig,
        default_dispatcher: Dispatcher,
        others: Vec<Dispatcher>,
    ) -> Self {
        crate::panic::install_hook();
        let event_stream = EventStream::default();
        let dead_letters = DeadLetters::new(event_stream.clone());
        let guardian = Arc::new(Guardian {
            strategy: config.guardian_strategy.clone(),
            children: Mutex::new(Children::default()),
            live: AtomicUsize::new(0),
            all_stopped: Notify::new(),
            shutting_down: AtomicBool::new(false),
        });
        let monitor = Monitor::default();
        monitor.add_dispatcher(default_dispatcher.clone());
        for d in &others {
            monitor.add_dispatcher(d.clone());
        }
        let dispatchers = others
            .into_iter()
            .map(|d| (d.name().to_owned(), d))
            .collect();
        Self {
            inner: Arc::new(Inner {
                name: name.into(),
                config,
                default_dispatcher,
                dispatchers,
                next_id: AtomicU64::new(1),
                registry: Mutex::new(HashMap::new()),
                event_stream,
                dead_letters,
                guardian,
                monitor,
                spawn_watchers: Mutex::new(HashMap::new()),
                spawn_watched: AtomicUsize::new(0),
                entry: EntryFilters::default(),
            }),
        }
    }

    /// The system's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The settings the system runs with.
    pub fn config(&self) -> &SystemConfig {
        &self.inner.config
    }

    /// The dispatcher actors use unless told otherwise.
    pub fn default_dispatcher(&self) -> &Dispatcher {
        &self.inner.default_dispatcher
    }

    /// A dispatcher by name (`"default"` is the default one).
    pub fn dispatcher(&self, name: &str) -> Option<&Dispatcher> {
        if name == "default" {
            return Some(&self.inner.default_dispatcher);
        }
        self.inner.dispatchers.get(name)
    }

    /// Monitoring: snapshots of the monitored actors and of every dispatcher.
    pub fn monitor(&self) -> &Monitor {
        &self.inner.monitor
    }

    /// The event stream.
    pub fn event_stream(&self) -> &EventStream {
        &self.inner.event_stream
    }

    /// The dead-letter office.
    pub fn dead_letters(&self) -> &DeadLetters {
        &self.inner.dead_letters
    }

    /// A new process-unique actor id (transports use it for refs to remote actors).
    pub fn next_id(&self) -> ActorId {
        ActorId(self.inner.next_id.fetch_add(1, Ordering::Relaxed))
    }

    /// Spawns a top-level actor, supervised by the system; its path is `/user/<name>`.
    ///
    /// # Errors
    ///
    /// See [`SpawnError`].
    pub fn spawn<A: Actor>(&self, props: impl Into<Props<A>>) -> Result<ActorRef<A>, SpawnError> {
        let guardian = self.inner.guardian.clone();
        self.spawn_under(
            props.into(),
            guardian.clone(),
            "/user",
            None,
            |_, control| guardian.adopt(control),
        )
    }

    /// Finds a named actor by path, e.g. `/user/echo`.
    ///
    /// # Errors
    ///
    /// [`LookupError::NotFound`] or [`LookupError::WrongType`].
    pub fn lookup<A: Actor>(&self, path: &str) -> Result<ActorRef<A>, LookupError> {
        let registry = self.inner.registry.lock();
        let entry = registry
            .get(path)
            .ok_or_else(|| LookupError::NotFound(path.to_owned()))?;
        entry
            .actor
            .downcast_ref::<ActorRef<A>>()
            .cloned()
            .ok_or(LookupError::WrongType {
                path: path.to_owned(),
                actual: entry.type_name,
            })
    }

    /// Stops every actor (top-level actors in reverse order of creation, each after its
    /// children) and returns when all have stopped.
    ///
    /// # Errors
    ///
    /// [`ShutdownError::TimedOut`] when some actors are still running after the configured
    /// `shutdown_timeout`; they are left to the runtime.
    ///
    /// # Cancel safety
    ///
    /// The stop is under way as soon as the future is first polled: dropping it only stops
    /// the waiting, and the actors still stop. Calling `shutdown` again waits again.
    pub async fn shutdown(&self) -> Result<(), ShutdownError> {
        let guardian = &self.inner.guardian;
        guardian.shutting_down.store(true, Ordering::SeqCst);
        let mut top: Vec<(ActorId, Arc<dyn ChildControl>)> = {
            let children = guardian.children.lock();
            children
                .controls
                .iter()
                .map(|c| (c.id(), c.clone()))
                .collect()
        };
        top.sort_by_key(|(id, _)| std::cmp::Reverse(*id));
        for (_, control) in &top {
            control.stop();
        }
        let timeout = self.inner.config.shutdown_timeout;
        let all_stopped = async {
            loop {
                let notified = guardian.all_stopped.notified();
                if guardian.live.load(Ordering::SeqCst) == 0 {
                    return;
                }
                notified.await;
            }
        };
        let stopped = tokio::time::timeout(timeout, all_stopped).await.is_ok();
        if stopped {
            Ok(())
        } else {
            Err(ShutdownError::TimedOut {
                remaining: guardian.live.load(Ordering::SeqCst),
                timeout,
            })
        }
    }

    /// Whether `shutdown` has begun.
    pub fn is_shutting_down(&self) -> bool {
        self.inner.guardian.shutting_down.load(Ordering::SeqCst)
    }

    /// Spawns an actor under `parent`, whose path is `parent_path`.
    pub(crate) fn spawn_under<A: Actor>(
        &self,
        props: Props<A>,
        parent: Arc<dyn ParentControl>,
        parent_path: &str,
        inherited: Option<&Dispatcher>,
        adopt: impl FnOnce(ActorId, Arc<dyn ChildControl>),
    ) -> Result<ActorRef<A>, SpawnError> {
        if self.is_shutting_down() {
            return Err(SpawnError::ShuttingDown);
        }
        let Props {
            source,
            name,
            mailbox,
            dispatcher,
            monitored,
            watcher,
            filters,
            grain,
        } = props;
        let dispatcher = match dispatcher {
            Some(name) => self
                .dispatcher(&name)
                .cloned()
                .ok_or(SpawnError::UnknownDispatcher(name))?,
            None => inherited
                .cloned()
                .unwrap_or_else(|| self.inner.default_dispatcher.clone()),
        };
        let id = self.next_id();
        let path: Arc<str> = match &name {
            Some(name) if name.is_empty() || name.contains('/') => {
                return Err(SpawnError::InvalidName(name.clone()));
            }
            Some(name) => child_path(parent_path, name),
            None => child_path(parent_path, format_args!("${}", id.0)),
        };
        let mailbox_config = mailbox.unwrap_or(self.inner.config.default_mailbox);
        let monitoring = &self.inner.config.monitoring;
        let monitored =
            monitored.unwrap_or_else(|| dispatcher.is_monitored() || monitoring.all_actors);
        let counters = if monitored {
            ActorCounters::make(
                id,
                path.clone(),
                dispatcher.stats().clone(),
                monitoring.sample_every,
                monitoring.blocking_threshold,
            )
        } else {
            None
        };
        let slot = counters.clone().map(Slot::on).unwrap_or_default();
        let (mailbox, receiver) = Mailbox::<A>::new(
            id,
            path.clone(),
            mailbox_config,
            slot,
            self.inner.entry.clone(),
        );
        let actor = ActorRef::local(mailbox.clone(), self.inner.dead_letters.clone());
        if name.is_some() {
            let mut registry = self.inner.registry.lock();
            if registry.contains_key(&path) {
                return Err(SpawnError::NameTaken(path.to_string()));
            }
            registry.insert(
                path.clone(),
                Registered {
                    actor: Box::new(actor.clone()),
                    type_name: std::any::type_name::<A>(),
                },
            );
        }
        let mut ctx = Context::new(actor.clone(), self.clone(), dispatcher.clone(), parent);
        let filters = filter::joined(self.filters().as_ref(), filters);
        // An actor with filters runs in their scope: its sends pass them (and are not where a
        // request enters) whichever path its messages take.
        let scope = filters.clone().map(|filters| Scope {
            context: None,
            filters: Some(filters),
        });
        ctx.set_filters(filters, grain);
        let cell = Cell {
            source,
            ctx,
            receiver,
            mailbox: mailbox.clone(),
            registered: name.is_some(),
        };
        if let Some(watcher) = watcher {
            self.inner.spawn_watchers.lock().insert(id, watcher);
            self.inner.spawn_watched.fetch_add(1, Ordering::SeqCst);
        }
        if counters.is_some() {
            self.inner
                .monitor
                .add_actor(id, mailbox.clone() as Arc<dyn Probe>);
        }
        // The parent learns of the child before the child can run, fail or stop.
        adopt(id, mailbox as Arc<dyn ChildControl>);
        match (&counters, scope) {
            (Some(counters), None) => {
                dispatcher.spawn_actor(Timed::new(runner::run(cell), counters));
            }
            (None, None) => dispatcher.spawn_actor(runner::run(cell)),
            (Some(counters), Some(scope)) => {
                dispatcher.spawn_actor(scope.run(Timed::new(runner::run(cell), counters)));
            }
            (None, Some(scope)) => dispatcher.spawn_actor(scope.run(runner::run(cell))),
        }
        Ok(actor)
    }

    /// Adds a call filter for every actor spawned from now on (after the filters added before
    /// it) and for the sends made inside [`in_context`](Self::in_context). Add the system's
    /// filters before spawning: an actor's filters are fixed when it starts.
    ///
    /// # Example
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::time::Duration;
    /// use rally::{Actor, ActorResult, ActorSystem, CallFilter, Context, Handler, Incoming, Kept, Message, Outcome};
    ///
    /// #[derive(Default)]
    /// struct Count(AtomicUsize);
    /// impl CallFilter for Count {
    ///     fn after(&self, _: &Incoming<'_>, outcome: Outcome<'_>, _: Option<Kept>) {
    ///         if outcome == Outcome::Ok { self.0.fetch_add(1, Ordering::Relaxed); }
    ///     }
    /// }
    /// struct Ping;
    /// impl Message for Ping { type Reply = (); }
    /// struct Echo;
    /// impl Actor for Echo {}
    /// impl Handler<Ping> for Echo {
    ///     async fn handle(&mut self, _: Ping, _: &mut Context<Self>) -> ActorResult<()> { Ok(()) }
    /// }
    /// # #[tokio::main] async fn main() {
    /// let system = ActorSystem::new("doc");
    /// let count = Arc::new(Count::default());
    /// system.add_call_filter(count.clone());
    /// let echo = system.spawn(Echo).unwrap();
    /// echo.ask(Ping, Duration::from_secs(1)).await.unwrap();
    /// assert_eq!(count.0.load(Ordering::Relaxed), 1);
    /// # }
    /// ```
    pub fn add_call_filter(&self, filter: Arc<dyn CallFilter>) {
        self.inner.entry.add(filter);
    }

    /// The system's call filters as send paths pass them (see [`EntryFilters`]): for
    /// transports and virtual actors that send on their own path.
    ///
    /// # Example
    ///
    /// See [`EntryFilters::context_for_send`].
    pub fn entry_filters(&self) -> &EntryFilters {
        &self.inner.entry
    }

    /// The system's call filters, if any.
    fn filters(&self) -> Option<Chain> {
        self.inner.entry.chain()
    }

    /// Runs `future` on behalf of a request: every message it sends (to local, remote and
    /// virtual actors) carries `context`, and passes the system's call filters' `on_send`.
    /// Handlers see the context with [`Context::request_context`](crate::Context::request_context)
    /// and carry it on in their own sends.
    ///
    /// # Cancel safety
    ///
    /// Dropping the returned future drops `future`; nothing else is left behind.
    ///
    /// # Example
    ///
    /// See [`Context::request_context`](crate::Context::request_context).
    pub async fn in_context<F: Future>(&self, context: RequestContext, future: F) -> F::Output {
        Scope {
            context: Some(context),
            filters: self.filters(),
        }
        .run(future)
        .await
    }

    /// The watcher fixed at `actor`'s spawn, taken as it stops.
    pub(crate) fn take_spawn_watcher(&self, actor: ActorId) -> Option<Arc<dyn TerminationSink>> {
        if self.inner.spawn_watched.load(Ordering::SeqCst) == 0 {
            return None;
        }
        let watcher = self.inner.spawn_watchers.lock().remove(&actor)?;
        self.inner.spawn_watched.fetch_sub(1, Ordering::SeqCst);
        Some(watcher)
    }

    pub(crate) fn unregister(&self, path: &Arc<str>) {
        let mut registry = self.inner.registry.lock();
        registry.remove(path);
    }
}

/// `parent/name` in one allocation (a `format!` then `into` would copy it into a second).
fn child_path(parent: &str, name: impl std::fmt::Display) -> Arc<str> {
    use std::fmt::Write as _;
    thread_local! {
        static BUFFER: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
    }
    BUFFER.with_borrow_mut(|buffer| {
        buffer.clear();
        let _ = write!(buffer, "{parent}/{name}");
        Arc::from(buffer.as_str())
    })
}

/// How a parent hears from a child. The child passes itself: the same value the parent adopted.
pub(crate) trait ParentControl: Send + Sync + 'static {
    fn child_failed(&self, child: &dyn ChildControl, failure: Failure);
    fn child_stopped(&self, child: &dyn ChildControl);
    /// The parent actor's mailbox, to make a typed ref to it (`None` for the guardian).
    fn as_any(self: Arc<Self>) -> Option<Arc<dyn Any + Send + Sync>>;
}

/// How a parent commands a child.
pub(crate) trait ChildControl: Send + Sync + 'static {
    /// The child's id.
    fn id(&self) -> ActorId;
    fn stop(&self);
    fn supervise(&self, decision: Decision);
}

impl<A: Actor> ParentControl for Mailbox<A> {
    fn child_failed(&self, child: &dyn ChildControl, failure: Failure) {
        // A stopped parent already stopped its children.
        let child = child.id();
        let _ = self.system(SystemMsg::ChildFailed { child, failure });
    }

    fn child_stopped(&self, child: &dyn ChildControl) {
        let _ = self.system(SystemMsg::ChildStopped(child.id()));
    }

    fn as_any(self: Arc<Self>) -> Option<Arc<dyn Any + Send + Sync>> {
        Some(self)
    }
}

impl<A: Actor> ChildControl for Mailbox<A> {
    fn id(&self) -> ActorId {
        self.id
    }

    fn stop(&self) {
        let _ = self.system(SystemMsg::Stop);
    }

    fn supervise(&self, decision: Decision) {
        let _ = self.system(SystemMsg::Supervise(decision));
    }
}

/// The parent of top-level actors: supervises them with the system's strategy and counts them
/// for shutdown.
struct Guardian {
    strategy: crate::SupervisorStrategy,
    children: Mutex<Children>,
    live: AtomicUsize,
    all_stopped: Notify,
    shutting_down: AtomicBool,
}

/// The guardian's top-level actors. Restart records live apart, only for the actors that
/// failed: with a million idle actors the table's buckets are most of what the guardian holds.
#[derive(Default)]
struct Children {
    controls: Controls,
    records: HashMap<ActorId, RestartRecord>,
}

/// Top-level actors' controls, found by where each child lives (its address) rather than by its
/// id. A bucket is the control alone (16 bytes), not an id beside it (24): a hash table has 1.14
/// to 2.29 buckets per entry, so this is 19 to 38 bytes per actor rather than 29 to 57. The key
/// is in the bucket itself, so growing the table never reads a child's memory (keyed by the id
/// read through the control, a rehash touched every child: 3.5-7.6% of the spawn loop).
#[derive(Default)]
struct Controls {
    table: HashTable<Arc<dyn ChildControl>>,
    hasher: RandomState,
}

/// A child's address: the same for the `Arc<dyn ChildControl>` the guardian keeps and the
/// `&dyn ChildControl` the child reports with, and unique while the guardian holds the child.
fn address(child: &dyn ChildControl) -> usize {
    std::ptr::from_ref(child).cast::<()>() as usize
}

impl Controls {
    fn insert(&mut self, control: Arc<dyn ChildControl>) {
        let Self { table, hasher } = self;
        let hash = hasher.hash_one(address(&*control));
        table.insert_unique(hash, control, |c| hasher.hash_one(address(&**c)));
    }

    fn get(&self, child: &dyn ChildControl) -> Option<&Arc<dyn ChildControl>> {
        let key = address(child);
        self.table
            .find(self.hasher.hash_one(key), |c| address(&**c) == key)
    }

    fn remove(&mut self, child: &dyn ChildControl) -> Option<Arc<dyn ChildControl>> {
        let key = address(child);
        let found = self
            .table
            .find_entry(self.hasher.hash_one(key), |c| address(&**c) == key);
        found.ok().map(|entry| entry.remove().0)
    }

    fn iter(&self) -> impl Iterator<Item = &Arc<dyn ChildControl>> {
        self.table.iter()
    }
}

impl Guardian {
    fn adopt(&self, control: Arc<dyn ChildControl>) {
        let mut children = self.children.lock();
        children.controls.insert(control);
        self.live.fetch_add(1, Ordering::SeqCst);
    }
}

impl ParentControl for Guardian {
    fn child_failed(&self, child: &dyn ChildControl, failure: Failure) {
        let mut children = self.children.lock();
        let children = &mut *children;
        if let Some(control) = children.controls.get(child) {
            let child = child.id();
            let record = children.records.entry(child).or_default();
            let decision = match self.strategy.decide(&failure, record, Instant::now()) {
                // Nobody above the guardian: escalating means stopping.
                Decision::Escalate => Decision::Stop,
                other => other,
            };
            if failure.panicked {
                // The actor logged the panic itself, with its path: once is enough.
                tracing::debug!(actor = %child, %failure, ?decision, "top-level actor failed");
            } else {
                tracing::warn!(actor = %child, %failure, ?decision, "top-level actor failed");
            }
            control.supervise(decision);
        }
    }

    fn child_stopped(&self, child: &dyn ChildControl) {
        let mut children = self.children.lock();
        children.records.remove(&child.id());
        if children.controls.remove(child).is_some()
            && self.live.fetch_sub(1, Ordering::SeqCst) == 1
        {
            self.all_stopped.notify_waiters();
        }
    }

    fn as_any(self: Arc<Self>) -> Option<Arc<dyn Any + Send + Sync>> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Child(ActorId);

    impl ChildControl for Child {
        fn id(&self) -> ActorId {
            self.0
        }
        fn stop(&self) {}
        fn supervise(&self, _: Decision) {}
    }

    /// The guardian's table holds controls alone (16 bytes a bucket) and finds each child by
    /// the child itself: another child with the same id is not it.
    #[test]
    fn the_guardian_finds_and_forgets_its_children_by_address() {
        let mut controls = Controls::default();
        let children: Vec<Arc<dyn ChildControl>> = (0..1_000)
            .map(|id| Arc::new(Child(ActorId(id))) as Arc<dyn ChildControl>)
            .collect();
        for child in &children {
            controls.insert(child.clone());
        }
        let seventh = &*children[7];
        assert_eq!(controls.get(seventh).map(|c| c.id()), Some(ActorId(7)));
        assert!(controls.get(&Child(ActorId(7))).is_none());
        assert!(controls.remove(seventh).is_some());
        assert!(controls.get(seventh).is_none());
        assert!(controls.remove(seventh).is_none());
        assert_eq!(controls.iter().count(), 999);
        assert!(
            children
                .iter()
                .filter(|c| c.id() != ActorId(7))
                .all(|c| controls.get(&**c).is_some())
        );
        assert_eq!(std::mem::size_of::<Arc<dyn ChildControl>>(), 16);
    }
}
