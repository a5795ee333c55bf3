//! The endpoint answers a real HTTP client (ureq) over TCP.

use std::time::Duration;

use rally_actor::{Actor, ActorResult, ActorSystem, Context, Handler, Message, Props};
use rally_test::eventually;

#[path = "support/http.rs"]
mod http;
use http::{Got, get};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_scraped_over_http() {
    let system = ActorSystem::new("scrape");
    let echo = system
        .spawn(Props::new(Echo).named("echo").monitored(true))
        .unwrap();
    for _ in 0..5 {
        echo.ask(Ping, Duration::from_secs(1)).await.unwrap();
    }
    let endpoint = rally_metrics::prometheus::serve(
        &system,
        "127.0.0.1:0".parse().unwrap(),
        Duration::from_millis(20),
    )
    .await
    .unwrap();
    let Got {
        status,
        content_type: kind,
        body: metrics,
    } = get(endpoint.local_addr(), "/metrics").await;
    assert_eq!(status, 200);
    assert_eq!(kind, "text/plain; version=0.0.4");
    assert!(
        metrics.contains(
            "rally_actor_messages_completed_total{actor=\"/user/echo\",dispatcher=\"default\"} 5"
        ),
        "{metrics}"
    );
    assert!(metrics.contains("# TYPE rally_dispatcher_threads gauge"));
    // The first period report comes after one period (20 ms): ask until it names the actor.
    eventually(
        "a period report with the actor",
        Duration::from_secs(10),
        async || {
            let Got {
                status,
                content_type: kind,
                body: report,
            } = get(endpoint.local_addr(), "/report").await;
            assert_eq!((status, kind.as_str()), (200, "application/json"));
            let report: rally_metrics::PeriodReport = serde_json::from_str(&report).unwrap();
            if report.actors.iter().any(|a| a.path == "/user/echo") {
                Ok(())
            } else {
                Err(report)
            }
        },
    )
    .await;
    assert_eq!(get(endpoint.local_addr(), "/nope").await.status, 404);
    system.shutdown().await.unwrap();
}
