//! The cluster singleton's gate over simulated members: every member runs a `SingletonGate`
//! over the events it saw (replayed from the simulation's log at their instants), and the
//! intervals in which each member hosts are checked to never overlap — across a 2|3 partition
//! on 100 seeds, a graceful leave of the host, and a kill of the host.

#[path = "support/membership_sim.rs"]
mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rally_cluster::sim::MembershipSimulation;
use rally_cluster::{ClusterConfig, MemberId, SingletonChange, SingletonGate};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use support::{config, converged};

/// Hosting intervals per member, from replaying each member's events through its gate, up to
/// `end`; an interval still open at `end` ends at `None`.
fn hosting(
    sim: &MembershipSimulation,
    members: &[MemberId],
    end: Duration,
) -> HashMap<MemberId, Vec<(Duration, Option<Duration>)>> {
    hosting_of_role(sim, members, None, end)
}

/// [`hosting`] for a singleton limited to `role`.
fn hosting_of_role(
    sim: &MembershipSimulation,
    members: &[MemberId],
    role: Option<&str>,
    end: Duration,
) -> HashMap<MemberId, Vec<(Duration, Option<Duration>)>> {
    let base = Instant::now();
    let mut out = HashMap::new();
    for member in members {
        let mut gate = SingletonGate::new(member.clone(), role.map(str::to_owned), config());
        let mut intervals: Vec<(Duration, Option<Duration>)> = Vec::new();
        let mut apply = |change: Option<SingletonChange>, at: Duration| match change {
            Some(SingletonChange::Start) => intervals.push((at, None)),
            Some(SingletonChange::Stop) => {
                let open = intervals.last_mut().expect("a stop follows a start");
                open.1 = Some(at);
            }
            _ => {}
        };
        let timeouts =
            |gate: &mut SingletonGate,
             until: Duration,
             apply: &mut dyn FnMut(Option<SingletonChange>, Duration)| {
                while let Some(due) = gate.poll_timeout() {
                    let due_at = due - base;
                    if due_at > until {
                        break;
                    }
                    apply(gate.on_timeout(due), due_at);
                }
            };
        // Events seen at one instant arrived together (one packet): applied, then decided.
        let seen: Vec<_> = sim.log().iter().filter(|e| e.observer == *member).collect();
        for batch in seen.chunk_by(|a, b| a.at == b.at) {
            let at = batch[0].at;
            timeouts(&mut gate, at, &mut apply);
            for e in batch {
                gate.apply(&e.event, base + at);
            }
            apply(gate.decide(base + at), at);
        }
        timeouts(&mut gate, end, &mut apply);
        out.insert(member.clone(), intervals);
    }
    out
}

/// No two members' hosting intervals overlap; returns who hosts at `end`.
fn assert_never_two(
    intervals: &HashMap<MemberId, Vec<(Duration, Option<Duration>)>>,
    end: Duration,
    what: &str,
) -> Vec<MemberId> {
    let all: Vec<(&MemberId, Duration, Duration)> = intervals
        .iter()
        .flat_map(|(m, v)| v.iter().map(move |&(s, e)| (m, s, e.unwrap_or(end))))
        .collect();
    for (i, a) in all.iter().enumerate() {
        for b in &all[i + 1..] {
            let overlap = a.0 != b.0 && a.1 < b.2 && b.1 < a.2;
            assert!(
                !overlap,
                "{what}: {} and {} both hosted: {a:?} {b:?}",
                a.0, b.0
            );
        }
    }
    intervals
        .iter()
        .filter(|(_, v)| v.last().is_some_and(|(_, e)| e.is_none()))
        .map(|(m, _)| m.clone())
        .collect()
}

#[test]
fn a_partition_never_runs_two_singletons_and_the_side_of_three_keeps_one() {
    let config: ClusterConfig = config();
    for seed in 0..100 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let (mut sim, mut members) = converged(seed, 5, &config);
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
        sim.run_for(Duration::from_secs(45));
        let end = sim.elapsed();
        let hosts = assert_never_two(&hosting(&sim, &members, end), end, &format!("seed {seed}"));
        assert_eq!(
            hosts.len(),
            1,
            "seed {seed}: one host at the end: {hosts:?}"
        );
        assert!(
            three.contains(&hosts[0]),
            "seed {seed}: the side of three keeps it"
        );
    }
}

#[test]
fn a_leaving_host_hands_over_and_a_killed_host_is_replaced_after_the_margin() {
    let config: ClusterConfig = config();
    let (mut sim, mut members) = converged(3, 4, &config);
    members.sort();
    // A member hosts once it has been up for stable-after.
    sim.run_for(config.stable_after);
    let end = sim.elapsed();
    let hosts = assert_never_two(&hosting(&sim, &members, end), end, "converged");
    assert_eq!(hosts, [members[0].clone()], "the oldest hosts");
    sim.leave(&members[0]);
    sim.run_for(Duration::from_secs(10));
    let end = sim.elapsed();
    let hosts = assert_never_two(&hosting(&sim, &members, end), end, "leave");
    assert_eq!(hosts, [members[1].clone()], "the next oldest took over");
    sim.crash(&members[1]);
    let killed_at = sim.elapsed();
    sim.run_for(Duration::from_secs(40));
    let end = sim.elapsed();
    let mut intervals = hosting(&sim, &members, end);
    // A killed process hosts nothing from the kill on (its log just stops).
    for interval in intervals.get_mut(&members[1]).expect("replayed") {
        if interval.1.is_none() {
            interval.1 = Some(killed_at);
        }
    }
    let hosts = assert_never_two(&intervals, end, "kill");
    assert_eq!(hosts, [members[2].clone()], "the next oldest took over");
    let started = intervals[&members[2]][0].0;
    assert!(
        started >= killed_at + config.takeover_margin(3),
        "not before the margin: killed {killed_at:?}, started {started:?}"
    );
}

/// A singleton of a role: the oldest member, which lacks the role, never hosts; the oldest
/// member with the role does, and on its leave the next oldest with the role takes over,
/// never two at once.
#[test]
fn a_singleton_of_a_role_skips_older_members_without_it() {
    let plain: ClusterConfig = config();
    let mut worker = plain.clone();
    worker.roles = vec!["worker".to_owned()];
    let mut sim = MembershipSimulation::new(7);
    let mut members = vec![sim.add_member(&plain)];
    for _ in 0..3 {
        members.push(sim.add_member(&worker));
    }
    assert!(
        sim.run_until(Duration::from_secs(30), MembershipSimulation::converged)
            .is_ok(),
        "four members converged"
    );
    members.sort();
    assert!(
        !members[0].has_role("worker") && members[1..].iter().all(|m| m.has_role("worker")),
        "the premise: only the oldest lacks the role ({members:?})"
    );
    sim.run_for(plain.stable_after);
    let end = sim.elapsed();
    let hosts = assert_never_two(
        &hosting_of_role(&sim, &members, Some("worker"), end),
        end,
        "converged",
    );
    assert_eq!(hosts, [members[1].clone()], "the oldest worker hosts");
    sim.leave(&members[1]);
    sim.run_for(Duration::from_secs(10));
    let end = sim.elapsed();
    let intervals = hosting_of_role(&sim, &members, Some("worker"), end);
    let hosts = assert_never_two(&intervals, end, "leave");
    assert_eq!(
        hosts,
        [members[2].clone()],
        "the next oldest worker took over"
    );
    assert!(
        intervals[&members[0]].is_empty(),
        "the member without the role never hosted"
    );
}
