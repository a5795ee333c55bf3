//! `rally top --once` against a live node's endpoint, and against none.

use std::process::Command;
use std::time::Duration;

use rally_actor::{Actor, ActorResult, ActorSystem, Context, Handler, Message, Props};

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

fn top_once(endpoint: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_rally"))
        .args(["top", "--once", "--endpoint", endpoint])
        .output()
        .expect("the rally binary runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_once_prints_the_nodes_actors_and_dispatchers() {
    let system = ActorSystem::new("top");
    let echo = system
        .spawn(Props::new(Echo).named("echo").monitored(true))
        .unwrap();
    echo.ask(Ping, Duration::from_secs(1)).await.unwrap();
    let endpoint = rally_metrics::prometheus::serve(
        &system,
        "127.0.0.1:0".parse().unwrap(),
        Duration::from_millis(20),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(60)).await;
    let addr = endpoint.local_addr().to_string();
    let output = tokio::task::spawn_blocking(move || top_once(&addr))
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    let echo_row = text
        .lines()
        .find(|l| l.starts_with("/user/echo"))
        .unwrap_or_else(|| panic!("no row for the actor in:\n{text}"));
    assert!(echo_row.contains("healthy"), "{echo_row}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("default ") && l.contains("current-runtime")),
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
