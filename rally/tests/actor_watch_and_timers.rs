//! Death watch and timers (timers under paused, virtual time).

#[path = "support/actors.rs"]
mod actors;

use std::time::Duration;

use actors::{Recorder, log};
use rally::{Actor, ActorResult, ActorSystem, Context, Handler, Message, Terminated, TimerId};
use rally_test::{Probe, paused_runtime};

const T: Duration = Duration::from_secs(5);

#[tokio::test]
async fn watch_delivers_terminated_exactly_once() {
    let system = ActorSystem::new("t");
    let log = log();
    let mut probe = Probe::<Terminated>::spawn(&system);
    let actor = system.spawn(Recorder::new("a", &log)).unwrap();
    probe.watch(&actor);
    probe.watch(&actor); // watching twice still means one notification
    actor.stop();
    assert_eq!(probe.expect_msg(T).await.unwrap().id, actor.id());
    probe
        .expect_no_msg(Duration::from_millis(100))
        .await
        .unwrap();
}

#[tokio::test]
async fn watching_a_dead_actor_delivers_terminated_at_once() {
    let system = ActorSystem::new("t");
    let log = log();
    let mut first = Probe::<Terminated>::spawn(&system);
    let actor = system.spawn(Recorder::new("a", &log)).unwrap();
    first.watch(&actor);
    actor.stop();
    first.expect_msg(T).await.unwrap();
    let mut late = Probe::<Terminated>::spawn(&system);
    late.watch(&actor);
    assert_eq!(late.expect_msg(T).await.unwrap().path, actor.path().clone());
}

/// Forwards ticks to a probe; can start and cancel timers.
struct Ticker {
    out: rally::Recipient<Tick>,
    interval: Option<TimerId>,
}
impl Actor for Ticker {}

#[derive(Debug, Clone, PartialEq)]
struct Tick(&'static str);
impl Message for Tick {
    type Reply = ();
}
impl Handler<Tick> for Ticker {
    async fn handle(&mut self, tick: Tick, _ctx: &mut Context<Self>) -> ActorResult<()> {
        self.out.tell(tick).ok();
        Ok(())
    }
}

enum Timers {
    After(Duration),
    Every(Duration),
    CancelEvery,
}
impl Message for Timers {
    type Reply = ();
}
impl Handler<Timers> for Ticker {
    async fn handle(&mut self, cmd: Timers, ctx: &mut Context<Self>) -> ActorResult<()> {
        match cmd {
            Timers::After(d) => {
                ctx.send_after(d, Tick("once"));
            }
            Timers::Every(d) => self.interval = Some(ctx.send_interval(d, Tick("every"))),
            Timers::CancelEvery => {
                if let Some(id) = self.interval.take() {
                    ctx.cancel_timer(id);
                }
            }
        }
        Ok(())
    }
}

#[test]
fn send_after_fires_once_at_the_right_virtual_time() {
    paused_runtime().block_on(async {
        let system = ActorSystem::new("t");
        let mut probe = Probe::<Tick>::spawn(&system);
        let ticker = system
            .spawn(Ticker {
                out: probe.actor().recipient(),
                interval: None,
            })
            .unwrap();
        let start = tokio::time::Instant::now();
        ticker
            .ask(Timers::After(Duration::from_secs(30)), T)
            .await
            .unwrap();
        assert_eq!(
            probe.expect_msg(Duration::from_secs(60)).await.unwrap(),
            Tick("once")
        );
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_secs(30) && waited < Duration::from_secs(31),
            "{waited:?}"
        );
        probe.expect_no_msg(Duration::from_secs(120)).await.unwrap();
    });
}

#[test]
fn intervals_repeat_until_cancelled() {
    paused_runtime().block_on(async {
        let system = ActorSystem::new("t");
        let mut probe = Probe::<Tick>::spawn(&system);
        let ticker = system
            .spawn(Ticker {
                out: probe.actor().recipient(),
                interval: None,
            })
            .unwrap();
        ticker
            .ask(Timers::Every(Duration::from_secs(1)), T)
            .await
            .unwrap();
        for _ in 0..3 {
            assert_eq!(
                probe.expect_msg(Duration::from_millis(1500)).await.unwrap(),
                Tick("every")
            );
        }
        ticker.ask(Timers::CancelEvery, T).await.unwrap();
        // At most one tick already in flight may still arrive; then nothing.
        let _ = probe.expect_msg(Duration::from_millis(10)).await;
        probe.expect_no_msg(Duration::from_secs(10)).await.unwrap();
    });
}

#[test]
fn timers_die_with_their_actor() {
    paused_runtime().block_on(async {
        let system = ActorSystem::new("t");
        let mut probe = Probe::<Tick>::spawn(&system);
        let ticker = system
            .spawn(Ticker {
                out: probe.actor().recipient(),
                interval: None,
            })
            .unwrap();
        ticker
            .ask(Timers::Every(Duration::from_secs(1)), T)
            .await
            .unwrap();
        ticker
            .ask(Timers::After(Duration::from_secs(5)), T)
            .await
            .unwrap();
        assert_eq!(
            probe.expect_msg(Duration::from_millis(1500)).await.unwrap(),
            Tick("every")
        );
        ticker.stop();
        tokio::time::sleep(Duration::from_millis(10)).await;
        probe.expect_no_msg(Duration::from_secs(30)).await.unwrap();
    });
}
