//! A member of another cluster name, or with another secret, over real loopback TCP: the
//! handshake refuses it on both sides — the joining node gets a `PeerEvent::Refused` with a
//! clear reason, the seed counts the refused handshakes (and logs them, which rally-remote's
//! own tests check) — and neither side ever lists the other as a member. `wait_until_up` on the
//! refused member fails with the refusal's cause instead of waiting out its time (issue 32:
//! `join` returned `Ok` and the member stayed `Joining`, saying nothing).

#[path = "support/nodes.rs"]
mod nodes;

use rally_actor::ActorSystem;
use rally_cluster::UpError;
use rally_remote::{PeerEvent, RemoteConfig, RemoteNode};
use rally_test::eventually;
use tokio::sync::broadcast;

async fn node_with(config: RemoteConfig) -> nodes::Node {
    let system = ActorSystem::new(nodes::CLUSTER);
    let node = RemoteNode::start(&system, config)
        .await
        .expect("node starts");
    nodes::Node { system, node }
}

/// Waits for a `Refused` event; returns its reason.
async fn refused(events: &mut broadcast::Receiver<PeerEvent>) -> String {
    let reason = tokio::time::timeout(nodes::T, async {
        loop {
            match events.recv().await {
                Ok(PeerEvent::Refused { reason, .. }) => return reason,
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => panic!("events closed"),
            }
        }
    })
    .await;
    reason.expect("a Refused peer event")
}

async fn assert_refused_both_ways(a_config: RemoteConfig, b_config: RemoteConfig, expect: &[&str]) {
    let a = node_with(a_config).await;
    let b = node_with(b_config).await;
    let mut b_events = b.node.peer_events();
    let seeds = [a.node.address().clone()];
    let a = nodes::join(a, nodes::config(&seeds));
    let b = nodes::join(b, nodes::config(&seeds));
    a.cluster
        .wait_until_up(nodes::T)
        .await
        .expect("the seed founds its cluster");
    match b.cluster.wait_until_up(nodes::T).await {
        Err(UpError::Refused { seed, reason }) => {
            assert_eq!(seed, seeds[0]);
            assert!(
                expect.iter().any(|e| reason.contains(e)),
                "the refusal's cause ({expect:?}): {reason}"
            );
        }
        other => panic!("the refused member waits for nothing: {other:?}"),
    }
    let reason = refused(&mut b_events).await;
    assert!(
        expect.iter().any(|e| reason.contains(e)),
        "a clear reason ({expect:?}): {reason}"
    );
    // The seed's side: no event (it never tried to connect), the refusal counted.
    eventually(
        "the seed counts the refused handshake",
        nodes::T,
        async || a.node.stats().handshake_failures > 0,
    )
    .await;
    assert!(a.cluster.members().iter().all(|m| m.id != b.id()));
    assert!(b.cluster.members().iter().all(|m| m.id != a.id()));
    assert_eq!(a.cluster.members().len(), 1, "A is alone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_of_another_cluster_name_is_refused_on_both_sides() {
    let config = |name: &str| {
        RemoteConfig::builder()
            .listen("127.0.0.1", 0)
            .secret(nodes::SECRET)
            .cluster_name(name)
            .build()
            .unwrap()
    };
    assert_refused_both_ways(config("orders"), config("billing"), &["billing"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_with_another_secret_is_refused_on_both_sides() {
    let config = |secret: &[u8]| {
        RemoteConfig::builder()
            .listen("127.0.0.1", 0)
            .secret(secret.to_vec())
            .build()
            .unwrap()
    };
    assert_refused_both_ways(
        config(b"one secret"),
        config(b"another secret"),
        &["secret", "authenticat", "MAC", "mac"],
    )
    .await;
}
