//! Monitoring counters: who is monitored, and that the figures add up.

#[path = "support/log.rs"]
mod log;

use std::sync::Arc;
use std::time::Duration;

use rally::monitor::{ActorSnapshot, Snapshot};
use rally::{
    Actor, ActorResult, ActorSystem, Context, Handler, Message, MonitoringConfig, Props,
    SystemConfig,
};
use rally_test::eventually;
use tokio::sync::Semaphore;

const T: Duration = Duration::from_secs(5);

/// Handles a message only when the test hands out a permit.
struct Gated(Arc<Semaphore>);
impl Actor for Gated {}

struct Work;
impl Message for Work {
    type Reply = ();
}

impl Handler<Work> for Gated {
    async fn handle(&mut self, _: Work, _: &mut Context<Self>) -> ActorResult<()> {
        self.0.acquire().await?.forget();
        Ok(())
    }
}

fn actor(snapshot: &Snapshot, path: &str) -> Option<ActorSnapshot> {
    snapshot
        .actors
        .iter()
        .find(|a| a.path.as_ref() == path)
        .cloned()
}

async fn wait_for(system: &ActorSystem, path: &str, done: impl Fn(&ActorSnapshot) -> bool) {
    eventually(
        &format!("the counters of {path} get there"),
        T,
        async || match actor(&system.monitor().snapshot(), path) {
            Some(a) if done(&a) => Ok(()),
            other => Err(other),
        },
    )
    .await;
}

fn adds_up(a: &ActorSnapshot) {
    assert_eq!(
        a.arrived,
        a.completed + a.queued as u64 + a.in_progress,
        "arrived = completed + queued + in progress: {a:?}"
    );
}

#[tokio::test]
async fn arrived_equals_completed_plus_queued() {
    let system = ActorSystem::new("counters");
    let gate = Arc::new(Semaphore::new(0));
    let gated = system
        .spawn(
            Props::new(Gated(gate.clone()))
                .named("gated")
                .monitored(true),
        )
        .unwrap();
    for _ in 0..10 {
        gated.tell(Work).unwrap();
    }
    wait_for(&system, "/user/gated", |a| a.in_progress == 1).await;
    let first = actor(&system.monitor().snapshot(), "/user/gated").unwrap();
    assert_eq!((first.arrived, first.completed, first.queued), (10, 0, 9));
    assert_eq!(first.max_queued, 10);
    adds_up(&first);

    gate.add_permits(4);
    wait_for(&system, "/user/gated", |a| {
        a.completed == 4 && a.in_progress == 1
    })
    .await;
    adds_up(&actor(&system.monitor().snapshot(), "/user/gated").unwrap());

    gate.add_permits(6);
    wait_for(&system, "/user/gated", |a| a.completed == 10).await;
    let done = actor(&system.monitor().snapshot_period(), "/user/gated").unwrap();
    assert_eq!((done.queued, done.in_progress), (0, 0));
    adds_up(&done);
    assert!(
        done.wait_samples >= 1,
        "one message in 16 has its wait measured"
    );
    // A new period: the maximum starts again from the queue as it is now.
    assert_eq!(
        actor(&system.monitor().snapshot(), "/user/gated")
            .unwrap()
            .max_queued,
        0
    );
    system.shutdown().await.unwrap();
    assert!(
        system.monitor().snapshot().actors.is_empty(),
        "stopped actors leave the registry"
    );
}

#[tokio::test]
async fn only_actors_that_opt_in_are_monitored_unless_all_are() {
    let system = ActorSystem::new("opt-in");
    let gate = Arc::new(Semaphore::new(100));
    system
        .spawn(Props::new(Gated(gate.clone())).named("plain"))
        .unwrap();
    system
        .spawn(
            Props::new(Gated(gate.clone()))
                .named("watched")
                .monitored(true),
        )
        .unwrap();
    let snapshot = system.monitor().snapshot();
    assert!(snapshot.compiled_in);
    assert!(actor(&snapshot, "/user/plain").is_none());
    assert!(actor(&snapshot, "/user/watched").is_some());
    assert_eq!(snapshot.dispatchers[0].name.as_ref(), "default");
    system.shutdown().await.unwrap();

    let mut monitoring = MonitoringConfig::default();
    monitoring.all_actors = true;
    let config = SystemConfig::builder()
        .monitoring(monitoring)
        .build()
        .unwrap();
    let system = ActorSystem::with_config("all", config);
    system
        .spawn(Props::new(Gated(gate)).named("plain"))
        .unwrap();
    assert!(actor(&system.monitor().snapshot(), "/user/plain").is_some());
    system.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_time_and_blocking_are_measured() {
    let mut config = SystemConfig::default();
    config.monitoring.all_actors = true;
    let system = ActorSystem::with_config("busy", config);
    let gate = Arc::new(Semaphore::new(0));
    let gated = system
        .spawn(Props::new(Gated(gate.clone())).named("gated"))
        .unwrap();
    gated.tell(Work).unwrap();
    // The 30 ms count from when the handler has started (on a loaded machine the message can
    // wait in the mailbox for a while first, and that wait is not busy time).
    wait_for(&system, "/user/gated", |a| a.in_progress == 1).await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    gate.add_permits(1);
    wait_for(&system, "/user/gated", |a| a.completed == 1).await;
    let a = actor(&system.monitor().snapshot(), "/user/gated").unwrap();
    // Waiting for the permit counts as busy (handling the message) but not as holding a thread.
    assert!(a.busy >= Duration::from_millis(30), "{a:?}");
    assert!(a.on_thread < a.busy, "{a:?}");
    system.shutdown().await.unwrap();
}

#[tokio::test]
async fn tracing_spans_wrap_each_handled_message_only_when_asked() {
    for spans in [false, true] {
        // The test's runtime is current-thread: the actor runs on this thread, under this
        // subscriber.
        let (captured, _guard) = log::capture_with_spans();
        let mut config = SystemConfig::default();
        config.monitoring.tracing_spans = spans;
        let system = ActorSystem::with_config("spans", config);
        let gated = system
            .spawn(
                Props::new(Gated(Arc::new(Semaphore::new(2))))
                    .named("traced")
                    .monitored(true),
            )
            .unwrap();
        gated.ask(Work, T).await.unwrap();
        gated.ask(Work, T).await.unwrap();
        system.shutdown().await.unwrap();
        let text = captured.text();
        let opened = text
            .matches("rally.handle{actor=/user/traced message_type=\"monitoring_counters::Work\"}")
            .count();
        assert_eq!(opened, if spans { 2 } else { 0 }, "{text}");
    }
}
