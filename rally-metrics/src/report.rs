//! Figures per period, and the diagnosis.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use rally_actor::ActorSystem;
use rally_actor::monitor::{ActorSnapshot, DispatcherSnapshot, Figure, FigureKind, Snapshot};
use rally_actor::sync::Mutex;
use serde::{Deserialize, Serialize};

/// Utilization at or above this, with a growing queue, is a saturated actor (the chapter's
/// "≳ 80%": beyond it, queueing delay grows steeply).
const SATURATED: f64 = 0.8;

/// A dispatcher this busy has no free thread to speak of.
const NO_FREE_THREAD: f64 = 0.9;

/// An actor whose time on a thread is at least this share in polls longer than the blocking
/// threshold is blocking, not computing in small steps.
const MOSTLY_BLOCKING: f64 = 0.5;

/// The verdict on one actor for one period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord, Hash)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Verdict {
    /// Nothing to fix.
    Healthy,
    /// The queue grows with low utilization while its dispatcher has no free thread.
    StarvedForThreads,
    /// It holds its threads in long polls, on a dispatcher not meant for that, while others wait.
    BlockingItsDispatcher,
    /// The queue grows while the actor is busy nearly all the time.
    Saturated,
}

impl Verdict {
    /// `healthy`, `saturated`, `starved for threads`, `blocking its dispatcher`.
    pub fn words(self) -> &'static str {
        match self {
            Self::Healthy => "healthy",
            Self::Saturated => "saturated",
            Self::StarvedForThreads => "starved for threads",
            Self::BlockingItsDispatcher => "blocking its dispatcher",
        }
    }
}

/// A verdict with the reasoning and the fix, in words.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    /// What is wrong, if anything.
    pub verdict: Verdict,
    /// One sentence: the figures behind the verdict and the fix they point to.
    pub text: String,
}

/// One actor's figures over one period.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActorPeriod {
    /// The actor's path.
    pub path: String,
    /// Its dispatcher.
    pub dispatcher: String,
    /// Messages arrived per second.
    pub arrival_rate: f64,
    /// Messages completed per second.
    pub throughput: f64,
    /// Queue length at the end of the period.
    pub queue: usize,
    /// The longest queue during the period.
    pub max_queue: usize,
    /// Share of the period spent handling messages (0..1).
    pub utilization: f64,
    /// Mean handling time per message, in milliseconds.
    pub service_ms: f64,
    /// Mean time a message waited in the mailbox, in milliseconds (sampled; Little's law when
    /// no sample landed).
    pub waiting_ms: f64,
    /// Share of its time on a thread spent in polls longer than the blocking threshold.
    pub blocking_share: f64,
    /// What the figures say.
    pub diagnosis: Diagnosis,
}

/// One dispatcher's figures over one period.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DispatcherPeriod {
    /// Its name.
    pub name: String,
    /// Its kind.
    pub kind: String,
    /// Threads now.
    pub threads: usize,
    /// Threads running an actor now.
    pub busy_threads: usize,
    /// Share of its threads' time that monitored actors held them (0..1).
    pub utilization: f64,
    /// Runnable actors waiting for a thread now.
    pub runnable_waiting: usize,
}

/// One figure of a registered source (the cluster's membership, its virtual actors: see
/// `rally::monitor::FigureSource`) at the end of a period, with its rate over the period if
/// it is a counter.
///
/// # Example
///
/// ```
/// use rally::metrics::FigurePeriod;
///
/// fn line(figure: &FigurePeriod) -> String {
///     match figure.rate {
///         Some(rate) => format!("{} {:.1}/s", figure.name, rate),
///         None => format!("{} {}", figure.name, figure.value),
///     }
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FigurePeriod {
    /// The metric name, e.g. `rally_grain_activations_total`.
    pub name: String,
    /// Its labels, e.g. `kind` → `cart`.
    pub labels: BTreeMap<String, String>,
    /// The value at the end of the period (cumulative for a counter).
    pub value: f64,
    /// For a counter, its increase per second over the period; `None` for a gauge.
    pub rate: Option<f64>,
}

impl FigurePeriod {
    /// The value of label `name`, if the figure has one.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::metrics::FigurePeriod;
    ///
    /// fn kind(figure: &FigurePeriod) -> &str {
    ///     figure.label("kind").unwrap_or("?")
    /// }
    /// ```
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels.get(name).map(String::as_str)
    }
}

/// Everything over one period, actors sorted worst first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct PeriodReport {
    /// The period's length in seconds.
    pub seconds: f64,
    /// Actors, worst verdict first, then by queue length.
    pub actors: Vec<ActorPeriod>,
    /// Dispatchers, busiest first.
    pub dispatchers: Vec<DispatcherPeriod>,
    /// The figures of registered sources, in their order (absent from a report of an older
    /// endpoint: empty).
    #[serde(default)]
    pub figures: Vec<FigurePeriod>,
}

impl PeriodReport {
    /// The figures named `name` whose labels include every pair of `labels`.
    ///
    /// # Example
    ///
    /// ```
    /// let report = rally::metrics::PeriodReport::default();
    /// assert_eq!(report.figures_named("rally_grain_active", &[("kind", "cart")]).count(), 0);
    /// ```
    pub fn figures_named<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a FigurePeriod> + 'a {
        self.figures
            .iter()
            .filter(move |f| f.name == name && labels.iter().all(|(k, v)| f.label(k) == Some(*v)))
    }

    /// The figures of the actor at `path`.
    pub fn actor(&self, path: &str) -> Option<&ActorPeriod> {
        self.actors.iter().find(|a| a.path == path)
    }

    /// The worst verdict of the period, as `"<path>: <diagnosis>"` lines.
    pub fn diagnosis_lines(&self) -> Vec<String> {
        self.actors
            .iter()
            .map(|a| format!("{}: {}", a.path, a.diagnosis.text))
            .collect()
    }
}

/// Turns consecutive snapshots of one system into period reports. It owns the system's periods
/// (it calls `snapshot_period`), so keep one per system.
pub struct Recorder {
    system: ActorSystem,
    last: Snapshot,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").finish_non_exhaustive()
    }
}

impl Recorder {
    /// Starts the first period now.
    pub fn new(system: &ActorSystem) -> Self {
        Self {
            system: system.clone(),
            last: system.monitor().snapshot_period(),
        }
    }

    /// Ends the current period, starts the next, and reports on the one that ended.
    pub fn period(&mut self) -> PeriodReport {
        let now = self.system.monitor().snapshot_period();
        let report = compare(&self.last, &now);
        self.last = now;
        report
    }
}

/// Runs a [`Recorder`] every `period` on the current tokio runtime and keeps the latest report
/// in the returned cell (read it for an endpoint or a dashboard).
///
/// # Panics
///
/// Outside a tokio runtime.
pub fn spawn_periodic(system: &ActorSystem, period: Duration) -> Arc<Mutex<PeriodReport>> {
    let latest = Arc::new(Mutex::new(PeriodReport::default()));
    periodic(system, period, latest.clone());
    latest
}

/// Writes a period report into `cell` every `period` until the system shuts down.
pub(crate) fn periodic(
    system: &ActorSystem,
    period: Duration,
    cell: Arc<Mutex<PeriodReport>>,
) -> tokio::task::JoinHandle<()> {
    let mut recorder = Recorder::new(system);
    let system = system.clone();
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(period);
        ticks.tick().await;
        while !system.is_shutting_down() {
            ticks.tick().await;
            let report = recorder.period();
            *cell.lock() = report;
        }
    })
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn compare(before: &Snapshot, now: &Snapshot) -> PeriodReport {
    let seconds = secs(now.at.saturating_duration_since(before.at)).max(1e-9);
    let before_actors: HashMap<_, _> = before.actors.iter().map(|a| (a.id, a)).collect();
    let before_dispatchers: HashMap<_, _> = before
        .dispatchers
        .iter()
        .map(|d| (d.name.clone(), d))
        .collect();
    // Thread time per dispatcher, from its actors (their figures include polls under way).
    let mut held: HashMap<&str, f64> = HashMap::new();
    for a in &now.actors {
        let before = before_actors
            .get(&a.id)
            .map_or(Duration::ZERO, |b| b.on_thread);
        *held.entry(a.dispatcher.as_ref()).or_default() += secs(a.on_thread.saturating_sub(before));
    }
    let dispatchers = now
        .dispatchers
        .iter()
        .map(|d| {
            let figures = dispatcher_period(
                before_dispatchers.get(&d.name).copied(),
                d,
                held.get(d.name.as_ref()).copied(),
                seconds,
            );
            (figures, d.tolerates_blocking)
        })
        .collect();
    let figures = now
        .actors
        .iter()
        .map(|a| actor_period(before_actors.get(&a.id).copied(), a, seconds))
        .collect();
    let mut report = judge(seconds, figures, dispatchers);
    report.figures = source_figures(&before.figures, &now.figures, seconds);
    report
}

/// The sources' figures at the end of the period, each counter with its rate: its increase
/// since the same figure (name and labels) in `before`, or since zero for a figure new in
/// this period (its source started during it). A counter that went down (its source was
/// replaced by a new one with the same labels) counts from zero again, as Prometheus does.
fn source_figures(before: &[Figure], now: &[Figure], seconds: f64) -> Vec<FigurePeriod> {
    let key = |f: &Figure| (f.name, f.labels.clone());
    let before: HashMap<_, f64> = before.iter().map(|f| (key(f), f.value)).collect();
    now.iter()
        .map(|f| {
            let rate = (f.kind == FigureKind::Counter).then(|| {
                let start = before.get(&key(f)).copied().unwrap_or(0.0);
                let increase = if f.value >= start {
                    f.value - start
                } else {
                    f.value
                };
                increase / seconds
            });
            FigurePeriod {
                name: f.name.to_owned(),
                labels: f
                    .labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), v.clone()))
                    .collect(),
                value: f.value,
                rate,
            }
        })
        .collect()
}

/// Gives every actor its verdict and sorts the report worst first. `figures` pairs each actor's
/// figures with whether its queue grew; `dispatchers` pairs each dispatcher's figures with
/// whether it is meant for blocking work.
fn judge(
    seconds: f64,
    mut figures: Vec<(ActorPeriod, bool)>,
    dispatchers: Vec<(DispatcherPeriod, bool)>,
) -> PeriodReport {
    let by_name: HashMap<&str, (&DispatcherPeriod, bool)> = dispatchers
        .iter()
        .map(|(p, tolerant)| (p.name.as_str(), (p, *tolerant)))
        .collect();
    // First pass: who is starved or growing; second: who is blocking a dispatcher that has
    // starved actors on it.
    // Judged on the period's utilization: the instantaneous gauges (busy threads, runnable
    // actors) flicker with every message.
    let free = |name: &str| {
        by_name
            .get(name)
            .is_none_or(|(p, _)| p.utilization < NO_FREE_THREAD)
    };
    let mut starved_on: HashMap<String, Vec<String>> = HashMap::new();
    for (a, growing) in &figures {
        if *growing && a.utilization < SATURATED && !free(&a.dispatcher) {
            starved_on
                .entry(a.dispatcher.clone())
                .or_default()
                .push(a.path.clone());
        }
    }
    let mut blockers_on: HashMap<String, Vec<String>> = HashMap::new();
    for (a, _) in &figures {
        let tolerant = by_name.get(a.dispatcher.as_str()).is_some_and(|(_, t)| *t);
        if a.blocking_share >= MOSTLY_BLOCKING && !tolerant && !free(&a.dispatcher) {
            blockers_on
                .entry(a.dispatcher.clone())
                .or_default()
                .push(a.path.clone());
        }
    }
    for (a, growing) in &mut figures {
        a.diagnosis = diagnose(a, *growing, &starved_on, &blockers_on, &by_name);
    }
    let mut actors: Vec<ActorPeriod> = figures.into_iter().map(|(a, _)| a).collect();
    actors.sort_by(|x, y| {
        y.diagnosis
            .verdict
            .cmp(&x.diagnosis.verdict)
            .then(y.queue.cmp(&x.queue))
            .then(x.path.cmp(&y.path))
    });
    let mut dispatchers: Vec<DispatcherPeriod> = dispatchers.into_iter().map(|(p, _)| p).collect();
    dispatchers.sort_by(|x, y| y.utilization.total_cmp(&x.utilization));
    PeriodReport {
        seconds,
        actors,
        dispatchers,
        figures: Vec::new(),
    }
}

fn dispatcher_period(
    before: Option<&DispatcherSnapshot>,
    now: &DispatcherSnapshot,
    held: Option<f64>,
    seconds: f64,
) -> DispatcherPeriod {
    let busy = held.unwrap_or_else(|| {
        secs(
            now.busy
                .saturating_sub(before.map_or(Duration::ZERO, |b| b.busy)),
        )
    });
    let threads = now.threads.max(1) as f64;
    DispatcherPeriod {
        name: now.name.to_string(),
        kind: now.kind.to_owned(),
        threads: now.threads,
        busy_threads: now.busy_threads,
        utilization: (busy / (threads * seconds)).min(1.0),
        runnable_waiting: now.runnable_waiting,
    }
}

/// The figures, with a placeholder diagnosis, and whether the queue grew.
fn actor_period(
    before: Option<&ActorSnapshot>,
    now: &ActorSnapshot,
    seconds: f64,
) -> (ActorPeriod, bool) {
    let arrived = now.arrived - before.map_or(0, |b| b.arrived);
    let completed = now.completed - before.map_or(0, |b| b.completed);
    let busy = secs(
        now.busy
            .saturating_sub(before.map_or(Duration::ZERO, |b| b.busy)),
    );
    let on_thread = secs(
        now.on_thread
            .saturating_sub(before.map_or(Duration::ZERO, |b| b.on_thread)),
    );
    let blocking = secs(
        now.blocking
            .saturating_sub(before.map_or(Duration::ZERO, |b| b.blocking)),
    );
    let waited = secs(
        now.waited
            .saturating_sub(before.map_or(Duration::ZERO, |b| b.waited)),
    );
    let samples = now.wait_samples - before.map_or(0, |b| b.wait_samples);
    let throughput = completed as f64 / seconds;
    let waiting_ms = if samples > 0 {
        waited / samples as f64 * 1e3
    } else if throughput > 0.0 {
        // Little's law: time in queue = queue length / rate through it.
        now.queued as f64 / throughput * 1e3
    } else {
        0.0
    };
    let queued_before = before.map_or(0, |b| b.queued);
    let growing = now.queued > queued_before && now.queued >= 2;
    let figures = ActorPeriod {
        path: now.path.to_string(),
        dispatcher: now.dispatcher.to_string(),
        arrival_rate: arrived as f64 / seconds,
        throughput,
        queue: now.queued,
        max_queue: now.max_queued,
        utilization: (busy / seconds).min(1.0),
        service_ms: if completed > 0 {
            busy / completed as f64 * 1e3
        } else {
            0.0
        },
        waiting_ms,
        blocking_share: if on_thread > 0.0 {
            blocking / on_thread
        } else {
            0.0
        },
        diagnosis: Diagnosis {
            verdict: Verdict::Healthy,
            text: String::new(),
        },
    };
    (figures, growing)
}

fn diagnose(
    a: &ActorPeriod,
    growing: bool,
    starved_on: &HashMap<String, Vec<String>>,
    blockers_on: &HashMap<String, Vec<String>>,
    dispatchers: &HashMap<&str, (&DispatcherPeriod, bool)>,
) -> Diagnosis {
    let pct = |x: f64| format!("{:.0}%", x * 100.0);
    let d = &a.dispatcher;
    let (threads, d_util) = dispatchers
        .get(d.as_str())
        .map_or((0, 0.0), |(p, _)| (p.threads, p.utilization));
    if growing && a.utilization >= SATURATED {
        return Diagnosis {
            verdict: Verdict::Saturated,
            text: format!(
                "saturated: busy {} of the time and the queue grew to {} (service {:.2} ms, \
                 {:.0} arrivals/s against {:.0} handled/s); fix: make the handler cheaper or \
                 spread the work over a pool of such actors (a router)",
                pct(a.utilization),
                a.queue,
                a.service_ms,
                a.arrival_rate,
                a.throughput
            ),
        };
    }
    if starved_on.get(d).is_some_and(|s| s.contains(&a.path)) {
        let culprits = blockers_on
            .get(d)
            .map(|b| {
                b.iter()
                    .filter(|p| **p != a.path)
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        let fix = if culprits.is_empty() {
            format!("give {d:?} more threads, or move this actor to its own dispatcher")
        } else {
            format!(
                "move the actors blocking {d:?} ({}{}) to a blocking pool, or give this actor \
                 its own dispatcher",
                culprits
                    .iter()
                    .take(3)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", "),
                if culprits.len() > 3 {
                    format!(" and {} more", culprits.len() - 3)
                } else {
                    String::new()
                }
            )
        };
        return Diagnosis {
            verdict: Verdict::StarvedForThreads,
            text: format!(
                "starved for threads: the queue grew to {} while it was busy only {} of the \
                 time; its dispatcher {d:?} has no free thread ({threads} threads, {} used); \
                 fix: {fix}",
                a.queue,
                pct(a.utilization),
                pct(d_util)
            ),
        };
    }
    if blockers_on.get(d).is_some_and(|b| b.contains(&a.path)) {
        let victims = starved_on
            .get(d)
            .map(|v| v.iter().filter(|p| **p != a.path).count())
            .unwrap_or(0);
        return Diagnosis {
            verdict: Verdict::BlockingItsDispatcher,
            text: format!(
                "blocking its dispatcher: {} of its time on a thread is in long blocking polls \
                 on {d:?} ({threads} threads, {} used){}; fix: move it to a blocking-pool \
                 dispatcher (type = \"blocking\") or its own dispatcher with enough threads",
                pct(a.blocking_share),
                pct(d_util),
                if victims > 0 {
                    format!(", starving {victims} other actor(s)")
                } else {
                    String::new()
                }
            ),
        };
    }
    Diagnosis {
        verdict: Verdict::Healthy,
        text: format!(
            "healthy: busy {}, queue {} (max {}), waiting {:.2} ms",
            pct(a.utilization),
            a.queue,
            a.max_queue,
            a.waiting_ms
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An actor's figures over a 1 s period: `util` busy, `blocking` of its thread time in long
    /// polls, `queue` waiting at the end.
    fn actor(path: &str, dispatcher: &str, util: f64, blocking: f64, queue: usize) -> ActorPeriod {
        ActorPeriod {
            path: path.to_owned(),
            dispatcher: dispatcher.to_owned(),
            arrival_rate: 100.0,
            throughput: 50.0,
            queue,
            max_queue: queue,
            utilization: util,
            service_ms: util * 1e3 / 50.0,
            waiting_ms: 1.0,
            blocking_share: blocking,
            diagnosis: Diagnosis {
                verdict: Verdict::Healthy,
                text: String::new(),
            },
        }
    }

    fn dispatcher(name: &str, threads: usize, util: f64) -> DispatcherPeriod {
        DispatcherPeriod {
            name: name.to_owned(),
            kind: "shared".to_owned(),
            threads,
            busy_threads: threads,
            utilization: util,
            runnable_waiting: 0,
        }
    }

    fn judged(report: &PeriodReport, path: &str) -> (Verdict, String) {
        let a = report.actor(path).expect("the actor is in the report");
        (a.diagnosis.verdict, a.diagnosis.text.clone())
    }

    #[test]
    fn counters_get_their_rate_over_the_period_and_gauges_none() {
        let active = |n: f64| Figure::gauge("g_active", "Active.", n).label("kind", "cart");
        let started = |n: u64| Figure::counter("g_total", "Started.", n).label("kind", "cart");
        let fresh = Figure::counter("g_total", "Started.", 6).label("kind", "order");
        let figures = source_figures(
            &[active(3.0), started(10)],
            &[active(5.0), started(30), fresh],
            2.0,
        );
        let rates: Vec<_> = figures
            .iter()
            .map(|f| (f.name.as_str(), f.label("kind").unwrap(), f.value, f.rate))
            .collect();
        assert_eq!(
            rates,
            [
                ("g_active", "cart", 5.0, None),
                ("g_total", "cart", 30.0, Some(10.0)),
                // New in this period: counted from zero.
                ("g_total", "order", 6.0, Some(3.0)),
            ]
        );
        // A counter that went down was restarted: its new count is its increase.
        let restarted = source_figures(&[started(30)], &[started(4)], 1.0);
        assert_eq!(restarted[0].rate, Some(4.0));
    }

    #[test]
    fn a_busy_actor_with_a_growing_queue_is_saturated() {
        let report = judge(
            1.0,
            vec![(actor("/user/a", "default", 0.95, 0.0, 40), true)],
            vec![(dispatcher("default", 4, 0.3), false)],
        );
        let (verdict, text) = judged(&report, "/user/a");
        assert_eq!(verdict, Verdict::Saturated);
        assert!(text.starts_with("saturated: busy 95%"), "{text}");
        assert!(text.contains("a router"), "{text}");
    }

    #[test]
    fn a_queue_growing_at_low_utilization_on_a_full_dispatcher_is_starved_and_names_the_blockers() {
        let report = judge(
            1.0,
            vec![
                (actor("/user/receiver", "default", 0.03, 0.0, 300), true),
                (actor("/user/worker-1", "default", 1.0, 1.0, 0), false),
            ],
            vec![(dispatcher("default", 4, 0.98), false)],
        );
        let (verdict, text) = judged(&report, "/user/receiver");
        assert_eq!(verdict, Verdict::StarvedForThreads);
        assert!(
            text.contains("no free thread (4 threads, 98% used)"),
            "{text}"
        );
        assert!(
            text.contains("(/user/worker-1) to a blocking pool"),
            "{text}"
        );
        let (verdict, text) = judged(&report, "/user/worker-1");
        assert_eq!(verdict, Verdict::BlockingItsDispatcher);
        assert!(text.contains("starving 1 other actor(s)"), "{text}");
        // Worst first: the cause (the blocker) heads the report, then the actor it starves.
        let order: Vec<&str> = report.actors.iter().map(|a| a.path.as_str()).collect();
        assert_eq!(order, ["/user/worker-1", "/user/receiver"]);
    }

    #[test]
    fn starvation_without_blockers_asks_for_threads() {
        let report = judge(
            1.0,
            vec![(actor("/user/a", "busy", 0.1, 0.0, 9), true)],
            vec![(dispatcher("busy", 2, 0.95), false)],
        );
        let (verdict, text) = judged(&report, "/user/a");
        assert_eq!(verdict, Verdict::StarvedForThreads);
        assert!(text.contains("give \"busy\" more threads"), "{text}");
    }

    #[test]
    fn blocking_is_fine_on_a_blocking_pool_or_with_threads_to_spare() {
        let on_pool = judge(
            1.0,
            vec![(actor("/user/w", "io", 0.9, 1.0, 0), false)],
            vec![(dispatcher("io", 64, 0.95), true)],
        );
        assert_eq!(judged(&on_pool, "/user/w").0, Verdict::Healthy);
        let spare = judge(
            1.0,
            vec![(actor("/user/w", "default", 0.9, 1.0, 0), false)],
            vec![(dispatcher("default", 4, 0.3), false)],
        );
        assert_eq!(judged(&spare, "/user/w").0, Verdict::Healthy);
    }

    #[test]
    fn a_queue_growing_with_free_threads_and_low_utilization_is_healthy() {
        // A burst arriving while the dispatcher has room drains by itself.
        let report = judge(
            1.0,
            vec![(actor("/user/a", "default", 0.2, 0.0, 5), true)],
            vec![(dispatcher("default", 4, 0.2), false)],
        );
        let (verdict, text) = judged(&report, "/user/a");
        assert_eq!(verdict, Verdict::Healthy);
        assert_eq!(text, "healthy: busy 20%, queue 5 (max 5), waiting 1.00 ms");
    }
}
