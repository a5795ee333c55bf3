//! `Context::pipe` / `pipe_to`: a future's output comes back as a message, while the actor
//! goes on handling others.

use std::time::Duration;

use rally::{Actor, ActorResult, ActorSystem, Context, Handler, Message, Recipient};
use rally_test::Probe;
use tokio::sync::oneshot;

const T: Duration = Duration::from_secs(5);

/// Starts work that completes only when the test releases it.
struct Start(oneshot::Receiver<u32>);
impl Message for Start {
    type Reply = ();
}

struct Done(u32);
impl Message for Done {
    type Reply = ();
}

struct Count;
impl Message for Count {
    type Reply = u32;
}

#[derive(Debug, PartialEq)]
struct Output(u32);
impl Message for Output {
    type Reply = ();
}

struct Worker {
    report: Recipient<Output>,
    handled: u32,
}
impl Actor for Worker {}

impl Handler<Start> for Worker {
    async fn handle(&mut self, msg: Start, ctx: &mut Context<Self>) -> ActorResult<()> {
        ctx.pipe(async move { Done(msg.0.await.unwrap_or(0)) });
        Ok(())
    }
}

impl Handler<Done> for Worker {
    async fn handle(&mut self, msg: Done, _: &mut Context<Self>) -> ActorResult<()> {
        self.report.tell(Output(msg.0 * 2))?;
        Ok(())
    }
}

impl Handler<Count> for Worker {
    async fn handle(&mut self, _: Count, _: &mut Context<Self>) -> ActorResult<u32> {
        self.handled += 1;
        Ok(self.handled)
    }
}

#[tokio::test]
async fn a_piped_result_arrives_as_a_message_and_the_actor_is_free_meanwhile() {
    let system = ActorSystem::new("t");
    let mut probe = Probe::<Output>::spawn(&system);
    let worker = system
        .spawn(Worker {
            report: probe.actor().recipient(),
            handled: 0,
        })
        .unwrap();
    let (release, wait) = oneshot::channel();
    worker.tell(Start(wait)).unwrap();
    // The future is pending, yet the actor answers.
    assert_eq!(worker.ask(Count, T).await, Ok(1));
    assert_eq!(worker.ask(Count, T).await, Ok(2));
    release.send(21).unwrap();
    assert_eq!(probe.expect_msg(T).await.unwrap(), Output(42));
    system.shutdown().await.unwrap();
}

struct Sum(Vec<u32>, Recipient<Output>);
impl Message for Sum {
    type Reply = ();
}

struct Adder;
impl Actor for Adder {}
impl Handler<Sum> for Adder {
    async fn handle(&mut self, msg: Sum, ctx: &mut Context<Self>) -> ActorResult<()> {
        let Sum(numbers, to) = msg;
        ctx.pipe_to(async move { Output(numbers.iter().sum()) }, to);
        Ok(())
    }
}

#[tokio::test]
async fn pipe_to_sends_the_output_to_another_actor() {
    let system = ActorSystem::new("t");
    let mut probe = Probe::<Output>::spawn(&system);
    let adder = system.spawn(Adder).unwrap();
    adder
        .tell(Sum(vec![1, 2, 3], probe.actor().recipient()))
        .unwrap();
    assert_eq!(probe.expect_msg(T).await.unwrap(), Output(6));
    system.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_pending_pipe_is_aborted_when_the_actor_stops() {
    let system = ActorSystem::new("t");
    let probe = Probe::<Output>::spawn(&system);
    let worker = system
        .spawn(Worker {
            report: probe.actor().recipient(),
            handled: 0,
        })
        .unwrap();
    let (mut release, wait) = oneshot::channel::<u32>();
    worker.tell(Start(wait)).unwrap();
    assert_eq!(worker.ask(Count, T).await, Ok(1));
    worker.stop();
    worker.terminated().await;
    // The aborted future dropped its receiver: the sender sees it closed.
    tokio::time::timeout(T, release.closed()).await.unwrap();
    system.shutdown().await.unwrap();
}
