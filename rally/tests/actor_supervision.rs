//! Supervision: panics and errors, directives, restart limits, backoff, all-for-one, escalate.

#[path = "support/actors.rs"]
mod actors;

use std::time::Duration;

use actors::{Fail, Incr, Log, Panic, Recorder, entries, log};
use rally::{
    Actor, ActorRef, ActorResult, ActorSystem, AskError, Backoff, Context, Directive, Handler,
    Message, Props, SupervisorStrategy, SystemConfig, Terminated,
};
use rally_test::Probe;
use rally_test::eventually;

const T: Duration = Duration::from_secs(5);

/// Spawns one child with a given strategy and hands out its ref.
struct Supervisor {
    strategy: SupervisorStrategy,
    log: Log,
    fresh_on_restart: bool,
    kids: usize,
}

impl Actor for Supervisor {
    fn supervisor_strategy(&self) -> SupervisorStrategy {
        self.strategy.clone()
    }
}

struct SpawnKids;
impl Message for SpawnKids {
    type Reply = Vec<ActorRef<Recorder>>;
}
impl Handler<SpawnKids> for Supervisor {
    async fn handle(
        &mut self,
        _: SpawnKids,
        ctx: &mut Context<Self>,
    ) -> ActorResult<Vec<ActorRef<Recorder>>> {
        let mut kids = Vec::new();
        for i in 0..self.kids {
            let name = format!("kid{i}");
            let props = if self.fresh_on_restart {
                let log = self.log.clone();
                let n = name.clone();
                Props::from_factory(move || Recorder::new(&n, &log))
            } else {
                Props::new(Recorder::new(&name, &self.log))
            };
            kids.push(ctx.spawn(props.named(name))?);
        }
        Ok(kids)
    }
}

async fn supervised(
    system: &ActorSystem,
    strategy: SupervisorStrategy,
    fresh: bool,
    kids: usize,
) -> (ActorRef<Supervisor>, Vec<ActorRef<Recorder>>, Log) {
    let log = log();
    let sup = system
        .spawn(Supervisor {
            strategy,
            log: log.clone(),
            fresh_on_restart: fresh,
            kids,
        })
        .unwrap();
    let kids = sup.ask(SpawnKids, T).await.unwrap();
    (sup, kids, log)
}

#[tokio::test]
async fn a_panic_restarts_with_a_fresh_instance_and_the_process_survives() {
    let system = ActorSystem::new("t");
    let (_sup, kids, log) = supervised(&system, SupervisorStrategy::one_for_one(), true, 1).await;
    let kid = &kids[0];
    assert_eq!(kid.ask(Incr, T).await, Ok(1));
    assert_eq!(kid.ask(Incr, T).await, Ok(2));
    // The asker of the panicking message learns that the handler failed.
    assert!(matches!(kid.ask(Panic, T).await, Err(AskError::Failed(_))));
    // Fresh instance from the factory: the count starts again.
    assert_eq!(kid.ask(Incr, T).await, Ok(1));
    let seen = entries(&log);
    assert!(
        seen.iter()
            .any(|e| e.starts_with("kid0 pre_restart: asked to panic")),
        "{seen:?}"
    );
    assert_eq!(
        seen.iter().filter(|e| *e == "kid0 started").count(),
        2,
        "{seen:?}"
    );
}

#[tokio::test]
async fn resume_keeps_the_state() {
    let system = ActorSystem::new("t");
    let strategy = SupervisorStrategy::one_for_one().with_decider(|_| Directive::Resume);
    let (_sup, kids, _log) = supervised(&system, strategy, true, 1).await;
    assert_eq!(kids[0].ask(Incr, T).await, Ok(1));
    assert!(
        matches!(kids[0].ask(Fail, T).await, Err(AskError::Failed(why)) if why == "asked to fail")
    );
    assert_eq!(kids[0].ask(Incr, T).await, Ok(2));
}

#[tokio::test]
async fn stop_directive_stops_the_child() {
    let system = ActorSystem::new("t");
    let (_sup, kids, _log) = supervised(&system, SupervisorStrategy::stop(), true, 1).await;
    let mut probe = Probe::<Terminated>::spawn(&system);
    probe.watch(&kids[0]);
    kids[0].tell(Fail).unwrap();
    probe.expect_msg(T).await.unwrap();
    assert_eq!(kids[0].ask(Incr, T).await, Err(AskError::Stopped));
}

#[tokio::test]
async fn more_restarts_than_allowed_stops_the_child() {
    let system = ActorSystem::new("t");
    let strategy = SupervisorStrategy::one_for_one().with_max_restarts(2, Duration::from_secs(60));
    let (_sup, kids, _log) = supervised(&system, strategy, true, 1).await;
    let mut probe = Probe::<Terminated>::spawn(&system);
    probe.watch(&kids[0]);
    for _ in 0..3 {
        kids[0].tell(Panic).unwrap();
    }
    probe.expect_msg(T).await.unwrap();
}

#[tokio::test]
async fn all_for_one_restarts_the_siblings() {
    let system = ActorSystem::new("t");
    let (_sup, kids, log) = supervised(&system, SupervisorStrategy::all_for_one(), true, 2).await;
    assert_eq!(kids[1].ask(Incr, T).await, Ok(1));
    kids[0].tell(Fail).unwrap();
    // kid1 was restarted too: fresh count. Poll until the restart has happened.
    eventually("kid1 is restarted", T, async || {
        let entries = entries(&log);
        if entries.iter().any(|e| e.starts_with("kid1 pre_restart")) {
            Ok(())
        } else {
            Err(entries)
        }
    })
    .await;
    assert_eq!(kids[1].ask(Incr, T).await, Ok(1));
}

#[tokio::test]
async fn escalate_fails_the_parent() {
    let system = ActorSystem::new("t");
    let strategy = SupervisorStrategy::one_for_one().with_decider(|_| Directive::Escalate);
    // The guardian restarts the parent (the system default), which stops its children.
    let (sup, kids, _log) = supervised(&system, strategy, true, 1).await;
    let mut probe = Probe::<Terminated>::spawn(&system);
    probe.watch(&kids[0]);
    kids[0].tell(Fail).unwrap();
    probe.expect_msg(T).await.unwrap();
    // The parent itself was restarted, not stopped: it still answers.
    assert_eq!(sup.ask(SpawnKids, T).await.map(|k| k.len()), Ok(1));
}

#[test]
fn backoff_delays_restarts_in_virtual_time() {
    rally_test::paused_runtime().block_on(async {
        let backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(8), 2.0);
        let config = SystemConfig::builder()
            .guardian_strategy(SupervisorStrategy::one_for_one().with_backoff(backoff))
            .build()
            .unwrap();
        let system = ActorSystem::with_config("t", config);
        let log = log();
        let kid = system
            .spawn(Props::from_factory({
                let log = log.clone();
                move || Recorder::new("top", &log)
            }))
            .unwrap();
        let start = tokio::time::Instant::now();
        kid.tell(Panic).unwrap();
        assert_eq!(kid.ask(Incr, T).await, Ok(1));
        let first = start.elapsed();
        assert!(
            first >= Duration::from_secs(1) && first < Duration::from_secs(2),
            "first restart after {first:?}"
        );
        kid.tell(Panic).unwrap();
        assert_eq!(kid.ask(Incr, T).await, Ok(1));
        let second = start.elapsed() - first;
        assert!(
            second >= Duration::from_secs(2) && second < Duration::from_secs(3),
            "second restart after {second:?}"
        );
    });
}

#[tokio::test]
async fn a_failing_started_hook_is_supervised_too() {
    struct BadStart;
    impl Actor for BadStart {
        async fn started(&mut self, _ctx: &mut Context<Self>) -> ActorResult<()> {
            Err("cannot start".into())
        }
    }
    let system = ActorSystem::new("t");
    let mut probe = Probe::<Terminated>::spawn(&system);
    // The default strategy restarts 10 times, then stops it: it must not loop forever.
    let actor = system.spawn(BadStart).unwrap();
    probe.watch(&actor);
    probe.expect_msg(T).await.unwrap();
    let _ = actor.id();
}
