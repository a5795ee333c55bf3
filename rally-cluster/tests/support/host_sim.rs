//! Cluster members with a singleton on simulated hosts (`rally::sim`), and the checks the
//! simulation tests share: who hosts, who is down, and that no two instances ever run at once.
#![allow(dead_code)]

use std::time::Duration;

use rally::cluster::{ClusterConfig, ClusterSingleton, MemberEvent};
use rally::prelude::*;
use rally::remote::{MessageTable, RemoteActor, RemoteMessage};
use rally::sim::{self, HostSimulation, SimLog};
use serde::{Deserialize, Serialize};

/// Every member's system name: the cluster's name.
pub(crate) const CLUSTER: &str = "simtest";

/// What the hosts log: member events as each host saw them, and the singleton's life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Log {
    /// `host`'s software started (again, after a restart).
    Boot(String),
    /// `host` saw `event` about the member on host `about` (incarnation `incarnation`,
    /// generation `generation`: its age, from the simulated clock).
    Event {
        host: String,
        event: &'static str,
        about: String,
        incarnation: u64,
        generation: u64,
    },
    /// The singleton's instance was created on `host`.
    Start(String),
    /// The singleton's instance on `host` is gone (dropped: after it stopped, or its host
    /// crashed).
    Stop(String),
}

#[derive(Serialize, Deserialize)]
pub(crate) struct Tick;
impl Message for Tick {
    type Reply = ();
}
impl RemoteMessage for Tick {
    const MANIFEST: &'static str = "rally.simtest.Tick";
}

/// The user's singleton: logs its creation and its end.
pub(crate) struct Worker {
    host: String,
    log: SimLog<Log>,
}
impl Actor for Worker {}
impl Handler<Tick> for Worker {
    async fn handle(&mut self, _: Tick, _: &mut Context<Self>) -> ActorResult<()> {
        Ok(())
    }
}
impl RemoteActor for Worker {
    fn messages(table: &mut MessageTable<Self>) {
        table.add::<Tick>();
    }
}
impl Drop for Worker {
    fn drop(&mut self) {
        self.log.record(Log::Stop(self.host.clone()));
    }
}

/// The cluster settings of the simulation tests: the defaults, seeded with every host (so a
/// restarted host finds the others whichever it is).
pub(crate) fn config(hosts: &[String]) -> ClusterConfig {
    let mut builder = ClusterConfig::builder();
    for host in hosts {
        builder.seed(sim::address(CLUSTER, host));
    }
    builder.build().expect("valid")
}

/// Host names `n1`…`nN`.
pub(crate) fn names(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("n{i}")).collect()
}

/// Adds a host per name, each a cluster member (seeded with all of them) running the
/// singleton `worker`, logging to `log`.
pub(crate) fn members(simulation: &mut HostSimulation, names: &[String], log: &SimLog<Log>) {
    for name in names {
        let (name, log, all) = (name.clone(), log.clone(), names.to_vec());
        simulation.host(&name.clone(), move || {
            let (name, log, all) = (name.clone(), log.clone(), all.clone());
            async move {
                log.record(Log::Boot(name.clone()));
                let system = ActorSystem::new(CLUSTER);
                let node = sim::start_node(&system, sim::node_config(&name))
                    .await
                    .expect("the node starts on its simulated host");
                let config = config(&all);
                let cluster = sim::join(&system, &node, config.clone()).expect("joins");
                let mut events = cluster.events();
                let (host, events_log) = (name.clone(), log.clone());
                tokio::spawn(async move {
                    while let Some(event) = events.next().await {
                        events_log.record(event_entry(&host, &event));
                    }
                });
                let (host, factory_log) = (name.clone(), log.clone());
                let singleton = ClusterSingleton::start(
                    &system,
                    &node,
                    &cluster,
                    config,
                    "worker",
                    None,
                    move || {
                        factory_log.record(Log::Start(host.clone()));
                        Worker {
                            host: host.clone(),
                            log: factory_log.clone(),
                        }
                    },
                );
                (system, node, cluster, singleton)
            }
        });
    }
}

fn event_entry(host: &str, event: &MemberEvent) -> Log {
    let name = match event {
        MemberEvent::Joined(_) => "joined",
        MemberEvent::Up(_) => "up",
        MemberEvent::Unreachable(_) => "unreachable",
        MemberEvent::Reachable(_) => "reachable",
        MemberEvent::Leaving(_) => "leaving",
        MemberEvent::Down(_) => "down",
        MemberEvent::Removed(_) => "removed",
        _ => "other",
    };
    let member = event.member();
    Log::Event {
        host: host.to_owned(),
        event: name,
        about: member.address.host.clone(),
        incarnation: member.incarnation.0,
        generation: member.generation,
    }
}

/// Five members (`n1`…`n5`) up with the singleton running on one of them, then a pause that
/// puts what comes next at a different phase of probing on each seed.
pub(crate) fn formed(seed: u64) -> (HostSimulation, SimLog<Log>, Vec<String>) {
    let names = names(5);
    let log = SimLog::new();
    let mut simulation = HostSimulation::new(seed);
    members(&mut simulation, &names, &log);
    simulation
        .run_until(Duration::from_secs(60), || {
            names.iter().all(|n| seen_up(&log, n) == 5) && hosting(&log).len() == 1
        })
        .unwrap_or_else(|e| {
            panic!(
                "seed {seed}: no 5 members up with a singleton: {e}; {:#?}",
                log.entries()
            )
        });
    simulation
        .run_for(Duration::from_millis(seed * 37 % 1000))
        .unwrap();
    (simulation, log, names)
}

/// Whether any host saw any member unreachable or down, and the first such entry.
pub(crate) fn first_trouble(log: &SimLog<Log>) -> Option<rally::sim::Logged<Log>> {
    log.entries().into_iter().find(|e| {
        matches!(&e.entry, Log::Event { event, .. } if matches!(*event, "unreachable" | "down"))
    })
}

/// How many distinct members `host` has seen up (itself included), since its latest start.
pub(crate) fn seen_up(log: &SimLog<Log>, host: &str) -> usize {
    let mut up = std::collections::BTreeSet::new();
    let entries = log.entries();
    let boot = entries
        .iter()
        .rposition(|e| matches!(&e.entry, Log::Boot(h) if h == host))
        .unwrap_or(0);
    for e in &entries[boot..] {
        if let Log::Event {
            host: h,
            event,
            about,
            incarnation,
            ..
        } = &e.entry
            && h == host
        {
            match *event {
                "up" => {
                    up.insert((about.clone(), *incarnation));
                }
                "down" | "removed" => {
                    up.remove(&(about.clone(), *incarnation));
                }
                _ => {}
            }
        }
    }
    up.len()
}

/// Whether `host` saw the member on `about` declared down.
pub(crate) fn saw_down(log: &SimLog<Log>, host: &str, about: &str) -> bool {
    log.entries().iter().any(|e| {
        matches!(&e.entry, Log::Event { host: h, event: "down", about: a, .. } if h == host && a == about)
    })
}

/// The singleton's hosting intervals from the log: (host, start, end), `None` while it runs.
pub(crate) fn intervals(log: &SimLog<Log>) -> Vec<(String, Duration, Option<Duration>)> {
    let mut out: Vec<(String, Duration, Option<Duration>)> = Vec::new();
    for e in log.entries() {
        match &e.entry {
            Log::Start(host) => out.push((host.clone(), e.at, None)),
            Log::Stop(host) => {
                let open = out
                    .iter_mut()
                    .rev()
                    .find(|(h, _, end)| h == host && end.is_none())
                    .expect("a stop follows a start on the same host");
                open.2 = Some(e.at);
            }
            Log::Event { .. } | Log::Boot(_) => {}
        }
    }
    out
}

/// The hosts running the singleton now.
pub(crate) fn hosting(log: &SimLog<Log>) -> Vec<String> {
    intervals(log)
        .into_iter()
        .filter(|(_, _, end)| end.is_none())
        .map(|(host, _, _)| host)
        .collect()
}

/// Fails if two instances ever ran at once (an instance that stopped at the instant the
/// next started does not overlap it).
pub(crate) fn assert_never_two(log: &SimLog<Log>, what: &str) {
    let all = intervals(log);
    let far = Duration::MAX;
    for (i, a) in all.iter().enumerate() {
        for b in &all[i + 1..] {
            let overlap = a.1 < b.2.unwrap_or(far) && b.1 < a.2.unwrap_or(far);
            assert!(
                !overlap,
                "{what}: two singletons at once: {a:?} and {b:?}; all {all:?}"
            );
        }
    }
}

/// The incarnations of the member on `about` that `host` saw up, in order.
pub(crate) fn incarnations_seen(log: &SimLog<Log>, host: &str, about: &str) -> Vec<u64> {
    let mut seen = Vec::new();
    for e in log.entries() {
        if let Log::Event {
            host: h,
            event: "up",
            about: a,
            incarnation,
            ..
        } = &e.entry
            && h == host
            && a == about
            && !seen.contains(incarnation)
        {
            seen.push(*incarnation);
        }
    }
    seen
}

/// When `host` first saw the member on `about` declared down.
pub(crate) fn down_at(log: &SimLog<Log>, host: &str, about: &str) -> Option<Duration> {
    log.entries().into_iter().find_map(|e| match &e.entry {
        Log::Event {
            host: h,
            event: "down",
            about: a,
            ..
        } if h == host && a == about => Some(e.at),
        _ => None,
    })
}

/// The log without incarnations (drawn from the operating system's randomness, not from the
/// seed: see `docs/testing.md`), each replaced by its rank among the incarnations seen of the
/// same host. Generations stay: they come from the simulated clock.
pub(crate) fn replayable(log: &[rally::sim::Logged<Log>]) -> Vec<(Duration, Log)> {
    let mut ranks: Vec<(String, u64)> = Vec::new();
    log.iter()
        .map(|e| {
            let entry = match &e.entry {
                Log::Event {
                    host,
                    event,
                    about,
                    incarnation,
                    generation,
                } => {
                    let rank = match ranks
                        .iter()
                        .filter(|(h, _)| h == about)
                        .position(|(_, i)| i == incarnation)
                    {
                        Some(rank) => rank,
                        None => {
                            ranks.push((about.clone(), *incarnation));
                            ranks.iter().filter(|(h, _)| h == about).count() - 1
                        }
                    };
                    Log::Event {
                        host: host.clone(),
                        event,
                        about: about.clone(),
                        incarnation: rank as u64,
                        generation: *generation,
                    }
                }
                other => other.clone(),
            };
            (e.at, entry)
        })
        .collect()
}
