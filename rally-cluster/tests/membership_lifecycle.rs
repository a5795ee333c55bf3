//! Member lifecycles on the simulated network: join, graceful leave, a killed member downed
//! after stable-after, and a restart on the same address admitted as a new member.

#[path = "support/membership_sim.rs"]
mod support;

use std::time::Duration;

use rally_cluster::sim::MembershipSimulation;
use rally_cluster::{MemberEvent, MemberStatus};
use support::{config, converged, first_seen, seen};

#[test]
fn five_members_joining_at_once_converge_and_report_joined_then_up() {
    for seed in 0..20 {
        let (sim, members) = converged(seed, 5, &config());
        assert!(
            sim.elapsed() < Duration::from_secs(5),
            "seed {seed}: converged only after {:?}",
            sim.elapsed()
        );
        for observer in &members {
            for subject in members.iter().filter(|s| *s != observer) {
                let events = seen(&sim, observer, subject);
                assert_eq!(
                    events,
                    [
                        &MemberEvent::Joined(subject.clone()),
                        &MemberEvent::Up(subject.clone())
                    ],
                    "seed {seed}: {observer} about {subject}"
                );
            }
            assert_eq!(
                seen(&sim, observer, observer),
                [
                    &MemberEvent::Joined(observer.clone()),
                    &MemberEvent::Up(observer.clone())
                ]
            );
        }
    }
}

#[test]
fn a_graceful_leave_is_reported_as_leaving_then_removed_never_down() {
    let (mut sim, members) = converged(1, 4, &config());
    let leaver = members[3].clone();
    sim.leave(&leaver);
    let gone = sim
        .run_until(Duration::from_secs(10), |sim| {
            members[..3]
                .iter()
                .all(|m| sim.status_seen_by(m, &leaver).is_none())
        })
        .is_ok();
    assert!(
        gone,
        "{:#?}",
        sim.log()
            .iter()
            .filter(|e| e.at > Duration::from_secs(1))
            .collect::<Vec<_>>()
    );
    for observer in &members[..3] {
        let events = seen(&sim, observer, &leaver);
        assert_eq!(
            &events[2..],
            [
                &MemberEvent::Leaving(leaver.clone()),
                &MemberEvent::Removed(leaver.clone())
            ],
            "{observer}"
        );
    }
    assert!(sim.core(&leaver).unwrap().is_stopped());
    // Nobody downed anybody, and the rest still agree.
    assert!(
        sim.log()
            .iter()
            .all(|e| !matches!(e.event, MemberEvent::Down(_)))
    );
    sim.run_for(Duration::from_secs(20));
    assert!(sim.converged());
}

/// The leaver's own link to one member is slow (its connection backed up under load), so the
/// other members, who hear the leave at once, could gossip the leaver's SWIM *down* to that
/// member before the leaver's `Leaving` notice reaches it. It must still report `Leaving`,
/// then `Removed`: a graceful leave is never a down, whatever path news of it takes.
#[test]
fn a_leave_whose_notice_is_overtaken_by_gossip_is_still_not_a_down() {
    // Longer than the others take to relay the leaver's down (a gossip round or a probe,
    // 200 ms), shorter than stable-after (the leaver waits that long at most for a member).
    let slow = Duration::from_secs(1);
    let mut wrong = Vec::new();
    for seed in 0..10 {
        let (mut sim, members) = converged(seed, 4, &config());
        let (leaver, behind) = (members[0].clone(), members[1].clone());
        sim.delay_link(&leaver, &behind, slow);
        sim.leave(&leaver);
        // Until every other member has taken it out of service, as removed or as down.
        assert!(
            sim.run_until(Duration::from_secs(10), |sim| members[1..].iter().all(
                |m| sim
                    .status_seen_by(m, &leaver)
                    .is_none_or(|s| s == MemberStatus::Down)
            ))
            .is_ok(),
            "seed {seed}: the leaver is still serving somewhere"
        );
        assert!(sim.core(&leaver).unwrap().is_stopped(), "seed {seed}");
        for observer in &members[1..] {
            // Its status as each saw it change. Reachability is apart from status: a member
            // may see the leaver unreachable once it has stopped, before the news of its exit
            // arrives.
            let about_leaver: Vec<_> = seen(&sim, observer, &leaver)
                .into_iter()
                .filter(|e| !matches!(e, MemberEvent::Unreachable(_) | MemberEvent::Reachable(_)))
                .collect();
            if about_leaver[2..]
                != [
                    &MemberEvent::Leaving(leaver.clone()),
                    &MemberEvent::Removed(leaver.clone()),
                ]
            {
                wrong.push(format!("seed {seed}: {observer} saw {about_leaver:?}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// A member that never acknowledges the leave notice (cut off from the leaver) delays the
/// leave by `stable-after` at most; the members that heard it report `Leaving`, then `Removed`.
#[test]
fn a_leave_waits_for_a_member_that_never_acknowledges_only_up_to_stable_after() {
    let config = config();
    for seed in 0..5 {
        let (mut sim, members) = converged(seed, 4, &config);
        let (leaver, cut_off) = (members[0].clone(), members[3].clone());
        sim.partition(&[std::slice::from_ref(&cut_off)]);
        let left_at = sim.elapsed();
        sim.leave(&leaver);
        assert!(
            sim.run_until(Duration::from_secs(10), |sim| sim
                .core(&leaver)
                .unwrap()
                .is_stopped())
                .is_ok(),
            "seed {seed}: the leaver never stopped"
        );
        let stopped = first_seen(&sim, &leaver, &MemberEvent::Removed(leaver.clone()))
            .expect("the leaver reports itself removed");
        assert!(
            stopped - left_at >= config.stable_after,
            "seed {seed}: it waited for the cut-off member ({:?})",
            stopped - left_at
        );
        assert!(
            stopped - left_at <= config.stable_after + config.probe_period,
            "seed {seed}: stopped {:?} after the leave",
            stopped - left_at
        );
        assert!(
            sim.run_until(Duration::from_secs(10), |sim| members[1..3]
                .iter()
                .all(|m| sim.status_seen_by(m, &leaver).is_none()))
                .is_ok(),
            "seed {seed}: the leaver was not removed"
        );
        for observer in &members[1..3] {
            assert_eq!(
                &seen(&sim, observer, &leaver)[2..],
                [
                    &MemberEvent::Leaving(leaver.clone()),
                    &MemberEvent::Removed(leaver.clone())
                ],
                "seed {seed}: {observer}"
            );
        }
    }
}

#[test]
fn a_killed_member_is_downed_only_after_stable_after() {
    let config = config();
    let mut failover = Vec::new();
    for seed in 0..10 {
        let (mut sim, members) = converged(seed, 5, &config);
        let victim = members[2].clone();
        sim.crash(&victim);
        let killed_at = sim.elapsed();
        assert!(
            sim.run_until(Duration::from_secs(30), |sim| members
                .iter()
                .filter(|m| **m != victim)
                .all(|m| sim.status_seen_by(m, &victim) == Some(MemberStatus::Down)))
                .is_ok(),
            "seed {seed}: the victim was not downed everywhere within 30 s"
        );
        let unreachable = members
            .iter()
            .filter(|m| **m != victim)
            .filter_map(|m| first_seen(&sim, m, &MemberEvent::Unreachable(victim.clone())))
            .min()
            .expect("somebody saw it unreachable first");
        let downed = members
            .iter()
            .filter(|m| **m != victim)
            .filter_map(|m| first_seen(&sim, m, &MemberEvent::Down(victim.clone())))
            .min()
            .expect("downed");
        assert!(
            downed >= unreachable + config.stable_after,
            "seed {seed}: downed at {downed:?}, unreachable at {unreachable:?}"
        );
        // Failover budget: detection plus stable-after stays under 10 s with the defaults.
        assert!(
            downed - killed_at < Duration::from_secs(10),
            "seed {seed}: downed {:?} after the kill",
            downed - killed_at
        );
        failover.push(downed - killed_at);
        // Nobody else was downed, and the survivors still form one cluster.
        for e in sim.log() {
            if let MemberEvent::Down(m) = &e.event {
                assert_eq!(*m, victim, "seed {seed}: {e:?}");
            }
        }
    }
    failover.sort();
    println!(
        "failover with the defaults (kill to first down, 5 members, 10 seeds): min {:?}, median {:?}, max {:?}",
        failover[0],
        failover[failover.len() / 2],
        failover[failover.len() - 1]
    );
}

/// A member paused (SIGSTOP) until the others have downed it and forgotten it
/// (`remove-down-after`) must not be admitted again when it resumes: a life that was downed
/// never comes back. It learns it was downed and stops instead.
#[test]
fn a_member_paused_past_its_removal_is_not_admitted_again_and_stops() {
    let mut config = config();
    config.remove_down_after = Duration::from_secs(2);
    for seed in 0..10 {
        let (mut sim, members) = converged(seed, 3, &config);
        let victim = members[0].clone();
        let survivors: Vec<_> = members.iter().filter(|m| **m != victim).collect();
        sim.pause(&victim);
        assert!(
            sim.run_until(Duration::from_secs(60), |sim| survivors.iter().all(|m| sim
                .status_seen_by(m, &victim)
                .is_none()
                && first_seen(sim, m, &MemberEvent::Removed(victim.clone()))
                    .is_some()))
                .is_ok(),
            "seed {seed}: the paused member was not downed and removed"
        );
        let resumed_at = sim.elapsed();
        sim.resume(&victim);
        assert!(
            sim.run_until(Duration::from_secs(30), |sim| sim
                .core(&victim)
                .is_some_and(|c| c.is_stopped()))
                .is_ok(),
            "seed {seed}: the resumed member did not stop"
        );
        sim.run_for(Duration::from_secs(5));
        for e in sim.log().iter().filter(|e| e.at >= resumed_at) {
            if e.observer != victim {
                assert!(
                    !matches!(&e.event, MemberEvent::Joined(m) | MemberEvent::Up(m) if *m == victim),
                    "seed {seed}: admitted again after it resumed: {e:?}"
                );
            }
        }
        for m in &survivors {
            assert_ne!(
                sim.status_seen_by(m, &victim),
                Some(MemberStatus::Up),
                "seed {seed}: {m} sees the old life up"
            );
        }
        // Its return was counted where it was refused.
        let refused: u64 = survivors
            .iter()
            .map(|m| sim.core(m).unwrap().stats().impossible)
            .sum();
        assert!(refused >= 1, "seed {seed}: the return was not counted");
    }
}

#[test]
fn a_restart_on_the_same_address_is_a_new_member_admitted_at_once() {
    let (mut sim, members) = converged(3, 4, &config());
    let old = members[1].clone();
    sim.crash(&old);
    // The new process starts before anybody noticed the old one died.
    let new = sim.add_member_at(old.address.port, &config());
    assert_ne!(new, old);
    assert!(new.supersedes(&old));
    let restarted_at = sim.elapsed();
    assert!(
        sim.run_until(Duration::from_secs(10), MembershipSimulation::converged)
            .is_ok()
    );
    assert!(
        sim.elapsed() - restarted_at < Duration::from_secs(3),
        "admitted after {:?}",
        sim.elapsed() - restarted_at
    );
    for observer in [&members[0], &members[2], &members[3]] {
        // The old life is removed, not downed, and never comes back.
        let about_old = seen(&sim, observer, &old);
        assert_eq!(
            about_old.last(),
            Some(&&MemberEvent::Removed(old.clone())),
            "{observer}"
        );
        assert!(!about_old.contains(&&MemberEvent::Down(old.clone())));
        assert_eq!(
            seen(&sim, observer, &new),
            [
                &MemberEvent::Joined(new.clone()),
                &MemberEvent::Up(new.clone())
            ]
        );
        assert_eq!(sim.status_seen_by(observer, &old), None);
    }
    sim.run_for(Duration::from_secs(30));
    assert!(sim.converged());
}

#[test]
fn the_same_seed_replays_the_same_history() {
    let run = |seed| {
        let mut sim = MembershipSimulation::new(seed);
        sim.set_drop_rate(0.05);
        let members = sim.add_members(5, &config());
        sim.run_for(Duration::from_secs(5));
        sim.crash(&members[4]);
        sim.run_for(Duration::from_secs(20));
        sim.log().to_vec()
    };
    let a = run(11);
    assert!(a.len() > 20);
    assert_eq!(a, run(11));
    assert_ne!(a, run(12));
}

/// The transport's failure detector (the remoting heartbeats) and SWIM's probes give one
/// reachability view: a member whose connection's heartbeats stop is unreachable even while
/// SWIM (through indirect probes) still hears it, reachable again when the heartbeats come
/// back before a decision, and downed by the majority if they do not.
#[test]
fn the_transport_detector_and_swim_give_one_reachability_view() {
    let config = config();
    for seed in 0..5 {
        let (mut sim, members) = converged(seed, 3, &config);
        let (a, c) = (members[0].clone(), members[2].clone());

        // Heartbeats from c stop reaching a, then come back within stable-after.
        sim.transport_verdict(&a, &c, false);
        assert_eq!(
            seen(&sim, &a, &c).last(),
            Some(&&MemberEvent::Unreachable(c.clone())),
            "seed {seed}"
        );
        sim.run_for(config.stable_after / 2);
        sim.transport_verdict(&a, &c, true);
        assert_eq!(
            seen(&sim, &a, &c).last(),
            Some(&&MemberEvent::Reachable(c.clone())),
            "seed {seed}"
        );
        sim.run_for(config.stable_after * 3);
        assert!(
            sim.log()
                .iter()
                .all(|e| !matches!(e.event, MemberEvent::Down(_))),
            "seed {seed}: nobody downed"
        );

        // They stop for good: a and b, the majority, down c, though SWIM alone hears it.
        let cut = sim.elapsed();
        sim.transport_verdict(&a, &c, false);
        assert!(
            sim.run_until(Duration::from_secs(30), |sim| members
                .iter()
                .filter(|m| **m != c)
                .all(|m| sim.status_seen_by(m, &c) == Some(MemberStatus::Down)))
                .is_ok(),
            "seed {seed}: c not downed"
        );
        let downed = first_seen(&sim, &a, &MemberEvent::Down(c.clone())).unwrap();
        assert!(
            downed >= cut + config.stable_after,
            "seed {seed}: decided only after stable-after"
        );
    }
}
