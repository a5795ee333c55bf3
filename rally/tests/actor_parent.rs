//! `Context::parent`: a child reaches its parent by a typed ref.

use std::time::Duration;

use rally::{Actor, ActorResult, ActorSystem, Context, Handler, Message, Recipient};
use rally_test::Probe;

const T: Duration = Duration::from_secs(5);

#[derive(Debug, PartialEq)]
struct Seen(String);
impl Message for Seen {
    type Reply = ();
}

struct Hello(String);
impl Message for Hello {
    type Reply = ();
}

struct Boss {
    report: Recipient<Seen>,
}
impl Actor for Boss {
    async fn started(&mut self, ctx: &mut Context<Self>) -> ActorResult<()> {
        ctx.spawn(rally::Props::new(Worker).named("worker"))?;
        Ok(())
    }
}
impl Handler<Hello> for Boss {
    async fn handle(&mut self, msg: Hello, _: &mut Context<Self>) -> ActorResult<()> {
        self.report.tell(Seen(msg.0))?;
        Ok(())
    }
}

struct Worker;
impl Actor for Worker {
    async fn started(&mut self, ctx: &mut Context<Self>) -> ActorResult<()> {
        // Of another type: nothing.
        assert!(ctx.parent::<Worker>().is_none());
        let boss = ctx.parent::<Boss>().expect("spawned by a Boss");
        boss.tell(Hello(format!(
            "{} from {}",
            ctx.parent_path(),
            ctx.myself().path()
        )))?;
        Ok(())
    }
}

/// A top-level actor: its parent is the system.
struct Orphan {
    report: Recipient<Seen>,
}
impl Actor for Orphan {
    async fn started(&mut self, ctx: &mut Context<Self>) -> ActorResult<()> {
        let parent = ctx.parent::<Boss>().map(|_| "an actor").unwrap_or("none");
        self.report
            .tell(Seen(format!("{parent} at {}", ctx.parent_path())))?;
        Ok(())
    }
}

#[tokio::test]
async fn a_child_sends_to_its_parent_through_a_typed_ref() {
    let system = ActorSystem::new("t");
    let mut probe = Probe::<Seen>::spawn(&system);
    system
        .spawn(
            rally::Props::new(Boss {
                report: probe.actor().recipient(),
            })
            .named("boss"),
        )
        .unwrap();
    assert_eq!(
        probe.expect_msg(T).await.unwrap(),
        Seen("/user/boss from /user/boss/worker".into())
    );
    system.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_top_level_actor_has_no_parent_actor() {
    let system = ActorSystem::new("t");
    let mut probe = Probe::<Seen>::spawn(&system);
    system
        .spawn(Orphan {
            report: probe.actor().recipient(),
        })
        .unwrap();
    assert_eq!(
        probe.expect_msg(T).await.unwrap(),
        Seen("none at /user".into())
    );
    system.shutdown().await.unwrap();
}
