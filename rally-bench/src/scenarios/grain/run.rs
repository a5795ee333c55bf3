//! The grain scenarios themselves (built with the `grains` feature).

use std::ffi::OsStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use hdrhistogram::Histogram;
use rally::cluster::virtual_actors::{
    Activation, GrainMessages, GrainRef, VirtualActor, VirtualActors, VirtualActorsConfig,
};
use rally::cluster::{Cluster, ClusterConfig, MemberStatus};
use rally::remote::{
    MessageTable, NodeAddress, RemoteActor, RemoteConfig, RemoteMessage, RemoteNode,
};
use rally::state::{MemoryStore, SqliteStore};
use rally::{Actor, ActorRef, ActorResult, ActorSystem, Context, Handler, Message};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::{ActivationArgs, GrainPingArgs, MemberArgs, Store};
use crate::report::{Report, Row};
use crate::scenarios::common::{
    MemberProcesses, multi_thread_runtime, on_worker, resident_bytes, spawn_members,
};

/// The secret the three processes share.
const SECRET: &[u8] = b"rally-bench grains";
/// The actor-system name of every process (part of each member's address).
const SYSTEM: &str = "grains";
/// The name each member exposes its stats actor under.
const STATS: &str = "member-stats";
/// Member processes hosting the kind.
const MEMBERS: usize = 2;
/// Every request's time limit, forwarding included (the definition's 5 s).
pub(super) const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the client waits for all three processes to see each other up.
const FORM_LIMIT: Duration = Duration::from_secs(60);
/// How long a leaving member waits for its cluster to stop.
const LEAVE_LIMIT: Duration = Duration::from_secs(30);
/// Longer than any run, so no grain is passivated for idleness during one (the definition
/// forbids passivation during a run).
const IDLE_TIMEOUT: Duration = Duration::from_secs(3600);

/// The benchmark's virtual actor: replies `"Hello " + text`.
pub(super) struct PingGrain;

impl Actor for PingGrain {}

impl VirtualActor for PingGrain {
    const KIND: &'static str = "ping";

    async fn activate(_activation: Activation) -> ActorResult<Self> {
        Ok(Self)
    }

    fn messages(table: &mut GrainMessages<Self>) {
        table.add::<GrainPing>();
    }
}

/// `Ping{text}`; the reply is the pong's text.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct GrainPing {
    pub(super) text: String,
}

impl Message for GrainPing {
    type Reply = String;
}

impl RemoteMessage for GrainPing {
    const MANIFEST: &'static str = "bench.GrainPing";
}

impl Handler<GrainPing> for PingGrain {
    async fn handle(&mut self, ping: GrainPing, _ctx: &mut Context<Self>) -> ActorResult<String> {
        let mut reply = String::with_capacity(6 + ping.text.len());
        reply.push_str("Hello ");
        reply.push_str(&ping.text);
        Ok(reply)
    }
}

/// Answers the client's questions about this member process.
struct MemberStats {
    grains: VirtualActors,
    cluster: Cluster,
}

/// What the client asks a member.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct MemberQuery;

/// A member's figures at one moment.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(super) struct MemberReply {
    /// CPU time of the whole process (user + system), in nanoseconds.
    cpu_ns: u64,
    /// Resident set size from `/proc/self/statm`.
    resident_bytes: u64,
    /// Grains of the kind alive on this member (the runtime's own count).
    active_grains: u64,
    /// Members this member sees up.
    members_up: u64,
    /// Since the member started: activations of the kind, those that ended because their
    /// identity moved to another member, and messages passed on to another member.
    pub(super) activations: u64,
    pub(super) moves: u64,
    pub(super) forwarded: u64,
}

impl Message for MemberQuery {
    type Reply = MemberReply;
}

impl RemoteMessage for MemberQuery {
    const MANIFEST: &'static str = "bench.MemberQuery";
}

impl Actor for MemberStats {}

impl Handler<MemberQuery> for MemberStats {
    async fn handle(
        &mut self,
        _: MemberQuery,
        _ctx: &mut Context<Self>,
    ) -> ActorResult<MemberReply> {
        let (mut active, mut activations, mut moves, mut forwarded) = (0, 0, 0, 0);
        for s in self
            .grains
            .stats()
            .iter()
            .filter(|s| s.kind == PingGrain::KIND)
        {
            active += s.active as u64;
            activations += s.activations;
            moves += s.moves;
            forwarded += s.forwarded;
        }
        let up = self
            .cluster
            .members()
            .iter()
            .filter(|m| m.status == MemberStatus::Up)
            .count();
        Ok(MemberReply {
            cpu_ns: process_cpu().as_nanos() as u64,
            resident_bytes: resident_bytes().unwrap_or(0),
            active_grains: active,
            members_up: up as u64,
            activations,
            moves,
            forwarded,
        })
    }
}

impl RemoteActor for MemberStats {
    fn messages(table: &mut MessageTable<Self>) {
        table.add::<MemberQuery>();
    }
}

/// CPU time this process has used (user + system, all threads).
fn process_cpu() -> Duration {
    use nix::time::{ClockId, clock_gettime};
    clock_gettime(ClockId::CLOCK_PROCESS_CPUTIME_ID).map_or(Duration::ZERO, Duration::from)
}

/// `grain-member`: a member hosting the kind `ping` until stdin closes or the line `leave`
/// arrives on it; prints `LISTENING <address>` once it serves (and nothing after: the parent
/// stops reading).
pub(crate) fn member_main(args: &MemberArgs) -> anyhow::Result<()> {
    let runtime = multi_thread_runtime();
    runtime.block_on(async {
        let system = ActorSystem::new(SYSTEM);
        crate::scenarios::otel::traced(&system)?;
        let node = RemoteNode::start(
            &system,
            RemoteConfig::builder()
                .listen("127.0.0.1", 0)
                .secret(SECRET.to_vec())
                .build()?,
        )
        .await?;
        let seed: NodeAddress = match &args.seed {
            Some(seed) => seed.parse().map_err(|e| anyhow::anyhow!("--seed: {e:?}"))?,
            None => node.address().clone(),
        };
        let mut builder = ClusterConfig::builder();
        builder.seed(seed).kind(PingGrain::KIND);
        let config = builder.build()?;
        let cluster = Cluster::join(&system, &node, config.clone())?;
        let mut settings = VirtualActorsConfig::default();
        settings.idle_timeout = IDLE_TIMEOUT;
        settings.max_active = args.max_active;
        let grains = VirtualActors::builder(&cluster, &system)
            .kind::<PingGrain>()
            .store(match args.store {
                Store::Sqlite => Arc::new(SqliteStore::open(&args.db)?),
                Store::Memory => Arc::new(MemoryStore::new()),
            })
            .config(settings)
            .membership(&config)
            .start(&node)?;
        let stats = system.spawn(MemberStats {
            grains: grains.clone(),
            cluster: cluster.clone(),
        })?;
        node.expose(STATS, &stats)?;
        println!("LISTENING {}", node.address());
        // Serve until the parent closes our stdin (or dies), or asks us to leave.
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        while let Some(line) = lines.next_line().await? {
            if line.trim() == "leave" {
                return leave(&cluster, &grains, &node).await;
            }
        }
        Ok(())
    })
}

/// A graceful leave: the others are told this member is leaving, then gone (they see
/// `Leaving`, then `Removed`); once this member's cluster has stopped (its event stream ends,
/// at most [`LEAVE_LIMIT`]), the virtual actors are shut down and the node says goodbye.
async fn leave(cluster: &Cluster, grains: &VirtualActors, node: &RemoteNode) -> anyhow::Result<()> {
    let mut events = cluster.events();
    cluster.leave().await?;
    tokio::time::timeout(LEAVE_LIMIT, async {
        while events.next().await.is_some() {}
    })
    .await
    .context("the cluster did not stop after the leave")?;
    grains.shutdown().await;
    crate::scenarios::otel::flush().await;
    node.leave(Duration::from_millis(100)).await;
    Ok(())
}

/// The client side of a run: this process's client-only member, the member processes and
/// their stats actors. Dropping it stops the members and removes the store's directory.
pub(super) struct GrainCluster {
    members: Vec<ActorRef<MemberStats>>,
    pub(super) processes: MemberProcesses,
    pub(super) grains: VirtualActors,
    pub(super) cluster: Cluster,
    _node: RemoteNode,
    _system: ActorSystem,
}

impl GrainCluster {
    /// Starts the two members (the first is the seed), then this client, and waits until all
    /// three see each other up.
    pub(super) async fn start(max_active: usize, store: Store) -> anyhow::Result<Self> {
        let max_active = max_active.to_string();
        // The flag's own spelling, so a new store needs no second list here.
        let store = {
            use clap::ValueEnum as _;
            store
                .to_possible_value()
                .map_or_else(String::new, |v| v.get_name().to_owned())
        };
        let processes = spawn_members(
            "grain-member",
            MEMBERS,
            "grains",
            &[
                OsStr::new("--max-active"),
                OsStr::new(&max_active),
                OsStr::new("--store"),
                OsStr::new(&store),
            ],
        )
        .await?;
        let system = ActorSystem::new(SYSTEM);
        crate::scenarios::otel::traced(&system)?;
        let node = RemoteNode::start(
            &system,
            RemoteConfig::builder()
                .listen("127.0.0.1", 0)
                .secret(SECRET.to_vec())
                .build()?,
        )
        .await?;
        let mut builder = ClusterConfig::builder();
        builder.seed(processes.addresses[0].clone());
        let config = builder.build()?;
        let cluster = Cluster::join(&system, &node, config)?;
        // A client-only member hosts nothing, so it never claims an identity: its store is
        // never used and the builder's default stands.
        let grains = VirtualActors::builder(&cluster, &system).start(&node)?;
        let members = processes
            .addresses
            .iter()
            .map(|address| node.lookup::<MemberStats>(address, STATS))
            .collect();
        let gc = Self {
            members,
            processes,
            grains,
            cluster,
            _node: node,
            _system: system,
        };
        gc.wait_formed().await?;
        Ok(gc)
    }

    /// Polls (every 50 ms, at most [`FORM_LIMIT`]) until the client and every member see all
    /// three processes up.
    async fn wait_formed(&self) -> anyhow::Result<()> {
        let all = MEMBERS as u64 + 1;
        let deadline = Instant::now() + FORM_LIMIT;
        loop {
            let here = self
                .cluster
                .members()
                .iter()
                .filter(|m| m.status == MemberStatus::Up)
                .count() as u64;
            let mut seen = vec![here];
            if here == all {
                for reply in self.member_stats().await? {
                    seen.push(reply.members_up);
                }
            }
            if seen.len() == MEMBERS + 1 && seen.iter().all(|&n| n == all) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "the cluster did not form within {FORM_LIMIT:?}: members up as seen by the client, then each member: {seen:?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Every member's figures, in member order.
    pub(super) async fn member_stats(&self) -> anyhow::Result<Vec<MemberReply>> {
        let mut out = Vec::with_capacity(self.members.len());
        for i in 0..self.members.len() {
            out.push(self.member_stat(i).await?);
        }
        Ok(out)
    }

    /// Member `i`'s figures.
    pub(super) async fn member_stat(&self, i: usize) -> anyhow::Result<MemberReply> {
        self.members[i]
            .ask(MemberQuery, Duration::from_secs(10))
            .await
            .with_context(|| format!("asking member {i} for its figures"))
    }
}

/// One request, its reply checked.
pub(super) async fn ping(grain: &GrainRef<PingGrain>, text: &str) -> anyhow::Result<()> {
    let reply = grain
        .ask(
            GrainPing {
                text: text.to_owned(),
            },
            REQUEST_TIMEOUT,
        )
        .await?;
    if reply.strip_prefix("Hello ") != Some(text) {
        bail!("wrong reply {reply:?} to {text:?}");
    }
    Ok(())
}

/// A fresh random 32-hex-character string (lower case; written digit by digit, not through
/// `format!`, whose machinery was 2% of the client's CPU in grain-ping).
pub(super) fn random_text() -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut bits = rand::random::<u128>();
    let mut text = String::with_capacity(32);
    for _ in 0..32 {
        text.push(char::from(HEX[(bits >> 124) as usize]));
        bits <<= 4;
    }
    text
}

/// A latency histogram in microseconds, 3 significant digits, up to 60 s.
pub(super) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("the bounds are valid")
}

/// Each row's time limit: 10 min, 60 s with `--quick` (a million activations take minutes).
fn row_limit(quick: bool) -> Duration {
    if quick {
        Duration::from_secs(60)
    } else {
        Duration::from_secs(600)
    }
}

/// Awaits the request loops and adds up their histograms and error counts.
async fn merge(
    tasks: Vec<tokio::task::JoinHandle<(Histogram<u64>, u64)>>,
) -> anyhow::Result<(Histogram<u64>, u64)> {
    let mut total = histogram();
    let mut errors = 0;
    for task in tasks {
        let (hist, errs) = task.await.context("a request loop panicked")?;
        total
            .add(&hist)
            .expect("histograms with the same bounds add");
        errors += errs;
    }
    Ok((total, errors))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn cpu_ms(after: u64, before: u64) -> f64 {
    after.saturating_sub(before) as f64 / 1e6
}

pub(super) fn grain_report(scenario: &str, max_active: usize) -> Report {
    let mut report = Report::new(scenario);
    report
        .param(
            "layout",
            "2 member processes hosting the kind + this process as a client-only member, loopback TCP (Rally's own connections)",
        )
        .param(
            "store",
            "SqliteStore: one SQLite file (WAL) in a fresh temporary directory, shared by the 2 member processes; one claim per activation",
        )
        .param("placement", "hashed (rendezvous over the members hosting the kind)")
        .param("serializer", "postcard")
        .param("request_timeout_ms", REQUEST_TIMEOUT.as_millis() as u64)
        .param("idle_timeout_s", IDLE_TIMEOUT.as_secs())
        .param("max_active_per_member", max_active as u64);
    report
}

/// Runs `grain-ping`: P loops, each owning one grain, in a closed loop.
pub(crate) fn grain_ping(args: &GrainPingArgs) -> anyhow::Result<()> {
    let quick = args.common.quick;
    let rows = match (args.parallelism.is_empty(), quick) {
        (false, _) => args.parallelism.clone(),
        (true, true) => vec![8, 32],
        (true, false) => vec![8, 32, 128, 512],
    };
    if rows.contains(&0) {
        bail!("--parallelism: every value must be at least 1");
    }
    let seconds = args.seconds.unwrap_or(if quick { 1.0 } else { 10.0 });
    if !(seconds > 0.0 && seconds.is_finite()) {
        bail!("--seconds must be a positive number, not {seconds}");
    }
    let max_active = rows.iter().max().copied().unwrap_or(0).max(1) * 2;
    let mut report = grain_report("grain-ping", max_active);
    report.param("seconds", seconds).param(
        "warm_up",
        "one request per loop before the timed part (activates its grain)",
    );
    let runtime = multi_thread_runtime();
    report.rows = on_worker(&runtime, async move {
        eprintln!("grain-ping: starting 2 members and joining...");
        let gc = GrainCluster::start(max_active, Store::Sqlite).await?;
        let mut out = Vec::new();
        for p in rows {
            eprintln!("grain-ping: P={p}, {seconds} s...");
            let row = tokio::time::timeout(
                row_limit(quick),
                grain_ping_row(&gc, p, Duration::from_secs_f64(seconds)),
            )
            .await
            .map_err(|_| anyhow::anyhow!("P={p} did not finish within its time limit"))??;
            out.push(row);
        }
        crate::scenarios::otel::flush().await;
        anyhow::Ok(out)
    })?;
    report.print(args.common.json);
    Ok(())
}

async fn grain_ping_row(gc: &GrainCluster, p: usize, duration: Duration) -> anyhow::Result<Row> {
    let mut refs = Vec::with_capacity(p);
    for i in 0..p {
        let grain = gc.grains.get::<PingGrain>(&format!("ping-{i}"))?;
        ping(&grain, &random_text())
            .await
            .with_context(|| format!("warm-up of ping-{i}"))?;
        refs.push(grain);
    }
    let before = gc.member_stats().await?;
    let client_before = process_cpu();
    let start = Instant::now();
    let end = start + duration;
    let loops: Vec<_> = refs
        .into_iter()
        .map(|grain| {
            tokio::spawn(async move {
                let mut hist = histogram();
                let mut errors = 0u64;
                // One clock read per request: a request's end is the next one's check.
                let mut now = Instant::now();
                while now < end {
                    let text = random_text();
                    let t0 = Instant::now();
                    let result = ping(&grain, &text).await;
                    now = Instant::now();
                    match result {
                        Ok(()) => hist.saturating_record((now - t0).as_micros() as u64),
                        Err(_) => errors += 1,
                    }
                }
                (hist, errors)
            })
        })
        .collect();
    let (total, errors) = merge(loops).await?;
    let elapsed = start.elapsed();
    let client_cpu = process_cpu().saturating_sub(client_before);
    let after = gc.member_stats().await?;
    let member_cpu: Vec<f64> = after
        .iter()
        .zip(&before)
        .map(|(a, b)| cpu_ms(a.cpu_ns, b.cpu_ns))
        .collect();
    let mut row = Row::new(format!("P={p}"))
        .clients(p as u64)
        .throughput(total.len(), elapsed)
        .with("parallelism", p as u64)
        .with("errors", errors)
        .with("mean_us", total.mean())
        .with("client_cpu_ms", ms(client_cpu))
        .with("member_cpu_ms", member_cpu);
    row.p50_us = Some(total.value_at_quantile(0.5) as f64);
    row.p99_us = Some(total.value_at_quantile(0.99) as f64);
    Ok(row)
}

/// Runs `activation`: N fresh identities taken in order by the workers, one request each,
/// which activates the grain (cold); then a second request to each of them (warm).
pub(crate) fn activation(args: &ActivationArgs) -> anyhow::Result<()> {
    let quick = args.common.quick;
    let counts = match (args.activations.is_empty(), quick) {
        (false, _) => args.activations.clone(),
        (true, true) => vec![10_000],
        (true, false) => vec![100_000, 1_000_000],
    };
    if counts.contains(&0) {
        bail!("--activations: every value must be at least 1");
    }
    if args.workers == 0 {
        bail!("--workers must be at least 1");
    }
    let workers = args.workers;
    let one_worker = args
        .one_worker_activations
        .unwrap_or(if quick { 200 } else { 2_000 });
    // (N, workers) per row: the one-worker row first, on the fresh cluster.
    let mut rows: Vec<(u64, usize)> = Vec::new();
    if one_worker > 0 {
        rows.push((one_worker, 1));
    }
    rows.extend(counts.iter().map(|&n| (n, workers)));
    // Every identity of the run stays active: the cap is above all of them on one member.
    let max_active = usize::try_from(rows.iter().map(|&(n, _)| n).sum::<u64>())?.saturating_add(1);
    let mut report = grain_report("activation", max_active);
    let store = args.store;
    if store == Store::Memory {
        report.param(
            "store",
            "MemoryStore: each member process its own, in memory (not the definition's: it shows what the durable claim costs); one claim per activation",
        );
    }
    report
        .param("workers", workers as u64)
        .param("one_worker_activations", one_worker)
        .param(
            "warm_up",
            "none: every identity is new, the first request activates it (cold); the row's second pass sends each a second request (warm)",
        );
    let runtime = multi_thread_runtime();
    report.rows = on_worker(&runtime, async move {
        eprintln!("activation: starting 2 members and joining...");
        let gc = Arc::new(GrainCluster::start(max_active, store).await?);
        let mut out = Vec::new();
        for (index, &(n, workers)) in rows.iter().enumerate() {
            eprintln!("activation: N={n}, {workers} workers...");
            let row =
                tokio::time::timeout(row_limit(quick), activation_row(&gc, index, n, workers))
                    .await
                    .map_err(|_| anyhow::anyhow!("N={n} did not finish within its time limit"))??;
            out.push(row);
        }
        crate::scenarios::otel::flush().await;
        anyhow::Ok(out)
    })?;
    report.print(args.common.json);
    Ok(())
}

/// One request to each of the identities [`activation_identity`]`(row, k)`, k from 0 to n − 1,
/// taken in order from a shared counter by `workers` loops: the latencies of those that
/// succeeded, the errors, and the elapsed time.
async fn pass(
    gc: &Arc<GrainCluster>,
    row: u32,
    n: u64,
    workers: usize,
) -> anyhow::Result<(Histogram<u64>, u64, Duration)> {
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            let gc = Arc::clone(gc);
            let next = Arc::clone(&next);
            tokio::spawn(async move {
                let mut hist = histogram();
                let mut errors = 0u64;
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    if k >= n {
                        break;
                    }
                    let identity = activation_identity(
                        row,
                        u32::try_from(k).expect("n fits u32, checked by activation_row"),
                    );
                    let t0 = Instant::now();
                    let sent = match gc.grains.get::<PingGrain>(&identity) {
                        Ok(grain) => ping(&grain, "").await,
                        Err(e) => Err(e.into()),
                    };
                    match sent {
                        Ok(()) => hist.saturating_record(t0.elapsed().as_micros() as u64),
                        Err(_) => errors += 1,
                    }
                }
                (hist, errors)
            })
        })
        .collect();
    let (total, errors) = merge(tasks).await?;
    Ok((total, errors, start.elapsed()))
}

/// The identity the activation rows send to for the `k`-th request of row `row`: UUID-shaped
/// (8-4-4-4-12 lowercase hex), spread evenly over the key space as real identities are (user
/// ids, UUIDs), and unique (the first 64 bits are SplitMix64's finaliser of `row << 32 | k`,
/// a bijection). The peers' harnesses compute the same strings.
pub(crate) fn activation_identity(row: u32, k: u32) -> String {
    let hi = splitmix64((u64::from(row) << 32) | u64::from(k));
    let lo = splitmix64(hi);
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        hi >> 32,
        (hi >> 16) & 0xffff,
        hi & 0xffff,
        lo >> 48,
        lo & 0xffff_ffff_ffff
    )
}

/// SplitMix64's output function (Steele, Lea and Flood, 2014): a bijection of `u64` that
/// scatters neighbouring inputs.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `cold ÷ warm`, or 0 when there is no warm figure.
fn over(cold: u64, warm: u64) -> f64 {
    if warm == 0 {
        0.0
    } else {
        cold as f64 / warm as f64
    }
}

async fn activation_row(
    gc: &Arc<GrainCluster>,
    index: usize,
    n: u64,
    workers: usize,
) -> anyhow::Result<Row> {
    let row = u32::try_from(index)?;
    anyhow::ensure!(
        u32::try_from(n).is_ok(),
        "at most {} activations per row",
        u32::MAX
    );
    let before = gc.member_stats().await?;
    let client_before = process_cpu();
    let (total, errors, elapsed) = pass(gc, row, n, workers).await?;
    let client_cpu = process_cpu().saturating_sub(client_before);
    let after = gc.member_stats().await?;
    // The second request to every identity, now active: the warm figures (after the resident
    // sizes are read, so they do not count towards them).
    let (warm, warm_errors, warm_elapsed) = pass(gc, row, n, workers).await?;
    let ok = total.len();
    let label = if workers == 1 {
        format!("N={n}, 1 worker")
    } else {
        format!("N={n}")
    };
    let mut row = Row::new(label).throughput(ok, elapsed);
    let (cold_p50, cold_p99) = (total.value_at_quantile(0.5), total.value_at_quantile(0.99));
    let (warm_p50, warm_p99) = (warm.value_at_quantile(0.5), warm.value_at_quantile(0.99));
    row.p50_us = Some(cold_p50 as f64);
    row.p99_us = Some(cold_p99 as f64);
    let rate = row.msgs_per_sec.unwrap_or(0.0);
    let mut active = Vec::new();
    let mut per_member = Vec::new();
    for (a, b) in after.iter().zip(&before) {
        let grains = a.active_grains as i64 - b.active_grains as i64;
        let grown = a.resident_bytes as f64 - b.resident_bytes as f64;
        active.push(grains);
        per_member.push(if grains > 0 {
            grown / grains as f64
        } else {
            0.0
        });
    }
    let mean = per_member.iter().sum::<f64>() / per_member.len().max(1) as f64;
    let member_cpu: Vec<f64> = after
        .iter()
        .zip(&before)
        .map(|(a, b)| cpu_ms(a.cpu_ns, b.cpu_ns))
        .collect();
    let warm_rate = if warm_elapsed.is_zero() {
        0.0
    } else {
        warm.len() as f64 / warm_elapsed.as_secs_f64()
    };
    Ok(row
        .with("workers", workers as u64)
        .with("activations", ok)
        .with("errors", errors)
        .with("activations_per_sec", rate)
        .with("mean_us", total.mean())
        .with("active_per_member", active)
        .with("bytes_per_actor_per_member", per_member)
        .with("bytes_per_actor", mean)
        .with("client_cpu_ms", ms(client_cpu))
        .with("member_cpu_ms", member_cpu)
        .with("warm_requests", warm.len())
        .with("warm_errors", warm_errors)
        .with("warm_per_sec", warm_rate)
        .with("warm_p50_us", warm_p50)
        .with("warm_p99_us", warm_p99)
        .with("warm_mean_us", warm.mean())
        .with("cold_over_warm_p50", over(cold_p50, warm_p50))
        .with("cold_over_warm_p99", over(cold_p99, warm_p99)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_texts_are_32_hex_characters_and_differ() {
        let a = random_text();
        let b = random_text();
        assert_eq!(a.len(), 32);
        assert!(
            a.chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)),
            "{a}"
        );
        assert_ne!(a, b);
        // Every digit position takes every value: the whole 128 bits are used.
        let texts: Vec<String> = (0..2000).map(|_| random_text()).collect();
        for position in 0..32 {
            let seen: std::collections::HashSet<u8> =
                texts.iter().map(|t| t.as_bytes()[position]).collect();
            assert_eq!(seen.len(), 16, "position {position}: {seen:?}");
        }
    }

    /// The identities are UUID-shaped, unique within and across rows, and the very strings
    /// the peers' harnesses compute (the expected values are theirs too).
    #[test]
    fn activation_identities_are_uuid_shaped_unique_and_the_peers_strings() {
        assert_eq!(
            activation_identity(0, 0),
            "e220a839-7b1d-cdaf-a706-dd2f4d197e6f"
        );
        assert_eq!(
            activation_identity(1, 99_999),
            "a904f1fe-c530-6ed3-525a-5f343312b2fe"
        );
        let mut seen = std::collections::HashSet::new();
        for row in 0..3 {
            for k in 0..20_000 {
                let identity = activation_identity(row, k);
                let groups: Vec<usize> = identity.split('-').map(str::len).collect();
                assert_eq!(groups, [8, 4, 4, 4, 12], "{identity}");
                assert!(
                    seen.insert(identity),
                    "row {row}, k {k} repeats an identity"
                );
            }
        }
    }
}
