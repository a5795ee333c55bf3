//! `failover`: three member processes host a virtual-actor kind; this process, a client-only
//! member, finds an identity owned by one of them, SIGKILLs that process, and measures until the
//! two survivors have downed it and the identity answers again from one of them.

use std::ffi::OsStr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use rally::cluster::virtual_actors::{
    Activation, GrainMessages, VirtualActor, VirtualActors, VirtualActorsConfig,
};
use rally::cluster::{Cluster, ClusterConfig, Member, MemberEvent, MemberId, MemberStatus};
use rally::remote::{
    MessageTable, NodeAddress, RemoteActor, RemoteConfig, RemoteMessage, RemoteNode,
};
use rally::state::SqliteStore;
use rally::{Actor, ActorRef, ActorResult, ActorSystem, Context, Handler, Message};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::{FailoverArgs, FailoverMemberArgs, FailoverSetting};
use crate::report::{Report, Row};
use crate::scenarios::common::{MemberProcesses, multi_thread_runtime, on_worker, spawn_members};
use rally::sync::Mutex;

/// The secret the four processes share.
const SECRET: &[u8] = b"rally-bench failover";
/// The cluster's name (every process's system name).
const SYSTEM: &str = "failover";
/// The name each member exposes its stats actor under.
const STATS: &str = "failover-stats";
/// Member processes hosting the kind.
const MEMBERS: usize = 3;
/// The member killed: the last one started (not the seed).
const VICTIM: usize = 2;
/// A request is sent this often after the kill, each in its own task.
const PROBE_EVERY: Duration = Duration::from_millis(10);
/// Each request's own time limit: longer than any failover, so a request held by a survivor
/// until it may take the identity over still gets its answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long after the kill the identity must answer and both survivors have downed the victim.
const FAILOVER_LIMIT: Duration = Duration::from_secs(90);
/// How long the four processes may take to see each other up.
const FORM_LIMIT: Duration = Duration::from_secs(60);

/// The scenario's virtual actor: answers with the member it runs on.
pub(crate) struct WhereGrain {
    owner: String,
}

impl Actor for WhereGrain {}

impl VirtualActor for WhereGrain {
    const KIND: &'static str = "where";

    async fn activate(activation: Activation) -> ActorResult<Self> {
        Ok(Self {
            owner: activation.owner().to_owned(),
        })
    }

    fn messages(table: &mut GrainMessages<Self>) {
        table.add::<Where>();
    }
}

/// Which member holds this activation? The reply is its owner key (`address#incarnation`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct Where;

impl Message for Where {
    type Reply = String;
}

impl RemoteMessage for Where {
    const MANIFEST: &'static str = "bench.Where";
}

impl Handler<Where> for WhereGrain {
    async fn handle(&mut self, _: Where, _ctx: &mut Context<Self>) -> ActorResult<String> {
        Ok(self.owner.clone())
    }
}

/// A member's view and the member events it saw, each with the wall-clock instant (ns since
/// the Unix epoch: the processes share one machine, so one clock).
struct MemberStats {
    cluster: Cluster,
    seen: Arc<Mutex<Vec<(MemberEvent, u64)>>>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct StatsQuery;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct StatsReply {
    view: Vec<Member>,
    seen: Vec<(MemberEvent, u64)>,
}

impl Message for StatsQuery {
    type Reply = StatsReply;
}

impl RemoteMessage for StatsQuery {
    const MANIFEST: &'static str = "bench.FailoverStats";
}

impl Actor for MemberStats {}

impl Handler<StatsQuery> for MemberStats {
    async fn handle(&mut self, _: StatsQuery, _ctx: &mut Context<Self>) -> ActorResult<StatsReply> {
        let seen = self.seen.lock().clone();
        Ok(StatsReply {
            view: self.cluster.members(),
            seen,
        })
    }
}

impl RemoteActor for MemberStats {
    fn messages(table: &mut MessageTable<Self>) {
        table.add::<StatsQuery>();
    }
}

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Records every member event `cluster` sees, with its wall-clock instant.
fn record_events(cluster: &Cluster) -> Arc<Mutex<Vec<(MemberEvent, u64)>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    let mut events = cluster.events();
    tokio::spawn(async move {
        while let Some(event) = events.next().await {
            log.lock().push((event, unix_ns()));
        }
    });
    seen
}

/// The cluster and virtual-actor settings of `setting`.
fn settings(
    setting: FailoverSetting,
    seed: Option<&NodeAddress>,
    host: bool,
) -> anyhow::Result<(ClusterConfig, VirtualActorsConfig)> {
    let mut builder = ClusterConfig::builder();
    if let Some(seed) = seed {
        builder.seed(seed.clone());
    }
    if host {
        builder.kind(WhereGrain::KIND);
    }
    let mut grains = VirtualActorsConfig::default();
    match setting {
        FailoverSetting::Default => {}
        FailoverSetting::StableAfter1s => {
            builder.stable_after(Duration::from_secs(1));
        }
        FailoverSetting::Fast => {
            builder
                .stable_after(Duration::from_secs(1))
                .probe(Duration::from_millis(100), Duration::from_millis(50));
            grains.deactivation_timeout = Duration::from_millis(500);
        }
    }
    Ok((builder.build()?, grains))
}

fn setting_name(setting: FailoverSetting) -> &'static str {
    match setting {
        FailoverSetting::Default => "default",
        FailoverSetting::StableAfter1s => "stable-after 1s",
        FailoverSetting::Fast => "stable-after 1s, probe 100ms, deactivation 500ms",
    }
}

fn setting_arg(setting: FailoverSetting) -> String {
    use clap::ValueEnum as _;
    setting
        .to_possible_value()
        .map_or_else(String::new, |v| v.get_name().to_owned())
}

/// `failover-member`: hosts the kind `where` until stdin closes; prints `LISTENING <address>`
/// once it serves.
pub(crate) fn member_main(args: &FailoverMemberArgs) -> anyhow::Result<()> {
    let runtime = multi_thread_runtime();
    runtime.block_on(async {
        let system = ActorSystem::new(SYSTEM);
        let node = RemoteNode::start(
            &system,
            RemoteConfig::builder()
                .listen("127.0.0.1", 0)
                .secret(SECRET.to_vec())
                .build()?,
        )
        .await?;
        let seed: Option<NodeAddress> = match &args.seed {
            Some(seed) => Some(seed.parse().map_err(|e| anyhow::anyhow!("--seed: {e:?}"))?),
            None => None,
        };
        let (config, grains_config) = settings(args.setting, seed.as_ref(), true)?;
        let cluster = Cluster::join(&system, &node, config.clone())?;
        let seen = record_events(&cluster);
        let _grains = VirtualActors::builder(&cluster, &system)
            .kind::<WhereGrain>()
            .store(Arc::new(SqliteStore::open(&args.db)?))
            .config(grains_config)
            .membership(&config)
            .start(&node)?;
        let stats = system.spawn(MemberStats { cluster, seen })?;
        node.expose(STATS, &stats)?;
        println!("LISTENING {}", node.address());
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        while lines.next_line().await?.is_some() {}
        Ok(())
    })
}

/// What one repetition measured, in ms from the kill.
#[derive(Debug, Clone)]
struct Rep {
    /// The first survivor's `Unreachable` of the victim.
    unreachable_ms: Option<f64>,
    /// Both survivors have seen the victim down (the later of the two).
    downed_ms: f64,
    /// The client member (this process) saw the victim down.
    client_downed_ms: Option<f64>,
    /// The first reply to a request for the victim's identity, from a survivor.
    served_ms: f64,
    /// Events that should not have happened: a survivor or the client downed or removed, a
    /// survivor that stopped; empty when there was no split brain.
    anomalies: Vec<String>,
}

/// The four processes of one repetition; dropping it kills the members and removes the store.
struct Run {
    processes: MemberProcesses,
    stats: Vec<ActorRef<MemberStats>>,
    grains: VirtualActors,
    cluster: Cluster,
    client_seen: Arc<Mutex<Vec<(MemberEvent, u64)>>>,
    _node: RemoteNode,
    _system: ActorSystem,
}

impl Run {
    async fn start(setting: FailoverSetting, rep: usize) -> anyhow::Result<Self> {
        let setting_arg = setting_arg(setting);
        let processes = spawn_members(
            "failover-member",
            MEMBERS,
            &format!("failover-{rep}"),
            &[OsStr::new("--setting"), OsStr::new(&setting_arg)],
        )
        .await?;
        let system = ActorSystem::new(SYSTEM);
        let node = RemoteNode::start(
            &system,
            RemoteConfig::builder()
                .listen("127.0.0.1", 0)
                .secret(SECRET.to_vec())
                .build()?,
        )
        .await?;
        let (config, grains_config) = settings(setting, Some(&processes.addresses[0]), false)?;
        let cluster = Cluster::join(&system, &node, config.clone())?;
        let client_seen = record_events(&cluster);
        let grains = VirtualActors::builder(&cluster, &system)
            .config(grains_config)
            .membership(&config)
            .start(&node)?;
        let stats = processes
            .addresses
            .iter()
            .map(|address| node.lookup::<MemberStats>(address, STATS))
            .collect();
        let run = Self {
            processes,
            stats,
            grains,
            cluster,
            client_seen,
            _node: node,
            _system: system,
        };
        run.wait_formed().await?;
        Ok(run)
    }

    /// Polls until this member and the three see all four up and reachable.
    async fn wait_formed(&self) -> anyhow::Result<()> {
        let all_up = |view: &[Member]| {
            view.len() == MEMBERS + 1
                && view
                    .iter()
                    .all(|m| m.status == MemberStatus::Up && m.reachable)
        };
        let deadline = Instant::now() + FORM_LIMIT;
        loop {
            let mut formed = all_up(&self.cluster.members());
            if formed {
                for stats in &self.stats {
                    let reply = stats.ask(StatsQuery, Duration::from_secs(5)).await?;
                    formed &= all_up(&reply.view);
                }
            }
            if formed {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "the cluster did not form within {FORM_LIMIT:?}; this member's view: {:?}",
                    self.cluster.members()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// An identity the victim holds: `fo-0`, `fo-1`, … until one answers from it.
    async fn victim_identity(&self, victim: &str) -> anyhow::Result<String> {
        for k in 0..300 {
            let identity = format!("fo-{k}");
            let owner = self
                .grains
                .get::<WhereGrain>(&identity)?
                .ask(Where, Duration::from_secs(5))
                .await
                .with_context(|| format!("activating {identity}"))?;
            if owner.starts_with(victim) {
                return Ok(identity);
            }
        }
        bail!("none of 300 identities was placed on the victim {victim}")
    }

    async fn measure(&mut self) -> anyhow::Result<Rep> {
        let victim_address = self.processes.addresses[VICTIM].clone();
        let victim = format!("{victim_address}#");
        let identity = self.victim_identity(&victim).await?;
        let grain = self.grains.get::<WhereGrain>(&identity)?;

        let killed_wall = unix_ns();
        let killed = Instant::now();
        self.processes.children[VICTIM]
            .start_kill()
            .context("sending SIGKILL to the victim")?;

        let (replies, mut answers) = mpsc::unbounded_channel();
        let prober = tokio::spawn(async move {
            let mut requests = JoinSet::new();
            loop {
                let grain = grain.clone();
                let replies = replies.clone();
                requests.spawn(async move {
                    let reply = grain.ask(Where, PROBE_TIMEOUT).await;
                    let _ = replies.send((Instant::now(), reply));
                });
                tokio::time::sleep(PROBE_EVERY).await;
                // Reap the finished ones so the set stays small.
                while requests.try_join_next().is_some() {}
            }
        });
        let served = loop {
            let next = tokio::time::timeout_at((killed + FAILOVER_LIMIT).into(), answers.recv());
            match next.await {
                Ok(Some((at, Ok(owner)))) if !owner.starts_with(&victim) => break at - killed,
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => {
                    prober.abort();
                    bail!("{identity} did not answer from a survivor within {FAILOVER_LIMIT:?}");
                }
            }
        };
        prober.abort();

        let is_victim = |id: &MemberId| id.address == victim_address;
        let gone_at = |seen: &[(MemberEvent, u64)]| {
            seen.iter().find_map(|(event, at)| match event {
                MemberEvent::Down(id) | MemberEvent::Removed(id) if is_victim(id) => Some(*at),
                _ => None,
            })
        };
        let survivors: Vec<usize> = (0..MEMBERS).filter(|&i| i != VICTIM).collect();
        let replies = loop {
            let mut replies = Vec::new();
            for &i in &survivors {
                replies.push(
                    self.stats[i]
                        .ask(StatsQuery, Duration::from_secs(5))
                        .await
                        .with_context(|| format!("asking survivor {i}"))?,
                );
            }
            if replies.iter().all(|r| gone_at(&r.seen).is_some()) {
                break replies;
            }
            if killed.elapsed() > FAILOVER_LIMIT {
                bail!("the survivors did not both down the victim within {FAILOVER_LIMIT:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let since_kill = |at: u64| at.saturating_sub(killed_wall) as f64 / 1e6;
        let downed_ms = replies
            .iter()
            .filter_map(|r| gone_at(&r.seen))
            .map(since_kill)
            .fold(0.0, f64::max);
        let unreachable_ms = replies
            .iter()
            .filter_map(|r| {
                r.seen.iter().find_map(|(event, at)| match event {
                    MemberEvent::Unreachable(id) if is_victim(id) => Some(since_kill(*at)),
                    _ => None,
                })
            })
            .reduce(f64::min);
        let client_seen = self.client_seen.lock().clone();
        let client_downed_ms = gone_at(&client_seen).map(since_kill);

        // No split brain: nobody but the victim was downed or removed, and every survivor
        // still sees the other survivor and the client up.
        let mut anomalies = Vec::new();
        for (who, seen) in replies
            .iter()
            .map(|r| r.seen.as_slice())
            .chain([client_seen.as_slice()])
            .enumerate()
        {
            for (event, _) in seen {
                if let MemberEvent::Down(id) | MemberEvent::Removed(id) = event
                    && !is_victim(id)
                {
                    anomalies.push(format!("observer {who} saw {event:?}"));
                }
            }
        }
        for (who, reply) in replies.iter().enumerate() {
            let up = reply
                .view
                .iter()
                .filter(|m| !is_victim(&m.id) && m.status == MemberStatus::Up)
                .count();
            if up != MEMBERS {
                anomalies.push(format!(
                    "survivor {who} sees {up} members up besides the victim, not {MEMBERS}"
                ));
            }
        }
        Ok(Rep {
            unreachable_ms,
            downed_ms,
            client_downed_ms,
            served_ms: served.as_secs_f64() * 1e3,
            anomalies,
        })
    }
}

/// Median, min and max (of a non-empty list).
fn spread(values: &[f64]) -> (f64, f64, f64) {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    let median = if sorted.len() % 2 == 0 {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    } else {
        sorted[mid]
    };
    (median, sorted[0], sorted[sorted.len() - 1])
}

fn setting_row(setting: FailoverSetting, reps: &[Rep]) -> anyhow::Result<Row> {
    let (config, grains) = settings(setting, None, true)?;
    // The takeover wait the host applies: the membership's margin for the members it has
    // seen (3 members and this client) plus the deactivation timeout.
    let takeover = config.takeover_margin(MEMBERS + 1) + grains.deactivation_timeout;
    let served: Vec<f64> = reps.iter().map(|r| r.served_ms).collect();
    let downed: Vec<f64> = reps.iter().map(|r| r.downed_ms).collect();
    let unreachable: Vec<f64> = reps.iter().filter_map(|r| r.unreachable_ms).collect();
    let client: Vec<f64> = reps.iter().filter_map(|r| r.client_downed_ms).collect();
    let anomalies: Vec<String> = reps.iter().flat_map(|r| r.anomalies.clone()).collect();
    let (served_median, served_min, served_max) = spread(&served);
    let (downed_median, downed_min, downed_max) = spread(&downed);
    let median_of = |v: &[f64]| {
        if v.is_empty() {
            Value::Null
        } else {
            spread(v).0.into()
        }
    };
    let mut row = Row::new(setting_name(setting))
        .with("setting", setting_arg(setting))
        .with("reps", reps.len() as u64)
        .with("served_ms_median", served_median)
        .with("served_ms_min", served_min)
        .with("served_ms_max", served_max)
        .with("served_ms", served)
        .with("downed_ms_median", downed_median)
        .with("downed_ms_min", downed_min)
        .with("downed_ms_max", downed_max)
        .with("downed_ms", downed)
        .with("unreachable_ms_median", median_of(&unreachable))
        .with("client_downed_ms_median", median_of(&client))
        .with("split_brain", !anomalies.is_empty())
        .with("anomalies", anomalies)
        .with("stable_after_ms", config.stable_after.as_millis() as u64)
        .with("probe_period_ms", config.probe_period.as_millis() as u64)
        .with(
            "deactivation_timeout_ms",
            grains.deactivation_timeout.as_millis() as u64,
        )
        .with("takeover_wait_ms", takeover.as_millis() as u64);
    row.elapsed_ms = Some(served_median);
    Ok(row)
}

/// Runs `failover`.
pub(crate) fn failover(args: &FailoverArgs) -> anyhow::Result<()> {
    let quick = args.common.quick;
    let settings_to_run = match (args.settings.is_empty(), quick) {
        (false, _) => args.settings.clone(),
        (true, true) => vec![FailoverSetting::Fast],
        (true, false) => vec![
            FailoverSetting::Default,
            FailoverSetting::StableAfter1s,
            FailoverSetting::Fast,
        ],
    };
    let reps = args.reps.unwrap_or(if quick { 1 } else { 5 });
    if reps == 0 {
        bail!("--reps must be at least 1");
    }
    let mut report = Report::new("failover");
    report
        .param(
            "layout",
            "3 member processes hosting the kind + this process as a client-only member, loopback TCP, one SQLite store file shared by the members",
        )
        .param("reps", reps as u64)
        .param("probe_every_ms", PROBE_EVERY.as_millis() as u64)
        .param(
            "served",
            "ms from the SIGKILL to the first reply, from a survivor, to a request for an identity the victim held (a request every 10 ms)",
        )
        .param(
            "downed",
            "ms from the SIGKILL until both survivors have seen the victim down (their own event instants)",
        );
    let runtime = multi_thread_runtime();
    report.rows = on_worker(&runtime, async move {
        let mut rows = Vec::new();
        for setting in settings_to_run {
            let mut done = Vec::new();
            for rep in 0..reps {
                eprintln!(
                    "failover: {}, repetition {}/{reps}: starting 3 members...",
                    setting_name(setting),
                    rep + 1
                );
                let mut run = Run::start(setting, rep).await?;
                let measured = run.measure().await?;
                eprintln!(
                    "failover: served after {:.0} ms, downed by both after {:.0} ms",
                    measured.served_ms, measured.downed_ms
                );
                done.push(measured);
            }
            rows.push(setting_row(setting, &done)?);
        }
        anyhow::Ok(rows)
    })?;
    if args.common.json {
        report.print(true);
    } else {
        print!("{}", table(&report));
    }
    Ok(())
}

fn table(report: &Report) -> String {
    let get = |row: &Row, key: &str| {
        row.extra
            .get(key)
            .and_then(Value::as_f64)
            .map_or_else(|| "-".to_owned(), |v| format!("{v:.0}"))
    };
    let mut out = format!(
        "# failover (rally) on {} cores, {}: ms from SIGKILL of 1 of 3 members, median (min-max)\n\
         setting, served [ms], downed by both [ms], first unreachable [ms], takeover wait [ms], split brain\n",
        report.machine.cores, report.machine.cpu
    );
    for row in &report.rows {
        out.push_str(&format!(
            "{}, {} ({}-{}), {} ({}-{}), {}, {}, {}\n",
            row.label,
            get(row, "served_ms_median"),
            get(row, "served_ms_min"),
            get(row, "served_ms_max"),
            get(row, "downed_ms_median"),
            get(row, "downed_ms_min"),
            get(row, "downed_ms_max"),
            get(row, "unreachable_ms_median"),
            get(row, "takeover_wait_ms"),
            row.extra
                .get("split_brain")
                .and_then(Value::as_bool)
                .map_or("-", |b| if b { "YES" } else { "no" }),
        ));
    }
    out
}
