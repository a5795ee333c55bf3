//! Lifecycle: hooks, stopping from inside and outside, children stop before parents.

#[path = "support/actors.rs"]
mod actors;

use std::time::Duration;

use actors::{Incr, Log, Recorder, entries, log};
use rally::{
    Actor, ActorRef, ActorResult, ActorSystem, Context, Handler, Message, Props, SendError,
    Terminated,
};
use rally_test::Probe;

const T: Duration = Duration::from_secs(5);

#[tokio::test]
async fn hooks_run_in_order_and_stop_from_outside_is_final() {
    let system = ActorSystem::new("t");
    let log = log();
    let mut probe = Probe::<Terminated>::spawn(&system);
    let actor = system.spawn(Recorder::new("a", &log)).unwrap();
    probe.watch(&actor);
    assert_eq!(actor.ask(Incr, T).await, Ok(1));
    actor.stop();
    let terminated = probe.expect_msg(T).await.unwrap();
    assert_eq!(terminated.id, actor.id());
    assert_eq!(entries(&log), ["a started", "a stopped"]);
    assert!(actor.is_stopped());
    match actor.tell(Incr) {
        Err(SendError::Stopped(Incr)) => {}
        other => panic!("expected Stopped with the message back, got {other:?}"),
    }
    assert!(
        system.dead_letters().count() >= 1,
        "a tell to a stopped actor is a dead letter"
    );
}

struct SelfStopper;
impl Actor for SelfStopper {}
struct StopNow;
impl Message for StopNow {
    type Reply = &'static str;
}
impl Handler<StopNow> for SelfStopper {
    async fn handle(&mut self, _: StopNow, ctx: &mut Context<Self>) -> ActorResult<&'static str> {
        ctx.stop();
        Ok("stopping")
    }
}

#[tokio::test]
async fn an_actor_stops_itself_after_the_current_message() {
    let system = ActorSystem::new("t");
    let mut probe = Probe::<Terminated>::spawn(&system);
    let actor = system.spawn(SelfStopper).unwrap();
    probe.watch(&actor);
    assert_eq!(actor.ask(StopNow, T).await, Ok("stopping"));
    probe.expect_msg(T).await.unwrap();
    assert_eq!(actor.ask(StopNow, T).await, Err(rally::AskError::Stopped));
}

/// A parent that spawns two children when started.
struct Parent {
    log: Log,
    children: Vec<ActorRef<Recorder>>,
}

impl Actor for Parent {
    async fn started(&mut self, ctx: &mut Context<Self>) -> ActorResult<()> {
        for name in ["child1", "child2"] {
            let child = ctx.spawn(Props::new(Recorder::new(name, &self.log)).named(name))?;
            self.children.push(child);
        }
        Ok(())
    }

    async fn stopped(&mut self, _ctx: &mut Context<Self>) {
        self.log.lock().push("parent stopped".into());
    }
}

struct Children;
impl Message for Children {
    type Reply = Vec<ActorRef<Recorder>>;
}
impl Handler<Children> for Parent {
    async fn handle(
        &mut self,
        _: Children,
        _ctx: &mut Context<Self>,
    ) -> ActorResult<Vec<ActorRef<Recorder>>> {
        Ok(self.children.clone())
    }
}

#[tokio::test]
async fn stopping_a_parent_stops_its_children_first() {
    let system = ActorSystem::new("t");
    let log = log();
    let mut probe = Probe::<Terminated>::spawn(&system);
    let parent = system
        .spawn(
            Props::new(Parent {
                log: log.clone(),
                children: vec![],
            })
            .named("parent"),
        )
        .unwrap();
    let children = parent.ask(Children, T).await.unwrap();
    assert_eq!(&**children[0].path(), "/user/parent/child1");
    assert_eq!(
        system.lookup::<Recorder>("/user/parent/child2").unwrap(),
        children[1]
    );
    probe.watch(&parent);
    parent.stop();
    probe.expect_msg(T).await.unwrap();
    let order = entries(&log);
    let parent_at = order.iter().position(|e| e == "parent stopped").unwrap();
    for child in ["child1 stopped", "child2 stopped"] {
        let at = order
            .iter()
            .position(|e| e == child)
            .unwrap_or_else(|| panic!("{child} missing in {order:?}"));
        assert!(
            at < parent_at,
            "{child} must stop before the parent: {order:?}"
        );
    }
    assert!(children.iter().all(ActorRef::is_stopped));
    assert!(matches!(
        system.lookup::<Recorder>("/user/parent/child1"),
        Err(rally::LookupError::NotFound(_))
    ));
}

#[tokio::test]
async fn names_are_unique_and_valid() {
    let system = ActorSystem::new("t");
    let log = log();
    system
        .spawn(Props::new(Recorder::new("a", &log)).named("same"))
        .unwrap();
    let again = system.spawn(Props::new(Recorder::new("b", &log)).named("same"));
    assert_eq!(
        again.unwrap_err(),
        rally::SpawnError::NameTaken("/user/same".into())
    );
    let bad = system.spawn(Props::new(Recorder::new("c", &log)).named("a/b"));
    assert_eq!(
        bad.unwrap_err(),
        rally::SpawnError::InvalidName("a/b".into())
    );
    assert!(matches!(
        system.lookup::<SelfStopper>("/user/same"),
        Err(rally::LookupError::WrongType { .. })
    ));
}
