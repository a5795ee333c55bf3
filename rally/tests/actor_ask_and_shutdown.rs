//! Ask errors, stash, the event stream, and system shutdown.

#[path = "support/actors.rs"]
mod actors;

use std::time::Duration;

use actors::{Fail, Incr, Panic, Recorder, Sleep, entries, log};
use rally::{
    Actor, ActorResult, ActorSystem, AskError, Context, Handler, Message, Props, SpawnError,
    SystemConfig,
};

const T: Duration = Duration::from_secs(5);

#[tokio::test]
async fn ask_errors_are_typed() {
    let system = ActorSystem::new("t");
    let log = log();
    let actor = system.spawn(Recorder::new("a", &log)).unwrap();
    assert_eq!(
        actor.ask(Incr, Duration::ZERO).await,
        Err(AskError::InvalidTimeout)
    );
    assert_eq!(
        actor.ask(Incr, T).await,
        Ok(1),
        "the zero-timeout ask sent nothing"
    );
    actor.tell(Sleep(Duration::from_millis(200))).unwrap();
    assert_eq!(
        actor.ask(Incr, Duration::from_millis(20)).await,
        Err(AskError::Timeout(Duration::from_millis(20)))
    );
    assert_eq!(
        actor.ask(Fail, T).await,
        Err(AskError::Failed("asked to fail".into()))
    );
    assert!(matches!(
        actor.ask(Panic, T).await,
        Err(AskError::Failed(_))
    ));
    actor.tell(Sleep(Duration::from_millis(100))).unwrap();
    let pending = actor.ask(Incr, T);
    actor.stop();
    // Stop overtakes the queued ask, which is answered with Stopped, not left hanging.
    assert_eq!(pending.await, Err(AskError::Stopped));
    let late = actor.ask(Incr, T).await;
    assert_eq!(late, Err(AskError::Stopped));
    // The words fit an ask sent after the stop too, not only one the stop overtook.
    assert_eq!(
        late.unwrap_err().to_string(),
        "the actor stopped, before or while this ask waited, and did not reply"
    );
}

/// Stashes `Get` until `Open` arrives.
#[derive(Default)]
struct Gate {
    open: bool,
}
impl Actor for Gate {}
struct Get(u32);
impl Message for Get {
    type Reply = u32;
}
struct Open;
impl Message for Open {
    type Reply = ();
}
impl Handler<Get> for Gate {
    async fn handle(&mut self, msg: Get, ctx: &mut Context<Self>) -> ActorResult<u32> {
        if !self.open {
            ctx.stash(msg);
            return Ok(0);
        }
        Ok(msg.0)
    }
}
impl Handler<Open> for Gate {
    async fn handle(&mut self, _: Open, ctx: &mut Context<Self>) -> ActorResult<()> {
        self.open = true;
        ctx.unstash_all();
        Ok(())
    }
}

#[tokio::test]
async fn stashed_asks_are_answered_after_unstash_in_order() {
    let system = ActorSystem::new("t");
    let gate = system.spawn(Gate::default()).unwrap();
    let mut first = Box::pin(gate.ask(Get(1), T));
    let mut second = Box::pin(gate.ask(Get(2), T));
    // An ask enqueues its message on its first poll: poll each once, in order, so both are in
    // the gate's mailbox, in that order, before it opens (no sleep needed).
    std::future::poll_fn(|cx| {
        assert!(first.as_mut().poll(cx).is_pending());
        assert!(second.as_mut().poll(cx).is_pending());
        std::task::Poll::Ready(())
    })
    .await;
    gate.tell(Open).unwrap();
    assert_eq!(first.await, Ok(1));
    assert_eq!(second.await, Ok(2));
}

#[tokio::test]
async fn shutdown_stops_everything_and_refuses_new_actors() {
    let system = ActorSystem::new("t");
    let log = log();
    let first = system
        .spawn(Props::new(Recorder::new("first", &log)))
        .unwrap();
    let second = system
        .spawn(Props::new(Recorder::new("second", &log)))
        .unwrap();
    // A message in flight when shutdown begins is finished; queued ones become dead letters.
    second.tell(Sleep(Duration::from_millis(50))).unwrap();
    for _ in 0..10 {
        second.tell(Incr).unwrap();
    }
    tokio::task::yield_now().await;
    system.shutdown().await.unwrap();
    assert!(first.is_stopped() && second.is_stopped());
    let seen = entries(&log);
    assert!(
        seen.contains(&"first stopped".to_owned()) && seen.contains(&"second stopped".to_owned()),
        "{seen:?}"
    );
    assert!(system.dead_letters().count() >= 1);
    assert_eq!(
        system.spawn(Recorder::new("late", &log)).unwrap_err(),
        SpawnError::ShuttingDown
    );
}

#[tokio::test]
async fn shutdown_gives_up_on_a_stuck_actor_after_the_timeout() {
    let config = SystemConfig::builder()
        .shutdown_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    let system = ActorSystem::with_config("t", config);
    let log = log();
    let stuck = system.spawn(Recorder::new("stuck", &log)).unwrap();
    stuck.tell(Sleep(Duration::from_secs(60))).unwrap();
    tokio::task::yield_now().await;
    let result = system.shutdown().await;
    assert_eq!(
        result,
        Err(rally::ShutdownError::TimedOut {
            remaining: 1,
            timeout: Duration::from_millis(100)
        })
    );
}

#[test]
fn dropping_a_system_without_shutdown_does_not_hang() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let log = log();
    runtime.block_on(async {
        let system = ActorSystem::new("t");
        let actor = system.spawn(Recorder::new("a", &log)).unwrap();
        actor.tell(Sleep(Duration::from_secs(3600))).unwrap();
        drop(system);
    });
    let started = std::time::Instant::now();
    runtime.shutdown_timeout(Duration::from_secs(5));
    assert!(started.elapsed() < Duration::from_secs(5));
}
