//! A cluster member's endpoint, scraped over real HTTP (ureq) while two members talk over real
//! loopback TCP: the virtual actors' figures (active, activations, deactivations) and the
//! membership's (members by status, packets and bytes) are there and move with the traffic.

use std::time::Duration;

use rally::cluster::virtual_actors::{
    Activation, GrainMessages, VirtualActor, VirtualActors, VirtualActorsConfig,
};
use rally::cluster::{Cluster, ClusterConfig, MemberStatus};
use rally::remote::{RemoteConfig, RemoteMessage, RemoteNode};
use rally::{Actor, ActorResult, ActorSystem, Context, Handler, Message};
use rally_test::eventually;
use serde::{Deserialize, Serialize};

#[path = "support/http.rs"]
mod http;
use http::{Got, get, sample, scrape};

/// Bound on every wait: generous, since several builds share two cores.
const T: Duration = Duration::from_secs(60);

struct Counter {
    count: u32,
}
impl Actor for Counter {}
impl VirtualActor for Counter {
    const KIND: &'static str = "counter";
    async fn activate(_: Activation) -> ActorResult<Self> {
        Ok(Counter { count: 0 })
    }
    fn messages(table: &mut GrainMessages<Self>) {
        table.add::<Bump>();
    }
}

#[derive(Serialize, Deserialize)]
struct Bump;
impl Message for Bump {
    type Reply = u32;
}
impl RemoteMessage for Bump {
    const MANIFEST: &'static str = "metrics-test.Bump";
}
impl Handler<Bump> for Counter {
    async fn handle(&mut self, _: Bump, _: &mut Context<Self>) -> ActorResult<u32> {
        self.count += 1;
        Ok(self.count)
    }
}

struct Member {
    system: ActorSystem,
    node: RemoteNode,
    cluster: Cluster,
    grains: VirtualActors,
}

/// A member on a free loopback port; it hosts `counter` (idle after `idle`) if `idle` is
/// given, else it is client-only.
async fn member(seed: Option<&str>, idle: Option<Duration>) -> Member {
    let system = ActorSystem::new("scrape");
    let node = RemoteNode::start(
        &system,
        RemoteConfig::builder()
            .listen("127.0.0.1", 0)
            .secret(b"scrape secret".to_vec())
            .build()
            .unwrap(),
    )
    .await
    .expect("node starts");
    let seed = seed.map_or_else(|| node.address().to_string(), str::to_owned);
    let mut config = ClusterConfig::builder();
    config.seed(seed.parse().unwrap());
    if idle.is_some() {
        config.kind("counter");
    }
    let config = config.build().unwrap();
    let cluster = Cluster::join(&system, &node, config.clone()).expect("joins");
    let mut grains = VirtualActors::builder(&cluster, &system);
    grains.membership(&config);
    if let Some(idle) = idle {
        let mut settings = VirtualActorsConfig::default();
        settings.idle_timeout = idle;
        grains.kind::<Counter>().config(settings);
    }
    let grains = grains.start(&node).expect("starts");
    Member {
        system,
        node,
        cluster,
        grains,
    }
}

/// Scrapes `/metrics` until `done` holds for the text (bounded by `T`); returns that text.
async fn scrape_until(addr: std::net::SocketAddr, done: impl Fn(&str) -> bool) -> String {
    eventually("the scrape shows it", T, async || {
        let text = scrape(addr).await;
        if done(&text) { Ok(text) } else { Err(text) }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grain_and_membership_figures_are_scraped_and_move_with_the_traffic() {
    // The host passivates after 300 ms idle, so deactivations show too.
    let host = member(None, Some(Duration::from_millis(300))).await;
    let seed = host.node.address().to_string();
    let client = member(Some(&seed), None).await;
    let endpoint = rally::metrics::prometheus::serve(
        &host.system,
        "127.0.0.1:0".parse().unwrap(),
        Duration::from_millis(50),
    )
    .await
    .unwrap();
    let addr = endpoint.local_addr();
    let me = format!("member=\"{seed}\"");
    let counter = format!("{me},kind=\"counter\"");

    // Before any message: the series exist, at zero.
    let before = get(addr, "/metrics").await.body;
    assert!(
        before.contains("# TYPE rally_grain_activations_total counter"),
        "{before}"
    );
    assert!(
        before.contains("# TYPE rally_grain_active gauge"),
        "{before}"
    );
    assert_eq!(sample(&before, "rally_grain_active", &counter), Some(0.0));
    assert_eq!(sample(&before, "rally_grain_leases", &counter), Some(0.0));
    assert_eq!(
        sample(&before, "rally_grain_activations_total", &counter),
        Some(0.0)
    );

    // Both members up, seen in the host's figures.
    let up = format!("{me},status=\"up\"");
    scrape_until(addr, |text| {
        sample(text, "rally_cluster_members", &up) == Some(2.0)
    })
    .await;
    eventually("the client sees both up", T, async || {
        let members = client.cluster.members();
        let up = members.iter().filter(|m| m.status == MemberStatus::Up);
        if up.count() == 2 {
            Ok(())
        } else {
            Err(members)
        }
    })
    .await;

    // Ten identities activated from the client-only member, all on the host.
    for i in 0..10 {
        let grain = client.grains.get::<Counter>(&format!("c-{i}")).unwrap();
        assert_eq!(grain.ask(Bump, T).await, Ok(1));
    }
    let text = scrape_until(addr, |text| {
        sample(text, "rally_grain_activations_total", &counter) == Some(10.0)
    })
    .await;
    assert_eq!(
        sample(&text, "rally_grain_failed_activations_total", &counter),
        Some(0.0)
    );
    assert_eq!(
        sample(&text, "rally_grain_forwarded_total", &counter),
        Some(0.0)
    );
    assert_eq!(
        sample(&text, "rally_grain_moves_total", &counter),
        Some(0.0)
    );
    // The figures agree with the runtime's own.
    assert_eq!(host.grains.stats()[0].activations, 10);
    // One lease per shard the ten identities fall in, held while any of them is active (a
    // slow machine may have passivated some already: then at most that many).
    let shards: std::collections::HashSet<u32> = (0..10)
        .map(|i| rally::cluster::virtual_actors::shard_of("counter", &format!("c-{i}")))
        .collect();
    let leases = sample(&text, "rally_grain_leases", &counter).unwrap();
    if sample(&text, "rally_grain_active", &counter) == Some(10.0) {
        assert_eq!(leases, shards.len() as f64);
    } else {
        assert!(leases <= shards.len() as f64, "{leases} leases");
    }

    // Membership traffic: packets and bytes both ways, members by status, no drops.
    for name in [
        "rally_cluster_membership_packets_received_total",
        "rally_cluster_membership_packets_sent_total",
        "rally_cluster_membership_bytes_received_total",
        "rally_cluster_membership_bytes_sent_total",
    ] {
        let value = sample(&text, name, &me).unwrap_or_else(|| panic!("{name}:\n{text}"));
        assert!(value > 0.0, "{name} = {value}");
    }
    let packets = sample(
        &text,
        "rally_cluster_membership_packets_received_total",
        &me,
    )
    .unwrap();
    let bytes = sample(&text, "rally_cluster_membership_bytes_received_total", &me).unwrap();
    assert!(
        bytes > packets,
        "a packet is more than a byte: {bytes} B in {packets}"
    );
    for reason in ["malformed", "forged", "impossible-transition", "full"] {
        let labels = format!("{me},reason=\"{reason}\"");
        assert_eq!(
            sample(&text, "rally_cluster_membership_dropped_total", &labels),
            Some(0.0)
        );
    }
    assert_eq!(
        sample(
            &text,
            "rally_cluster_members",
            &format!("{me},status=\"down\"")
        ),
        Some(0.0)
    );
    assert_eq!(
        sample(&text, "rally_cluster_downing_decisions_total", &me),
        Some(0.0)
    );

    // Idle for 300 ms: all ten deactivated, none active.
    let text = scrape_until(addr, |text| {
        sample(text, "rally_grain_deactivations_total", &counter) == Some(10.0)
    })
    .await;
    assert_eq!(sample(&text, "rally_grain_active", &counter), Some(0.0));
    let text = scrape_until(addr, |text| {
        sample(text, "rally_grain_leases", &counter) == Some(0.0)
    })
    .await;
    assert_eq!(sample(&text, "rally_grain_active", &counter), Some(0.0));

    // The JSON report carries the same figures, counters with their rate.
    let Got {
        status, body: json, ..
    } = get(addr, "/report").await;
    assert_eq!(status, 200);
    let report: rally::metrics::PeriodReport = serde_json::from_str(&json).unwrap();
    let activations: Vec<_> = report
        .figures_named("rally_grain_activations_total", &[("kind", "counter")])
        .collect();
    assert_eq!(activations.len(), 1, "{report:?}");
    assert_eq!(activations[0].value, 10.0);
    assert!(activations[0].rate.is_some());
    let active = report
        .figures_named("rally_grain_active", &[("kind", "counter")])
        .next()
        .unwrap();
    assert_eq!(active.rate, None);

    drop(endpoint);
    client.system.shutdown().await.unwrap();
    host.system.shutdown().await.unwrap();
}
