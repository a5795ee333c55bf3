//! `Context::reply_later`: a handler answers an `ask` after other messages.

use std::time::Duration;

use rally::{Actor, ActorResult, ActorSystem, AskError, Context, Handler, Message, ReplyTo};

const T: Duration = Duration::from_secs(5);

#[derive(Default)]
struct Gate {
    waiting: Vec<ReplyTo<u32>>,
    opened: u32,
}
impl Actor for Gate {}

struct Wait;
impl Message for Wait {
    type Reply = u32;
}

struct Open;
impl Message for Open {
    type Reply = usize;
}

/// Defers without taking the reply: a mistake the asker hears about.
struct Broken;
impl Message for Broken {
    type Reply = u32;
}

impl Handler<Wait> for Gate {
    async fn handle(&mut self, _: Wait, ctx: &mut Context<Self>) -> ActorResult<u32> {
        let reply = ctx.reply_later::<u32>().expect("inside a handler");
        self.waiting.push(reply);
        ctx.deferred()
    }
}

impl Handler<Open> for Gate {
    async fn handle(&mut self, _: Open, ctx: &mut Context<Self>) -> ActorResult<usize> {
        // The wrong reply type gives nothing and leaves the reply where it is.
        assert!(ctx.reply_later::<u32>().is_none());
        self.opened += 1;
        let n = self.waiting.len();
        for reply in self.waiting.drain(..) {
            reply.send(Ok(self.opened));
        }
        Ok(n)
    }
}

impl Handler<Broken> for Gate {
    async fn handle(&mut self, _: Broken, ctx: &mut Context<Self>) -> ActorResult<u32> {
        ctx.deferred()
    }
}

#[tokio::test]
async fn asks_answered_later_get_the_reply_sent_through_the_taken_handle() {
    let system = ActorSystem::new("t");
    let gate = system.spawn(Gate::default()).unwrap();
    let first = tokio::spawn({
        let gate = gate.clone();
        async move { gate.ask(Wait, T).await }
    });
    let second = tokio::spawn({
        let gate = gate.clone();
        async move { gate.ask(Wait, T).await }
    });
    // Wait until both asks are parked in the gate (it answers Open with how many wait).
    let mut opened_for = 0;
    while opened_for < 2 {
        opened_for += gate.ask(Open, T).await.unwrap();
    }
    // Each ask got the number of the Open that released it, not a value from its handler.
    let a = first.await.unwrap().unwrap();
    let b = second.await.unwrap().unwrap();
    assert!(a >= 1 && b >= 1, "{a} {b}");
    system.shutdown().await.unwrap();
}

#[tokio::test]
async fn deferring_without_taking_the_reply_fails_the_ask() {
    let system = ActorSystem::new("t");
    let gate = system.spawn(Gate::default()).unwrap();
    let error = gate.ask(Broken, T).await.unwrap_err();
    assert!(
        matches!(&error, AskError::Failed(why) if why.contains("reply_later")),
        "{error:?}"
    );
    system.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_dropped_handle_tells_the_asker_instead_of_leaving_it_waiting() {
    struct Forgetful;
    impl Actor for Forgetful {}
    impl Handler<Wait> for Forgetful {
        async fn handle(&mut self, _: Wait, ctx: &mut Context<Self>) -> ActorResult<u32> {
            drop(ctx.reply_later::<u32>());
            ctx.deferred()
        }
    }
    let system = ActorSystem::new("t");
    let actor = system.spawn(Forgetful).unwrap();
    // The ask ends at once (not after its timeout) with an error.
    let error = actor.ask(Wait, Duration::from_secs(60)).await.unwrap_err();
    assert!(matches!(error, AskError::Failed(_)), "{error:?}");
    system.shutdown().await.unwrap();
}
