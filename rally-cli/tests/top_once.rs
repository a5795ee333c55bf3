//! `rally top --once` against a live node's endpoint, a cluster member's, and none.

use std::process::Command;
use std::time::Duration;

use rally::cluster::virtual_actors::{Activation, GrainMessages, VirtualActor, VirtualActors};
use rally::cluster::{Cluster, ClusterConfig, MemberStatus};
use rally::remote::{RemoteConfig, RemoteMessage, RemoteNode};
use rally_actor::{Actor, ActorResult, ActorSystem, Context, Handler, Message, Props};
use rally_test::eventually;
use serde::{Deserialize, Serialize};

struct Echo;
impl Actor for Echo {}
struct Ping;
impl Message for Ping {
    type Reply = ();
}
impl Handler<Ping> for Echo {
    async fn handle(&mut self, _: Ping, _: &mut Context<Self>) -> ActorResult<()> {
        Ok(())
    }
}

/// The bound on every wait (never reached when the test passes).
const T: Duration = Duration::from_secs(60);

/// The node's Prometheus endpoint on a free loopback port, reporting every `period`.
async fn serve(system: &ActorSystem, period: Duration) -> rally_metrics::prometheus::Endpoint {
    rally_metrics::prometheus::serve(system, "127.0.0.1:0".parse().unwrap(), period)
        .await
        .unwrap()
}

fn top_once(endpoint: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_rally"))
        .args(["top", "--once", "--endpoint", endpoint])
        .output()
        .expect("the rally binary runs")
}

/// Runs `rally top --once` against `endpoint` off the runtime's threads: the first line that
/// starts with `prefix` and the whole text, or the text alone (the reason to look again).
async fn row_in_top(endpoint: &str, prefix: &str) -> Result<(String, String), String> {
    let endpoint = endpoint.to_owned();
    let output = tokio::task::spawn_blocking(move || top_once(&endpoint))
        .await
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    match text.lines().find(|l| l.starts_with(prefix)) {
        Some(row) => Ok((row.to_owned(), text.clone())),
        None => Err(text),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_once_prints_the_nodes_actors_and_dispatchers() {
    let system = ActorSystem::new("top");
    let echo = system
        .spawn(Props::new(Echo).named("echo").monitored(true))
        .unwrap();
    echo.ask(Ping, Duration::from_secs(1)).await.unwrap();
    let endpoint = serve(&system, Duration::from_millis(20)).await;
    let addr = endpoint.local_addr().to_string();
    // The first report comes after one period (20 ms): ask until it has the actor's row.
    let (echo_row, text) = eventually("a row for the actor", T, async || {
        row_in_top(&addr, "/user/echo").await
    })
    .await;
    assert!(echo_row.contains("healthy"), "{echo_row}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("default ") && l.contains("current-runtime")),
        "{text}"
    );
    system.shutdown().await.unwrap();
}

/// Monitoring is opt-in per actor: against a node that opted none in, `--once` says so and how
/// to opt in, instead of an empty table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_once_on_a_node_without_monitored_actors_says_how_to_opt_in() {
    let system = ActorSystem::new("plain");
    let echo = system.spawn(Props::new(Echo).named("echo")).unwrap();
    echo.ask(Ping, Duration::from_secs(1)).await.unwrap();
    let endpoint = serve(&system, Duration::from_millis(20)).await;
    let addr = endpoint.local_addr().to_string();
    let output = tokio::task::spawn_blocking(move || top_once(&addr))
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    assert!(!text.contains("/user/echo"), "{text}");
    assert!(
        text.contains("no monitored actors") && text.contains("monitored(true)"),
        "{text}"
    );
    system.shutdown().await.unwrap();
}

#[test]
fn top_once_without_a_node_fails_with_the_address() {
    // Bind and drop a port so that nothing listens on it.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let output = top_once(&addr);
    assert!(!output.status.success());
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(
        error.contains(&format!("cannot read http://{addr}/report")),
        "{error}"
    );
}

struct Cart;
impl Actor for Cart {}
impl VirtualActor for Cart {
    const KIND: &'static str = "cart";
    async fn activate(_: Activation) -> ActorResult<Self> {
        Ok(Cart)
    }
    fn messages(table: &mut GrainMessages<Self>) {
        table.add::<Touch>();
    }
}

#[derive(Serialize, Deserialize)]
struct Touch;
impl Message for Touch {
    type Reply = ();
}
impl RemoteMessage for Touch {
    const MANIFEST: &'static str = "top-test.Touch";
}
impl Handler<Touch> for Cart {
    async fn handle(&mut self, _: Touch, _: &mut Context<Self>) -> ActorResult<()> {
        Ok(())
    }
}

/// A one-member cluster on loopback hosting `cart`, with `carts` of them activated.
struct Member {
    system: ActorSystem,
    node: RemoteNode,
    cluster: Cluster,
    /// Its address.
    me: String,
    _grains: VirtualActors,
}

async fn member_with_carts(name: &str, carts: usize) -> Member {
    let system = ActorSystem::new(name);
    let node = RemoteNode::start(
        &system,
        RemoteConfig::builder()
            .listen("127.0.0.1", 0)
            .secret(b"top secret".to_vec())
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    let me = node.address().to_string();
    let config = ClusterConfig::builder()
        .seed(me.parse().unwrap())
        .kind("cart")
        .build()
        .unwrap();
    let cluster = Cluster::join(&system, &node, config.clone()).unwrap();
    let grains = VirtualActors::builder(&cluster, &system)
        .kind::<Cart>()
        .membership(&config)
        .start(&node)
        .unwrap();
    eventually("the member comes up", T, async || {
        cluster.self_member().status == MemberStatus::Up
    })
    .await;
    for i in 0..carts {
        let cart = grains.get::<Cart>(&format!("cart-{i}")).unwrap();
        cart.ask(Touch, T).await.unwrap();
    }
    Member {
        system,
        node,
        cluster,
        me,
        _grains: grains,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_once_shows_a_members_virtual_actors_and_membership() {
    // Every handle is kept until the end: dropping the cluster's would stop the member.
    let Member {
        system,
        node: _node,
        cluster: _cluster,
        me,
        _grains,
    } = member_with_carts("top", 5).await;
    let endpoint = serve(&system, Duration::from_millis(100)).await;
    let addr = endpoint.local_addr().to_string();
    // The first report comes after one period: ask until it is there.
    let (row, text) = eventually("a row for the kind", T, async || {
        row_in_top(&addr, "cart ").await
    })
    .await;
    let row: Vec<&str> = row.split_whitespace().collect();
    // kind, member, active, activations, act/s, deact/s, moves, forwarded
    assert_eq!(row[..4], ["cart", me.as_str(), "5", "5"], "{text}");
    assert_eq!(row[6..], ["0", "0"], "{text}");
    assert!(
        text.contains(&format!(
            "{me}: members up 1, joining 0, leaving 0, down 0, unreachable 0;"
        )),
        "{text}"
    );
    system.shutdown().await.unwrap();
}

/// `rally top --cluster --once` against a member serving the cluster dashboard: the member
/// listed as up, and the kind's row with its active count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_cluster_once_shows_the_dashboards_members_and_kinds() {
    let Member {
        system,
        node,
        cluster,
        me,
        _grains,
    } = member_with_carts("topc", 3).await;
    let dashboard =
        rally::metrics::dashboard::serve(&cluster, &node, "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
    let addr = dashboard.local_addr().to_string();
    // The first gathering comes after a second: ask until the kind's row is there.
    let (row, text) = eventually("a row for the kind", T, async || {
        let addr = addr.clone();
        let output = tokio::task::spawn_blocking(move || {
            Command::new(env!("CARGO_BIN_EXE_rally"))
                .args(["top", "--cluster", "--once", "--endpoint", &addr])
                .output()
                .expect("the rally binary runs")
        })
        .await
        .unwrap();
        assert!(output.status.success(), "{output:?}");
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        match text.lines().find(|l| l.starts_with("cart ")) {
            Some(row) => Ok((row.to_owned(), text.clone())),
            None => Err(text),
        }
    })
    .await;
    let row: Vec<&str> = row.split_whitespace().collect();
    // kind, members, active
    assert_eq!(row[..3], ["cart", "1", "3"], "{text}");
    assert!(text.contains("1 members, 1 up"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with(&format!("{me}#")) && l.contains(" up ")),
        "{text}"
    );
    drop(dashboard);
    system.shutdown().await.unwrap();
}
