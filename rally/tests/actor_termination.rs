//! Awaiting an actor's end from plain async code (no helper actor), with the reason.

use std::time::Duration;

use rally::{
    Actor, ActorResult, ActorSystem, Context, Handler, Message, SupervisorStrategy,
    TerminationReason,
};

const T: Duration = Duration::from_secs(5);

struct Worker;
impl Actor for Worker {}

struct Fail;
impl Message for Fail {
    type Reply = ();
}
struct Quit;
impl Message for Quit {
    type Reply = ();
}

impl Handler<Fail> for Worker {
    async fn handle(&mut self, _: Fail, _: &mut Context<Self>) -> ActorResult<()> {
        Err("out of coffee".into())
    }
}
impl Handler<Quit> for Worker {
    async fn handle(&mut self, _: Quit, ctx: &mut Context<Self>) -> ActorResult<()> {
        ctx.stop();
        Ok(())
    }
}

fn stopping_system() -> ActorSystem {
    let config = rally::SystemConfig::builder()
        .guardian_strategy(SupervisorStrategy::stop())
        .build()
        .unwrap();
    ActorSystem::with_config("t", config)
}

#[tokio::test]
async fn stop_from_outside_and_from_within_both_read_stopped() {
    let system = ActorSystem::new("t");
    let a = system.spawn(Worker).unwrap();
    let b = system.spawn(Worker).unwrap();
    let (end_a, end_b) = (a.terminated(), b.terminated());
    a.stop();
    b.tell(Quit).unwrap();
    assert_eq!(
        tokio::time::timeout(T, end_a).await.unwrap(),
        TerminationReason::Stopped
    );
    assert_eq!(
        tokio::time::timeout(T, end_b).await.unwrap(),
        TerminationReason::Stopped
    );
    system.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_failure_its_supervisor_stops_it_for_reads_failed_with_the_error() {
    let system = stopping_system();
    let worker = system.spawn(Worker).unwrap();
    let end = worker.terminated();
    worker.tell(Fail).unwrap();
    let reason = tokio::time::timeout(T, end).await.unwrap();
    assert_eq!(reason, TerminationReason::Failed("out of coffee".into()));
    system.shutdown().await.unwrap();
}

#[tokio::test]
async fn awaiting_an_actor_that_already_stopped_resolves_at_once_with_its_reason() {
    let system = stopping_system();
    let worker = system.spawn(Worker).unwrap();
    worker.tell(Fail).unwrap();
    tokio::time::timeout(T, worker.terminated()).await.unwrap();
    // Later, from another task: still told, with the same reason.
    let late = tokio::spawn({
        let worker = worker.clone();
        async move { worker.terminated().await }
    });
    let reason = tokio::time::timeout(T, late).await.unwrap().unwrap();
    assert_eq!(reason, TerminationReason::Failed("out of coffee".into()));
    system.shutdown().await.unwrap();
}

#[tokio::test]
async fn several_tasks_watch_one_actor_and_a_dropped_watch_is_removed() {
    let system = ActorSystem::new("t");
    let worker = system.spawn(Worker).unwrap();
    // A watch given up before the end does not linger or block the others.
    drop(worker.terminated());
    let watchers: Vec<_> = (0..3).map(|_| tokio::spawn(worker.terminated())).collect();
    system.shutdown().await.unwrap();
    for watcher in watchers {
        let reason = tokio::time::timeout(T, watcher).await.unwrap().unwrap();
        assert_eq!(reason, TerminationReason::Stopped);
    }
}

#[tokio::test]
async fn select_on_an_actors_end_alongside_other_work() {
    let system = ActorSystem::new("t");
    let worker = system.spawn(Worker).unwrap();
    let end = worker.terminated();
    tokio::pin!(end);
    // Not ended yet: the other branch wins.
    tokio::select! {
        biased;
        _ = &mut end => panic!("the worker is still running"),
        () = std::future::ready(()) => {}
    }
    worker.stop();
    assert_eq!(
        tokio::time::timeout(T, end).await.unwrap(),
        TerminationReason::Stopped
    );
    system.shutdown().await.unwrap();
}

/// Watches one actor and hands over the `Terminated` it receives.
struct Watcher {
    target: rally::ActorRef<Worker>,
    told: Option<tokio::sync::oneshot::Sender<rally::Terminated>>,
}
impl Actor for Watcher {
    async fn started(&mut self, ctx: &mut Context<Self>) -> ActorResult<()> {
        ctx.watch(&self.target);
        Ok(())
    }
}
impl Handler<rally::Terminated> for Watcher {
    async fn handle(&mut self, t: rally::Terminated, _: &mut Context<Self>) -> ActorResult<()> {
        if let Some(told) = self.told.take() {
            let _ = told.send(t);
        }
        Ok(())
    }
}

/// The `Terminated` a watching actor receives carries the same reason as `terminated()`:
/// failed with the error, or stopped. (A watch that arrives after the stop is answered at once,
/// with the reason, so the order of start and failure does not matter.)
#[tokio::test]
async fn a_watching_actor_reads_the_reason_in_terminated() {
    let system = stopping_system();
    for fail in [true, false] {
        let worker = system.spawn(Worker).unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel();
        system
            .spawn(Watcher {
                target: worker.clone(),
                told: Some(tx),
            })
            .unwrap();
        let expected = if fail {
            worker.tell(Fail).unwrap();
            TerminationReason::Failed("out of coffee".into())
        } else {
            worker.tell(Quit).unwrap();
            TerminationReason::Stopped
        };
        let terminated = tokio::time::timeout(T, rx).await.unwrap().unwrap();
        assert_eq!(terminated.id, worker.id());
        assert_eq!(terminated.reason, expected);
        assert_eq!(
            tokio::time::timeout(T, worker.terminated()).await.unwrap(),
            expected
        );
    }
    system.shutdown().await.unwrap();
}
