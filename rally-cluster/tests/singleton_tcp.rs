//! The cluster singleton on real loopback TCP: three members, the singleton on the oldest;
//! messages through a proxy on another member reach it; the host hands over on leave, the
//! next oldest takes over, messages sent while it moves are kept and delivered, and the log
//! of start/stop instants shows no overlap; the same when the host leaves with a plain
//! `Cluster::leave` while its instance takes a while to stop.

#[path = "support/nodes.rs"]
mod nodes;

use std::time::{Duration, Instant};

use rally_actor::{Actor, ActorResult, Context, Handler, Message};
use rally_cluster::{ClusterSingleton, SingletonProxy};
use rally_remote::{MessageTable, RemoteActor, RemoteMessage};
use rally_test::eventually;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Log {
    Start(u16, Instant),
    Stop(u16, Instant),
    Tick(u16, u32),
}

#[derive(Serialize, Deserialize)]
struct Tick(u32);
impl Message for Tick {
    type Reply = ();
}
impl RemoteMessage for Tick {
    const MANIFEST: &'static str = "rally.test.singleton.Tick";
}

struct Counter {
    port: u16,
    log: mpsc::UnboundedSender<Log>,
    /// How long its `stopped` hook takes.
    stopping: Duration,
    /// How long each tick takes.
    work: Duration,
}
impl Actor for Counter {
    async fn stopped(&mut self, _: &mut Context<Self>) {
        tokio::time::sleep(self.stopping).await;
    }
}
impl Handler<Tick> for Counter {
    async fn handle(&mut self, tick: Tick, _: &mut Context<Self>) -> ActorResult<()> {
        if !self.work.is_zero() {
            tokio::time::sleep(self.work).await;
        }
        let _ = self.log.send(Log::Tick(self.port, tick.0));
        Ok(())
    }
}
impl RemoteActor for Counter {
    fn messages(table: &mut MessageTable<Self>) {
        table.add::<Tick>();
    }
}
impl Drop for Counter {
    fn drop(&mut self) {
        let _ = self.log.send(Log::Stop(self.port, Instant::now()));
    }
}

/// Reads the log until `n` ticks arrived; returns the ports they arrived at and every entry.
async fn ticks(log: &mut mpsc::UnboundedReceiver<Log>, n: usize, all: &mut Vec<Log>) -> Vec<u16> {
    let mut at = Vec::new();
    let done = tokio::time::timeout(nodes::T, async {
        while at.len() < n {
            let entry = log.recv().await.expect("log open");
            if let Log::Tick(port, _) = entry {
                at.push(port);
            }
            all.push(entry);
        }
    })
    .await;
    assert!(
        done.is_ok(),
        "{} of {n} ticks arrived; log {all:?}",
        at.len()
    );
    at
}

/// Waits (at most [`nodes::T`]) until the proxy's view of the host's port satisfies `wanted`
/// (`None` while the singleton moves); fails with `what` otherwise.
async fn until_proxy(
    proxy: &SingletonProxy<Counter>,
    what: &str,
    wanted: impl Fn(Option<u16>) -> bool,
) {
    eventually(what, nodes::T, async || {
        let port = proxy.location().map(|l| l.port);
        if wanted(port) { Ok(()) } else { Err(port) }
    })
    .await;
}

/// The singleton on each of `members`, logging to `log_tx`, each instance taking `stopping`
/// to stop and `work` for each tick.
fn singletons(
    members: &[nodes::TestMember],
    log_tx: &mpsc::UnboundedSender<Log>,
    stopping: Duration,
    work: Duration,
) -> Vec<ClusterSingleton<Counter>> {
    members
        .iter()
        .map(|m| {
            let (tx, port) = (log_tx.clone(), m.node.address().port);
            ClusterSingleton::start(
                &m.system,
                &m.node,
                &m.cluster,
                nodes::config(&[]),
                "counter",
                None,
                move || {
                    let _ = tx.send(Log::Start(port, Instant::now()));
                    Counter {
                        port,
                        log: tx.clone(),
                        stopping,
                        work,
                    }
                },
            )
        })
        .collect()
}

/// Three members in age order, their ports, the singleton on each (instances taking
/// `stopping` to stop and `work` for each tick) and the log they write.
async fn three_members(
    stopping: Duration,
    work: Duration,
) -> (
    Vec<nodes::TestMember>,
    Vec<u16>,
    Vec<ClusterSingleton<Counter>>,
    mpsc::UnboundedReceiver<Log>,
) {
    let mut members = nodes::cluster_of(3).await;
    members.sort_by_key(|m| m.id());
    let ports = members.iter().map(|m| m.node.address().port).collect();
    let (log_tx, log) = mpsc::unbounded_channel();
    let singletons = singletons(&members, &log_tx, stopping, work);
    (members, ports, singletons, log)
}

/// From the log of instants: one start on each of the two hosts, the first stopped before
/// the second started.
fn assert_handed_over(all: &[Log], from: u16, to: u16) {
    let starts: Vec<&Log> = all.iter().filter(|l| matches!(l, Log::Start(..))).collect();
    let stops: Vec<&Log> = all.iter().filter(|l| matches!(l, Log::Stop(..))).collect();
    assert!(
        matches!(starts[..], [Log::Start(a, _), Log::Start(b, _)] if *a == from && *b == to),
        "{all:?}"
    );
    let Some(Log::Stop(stopped, stop_at)) = stops.first() else {
        panic!("the old instance had not stopped when the new one ran: {all:?}")
    };
    let Log::Start(_, start_at) = starts[1] else {
        unreachable!("filtered")
    };
    assert_eq!(*stopped, from);
    assert!(
        stop_at < start_at,
        "the old instance stopped before the new one started: {all:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_singleton_runs_on_the_oldest_and_hands_over_on_leave_without_overlap() {
    let (members, ports, singletons, mut log) = three_members(Duration::ZERO, Duration::ZERO).await;
    let mut all = Vec::new();
    // The proxy on the youngest member: the first ticks may wait in it until the oldest runs
    // the singleton; all of them reach the oldest.
    let proxy = singletons[2].proxy();
    for i in 0..10 {
        proxy.tell(Tick(i)).expect("buffer has room");
    }
    assert_eq!(ticks(&mut log, 10, &mut all).await, [ports[0]; 10]);
    let mut singletons = singletons.into_iter();
    let oldest = singletons.next().expect("three");
    assert!(oldest.is_hosting());
    // The oldest hands over and leaves; the proxy keeps what is sent while it moves.
    oldest.leave(Duration::from_secs(5)).await;
    until_proxy(
        &proxy,
        "the proxy saw the singleton leave the oldest",
        |port| port != Some(ports[0]),
    )
    .await;
    for i in 10..20 {
        proxy.tell(Tick(i)).expect("buffer has room");
    }
    assert_eq!(ticks(&mut log, 10, &mut all).await, [ports[1]; 10]);
    assert_handed_over(&all, ports[0], ports[1]);
    drop((singletons, members));
}

/// A plain `Cluster::leave` on the host (not `ClusterSingleton::leave`), with an instance
/// whose `stopped` hook takes 300 ms: the leave stops it before it is announced, so the next
/// oldest, which starts it once it sees the host removed, never runs it at the same time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_cluster_leave_stops_the_singleton_here_before_the_next_oldest_starts_it() {
    let (members, ports, singletons, mut log) =
        three_members(Duration::from_millis(300), Duration::ZERO).await;
    let mut all = Vec::new();
    let proxy = singletons[2].proxy();
    proxy.tell(Tick(0)).expect("buffer has room");
    assert_eq!(ticks(&mut log, 1, &mut all).await, [ports[0]]);

    members[0].cluster.leave().await.expect("leaves");
    until_proxy(
        &proxy,
        "the proxy saw the singleton on the next oldest",
        |port| port == Some(ports[1]),
    )
    .await;
    proxy.tell(Tick(1)).expect("buffer has room");
    assert_eq!(ticks(&mut log, 1, &mut all).await, [ports[1]]);
    assert_handed_over(&all, ports[0], ports[1]);
    drop((singletons, members));
}

/// A handover lets the old instance finish what its mailbox already holds: 200 ticks sent
/// through a proxy on another member, each taking the instance 2 ms, and the host leaves as
/// soon as the first has been handled (most still queued there). Every tick is handled once,
/// in order, by the old instance, before the new one starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handover_finishes_the_messages_the_old_instance_holds() {
    let (members, ports, singletons, mut log) =
        three_members(Duration::ZERO, Duration::from_millis(2)).await;
    let proxy = singletons[2].proxy();
    let mut all = Vec::new();
    // Confirmed on the oldest first, so the ticks go straight to it, not into the proxy.
    until_proxy(&proxy, "the proxy confirmed the oldest as host", |port| {
        port == Some(ports[0])
    })
    .await;
    for i in 0..200 {
        proxy.tell(Tick(i)).expect("buffer has room");
    }
    assert_eq!(ticks(&mut log, 1, &mut all).await, [ports[0]]);
    let mut singletons = singletons.into_iter();
    let oldest = singletons.next().expect("three");
    oldest.leave(Duration::from_secs(30)).await;
    let at = ticks(&mut log, 199, &mut all).await;
    assert_eq!(at, [ports[0]; 199], "the old instance handled them all");
    let numbers: Vec<u32> = all
        .iter()
        .filter_map(|l| match l {
            Log::Tick(_, n) => Some(*n),
            _ => None,
        })
        .collect();
    assert_eq!(numbers, (0..200).collect::<Vec<_>>(), "once each, in order");
    // The next oldest takes over after the old instance stopped (sent once the proxy knows
    // the old host is gone: a message sent to a host that left is lost, at most once).
    until_proxy(
        &proxy,
        "the proxy saw the singleton leave the oldest",
        |port| port != Some(ports[0]),
    )
    .await;
    proxy.tell(Tick(200)).expect("buffer has room");
    assert_eq!(ticks(&mut log, 1, &mut all).await, [ports[1]]);
    assert_handed_over(&all, ports[0], ports[1]);
    drop((singletons, members));
}
