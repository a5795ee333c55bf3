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

/// Forwards the member events it receives from the event stream.
struct Listener(tokio::sync::mpsc::UnboundedSender<rally_cluster::MemberEvent>);

impl rally_actor::Actor for Listener {}

impl rally_actor::Handler<rally_cluster::MemberEvent> for Listener {
    async fn handle(
        &mut self,
        event: rally_cluster::MemberEvent,
        _: &mut rally_actor::Context<Self>,
    ) -> rally_actor::ActorResult<()> {
        let _ = self.0.send(event);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_events_reach_actors_subscribed_to_the_event_stream() {
    let first = nodes::node(0).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let listener = first.system.spawn(Listener(tx)).expect("spawns");
    first
        .system
        .event_stream()
        .subscribe(listener.recipient::<rally_cluster::MemberEvent>());
    let seeds = [first.node.address().clone()];
    let a = nodes::join(first, nodes::config(&seeds));
    let mut b_config = nodes::config(&seeds);
    b_config.roles = vec!["worker".into()];
    b_config.kinds = vec!["cart".into()];
    let b = nodes::join(nodes::node(0).await, b_config);
    let b_id = b.id();
    let seen = tokio::time::timeout(nodes::T, async {
        while let Some(event) = rx.recv().await {
            if event == rally_cluster::MemberEvent::Up(b_id.clone()) {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(seen, Ok(true), "the listener saw the second member up");
    // The role and the kind B declared in its configuration travel with its identity, over
    // TCP, and reach A's view and A's event stream; A, which declared no kind, is
    // client-only.
    let b_seen_by_a = a.cluster.members().into_iter().find(|m| m.id == b_id);
    assert!(b_seen_by_a.is_some_and(|m| m.id.has_role("worker") && m.id.hosts_kind("cart")));
    assert!(a.cluster.self_member().id.is_client_only());
    let mut a_events = a.cluster.events();
    let from_stream = tokio::time::timeout(nodes::T, async {
        while let Some(event) = a_events.next().await {
            if let rally_cluster::MemberEvent::Up(member) = event
                && member == b_id
            {
                return member.kinds.into_keys().collect::<Vec<_>>();
            }
        }
        Vec::new()
    })
    .await;
    assert_eq!(from_stream, Ok(vec!["cart".to_string()]));
    drop((a, b));
}
