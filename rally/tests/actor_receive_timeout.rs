//! The receive timeout: a message to an actor that has been idle for a set time.

use std::time::Duration;

use rally::{Actor, ActorResult, ActorSystem, Context, Handler, Message, Recipient};
use rally_test::{Probe, paused_runtime};

#[derive(Clone)]
struct Idle;
impl Message for Idle {
    type Reply = ();
}

struct Poke;
impl Message for Poke {
    type Reply = ();
}

struct Stop;
impl Message for Stop {
    type Reply = ();
}

#[derive(Debug, PartialEq)]
struct Seen(Duration);
impl Message for Seen {
    type Reply = ();
}

struct Sleepy {
    report: Recipient<Seen>,
    since: tokio::time::Instant,
}

impl Actor for Sleepy {
    async fn started(&mut self, ctx: &mut Context<Self>) -> ActorResult<()> {
        ctx.set_receive_timeout(Duration::from_secs(10), Idle);
        self.since = tokio::time::Instant::now();
        Ok(())
    }
}

impl Handler<Idle> for Sleepy {
    async fn handle(&mut self, _: Idle, _: &mut Context<Self>) -> ActorResult<()> {
        self.report.tell(Seen(self.since.elapsed()))?;
        self.since = tokio::time::Instant::now();
        Ok(())
    }
}

impl Handler<Poke> for Sleepy {
    async fn handle(&mut self, _: Poke, _: &mut Context<Self>) -> ActorResult<()> {
        self.since = tokio::time::Instant::now();
        Ok(())
    }
}

impl Handler<Stop> for Sleepy {
    async fn handle(&mut self, _: Stop, ctx: &mut Context<Self>) -> ActorResult<()> {
        ctx.cancel_receive_timeout();
        Ok(())
    }
}

#[test]
fn an_idle_actor_is_told_after_each_idle_period_and_a_message_restarts_the_clock() {
    paused_runtime().block_on(async {
        let system = ActorSystem::new("t");
        let mut probe = Probe::<Seen>::spawn(&system);
        let actor = system
            .spawn(Sleepy {
                report: probe.actor().recipient(),
                since: tokio::time::Instant::now(),
            })
            .unwrap();
        // Twice in a row while nothing arrives, each after 10 s of (virtual) silence.
        for _ in 0..2 {
            let Seen(idle) = probe.expect_msg(Duration::from_secs(11)).await.unwrap();
            assert_eq!(idle.as_secs(), 10);
        }
        // A message 5 s into a period restarts the clock: the next Idle is 10 s after it.
        tokio::time::sleep(Duration::from_secs(5)).await;
        actor.tell(Poke).unwrap();
        let Seen(idle) = probe.expect_msg(Duration::from_secs(11)).await.unwrap();
        assert_eq!(idle.as_secs(), 10);
        // Cancelled: nothing more.
        actor.tell(Stop).unwrap();
        probe.expect_no_msg(Duration::from_secs(60)).await.unwrap();
        system.shutdown().await.unwrap();
    });
}
