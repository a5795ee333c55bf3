//! Many Rally nodes in one process, on simulated time and a simulated network.
//!
//! Each node runs on its own simulated host of a [`turmoil`](https://docs.rs/turmoil)
//! simulation: its own single-thread tokio runtime with a paused clock, and a network whose
//! links the test can cut, heal and slow down. Nodes talk over [`SimTransport`], Rally's
//! [`Transport`] on the simulated TCP, so the remoting, membership and singleton code that runs
//! is the code that runs in production. Every random choice of the network (latencies, the order
//! hosts run in) comes from the seed, and so do the membership protocol's when members join
//! with [`join`]: a seed replays a run, event for event (see "Replay" in `docs/testing.md`).
//!
//! - [`HostSimulation`]: the hosts and the network; [`run_for`](HostSimulation::run_for),
//!   [`run_until`](HostSimulation::run_until), [`partition`](HostSimulation::partition) /
//!   [`heal`](HostSimulation::heal), [`delay`](HostSimulation::delay),
//!   [`drop_connections`](HostSimulation::drop_connections) and
//!   [`start_random_faults`](HostSimulation::start_random_faults), [`crash`](HostSimulation::crash) /
//!   [`restart`](HostSimulation::restart).
//! - [`node_config`] and [`start_node`]: a [`RemoteNode`] on the simulated network;
//!   [`join`]: a cluster member whose gossip draws its random choices from the seed.
//! - [`SimLog`]: a log of what happened where, stamped with simulated time, to check
//!   properties ("never two at once") after the run.
//!
//! # Example
//!
//! Three cluster members; one is crashed and the others see it down.
//!
//! ```
//! use std::time::Duration;
//! use rally::ActorSystem;
//! use rally::cluster::{ClusterConfig, MemberEvent};
//! use rally::sim::{self, SimLog, HostSimulation};
//!
//! let mut simulation = HostSimulation::new(7);
//! let log = SimLog::new();
//! for name in ["a", "b", "c"] {
//!     let log = log.clone();
//!     simulation.host(name, move || {
//!         let log = log.clone();
//!         async move {
//!             let system = ActorSystem::new("shop");
//!             let node = sim::start_node(&system, sim::node_config(name)).await.unwrap();
//!             let mut config = ClusterConfig::builder();
//!             config.seed(sim::address("shop", "a")).stable_after(Duration::from_secs(1));
//!             let cluster = sim::join(&system, &node, config.build().unwrap()).unwrap();
//!             let mut events = cluster.events();
//!             tokio::spawn(async move {
//!                 while let Some(event) = events.next().await {
//!                     if let MemberEvent::Down(member) = event {
//!                         log.record(format!("{name} saw {} down", member.address.host));
//!                     }
//!                 }
//!             });
//!             (system, node, cluster) // kept alive as long as the host runs
//!         }
//!     });
//! }
//! simulation.run_for(Duration::from_secs(5)).unwrap();
//! simulation.crash("c").unwrap();
//! let downed = |log: &SimLog<String>| {
//!     log.entries().iter().filter(|e| e.entry.ends_with("saw c down")).count()
//! };
//! let took = simulation.run_until(Duration::from_secs(30), || downed(&log) == 2).unwrap();
//! assert!(took < Duration::from_secs(10), "downed {took:?} after the crash");
//! ```

mod faults;
mod log;
mod simulation;
mod transport;

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use rally_actor::ActorSystem;
use rally_actor::sync::Mutex;
use rally_cluster::provider::GossipProvider;
use rally_cluster::{Cluster, ClusterConfig, JoinError};
use rally_remote::transport::{BoxStream, Incoming, Listener, Transport};
use rally_remote::{NodeAddress, NodeStartError, RemoteConfig, RemoteNode};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The port every simulated node listens on (each host has its own address, so one port
/// serves all).
pub const PORT: u16 = 2552;

/// The secret [`node_config`] gives every node: the simulation is one cluster.
pub const SECRET: &[u8] = b"rally simulation";

/// How often hosts run between network deliveries: the resolution of simulated time. One
/// millisecond keeps latencies of a few milliseconds meaningful; a run of a minute is then
/// 60 000 steps per host, well under a second of real time for a handful of idle nodes.
const DEFAULT_TICK: Duration = Duration::from_millis(1);

/// Latency of a link, drawn between these bounds from the seed: a LAN, so a probe's
/// round trip stays far below membership's probe timeouts unless a test slows a link down.
const DEFAULT_MIN_LATENCY: Duration = Duration::from_millis(1);
const DEFAULT_MAX_LATENCY: Duration = Duration::from_millis(5);

/// A simulation never runs longer than this (simulated time) unless told: a bound so a test
/// that waits for something that never happens fails instead of running on.
const DEFAULT_MAX_DURATION: Duration = Duration::from_secs(3600);

pub use faults::*;
pub use log::*;
pub use simulation::*;
pub use transport::*;

/// The remoting settings of a simulated node on host `host`: [`PORT`], [`SECRET`], and the
/// transport's own failure detector as in production.
///
/// The remoting heartbeats, their phi-accrual failure detector and the frame deadlines read
/// the runtime's clock, which is simulated here: the detector's verdicts join membership's
/// own probes in one reachability view, as on real networks.
///
/// # Example
///
/// ```
/// let config = rally::sim::node_config("a");
/// assert_eq!((config.host.as_str(), config.port), ("a", rally::sim::PORT));
/// ```
pub fn node_config(host: &str) -> RemoteConfig {
    RemoteConfig::builder()
        .listen(host, PORT)
        .secret(SECRET.to_vec())
        .build()
        .unwrap()
}

/// The address of the node that [`node_config`]`(host)` gives, in actor system `system`.
///
/// # Example
///
/// ```
/// assert_eq!(rally::sim::address("shop", "a").to_string(), "rally://shop@a:2552");
/// ```
pub fn address(system: &str, host: &str) -> NodeAddress {
    NodeAddress {
        system: system.to_owned(),
        host: host.to_owned(),
        port: PORT,
    }
}

/// Starts a [`RemoteNode`] of `system` on the simulated network ([`SimTransport`]).
///
/// # Errors
///
/// As [`RemoteNode::start_with`]: [`NodeStartError::Bind`] if the port is taken on this host.
///
/// # Panics
///
/// Outside a [`HostSimulation`]'s host.
///
/// # Cancel safety
///
/// As [`RemoteNode::start_with`]: dropped before it returns, nothing is left running.
///
/// # Example
///
/// ```
/// use rally::ActorSystem;
/// use rally::sim::{self, HostSimulation};
///
/// let mut simulation = HostSimulation::new(1);
/// simulation.host("a", || async {
///     let system = ActorSystem::new("demo");
///     let node = sim::start_node(&system, sim::node_config("a")).await.unwrap();
///     (system, node)
/// });
/// simulation.run_for(std::time::Duration::from_millis(10)).unwrap();
/// ```
pub async fn start_node(
    system: &ActorSystem,
    config: RemoteConfig,
) -> Result<RemoteNode, NodeStartError> {
    RemoteNode::start_with(system, config, Arc::new(SimTransport)).await
}

/// Why a simulation step failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// A host's software failed (a panic in its main future, for example).
    #[error("the simulation failed: {0}")]
    Failed(String),
    /// [`HostSimulation::run_until`]'s condition did not hold within its limit.
    #[error("the condition did not hold within {0:?} of simulated time")]
    Timeout(Duration),
    /// No host of that name was added with [`HostSimulation::host`].
    #[error("no simulated host named {0:?}")]
    UnknownHost(String),
    /// [`RandomFaults`] out of range: a zero interval, or a probability outside 0–1.
    #[error("invalid random faults: {0}")]
    InvalidFaults(&'static str),
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn the_shared_types_are_send_and_sync() {
        assert_send_sync::<SimTransport>();
        assert_send_sync::<SimLog<String>>();
        assert_send_sync::<SimError>();
    }

    #[test]
    fn run_until_gives_up_after_its_limit_in_simulated_time() {
        let mut simulation = HostSimulation::new(1);
        simulation.host("a", || async {});
        let before = simulation.elapsed();
        let error = simulation
            .run_until(Duration::from_millis(50), || false)
            .unwrap_err();
        assert!(matches!(error, SimError::Timeout(limit) if limit == Duration::from_millis(50)));
        assert_eq!(simulation.elapsed() - before, Duration::from_millis(50));
    }

    #[test]
    fn an_unknown_host_is_an_error_and_changes_nothing() {
        let mut simulation = HostSimulation::new(1);
        simulation.host("a", || async {});
        for result in [
            simulation.crash("b"),
            simulation.restart("b"),
            simulation.partition(&["a"], &["b"]),
            simulation.heal(&["b"], &["a"]),
            simulation.delay(&["a"], &["b"], Duration::from_millis(1)),
            simulation.drop_connections(&["a"], &["b"]).map(drop),
        ] {
            assert!(matches!(result, Err(SimError::UnknownHost(name)) if name == "b"));
        }
    }

    #[test]
    fn each_life_of_each_host_has_its_own_seed_and_a_seed_replays_them() {
        let lives = |seed: u64| {
            let log = SimLog::new();
            let mut simulation = HostSimulation::new(seed);
            for name in ["a", "b"] {
                let log = log.clone();
                simulation.host(name, move || {
                    let log = log.clone();
                    async move { log.record((name, host_seed().expect("in a host"))) }
                });
            }
            simulation.run_for(Duration::from_millis(5)).unwrap();
            simulation.restart("a").unwrap();
            simulation.run_for(Duration::from_millis(5)).unwrap();
            log.entries()
                .into_iter()
                .map(|e| e.entry)
                .collect::<Vec<_>>()
        };
        let first = lives(3);
        assert_eq!(first.len(), 3, "a, b, then a again: {first:?}");
        let seeds: std::collections::HashSet<u64> = first.iter().map(|(_, s)| *s).collect();
        assert_eq!(seeds.len(), 3, "every life its own seed: {first:?}");
        assert_eq!(lives(3), first, "the same seed, the same lives");
        assert_ne!(lives(4), first, "another seed, other lives");
    }

    /// A broken connection fails both ends at once (a reader waiting on it is woken with the
    /// error, a writer gets it at its next write), and a new connection between the same
    /// hosts works.
    #[test]
    fn a_dropped_connection_fails_both_ends_and_a_new_one_works() {
        let log = SimLog::new();
        let mut simulation = HostSimulation::new(1);
        let server_log = log.clone();
        simulation.host("server", move || {
            let log = server_log.clone();
            async move {
                let mut listener = SimTransport.bind("server", PORT).await.unwrap();
                loop {
                    let (incoming, _) = listener.accept().await.unwrap();
                    let mut stream = incoming.await.unwrap();
                    let log = log.clone();
                    tokio::spawn(async move {
                        let mut byte = [0u8; 1];
                        loop {
                            match stream.read_exact(&mut byte).await {
                                Ok(_) => log.record(format!("server read {}", byte[0])),
                                Err(e) => {
                                    log.record(format!("server error {:?}", e.kind()));
                                    break;
                                }
                            }
                        }
                    });
                }
            }
        });
        let client_log = log.clone();
        simulation.host("client", move || {
            let log = client_log.clone();
            async move {
                for attempt in 0..2u8 {
                    let mut stream = SimTransport.connect("server", PORT).await.unwrap();
                    let mut sent = 0u8;
                    loop {
                        if let Err(e) = stream.write_all(&[attempt * 100 + sent]).await {
                            log.record(format!("client error {:?}", e.kind()));
                            break;
                        }
                        sent += 1;
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
        });
        let has = |log: &SimLog<String>, text: &str| log.entries().iter().any(|e| e.entry == text);
        simulation
            .run_until(Duration::from_secs(1), || has(&log, "server read 3"))
            .unwrap();
        assert_eq!(
            simulation
                .drop_connections(&["server"], &["client"])
                .unwrap(),
            1
        );
        let at = simulation.elapsed();
        simulation
            .run_until(Duration::from_secs(1), || {
                has(&log, "server error ConnectionReset")
                    && has(&log, "client error ConnectionReset")
            })
            .unwrap();
        let server_error = log
            .entries()
            .into_iter()
            .find(|e| e.entry == "server error ConnectionReset")
            .unwrap();
        assert!(
            server_error.at <= at + Duration::from_millis(2),
            "the waiting reader is woken at once: {server_error:?}, broken at {at:?}"
        );
        // The second connection carries bytes again.
        simulation
            .run_until(Duration::from_secs(1), || has(&log, "server read 102"))
            .unwrap();
        assert_eq!(
            simulation.faults(),
            [Logged {
                at,
                entry: Fault::Broke {
                    a: "server".to_owned(),
                    b: "client".to_owned(),
                    connections: 1
                }
            }]
        );
    }

    /// Random faults come from the seed: the same seed throws the same faults at the same
    /// instants, another seed others; with probability 1 every link breaks at every throw.
    #[test]
    fn random_faults_replay_from_the_seed() {
        let faults = |seed: u64, faults: RandomFaults| {
            let mut simulation = HostSimulation::new(seed);
            for name in ["a", "b", "c"] {
                simulation.host(name, || async {});
            }
            simulation.start_random_faults(faults).unwrap();
            simulation.run_for(Duration::from_secs(3)).unwrap();
            simulation.stop_random_faults();
            simulation.run_for(Duration::from_secs(1)).unwrap();
            simulation.faults().to_vec()
        };
        let some = RandomFaults::every(Duration::from_millis(100))
            .breaks(0.2)
            .delay_spikes(0.1, Duration::from_millis(300));
        let first = faults(5, some.clone());
        assert!(
            first.iter().any(|f| matches!(f.entry, Fault::Broke { .. }))
                && first.iter().any(|f| matches!(f.entry, Fault::Spike { .. })),
            "{first:?}"
        );
        assert!(
            first.iter().all(|f| f.at < Duration::from_secs(3)),
            "none after the stop"
        );
        assert_eq!(faults(5, some.clone()), first);
        assert_ne!(faults(6, some), first);
        // Three links, 30 throws: every one breaks.
        let all = faults(
            5,
            RandomFaults::every(Duration::from_millis(100)).breaks(1.0),
        );
        assert_eq!(all.len(), 3 * 30, "{all:?}");
    }

    #[test]
    fn invalid_random_faults_are_refused() {
        let mut simulation = HostSimulation::new(1);
        for faults in [
            RandomFaults::every(Duration::ZERO),
            RandomFaults::every(Duration::from_millis(1)).breaks(1.5),
            RandomFaults::every(Duration::from_millis(1)).delay_spikes(-0.1, Duration::ZERO),
            RandomFaults::every(Duration::from_millis(1)).breaks(f64::NAN),
        ] {
            assert!(
                matches!(
                    simulation.start_random_faults(faults.clone()),
                    Err(SimError::InvalidFaults(_))
                ),
                "{faults:?}"
            );
        }
    }

    /// A spike slows a link for one interval, then the link has its usual latency again: a
    /// byte sent every 10 ms arrives within the usual 1–5 ms outside spikes.
    #[test]
    fn a_delay_spike_lasts_one_interval() {
        let log = SimLog::new();
        let mut simulation = HostSimulation::new(2);
        let server_log = log.clone();
        simulation.host("server", move || {
            let log = server_log.clone();
            async move {
                let mut listener = SimTransport.bind("server", PORT).await.unwrap();
                let (incoming, _) = listener.accept().await.unwrap();
                let mut stream = incoming.await.unwrap();
                let mut sent_at = [0u8; 8];
                while stream.read_exact(&mut sent_at).await.is_ok() {
                    let sent = Duration::from_millis(u64::from_be_bytes(sent_at));
                    log.record(now().unwrap() - sent);
                }
            }
        });
        simulation.host("client", || async {
            let mut stream = SimTransport.connect("server", PORT).await.unwrap();
            loop {
                let at = u64::try_from(now().unwrap().as_millis()).unwrap();
                if stream.write_all(&at.to_be_bytes()).await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        simulation.run_for(Duration::from_millis(200)).unwrap();
        let before = log.entries().len();
        let spike = RandomFaults::every(Duration::from_millis(200))
            .delay_spikes(1.0, Duration::from_millis(50));
        simulation.start_random_faults(spike).unwrap();
        simulation.run_for(Duration::from_millis(150)).unwrap();
        simulation.stop_random_faults();
        simulation.run_for(Duration::from_millis(300)).unwrap();
        let took: Vec<Duration> = log.entries()[before..].iter().map(|e| e.entry).collect();
        let slow = took
            .iter()
            .filter(|t| **t >= Duration::from_millis(45))
            .count();
        assert!(slow >= 5, "messages during the spike took 50 ms: {took:?}");
        let tail = &took[took.len() - 10..];
        assert!(
            tail.iter().all(|t| *t <= Duration::from_millis(6)),
            "after the spike the usual latency: {took:?}"
        );
    }

    /// Bytes sent during a partition arrive after the heal, on the same connection, in order:
    /// the partition holds packets as TCP retransmission would deliver them.
    #[test]
    fn a_partition_holds_bytes_until_the_heal() {
        let received = Arc::new(AtomicUsize::new(0));
        let mut simulation = HostSimulation::new(1);
        let counter = Arc::clone(&received);
        simulation.host("server", move || {
            let counter = Arc::clone(&counter);
            async move {
                let mut listener = SimTransport.bind("server", PORT).await.unwrap();
                let (incoming, _) = listener.accept().await.unwrap();
                let mut stream = incoming.await.unwrap();
                let mut byte = [0u8; 1];
                let mut expected = 0u8;
                while stream.read_exact(&mut byte).await.is_ok() {
                    assert_eq!(byte[0], expected, "in order, nothing lost");
                    expected = expected.wrapping_add(1);
                    counter.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        simulation.host("client", || async {
            let mut stream = SimTransport.connect("server", PORT).await.unwrap();
            for i in 0..=255u8 {
                stream.write_all(&[i]).await.unwrap();
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            stream
        });
        let count = || received.load(Ordering::SeqCst);
        simulation
            .run_until(Duration::from_secs(1), || count() >= 10)
            .unwrap();
        simulation.partition(&["client"], &["server"]).unwrap();
        let cut = count();
        simulation.run_for(Duration::from_millis(500)).unwrap();
        assert!(
            count() <= cut + 1,
            "at most one byte already in flight got through"
        );
        simulation.heal(&["client"], &["server"]).unwrap();
        simulation
            .run_until(Duration::from_secs(5), || count() == 256)
            .unwrap();
    }
}
