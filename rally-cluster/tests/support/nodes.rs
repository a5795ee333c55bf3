//! Cluster members on real loopback TCP, for the integration tests.
#![allow(dead_code)]

use std::time::Duration;

use rally_actor::ActorSystem;
use rally_cluster::{Cluster, ClusterConfig, MemberEvent, MemberEvents, MemberId};
use rally_remote::{NodeAddress, RemoteConfig, RemoteNode};

/// Bound on every wait: generous, because three engineers' builds share two cores.
pub(crate) const T: Duration = Duration::from_secs(60);
pub(crate) const SECRET: &[u8] = b"cluster test secret";
/// Every member's system name: the cluster's name.
pub(crate) const CLUSTER: &str = "itest";

/// Settings for the tests: the default probing, a short stable-after.
pub(crate) fn config(seeds: &[NodeAddress]) -> ClusterConfig {
    let mut builder = ClusterConfig::builder();
    // Several members in this process: a downed one stops, the test goes on.
    builder
        .stable_after(Duration::from_millis(1500))
        .when_downed(rally::cluster::WhenDowned::Stop);
    for seed in seeds {
        builder.seed(seed.clone());
    }
    builder.build().expect("valid")
}

/// A started node, not yet a member.
pub(crate) struct Node {
    pub system: ActorSystem,
    pub node: RemoteNode,
}

pub(crate) async fn node(port: u16) -> Node {
    let system = ActorSystem::new(CLUSTER);
    let node = RemoteNode::start(
        &system,
        RemoteConfig::builder()
            .listen("127.0.0.1", port)
            .secret(SECRET.to_vec())
            .build()
            .unwrap(),
    )
    .await
    .expect("node starts");
    Node { system, node }
}

/// A member with its event stream (subscribed before anything happened).
pub(crate) struct TestMember {
    pub system: ActorSystem,
    pub node: RemoteNode,
    pub cluster: Cluster,
    pub events: MemberEvents,
}

impl TestMember {
    pub(crate) fn id(&self) -> MemberId {
        self.cluster.self_member().id
    }

    /// Stops the member as a crash would: no leave at the membership level. The node closes
    /// its connections so the port can be taken by a restart in this same process.
    pub(crate) async fn kill(self) {
        drop(self.cluster);
        drop(self.events);
        self.node.leave(Duration::from_millis(100)).await;
        drop(self.node);
        let _ = self.system.shutdown().await;
    }
}

pub(crate) fn join(node: Node, config: ClusterConfig) -> TestMember {
    let cluster = Cluster::join(&node.system, &node.node, config).expect("joins");
    let events = cluster.events();
    TestMember {
        system: node.system,
        node: node.node,
        cluster,
        events,
    }
}

/// Waits (at most [`T`]) for an event matching `wanted`; returns it.
pub(crate) async fn expect_event(
    events: &mut MemberEvents,
    what: &str,
    mut wanted: impl FnMut(&MemberEvent) -> bool,
) -> MemberEvent {
    let mut seen = Vec::new();
    let found = tokio::time::timeout(T, async {
        while let Some(event) = events.next().await {
            if wanted(&event) {
                return Some(event);
            }
            seen.push(event);
        }
        None
    })
    .await;
    match found {
        Ok(Some(event)) => event,
        _ => {
            let seen: Vec<String> = seen
                .iter()
                .map(|e| {
                    format!("{e:?}")
                        .split('(')
                        .next()
                        .unwrap_or_default()
                        .to_owned()
                        + " "
                        + &e.member().to_string()
                })
                .collect();
            panic!("no {what} within {T:?}; saw {seen:#?}")
        }
    }
}

/// `n` members started at once, each seeded with all of them; waits until each sees all up.
pub(crate) async fn cluster_of(n: usize) -> Vec<TestMember> {
    let mut nodes = Vec::new();
    for _ in 0..n {
        nodes.push(node(0).await);
    }
    let seeds: Vec<NodeAddress> = nodes.iter().map(|n| n.node.address().clone()).collect();
    let mut members: Vec<TestMember> = nodes.into_iter().map(|n| join(n, config(&seeds))).collect();
    let ids: Vec<MemberId> = members.iter().map(TestMember::id).collect();
    for member in &mut members {
        let mut up = std::collections::HashSet::new();
        expect_event(&mut member.events, "every member up", |e| {
            if let MemberEvent::Up(id) = e {
                up.insert(id.clone());
            }
            ids.iter().all(|id| up.contains(id))
        })
        .await;
    }
    members
}
