//! A crash and a restart of a member on simulated hosts and network (`rally::sim`): the
//! crashed member is downed by every survivor within the documented bound, the singleton it
//! hosted starts on a survivor and never runs twice at once, and the restarted host (a new
//! process on the same address) is admitted as a new incarnation.

#[path = "support/host_sim.rs"]
mod host_sim;

use std::time::Duration;

use host_sim::{assert_never_two, down_at, formed, hosting, incarnations_seen, seen_up};
use rally::cluster::ClusterConfig;

const SEEDS: u64 = 10;

/// Slack on top of the documented bound for delivering events (links take 1–5 ms).
const SLACK: Duration = Duration::from_millis(100);

#[test]
fn a_crashed_member_is_downed_within_the_bound_and_its_restart_rejoins_as_a_new_incarnation() {
    let config = ClusterConfig::default();
    let d = config.detection_bound(5);
    for seed in 0..SEEDS {
        let (mut simulation, log, names) = formed(seed);

        // Crash the singleton's host.
        let crashed = hosting(&log).remove(0);
        let survivors: Vec<&String> = names.iter().filter(|n| **n != crashed).collect();
        let t0 = simulation.elapsed();
        simulation.crash(&crashed).unwrap();
        let context = format!("seed {seed}, {crashed} crashed at {t0:?}");
        assert!(
            hosting(&log).is_empty(),
            "{context}: the instance went with its host"
        );
        simulation
            .run_until(Duration::from_secs(30), || {
                survivors
                    .iter()
                    .all(|s| down_at(&log, s, &crashed).is_some())
                    && hosting(&log).len() == 1
            })
            .unwrap_or_else(|e| panic!("{context}: {e}; {:#?}", log.entries()));
        // Downed when the view was stable for stable-after and the member unreachable for
        // the detection bound: at most D + stable-after after the crash.
        let bound = t0 + d + config.stable_after + SLACK;
        for s in &survivors {
            let at = down_at(&log, s, &crashed).expect("waited for it");
            assert!(
                at <= bound,
                "{context}: {s} downed it at {at:?}, after {bound:?}"
            );
        }
        let moved_to = hosting(&log).remove(0);
        assert!(
            survivors.contains(&&moved_to),
            "{context}: the singleton runs on a survivor"
        );

        // A new process on the same host: a new incarnation, admitted at once.
        let cut = log.entries().len();
        simulation.restart(&crashed).unwrap();
        let rejoined = simulation
            .run_until(Duration::from_secs(30), || {
                names.iter().all(|n| seen_up(&log, n) == 5)
            })
            .unwrap_or_else(|e| {
                panic!(
                    "{context}: the restarted member did not rejoin: {e}; {:#?}",
                    &log.entries()[cut..]
                )
            });
        for s in &survivors {
            let lives = incarnations_seen(&log, s, &crashed);
            assert_eq!(
                lives.len(),
                2,
                "{context}: {s} saw two lives of {crashed}: {lives:?}"
            );
            assert_ne!(lives[0], lives[1]);
        }
        simulation.run_for(Duration::from_secs(5)).unwrap();
        assert_never_two(&log, &context);
        assert_eq!(
            hosting(&log),
            vec![moved_to],
            "{context}: the restart did not move the singleton back"
        );
        eprintln!(
            "{context}: downed by all within {:?} of the crash; rejoined in {rejoined:?}",
            survivors
                .iter()
                .map(|s| down_at(&log, s, &crashed).unwrap())
                .max()
                .unwrap()
                - t0
        );
    }
}
