//! Bounded mailboxes and their overflow policies, the priority lane, dead letters.

#[path = "support/actors.rs"]
mod actors;

use std::time::Duration;

use actors::{Incr, Recorder, Sleep, log};
use rally::{
    Actor, ActorResult, ActorSystem, AskError, Context, DeadLetter, DeadLetterReason, Handler,
    MailboxConfig, Message, Overflow, Props, SendError, Terminated,
};
use rally_test::Probe;

const T: Duration = Duration::from_secs(5);

/// Spawns a recorder whose handler is kept busy, so its bounded mailbox fills.
async fn busy(
    system: &ActorSystem,
    overflow: Overflow,
    capacity: usize,
) -> rally::ActorRef<Recorder> {
    let log = log();
    let actor = system
        .spawn(
            Props::new(Recorder::new("b", &log))
                .with_mailbox(MailboxConfig::bounded(capacity, overflow)),
        )
        .unwrap();
    actor.tell(Sleep(Duration::from_millis(300))).unwrap();
    // Once the actor has taken the sleep message off the queue it is inside the handler for
    // 300 ms: everything sent from now on queues.
    while actor.mailbox_len() != Some(0) {
        tokio::task::yield_now().await;
    }
    actor
}

#[tokio::test]
async fn drop_newest_sends_overflow_to_dead_letters() {
    let system = ActorSystem::new("t");
    let mut dead = Probe::<DeadLetter>::spawn(&system);
    system
        .event_stream()
        .subscribe(dead.actor().recipient::<DeadLetter>());
    let actor = busy(&system, Overflow::DropNewest, 2).await;
    for _ in 0..3 {
        actor.tell(Incr).unwrap();
    }
    let letter = dead.expect_msg(T).await.unwrap();
    assert_eq!(letter.reason, DeadLetterReason::MailboxFull);
    assert!(letter.message_type.ends_with("Incr"));
    assert_eq!(system.dead_letters().count(), 1);
    assert_eq!(actor.mailbox_len(), Some(2));
    // An ask that overflows is told so.
    assert_eq!(actor.ask(Incr, T).await, Err(AskError::Full));
}

#[tokio::test]
async fn fail_hands_the_message_back() {
    let system = ActorSystem::new("t");
    let actor = busy(&system, Overflow::Fail, 1).await;
    actor.tell(Incr).unwrap();
    assert!(matches!(actor.tell(Incr), Err(SendError::Full(Incr))));
    assert_eq!(system.dead_letters().count(), 0);
}

#[tokio::test]
async fn backpressure_makes_the_async_sender_wait() {
    let system = ActorSystem::new("t");
    let actor = busy(&system, Overflow::Backpressure, 1).await;
    actor.tell(Incr).unwrap();
    assert!(
        matches!(actor.tell(Incr), Err(SendError::Full(_))),
        "tell never blocks"
    );
    let start = tokio::time::Instant::now();
    actor.send(Incr).await.unwrap();
    assert!(
        start.elapsed() >= Duration::from_millis(100),
        "send waited for room"
    );
    assert_eq!(actor.ask(Incr, T).await, Ok(3));
}

/// Counts the user messages it handled before being stopped.
struct Slow {
    handled: u64,
    report: rally::Recipient<Handled>,
}
struct Work;
impl Message for Work {
    type Reply = ();
}
#[derive(Debug)]
struct Handled(u64);
impl Message for Handled {
    type Reply = ();
}
impl Actor for Slow {
    async fn stopped(&mut self, _ctx: &mut Context<Self>) {
        self.report.tell(Handled(self.handled)).ok();
    }
}
impl Handler<Work> for Slow {
    async fn handle(&mut self, _: Work, _ctx: &mut Context<Self>) -> ActorResult<()> {
        self.handled += 1;
        tokio::time::sleep(Duration::from_micros(50)).await;
        Ok(())
    }
}

#[tokio::test]
async fn stop_overtakes_a_long_user_queue() {
    let system = ActorSystem::new("t");
    let mut report = Probe::<Handled>::spawn(&system);
    let mut watcher = Probe::<Terminated>::spawn(&system);
    let actor = system
        .spawn(Slow {
            handled: 0,
            report: report.actor().recipient(),
        })
        .unwrap();
    watcher.watch(&actor);
    const QUEUED: u64 = 100_000;
    for _ in 0..QUEUED {
        actor.tell(Work).unwrap();
    }
    actor.stop();
    watcher.expect_msg(T).await.unwrap();
    let Handled(done) = report.expect_msg(T).await.unwrap();
    assert!(done < 1_000, "stop waited behind {done} user messages");
    // Every message not handled went to dead letters; none was lost.
    assert_eq!(system.dead_letters().count(), QUEUED - done);
}
