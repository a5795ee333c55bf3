//! Helpers shared by the simulated membership tests.
#![allow(dead_code)]

use std::time::Duration;

use rally_cluster::sim::{LoggedEvent, MembershipSimulation};
use rally_cluster::{ClusterConfig, MemberEvent, MemberId};

/// Settings of the simulated tests: the defaults, so the figures are the ones users get.
pub(crate) fn config() -> ClusterConfig {
    ClusterConfig::default()
}

/// Events `observer` saw about `subject`, in order.
pub(crate) fn seen<'a>(
    sim: &'a MembershipSimulation,
    observer: &MemberId,
    subject: &MemberId,
) -> Vec<&'a MemberEvent> {
    sim.log()
        .iter()
        .filter(|e| e.observer == *observer && e.event.member() == subject)
        .map(|e| &e.event)
        .collect()
}

/// When `observer` first saw `event`.
pub(crate) fn first_seen(
    sim: &MembershipSimulation,
    observer: &MemberId,
    event: &MemberEvent,
) -> Option<Duration> {
    sim.log()
        .iter()
        .find(|e: &&LoggedEvent| e.observer == *observer && e.event == *event)
        .map(|e| e.at)
}

/// A simulation of `n` members that has converged.
pub(crate) fn converged(
    seed: u64,
    n: usize,
    config: &ClusterConfig,
) -> (MembershipSimulation, Vec<MemberId>) {
    let mut sim = MembershipSimulation::new(seed);
    let members = sim.add_members(n, config);
    assert!(
        sim.run_until(Duration::from_secs(30), MembershipSimulation::converged)
            .is_ok(),
        "seed {seed}: {n} members did not converge in 30 s of simulated time"
    );
    (sim, members)
}
