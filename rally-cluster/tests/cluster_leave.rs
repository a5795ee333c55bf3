//! A graceful leave on real loopback TCP: the others see leaving, then removed, never down.

#[path = "support/nodes.rs"]
mod nodes;

use rally_cluster::{LeaveError, MemberEvent};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_leave_is_seen_as_leaving_then_removed() {
    let mut members = nodes::cluster_of(3).await;
    let mut leaver = members.pop().expect("three");
    let id = leaver.id();
    leaver.cluster.leave().await.expect("leaves");
    nodes::expect_event(&mut leaver.events, "its own removal", |e| {
        *e == MemberEvent::Removed(id.clone())
    })
    .await;
    for member in &mut members {
        let mut log = Vec::new();
        nodes::expect_event(&mut member.events, "the leaver removed", |e| {
            if e.member() == &id {
                log.push(e.clone());
            }
            *e == MemberEvent::Removed(id.clone())
        })
        .await;
        assert_eq!(
            log,
            [
                MemberEvent::Leaving(id.clone()),
                MemberEvent::Removed(id.clone())
            ]
        );
        assert!(member.cluster.members().iter().all(|m| m.id != id));
    }
    assert_eq!(leaver.cluster.leave().await, Err(LeaveError::NotInCluster));
}
