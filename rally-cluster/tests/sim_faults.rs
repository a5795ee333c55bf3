//! Faults short of a partition on simulated hosts and network (`rally::sim`): connections
//! broken at random (what packet loss looks like to a TCP user) and delay spikes, and a slow
//! link. Breaks and spikes shorter than the failure detector's bound leave the cluster whole
//! (nobody downed, the singleton stays put, never two at once); a link slowed down past the
//! probe timeout makes the member behind it unreachable, and a slower link than usual that
//! stays within it does not. A seed replays the faults and what they caused. A link cut between
//! two members only downs one or both of its ends, nobody else.

#[path = "support/host_sim.rs"]
mod host_sim;

use std::time::Duration;

use host_sim::{Log, assert_never_two, first_trouble, formed, hosting, replayable, seen_up};
use rally::cluster::ClusterConfig;
use rally::sim::{Fault, Logged, RandomFaults};

/// Breaks: each of the 10 links of five members breaks with probability 0.05 every 500 ms
/// (about one broken link a second in the cluster); spikes: 0.02, to 100 ms one way, so a
/// direct probe's round trip (200 ms) misses `probe-rtt` (150 ms) on that link while the
/// indirect probes through the others still get through.
fn faults() -> RandomFaults {
    RandomFaults::every(Duration::from_millis(500))
        .breaks(0.05)
        .delay_spikes(0.02, Duration::from_millis(100))
}

/// How long the faults run (simulated).
const FAULTY: Duration = Duration::from_secs(30);

const SEEDS: u64 = 8;

/// One seed: five members formed with the singleton, then [`FAULTY`] of random faults, then
/// 5 s without. Returns the log and the faults.
fn faulty_run(seed: u64) -> (Vec<Logged<Log>>, Vec<Logged<Fault>>) {
    let (mut simulation, log, names) = formed(seed);
    let host = hosting(&log);
    let context = format!("seed {seed}");
    assert!(
        first_trouble(&log).is_none(),
        "{context}: no trouble before the faults"
    );
    let before = log.entries().len();
    simulation.start_random_faults(faults()).unwrap();
    simulation.run_for(FAULTY).unwrap();
    simulation.stop_random_faults();
    simulation.run_for(Duration::from_secs(5)).unwrap();

    let thrown = simulation.faults().to_vec();
    let broken: usize = thrown
        .iter()
        .map(|f| match f.entry {
            Fault::Broke { connections, .. } => connections,
            _ => 0,
        })
        .sum();
    let spikes = thrown
        .iter()
        .filter(|f| matches!(f.entry, Fault::Spike { .. }))
        .count();
    assert!(
        broken >= 10,
        "{context}: the faults broke connections ({broken}): {thrown:?}"
    );
    let after = &log.entries()[before..];
    let downs: Vec<_> = after
        .iter()
        .filter(|e| matches!(&e.entry, Log::Event { event: "down", .. }))
        .collect();
    assert!(downs.is_empty(), "{context}: nobody is downed: {downs:#?}");
    let unreachable = after
        .iter()
        .filter(|e| {
            matches!(
                &e.entry,
                Log::Event {
                    event: "unreachable",
                    ..
                }
            )
        })
        .count();
    for name in &names {
        assert_eq!(seen_up(&log, name), 5, "{context}: {name} sees five up");
    }
    assert_never_two(&log, &context);
    assert_eq!(hosting(&log), host, "{context}: the singleton stayed put");
    eprintln!(
        "{context}: {broken} connections broken, {spikes} delay spikes in {FAULTY:?}; \
         {unreachable} unreachable events, nobody downed"
    );
    (log.entries(), thrown)
}

#[test]
fn random_connection_breaks_and_delay_spikes_down_nobody_and_never_run_two_singletons() {
    for seed in 0..SEEDS {
        faulty_run(seed);
    }
}

/// The same seed throws the same faults at the same instants and they cause the same events.
#[test]
fn a_seed_replays_the_faults_and_what_they_caused() {
    for seed in [3, 11] {
        let (first_log, first_faults) = faulty_run(seed);
        let (second_log, second_faults) = faulty_run(seed);
        assert_eq!(first_faults, second_faults, "seed {seed}: the same faults");
        let (first, second) = (replayable(&first_log), replayable(&second_log));
        let diverged = first.iter().zip(&second).position(|(a, b)| a != b);
        assert!(
            first.len() == second.len() && diverged.is_none(),
            "seed {seed}: the runs differ from entry {diverged:?}: {:?} vs {:?}",
            diverged.map(|i| &first[i]),
            diverged.map(|i| &second[i]),
        );
    }
}

/// A link slowed down so that a round trip takes longer than a probe period makes the member
/// behind it unreachable for the others (and, held long enough, downed: it is alone against
/// four); a link slowed down to a round trip within `probe-rtt` does not.
#[test]
fn a_delay_past_the_probe_timeout_makes_a_member_unreachable_and_a_shorter_one_does_not() {
    let config = ClusterConfig::default();
    for seed in 0..4 {
        let (mut simulation, log, names) = formed(seed);
        let slow = names[(seed % 5) as usize].as_str();
        let others: Vec<&str> = names
            .iter()
            .map(String::as_str)
            .filter(|n| *n != slow)
            .collect();
        let context = format!("seed {seed}, {slow} slowed down");

        // 60 ms one way: a 120 ms round trip, within probe-rtt (150 ms).
        let within = Duration::from_millis(60);
        assert!(within * 2 < config.probe_rtt);
        simulation.delay(&[slow], &others, within).unwrap();
        simulation.run_for(Duration::from_secs(20)).unwrap();
        assert!(
            first_trouble(&log).is_none(),
            "{context} to {within:?}: nobody unreachable: {:?}",
            first_trouble(&log)
        );

        // 400 ms one way: no ack (direct or indirect) comes back within a probe period.
        let past = Duration::from_millis(400);
        assert!(past * 2 > config.probe_period);
        simulation.delay(&[slow], &others, past).unwrap();
        let t0 = simulation.elapsed();
        let d = config.detection_bound(5);
        let seen = simulation.run_until(d + Duration::from_secs(1), || {
            others.iter().all(|o| {
                log.entries().iter().any(|e| {
                    e.at >= t0
                        && matches!(&e.entry, Log::Event { host, event: "unreachable", about, .. }
                            if host == o && about == slow)
                })
            })
        });
        let took = seen.unwrap_or_else(|e| {
            panic!(
                "{context} to {past:?}: not seen unreachable by all within D + 1 s: {e}; {:#?}",
                log.entries()
            )
        });
        // Held: alone against four, it downs itself and the four down it; never two
        // singletons.
        simulation.run_for(Duration::from_secs(15)).unwrap();
        assert!(
            log.entries().iter().any(|e| matches!(&e.entry,
                Log::Event { host, event: "down", about, .. } if host == slow && about == slow)),
            "{context}: the slow member downed itself"
        );
        assert_never_two(&log, &context);
        assert_eq!(hosting(&log).len(), 1, "{context}: one singleton");
        assert_ne!(hosting(&log), [slow], "{context}: not on the slow member");
        eprintln!("{context}: unreachable for all four {took:?} after the delay");
    }
}

/// One link cut between two members, each still reaching the other three: SWIM's indirect
/// probes still get through, so the unreachability comes from the transport's heartbeats,
/// and only the two ends see it. Each end then counts itself in a majority (four of five
/// reachable) and downs the other: one or both ends are downed (both when the two decisions
/// cross, as an "indirectly connected" pair is in other systems), nobody else; the three
/// others stay up, the singleton stays put and never runs twice.
#[test]
fn a_link_cut_between_two_members_downs_one_or_both_ends_and_nobody_else() {
    let pairs = [("n2", "n3"), ("n4", "n5"), ("n2", "n5"), ("n3", "n4")];
    let mut both = 0;
    for seed in 0..8 {
        let (mut simulation, log, names) = formed(seed);
        let host = hosting(&log);
        let (x, y) = pairs[(seed % 4) as usize];
        assert!(
            !host.iter().any(|h| h == x || h == y),
            "the cut is away from the singleton"
        );
        let others: Vec<&str> = names
            .iter()
            .map(String::as_str)
            .filter(|n| *n != x && *n != y)
            .collect();
        let context = format!("seed {seed}, link {x}-{y} cut");
        let before = log.entries().len();
        simulation.partition(&[x], &[y]).unwrap();
        let downed_by_all = |log: &Vec<Logged<Log>>, about: &str| {
            others.iter().all(|o| {
                log.iter().any(|e| {
                    matches!(&e.entry,
                    Log::Event { host, event: "down", about: a, .. } if host == o && a == about)
                })
            })
        };
        simulation
            .run_until(Duration::from_secs(30), || {
                let entries = log.entries();
                downed_by_all(&entries, x) || downed_by_all(&entries, y)
            })
            .unwrap_or_else(|e| panic!("{context}: no end downed: {e}"));
        simulation.run_for(Duration::from_secs(10)).unwrap();
        let after = &log.entries()[before..];
        for e in after {
            if let Log::Event {
                host, event, about, ..
            } = &e.entry
            {
                if matches!(*event, "unreachable" | "down") {
                    assert!(
                        about == x || about == y,
                        "{context}: {host} saw {about} {event}"
                    );
                }
                if *event == "unreachable" {
                    assert!(
                        host == x || host == y,
                        "{context}: only the ends see an end unreachable: {host} saw {about}"
                    );
                }
            }
        }
        for o in &others {
            assert!(
                seen_up(&log, o) >= 3,
                "{context}: {o} still sees the three up"
            );
        }
        let entries = log.entries();
        if downed_by_all(&entries, x) && downed_by_all(&entries, y) {
            both += 1;
        }
        assert_never_two(&log, &context);
        assert_eq!(hosting(&log), host, "{context}: the singleton stayed put");
    }
    eprintln!("a cut link downed both of its ends on {both} of 8 seeds, one end on the others");
}
