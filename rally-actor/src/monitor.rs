//! Monitoring: cheap counters per actor and per dispatcher, and snapshots of them.
//!
//! An actor is monitored when its props, its dispatcher or the system's
//! [`MonitoringConfig::all_actors`] say so. A monitored actor counts messages arrived and
//! completed, its queue length (now and the most per period), the time it is busy with messages
//! (service time and utilization), the time it holds a thread in one go (blocking), and, for one
//! message in [`MonitoringConfig::sample_every`], the time the message waited in the mailbox.
//! Unmonitored actors pay one predictable branch per batch. Built without the `monitoring`
//! feature, the counters are a zero-sized no-op twin and snapshots are empty.
//!
//! Snapshots are cumulative; an observer (such as `rally-metrics`) turns two of them into rates
//! and utilizations for a period.
//!
//! Other parts of Rally that count things of their own (the cluster's membership, its virtual
//! actors) register a [`FigureSource`] with the system's [`Monitor`]; its [`Figure`]s travel in
//! every [`Snapshot`], so an observer exports them without depending on the crate that counts.

#[cfg(feature = "monitoring")]
mod counters;
#[cfg(not(feature = "monitoring"))]
#[path = "monitor/noop.rs"]
mod counters;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::ActorId;
use crate::sync::Mutex;
pub(crate) use counters::{ActorCounters, Slot, Timed};

/// One message in this many has its waiting time measured, by default: a clock read costs
/// about as much as a small message, so measuring every one would cost more than the 10%
/// budget; 1 in 16 still gives hundreds of samples per second for any busy actor.
pub const DEFAULT_SAMPLE_EVERY: u32 = 16;

/// Holding a thread longer than this in one go counts as blocking it, by default: a
/// well-behaved async handler returns to the executor within microseconds; 1 ms is far above
/// that and below what a blocking call (disk, database, `sleep`) takes.
pub const DEFAULT_BLOCKING_THRESHOLD: Duration = Duration::from_millis(1);

/// Monitoring settings of a system.
///
/// # Example
///
/// ```
/// use rally::MonitoringConfig;
///
/// let mut all = MonitoringConfig::default();
/// all.all_actors = true;
/// assert_eq!(all.sample_every, 16);
/// ```
///
/// Non-exhaustive: start from `default()` and set fields, so a new setting is not a breaking
/// change.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct MonitoringConfig {
    /// Monitor every actor (default `false`: only actors or dispatchers that opt in).
    pub all_actors: bool,
    /// Measure the waiting time of one message in this many, rounded up to a power of two
    /// (default 16; 1 measures all).
    pub sample_every: u32,
    /// Wrap every handled message of a monitored actor in a `tracing` span (default `false`).
    pub tracing_spans: bool,
    /// A single poll longer than this counts as blocking the thread (default 1 ms).
    pub blocking_threshold: Duration,
}

impl Default for MonitoringConfig {
    fn default() -> Self {
        Self {
            all_actors: false,
            sample_every: DEFAULT_SAMPLE_EVERY,
            tracing_spans: false,
            blocking_threshold: DEFAULT_BLOCKING_THRESHOLD,
        }
    }
}

/// Cumulative figures of one monitored actor.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ActorSnapshot {
    /// The actor's id.
    pub id: ActorId,
    /// The actor's path.
    pub path: Arc<str>,
    /// The dispatcher it runs on.
    pub dispatcher: Arc<str>,
    /// User messages accepted into the mailbox.
    pub arrived: u64,
    /// User messages taken from the mailbox and handled.
    pub completed: u64,
    /// User messages waiting now (not yet taken, or taken into a batch and not yet handled).
    pub queued: usize,
    /// Messages being handled now (0 or 1).
    pub in_progress: u64,
    /// The longest the queue has been since the last period began.
    pub max_queued: usize,
    /// Time spent handling messages (from taking the first of a run until the actor waits or
    /// yields): service time is `busy / completed`.
    pub busy: Duration,
    /// Time the actor's task held a thread.
    pub on_thread: Duration,
    /// Time the actor's task held a thread in polls longer than the blocking threshold.
    pub blocking: Duration,
    /// The longest single poll since the last period began.
    pub max_poll: Duration,
    /// Summed mailbox waiting time of the sampled messages.
    pub waited: Duration,
    /// How many messages were sampled for `waited`.
    pub wait_samples: u64,
}

/// Figures of one dispatcher. Thread counts are exact; busy time and runnable actors cover the
/// monitored actors on it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct DispatcherSnapshot {
    /// The dispatcher's name.
    pub name: Arc<str>,
    /// Its kind, e.g. `shared` or `blocking`.
    pub kind: &'static str,
    /// Threads actors run on now.
    pub threads: usize,
    /// Threads running an actor now.
    pub busy_threads: usize,
    /// Monitored actors that are runnable and wait for a thread.
    pub runnable_waiting: usize,
    /// Time monitored actors held its threads, summed.
    pub busy: Duration,
    /// Throughput setting.
    pub throughput: usize,
    /// Whether blocking handlers are expected there (pinned, blocking pool).
    pub tolerates_blocking: bool,
}

/// Everything monitored, at one instant.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Snapshot {
    /// When it was taken.
    pub at: Instant,
    /// Whether the `monitoring` feature was compiled in (without it, `actors` is empty).
    pub compiled_in: bool,
    /// Monitored actors, by id.
    pub actors: Vec<ActorSnapshot>,
    /// Every dispatcher of the system.
    pub dispatchers: Vec<DispatcherSnapshot>,
    /// The figures of every registered [`FigureSource`], in the order of registration.
    pub figures: Vec<Figure>,
}

/// Whether a [`Figure`] only grows (a count since start, whose rate an observer computes) or
/// goes up and down (a level now).
///
/// # Example
///
/// ```
/// use rally::monitor::{Figure, FigureKind};
///
/// assert_eq!(Figure::counter("jobs_total", "Jobs done.", 3).kind, FigureKind::Counter);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FigureKind {
    /// Cumulative since its source started; never decreases.
    Counter,
    /// A level at the instant of the snapshot.
    Gauge,
}

/// One named figure of a [`FigureSource`]: a Prometheus-style name (`snake_case`, counters
/// ending in `_total`), a help line, labels, and a value.
///
/// # Example
///
/// ```
/// use rally::monitor::Figure;
///
/// let figure = Figure::gauge("queue_length", "Jobs waiting now.", 7.0).label("queue", "mail");
/// assert_eq!(figure.labels, [("queue", "mail".to_owned())]);
/// assert_eq!(figure.value, 7.0);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Figure {
    /// The metric name, the same for every figure of one family.
    pub name: &'static str,
    /// What it measures, one sentence.
    pub help: &'static str,
    /// Counter or gauge.
    pub kind: FigureKind,
    /// Label names and values that tell the figures of one family apart.
    pub labels: Vec<(&'static str, String)>,
    /// The value.
    pub value: f64,
}

impl Figure {
    /// A counter: `value` counted since the source started.
    pub fn counter(name: &'static str, help: &'static str, value: u64) -> Self {
        Self {
            name,
            help,
            kind: FigureKind::Counter,
            labels: Vec::new(),
            // Exact up to 2^53 events, far beyond any counter's life.
            value: value as f64,
        }
    }

    /// A gauge: the level `value` now.
    pub fn gauge(name: &'static str, help: &'static str, value: f64) -> Self {
        Self {
            name,
            help,
            kind: FigureKind::Gauge,
            labels: Vec::new(),
            value,
        }
    }

    /// Adds the label `name="value"`.
    #[must_use]
    pub fn label(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.labels.push((name, value.into()));
        self
    }

    /// The value of label `name`, if it has one.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::monitor::Figure;
    ///
    /// let figure = Figure::counter("jobs_total", "Jobs done.", 1).label("queue", "mail");
    /// assert_eq!(figure.label_value("queue"), Some("mail"));
    /// assert_eq!(figure.label_value("host"), None);
    /// ```
    pub fn label_value(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Something that counts, read at every snapshot: register it with
/// [`Monitor::add_source`]. It should only read counters (atomics, or a lock held for a
/// copy): snapshots are taken while the system runs.
///
/// # Example
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use rally::monitor::{Figure, FigureSource};
///
/// struct Jobs(AtomicU64);
/// impl FigureSource for Jobs {
///     fn figures(&self, out: &mut Vec<Figure>) {
///         out.push(Figure::counter("jobs_total", "Jobs done.", self.0.load(Ordering::Relaxed)));
///     }
/// }
///
/// # #[tokio::main] async fn main() {
/// let system = rally::ActorSystem::new("doc");
/// let jobs = Arc::new(Jobs(AtomicU64::new(0)));
/// let source: Arc<dyn FigureSource> = jobs.clone();
/// system.monitor().add_source(Arc::downgrade(&source));
/// jobs.0.fetch_add(2, Ordering::Relaxed);
/// assert_eq!(system.monitor().snapshot().figures[0].value, 2.0);
/// drop((jobs, source));
/// assert!(system.monitor().snapshot().figures.is_empty());
/// # }
/// ```
pub trait FigureSource: Send + Sync + 'static {
    /// Appends the current figures to `out`.
    fn figures(&self, out: &mut Vec<Figure>);
}

/// Reads a monitored actor's figures (implemented by its mailbox).
pub(crate) trait Probe: Send + Sync + 'static {
    fn snapshot(&self, reset_period: bool) -> Option<ActorSnapshot>;
}

/// The system's registry of monitored actors.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() {
/// let system = rally::ActorSystem::new("doc");
/// let snapshot = system.monitor().snapshot();
/// assert!(snapshot.actors.is_empty());
/// assert_eq!(snapshot.dispatchers[0].name.as_ref(), "default");
/// # }
/// ```
#[derive(Default)]
pub struct Monitor {
    actors: Mutex<HashMap<ActorId, Arc<dyn Probe>>>,
    dispatchers: Mutex<Vec<crate::Dispatcher>>,
    sources: Mutex<Vec<Weak<dyn FigureSource>>>,
}

impl std::fmt::Debug for Monitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Monitor").finish_non_exhaustive()
    }
}

impl Monitor {
    /// The current cumulative figures.
    pub fn snapshot(&self) -> Snapshot {
        self.take(false)
    }

    /// The current figures, and a new period begins: the per-period maxima (`max_queued`,
    /// `max_poll`) start again from now. One observer should own the periods.
    pub fn snapshot_period(&self) -> Snapshot {
        self.take(true)
    }

    fn take(&self, reset: bool) -> Snapshot {
        let probes: Vec<Arc<dyn Probe>> = self.actors.lock().values().cloned().collect();
        let mut actors: Vec<ActorSnapshot> =
            probes.iter().filter_map(|p| p.snapshot(reset)).collect();
        actors.sort_by_key(|a| a.id);
        let dispatchers = self
            .dispatchers
            .lock()
            .iter()
            .map(dispatcher_snapshot)
            .collect();
        let sources: Vec<Arc<dyn FigureSource>> = {
            let mut sources = self.sources.lock();
            sources.retain(|s| s.strong_count() > 0);
            sources.iter().filter_map(Weak::upgrade).collect()
        };
        // Sources run outside the lock: one may register another.
        let mut figures = Vec::new();
        for source in &sources {
            source.figures(&mut figures);
        }
        Snapshot {
            at: Instant::now(),
            compiled_in: cfg!(feature = "monitoring"),
            actors,
            dispatchers,
            figures,
        }
    }

    /// Adds `source` to every snapshot from now on, until it is dropped (the monitor keeps
    /// only a weak reference, so the source's owner decides its life).
    ///
    /// # Example
    ///
    /// See [`FigureSource`].
    pub fn add_source(&self, source: Weak<dyn FigureSource>) {
        self.sources.lock().push(source);
    }

    pub(crate) fn add_dispatcher(&self, dispatcher: crate::Dispatcher) {
        self.dispatchers.lock().push(dispatcher);
    }

    pub(crate) fn add_actor(&self, id: ActorId, probe: Arc<dyn Probe>) {
        self.actors.lock().insert(id, probe);
    }

    pub(crate) fn remove_actor(&self, id: ActorId) {
        self.actors.lock().remove(&id);
    }
}

fn dispatcher_snapshot(d: &crate::Dispatcher) -> DispatcherSnapshot {
    let stats = d.stats();
    let threads = d.threads();
    let (busy_threads, runnable_waiting) = match d.pool_status() {
        Some(status) => (status.busy, status.queued),
        None => (
            stats.running.load(Ordering::Relaxed).min(threads),
            stats.runnable.load(Ordering::Relaxed),
        ),
    };
    DispatcherSnapshot {
        name: stats.name.clone(),
        kind: d.kind().label(),
        threads,
        busy_threads,
        runnable_waiting,
        busy: Duration::from_nanos(stats.busy_nanos.load(Ordering::Relaxed)),
        throughput: d.throughput(),
        tolerates_blocking: d.kind().tolerates_blocking(),
    }
}

/// Counters a dispatcher shares among its monitored actors.
pub(crate) struct DispatcherStats {
    pub(crate) name: Arc<str>,
    /// Monitored actors handling messages now.
    pub(crate) running: AtomicUsize,
    /// Monitored actors woken or yielded and not yet running.
    pub(crate) runnable: AtomicUsize,
    /// Nanoseconds monitored actors held a thread.
    pub(crate) busy_nanos: AtomicU64,
    /// Live threads of a pinned dispatcher.
    pinned: AtomicUsize,
}

impl DispatcherStats {
    pub(crate) fn new(name: String) -> Self {
        Self {
            name: name.into(),
            running: AtomicUsize::new(0),
            runnable: AtomicUsize::new(0),
            busy_nanos: AtomicU64::new(0),
            pinned: AtomicUsize::new(0),
        }
    }

    pub(crate) fn pinned_started(&self) {
        self.pinned.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn pinned_stopped(&self) {
        self.pinned.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn pinned_threads(&self) -> usize {
        self.pinned.load(Ordering::Relaxed)
    }
}
