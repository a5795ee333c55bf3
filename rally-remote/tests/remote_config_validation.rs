//! A setting out of range is a typed error when the node starts, naming the setting, instead
//! of a node that starts and then fails (a zero heartbeat interval used to start, then panic in
//! the heartbeat task).

#[path = "support/nodes.rs"]
mod nodes;

use std::time::Duration;

use nodes::config;
use rally_actor::ActorSystem;
use rally_remote::{NodeStartError, RemoteConfig, RemoteConfigError, RemoteNode};

async fn refused(config: RemoteConfig) -> &'static str {
    match RemoteNode::start(&ActorSystem::new("v"), config).await {
        Err(NodeStartError::Config(RemoteConfigError::Invalid { key, .. })) => key,
        other => panic!("expected an invalid setting, got {other:?}"),
    }
}

#[tokio::test]
async fn each_bad_setting_is_refused_at_start_by_name() {
    let mut c = config();
    c.heartbeat_interval = Duration::ZERO;
    assert_eq!(refused(c).await, "heartbeat-interval");
    let mut c = config();
    c.handshake_timeout = Duration::ZERO;
    assert_eq!(refused(c).await, "handshake-timeout");
    let mut c = config();
    c.max_frame_bytes = 100;
    assert_eq!(refused(c).await, "max-frame-bytes");
    let mut c = config();
    c.ordinary_lanes = 0;
    assert_eq!(refused(c).await, "ordinary-lanes");
    let mut c = config();
    c.outbound_lane_bytes = 0;
    assert_eq!(refused(c).await, "outbound-lane-bytes");
    let mut c = config();
    c.cluster_name = String::new();
    assert_eq!(refused(c).await, "cluster-name");
    let mut c = config();
    c.cluster_name = "x".repeat(256);
    assert_eq!(refused(c).await, "cluster-name");
    let mut c = config();
    c.failure_detector.threshold = f64::NAN;
    assert_eq!(refused(c).await, "failure-detector.threshold");
    let mut c = config();
    c.failure_detector.max_sample_size = 0;
    assert_eq!(refused(c).await, "failure-detector.max-sample-size");
    // The secret is checked first, with its own error.
    assert!(matches!(
        RemoteNode::start(&ActorSystem::new("v"), RemoteConfig::default()).await,
        Err(NodeStartError::Config(RemoteConfigError::EmptySecret))
    ));
    // And a good configuration starts.
    assert!(
        RemoteNode::start(&ActorSystem::new("v"), config())
            .await
            .is_ok()
    );
}
