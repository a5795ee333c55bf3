//! A 2|3 partition of five members on simulated hosts and network (`rally::sim`), the
//! singleton a user actor: the side of two downs itself within the documented bound, the side
//! of three downs the other two and keeps (or takes over) the singleton, and the log of the
//! singleton's start/stop instants (simulated time) shows no two instances at once — across
//! many seeds. A seed replays the same run.

#[path = "support/host_sim.rs"]
mod host_sim;

use std::time::Duration;

use host_sim::{Log, assert_never_two, down_at, formed, hosting, names, replayable, seen_up};
use rally::cluster::ClusterConfig;
use rally::sim::{HostSimulation, Logged, SimLog};

/// Seeds of the partition test (the issue asks for 100): each is about a third of a second of
/// real time.
const SEEDS: u64 = 100;

/// Slack on top of the documented bounds for delivering events (links take 1–5 ms).
const SLACK: Duration = Duration::from_millis(100);

/// A run after the cut and its checks.
struct Cut {
    simulation: HostSimulation,
    log: SimLog<Log>,
    minority: Vec<String>,
    majority: Vec<String>,
}

/// Runs one seed: five members up with the singleton, a cut that isolates the singleton's
/// host and one other member, then the checks. Returns the log.
fn partition_run(seed: u64) -> Vec<Logged<Log>> {
    cut(seed).log.entries()
}

/// [`partition_run`], returning the simulation to go on with.
fn cut(seed: u64) -> Cut {
    let (mut simulation, log, names) = formed(seed);
    let host = hosting(&log).remove(0);
    let others: Vec<&String> = names.iter().filter(|n| **n != host).collect();
    let other = others[(seed % 4) as usize].clone();
    let minority = [host.as_str(), other.as_str()];
    let majority: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| !minority.contains(n))
        .collect();
    let t0 = simulation.elapsed();
    simulation.partition(&minority, &majority).unwrap();

    // Every member of the three sees both of the two down; the singleton runs on one of the
    // three.
    let decided = simulation.run_until(Duration::from_secs(30), || {
        majority
            .iter()
            .all(|m| minority.iter().all(|l| down_at(&log, m, l).is_some()))
            && hosting(&log).iter().any(|h| majority.contains(&h.as_str()))
    });
    let context = || format!("seed {seed}, cut {minority:?} | {majority:?} at {t0:?}");
    decided.unwrap_or_else(|e| panic!("{}: {e}; {:#?}", context(), log.entries()));
    // Quiet for a while: nothing changes back.
    simulation.run_for(Duration::from_secs(5)).unwrap();

    let config = ClusterConfig::default();
    let d = config.detection_bound(5);
    let stops_by = t0 + d + config.stable_after.max(d) + config.down_all_when_unstable + SLACK;
    for l in minority {
        let at = down_at(&log, l, l).unwrap_or_else(|| {
            panic!(
                "{}: {l} did not down itself; {:#?}",
                context(),
                log.entries()
            )
        });
        assert!(
            at <= stops_by,
            "{}: {l} downed itself at {at:?}, after the bound {stops_by:?}",
            context()
        );
    }
    assert_never_two(&log, &context());
    let last_self_down = minority
        .iter()
        .filter_map(|l| down_at(&log, l, l))
        .max()
        .expect("checked above");
    let taken_over = log
        .entries()
        .iter()
        .rev()
        .find(|e| matches!(&e.entry, Log::Start(h) if majority.contains(&h.as_str())))
        .map(|e| e.at);
    eprintln!(
        "{}: the two downed themselves {:?} after the cut; the singleton started on the three {:?} after it",
        context(),
        last_self_down - t0,
        taken_over.map(|at| at.saturating_sub(t0)),
    );
    let now = hosting(&log);
    assert_eq!(
        now.len(),
        1,
        "{}: one singleton runs at the end: {now:?}",
        context()
    );
    assert!(
        majority.contains(&now[0].as_str()),
        "{}: it runs on the side of three",
        context()
    );
    let (minority, majority) = (
        minority.map(str::to_owned).to_vec(),
        majority.into_iter().map(str::to_owned).collect(),
    );
    Cut {
        simulation,
        log,
        minority,
        majority,
    }
}

/// After the heal, the downed lives of the two stay out (the three never see them up or
/// reachable again) and the singleton stays where it is; restarted, the two hosts rejoin as
/// new incarnations.
#[test]
fn after_the_heal_the_downed_lives_stay_out_and_their_restarts_rejoin() {
    for seed in 0..5 {
        let Cut {
            mut simulation,
            log,
            minority,
            majority,
        } = cut(seed);
        let context = format!("seed {seed}, cut {minority:?} | {majority:?}");
        let host = hosting(&log);
        let minority: Vec<&str> = minority.iter().map(String::as_str).collect();
        let majority: Vec<&str> = majority.iter().map(String::as_str).collect();
        simulation.heal(&minority, &majority).unwrap();
        simulation.run_for(Duration::from_secs(10)).unwrap();
        for m in &majority {
            assert_eq!(
                seen_up(&log, m),
                3,
                "{context}: {m} still sees three members up"
            );
            for l in &minority {
                let after = back_after_down(&log, m, l);
                assert!(
                    after.is_empty(),
                    "{context}: {m} saw the downed {l} come back: {after:?}"
                );
            }
        }
        assert_eq!(
            hosting(&log),
            host,
            "{context}: the heal did not move the singleton"
        );

        for l in &minority {
            simulation.restart(l).unwrap();
        }
        simulation
            .run_until(Duration::from_secs(30), || {
                names(5).iter().all(|n| seen_up(&log, n) == 5)
            })
            .unwrap_or_else(|e| panic!("{context}: the restarted two did not rejoin: {e}"));
        simulation.run_for(Duration::from_secs(5)).unwrap();
        assert_never_two(&log, &context);
        assert_eq!(
            hosting(&log),
            host,
            "{context}: the rejoin did not move the singleton"
        );
    }
}

/// Events `host` saw about the life of `about` it saw downed, after the downing, other than
/// its removal.
fn back_after_down(log: &SimLog<Log>, host: &str, about: &str) -> Vec<Log> {
    let entries = log.entries();
    let Some(down) = entries.iter().position(|e| {
        matches!(&e.entry, Log::Event { host: h, event: "down", about: a, .. } if h == host && a == about)
    }) else {
        return Vec::new();
    };
    let Log::Event {
        incarnation: life, ..
    } = &entries[down].entry
    else {
        unreachable!("matched above")
    };
    entries[down + 1..]
        .iter()
        .filter(|e| matches!(&e.entry, Log::Event { host: h, about: a, incarnation, event, .. }
            if h == host && a == about && incarnation == life && *event != "removed" && *event != "down"))
        .map(|e| e.entry.clone())
        .collect()
}

#[test]
fn the_side_of_two_downs_itself_and_one_singleton_runs_on_the_side_of_three_on_every_seed() {
    for seed in 0..SEEDS {
        partition_run(seed);
    }
}

/// Two runs of a seed give the same log: the same events at the same simulated instants, in
/// the same order (incarnations, drawn from the operating system, compared by rank).
#[test]
fn a_seed_replays_the_same_log_exactly() {
    for seed in [7, 19] {
        let first = replayable(&partition_run(seed));
        let second = replayable(&partition_run(seed));
        // The generations (ages) each host saw, and who ran the singleton when: the same.
        let generations = |log: &[(Duration, Log)]| {
            log.iter()
                .filter_map(|(_, e)| match e {
                    Log::Event {
                        about,
                        incarnation,
                        generation,
                        ..
                    } => Some(((about.clone(), *incarnation), *generation)),
                    _ => None,
                })
                .collect::<std::collections::BTreeMap<_, _>>()
        };
        let starts = |log: &[(Duration, Log)]| {
            log.iter()
                .filter(|(_, e)| matches!(e, Log::Start(_)))
                .cloned()
                .collect::<Vec<_>>()
        };
        assert_eq!(generations(&first).len(), 5, "seed {seed}: five lives");
        assert_eq!(
            generations(&first),
            generations(&second),
            "seed {seed}: the same generations"
        );
        assert!(starts(&first).len() >= 2, "seed {seed}: a takeover");
        assert_eq!(
            starts(&first),
            starts(&second),
            "seed {seed}: the singleton on the same hosts at the same instants"
        );
        let diverged = first.iter().zip(&second).position(|(a, b)| a != b);
        assert!(
            first.len() == second.len() && diverged.is_none(),
            "seed {seed}: the runs differ from entry {diverged:?}: {:?} vs {:?}",
            diverged.map(|i| &first[i]),
            diverged.map(|i| &second[i]),
        );
    }
}
