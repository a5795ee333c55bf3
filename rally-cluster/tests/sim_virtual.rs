//! Virtual actors under a 2|3 partition on simulated hosts and network (`rally::sim`), with
//! calls to the same identities from both sides and one in-memory state store all members
//! reach (a database both sides of the cut can still talk to): from the log of every
//! activation's start and end (simulated time), no identity ever has two activations at once,
//! and after the cut every identity is served on the side of three.

use std::sync::Arc;
use std::time::Duration;

use rally::cluster::ClusterConfig;
use rally::cluster::virtual_actors::{Activation, GrainMessages, VirtualActor, VirtualActors};
use rally::prelude::*;
use rally::remote::RemoteMessage;
use rally::sim::{self, HostSimulation, SimLog};
use rally::state::MemoryStore;
use serde::{Deserialize, Serialize};

const CLUSTER: &str = "simvirtual";
const IDENTITIES: usize = 12;
const SEEDS: u64 = 10;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Log {
    /// An activation of `identity` began on `host` with `epoch`.
    Start {
        identity: String,
        host: String,
        epoch: u64,
    },
    /// That activation ended (its `stopped` hook ran, or its host crashed).
    End {
        identity: String,
        host: String,
        epoch: u64,
    },
    /// A call from `from` was answered by the activation on `host`.
    Served { from: String, host: String },
}

/// Counts; logs its life.
struct Counter {
    identity: String,
    host: String,
    epoch: u64,
    log: SimLog<Log>,
    ended: bool,
}

impl Counter {
    fn end(&mut self) {
        if !self.ended {
            self.ended = true;
            self.log.record(Log::End {
                identity: self.identity.clone(),
                host: self.host.clone(),
                epoch: self.epoch,
            });
        }
    }
}

impl Actor for Counter {
    async fn stopped(&mut self, _: &mut Context<Self>) {
        self.end();
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        self.end();
    }
}

/// Host name and log of the member an activation runs on: the owner string names the host.
fn host_of(owner: &str) -> String {
    owner
        .split('@')
        .nth(1)
        .and_then(|rest| rest.split(':').next())
        .unwrap_or(owner)
        .to_owned()
}

static LOGS: std::sync::Mutex<Vec<(u64, SimLog<Log>)>> = std::sync::Mutex::new(Vec::new());

fn log_for(seed: u64) -> SimLog<Log> {
    LOGS.lock()
        .unwrap()
        .iter()
        .find(|(s, _)| *s == seed)
        .map(|(_, l)| l.clone())
        .expect("registered")
}

impl VirtualActor for Counter {
    const KIND: &'static str = "counter";

    async fn activate(activation: Activation) -> ActorResult<Self> {
        let identity = activation.identity().to_owned();
        let (seed, rest) = identity.split_once('/').expect("seed/identity");
        let log = log_for(seed.parse().expect("a seed"));
        let host = host_of(activation.owner());
        log.record(Log::Start {
            identity: rest.to_owned(),
            host: host.clone(),
            epoch: activation.epoch(),
        });
        Ok(Counter {
            identity: rest.to_owned(),
            host,
            epoch: activation.epoch(),
            log,
            ended: false,
        })
    }

    fn messages(table: &mut GrainMessages<Self>) {
        table.add::<Where>();
    }
}

/// Where the activation runs.
#[derive(Debug, Serialize, Deserialize)]
struct Where;
impl Message for Where {
    type Reply = String;
}
impl RemoteMessage for Where {
    const MANIFEST: &'static str = "rally.simvirtual.Where";
}
impl Handler<Where> for Counter {
    async fn handle(&mut self, _: Where, _: &mut Context<Self>) -> ActorResult<String> {
        Ok(self.host.clone())
    }
}

fn names() -> Vec<String> {
    (1..=5).map(|i| format!("n{i}")).collect()
}

/// Five members hosting `counter`, one store; each calls every identity every 200 ms.
fn members(simulation: &mut HostSimulation, seed: u64, log: &SimLog<Log>) {
    let store = Arc::new(MemoryStore::default());
    for name in names() {
        let (log, store) = (log.clone(), store.clone());
        simulation.host(&name.clone(), move || {
            let (name, log, store) = (name.clone(), log.clone(), store.clone());
            async move {
                let system = ActorSystem::new(CLUSTER);
                let node = sim::start_node(&system, sim::node_config(&name))
                    .await
                    .expect("starts");
                let mut config = ClusterConfig::builder();
                for host in names() {
                    config.seed(sim::address(CLUSTER, &host));
                }
                config.kind(Counter::KIND);
                let config = config.build().expect("valid");
                let cluster = sim::join(&system, &node, config.clone()).expect("joins");
                let mut grains = VirtualActors::builder(&cluster, &system);
                grains.store(store).membership(&config).kind::<Counter>();
                let grains: VirtualActors = grains.start(&node).expect("starts");
                let caller = grains.clone();
                tokio::spawn(async move {
                    loop {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        for i in 0..IDENTITIES {
                            let Ok(grain) = caller.get::<Counter>(&format!("{seed}/id-{i}")) else {
                                continue;
                            };
                            if let Ok(host) = grain.ask(Where, Duration::from_secs(1)).await {
                                log.record(Log::Served {
                                    from: name.clone(),
                                    host,
                                });
                            }
                        }
                    }
                });
                (system, node, cluster, grains)
            }
        });
    }
}

/// Fails if an identity ever had two activations at once.
fn assert_never_two(log: &SimLog<Log>, context: &str) {
    let entries = log.entries();
    let mut open: Vec<(String, String, u64, Duration)> = Vec::new();
    for e in &entries {
        match &e.entry {
            Log::Start {
                identity,
                host,
                epoch,
            } => {
                if let Some(other) = open.iter().find(|(i, ..)| i == identity) {
                    panic!(
                        "{context}: {identity} activated on {host} (epoch {epoch}) at {:?} while active on {other:?}",
                        e.at
                    );
                }
                open.push((identity.clone(), host.clone(), *epoch, e.at));
            }
            Log::End {
                identity,
                host,
                epoch,
            } => {
                let at = open
                    .iter()
                    .position(|(i, h, ep, _)| i == identity && h == host && ep == epoch)
                    .unwrap_or_else(|| panic!("{context}: an end without a start: {:?}", e.entry));
                open.remove(at);
            }
            Log::Served { .. } => {}
        }
    }
}

#[test]
fn under_a_partition_no_identity_is_ever_active_twice_and_the_three_serve_all() {
    for seed in 0..SEEDS {
        let log = SimLog::new();
        LOGS.lock().unwrap().push((seed, log.clone()));
        let mut simulation = HostSimulation::new(seed);
        members(&mut simulation, seed, &log);
        let served_by = |log: &SimLog<Log>, from: &[&str], after: Duration| {
            let mut ids = std::collections::BTreeSet::new();
            for e in log.entries() {
                if let Log::Served { from: f, host } = &e.entry
                    && e.at >= after
                    && from.contains(&f.as_str())
                {
                    ids.insert(host.clone());
                }
            }
            ids
        };
        simulation.run_for(Duration::from_secs(5)).unwrap();
        let all: Vec<String> = names();
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        let minority = [all[(seed % 5) as usize], all[((seed + 2) % 5) as usize]];
        let majority: Vec<&str> = all
            .iter()
            .copied()
            .filter(|n| !minority.contains(n))
            .collect();
        let context = format!("seed {seed}, cut {minority:?} | {majority:?}");
        assert!(
            !served_by(&log, &all, Duration::ZERO).is_empty(),
            "{context}: calls were served before the cut"
        );
        simulation.partition(&minority, &majority).unwrap();
        let t0 = simulation.elapsed();
        simulation.run_for(Duration::from_secs(20)).unwrap();
        // In the last 5 s, the three were served only by the three.
        let late = served_by(&log, &majority, t0 + Duration::from_secs(15));
        assert!(
            !late.is_empty(),
            "{context}: the three were served after the cut"
        );
        assert!(
            late.iter().all(|h| majority.contains(&h.as_str())),
            "{context}: served by {late:?}"
        );
        assert_never_two(&log, &context);
        let starts = log
            .entries()
            .iter()
            .filter(|e| matches!(e.entry, Log::Start { .. }))
            .count();
        eprintln!("{context}: {starts} activations");
    }
}

/// Under random connection breaks and delay spikes (as in `sim_faults.rs`) for 20 s, with
/// calls from every member: no identity is ever active twice at once, and every member is
/// served again once the faults stop.
#[test]
fn under_random_connection_breaks_no_identity_is_ever_active_twice() {
    // Seeds of their own: the activation hook finds the log by seed.
    for seed in 1000..1004 {
        let log = SimLog::new();
        LOGS.lock().unwrap().push((seed, log.clone()));
        let mut simulation = HostSimulation::new(seed);
        members(&mut simulation, seed, &log);
        simulation.run_for(Duration::from_secs(5)).unwrap();
        let faults = sim::RandomFaults::every(Duration::from_millis(500))
            .breaks(0.05)
            .delay_spikes(0.02, Duration::from_millis(100));
        simulation.start_random_faults(faults).unwrap();
        simulation.run_for(Duration::from_secs(20)).unwrap();
        simulation.stop_random_faults();
        let calm = simulation.elapsed() + Duration::from_secs(2);
        simulation.run_for(Duration::from_secs(5)).unwrap();
        let context = format!("seed {seed}");
        let broke = simulation
            .faults()
            .iter()
            .filter(|f| matches!(f.entry, sim::Fault::Broke { connections, .. } if connections > 0))
            .count();
        assert!(broke >= 5, "{context}: links broke ({broke})");
        assert_never_two(&log, &context);
        for name in names() {
            let served = log
                .entries()
                .iter()
                .filter(|e| {
                    e.at >= calm && matches!(&e.entry, Log::Served { from, .. } if *from == name)
                })
                .count();
            assert!(served > 0, "{context}: {name} is served after the faults");
        }
        let starts = log
            .entries()
            .iter()
            .filter(|e| matches!(e.entry, Log::Start { .. }))
            .count();
        eprintln!("{context}: {broke} link breaks, {starts} activations");
    }
}
