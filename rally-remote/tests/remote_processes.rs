//! Nodes in separate OS processes: messaging, death watch on SIGKILL within the detector's
//! bound, reconnection to a restarted peer (new incarnation), and heartbeats staying on time
//! while the ordinary lane is saturated and a 10 MB message is in flight.
//!
//! The peer process is this test binary itself, re-run with `RALLY_TEST_PEER` set: its `main`
//! then runs the peer instead of the tests (the target has `harness = false`; libtest-mimic runs
//! the tests, so the peer is no test of its own that would pass vacuously).

#[path = "support/nodes.rs"]
mod nodes;

use std::process::Command;
use std::time::{Duration, Instant};

use nodes::{Blob, Check, Echo, Record, T, Target, client_node, config, target_node};
use rally_actor::{AskError, Terminated};
use rally_remote::NodeAddress;
use rally_test::Probe;
use rally_test::eventually;
use rally_test::harness::{Child, commands, run, say, trial};

const PEER_ENV: &str = "RALLY_TEST_PEER";

fn main() -> std::process::ExitCode {
    if let Ok(port) = std::env::var(PEER_ENV) {
        peer_process(&port);
        return std::process::ExitCode::SUCCESS;
    }
    let tests = [
        trial(
            "tell_ask_and_watch_across_processes_and_sigkill_fires_terminated",
            tell_ask_and_watch_across_processes_and_sigkill_fires_terminated,
        ),
        trial(
            "a_restarted_peer_is_reached_again_under_a_new_incarnation",
            a_restarted_peer_is_reached_again_under_a_new_incarnation,
        ),
        trial(
            "a_peer_paused_past_the_detector_is_down_for_good_and_undeliverable_asks_never_ran",
            a_peer_paused_past_the_detector_is_down_for_good_and_undeliverable_asks_never_ran,
        ),
        trial(
            "heartbeats_stay_on_time_while_lanes_are_saturated_and_a_10mb_message_is_in_flight",
            heartbeats_stay_on_time_while_lanes_are_saturated_and_a_10mb_message_is_in_flight,
        ),
    ];
    run(tests.into())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The peer: runs a target node (on `port`, 0 = any), prints its address and incarnation, and
/// serves until killed or until stdin closes.
fn peer_process(port: &str) {
    runtime().block_on(async {
        let mut config = config();
        config.port = port.parse().unwrap();
        config.large_message_destinations = vec!["big".into()];
        let (system, node) = target_node("peer", config).await;
        let big = system.spawn(Target::new()).unwrap();
        node.expose("big", &big).unwrap();
        let target = node.lookup::<Target>(node.address(), "target");
        say(&format!(
            "PEER {} {}",
            node.address(),
            node.unique_address().incarnation
        ));
        // "count" on stdin: say how many records the target has handled.
        let mut commands = commands();
        while let Some(command) = commands.recv().await {
            if command == "count" {
                let (count, _) = target.ask(Check, T).await.unwrap();
                say(&format!("COUNT {count}"));
            }
        }
    });
}

/// The peer process (killed when dropped) and the node it runs.
struct Peer {
    process: Child,
    address: NodeAddress,
    incarnation: String,
}

impl Peer {
    /// How many `Record`s the peer's target has handled, as the peer says.
    async fn count(&mut self) -> u64 {
        self.process.send("count");
        let count = self.process.expect("COUNT", T, |f| f.word == "COUNT").await;
        count.args[0].parse().expect("a count")
    }
}

/// Starts a peer on `port` (0: any) and waits until it listens.
async fn start_peer(port: u16) -> Peer {
    let mut command = Command::new(std::env::current_exe().expect("this test binary"));
    command.env(PEER_ENV, port.to_string());
    let mut process = Child::spawn("peer", command);
    let listening = process.expect("PEER", T, |f| f.word == "PEER").await;
    Peer {
        process,
        address: listening.args[0].parse().expect("an address"),
        incarnation: listening.args[1].clone(),
    }
}

async fn tell_ask_and_watch_across_processes_and_sigkill_fires_terminated() {
    let mut peer = start_peer(0).await;
    let (a_system, a) = client_node("a", config()).await;
    let target = a.lookup::<Target>(&peer.address, "target");
    assert_eq!(target.ask(Echo(5), T).await, Ok(5));
    for i in 1..=10_000 {
        target.tell(Record(i)).unwrap();
    }
    assert_eq!(target.ask(Check, T).await, Ok((10_000, true)));
    let mut probe = Probe::<Terminated>::spawn(&a_system);
    probe.watch(&target);
    peer.process.kill(); // SIGKILL: no goodbye
    let killed = Instant::now();
    let terminated = probe
        .expect_msg(Duration::from_secs(10))
        .await
        .expect("Terminated after SIGKILL");
    let took = killed.elapsed();
    assert_eq!(terminated.path, target.path().clone());
    assert_eq!(terminated.reason, rally_actor::TerminationReason::NodeDown);
    // Heartbeats every 100 ms, acceptable pause 600 ms: detection well inside 5 s.
    assert!(took < Duration::from_secs(5), "detection took {took:?}");
    eprintln!("SIGKILL detected after {took:?}");
}

async fn a_restarted_peer_is_reached_again_under_a_new_incarnation() {
    let mut first = start_peer(0).await;
    let port = first.address.port;
    let (a_system, a) = client_node("a", config()).await;
    let target = a.lookup::<Target>(&first.address, "target");
    assert_eq!(target.ask(Echo(1), T).await, Ok(1));
    let mut probe = Probe::<Terminated>::spawn(&a_system);
    probe.watch(&target);
    first.process.kill();
    let second = start_peer(port).await;
    assert_ne!(
        second.incarnation, first.incarnation,
        "a restart is a new incarnation"
    );
    // The old incarnation's watchers are told it is gone (detector or the new handshake).
    probe.expect_msg(Duration::from_secs(10)).await.unwrap();
    // A ref resolved against the old incarnation never reaches the new one.
    assert!(matches!(
        target.ask(Echo(2), T).await,
        Err(AskError::Undeliverable(_))
    ));
    // A new lookup reaches the new process once the lanes have reconnected.
    let fresh = a.lookup::<Target>(&second.address, "target");
    eventually(
        "a new lookup reaches the new process",
        Duration::from_secs(15),
        async || match fresh.ask(Echo(3), Duration::from_millis(500)).await {
            Ok(3) => Ok(()),
            other => Err(other),
        },
    )
    .await;
    assert!(matches!(
        target.ask(Echo(4), T).await,
        Err(AskError::Undeliverable(_))
    ));
}

async fn a_peer_paused_past_the_detector_is_down_for_good_and_undeliverable_asks_never_ran() {
    let mut peer = start_peer(0).await;
    let (a_system, a) = client_node("a", config()).await;
    let target = a.lookup::<Target>(&peer.address, "target");
    assert_eq!(target.ask(Echo(1), T).await, Ok(1));
    let mut probe = Probe::<Terminated>::spawn(&a_system);
    probe.watch(&target);
    peer.process.pause(T).await;
    // Asks sent while it is paused: some leave (they sit in the socket buffers), and once the
    // detector declares the peer down each gets an answer that says what is known.
    let asks: Vec<_> = (1..=300u64)
        .map(|i| {
            let target = target.clone();
            tokio::spawn(async move { target.ask(Record(i), Duration::from_secs(30)).await })
        })
        .collect();
    probe
        .expect_msg(Duration::from_secs(10))
        .await
        .expect("Terminated once the detector gives up on the paused peer");
    let (mut unknown, mut undeliverable) = (0u64, 0u64);
    for ask in asks {
        match ask.await.unwrap() {
            Err(AskError::OutcomeUnknown(_)) => unknown += 1,
            Err(AskError::Undeliverable(_)) => undeliverable += 1,
            other => panic!("a paused peer cannot answer: {other:?}"),
        }
    }
    peer.process.resume();
    // Down is final for that incarnation: old refs and new lookups alike are refused, never
    // answered by the process that woke up.
    assert!(matches!(
        target.ask(Echo(2), T).await,
        Err(AskError::Undeliverable(_))
    ));
    let fresh = a.lookup::<Target>(&peer.address, "target");
    eventually(
        "a new lookup is refused",
        Duration::from_secs(15),
        async || {
            match fresh.ask(Echo(3), Duration::from_millis(500)).await {
                // Refused either way: this node quarantined the paused incarnation, and the woken
                // process, whose own detector gave up on us, quarantined ours.
                Err(AskError::Undeliverable(why)) if why.contains("declared") => Ok(()),
                Ok(_) => panic!("a quarantined incarnation answered"),
                other => Err(other),
            }
        },
    )
    .await;
    // What the woken process ran is at most what was reported as "outcome unknown": every
    // ask reported undeliverable never ran. Its reader drains what was in its socket within
    // moments of waking; read the count until it holds still (bounded).
    let mut count = peer.count().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let again = peer.count().await;
        if again == count {
            break;
        }
        count = again;
    }
    eprintln!("paused peer: {unknown} outcome unknown, {undeliverable} undeliverable, {count} ran");
    assert!(
        count <= unknown,
        "{count} ran but only {unknown} were reported as possibly sent"
    );
}

async fn heartbeats_stay_on_time_while_lanes_are_saturated_and_a_10mb_message_is_in_flight() {
    let peer = start_peer(0).await;
    let mut cfg = config();
    cfg.large_message_destinations = vec!["big".into()];
    let (a_system, a) = client_node("a", cfg).await;
    let target = a.lookup::<Target>(&peer.address, "target");
    let big = a.lookup::<Target>(&peer.address, "big");
    assert_eq!(target.ask(Echo(1), T).await, Ok(1));
    let mut probe = Probe::<Terminated>::spawn(&a_system);
    probe.watch(&target);
    // 10 MB messages back to back on the large lane (one in flight at a time, so the bounded
    // lane takes each) and a flood on the ordinary lane, for ~3 s: far longer than the 600 ms
    // pause the detector tolerates. A delayed heartbeat would show up as a (false) Terminated.
    let flood_until = Instant::now() + Duration::from_secs(3);
    let mut big_replies = Vec::new();
    let mut sent = 0u64;
    while Instant::now() < flood_until {
        if big_replies
            .last()
            .is_none_or(|last: &tokio::task::JoinHandle<_>| last.is_finished())
        {
            let big = big.clone();
            big_replies.push(tokio::spawn(async move {
                big.ask(Blob(vec![7; 10 * 1024 * 1024]), Duration::from_secs(30))
                    .await
            }));
        }
        for _ in 0..2_000 {
            sent += 1;
            let _ = target.tell(Record(sent));
        }
        tokio::task::yield_now().await;
    }
    let big_sent = big_replies.len();
    for reply in big_replies {
        assert_eq!(reply.await.unwrap(), Ok(10 * 1024 * 1024));
    }
    assert!(
        big_sent >= 2,
        "only {big_sent} large messages went through during the flood"
    );
    probe
        .expect_no_msg(Duration::from_millis(500))
        .await
        .expect("no false Terminated: heartbeats were on time");
    let (count, ordered) = target.ask(Check, Duration::from_secs(30)).await.unwrap();
    assert!(ordered);
    eprintln!("flooded {sent} records, {count} delivered (the rest dropped by the bounded lane)");
}
