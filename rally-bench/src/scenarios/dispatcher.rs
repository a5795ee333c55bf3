//! The dispatcher experiments defined in `docs/benchmarks.md`: starvation, the throughput setting,
//! and fairness. Each prints a table per period or per setting and the diagnosis Rally gives.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use rally::{
    Actor, ActorRef, ActorResult, ActorSystem, Context, Dispatcher, DispatcherKind, Handler,
    Message, MonitoringConfig, Props, SystemConfig,
};
use rally_metrics::{PeriodReport, Recorder};
use tokio::sync::Notify;

use super::common::{CommonArgs, multi_thread_runtime};
use crate::report::{Report, Row};

/// A shared pool of exactly `threads` threads.
fn fixed_pool(threads: usize) -> DispatcherKind {
    DispatcherKind::Shared {
        parallelism_factor: 1.0,
        parallelism_min: threads,
        parallelism_max: threads,
    }
}

fn start(
    name: &str,
    kind: DispatcherKind,
    throughput: usize,
    deadline: Option<Duration>,
) -> Dispatcher {
    Dispatcher::start(name, kind, throughput, deadline)
        .expect("starting a dispatcher only fails when the OS refuses threads")
}

fn monitored_config() -> SystemConfig {
    let mut monitoring = MonitoringConfig::default();
    monitoring.all_actors = true;
    SystemConfig::builder()
        .monitoring(monitoring)
        .build()
        .expect("the defaults with monitoring on are valid")
}

// ---------------------------------------------------------------------------------------------
// Starvation

/// `dispatcher-starvation` flags.
#[derive(Debug, Args)]
pub(crate) struct StarvationArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Periods measured per configuration.
    #[arg(long, default_value_t = 4)]
    periods: u32,
    /// Length of a period, in seconds (a worker gets a message every 1.5 s, so a period of a
    /// few seconds averages its utilization).
    #[arg(long, default_value_t = 3.0)]
    period_secs: f64,
    /// Also serve `/metrics` and `/report` on this address while it runs (for `rally top`).
    #[arg(long)]
    serve: Option<std::net::SocketAddr>,
}

/// Does `work` of blocking work per message (a JDBC call, a file read).
struct Worker {
    work: Duration,
}
impl Actor for Worker {}

#[derive(Clone, Copy)]
struct Job;
impl Message for Job {
    type Reply = ();
}
impl Handler<Job> for Worker {
    async fn handle(&mut self, _: Job, _: &mut Context<Self>) -> ActorResult<()> {
        std::thread::sleep(self.work);
        Ok(())
    }
}

/// Spends `work` on each message, then forwards it to the next worker, round robin.
struct Receiver {
    work: Duration,
    workers: Vec<ActorRef<Worker>>,
    next: usize,
}
impl Actor for Receiver {}
impl Handler<Job> for Receiver {
    async fn handle(&mut self, job: Job, _: &mut Context<Self>) -> ActorResult<()> {
        std::thread::sleep(self.work);
        let worker = &self.workers[self.next % self.workers.len()];
        self.next += 1;
        worker.tell(job)?;
        Ok(())
    }
}

/// Runs `dispatcher-starvation`.
pub(crate) fn starvation(args: &StarvationArgs) -> anyhow::Result<()> {
    let periods = if args.common.quick { 3 } else { args.periods };
    let period = if args.common.quick {
        Duration::from_secs(1)
    } else {
        Duration::from_secs_f64(args.period_secs.max(0.1))
    };
    let rate = 66.0;
    let workers = 100;
    let receiver_work = Duration::from_millis(10);
    let worker_work = Duration::from_secs(1);
    let driver = multi_thread_runtime();
    let mut report = Report::new("dispatcher-starvation");
    report
        .param("arrivals_per_sec", rate)
        .param("workers", workers)
        .param("receiver_service_ms", 10)
        .param("worker_service_ms", 1000)
        .param("default_threads", 4)
        .param("period_ms", period.as_millis() as u64);
    let configs: [(&str, Option<DispatcherKind>); 3] = [
        ("1 all on default (4 threads)", None),
        ("2 workers on own pool (4 threads)", Some(fixed_pool(4))),
        (
            "3 workers on blocking pool (max 100)",
            Some(DispatcherKind::Blocking {
                core_pool_size: 4,
                max_pool_size: 100,
                keep_alive: Duration::from_secs(60),
                queue_size: 0,
            }),
        ),
    ];
    let mut diagnoses = Vec::new();
    for (label, workers_kind) in configs {
        let default = start("default", fixed_pool(4), 5, None);
        let mut others = Vec::new();
        let workers_dispatcher = workers_kind.map(|kind| {
            others.push(start("workers", kind, 5, None));
            "workers"
        });
        let system =
            ActorSystem::with_dispatchers("starvation", monitored_config(), default, others);
        let refs: Vec<ActorRef<Worker>> = (1..=workers)
            .map(|n| {
                let props = Props::new(Worker { work: worker_work }).named(format!("worker-{n}"));
                let props = match workers_dispatcher {
                    Some(name) => props.on_dispatcher(name),
                    None => props,
                };
                system.spawn(props).expect("spawn a worker")
            })
            .collect();
        let receiver = system
            .spawn(
                Props::new(Receiver {
                    work: receiver_work,
                    workers: refs,
                    next: 0,
                })
                .named("receiver"),
            )
            .expect("spawn the receiver");
        let endpoint = match args.serve {
            Some(addr) => {
                Some(driver.block_on(rally_metrics::prometheus::serve(&system, addr, period))?)
            }
            None => None,
        };
        let mut recorder = Recorder::new(&system);
        let reports: Vec<PeriodReport> = driver.block_on(async {
            let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
            let mut reports = Vec::new();
            let mut next_period = Instant::now() + period;
            while reports.len() < periods as usize {
                ticks.tick().await;
                receiver.tell(Job).expect("the receiver runs");
                if Instant::now() >= next_period {
                    next_period += period;
                    reports.push(recorder.period());
                }
            }
            reports
        });
        for (i, r) in reports.iter().enumerate() {
            let rec = r.actor("/user/receiver");
            let w1 = r.actor("/user/worker-1");
            let d = |name: &str| {
                r.dispatchers
                    .iter()
                    .find(|d| d.name == name)
                    .map_or(0.0, |d| d.utilization * 100.0)
            };
            report.rows.push(
                Row::new(format!("{label} / period {}", i + 1))
                    .with("receiver_max_queue", rec.map_or(0, |a| a.max_queue))
                    .with(
                        "receiver_util_pct",
                        rec.map_or(0.0, |a| a.utilization * 100.0),
                    )
                    .with("worker1_max_queue", w1.map_or(0, |a| a.max_queue))
                    .with(
                        "worker1_util_pct",
                        w1.map_or(0.0, |a| a.utilization * 100.0),
                    )
                    .with("default_util_pct", d("default"))
                    .with("workers_util_pct", d("workers"))
                    .with(
                        "receiver_verdict",
                        rec.map_or("-", |a| a.diagnosis.verdict.words()),
                    )
                    .with(
                        "worker1_verdict",
                        w1.map_or("-", |a| a.diagnosis.verdict.words()),
                    ),
            );
        }
        if let Some(last) = reports.last() {
            for path in ["/user/receiver", "/user/worker-1"] {
                if let Some(a) = last.actor(path) {
                    diagnoses.push(format!("[{label}] {path}: {}", a.diagnosis.text));
                }
            }
        }
        drop(endpoint);
        driver.block_on(async {
            let _ = system.shutdown().await;
        });
    }
    report.print(args.common.json);
    if !args.common.json {
        println!("# diagnosis (last period of each configuration)");
        for line in diagnoses {
            println!("{line}");
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Throughput setting

/// `dispatcher-throughput` flags.
#[derive(Debug, Args)]
pub(crate) struct ThroughputArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Messages per actor.
    #[arg(long, default_value_t = 40_000)]
    messages: u64,
}

/// Counts messages; the last one of all actors wakes the bench.
struct Counter {
    left: u64,
    all_left: Arc<AtomicU64>,
    done: Arc<Notify>,
}
impl Actor for Counter {}
#[derive(Clone, Copy)]
struct Tick;
impl Message for Tick {
    type Reply = ();
}
impl Handler<Tick> for Counter {
    async fn handle(&mut self, _: Tick, _: &mut Context<Self>) -> ActorResult<()> {
        self.left -= 1;
        if self.left == 0 && self.all_left.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.done.notify_one();
        }
        Ok(())
    }
}

/// Runs `dispatcher-throughput`: 40 actors on 4 threads, total time per `throughput`.
pub(crate) fn throughput(args: &ThroughputArgs) -> anyhow::Result<()> {
    let messages = if args.common.quick {
        4_000
    } else {
        args.messages
    };
    let actors = 40u64;
    let driver = multi_thread_runtime();
    let mut report = Report::new("dispatcher-throughput");
    report
        .param("actors", actors)
        .param("messages_per_actor", messages)
        .param("threads", 4);
    for throughput in [1usize, 2, 5, 10, 20, 50, 100] {
        let pool = start("pool", fixed_pool(4), throughput, None);
        let system =
            ActorSystem::with_dispatchers("throughput", SystemConfig::default(), pool, Vec::new());
        let all_left = Arc::new(AtomicU64::new(actors));
        let done = Arc::new(Notify::new());
        let refs: Vec<_> = (0..actors)
            .map(|_| {
                system
                    .spawn(Counter {
                        left: messages,
                        all_left: all_left.clone(),
                        done: done.clone(),
                    })
                    .expect("spawn")
            })
            .collect();
        let elapsed = driver.block_on(async {
            let finished = done.notified();
            tokio::pin!(finished);
            finished.as_mut().enable();
            let start = Instant::now();
            // Interleave the senders' messages so every actor has work from the start.
            for _ in 0..messages {
                for actor in &refs {
                    actor.tell(Tick).expect("the actor runs");
                }
            }
            finished.await;
            let elapsed = start.elapsed();
            let _ = system.shutdown().await;
            elapsed
        });
        report.rows.push(
            Row::new(format!("throughput={throughput}"))
                .throughput(messages * actors, elapsed)
                .with("throughput", throughput as u64),
        );
    }
    report.print(args.common.json);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Fairness

/// `dispatcher-fairness` flags.
#[derive(Debug, Args)]
pub(crate) struct FairnessArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Service time per message, in milliseconds.
    #[arg(long, default_value_t = 4)]
    service_ms: u64,
}

/// Takes the same time for every message.
struct Steady {
    work: Duration,
    left: u64,
    all_left: Arc<AtomicU64>,
    done: Arc<Notify>,
}
impl Actor for Steady {}
impl Handler<Tick> for Steady {
    async fn handle(&mut self, _: Tick, _: &mut Context<Self>) -> ActorResult<()> {
        std::thread::sleep(self.work);
        self.left -= 1;
        if self.left == 0 && self.all_left.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.done.notify_one();
        }
        Ok(())
    }
}

/// Runs `dispatcher-fairness`: 3 actors on 2 threads, 33 messages each.
pub(crate) fn fairness(args: &FairnessArgs) -> anyhow::Result<()> {
    let service = Duration::from_millis(args.service_ms.max(1));
    let messages = 33u64;
    let ideal = service.as_secs_f64() * 99.0 / 2.0;
    let driver = multi_thread_runtime();
    let mut report = Report::new("dispatcher-fairness");
    report
        .param("actors", 3)
        .param("threads", 2)
        .param("messages_per_actor", messages)
        .param("service_ms", args.service_ms)
        .param("ideal_ms", ideal * 1e3);
    let throughputs: &[usize] = if args.common.quick {
        &[1, 11, 33]
    } else {
        &[1, 2, 3, 5, 8, 11, 16, 17, 22, 33]
    };
    let deadline = service * 3;
    let mut lines = Vec::new();
    for with_deadline in [false, true] {
        for &throughput in throughputs {
            let pool = start(
                "fair",
                fixed_pool(2),
                throughput,
                with_deadline.then_some(deadline),
            );
            let system =
                ActorSystem::with_dispatchers("fairness", monitored_config(), pool, Vec::new());
            let all_left = Arc::new(AtomicU64::new(3));
            let done = Arc::new(Notify::new());
            let refs: Vec<_> = (0..3)
                .map(|n| {
                    system
                        .spawn(
                            Props::new(Steady {
                                work: service,
                                left: messages,
                                all_left: all_left.clone(),
                                done: done.clone(),
                            })
                            .named(format!("steady-{n}")),
                        )
                        .expect("spawn")
                })
                .collect();
            let mut recorder = Recorder::new(&system);
            let (elapsed, period) = driver.block_on(async {
                let finished = done.notified();
                tokio::pin!(finished);
                finished.as_mut().enable();
                let start = Instant::now();
                for actor in &refs {
                    for _ in 0..messages {
                        actor.tell(Tick).expect("the actor runs");
                    }
                }
                finished.await;
                let elapsed = start.elapsed();
                let period = recorder.period();
                let _ = system.shutdown().await;
                (elapsed, period)
            });
            let util = period.dispatchers.first().map_or(0.0, |d| d.utilization);
            let label = format!(
                "throughput={throughput}{}",
                if with_deadline {
                    format!(" deadline={}ms", deadline.as_millis())
                } else {
                    String::new()
                }
            );
            if util < 0.9 {
                lines.push(format!(
                    "[{label}] dispatcher \"fair\" used {:.0}% of its 2 threads while actors \
                     still had messages: one thread sat idle once two actors drained their \
                     mailboxes; fix: lower throughput or set throughput-deadline",
                    util * 100.0
                ));
            }
            report.rows.push(
                Row::new(label)
                    .throughput(messages * 3, elapsed)
                    .with("vs_ideal", elapsed.as_secs_f64() / ideal)
                    .with("dispatcher_util_pct", util * 100.0),
            );
        }
    }
    report.print(args.common.json);
    if !args.common.json {
        println!("# diagnosis");
        if lines.is_empty() {
            println!("every setting kept both threads busy");
        }
        for line in lines {
            println!("{line}");
        }
    }
    Ok(())
}
