//! Two nodes with the same secret but different cluster names, over real TCP: they refuse each
//! other in the handshake, the caller gets a typed error naming both clusters at once (not a
//! timeout), both sides count every refused connection, and each side logs it once however
//! often the lanes retry. The secret never shows.

#[path = "support/nodes.rs"]
mod nodes;

use std::io::Write;
use std::sync::Arc;

use nodes::{Echo, SECRET, T, Target, client_node, config, target_node};
use rally::sync::Mutex;
use rally_remote::PeerEvent;
use rally_test::eventually;

/// A `tracing` writer that keeps everything in memory.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn warnings(&self) -> Vec<String> {
        String::from_utf8(self.0.lock().clone())
            .unwrap()
            .lines()
            .filter(|line| line.contains("WARN"))
            .map(str::to_owned)
            .collect()
    }
}

/// Everything runs on this test's one thread, so the subscriber set here sees both nodes.
#[tokio::test]
async fn nodes_of_different_clusters_refuse_each_other_with_a_typed_error_logged_once() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let named = |name: &str| {
        let mut config = config();
        config.cluster_name = name.to_owned();
        config
    };
    let (_bs, billing) = target_node("b", named("billing")).await;
    let (_as, orders) = client_node("a", named("orders")).await;
    let mut events = orders.peer_events();
    let target = orders.lookup::<Target>(billing.address(), "target");
    match target.ask(Echo(1), T).await {
        Err(rally_actor::AskError::Undeliverable(why)) => {
            assert!(
                why.contains("\"billing\"") && why.contains("\"orders\""),
                "both cluster names are named: {why}"
            );
        }
        other => panic!("expected a typed refusal, got {other:?}"),
    }
    match events.recv().await.unwrap() {
        PeerEvent::Refused { address, reason } => {
            assert_eq!(&address, billing.address());
            assert!(reason.contains("\"billing\""), "{reason}");
        }
        other => panic!("expected Refused, got {other:?}"),
    }
    // Later sends fail at once with the same reason.
    assert!(matches!(
        target.ask(Echo(2), T).await,
        Err(rally_actor::AskError::Undeliverable(why)) if why.contains("\"billing\"")
    ));

    // The lanes keep retrying (the other side may be reconfigured): wait until both sides
    // counted several refused connections, then check that each logged the cause once.
    eventually("both sides count retries", T, async || {
        let (billing, orders) = (billing.stats(), orders.stats());
        if billing.handshake_failures < 6 || orders.handshake_failures < 6 {
            return Err(format!(
                "billing {}, orders {}",
                billing.handshake_failures, orders.handshake_failures
            ));
        }
        Ok(())
    })
    .await;
    let warnings = captured.warnings();
    let about_clusters: Vec<&String> = warnings
        .iter()
        .filter(|line| line.contains("cluster \\\"") || line.contains("cluster \""))
        .collect();
    assert_eq!(
        about_clusters.len(),
        2,
        "one warning per side, not one per retry: {warnings:#?}"
    );
    assert!(
        about_clusters
            .iter()
            .any(|line| line.contains("cannot connect to")),
        "the connecting side says it: {warnings:#?}"
    );
    assert!(
        about_clusters
            .iter()
            .any(|line| line.contains("handshake failed")),
        "the accepting side says it: {warnings:#?}"
    );
    let secret = String::from_utf8(SECRET.to_vec()).unwrap();
    assert!(
        warnings.iter().all(|line| !line.contains(&secret)),
        "the secret never reaches the log"
    );
}
