//! Many members in one process on the in-memory provider: join, operator down, leave.

use std::time::Duration;

use rally_cluster::provider::{MemoryNetwork, MemoryProvider};
use rally_cluster::{
    Cluster, ClusterConfig, DownError, MemberEvent, MemberEvents, MemberId, MemberStatus,
};
use rally_remote::Incarnation;

const T: Duration = Duration::from_secs(30);

fn id(port: u16) -> MemberId {
    MemberId::new(
        format!("rally://mem@local:{port}").parse().expect("valid"),
        Incarnation(u64::from(port) * 13),
        u64::from(port),
    )
}

async fn until(events: &mut MemberEvents, wanted: &MemberEvent) {
    let found = tokio::time::timeout(T, async {
        while let Some(event) = events.next().await {
            if event == *wanted {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(found, Ok(true), "no {wanted:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_members_join_and_an_operator_down_is_seen_everywhere() {
    let network = MemoryNetwork::new();
    let mut config = ClusterConfig::default();
    config.seeds = vec![id(1).address];
    // Members in this process: a downed one stops, the test goes on.
    config.when_downed = rally::cluster::WhenDowned::Stop;
    // Even ports declare the role "worker" and host the kind "cart"; odd ports are
    // client-only. Every member learns the others' roles and kinds.
    let with_roles = |port: u16| {
        if port % 2 == 0 {
            id(port).with_roles(["worker"]).with_kinds(["cart"])
        } else {
            id(port)
        }
    };
    let members: Vec<Cluster> = (1..=10)
        .map(|port| {
            Cluster::join_with(
                with_roles(port),
                config.clone(),
                MemoryProvider::new(&network),
            )
            .expect("joins")
        })
        .collect();
    let mut events: Vec<MemberEvents> = members.iter().map(Cluster::events).collect();
    for stream in &mut events {
        let mut up = std::collections::HashSet::new();
        let all = tokio::time::timeout(T, async {
            while let Some(event) = stream.next().await {
                if let MemberEvent::Up(member) = event {
                    up.insert(member);
                }
                if up.len() == 10 {
                    return true;
                }
            }
            false
        })
        .await;
        assert_eq!(all, Ok(true), "all ten up");
    }
    let workers: Vec<u16> = members[0]
        .members()
        .iter()
        .filter(|m| m.id.has_role("worker"))
        .map(|m| m.id.address.port)
        .collect();
    assert_eq!(workers, [2, 4, 6, 8, 10]);
    for member in &members {
        let hosts: Vec<u16> = member
            .members()
            .iter()
            .filter(|m| m.id.hosts_kind("cart"))
            .map(|m| m.id.address.port)
            .collect();
        assert_eq!(
            hosts,
            [2, 4, 6, 8, 10],
            "seen by {}",
            member.self_member().id
        );
        let clients = member
            .members()
            .iter()
            .filter(|m| m.id.is_client_only())
            .count();
        assert_eq!(clients, 5);
    }
    members[0].down(&id(10)).expect("running");
    for stream in &mut events[..9] {
        until(stream, &MemberEvent::Down(id(10))).await;
    }
    // The downed member learns it and stops.
    until(&mut events[9], &MemberEvent::Down(id(10))).await;
    assert_eq!(members[9].self_member().status, MemberStatus::Down);
    let end = tokio::time::timeout(T, events[9].next()).await;
    assert_eq!(end, Ok(None), "its stream ends");
    assert_eq!(members[9].down(&id(1)), Err(DownError::NotInCluster));
    members[1].leave().await.expect("leaves");
    until(&mut events[0], &MemberEvent::Removed(id(2))).await;
    let view = members[0].members();
    assert_eq!(
        view.iter().filter(|m| m.is_serving()).count(),
        8,
        "{view:#?}"
    );
}

#[tokio::test]
async fn lease_downing_is_refused_by_a_provider_without_leases() {
    let mut config = ClusterConfig::default();
    config.downing = rally_cluster::DowningStrategy::Lease;
    let refused = Cluster::join_with(id(1), config, MemoryProvider::new(&MemoryNetwork::new()));
    let error = refused.expect_err("no lease in memory");
    assert!(error.to_string().contains("etcd provider"), "{error}");
}
