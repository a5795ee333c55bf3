//! A setting out of range is a typed error when the node starts, naming the setting, instead
//! of a node that starts and then fails (a zero heartbeat interval used to start, then panic in
//! the heartbeat task).

#[path = "support/nodes.rs"]
mod nodes;

use std::time::Duration;

use nodes::config;
use rally_actor::ActorSystem;
use rally_remote::{RemoteConfig, RemoteNode, StartError};

async fn refused(config: RemoteConfig) -> &'static str {
    match RemoteNode::start(&ActorSystem::new("v"), config).await {
        Err(StartError::Config { key, .. }) => key,
        other => panic!("expected StartError::Config, got {other:?}"),
    }
}

#[tokio::test]
async fn each_bad_setting_is_refused_at_start_by_name() {
    let mut c = config();
    c.heartbeat_interval = Duration::ZERO;
    assert_eq!(refused(c).await, "heartbeat_interval");
    let mut c = config();
    c.handshake_timeout = Duration::ZERO;
    assert_eq!(refused(c).await, "handshake_timeout");
    let mut c = config();
    c.max_frame_bytes = 100;
    assert_eq!(refused(c).await, "max_frame_bytes");
    let mut c = config();
    c.ordinary_lanes = 0;
    assert_eq!(refused(c).await, "ordinary_lanes");
    let mut c = config();
    c.outbound_lane_bytes = 0;
    assert_eq!(refused(c).await, "outbound_lane_bytes");
    assert_eq!(
        refused(config().with_cluster_name("")).await,
        "cluster_name"
    );
    assert_eq!(
        refused(config().with_cluster_name("x".repeat(256))).await,
        "cluster_name"
    );
    let mut c = config();
    c.failure_detector.threshold = f64::NAN;
    assert_eq!(refused(c).await, "failure_detector.threshold");
    let mut c = config();
    c.failure_detector.max_sample_size = 0;
    assert_eq!(refused(c).await, "failure_detector.max_sample_size");
    // The secret is checked first, with its own error.
    assert!(matches!(
        RemoteNode::start(&ActorSystem::new("v"), RemoteConfig::new("127.0.0.1", 0)).await,
        Err(StartError::EmptySecret)
    ));
    // And a good configuration starts.
    assert!(
        RemoteNode::start(&ActorSystem::new("v"), config())
            .await
            .is_ok()
    );
}
