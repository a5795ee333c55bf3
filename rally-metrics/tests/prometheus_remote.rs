//! A node's remote I/O figures on its metrics endpoint, scraped over real HTTP (ureq) while two
//! nodes talk over real loopback TCP: `rally_remote_*` are there with no setting, under the
//! node's address, move with the traffic, and agree with `RemoteNode::stats`.

use std::time::Duration;

use rally::remote::{MessageTable, RemoteActor, RemoteConfig, RemoteMessage, RemoteNode};
use rally::{Actor, ActorResult, ActorSystem, Context, Handler, Message};
use rally_test::eventually;
use serde::{Deserialize, Serialize};

#[path = "support/http.rs"]
mod http;
use http::{sample, scrape};

/// Bound on every wait: generous, since several builds share two cores.
const T: Duration = Duration::from_secs(60);
const ASKS: u64 = 500;

struct Echo;
impl Actor for Echo {}
impl RemoteActor for Echo {
    fn messages(table: &mut MessageTable<Self>) {
        table.add::<Ping>();
    }
}

#[derive(Serialize, Deserialize)]
struct Ping(u64);
impl Message for Ping {
    type Reply = u64;
}
impl RemoteMessage for Ping {
    const MANIFEST: &'static str = "metrics-test.Ping";
}
impl Handler<Ping> for Echo {
    async fn handle(&mut self, msg: Ping, _: &mut Context<Self>) -> ActorResult<u64> {
        Ok(msg.0)
    }
}

async fn node(name: &str) -> (ActorSystem, RemoteNode) {
    let system = ActorSystem::new(name);
    let node = RemoteNode::start(
        &system,
        RemoteConfig::builder()
            .listen("127.0.0.1", 0)
            .secret(b"remote scrape secret".to_vec())
            .build()
            .expect("valid"),
    )
    .await
    .expect("the node starts");
    (system, node)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_figures_are_scraped_under_the_node_and_agree_with_its_stats() {
    let (a_system, a) = node("a").await;
    let (b_system, b) = node("b").await;
    let echo = b_system.spawn(Echo).expect("spawns");
    b.expose("echo", &echo).expect("exposed");
    let endpoint = rally::metrics::prometheus::serve(
        &a_system,
        "127.0.0.1:0".parse().expect("an address"),
        Duration::from_millis(50),
    )
    .await
    .expect("the endpoint serves");
    let me = format!("node=\"{}\"", a.address());

    // Before any message: the series exist, at zero.
    let before = scrape(endpoint.local_addr()).await;
    assert!(
        before.contains("# TYPE rally_remote_messages_sent_total counter"),
        "{before}"
    );
    assert_eq!(sample(&before, "rally_remote_associations", &me), Some(0.0));
    assert_eq!(
        sample(&before, "rally_remote_messages_sent_total", &me),
        Some(0.0)
    );

    let remote = a.lookup::<Echo>(b.address(), "echo");
    for i in 0..ASKS {
        assert_eq!(remote.ask(Ping(i), T).await, Ok(i));
    }
    // The figures of one scrape, and the node's own before and after it: counters only grow,
    // and heartbeats may move them between the two reads.
    let low = a.stats();
    let text = scrape(endpoint.local_addr()).await;
    let high = a.stats();
    let figure = |name: &str| {
        sample(&text, name, &me).unwrap_or_else(|| panic!("{name} missing:\n{text}")) as u64
    };
    let between = |name: &str, low: u64, high: u64| {
        let value = figure(name);
        assert!(
            (low..=high).contains(&value),
            "{name} = {value}, not within {low}..={high}"
        );
        value
    };
    let sent = between(
        "rally_remote_messages_sent_total",
        low.messages_sent,
        high.messages_sent,
    );
    assert!(sent >= ASKS, "{sent} messages sent");
    let writes = between("rally_remote_writes_total", low.writes, high.writes);
    assert!(writes > 0 && writes <= sent, "{writes} writes");
    let frames = between(
        "rally_remote_frames_received_total",
        low.frames_received,
        high.frames_received,
    );
    assert!(frames >= ASKS, "{frames} frames: the replies at least");
    between(
        "rally_remote_bytes_written_total",
        low.bytes_written,
        high.bytes_written,
    );
    between(
        "rally_remote_bytes_read_total",
        low.bytes_read,
        high.bytes_read,
    );
    assert_eq!(figure("rally_remote_associations"), 1);
    for reason in [
        "unknown-manifest",
        "decode-failed",
        "unknown-recipient",
        "undelivered",
    ] {
        let labels = format!("{me},reason=\"{reason}\"");
        assert_eq!(
            sample(&text, "rally_remote_inbound_dropped_total", &labels),
            Some(0.0),
            "{reason}"
        );
    }
    // The other node's figures are on its own system's endpoint, not on this one.
    assert!(
        !text.contains(&format!("node=\"{}\"", b.address())),
        "{text}"
    );

    // A node that is gone leaves the endpoint (its figures are read through a weak handle).
    drop(remote);
    drop(a);
    eventually("the node's figures leave the endpoint", T, async || {
        let text = scrape(endpoint.local_addr()).await;
        if text.contains("rally_remote_messages_sent_total{") {
            Err(text)
        } else {
            Ok(())
        }
    })
    .await;
}
