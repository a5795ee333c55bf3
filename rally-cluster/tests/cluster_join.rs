//! Members on real loopback TCP join a cluster: five at once, each seeded with all five.

#[path = "support/nodes.rs"]
mod nodes;

use rally_cluster::MemberStatus;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_members_joining_at_once_all_see_five_up() {
    let members = nodes::cluster_of(5).await;
    for member in &members {
        let view = member.cluster.members();
        assert_eq!(view.len(), 5, "{view:#?}");
        assert!(
            view.iter()
                .all(|m| m.status == MemberStatus::Up && m.reachable),
            "{view:#?}"
        );
        assert_eq!(member.cluster.self_member().status, MemberStatus::Up);
        let stats = member.cluster.stats();
        assert_eq!(
            stats.forged + stats.impossible + stats.full + stats.malformed,
            0,
            "{stats:?}"
        );
    }
    // Everybody orders the members the same way (oldest first).
    let order: Vec<_> = members[0]
        .cluster
        .members()
        .into_iter()
        .map(|m| m.id)
        .collect();
    for member in &members[1..] {
        let theirs: Vec<_> = member.cluster.members().into_iter().map(|m| m.id).collect();
        assert_eq!(theirs, order);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_subscriber_gets_the_current_view_as_events_first() {
    let members = nodes::cluster_of(2).await;
    let mut events = members[0].cluster.events();
    for member in members[0].cluster.members() {
        assert_eq!(
            events.next().await,
            Some(rally_cluster::MemberEvent::Joined(member.id.clone()))
        );
        assert_eq!(
            events.next().await,
            Some(rally_cluster::MemberEvent::Up(member.id))
        );
    }
}
