//! Local scenarios (defined in `docs/benchmarks.md`): ping-pong, throughput, spawn, and ask latency.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use clap::Args;
use hdrhistogram::Histogram;
use rally::{
    Actor, ActorRef, ActorResult, ActorSystem, Context, DispatcherConfig, DispatcherKind, Handler,
    Message, Recipient, SystemConfig,
};
use tokio::sync::oneshot;

use super::common::{
    CommonArgs, current_thread_runtime, micros, multi_thread_runtime, on_worker, resident_bytes,
};
use crate::report::{Report, Row};

/// `local-ping-pong` flags.
#[derive(Debug, Args)]
pub(crate) struct PingPongArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Round trips per pair.
    #[arg(long, default_value_t = 2_000_000)]
    round_trips: u64,
    /// Round trips of the `ask` row (one task awaiting `ask` in a loop), per runtime flavour.
    #[arg(long, default_value_t = 200_000)]
    asks: u64,
    /// Only this runtime flavour (`mt`, `ct` or `aff`), e.g. to profile one row.
    #[arg(long, value_parser = ["mt", "ct", "aff"])]
    runtime: Option<String>,
    /// Only the rows with this many pairs (the ask row is skipped).
    #[arg(long)]
    pairs: Option<usize>,
    /// Only the rows with this many in flight (the ask row is skipped).
    #[arg(long)]
    in_flight: Option<u64>,
}

#[derive(Debug, Clone, Copy)]
struct Ping;
impl Message for Ping {
    type Reply = Pong;
}
#[derive(Debug, Clone, Copy)]
struct Pong;
impl Message for Pong {
    type Reply = ();
}

struct Ponger;
impl Actor for Ponger {}
impl Handler<Ping> for Ponger {
    async fn handle(&mut self, _: Ping, _ctx: &mut Context<Self>) -> ActorResult<Pong> {
        Ok(Pong)
    }
}

/// Sends `Ping`s with its own recipient as the reply target, keeping `in_flight` outstanding.
/// Spawns its `Ponger` as a child, so that on an affinity dispatcher the pair shares a thread.
struct Pinger {
    ponger: Option<ActorRef<Ponger>>,
    me: Option<Recipient<Pong>>,
    remaining_to_send: u64,
    remaining_replies: u64,
    done: Option<oneshot::Sender<()>>,
}

struct Start(u64);
impl Message for Start {
    type Reply = ();
}

impl Actor for Pinger {
    async fn started(&mut self, ctx: &mut Context<Self>) -> ActorResult<()> {
        self.ponger = Some(ctx.spawn(Ponger)?);
        Ok(())
    }
}
impl Pinger {
    fn ponger(&self) -> &ActorRef<Ponger> {
        self.ponger.as_ref().expect("started spawns the ponger")
    }
}
impl Handler<Start> for Pinger {
    async fn handle(&mut self, start: Start, ctx: &mut Context<Self>) -> ActorResult<()> {
        let me = ctx.myself().recipient::<Pong>();
        for _ in 0..start.0.min(self.remaining_to_send) {
            self.ponger().request(Ping, &me)?;
            self.remaining_to_send -= 1;
        }
        self.me = Some(me);
        Ok(())
    }
}
impl Handler<Pong> for Pinger {
    async fn handle(&mut self, _: Pong, _ctx: &mut Context<Self>) -> ActorResult<()> {
        self.remaining_replies -= 1;
        if self.remaining_to_send > 0 {
            self.remaining_to_send -= 1;
            let me = self
                .me
                .as_ref()
                .expect("Start sets the recipient before any Pong");
            self.ponger().request(Ping, me)?;
        } else if self.remaining_replies == 0 {
            if let Some(done) = self.done.take() {
                let _ = done.send(());
            }
        }
        Ok(())
    }
}

/// The benchmark's actor system: on the current runtime, or with an affinity set (one thread
/// per core) as its default dispatcher.
fn bench_system(affinity: bool) -> ActorSystem {
    if !affinity {
        return ActorSystem::new("bench");
    }
    let mut config = SystemConfig::default();
    config.default_dispatcher = DispatcherConfig::new("cores", DispatcherKind::affinity());
    ActorSystem::with_config("bench", config)
}

/// Runs `pairs` pairs on one system; with `gate`, waits at it (after spawning, before the
/// first message) so that pairs on several threads start together. Returns when the last
/// pinger finished.
async fn run_pairs(
    pairs: usize,
    in_flight: u64,
    round_trips: u64,
    gate: Option<Arc<Barrier>>,
    affinity: bool,
) -> (Instant, Instant) {
    let system = bench_system(affinity);
    let mut waits = Vec::new();
    let mut pingers = Vec::new();
    for _ in 0..pairs {
        let (done, wait) = oneshot::channel();
        let pinger = system
            .spawn(Pinger {
                ponger: None,
                me: None,
                remaining_to_send: round_trips,
                remaining_replies: round_trips,
                done: Some(done),
            })
            .expect("spawn");
        pingers.push(pinger);
        waits.push(wait);
    }
    if let Some(gate) = gate {
        // Blocks this thread, whose runtime has nothing else to run yet.
        gate.wait();
    }
    let start = Instant::now();
    for pinger in &pingers {
        pinger.tell(Start(in_flight)).expect("pinger runs");
    }
    for wait in waits {
        wait.await.expect("pinger finishes");
    }
    let end = Instant::now();
    system.shutdown().await.expect("clean shutdown");
    (start, end)
}

/// One OS thread per pair, each with its own current-thread runtime and actor system (how an
/// application uses every core with single-threaded runtimes, and how the peers' current-thread
/// flavours and actix run this scenario). Timed from the common start to the last pair's end.
fn run_pairs_thread_per_pair(pairs: usize, in_flight: u64, round_trips: u64) -> Duration {
    let gate = Arc::new(Barrier::new(pairs + 1));
    let threads: Vec<_> = (0..pairs)
        .map(|_| {
            let gate = gate.clone();
            std::thread::spawn(move || {
                current_thread_runtime().block_on(run_pairs(
                    1,
                    in_flight,
                    round_trips,
                    Some(gate),
                    false,
                ))
            })
        })
        .collect();
    gate.wait();
    let start = Instant::now();
    let ends: Vec<Instant> = threads
        .into_iter()
        .map(|t| t.join().expect("a pair's thread does not panic").1)
        .collect();
    ends.into_iter().max().unwrap_or(start) - start
}

/// One task awaiting `ask` on one actor `asks` times; returns the elapsed time.
async fn run_asks(asks: u64) -> Duration {
    let system = ActorSystem::new("bench");
    let actor = system.spawn(Answer).expect("spawn");
    let start = Instant::now();
    for _ in 0..asks {
        actor.ask(Ping, Duration::from_secs(5)).await.expect("ask");
    }
    let elapsed = start.elapsed();
    system.shutdown().await.expect("clean shutdown");
    elapsed
}

/// Runs `local-ping-pong`.
pub(crate) fn ping_pong(args: &PingPongArgs) -> anyhow::Result<()> {
    let (round_trips, asks) = if args.common.quick {
        (50_000, 20_000)
    } else {
        (args.round_trips, args.asks)
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut report = Report::new("local-ping-pong");
    report
        .param("round_trips_per_pair", round_trips)
        .param("round_trips_ask", asks)
        .param(
            "runtime",
            "mt: one tokio multi-thread runtime (one worker per core) for all pairs; ct: one \
             current-thread runtime and actor system per OS thread, one pair per thread; aff: \
             one actor system whose default dispatcher is an affinity set (one thread per core, \
             an actor stays on its thread), pairs placed on the threads in turn",
        );
    // Untimed, as the peers do before their rows: 1 pair at 50 in flight.
    let warm_up = if args.common.quick { 10_000 } else { 100_000 };
    report.param(
        "warm_up",
        format!("1 pair x {warm_up} round trips at 50 in flight, untimed"),
    );
    for (flavour, runtime) in [
        ("mt", multi_thread_runtime()),
        ("ct", current_thread_runtime()),
        // The runtime only drives the benchmark; the actors run on the affinity threads.
        ("aff", current_thread_runtime()),
    ] {
        if args.runtime.as_deref().is_some_and(|only| only != flavour) {
            continue;
        }
        let affinity = flavour == "aff";
        if flavour != "ct" {
            on_worker(&runtime, run_pairs(1, 50, warm_up, None, affinity));
        }
        for pairs in [1, cores] {
            if args.pairs.is_some_and(|only| only != pairs) {
                continue;
            }
            for in_flight in [1u64, 50] {
                if args.in_flight.is_some_and(|only| only != in_flight) {
                    continue;
                }
                let elapsed = if flavour == "ct" {
                    run_pairs_thread_per_pair(pairs, in_flight, round_trips)
                } else {
                    let (start, end) = on_worker(
                        &runtime,
                        run_pairs(pairs, in_flight, round_trips, None, affinity),
                    );
                    end - start
                };
                let total = pairs as u64 * round_trips * 2;
                report.rows.push(
                    Row::new(format!("{pairs} pair(s), {in_flight} in flight, {flavour}"))
                        .clients(pairs as u64)
                        .throughput(total, elapsed)
                        .with("in_flight", in_flight)
                        .with("runtime", flavour),
                );
            }
        }
        // No ask row on the affinity set: its asking task would not run on the actor's thread.
        if args.pairs.is_some() || args.in_flight.is_some() || affinity {
            continue;
        }
        // The peers' `ask` row: one task on the runtime awaits the framework's
        // request/response in a loop; both directions count.
        let elapsed = on_worker(&runtime, run_asks(asks));
        report.rows.push(
            Row::new(format!("1 pair, ask, {flavour}"))
                .clients(1)
                .throughput(asks * 2, elapsed)
                .with("in_flight", 1)
                .with("mode", "ask")
                .with("runtime", flavour),
        );
    }
    report.print(args.common.json);
    Ok(())
}

/// `local-throughput` flags.
#[derive(Debug, Args)]
pub(crate) struct ThroughputArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Messages per row.
    #[arg(long, default_value_t = 10_000_000)]
    messages: u64,
    /// Monitor the receiving actor (measures the counters' cost; build with
    /// `--no-default-features --features mimalloc` to measure them compiled out).
    #[arg(long)]
    monitored: bool,
}

struct Sink {
    remaining: u64,
    done: Option<oneshot::Sender<()>>,
}
impl Actor for Sink {}
#[derive(Clone, Copy)]
struct Item(#[allow(dead_code)] u64);
impl Message for Item {
    type Reply = ();
}
impl Handler<Item> for Sink {
    async fn handle(&mut self, _: Item, _ctx: &mut Context<Self>) -> ActorResult<()> {
        self.remaining -= 1;
        if self.remaining == 0 {
            if let Some(done) = self.done.take() {
                let _ = done.send(());
            }
        }
        Ok(())
    }
}

async fn run_throughput(senders: u64, messages: u64, monitored: bool) -> Duration {
    let system = ActorSystem::new("bench");
    let (done, wait) = oneshot::channel();
    let sink = system
        .spawn(
            rally::Props::new(Sink {
                remaining: messages,
                done: Some(done),
            })
            .monitored(monitored),
        )
        .expect("spawn");
    let start = Instant::now();
    let per_sender = messages / senders;
    let tasks: Vec<_> = (0..senders)
        .map(|_| {
            let sink = sink.clone();
            tokio::spawn(async move {
                for i in 0..per_sender {
                    sink.tell(Item(i)).expect("sink runs");
                    if i % 1024 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("sender finishes");
    }
    wait.await.expect("sink finishes");
    let elapsed = start.elapsed();
    system.shutdown().await.expect("clean shutdown");
    elapsed
}

/// Runs `local-throughput`.
pub(crate) fn throughput(args: &ThroughputArgs) -> anyhow::Result<()> {
    let messages = if args.common.quick {
        200_000
    } else {
        args.messages
    };
    let runtime = multi_thread_runtime();
    let mut report = Report::new("local-throughput");
    report.param("messages", messages);
    let monitoring = match (cfg!(feature = "monitoring"), args.monitored) {
        (false, _) => "compiled-out",
        (true, false) => "off",
        (true, true) => "on",
    };
    report.param("monitoring", monitoring);
    for senders in [1u64, 4] {
        let total = messages / senders * senders;
        let elapsed = on_worker(&runtime, run_throughput(senders, total, args.monitored));
        report.rows.push(
            Row::new(format!("{senders} -> 1"))
                .clients(senders)
                .throughput(total, elapsed),
        );
    }
    report.print(args.common.json);
    Ok(())
}

/// `spawn` flags.
#[derive(Debug, Args)]
pub(crate) struct SpawnArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Actors to create.
    #[arg(long, default_value_t = 1_000_000)]
    actors: u64,
    /// Measure one runtime flavour in this process (`mt` or `ct`). Without it, each flavour runs
    /// in a child process of its own, so that the second does not reuse the memory the first
    /// freed (which made its bytes per idle actor read near zero).
    #[arg(long, value_parser = ["mt", "ct"])]
    runtime: Option<String>,
}

struct Idle;
impl Actor for Idle {}

/// Runs `spawn`.
pub(crate) fn spawn(args: &SpawnArgs) -> anyhow::Result<()> {
    let count = if args.common.quick {
        20_000
    } else {
        args.actors
    };
    let mut report = Report::new("spawn");
    report.param("actors", count);
    let Some(flavour) = args.runtime.as_deref() else {
        report.param("processes", "one child process per runtime flavour");
        for flavour in ["mt", "ct"] {
            let child = spawn_in_child(flavour, args)?;
            report.rows.extend(child.rows);
        }
        report.print(args.common.json);
        return Ok(());
    };
    {
        let runtime = match flavour {
            "mt" => multi_thread_runtime(),
            _ => current_thread_runtime(),
        };
        let (spawn_time, stop_time, bytes_per_actor) = on_worker(&runtime, async move {
            let system = ActorSystem::new("bench");
            let before = resident_bytes().unwrap_or(0);
            let start = Instant::now();
            let actors: Vec<ActorRef<Idle>> = (0..count)
                .map(|_| system.spawn(Idle).expect("spawn"))
                .collect();
            let spawn_time = start.elapsed();
            // Let every actor run its start and park on its empty mailbox.
            tokio::time::sleep(Duration::from_millis(200)).await;
            let after = resident_bytes().unwrap_or(0);
            let stop_start = Instant::now();
            drop(actors);
            system.shutdown().await.expect("clean shutdown");
            let stop_time = stop_start.elapsed();
            (
                spawn_time,
                stop_time,
                after.saturating_sub(before) as f64 / count as f64,
            )
        });
        report.rows.push(
            Row::new(format!("spawn, {flavour}"))
                .throughput(count, spawn_time)
                .with("runtime", flavour)
                .with("bytes_per_idle_actor", bytes_per_actor.round())
                .with("stop_all_ms", stop_time.as_secs_f64() * 1e3),
        );
    }
    report.print(args.common.json);
    Ok(())
}

/// Runs `spawn --runtime <flavour> --json` as a child process and reads its report.
fn spawn_in_child(flavour: &str, args: &SpawnArgs) -> anyhow::Result<Report> {
    use anyhow::Context as _;
    let exe = std::env::current_exe().context("finding this executable")?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["spawn", "--json", "--runtime", flavour, "--actors"])
        .arg(args.actors.to_string());
    if args.common.quick {
        cmd.arg("--quick");
    }
    let out = cmd
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running the spawn child")?;
    anyhow::ensure!(
        out.status.success(),
        "the spawn child for {flavour} exited with {}",
        out.status
    );
    let text = String::from_utf8(out.stdout).context("the child's report is not UTF-8")?;
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .context("the spawn child printed no report")?;
    serde_json::from_str(line).context("reading the spawn child's report")
}

/// `ask-latency` flags.
#[derive(Debug, Args)]
pub(crate) struct AskArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Asks per runtime flavour.
    #[arg(long, default_value_t = 200_000)]
    asks: u64,
}

struct Answer;
impl Actor for Answer {}
impl Handler<Ping> for Answer {
    async fn handle(&mut self, _: Ping, _ctx: &mut Context<Self>) -> ActorResult<Pong> {
        Ok(Pong)
    }
}

async fn measure_asks(asks: u64) -> Histogram<u64> {
    let system = ActorSystem::new("bench");
    let actor = system.spawn(Answer).expect("spawn");
    let mut histogram = Histogram::<u64>::new(3).expect("3 significant digits is valid");
    for _ in 0..asks / 10 {
        actor
            .ask(Ping, Duration::from_secs(5))
            .await
            .expect("warm-up ask");
    }
    for _ in 0..asks {
        let start = Instant::now();
        actor.ask(Ping, Duration::from_secs(5)).await.expect("ask");
        histogram
            .record(start.elapsed().as_nanos() as u64)
            .expect("values fit");
    }
    system.shutdown().await.expect("clean shutdown");
    histogram
}

/// Runs `ask-latency`.
pub(crate) fn ask_latency(args: &AskArgs) -> anyhow::Result<()> {
    let asks = if args.common.quick { 20_000 } else { args.asks };
    let mut report = Report::new("ask-latency");
    report.param("asks", asks);
    for (flavour, runtime) in [
        ("multi-thread", multi_thread_runtime()),
        ("current-thread", current_thread_runtime()),
    ] {
        let start = Instant::now();
        let h = on_worker(&runtime, measure_asks(asks));
        let elapsed = start.elapsed();
        let us = |q: f64| micros(Duration::from_nanos(h.value_at_quantile(q)));
        let mut row = Row::new(flavour)
            .throughput(asks, elapsed)
            .with("p90_us", us(0.9))
            .with("p999_us", us(0.999));
        row.p50_us = Some(us(0.5));
        row.p99_us = Some(us(0.99));
        report.rows.push(row);
    }
    report.print(args.common.json);
    Ok(())
}
