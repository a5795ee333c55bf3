//! Two nodes on real loopback TCP, through the facade only, as a user's first remote program
//! meets them: a node with the wrong secret is refused with a typed error that says why, each
//! side says so once in the log however often the lanes retry, neither secret shows; and a node
//! that only answers counts its replies as messages sent.
#![cfg(feature = "remote")]

#[path = "support/log.rs"]
mod log;

use std::time::Duration;

use rally::AskError;
use rally::prelude::*;
use rally::remote::RemoteConfig;
use rally_test::eventually;
use serde::{Deserialize, Serialize};

const T: Duration = Duration::from_secs(10);

#[derive(Serialize, Deserialize)]
struct Echo(u64);
impl Message for Echo {
    type Reply = u64;
}
impl RemoteMessage for Echo {
    const MANIFEST: &'static str = "facade-test.Echo";
}

struct Echoer;
impl Actor for Echoer {}
impl Handler<Echo> for Echoer {
    async fn handle(&mut self, msg: Echo, _: &mut Context<Self>) -> ActorResult<u64> {
        Ok(msg.0)
    }
}
impl RemoteActor for Echoer {
    fn messages(table: &mut MessageTable<Self>) {
        table.add::<Echo>();
    }
}

/// A node on a free loopback port with `secret`, its echo actor exposed as "echo".
async fn node(name: &str, secret: &[u8]) -> (ActorSystem, RemoteNode) {
    let system = ActorSystem::new(name);
    let config = RemoteConfig::builder()
        .listen("127.0.0.1", 0)
        .secret(secret.to_vec())
        .build()
        .unwrap();
    let node = RemoteNode::start(&system, config).await.unwrap();
    node.expose("echo", &system.spawn(Echoer).unwrap()).unwrap();
    (system, node)
}

/// Everything runs on this test's one thread, so the subscriber set here sees both nodes.
#[tokio::test]
async fn a_wrong_secret_is_a_typed_error_counted_and_logged_once_on_each_side() {
    let (captured, _guard) = log::capture();

    let (_bs, b) = node("b", b"correct horse").await;
    let (_as, a) = node("a", b"battery staple").await;
    let echo = a.lookup::<Echoer>(b.address(), "echo");
    let asked = tokio::time::Instant::now();
    match echo.ask(Echo(1), T).await {
        Err(AskError::Undeliverable(why)) => {
            assert!(why.contains("different secret"), "{why}");
            assert!(
                why.contains(&b.address().to_string()),
                "names the peer: {why}"
            );
        }
        other => panic!("expected a typed refusal, got {other:?}"),
    }
    assert!(asked.elapsed() < T, "refused, not timed out");

    // The lanes keep retrying (the other side may be reconfigured): wait until both sides
    // counted several refused handshakes, then check that each said why exactly once.
    eventually("both sides count retries", T, async || {
        let (a, b) = (a.stats(), b.stats());
        if a.handshake_failures < 4 || b.handshake_failures < 4 {
            return Err(format!("a {a:?}, b {b:?}"));
        }
        Ok(())
    })
    .await;
    let log = captured.text();
    let about_secret: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("WARN") && line.contains("different secret"))
        .collect();
    assert_eq!(
        about_secret.len(),
        2,
        "one warning per side, not one per retry:\n{log}"
    );
    assert!(
        about_secret
            .iter()
            .any(|line| line.contains("cannot connect to")),
        "the connecting side says it:\n{log}"
    );
    assert!(
        about_secret
            .iter()
            .any(|line| line.contains("handshake failed")),
        "the accepting side says it:\n{log}"
    );
    for secret in ["correct horse", "battery staple"] {
        assert!(!log.contains(secret), "a secret reached the log:\n{log}");
    }
    // Later asks fail at once with the same reason.
    assert!(matches!(
        echo.ask(Echo(2), T).await,
        Err(AskError::Undeliverable(why)) if why.contains("different secret")
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_only_answers_counts_its_replies_as_messages_sent() {
    let (_bs, b) = node("b", b"one secret").await;
    let (_as, a) = node("a", b"one secret").await;
    let echo = a.lookup::<Echoer>(b.address(), "echo");
    for i in 0..100 {
        assert_eq!(echo.ask(Echo(i), T).await, Ok(i));
    }
    let answered = b.stats();
    assert_eq!(answered.replies_sent, 100, "{answered:?}");
    assert!(answered.messages_sent >= 100, "{answered:?}");
    assert!(answered.writes > 0, "{answered:?}");
    assert!(answered.messages_per_write() > 0.0, "{answered:?}");
    let asked = a.stats();
    assert_eq!(asked.replies_sent, 0, "{asked:?}");
    assert!(asked.messages_sent >= 100, "{asked:?}");
    assert_eq!(asked.pending_requests, 0, "answered asks hold no slot");
}
