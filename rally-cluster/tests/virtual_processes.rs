//! Virtual actors across member processes over real loopback TCP, state in one SQLite file
//! the processes share: the first message activates an identity on its hashed owner in one
//! hop; after SIGKILL of a hosting member its identities activate on the survivor only after
//! the takeover wait that follows the downing, never two lives of one identity at once (from
//! every activation's start and end, logged with member and epoch on `CLOCK_MONOTONIC`); the
//! next activation reads the state the killed member's activation wrote.

#[path = "support/processes.rs"]
mod processes;

use std::time::Duration;

use processes::{
    KIND, MemberProcess, Out, Spec, activation_lives, assert_no_overlap, free_ports, grains_config,
    in_member_mode, membership, ms, run_if_member, start_cluster,
};
use rally::cluster::virtual_actors::{Hashed, Placement};

/// Printing a fact may lag the instant the runtime acted on it by a little.
const PRINT_LAG_NS: u64 = 100_000_000;

/// In member mode: the member process.
#[test]
fn member_process() {
    run_if_member();
}

/// A directory removed when the test ends, passing or not.
struct TempDir(std::path::PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Asks `identity` from `client` until it answers (each ask is bounded by its own timeout);
/// returns the reply's (count, owner, epoch) and the errors met before.
async fn ask_until_answered(
    client: &mut MemberProcess,
    identity: &str,
    n: u64,
) -> ((u64, String, u64), Vec<String>) {
    let mut errors = Vec::new();
    for _ in 0..200 {
        client.send(&format!("ask {identity} {n}"));
        let id = identity.to_owned();
        let out = client
            .expect("a reply or an error", move |o| {
                (o.word == "REPLY" || o.word == "ASKERR") && o.args[0] == id
            })
            .await;
        if out.word == "REPLY" {
            let reply = (
                out.args[1].parse().unwrap(),
                out.args[2].clone(),
                out.args[3].parse().unwrap(),
            );
            return (reply, errors);
        }
        errors.push(out.args[1..].join(" "));
        // Errors that come back at once (no host yet) are retried at a bounded pace.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{identity}: never answered: {errors:?}");
}

fn stats(facts: &Out) -> (u64, u64, u64) {
    let n = |i: usize| facts.args[i].parse().unwrap();
    (n(0), n(1), n(2))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn across_processes_one_hop_then_a_kill_reactivates_elsewhere_after_the_bound_with_the_state()
{
    if in_member_mode() {
        return;
    }
    let dir = TempDir(std::env::temp_dir().join(format!(
        "rally-virtual-processes-{}-{}",
        std::process::id(),
        processes::mono_ns()
    )));
    std::fs::create_dir_all(&dir.0).unwrap();
    let db = dir.0.join("grains.db");
    let ports = free_ports(3);
    let specs: Vec<(String, Spec, Option<String>)> = ["a", "b", "client"]
        .iter()
        .zip(&ports)
        .map(|(name, port)| {
            let mut spec = Spec::new(*port, &ports[..1]);
            spec.hosts_grains = *name != "client";
            spec.db = Some(db.clone());
            ((*name).to_owned(), spec, None)
        })
        .collect();
    let (mut members, _) = start_cluster(&specs).await;
    let ids: Vec<_> = members[..2]
        .iter()
        .map(|m| m.ready.as_ref().unwrap().id(true))
        .collect();
    let keys: Vec<String> = ids.iter().map(ToString::to_string).collect();
    let [a, b, client] = &mut members[..] else {
        unreachable!()
    };

    // Warm-up: a runtime takes member events in after the member printed them, so the first
    // asks may still be routed on a view without the other host (then forwarded once).
    for i in 0..10 {
        ask_until_answered(client, &format!("warm-{i}"), 1).await;
    }
    let mut before = (0, 0);
    for m in [&mut *a, &mut *b] {
        m.send("stats");
        let (started, forwarded, _) = stats(&m.expect("stats", |o| o.word == "STATS").await);
        before = (before.0 + started, before.1 + forwarded);
    }
    // Activation on the first message, on the hashed owner, in one hop.
    let identities: Vec<String> = (0..20).map(|i| format!("v-{i}")).collect();
    let mut owned_by_a = Vec::new();
    for identity in &identities {
        let ((count, owner, epoch), errors) = ask_until_answered(client, identity, 1).await;
        assert!(errors.is_empty(), "{identity}: {errors:?}");
        let expected = Hashed.place(KIND, identity, &ids, &ids[0]).unwrap();
        assert_eq!(
            owner,
            expected.to_string(),
            "{identity} on its hashed owner"
        );
        assert_eq!((count, epoch), (1, 1), "{identity}: first activation");
        if owner == keys[0] {
            owned_by_a.push(identity.clone());
        }
    }
    assert!(
        !owned_by_a.is_empty() && owned_by_a.len() < identities.len(),
        "both members own some: {owned_by_a:?}"
    );
    let mut after = (0, 0);
    for m in [&mut *a, &mut *b] {
        m.send("stats");
        let (started, forwarded, _) = stats(&m.expect("stats", |o| o.word == "STATS").await);
        after = (after.0 + started, after.1 + forwarded);
    }
    assert_eq!(after.1 - before.1, 0, "one hop: nothing passed on");
    assert_eq!(after.0 - before.0, 20, "each identity activated once");

    // SIGKILL of a: its identities come back on b after the downing and the takeover wait,
    // with the state a's activations wrote.
    let killed = a.kill().await;
    let victim = keys[0].clone();
    let mut first_answer = None;
    let mut failed = 0;
    for identity in &owned_by_a {
        let ((count, owner, epoch), errors) = ask_until_answered(client, identity, 10).await;
        failed += errors.len();
        first_answer.get_or_insert_with(processes::mono_ns);
        assert_eq!(owner, keys[1], "{identity} moved to b");
        assert!(epoch > 1, "{identity}: a later epoch");
        // An ask that timed out while the identity waited for its takeover may still have
        // been handled (at least once, as `GrainError::Timeout` says): each adds 10. The 1
        // that a's activation wrote is there only if b's activation read it.
        assert!(
            count >= 11 && (count - 1) % 10 == 0 && count <= 1 + 10 * (errors.len() as u64 + 1),
            "{identity}: read what a wrote, then added 10 per ask: {count} after {errors:?}"
        );
    }
    let v = victim.clone();
    let down = b
        .find("a down", move |o| o.is("EVENT", &["Down", &v]))
        .await;
    b.drain();
    let takeover = membership().takeover_margin(3) + grains_config().deactivation_timeout;
    for identity in &owned_by_a {
        let start = b
            .seen
            .iter()
            .find(|o| o.is("ACT", &["START", identity, &keys[1]]))
            .unwrap_or_else(|| panic!("{identity}: b's activation logged"));
        assert!(
            start.at + PRINT_LAG_NS >= down.at + u64::try_from(takeover.as_nanos()).unwrap(),
            "{identity}: activated on b {:.0} ms after b saw a down, before the takeover wait {takeover:?}",
            ms(start.at - down.at)
        );
    }
    eprintln!(
        "OBSERVED virtual actors, SIGKILL of a member: b saw it down after {:.0} ms; its {} \
         identities answered again from b after {:.0} ms (takeover wait {takeover:?}); {failed} \
         asks failed meanwhile (retried)",
        ms(down.at - killed),
        owned_by_a.len(),
        ms(first_answer.unwrap() - killed)
    );

    // Never two lives of one identity at once: a's lives ended at the kill at the latest.
    client.drain();
    let facts: Vec<&Out> = members.iter().flat_map(|m| m.seen.iter()).collect();
    let lives = activation_lives(&facts);
    let mut checked = 0;
    for (identity, lives) in &lives {
        let spans: Vec<(String, u64, Option<u64>)> = lives
            .iter()
            .map(|(owner, _, start, end)| (owner.clone(), *start, *end))
            .collect();
        checked += assert_no_overlap(identity, &spans, |owner| {
            (*owner == victim).then_some(killed)
        });
        let epochs: Vec<u64> = lives.iter().map(|l| l.1).collect();
        assert!(
            epochs.windows(2).all(|w| w[0] < w[1]),
            "{identity}: epochs grow: {lives:?}"
        );
    }
    assert!(checked >= 20 + owned_by_a.len(), "{lives:?}");
}
