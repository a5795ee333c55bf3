//! Dispatchers: where actors run, and how long one actor keeps its thread.
//!
//! A dispatcher is a named executor with its own threads. Five kinds exist
//! ([`DispatcherKind`]): a shared pool (a tokio multi-thread runtime), affinity (one thread per
//! core, each actor staying on one of them), pinned (one OS thread per actor), a blocking pool
//! that grows and shrinks (for actors whose handlers block), and a calling-thread mode for
//! deterministic tests. A dispatcher can also run on a tokio runtime the
//! application already has ([`Dispatcher::on_runtime`]), which is what the default dispatcher
//! does unless configured otherwise.

mod affinity;
mod pool;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use tokio::runtime::{Handle, Runtime};

use crate::monitor::DispatcherStats;
use pool::Pool;
pub use pool::PoolStatus;

/// Messages an actor handles before it yields its thread, by default.
///
/// Akka's default is 5, tuned for JVM thread pools where a hand-off is cheap relative to a
/// message. Here a hand-off is a tokio task switch; 64 amortises it over a burst while staying
/// under tokio's own cooperative budget of 128 operations, so a busy actor still yields often.
pub const DEFAULT_THROUGHPUT: usize = 64;

/// Worker threads per core of a shared pool, by default.
///
/// Akka's fork-join default is 3 because JVM actors often block; Rally's handlers are async and
/// release their thread while they wait, so one thread per core keeps every core busy without
/// the context switches of oversubscription. Actors that block belong on a blocking pool.
pub const DEFAULT_PARALLELISM_FACTOR: f64 = 1.0;

/// The fewest threads a shared pool gets by default: 2, so one slow handler on a one-core
/// machine cannot stop every other actor of the pool.
pub const DEFAULT_PARALLELISM_MIN: usize = 2;

/// The most threads a shared pool gets by default (Akka's value): beyond 64 cores a single pool
/// spends more on stealing than it gains; split the work across dispatchers instead.
pub const DEFAULT_PARALLELISM_MAX: usize = 64;

/// Threads a blocking pool keeps even when idle, by default.
pub const DEFAULT_CORE_POOL_SIZE: usize = 1;

/// Threads a blocking pool may grow to, by default: enough for dozens of concurrent blocking
/// calls (file or database I/O) without letting a runaway actor create thousands of threads.
pub const DEFAULT_MAX_POOL_SIZE: usize = 64;

/// How long an idle thread above the core size lives, by default: Akka's 60 s, long enough that
/// a bursty load does not create and destroy threads on every burst.
pub const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(60);

/// Runnable actors a blocking pool queues before it adds a thread, by default: 0, so a new
/// thread starts as soon as every thread is busy (a blocked thread is not coming back soon).
pub const DEFAULT_QUEUE_SIZE: usize = 0;

/// What kind of executor a dispatcher is, with its sizing.
///
/// # Example
///
/// ```
/// use rally::DispatcherKind;
///
/// let shared = DispatcherKind::shared();
/// assert_eq!(shared.threads_for_cores(8), Some(8));
/// assert_eq!(DispatcherKind::Pinned.threads_for_cores(8), None);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum DispatcherKind {
    /// The tokio runtime current when the system starts (the default dispatcher's default).
    CurrentRuntime,
    /// Its own tokio multi-thread runtime of `cores × factor` threads, clamped to `min..=max`.
    Shared {
        /// Threads per core.
        parallelism_factor: f64,
        /// The fewest threads.
        parallelism_min: usize,
        /// The most threads.
        parallelism_max: usize,
    },
    /// `cores × factor` OS threads (clamped to `min..=max`), each running its own
    /// current-thread tokio runtime; an actor stays on the thread it was placed on for its
    /// life. An actor spawned by code on one of these threads (a parent's handler or hook) goes
    /// on that thread; others take the threads in turn. Messages between actors of one thread
    /// never wake another core, which work stealing does (a thread-per-core layout; Akka's
    /// affinity pool also keeps an actor on one thread, but places it by a hash of the actor).
    Affinity {
        /// Threads per core.
        parallelism_factor: f64,
        /// The fewest threads.
        parallelism_min: usize,
        /// The most threads.
        parallelism_max: usize,
    },
    /// One dedicated OS thread (running a current-thread tokio runtime) per actor.
    Pinned,
    /// A pool of OS threads that grows when every thread is busy and shrinks when idle; an
    /// actor on it may block its thread.
    Blocking {
        /// Threads kept even when idle.
        core_pool_size: usize,
        /// The most threads.
        max_pool_size: usize,
        /// How long a thread above the core size waits for work before it exits.
        keep_alive: Duration,
        /// Runnable actors queued before a thread is added.
        queue_size: usize,
    },
    /// No threads: actors run only when the test calls [`Dispatcher::run_until_idle`], on the
    /// calling thread, in the order they became runnable.
    CallingThread,
}

impl DispatcherKind {
    /// A shared pool with the default sizing.
    pub fn shared() -> Self {
        Self::Shared {
            parallelism_factor: DEFAULT_PARALLELISM_FACTOR,
            parallelism_min: DEFAULT_PARALLELISM_MIN,
            parallelism_max: DEFAULT_PARALLELISM_MAX,
        }
    }

    /// An affinity set with the default sizing (the shared pool's: one thread per core, at
    /// least 2).
    ///
    /// # Example
    ///
    /// ```
    /// use rally::DispatcherKind;
    ///
    /// assert_eq!(DispatcherKind::affinity().threads_for_cores(4), Some(4));
    /// assert_eq!(DispatcherKind::affinity().label(), "affinity");
    /// ```
    pub fn affinity() -> Self {
        Self::Affinity {
            parallelism_factor: DEFAULT_PARALLELISM_FACTOR,
            parallelism_min: DEFAULT_PARALLELISM_MIN,
            parallelism_max: DEFAULT_PARALLELISM_MAX,
        }
    }

    /// A blocking pool with the default sizing.
    pub fn blocking() -> Self {
        Self::Blocking {
            core_pool_size: DEFAULT_CORE_POOL_SIZE,
            max_pool_size: DEFAULT_MAX_POOL_SIZE,
            keep_alive: DEFAULT_KEEP_ALIVE,
            queue_size: DEFAULT_QUEUE_SIZE,
        }
    }

    /// The thread count of a shared pool or affinity set on a machine with `cores` cores
    /// (`None` for the other kinds, whose thread count changes at run time).
    pub fn threads_for_cores(&self, cores: usize) -> Option<usize> {
        match self {
            Self::Shared {
                parallelism_factor,
                parallelism_min,
                parallelism_max,
            }
            | Self::Affinity {
                parallelism_factor,
                parallelism_min,
                parallelism_max,
            } => {
                let wanted = (cores as f64 * parallelism_factor).ceil() as usize;
                Some(wanted.clamp(*parallelism_min, (*parallelism_max).max(*parallelism_min)))
            }
            _ => None,
        }
    }

    /// Whether handlers may block their thread on this kind without harming other actors.
    pub fn tolerates_blocking(&self) -> bool {
        matches!(self, Self::Pinned | Self::Blocking { .. })
    }

    /// A short name: `current-runtime`, `shared`, `affinity`, `pinned`, `blocking`,
    /// `calling-thread`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::CurrentRuntime => "current-runtime",
            Self::Shared { .. } => "shared",
            Self::Affinity { .. } => "affinity",
            Self::Pinned => "pinned",
            Self::Blocking { .. } => "blocking",
            Self::CallingThread => "calling-thread",
        }
    }
}

/// Why a dispatcher could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DispatcherError {
    /// `CurrentRuntime` was asked for outside a tokio runtime.
    #[error("dispatcher {name:?}: type \"current-runtime\" needs a running tokio runtime")]
    NoRuntime {
        /// The dispatcher's name.
        name: String,
    },
    /// The operating system refused the threads.
    #[error("dispatcher {name:?}: could not start its threads: {source}")]
    Threads {
        /// The dispatcher's name.
        name: String,
        /// The operating system's error.
        source: std::io::Error,
    },
}

/// A named executor for actors, with its scheduling settings. Cheap to clone.
///
/// # Example
///
/// ```
/// use rally::{Dispatcher, DispatcherKind};
///
/// let pinned = Dispatcher::start("io", DispatcherKind::Pinned, 1, None).unwrap();
/// assert_eq!(pinned.name(), "io");
/// assert_eq!(pinned.kind(), &DispatcherKind::Pinned);
/// ```
#[derive(Clone)]
pub struct Dispatcher {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    kind: DispatcherKind,
    throughput: usize,
    throughput_deadline: Option<Duration>,
    /// Timers and other helper tasks run here, whatever the kind.
    timers: Handle,
    executor: Executor,
    /// Whether actors spawned here are monitored unless their props say otherwise.
    monitored: bool,
    pub(crate) stats: Arc<DispatcherStats>,
    /// Keeps the runtime's timer wheel from going empty (multi-thread runtimes only).
    _anchor: Option<TimerAnchor>,
    /// Keeps a runtime the dispatcher created for its timers alive.
    _timer_runtime: Option<OwnedRuntime>,
}

/// How often the timer anchor of a multi-thread runtime fires: asks with a timeout at least
/// this long register their timer without waking the runtime's timer driver.
pub(crate) const TIMER_ANCHOR_PERIOD: Duration = Duration::from_secs(1);

/// A task that keeps one timer of a multi-thread runtime armed, [`TIMER_ANCHOR_PERIOD`] ahead.
///
/// tokio's timer driver, parked on one worker, is woken (an `eventfd` write: a system call,
/// often a context switch) by every timer registered earlier than the earliest it knew of when
/// it parked, and when the wheel was empty, by any timer. An `ask` registers its timeout and
/// usually drops it a few microseconds later, so the wheel was empty whenever the driver parked
/// and every ask on a multi-thread runtime cost that system call (777,000 writes for a million
/// asks). With the anchor's timer in the wheel, a timeout later than it registers silently.
/// One wake-up per period is the whole cost; the task ends when the dispatcher is dropped.
struct TimerAnchor(tokio::task::AbortHandle);

impl TimerAnchor {
    /// Starts the anchor on `runtime` when it is a multi-thread runtime (a current-thread one
    /// drives its timers on the thread that registers them).
    fn start(runtime: &Handle) -> Option<Self> {
        if runtime.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
            return None;
        }
        let task = runtime.spawn(async {
            loop {
                tokio::time::sleep(TIMER_ANCHOR_PERIOD).await;
            }
        });
        Some(Self(task.abort_handle()))
    }
}

impl Drop for TimerAnchor {
    fn drop(&mut self) {
        self.0.abort();
    }
}

enum Executor {
    Tokio(Handle),
    OwnedTokio(OwnedRuntime),
    Affinity(affinity::Threads),
    Pinned { next: AtomicUsize },
    Pool(Pool),
}

/// A tokio runtime the dispatcher owns; dropped without waiting, so a system dropped inside an
/// async context does not panic.
struct OwnedRuntime(Option<Runtime>);

impl Drop for OwnedRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("name", &self.inner.name)
            .field("kind", &self.inner.kind)
            .field("throughput", &self.inner.throughput)
            .field("throughput_deadline", &self.inner.throughput_deadline)
            .finish()
    }
}

impl Dispatcher {
    /// A dispatcher running on an existing tokio runtime.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main] async fn main() {
    /// let d = rally::Dispatcher::on_runtime("app", tokio::runtime::Handle::current(), 8, None);
    /// assert_eq!(d.throughput(), 8);
    /// # }
    /// ```
    pub fn on_runtime(
        name: impl Into<String>,
        handle: Handle,
        throughput: usize,
        throughput_deadline: Option<Duration>,
    ) -> Self {
        let name = name.into();
        Self::assemble(
            name,
            DispatcherKind::CurrentRuntime,
            throughput,
            throughput_deadline,
            handle.clone(),
            Executor::Tokio(handle),
            None,
        )
    }

    /// Starts a dispatcher of the given kind, with its own threads.
    ///
    /// # Errors
    ///
    /// [`DispatcherError::NoRuntime`] for `CurrentRuntime` outside a runtime,
    /// [`DispatcherError::Threads`] when the operating system refuses threads.
    pub fn start(
        name: impl Into<String>,
        kind: DispatcherKind,
        throughput: usize,
        throughput_deadline: Option<Duration>,
    ) -> Result<Self, DispatcherError> {
        let name = name.into();
        let threads_error = |source| DispatcherError::Threads {
            name: name.clone(),
            source,
        };
        // Timers of actors that do not run on tokio need a tokio runtime somewhere: the
        // caller's if there is one, else a small one of the dispatcher's own.
        let mut timer_runtime = None;
        let mut timers = || -> Result<Handle, DispatcherError> {
            if let Ok(handle) = Handle::try_current() {
                return Ok(handle);
            }
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name(format!("{name}-timers"))
                .enable_all()
                .build()
                .map_err(threads_error)?;
            let handle = runtime.handle().clone();
            timer_runtime = Some(OwnedRuntime(Some(runtime)));
            Ok(handle)
        };
        let (executor, timer_handle) = match &kind {
            DispatcherKind::CurrentRuntime => {
                let handle = Handle::try_current()
                    .map_err(|_| DispatcherError::NoRuntime { name: name.clone() })?;
                (Executor::Tokio(handle.clone()), handle)
            }
            DispatcherKind::Shared { .. } => {
                let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
                let threads = kind
                    .threads_for_cores(cores)
                    .expect("a shared kind always has a thread count");
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(threads)
                    .thread_name(name.clone())
                    .enable_all()
                    .build()
                    .map_err(threads_error)?;
                let handle = runtime.handle().clone();
                (Executor::OwnedTokio(OwnedRuntime(Some(runtime))), handle)
            }
            DispatcherKind::Affinity { .. } => {
                let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
                let count = kind
                    .threads_for_cores(cores)
                    .expect("an affinity kind always has a thread count");
                let threads = affinity::Threads::start(&name, count).map_err(threads_error)?;
                // Helper tasks go where the actor that starts them runs (see `spawn`); this
                // handle is for the callers of `handle()`.
                let handle = threads.handle(0).clone();
                (Executor::Affinity(threads), handle)
            }
            DispatcherKind::Pinned => (
                Executor::Pinned {
                    next: AtomicUsize::new(0),
                },
                timers()?,
            ),
            DispatcherKind::Blocking {
                core_pool_size,
                max_pool_size,
                keep_alive,
                queue_size,
            } => {
                let timers = timers()?;
                let pool = Pool::threaded(
                    &name,
                    *core_pool_size,
                    (*max_pool_size).max(1),
                    *keep_alive,
                    *queue_size,
                    timers.clone(),
                );
                (Executor::Pool(pool), timers)
            }
            DispatcherKind::CallingThread => {
                let timers = timers()?;
                (Executor::Pool(Pool::calling_thread(timers.clone())), timers)
            }
        };
        Ok(Self::assemble(
            name,
            kind,
            throughput,
            throughput_deadline,
            timer_handle,
            executor,
            timer_runtime,
        ))
    }

    fn assemble(
        name: String,
        kind: DispatcherKind,
        throughput: usize,
        throughput_deadline: Option<Duration>,
        timers: Handle,
        executor: Executor,
        timer_runtime: Option<OwnedRuntime>,
    ) -> Self {
        let stats = Arc::new(DispatcherStats::new(name.clone()));
        let anchor = match &executor {
            Executor::Tokio(_) | Executor::OwnedTokio(_) => TimerAnchor::start(&timers),
            Executor::Affinity(_) | Executor::Pinned { .. } | Executor::Pool(_) => None,
        };
        Self {
            inner: Arc::new(Inner {
                name,
                kind,
                throughput: throughput.max(1),
                throughput_deadline,
                timers,
                executor,
                monitored: false,
                stats,
                _anchor: anchor,
                _timer_runtime: timer_runtime,
            }),
        }
    }

    /// The same dispatcher with every actor spawned on it monitored unless its props say
    /// otherwise. Call before spawning actors on it.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::{Dispatcher, DispatcherKind};
    ///
    /// let d = Dispatcher::start("watched", DispatcherKind::Pinned, 1, None).unwrap();
    /// assert!(d.monitored(true).is_monitored());
    /// ```
    pub fn monitored(self, on: bool) -> Self {
        match Arc::try_unwrap(self.inner) {
            Ok(mut inner) => {
                inner.monitored = on;
                Self {
                    inner: Arc::new(inner),
                }
            }
            Err(inner) => {
                // Shared already: the flag cannot change for the existing clones.
                tracing::warn!(dispatcher = %inner.name, "monitored() on a shared dispatcher is ignored");
                Self { inner }
            }
        }
    }

    /// The dispatcher's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Its kind and sizing.
    pub fn kind(&self) -> &DispatcherKind {
        &self.inner.kind
    }

    /// Messages an actor handles before yielding its thread.
    pub fn throughput(&self) -> usize {
        self.inner.throughput
    }

    /// The longest an actor keeps its thread while messages remain, if bounded.
    pub fn throughput_deadline(&self) -> Option<Duration> {
        self.inner.throughput_deadline
    }

    /// Whether actors spawned here are monitored by default.
    pub fn is_monitored(&self) -> bool {
        self.inner.monitored
    }

    /// The tokio runtime the dispatcher's timers run on (for `CurrentRuntime` and shared pools
    /// also the actors themselves; for an affinity set, its first thread's runtime).
    pub fn handle(&self) -> &Handle {
        &self.inner.timers
    }

    /// Threads and queue of a blocking pool or calling-thread dispatcher (`None` for the other
    /// kinds).
    pub fn pool_status(&self) -> Option<PoolStatus> {
        match &self.inner.executor {
            Executor::Pool(pool) => Some(pool.status()),
            _ => None,
        }
    }

    /// The number of threads actors run on now.
    pub fn threads(&self) -> usize {
        match &self.inner.executor {
            Executor::Tokio(handle) => handle.metrics().num_workers(),
            Executor::OwnedTokio(runtime) => runtime
                .0
                .as_ref()
                .map_or(0, |r| r.handle().metrics().num_workers()),
            Executor::Affinity(threads) => threads.len(),
            Executor::Pinned { .. } => self.inner.stats.pinned_threads(),
            Executor::Pool(pool) => pool.status().threads,
        }
    }

    /// Runs every runnable actor of a calling-thread dispatcher on this thread, in the order
    /// they became runnable, until none is; returns how many times an actor ran. Other kinds
    /// return 0 at once.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::{Dispatcher, DispatcherKind};
    ///
    /// let d = Dispatcher::start("test", DispatcherKind::CallingThread, 1, None).unwrap();
    /// assert_eq!(d.run_until_idle(), 0);
    /// ```
    pub fn run_until_idle(&self) -> usize {
        match &self.inner.executor {
            Executor::Pool(pool) => pool.run_until_idle(),
            _ => 0,
        }
    }

    /// Spawns a helper task (a timer) on the dispatcher's tokio runtime; on an affinity
    /// dispatcher, on the thread of the actor that starts it.
    pub(crate) fn spawn<F>(&self, future: F) -> tokio::task::AbortHandle
    where
        F: Future<Output = ()> + Send + 'static,
    {
        match &self.inner.executor {
            Executor::Affinity(threads) => threads.spawn(future).abort_handle(),
            _ => self.inner.timers.spawn(future).abort_handle(),
        }
    }

    /// Spawns an actor's task on the dispatcher's threads. Each poll of it is one run of the
    /// actor, whose delivery holds end with the poll (see [`crate::hold`]).
    pub(crate) fn spawn_actor<F>(&self, future: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let future = crate::hold::Runs::new(future);
        match &self.inner.executor {
            Executor::Tokio(handle) => {
                handle.spawn(future);
            }
            Executor::OwnedTokio(runtime) => {
                if let Some(runtime) = &runtime.0 {
                    runtime.spawn(future);
                }
            }
            Executor::Affinity(threads) => {
                threads.spawn(future);
            }
            Executor::Pinned { next } => {
                let n = next.fetch_add(1, Ordering::Relaxed);
                let stats = self.inner.stats.clone();
                let name = format!("{}-{n}", self.inner.name);
                stats.pinned_started();
                let started = std::thread::Builder::new().name(name).spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build();
                    match runtime {
                        Ok(runtime) => runtime.block_on(future),
                        Err(error) => tracing::error!(%error, "a pinned actor's runtime failed"),
                    }
                    stats.pinned_stopped();
                });
                if let Err(error) = started {
                    self.inner.stats.pinned_stopped();
                    tracing::error!(dispatcher = %self.inner.name, %error, "no thread for a pinned actor");
                }
            }
            Executor::Pool(pool) => pool.spawn(future),
        }
    }

    /// Gives the thread back, in the way the executor expects.
    pub(crate) async fn yield_now(&self) {
        match &self.inner.executor {
            Executor::Tokio(_)
            | Executor::OwnedTokio(_)
            | Executor::Affinity(_)
            | Executor::Pinned { .. } => {
                tokio::task::yield_now().await;
            }
            // Not a tokio worker: tokio's yield would defer the wake-up to a scheduler that is
            // not running this task. Wake at once; the pool queues the task behind the others.
            Executor::Pool(_) => YieldOnce(false).await,
        }
    }

    pub(crate) fn stats(&self) -> &Arc<DispatcherStats> {
        &self.inner.stats
    }
}

/// Returns `Pending` once after waking its own task.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_pool_size_is_clamped() {
        let kind = DispatcherKind::Shared {
            parallelism_factor: 3.0,
            parallelism_min: 8,
            parallelism_max: 64,
        };
        assert_eq!(kind.threads_for_cores(1), Some(8));
        assert_eq!(kind.threads_for_cores(4), Some(12));
        assert_eq!(kind.threads_for_cores(100), Some(64));
    }

    #[test]
    fn shared_dispatcher_runs_outside_any_runtime_and_drops_cleanly() {
        let d = Dispatcher::start("s", DispatcherKind::shared(), 4, None).unwrap();
        assert!(d.threads() >= DEFAULT_PARALLELISM_MIN);
        let (tx, rx) = std::sync::mpsc::channel();
        d.spawn_actor(async move {
            tx.send(std::thread::current().name().map(str::to_owned))
                .unwrap();
        });
        assert_eq!(rx.recv().unwrap().as_deref(), Some("s"));
    }

    /// The anchor runs on multi-thread runtimes only, and ends with the dispatcher.
    #[test]
    fn a_multi_thread_runtime_gets_a_timer_anchor_that_ends_with_the_dispatcher() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let tasks = || runtime.metrics().num_alive_tasks();
        let _inside = runtime.enter();
        let d = Dispatcher::start("d", DispatcherKind::CurrentRuntime, 4, None).unwrap();
        assert_eq!(tasks(), 1, "the anchor is a task of the runtime");
        assert!(d.inner._anchor.is_some());
        drop(d);
        runtime.block_on(async {
            while runtime.metrics().num_alive_tasks() > 0 {
                tokio::task::yield_now().await;
            }
        });
        assert_eq!(tasks(), 0);
    }

    #[tokio::test]
    async fn a_current_thread_runtime_gets_no_timer_anchor() {
        let d = Dispatcher::start("d", DispatcherKind::CurrentRuntime, 4, None).unwrap();
        assert!(d.inner._anchor.is_none());
    }

    #[tokio::test]
    async fn dropping_an_owned_runtime_inside_async_code_does_not_panic() {
        let d = Dispatcher::start("s", DispatcherKind::shared(), 4, None).unwrap();
        drop(d);
    }
}
