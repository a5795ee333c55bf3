//! The endpoint answers a real HTTP client over TCP.

use std::time::Duration;

use rally_actor::{Actor, ActorResult, ActorSystem, Context, Handler, Message, Props};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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

async fn get(addr: std::net::SocketAddr, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nhost: test\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
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
    let metrics = get(endpoint.local_addr(), "/metrics").await;
    assert!(metrics.starts_with("HTTP/1.1 200 OK"), "{metrics}");
    assert!(
        metrics.contains(
            "rally_actor_messages_completed_total{actor=\"/user/echo\",dispatcher=\"default\"} 5"
        ),
        "{metrics}"
    );
    assert!(metrics.contains("# TYPE rally_dispatcher_threads gauge"));
    tokio::time::sleep(Duration::from_millis(60)).await;
    let report = get(endpoint.local_addr(), "/report").await;
    assert!(report.contains("\"path\":\"/user/echo\""), "{report}");
    assert!(get(endpoint.local_addr(), "/nope").await.contains("404"));
    system.shutdown().await.unwrap();
}
