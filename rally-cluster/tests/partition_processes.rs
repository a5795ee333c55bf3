//! A 2|3 partition of five member processes, each in its own network namespace, joined by
//! veth pairs to a bridge in a sixth; nftables rules in every member's namespace drop all
//! traffic between the sides, both ways. The side of two downs itself; the side of three
//! keeps the singleton and takes over the identities the two held; from the start/stop
//! instants every process logged on `CLOCK_MONOTONIC` (one clock for every namespace): never
//! two singletons, never two activations of one identity at once, with traffic to the same
//! identities from both sides throughout. Then the cut is healed: the downed lives stay out,
//! and the two processes restarted on their addresses rejoin as new incarnations, with still one
//! singleton and never two activations of one identity.
//!
//! Needs root (network namespaces, nftables): `.ci/run` runs it with `-- --ignored
//! --test-threads=1` (one test at a time: each starts up to eight member processes).

#[path = "support/processes.rs"]
mod processes;

use std::process::Command;

use processes::{
    MemberProcess, Spec, activation_lives, assert_no_overlap, ms, run_if_member, singleton_lives,
    start_cluster,
};
use rally_test::harness::{self, Fact, mono_ns, trial};

fn main() -> std::process::ExitCode {
    if run_if_member() {
        return std::process::ExitCode::SUCCESS;
    }
    harness::run(vec![
        trial("a_two_three_partition_downs_the_two_and_never_runs_two_singletons_or_two_activations_and_after_the_heal_their_restarts_rejoin", a_two_three_partition_downs_the_two_and_never_runs_two_singletons_or_two_activations_and_after_the_heal_their_restarts_rejoin).with_ignored_flag(true),
        trial("one_link_cut_between_two_member_processes_is_seen_only_by_its_ends", one_link_cut_between_two_member_processes_is_seen_only_by_its_ends).with_ignored_flag(true),
    ])
}

const PORT: u16 = 2552;

/// Network namespaces made for one test run, deleted (with their veths and bridge) when
/// dropped, also when the test fails.
struct Namespaces {
    hub: String,
    members: Vec<String>,
}

fn run(args: &[&str]) {
    let output = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

impl Namespaces {
    /// `n` member namespaces on one bridge, member `i` at `10.77.0.<i+1>/24`. Names are unique
    /// to this test (process id and a count of the namespaces made in this process: tests of
    /// this file may run at once, each in namespaces of its own), short enough for interface
    /// names.
    fn new(n: usize) -> Self {
        static MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let made = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tag = format!("rp{:x}{made:x}", std::process::id() & 0xf_ffff);
        let tag = tag.as_str();
        let namespaces = Self {
            hub: format!("{tag}h"),
            members: (0..n).map(|i| format!("{tag}m{i}")).collect(),
        };
        let hub = namespaces.hub.as_str();
        let bridge = format!("{tag}br");
        run(&["ip", "netns", "add", hub]);
        run(&["ip", "-n", hub, "link", "set", "lo", "up"]);
        run(&["ip", "-n", hub, "link", "add", &bridge, "type", "bridge"]);
        run(&["ip", "-n", hub, "link", "set", &bridge, "up"]);
        for (i, ns) in namespaces.members.iter().enumerate() {
            let (outer, inner) = (format!("{tag}a{i}"), format!("{tag}b{i}"));
            run(&["ip", "netns", "add", ns]);
            run(&["ip", "-n", ns, "link", "set", "lo", "up"]);
            run(&[
                "ip", "-n", hub, "link", "add", &outer, "type", "veth", "peer", "name", &inner,
                "netns", ns,
            ]);
            run(&["ip", "-n", hub, "link", "set", &outer, "master", &bridge]);
            run(&["ip", "-n", hub, "link", "set", &outer, "up"]);
            let address = format!("{}/24", Self::ip(i));
            run(&["ip", "-n", ns, "addr", "add", &address, "dev", &inner]);
            run(&["ip", "-n", ns, "link", "set", &inner, "up"]);
        }
        namespaces
    }

    fn ip(i: usize) -> String {
        format!("10.77.0.{}", i + 1)
    }

    /// Drops every packet between member `i` and `others`, both ways, in `i`'s namespace.
    fn cut(&self, i: usize, others: &[usize]) {
        let ns = &self.members[i];
        let set = others
            .iter()
            .map(|&o| Self::ip(o))
            .collect::<Vec<_>>()
            .join(", ");
        let nft = |rule: &str| run(&["ip", "netns", "exec", ns, "/usr/sbin/nft", rule]);
        nft("add table inet partition");
        nft(
            "add chain inet partition input { type filter hook input priority 0 ; policy accept ; }",
        );
        nft(
            "add chain inet partition output { type filter hook output priority 0 ; policy accept ; }",
        );
        nft(&format!(
            "add rule inet partition input ip saddr {{ {set} }} drop"
        ));
        nft(&format!(
            "add rule inet partition output ip daddr {{ {set} }} drop"
        ));
    }
}

impl Namespaces {
    /// Removes what [`cut`](Self::cut) added in member `i`'s namespace: its traffic flows again.
    fn heal(&self, i: usize) {
        let ns = &self.members[i];
        run(&[
            "ip",
            "netns",
            "exec",
            ns,
            "/usr/sbin/nft",
            "delete table inet partition",
        ]);
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for ns in self.members.iter().chain([&self.hub]) {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// Waits for `m`'s next load round with no failed ask.
async fn clean_round(m: &mut MemberProcess) -> Fact {
    m.expect("a load round with no error", |o| o.is("LOADED", &["0"]))
        .await
}

async fn a_two_three_partition_downs_the_two_and_never_runs_two_singletons_or_two_activations_and_after_the_heal_their_restarts_rejoin()
 {
    let dir = std::env::temp_dir().join(format!(
        "rally-partition-{}-{}",
        std::process::id(),
        mono_ns()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let _cleanup = TempDir(dir.clone());
    let db = dir.join("grains.db");
    // Members and processes are dropped (killed) before the namespaces: declared after.
    let namespaces = Namespaces::new(5);
    let specs: Vec<(String, Spec, Option<String>)> = (0..5)
        .map(|i| {
            let mut spec = Spec::new(PORT, &[]);
            spec.host = Namespaces::ip(i);
            spec.seeds = vec![format!("{}:{PORT}", Namespaces::ip(0))];
            spec.singleton = true;
            spec.hosts_grains = true;
            spec.db = Some(db.clone());
            (format!("m{i}"), spec, Some(namespaces.members[i].clone()))
        })
        .collect();
    let (mut members, _) = start_cluster(&specs).await;
    // The side of three: the three oldest (the singleton's host among them).
    let mut by_age: Vec<usize> = (0..5).collect();
    by_age.sort_by_key(|&i| members[i].ready.as_ref().unwrap().id(false));
    let (three, two) = (by_age[..3].to_vec(), by_age[3..].to_vec());
    let host = by_age[0];
    members[host]
        .find("the singleton on the oldest", |o| {
            o.is("SINGLETON", &["START"])
        })
        .await;
    // Traffic to the same 40 identities from every member, until the end.
    for m in &mut members {
        m.send("load p 40");
    }
    for m in &mut members {
        clean_round(m).await;
    }

    let cut_at = mono_ns();
    for &i in &three {
        namespaces.cut(i, &two);
    }
    for &i in &two {
        namespaces.cut(i, &three);
    }
    // The two down themselves and stop.
    for &i in &two {
        let me = members[i].member().to_owned();
        let m = &mut members[i];
        let down = m
            .expect("itself down", {
                let me = me.clone();
                move |o| o.is("EVENT", &["Down", &me])
            })
            .await;
        let stopped = m.expect("stopped", move |o| o.is("STOPPED", &[&me])).await;
        eprintln!(
            "OBSERVED 2|3 partition: {} (side of two) downed itself {:.0} ms after the cut, stopped {:.0} ms after",
            m.name,
            ms(down.at - cut_at),
            ms(stopped.at - cut_at)
        );
    }
    // The three down the two, keep the singleton, and serve every identity again.
    for &i in &three {
        for &j in &two {
            let gone = members[j].member().to_owned();
            let down = members[i]
                .find("a member of the two down", move |o| {
                    o.is("EVENT", &["Down", &gone])
                })
                .await;
            eprintln!(
                "OBSERVED 2|3 partition: {} saw {} down {:.0} ms after the cut",
                members[i].name,
                members[j].name,
                ms(down.at - cut_at)
            );
        }
    }
    let mut recovered = 0;
    for &i in &three {
        let round = loop {
            let round = clean_round(&mut members[i]).await;
            if round.at > cut_at {
                break round;
            }
        };
        recovered = recovered.max(round.at);
    }
    eprintln!(
        "OBSERVED 2|3 partition: every identity answered again on the side of three {:.0} ms after the cut",
        ms(recovered - cut_at)
    );

    for m in &mut members {
        m.drain();
    }
    let facts: Vec<&Fact> = members.iter().flat_map(|m| m.seen.iter()).collect();
    // One singleton life, on the oldest, never stopped.
    let lives = singleton_lives(&facts);
    assert_no_overlap("singleton", &lives, |_| None);
    assert_eq!(lives.len(), 1, "{lives:?}");
    assert_eq!(lives[0].0, members[host].member());
    assert!(lives[0].2.is_none(), "the side of three kept it: {lives:?}");
    // Never two activations of one identity at once; the side of two ended all of its own.
    let activations = activation_lives(&facts);
    let two_members: Vec<&str> = two.iter().map(|&i| members[i].member()).collect();
    let mut checked = 0;
    let mut moved = 0;
    for (identity, lives) in &activations {
        let spans: Vec<(String, u64, Option<u64>)> = lives
            .iter()
            .map(|(owner, _, start, end)| (owner.clone(), *start, *end))
            .collect();
        checked += assert_no_overlap(identity, &spans, |_| None);
        for (owner, _, _, end) in lives {
            if two_members.contains(&owner.as_str()) {
                assert!(
                    end.is_some(),
                    "{identity}: the side of two ended it: {lives:?}"
                );
                moved += 1;
            }
        }
    }
    assert_eq!(activations.len(), 40, "{activations:?}");
    assert!(moved > 0, "the side of two held some identities");
    eprintln!(
        "OBSERVED 2|3 partition: {checked} activation lives checked, {moved} on the side of two"
    );

    // The heal: the downed lives stay out (the three never see them up or reachable again);
    // the two processes, restarted in their namespaces on the same addresses, rejoin as new
    // incarnations; one singleton throughout, never two activations of one identity.
    for i in 0..5 {
        namespaces.heal(i);
    }
    let healed_at = mono_ns();
    // A window for the downed lives, still running, to talk to the three again (an absence
    // is checked over a window: there is no event to wait for). Gossip runs every 200 ms.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let all_seeds: Vec<String> = (0..5)
        .map(|i| format!("{}:{PORT}", Namespaces::ip(i)))
        .collect();
    let mut again = Vec::new();
    for &j in &two {
        let old = members[j].ready.clone().expect("ready");
        members[j].kill().await;
        let mut spec = specs[j].1.clone();
        spec.seeds.clone_from(&all_seeds);
        let mut process = MemberProcess::spawn(
            &format!("m{j}-again"),
            &spec,
            Some(namespaces.members[j].as_str()),
        );
        let new = process.wait_ready().await;
        assert_eq!(new.address, old.address, "the same address");
        assert_ne!(new.incarnation, old.incarnation, "a new incarnation");
        again.push(process);
    }
    let everyone: Vec<String> = three
        .iter()
        .map(|&i| members[i].member().to_owned())
        .chain(again.iter().map(|p| p.member().to_owned()))
        .collect();
    for process in &mut again {
        process.wait_up(&everyone).await;
    }
    for &i in &three {
        members[i].wait_up(&everyone).await;
    }
    eprintln!(
        "OBSERVED 2|3 partition healed: the restarted two seen up by all {:.0} ms after the heal (3 s of it with the downed lives still running)",
        ms(mono_ns() - healed_at)
    );
    for &i in &three {
        clean_round(&mut members[i]).await;
    }
    for m in members.iter_mut().chain(again.iter_mut()) {
        m.drain();
    }
    for &i in &three {
        for &j in &two {
            let old = members[j].member().to_owned();
            let revived: Vec<&Fact> = members[i]
                .seen
                .iter()
                .filter(|o| {
                    o.at > cut_at
                        && (o.is("EVENT", &["Up", &old]) || o.is("EVENT", &["Reachable", &old]))
                })
                .collect();
            assert!(
                revived.is_empty(),
                "{}: the downed {old} came back: {revived:?}",
                members[i].name
            );
        }
    }
    let facts: Vec<&Fact> = members
        .iter()
        .chain(again.iter())
        .flat_map(|m| m.seen.iter())
        .collect();
    let lives = singleton_lives(&facts);
    assert_no_overlap("singleton", &lives, |_| None);
    assert_eq!(lives.len(), 1, "still one singleton life: {lives:?}");
    assert!(lives[0].2.is_none(), "still running: {lives:?}");
    let mut checked = 0;
    for (identity, lives) in &activation_lives(&facts) {
        let spans: Vec<(String, u64, Option<u64>)> = lives
            .iter()
            .map(|(owner, _, start, end)| (owner.clone(), *start, *end))
            .collect();
        checked += assert_no_overlap(identity, &spans, |_| None);
    }
    eprintln!("OBSERVED 2|3 partition healed: {checked} activation lives checked");
    drop(again);
    drop(members);
    drop(namespaces);
}

/// A directory removed when the test ends, passing or not.
struct TempDir(std::path::PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One link cut between two of three member processes (nftables in their two namespaces; each
/// still reaches the third): SWIM's indirect probes still get through, so only the remoting
/// heartbeats see it, over real sockets. Only the two ends report each other unreachable (the
/// third never sees either unreachable); one or both ends are downed, never the third; the
/// singleton, on the third (the oldest), never stops and never runs twice.
async fn one_link_cut_between_two_member_processes_is_seen_only_by_its_ends() {
    let namespaces = Namespaces::new(3);
    let specs: Vec<(String, Spec, Option<String>)> = (0..3)
        .map(|i| {
            let mut spec = Spec::new(PORT, &[]);
            spec.host = Namespaces::ip(i);
            spec.seeds = vec![format!("{}:{PORT}", Namespaces::ip(0))];
            spec.singleton = true;
            (format!("m{i}"), spec, Some(namespaces.members[i].clone()))
        })
        .collect();
    let (mut members, _) = start_cluster(&specs).await;
    let mut by_age: Vec<usize> = (0..3).collect();
    by_age.sort_by_key(|&i| members[i].ready.as_ref().unwrap().id(false));
    let (third, x, y) = (by_age[0], by_age[1], by_age[2]);
    members[third]
        .find("the singleton on the oldest", |o| {
            o.is("SINGLETON", &["START"])
        })
        .await;
    let cut_at = mono_ns();
    namespaces.cut(x, &[y]);
    namespaces.cut(y, &[x]);
    let (x_id, y_id) = (
        members[x].member().to_owned(),
        members[y].member().to_owned(),
    );
    // The ends see each other unreachable.
    for (i, other) in [(x, y_id.clone()), (y, x_id.clone())] {
        let seen = members[i]
            .find("the other end unreachable", move |o| {
                o.is("EVENT", &["Unreachable", &other])
            })
            .await;
        eprintln!(
            "OBSERVED one link cut: {} saw the other end unreachable {:.0} ms after the cut",
            members[i].name,
            ms(seen.at - cut_at)
        );
    }
    // The third sees one end (or both) downed.
    let (xd, yd) = (x_id.clone(), y_id.clone());
    let down = members[third]
        .find("an end downed", move |o| {
            o.is("EVENT", &["Down", &xd]) || o.is("EVENT", &["Down", &yd])
        })
        .await;
    eprintln!(
        "OBSERVED one link cut: {} saw {} down {:.0} ms after the cut",
        members[third].name,
        down.args[1],
        ms(down.at - cut_at)
    );
    // A window for a second down or anything else to show (an absence has no event).
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    for m in &mut members {
        m.drain();
    }
    let third_id = members[third].member().to_owned();
    let trouble: Vec<&Fact> = members[third]
        .seen
        .iter()
        .filter(|o| o.at > cut_at && o.is("EVENT", &["Unreachable"]))
        .collect();
    assert!(
        trouble.is_empty(),
        "the third never sees an end unreachable: {trouble:?}"
    );
    for m in &members {
        let third_down: Vec<&Fact> = m
            .seen
            .iter()
            .filter(|o| o.is("EVENT", &["Down", &third_id]))
            .collect();
        assert!(third_down.is_empty(), "{}: {third_down:?}", m.name);
    }
    let facts: Vec<&Fact> = members.iter().flat_map(|m| m.seen.iter()).collect();
    let lives = singleton_lives(&facts);
    assert_no_overlap("singleton", &lives, |_| None);
    assert_eq!(lives.len(), 1, "{lives:?}");
    assert_eq!(lives[0].0, third_id);
    assert!(lives[0].2.is_none(), "{lives:?}");
    drop(members);
    drop(namespaces);
}
