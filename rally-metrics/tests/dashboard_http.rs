//! The dashboard's HTTP endpoints over real HTTP (ureq) against a member on loopback TCP: the
//! page and its assets, `/api/cluster`, and what is active a page at a time, with the error
//! each bad request gets (a page size of 0 or not a number, an unknown kind, a bad cursor).

use std::time::Duration;

use rally::cluster::virtual_actors::{Activation, GrainMessages, VirtualActor, VirtualActors};
use rally::cluster::{Cluster, ClusterConfig};
use rally::remote::{RemoteConfig, RemoteMessage, RemoteNode};
use rally::{Actor, ActorResult, ActorSystem, Context, Handler, Message};
use rally_test::eventually;
use serde::{Deserialize, Serialize};

#[path = "support/http.rs"]
mod http;
use http::{Got, get};

/// Bound on every wait: generous, since several builds share two cores.
const T: Duration = Duration::from_secs(60);

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
    const MANIFEST: &'static str = "dashboard-http.Touch";
}
impl Handler<Touch> for Cart {
    async fn handle(&mut self, _: Touch, _: &mut Context<Self>) -> ActorResult<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboards_endpoints_answer_and_bad_listings_get_their_error() {
    let system = ActorSystem::new("dashhttp");
    let node = RemoteNode::start(
        &system,
        RemoteConfig::builder()
            .listen("127.0.0.1", 0)
            .secret(b"dashboard secret".to_vec())
            .build()
            .unwrap(),
    )
    .await
    .unwrap();
    let config = ClusterConfig::builder()
        .seed(node.address().to_string().parse().unwrap())
        .kind("cart")
        .build()
        .unwrap();
    let cluster = Cluster::join(&system, &node, config.clone()).unwrap();
    let grains = VirtualActors::builder(&cluster, &system)
        .kind::<Cart>()
        .membership(&config)
        .start(&node)
        .unwrap();
    cluster.wait_until_up(T).await.unwrap();
    for i in 0..5 {
        grains
            .get::<Cart>(&format!("cart-{i}"))
            .unwrap()
            .ask(Touch, T)
            .await
            .unwrap();
    }
    // Exposed first, as on every member; serving then uses that endpoint.
    rally::metrics::dashboard::expose(&node).unwrap();
    let dashboard =
        rally::metrics::dashboard::serve(&cluster, &node, "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
    let addr = dashboard.local_addr();
    let me = cluster.self_member().id.to_string();

    // The page, once the first gathering has the kind.
    let page = eventually("the page shows the kind", T, async || {
        let Got {
            status, body: page, ..
        } = get(addr, "/").await;
        assert_eq!(status, 200);
        if page.contains("data-kind=\"cart\"") {
            Ok(page)
        } else {
            Err(page)
        }
    })
    .await;
    assert!(page.contains(&format!("data-member=\"{me}\"")), "{page}");
    let Got {
        status, body: js, ..
    } = get(addr, "/assets/uPlot.iife.min.js").await;
    assert_eq!(status, 200);
    assert!(js.starts_with("/*! https://github.com/leeoniya/uPlot (v1.6.32) */"));
    assert_eq!(get(addr, "/nothing-here").await.status, 404);

    let Got { status, body, .. } = get(addr, "/api/cluster").await;
    assert_eq!(status, 200);
    let view: rally::metrics::dashboard::ClusterView = serde_json::from_str(&body).unwrap();
    assert_eq!(view.members.len(), 1);
    assert_eq!(view.kinds[0].kind, "cart");
    assert_eq!(view.kinds[0].active, 5);

    // What is active, two a page: 2 + 2 + 1, each identity once, each on this member.
    let mut listed = Vec::new();
    let mut cursor = String::new();
    let mut pages = 0;
    loop {
        let Got { status, body, .. } = get(
            addr,
            &format!("/api/active?kind=cart&limit=2&cursor={}", encode(&cursor)),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        let page: serde_json::Value = serde_json::from_str(&body).unwrap();
        pages += 1;
        for identity in page["identities"].as_array().unwrap() {
            assert_eq!(identity["member"], me.as_str());
            listed.push(identity["identity"].as_str().unwrap().to_owned());
        }
        match page["next"].as_str() {
            Some(next) => cursor = next.to_owned(),
            None => break,
        }
    }
    listed.sort();
    assert_eq!(listed, ["cart-0", "cart-1", "cart-2", "cart-3", "cart-4"]);
    assert_eq!(pages, 3);

    // Bad requests: 400 and the error in words.
    for (query, says) in [
        ("kind=cart&limit=0", "between 1 and 1000"),
        ("kind=cart&limit=1001", "between 1 and 1000"),
        ("kind=cart&limit=many", "not \\\"many\\\""),
        (
            "kind=carts&limit=5",
            "no member hosts kind \\\"carts\\\" (did you mean \\\"cart\\\"?)",
        ),
        ("kind=cart&cursor=garbage", "not a listing cursor"),
    ] {
        let Got { status, body, .. } = get(addr, &format!("/api/active?{query}")).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert!(body.contains(says), "{query}: {body}");
    }
    drop(dashboard);
    system.shutdown().await.unwrap();
}

/// Percent-encoding of a cursor for a query.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
