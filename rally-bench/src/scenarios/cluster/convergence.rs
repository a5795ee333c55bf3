//! `cluster-convergence`: members on real loopback sockets in this process (each on its own
//! thread and runtime, so a kill drops all of its tasks and sockets at once), and many more in
//! the deterministic simulator, on simulated time.

use std::collections::BTreeSet;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use rally::ActorSystem;
use rally::cluster::sim::MembershipSimulation;
use rally::cluster::{Cluster, ClusterConfig, Member, MemberId, MemberStatus};
use rally::remote::{NodeAddress, RemoteConfig, RemoteNode, RemoteStats};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::ConvergenceArgs;
use crate::report::{Report, Row};
use crate::scenarios::common::current_thread_runtime;

/// The secret every member shares.
const SECRET: &[u8] = b"rally-bench cluster";
/// The cluster's name (every member's system name).
const CLUSTER: &str = "convergence";
/// How often the views are compared on real sockets (the figures' resolution).
const POLL: Duration = Duration::from_millis(5);
/// How often, in simulated time, the simulator's views are compared.
const SIM_POLL: Duration = Duration::from_millis(5);
/// Time limit of each step (forming, join, kill, leave) on real sockets. A kill is decided
/// after the detection bound, `(2N + 1) × probe-period` (51 s for 50 members).
const STEP_LIMIT: Duration = Duration::from_secs(300);
/// Time limit of each step in simulated time (the detection bound of 200 members is 201 s).
const SIM_STEP_LIMIT: Duration = Duration::from_secs(1200);

/// What every live member's view must hold for the members to agree.
#[derive(Debug, Default)]
struct Expect {
    /// Up and reachable in every view.
    up: BTreeSet<MemberId>,
    /// Killed: down in every view.
    down: BTreeSet<MemberId>,
}

/// Whether the views agree: each view, without removed members, is exactly `expect` (every
/// `up` member up and reachable, every `down` member down, no one else), so all views are the
/// same set with the same statuses.
///
/// Views are taken lazily and the check stops at the first that disagrees, so that a check
/// while the members still disagree costs about one view, not all of them.
fn agreed<V: AsRef<[Member]>>(views: impl IntoIterator<Item = V>, expect: &Expect) -> bool {
    let want = expect.up.len() + expect.down.len();
    views.into_iter().all(|view| {
        let mut count = 0;
        for member in view.as_ref() {
            let ok = match member.status {
                MemberStatus::Removed => continue,
                MemberStatus::Up => member.reachable && expect.up.contains(&member.id),
                MemberStatus::Down => expect.down.contains(&member.id),
                _ => false,
            };
            if !ok {
                return false;
            }
            count += 1;
        }
        count == want
    })
}

// ---------------------------------------------------------------------------------------------
// Members on real sockets.

/// What the scenario tells a member's thread.
enum Order {
    /// Leave gracefully, then stop.
    Leave,
    /// Stop at once: the runtime and every task and socket of the member go.
    Kill,
    /// The node's remoting counters.
    NodeStats(oneshot::Sender<RemoteStats>),
}

/// One member: an actor system, a remote node and a cluster member on their own thread and
/// current-thread runtime.
struct LiveMember {
    id: MemberId,
    address: NodeAddress,
    /// `None` once it was killed or left.
    cluster: Option<Cluster>,
    orders: mpsc::UnboundedSender<Order>,
    thread: Option<JoinHandle<()>>,
    /// When `Cluster::join` was called.
    joined_at: Instant,
}

impl LiveMember {
    fn start(seed: Option<&NodeAddress>, config: &ClusterConfig) -> anyhow::Result<Self> {
        let (ready, started) = std::sync::mpsc::channel();
        let (orders, mut inbox) = mpsc::unbounded_channel();
        let mut config = config.clone();
        config.seeds = seed.into_iter().cloned().collect();
        let thread = std::thread::Builder::new()
            .name("member".into())
            .spawn(move || {
                let runtime = current_thread_runtime();
                runtime.block_on(async move {
                    let start = async {
                        let system = ActorSystem::new(CLUSTER);
                        let remote = RemoteConfig::builder()
                            .listen("127.0.0.1", 0)
                            .secret(SECRET.to_vec())
                            .build()?;
                        let node = RemoteNode::start(&system, remote).await?;
                        let joined_at = Instant::now();
                        let cluster = Cluster::join(&system, &node, config)?;
                        anyhow::Ok((system, node, cluster, joined_at))
                    };
                    let (system, node, cluster) = match start.await {
                        Ok((system, node, cluster, at)) => {
                            let _ = ready.send(Ok((cluster.clone(), node.address().clone(), at)));
                            (system, node, cluster)
                        }
                        Err(e) => {
                            let _ = ready.send(Err(e));
                            return;
                        }
                    };
                    while let Some(order) = inbox.recv().await {
                        match order {
                            Order::NodeStats(reply) => {
                                let _ = reply.send(node.stats());
                            }
                            Order::Leave => {
                                let _ = cluster.leave().await;
                                node.leave(Duration::from_secs(1)).await;
                                break;
                            }
                            Order::Kill => break,
                        }
                    }
                    drop((cluster, node, system));
                });
                // Every task of this member (its connections, its membership loop, its
                // actors) is dropped here, and its sockets closed, as a killed process's.
                runtime.shutdown_timeout(Duration::from_secs(1));
            })
            .context("starting a member thread")?;
        let (cluster, address, joined_at) = started
            .recv_timeout(Duration::from_secs(30))
            .context("a member did not start within 30 s")??;
        Ok(Self {
            id: cluster.self_member().id,
            address,
            cluster: Some(cluster),
            orders,
            thread: Some(thread),
            joined_at,
        })
    }

    fn view(&self) -> Vec<Member> {
        self.cluster
            .as_ref()
            .map(Cluster::members)
            .unwrap_or_default()
    }

    fn stop(&mut self, order: Order) {
        self.cluster = None;
        let _ = self.orders.send(order);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }

    fn node_stats(&self) -> anyhow::Result<RemoteStats> {
        let (reply, wait) = oneshot::channel();
        self.orders
            .send(Order::NodeStats(reply))
            .map_err(|_| anyhow::anyhow!("the member has stopped"))?;
        wait.blocking_recv()
            .context("the member did not answer for its counters")
    }
}

impl Drop for LiveMember {
    fn drop(&mut self) {
        self.stop(Order::Kill);
    }
}

/// Polls every [`POLL`] until the live members' views agree with `expect`; the time since
/// `since`.
fn wait_agreed(
    members: &[LiveMember],
    expect: &Expect,
    since: Instant,
    what: &str,
) -> anyhow::Result<Duration> {
    let live = || members.iter().filter(|m| m.cluster.is_some());
    loop {
        if agreed(live().map(LiveMember::view), expect) {
            return Ok(since.elapsed());
        }
        if since.elapsed() > STEP_LIMIT {
            bail!(
                "{what}: the members did not agree within {STEP_LIMIT:?}; first view: {:?}",
                live().next().map(LiveMember::view)
            );
        }
        std::thread::sleep(POLL);
    }
}

/// What one repetition on real sockets measured.
struct RealRep {
    form: Duration,
    join: Duration,
    kill: Duration,
    leave: Duration,
    rest: Option<RestFigures>,
}

/// Traffic per member per second at rest.
#[derive(Debug, Clone, Copy)]
struct RestFigures {
    membership_bytes_out: f64,
    membership_packets_out: f64,
    wire_bytes_written: Option<f64>,
}

/// Forms `n - 1` members, joins one more, measures the rest (if `rest` is given), kills one
/// and makes another leave.
fn real_rep(n: usize, config: &ClusterConfig, rest: Option<Duration>) -> anyhow::Result<RealRep> {
    let start = Instant::now();
    let mut members = vec![LiveMember::start(None, config)?];
    let seed = members[0].address.clone();
    for _ in 1..n - 1 {
        members.push(LiveMember::start(Some(&seed), config)?);
    }
    let mut expect = Expect {
        up: members.iter().map(|m| m.id.clone()).collect(),
        down: BTreeSet::new(),
    };
    let form = wait_agreed(&members, &expect, start, "forming")?;

    let joiner = LiveMember::start(Some(&seed), config)?;
    let since = joiner.joined_at;
    expect.up.insert(joiner.id.clone());
    members.push(joiner);
    let join = wait_agreed(&members, &expect, since, "join")?;

    let rest = match rest {
        Some(period) => Some(measure_rest(&members, period)?),
        None => None,
    };

    // The victim and the leaver are neither the seed nor the member that just joined.
    let since = Instant::now();
    members[1].stop(Order::Kill);
    expect.up.remove(&members[1].id);
    expect.down.insert(members[1].id.clone());
    let kill = wait_agreed(&members, &expect, since, "kill")?;

    let since = Instant::now();
    let _ = members[2].orders.send(Order::Leave);
    members[2].cluster = None;
    expect.up.remove(&members[2].id);
    let leave = wait_agreed(&members, &expect, since, "leave")?;
    Ok(RealRep {
        form,
        join,
        kill,
        leave,
        rest,
    })
}

/// The settings every member runs with, read from `ClusterConfig::default()` (so the report
/// cannot drift from the defaults it ran).
fn defaults_described() -> String {
    let c = ClusterConfig::default();
    format!(
        "ClusterConfig::default() (gossip provider; downing {:?}, stable-after {:?}, probe {:?}, gossip {:?})",
        c.downing, c.stable_after, c.probe_period, c.gossip_period
    )
}

fn measure_rest(members: &[LiveMember], period: Duration) -> anyhow::Result<RestFigures> {
    let snapshot = || -> anyhow::Result<(u64, u64, u64)> {
        let mut totals = (0, 0, 0);
        for member in members {
            let stats = member
                .cluster
                .as_ref()
                .map(Cluster::stats)
                .unwrap_or_default();
            totals.0 += stats.bytes_out;
            totals.1 += stats.packets_out;
            totals.2 += member.node_stats()?.bytes_written;
        }
        Ok(totals)
    };
    let before = snapshot()?;
    let t0 = Instant::now();
    std::thread::sleep(period);
    let after = snapshot()?;
    let per = members.len() as f64 * t0.elapsed().as_secs_f64();
    Ok(RestFigures {
        membership_bytes_out: (after.0 - before.0) as f64 / per,
        membership_packets_out: (after.1 - before.1) as f64 / per,
        wire_bytes_written: Some((after.2 - before.2) as f64 / per),
    })
}

// ---------------------------------------------------------------------------------------------
// Members in the simulator.

/// Runs the simulation until the views of `live` agree with `expect`, checking every
/// [`SIM_POLL`] of simulated time; the simulated time it took.
fn sim_wait(
    sim: &mut MembershipSimulation,
    live: &[MemberId],
    expect: &Expect,
    what: &str,
) -> anyhow::Result<Duration> {
    let since = sim.elapsed();
    let mut next_check = since;
    let done = sim
        .run_until(SIM_STEP_LIMIT, |sim| {
            if sim.elapsed() < next_check {
                return false;
            }
            next_check = sim.elapsed() + SIM_POLL;
            let views = live
                .iter()
                .map(|id| sim.core(id).map(|c| c.members()).unwrap_or_default());
            agreed(views, expect)
        })
        .is_ok();
    if !done {
        bail!(
            "{what}: the simulated members did not agree within {SIM_STEP_LIMIT:?} of simulated time"
        );
    }
    Ok(sim.elapsed() - since)
}

fn sim_rep(n: usize, seed: u64, rest: Option<Duration>) -> anyhow::Result<RealRep> {
    let mut sim = MembershipSimulation::new(seed);
    let config = ClusterConfig::default();
    let mut live = sim.add_members(n - 1, &config);
    let mut expect = Expect {
        up: live.iter().cloned().collect(),
        down: BTreeSet::new(),
    };
    let form = sim_wait(&mut sim, &live, &expect, "forming")?;

    let mut joiner_config = config.clone();
    joiner_config.seeds = vec![live[0].address.clone()];
    let joiner = sim.add_member(&joiner_config);
    live.push(joiner.clone());
    expect.up.insert(joiner);
    let join = sim_wait(&mut sim, &live, &expect, "join")?;

    let rest = rest.map(|period| {
        let total = |sim: &MembershipSimulation| {
            live.iter()
                .filter_map(|id| sim.core(id).map(|c| c.stats()))
                .fold((0u64, 0u64), |acc, s| {
                    (acc.0 + s.bytes_out, acc.1 + s.packets_out)
                })
        };
        let before = total(&sim);
        sim.run_for(period);
        let after = total(&sim);
        let per = live.len() as f64 * period.as_secs_f64();
        RestFigures {
            membership_bytes_out: (after.0 - before.0) as f64 / per,
            membership_packets_out: (after.1 - before.1) as f64 / per,
            wire_bytes_written: None,
        }
    });

    let victim = live.remove(1);
    sim.crash(&victim);
    expect.up.remove(&victim);
    expect.down.insert(victim);
    let kill = sim_wait(&mut sim, &live, &expect, "kill")?;

    let leaver = live.remove(1);
    sim.leave(&leaver);
    expect.up.remove(&leaver);
    let leave = sim_wait(&mut sim, &live, &expect, "leave")?;
    Ok(RealRep {
        form,
        join,
        kill,
        leave,
        rest,
    })
}

// ---------------------------------------------------------------------------------------------
// The scenario.

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Median, min and max of `values` (not empty).
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

fn event_rows(rows: &mut Vec<Row>, n: usize, layout: &str, reps: &[RealRep]) {
    type Pick = fn(&RealRep) -> Duration;
    let events: [(&str, Pick); 4] = [
        ("form", |r| r.form),
        ("join", |r| r.join),
        ("kill", |r| r.kill),
        ("leave", |r| r.leave),
    ];
    for (event, pick) in events {
        let values: Vec<f64> = reps.iter().map(|r| ms(pick(r))).collect();
        let (median, min, max) = spread(&values);
        let mut row = Row::new(format!("{layout} N={n} {event}"))
            .with("layout", layout)
            .with("members", n as u64)
            .with("event", event)
            .with("median_ms", median)
            .with("min_ms", min)
            .with("max_ms", max)
            .with("values_ms", values);
        row.clients = Some(n as u64);
        row.elapsed_ms = Some(median);
        rows.push(row);
    }
    if let Some(rest) = reps.iter().find_map(|r| r.rest) {
        let mut row = Row::new(format!("{layout} N={n} at rest"))
            .with("layout", layout)
            .with("members", n as u64)
            .with("event", "rest")
            .with(
                "membership_bytes_per_sec_per_member",
                rest.membership_bytes_out,
            )
            .with(
                "membership_packets_per_sec_per_member",
                rest.membership_packets_out,
            )
            .with(
                "wire_bytes_per_sec_per_member",
                rest.wire_bytes_written.map_or(Value::Null, Value::from),
            );
        row.clients = Some(n as u64);
        rows.push(row);
    }
}

/// Runs `cluster-convergence`.
pub(crate) fn convergence(args: &ConvergenceArgs) -> anyhow::Result<()> {
    let quick = args.common.quick;
    let real = match (args.members.is_empty(), quick) {
        (false, _) => args.members.clone(),
        (true, true) => vec![3, 10],
        (true, false) => vec![3, 10, 50],
    };
    let simulated = match (args.sim_members.is_empty(), quick) {
        (false, _) => args.sim_members.clone(),
        (true, true) => vec![50],
        (true, false) => vec![200],
    };
    if real.iter().chain(&simulated).any(|&n| n < 3) {
        bail!(
            "--members and --sim-members: every count must be at least 3 (one is killed, one leaves)"
        );
    }
    let reps = args.reps.unwrap_or(if quick { 1 } else { 3 });
    let sim_reps = args.sim_reps;
    if reps == 0 || sim_reps == 0 {
        bail!("--reps and --sim-reps must be at least 1");
    }
    let rest_seconds = args.rest_seconds.unwrap_or(if quick { 1.0 } else { 10.0 });
    if !(rest_seconds > 0.0 && rest_seconds.is_finite()) {
        bail!("--rest-seconds must be a positive number, not {rest_seconds}");
    }
    let rest = Duration::from_secs_f64(rest_seconds);
    // Many members in this process: one downed (a false suspicion on a loaded machine) stops
    // rather than end the benchmark.
    let mut config = ClusterConfig::default();
    config.when_downed = rally::cluster::WhenDowned::Stop;

    let mut report = Report::new("cluster-convergence");
    report
        .param("reps", reps as u64)
        .param("sim_reps", sim_reps as u64)
        .param("rest_seconds", rest_seconds)
        .param("config", defaults_described())
        .param(
            "real",
            "in this process, one thread + current-thread runtime + ActorSystem + RemoteNode + Cluster per member, loopback TCP; a kill drops the member's runtime (its tasks and sockets)",
        )
        .param(
            "sim",
            "rally::cluster::sim::MembershipSimulation, seed = repetition number, latency 0.2-5 ms; times are simulated",
        )
        .param(
            "agree",
            "every live member's view, removed members left out, is the same: every live member up and reachable, the killed one down, nobody else",
        )
        .param("resolution_ms", ms(POLL));

    let mut rows = Vec::new();
    for &n in &real {
        let mut done = Vec::new();
        for rep in 0..reps {
            eprintln!(
                "cluster-convergence: {n} members on loopback, repetition {}/{reps}...",
                rep + 1
            );
            done.push(real_rep(n, &config, (rep == 0).then_some(rest))?);
        }
        event_rows(&mut rows, n, "loopback", &done);
    }
    for &n in &simulated {
        let mut done = Vec::new();
        for rep in 0..sim_reps {
            eprintln!(
                "cluster-convergence: {n} simulated members, repetition {}/{sim_reps}...",
                rep + 1
            );
            let wall = Instant::now();
            done.push(sim_rep(n, rep as u64 + 1, (rep == 0).then_some(rest))?);
            eprintln!(
                "cluster-convergence: ({:.1} s of wall time)",
                wall.elapsed().as_secs_f64()
            );
        }
        event_rows(&mut rows, n, "sim", &done);
    }
    report.rows = rows;
    if args.common.json {
        report.print(true);
    } else {
        print!("{}", table(&report));
    }
    Ok(())
}

/// The plain table: one line per event row, then one per at-rest row.
fn table(report: &Report) -> String {
    let number = |row: &Row, key: &str| {
        row.extra
            .get(key)
            .and_then(Value::as_f64)
            .map_or_else(|| "-".to_owned(), |v| format!("{v:.1}"))
    };
    let mut out = format!(
        "# cluster-convergence (rally) on {} cores, {}\n\
         # time until every live member's view agrees (loopback: real ms; sim: simulated ms)\n\
         label, median [ms], min [ms], max [ms]\n",
        report.machine.cores, report.machine.cpu
    );
    let rest = |row: &&Row| row.extra.get("event").and_then(Value::as_str) == Some("rest");
    for row in report.rows.iter().filter(|r| !rest(r)) {
        out.push_str(&format!(
            "{}, {}, {}, {}\n",
            row.label,
            number(row, "median_ms"),
            number(row, "min_ms"),
            number(row, "max_ms")
        ));
    }
    out.push_str(
        "# at rest, per member (membership: the protocol's packets; wire: every byte the node wrote)\n\
         label, membership [B/s], membership [packets/s], wire [B/s]\n",
    );
    for row in report.rows.iter().filter(rest) {
        out.push_str(&format!(
            "{}, {}, {}, {}\n",
            row.label,
            number(row, "membership_bytes_per_sec_per_member"),
            number(row, "membership_packets_per_sec_per_member"),
            number(row, "wire_bytes_per_sec_per_member")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use rally::remote::Incarnation;

    use super::*;

    fn id(port: u16) -> MemberId {
        MemberId::new(
            format!("rally://c@127.0.0.1:{port}").parse().unwrap(),
            Incarnation(u64::from(port)),
            1,
        )
    }

    #[test]
    fn views_agree_only_when_each_is_exactly_the_expectation() {
        let expect = Expect {
            up: [id(1), id(2)].into(),
            down: [id(3)].into(),
        };
        let good = vec![
            Member::new(id(1), MemberStatus::Up, true),
            Member::new(id(2), MemberStatus::Up, true),
            Member::new(id(3), MemberStatus::Down, false),
            Member::new(id(4), MemberStatus::Removed, false),
        ];
        assert!(agreed([good.as_slice(), good.as_slice()], &expect));
        // One view still sees the victim up but unreachable.
        let mut late = good.clone();
        late[2] = Member::new(id(3), MemberStatus::Up, false);
        assert!(!agreed([good.as_slice(), late.as_slice()], &expect));
        // One view misses a member.
        assert!(!agreed([good.as_slice(), &good[1..]], &expect));
        // An up member that is unreachable does not count.
        let mut unreachable = good.clone();
        unreachable[0].reachable = false;
        assert!(!agreed([unreachable.as_slice()], &expect));
        // A stranger in a view.
        let mut extra = good;
        extra.push(Member::new(id(5), MemberStatus::Joining, true));
        assert!(!agreed([extra.as_slice()], &expect));
    }

    #[test]
    fn spread_gives_median_min_max() {
        assert_eq!(spread(&[3.0, 1.0, 2.0]), (2.0, 1.0, 3.0));
        assert_eq!(spread(&[4.0, 1.0, 2.0, 3.0]), (2.5, 1.0, 4.0));
    }
}
