//! A member killed on real loopback TCP is downed after stable-after; a new process on the
//! same port joins as a new member.

#[path = "support/nodes.rs"]
mod nodes;

use std::time::{Duration, Instant};

use rally_cluster::{MemberEvent, MemberId, MemberStatus};

/// How late a test may take an event from a member's stream after it was published.
const READ_LAG: Duration = Duration::from_millis(50);

/// Kills the last of three members and waits until both others have downed it; returns the
/// survivors and the victim's identity.
async fn kill_and_down() -> (Vec<nodes::TestMember>, MemberId) {
    let mut members = nodes::cluster_of(3).await;
    let victim = members.pop().expect("three");
    let old = victim.id();
    victim.kill().await;
    let killed = Instant::now();

    let mut unreachable_at: Option<Instant> = None;
    for member in &mut members {
        nodes::expect_event(&mut member.events, "the victim unreachable", |e| {
            *e == MemberEvent::Unreachable(old.clone())
        })
        .await;
        let seen = Instant::now();
        unreachable_at = Some(unreachable_at.map_or(seen, |t| t.min(seen)));
    }
    for member in &mut members {
        nodes::expect_event(&mut member.events, "the victim down", |e| {
            *e == MemberEvent::Down(old.clone())
        })
        .await;
    }
    let downed = Instant::now();
    let unreachable_at = unreachable_at.expect("seen");
    // The instants are when this test took the events from the streams, each some
    // milliseconds after the member published it (more under load); the exact rule, down no
    // earlier than stable-after (1.5 s here) after unreachable, is checked on simulated time
    // in membership_lifecycle.rs. Here: within that reading lag of it.
    assert!(
        downed - unreachable_at >= Duration::from_millis(1500) - READ_LAG,
        "downed {:?} after it was seen unreachable",
        downed - unreachable_at
    );
    println!("downed {:?} after the kill", downed - killed);
    for member in &members {
        assert_eq!(
            member.cluster.self_member().status,
            MemberStatus::Up,
            "survivors stay up"
        );
        let view = member.cluster.members();
        assert!(
            view.iter()
                .any(|m| m.id == old && m.status == MemberStatus::Down),
            "{view:?}"
        );
    }
    (members, old)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_member_is_downed_after_stable_after() {
    kill_and_down().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_restarted_on_the_same_port_rejoins_as_a_new_member() {
    let (mut members, old) = kill_and_down().await;
    let seeds = [members[0].node.address().clone()];
    let restarted = nodes::join(nodes::node(old.address.port).await, nodes::config(&seeds));
    let new = restarted.id();
    assert_ne!(new, old);
    assert!(new.supersedes(&old));
    for member in &mut members {
        let mut log = Vec::new();
        nodes::expect_event(&mut member.events, "the new incarnation up", |e| {
            if e.member() == &old || e.member() == &new {
                log.push(e.clone());
            }
            *e == MemberEvent::Up(new.clone())
        })
        .await;
        assert!(log.contains(&MemberEvent::Joined(new.clone())), "{log:?}");
        assert!(log.contains(&MemberEvent::Removed(old.clone())), "{log:?}");
        assert!(!log.contains(&MemberEvent::Down(new.clone())), "{log:?}");
        assert!(member.cluster.members().iter().all(|m| m.id != old));
    }
}
