//! A 2|3 partition on the simulated network, across many seeds: the side of three keeps the
//! cluster, the side of two downs itself, and no member ever takes over from a member that is
//! still running (checked from the log of instants, against the documented takeover margin).

#[path = "support/membership_sim.rs"]
mod support;

use std::collections::HashMap;
use std::time::Duration;

use rally_cluster::sim::MembershipSimulation;
use rally_cluster::{ClusterConfig, DowningStrategy, MemberEvent, MemberId, MemberStatus};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use support::{config, converged, first_seen};

const SEEDS: u64 = 100;

/// When each member stopped (saw itself down), if it did.
fn stops(sim: &MembershipSimulation) -> HashMap<MemberId, Duration> {
    let mut stops = HashMap::new();
    for e in sim.log() {
        if e.event == MemberEvent::Down(e.observer.clone()) {
            stops.entry(e.observer.clone()).or_insert(e.at);
        }
    }
    stops
}

/// Every downing seen by a running member licenses it to take over from the downed member
/// `margin` later; by then one of the two must have stopped. Returns the smallest slack.
fn assert_no_two_owners(sim: &MembershipSimulation, margin: Duration, seed: u64) -> Duration {
    let stops = stops(sim);
    let mut least = Duration::MAX;
    for e in sim.log() {
        let MemberEvent::Down(downed) = &e.event else {
            continue;
        };
        if *downed == e.observer {
            continue;
        }
        let takeover = e.at + margin;
        let stopped_first = [downed, &e.observer]
            .into_iter()
            .filter_map(|m| stops.get(m))
            .min()
            .copied();
        match stopped_first {
            Some(stop) if stop <= takeover => least = least.min(takeover - stop),
            _ => panic!(
                "seed {seed}: {} downed {downed} at {:?} and could take over at {takeover:?}, \
                 but neither had stopped by then (stops: {stops:?})",
                e.observer, e.at
            ),
        }
    }
    least
}

fn split(
    seed: u64,
    config: &ClusterConfig,
) -> (MembershipSimulation, Vec<MemberId>, Vec<MemberId>) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let (mut sim, mut members) = converged(seed, 5, config);
    // Adverse but honest networks on most seeds: jitter and a little loss.
    if seed % 4 != 0 {
        sim.set_latency(
            Duration::from_millis(1),
            Duration::from_millis(rng.random_range(2..40)),
        );
        sim.set_drop_rate(f64::from(rng.random_range(0u32..3)) / 100.0);
    }
    sim.run_for(Duration::from_millis(rng.random_range(0..3000)));
    members.shuffle(&mut rng);
    let (two, three) = members.split_at(2);
    sim.partition(&[two, three]);
    (sim, two.to_vec(), three.to_vec())
}

#[test]
fn the_side_of_three_survives_and_the_side_of_two_downs_itself_on_every_seed() {
    let config = config();
    let margin = config.takeover_margin(5);
    let mut least_slack = Duration::MAX;
    let mut slowest_down = Duration::ZERO;
    for seed in 0..SEEDS {
        let (mut sim, two, three) = split(seed, &config);
        let cut_at = sim.elapsed();
        let settled = sim
            .run_until(Duration::from_secs(60), |sim| {
                two.iter()
                    .all(|m| sim.core(m).is_some_and(|c| c.is_stopped()))
                    && three.iter().all(|observer| {
                        two.iter()
                            .all(|m| sim.status_seen_by(observer, m) == Some(MemberStatus::Down))
                    })
            })
            .is_ok();
        if !settled {
            for e in sim
                .log()
                .iter()
                .filter(|e| e.at + Duration::from_secs(5) >= cut_at)
            {
                eprintln!("{:?} {} {:?}", e.at, e.observer.address.port, e.event);
            }
            eprintln!(
                "two {:?} three {:?}",
                two.iter().map(|m| m.address.port).collect::<Vec<_>>(),
                three.iter().map(|m| m.address.port).collect::<Vec<_>>()
            );
        }
        assert!(settled, "seed {seed}: not settled 60 s after the cut");
        for m in &two {
            assert_eq!(
                sim.core(m).unwrap().local().status,
                MemberStatus::Down,
                "seed {seed}: {m} on the side of two"
            );
            let stop = first_seen(&sim, m, &MemberEvent::Down(m.clone())).unwrap();
            slowest_down = slowest_down.max(stop - cut_at);
        }
        for m in &three {
            assert!(
                !sim.core(m).unwrap().is_stopped(),
                "seed {seed}: {m} stopped"
            );
            for other in &three {
                assert_eq!(
                    sim.status_seen_by(m, other),
                    Some(MemberStatus::Up),
                    "seed {seed}"
                );
            }
        }
        least_slack = least_slack.min(assert_no_two_owners(&sim, margin, seed));
    }
    // The figures the protocol document quotes come from this line.
    println!(
        "{SEEDS} seeds: the side of two stopped at most {slowest_down:?} after the cut; \
         least slack before the takeover margin ({margin:?}): {least_slack:?}"
    );
}

#[test]
fn a_healed_partition_does_not_bring_downed_members_back() {
    let config = config();
    let (mut sim, two, three) = split(5, &config);
    sim.run_for(Duration::from_secs(30));
    sim.heal();
    sim.run_for(Duration::from_secs(30));
    for m in &three {
        for gone in &two {
            assert_eq!(sim.status_seen_by(m, gone), Some(MemberStatus::Down));
        }
    }
    assert!(sim.converged(), "the three still form one cluster");
    // The downed incarnations rejoin only as new members.
    let back = sim.add_member_at(two[0].address.port, &config);
    assert!(
        sim.run_until(Duration::from_secs(10), MembershipSimulation::converged)
            .is_ok()
    );
    assert_eq!(sim.status_seen_by(&three[0], &back), Some(MemberStatus::Up));
}

/// Every downing strategy resolves a 2|3 cut as `docs/cluster-protocol.md` says, end to end
/// through the membership core (not only the pure `decide`): static-quorum of 3 keeps the
/// three, keep-oldest keeps the side of the oldest even when it is the two, down-all downs
/// all five; in each case no member takes over from one that is still running.
#[test]
fn every_downing_strategy_resolves_a_two_three_cut_as_documented() {
    let strategies = [
        (
            "static-quorum 3",
            DowningStrategy::StaticQuorum { quorum_size: 3 },
        ),
        (
            "keep-oldest",
            DowningStrategy::KeepOldest {
                down_if_alone: false,
                role: None,
            },
        ),
        ("down-all", DowningStrategy::DownAll),
    ];
    for (name, strategy) in strategies {
        let mut config = config();
        config.downing = strategy.clone();
        let margin = config.takeover_margin(5);
        for seed in 0..10 {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let (mut sim, mut members) = converged(seed, 5, &config);
            sim.run_for(Duration::from_millis(rng.random_range(0..3000)));
            members.sort();
            let oldest = members.remove(0);
            members.shuffle(&mut rng);
            // The oldest and one other against three.
            let two = vec![oldest, members.remove(0)];
            let three = members;
            sim.partition(&[&two, &three]);
            let (survivors, stopped): (Vec<&MemberId>, Vec<&MemberId>) = match &strategy {
                DowningStrategy::StaticQuorum { .. } => {
                    (three.iter().collect(), two.iter().collect())
                }
                DowningStrategy::KeepOldest { .. } => {
                    (two.iter().collect(), three.iter().collect())
                }
                _ => (Vec::new(), two.iter().chain(&three).collect()),
            };
            let context = format!("{name}, seed {seed}");
            let settled = sim
                .run_until(Duration::from_secs(60), |sim| {
                    stopped
                        .iter()
                        .all(|m| sim.core(m).is_some_and(|c| c.is_stopped()))
                        && survivors.iter().all(|observer| {
                            stopped.iter().all(|m| {
                                sim.status_seen_by(observer, m) == Some(MemberStatus::Down)
                            })
                        })
                })
                .is_ok();
            assert!(settled, "{context}: not settled 60 s after the cut");
            for m in &stopped {
                assert_eq!(
                    sim.core(m).unwrap().local().status,
                    MemberStatus::Down,
                    "{context}: {m} downed itself"
                );
            }
            // Quiet for a while: the survivors stay.
            sim.run_for(Duration::from_secs(10));
            for m in &survivors {
                assert!(!sim.core(m).unwrap().is_stopped(), "{context}: {m} stopped");
            }
            assert_no_two_owners(&sim, margin, seed);
        }
    }
}
