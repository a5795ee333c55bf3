//! Dispatcher kinds and scheduling settings, tested deterministically: the calling-thread
//! dispatcher runs actors only when the test drives it, in the order they became runnable.

use std::sync::Arc;
use std::time::Duration;

use rally::sync::Mutex;
use rally::{
    Actor, ActorResult, ActorSystem, Context, Dispatcher, DispatcherConfig, DispatcherKind,
    Handler, Message, Props, SystemConfig,
};
use rally_test::eventually;

const T: Duration = Duration::from_secs(5);

type Trace = Arc<Mutex<Vec<String>>>;

/// Records `<name><n>` for every message; optionally blocks its thread while handling.
struct Tracer {
    name: &'static str,
    trace: Trace,
    block: Duration,
}

impl Actor for Tracer {}

struct Step(u32);
impl Message for Step {
    type Reply = ();
}

impl Handler<Step> for Tracer {
    async fn handle(&mut self, step: Step, _: &mut Context<Self>) -> ActorResult<()> {
        if !self.block.is_zero() {
            std::thread::sleep(self.block);
        }
        self.trace.lock().push(format!("{}{}", self.name, step.0));
        Ok(())
    }
}

struct WhichThread;
impl Message for WhichThread {
    type Reply = Here;
}

/// The thread a handler runs on: its id and name.
type Here = (std::thread::ThreadId, Option<String>);

fn here() -> Here {
    let me = std::thread::current();
    (me.id(), me.name().map(str::to_owned))
}

impl Handler<WhichThread> for Tracer {
    async fn handle(&mut self, _: WhichThread, _: &mut Context<Self>) -> ActorResult<Here> {
        if !self.block.is_zero() {
            std::thread::sleep(self.block);
        }
        Ok(here())
    }
}

fn tracer(name: &'static str, trace: &Trace, block: Duration) -> Tracer {
    Tracer {
        name,
        trace: trace.clone(),
        block,
    }
}

/// A system whose default dispatcher is a calling-thread one with these settings.
fn calling_thread(throughput: usize, deadline: Option<Duration>) -> (ActorSystem, Dispatcher) {
    let dispatcher =
        Dispatcher::start("test", DispatcherKind::CallingThread, throughput, deadline).unwrap();
    let system = ActorSystem::with_dispatchers(
        "dispatch",
        SystemConfig::default(),
        dispatcher.clone(),
        Vec::new(),
    );
    (system, dispatcher)
}

/// Spawns two tracers, gives each three messages, drives the dispatcher, returns the order.
fn two_actors_three_messages(
    throughput: usize,
    deadline: Option<Duration>,
    block: Duration,
) -> Vec<String> {
    let (system, dispatcher) = calling_thread(throughput, deadline);
    let trace = Trace::default();
    let a = system.spawn(tracer("a", &trace, block)).unwrap();
    let b = system.spawn(tracer("b", &trace, block)).unwrap();
    dispatcher.run_until_idle();
    for n in 1..=3 {
        a.tell(Step(n)).unwrap();
    }
    for n in 1..=3 {
        b.tell(Step(n)).unwrap();
    }
    dispatcher.run_until_idle();
    trace.lock().clone()
}

#[tokio::test]
async fn throughput_one_interleaves_actors() {
    assert_eq!(
        two_actors_three_messages(1, None, Duration::ZERO),
        ["a1", "b1", "a2", "b2", "a3", "b3"]
    );
}

#[tokio::test]
async fn a_larger_throughput_lets_an_actor_drain_its_mailbox_first() {
    assert_eq!(
        two_actors_three_messages(3, None, Duration::ZERO),
        ["a1", "a2", "a3", "b1", "b2", "b3"]
    );
}

#[tokio::test]
async fn a_deadline_ends_a_turn_before_the_throughput_does() {
    // Throughput would allow all three; every message takes longer than the deadline.
    assert_eq!(
        two_actors_three_messages(
            100,
            Some(Duration::from_millis(1)),
            Duration::from_millis(2)
        ),
        ["a1", "b1", "a2", "b2", "a3", "b3"]
    );
}

#[tokio::test]
async fn nothing_runs_until_the_calling_thread_dispatcher_is_driven() {
    let (system, dispatcher) = calling_thread(1, None);
    let trace = Trace::default();
    let a = system.spawn(tracer("a", &trace, Duration::ZERO)).unwrap();
    a.tell(Step(1)).unwrap();
    assert!(trace.lock().is_empty());
    assert!(dispatcher.run_until_idle() > 0);
    assert_eq!(*trace.lock(), ["a1"]);
}

#[tokio::test]
async fn pinned_actors_each_get_their_own_thread() {
    let mut config = SystemConfig::default();
    config
        .dispatchers
        .push(DispatcherConfig::new("pinned", DispatcherKind::Pinned));
    let system = ActorSystem::with_config("pinned", config);
    let trace = Trace::default();
    let spawn = |name| {
        system
            .spawn(Props::new(tracer(name, &trace, Duration::ZERO)).on_dispatcher("pinned"))
            .unwrap()
    };
    let (a, b) = (spawn("a"), spawn("b"));
    let (a1, name) = a.ask(WhichThread, T).await.unwrap();
    let (a2, _) = a.ask(WhichThread, T).await.unwrap();
    let (b1, _) = b.ask(WhichThread, T).await.unwrap();
    assert_eq!(a1, a2, "a pinned actor stays on its thread");
    assert_ne!(a1, b1, "two pinned actors do not share a thread");
    assert_ne!(a1, std::thread::current().id());
    assert!(name.unwrap().starts_with("pinned-"));
    assert_eq!(system.dispatcher("pinned").unwrap().threads(), 2);
    system.shutdown().await.unwrap();
}

/// Spawns a child on its own dispatcher (the default for a child) when asked, and reports the
/// thread a timer's message arrives on.
struct Parent {
    timer_thread: Option<tokio::sync::oneshot::Sender<std::thread::ThreadId>>,
}
impl Actor for Parent {}

struct SpawnChild;
impl Message for SpawnChild {
    type Reply = rally::ActorRef<Tracer>;
}
impl Handler<SpawnChild> for Parent {
    async fn handle(
        &mut self,
        _: SpawnChild,
        ctx: &mut Context<Self>,
    ) -> ActorResult<rally::ActorRef<Tracer>> {
        Ok(ctx.spawn(tracer("child", &Trace::default(), Duration::ZERO))?)
    }
}
impl Handler<WhichThread> for Parent {
    async fn handle(&mut self, _: WhichThread, _: &mut Context<Self>) -> ActorResult<Here> {
        Ok(here())
    }
}
struct ArmTimer(tokio::sync::oneshot::Sender<std::thread::ThreadId>);
impl Message for ArmTimer {
    type Reply = ();
}
impl Handler<ArmTimer> for Parent {
    async fn handle(&mut self, arm: ArmTimer, ctx: &mut Context<Self>) -> ActorResult<()> {
        self.timer_thread = Some(arm.0);
        ctx.send_after(Duration::from_millis(1), Step(0));
        Ok(())
    }
}
impl Handler<Step> for Parent {
    async fn handle(&mut self, _: Step, _: &mut Context<Self>) -> ActorResult<()> {
        if let Some(tx) = self.timer_thread.take() {
            let _ = tx.send(std::thread::current().id());
        }
        Ok(())
    }
}

/// An affinity dispatcher of exactly two threads: actors spawned from outside take the threads
/// in turn and stay on theirs; children join their parent's thread; a timer fires (its runtime
/// has timers).
#[tokio::test]
async fn affinity_actors_stay_on_their_thread_and_children_join_their_parent() {
    let mut config = SystemConfig::default();
    config.default_dispatcher = DispatcherConfig::new(
        "cores",
        DispatcherKind::Affinity {
            parallelism_factor: 1.0,
            parallelism_min: 2,
            parallelism_max: 2,
        },
    );
    let system = ActorSystem::with_config("affinity", config);
    let cores = system.default_dispatcher();
    assert_eq!(cores.threads(), 2);
    assert_eq!(cores.kind().label(), "affinity");
    let parent = || Parent { timer_thread: None };
    let (a, b) = (
        system.spawn(parent()).unwrap(),
        system.spawn(parent()).unwrap(),
    );
    let (a1, a_name) = a.ask(WhichThread, T).await.unwrap();
    let (b1, b_name) = b.ask(WhichThread, T).await.unwrap();
    for _ in 0..10 {
        assert_eq!(
            a.ask(WhichThread, T).await.unwrap().0,
            a1,
            "a stays on its thread"
        );
    }
    assert_ne!(
        a1, b1,
        "two actors spawned from outside take the two threads in turn"
    );
    assert_ne!(a1, std::thread::current().id());
    let mut names = [a_name.unwrap(), b_name.unwrap()];
    names.sort();
    assert_eq!(names, ["cores-0", "cores-1"]);

    // Children spawned by `b` (three of them: a turn would have moved two) join `b`'s thread.
    for _ in 0..3 {
        let child = b.ask(SpawnChild, T).await.unwrap();
        assert_eq!(child.ask(WhichThread, T).await.unwrap().0, b1);
    }
    // A timer `a` sets fires, and its message is handled on `a`'s thread.
    let (tx, rx) = tokio::sync::oneshot::channel();
    a.tell(ArmTimer(tx)).unwrap();
    assert_eq!(tokio::time::timeout(T, rx).await.unwrap().unwrap(), a1);
    system.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_blocking_pool_grows_to_its_max_and_shrinks_after_keep_alive() {
    let mut config = SystemConfig::default();
    config.dispatchers.push(DispatcherConfig::new(
        "io",
        DispatcherKind::Blocking {
            core_pool_size: 1,
            max_pool_size: 3,
            keep_alive: Duration::from_millis(50),
            queue_size: 0,
        },
    ));
    let system = ActorSystem::with_config("blocking", config);
    let io = system.dispatcher("io").unwrap().clone();
    let trace = Trace::default();
    let actors: Vec<_> = (0..5)
        .map(|_| {
            system
                .spawn(
                    Props::new(tracer("w", &trace, Duration::from_millis(300))).on_dispatcher("io"),
                )
                .unwrap()
        })
        .collect();
    for actor in &actors {
        actor.tell(Step(0)).unwrap();
    }
    // Five actors block at once: the pool grows to its max of 3, no further.
    eventually("the pool grows to 3", T, async || {
        io.pool_status().unwrap().threads >= 3
    })
    .await;
    assert_eq!(io.pool_status().unwrap().peak_threads, 3);
    // All handled, then idle: the threads above the core size exit after keep-alive.
    eventually("the work finishes", T, async || trace.lock().len() >= 5).await;
    eventually("the pool shrinks to 1", T, async || {
        io.pool_status().unwrap().threads <= 1
    })
    .await;
    assert_eq!(io.pool_status().unwrap().peak_threads, 3);
    system.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_system_with_its_own_threads_can_be_dropped_inside_async_code() {
    let config = SystemConfig::from_toml(
        r#"
        [default-dispatcher]
        type = "shared"
        [dispatchers.io]
        type = "blocking"
        "#,
    )
    .unwrap();
    let system = ActorSystem::with_config("drop", config);
    let trace = Trace::default();
    let a = system.spawn(tracer("a", &trace, Duration::ZERO)).unwrap();
    let (_, name) = a.ask(WhichThread, T).await.unwrap();
    assert_eq!(name.as_deref(), Some("default"));
    system.shutdown().await.unwrap();
    drop(a);
    drop(system);
}

#[test]
fn toml_configures_every_kind_with_its_throughput() {
    let config = SystemConfig::from_toml(
        r#"
        throughput = 10
        throughput-deadline = "5ms"

        [default-dispatcher]
        type = "shared"
        parallelism-factor = 2.0
        parallelism-min = 2
        parallelism-max = 8

        [dispatchers.fair]
        type = "shared"
        throughput = 1

        [dispatchers.io]
        type = "blocking"
        core-pool-size = 2
        max-pool-size = 32
        keep-alive = "30s"
        queue-size = 4
        monitoring = true

        [dispatchers.own]
        type = "pinned"

        [dispatchers.test]
        type = "calling-thread"

        [dispatchers.cores]
        type = "affinity"
        parallelism-factor = 2.0
        parallelism-max = 3
        "#,
    )
    .unwrap();
    let system = ActorSystem::try_with_config("toml", config).unwrap();
    let fair = system.dispatcher("fair").unwrap();
    assert_eq!(fair.throughput(), 1);
    assert_eq!(fair.throughput_deadline(), Some(Duration::from_millis(5)));
    let io = system.dispatcher("io").unwrap();
    assert!(io.is_monitored());
    assert_eq!(
        io.kind(),
        &DispatcherKind::Blocking {
            core_pool_size: 2,
            max_pool_size: 32,
            keep_alive: Duration::from_secs(30),
            queue_size: 4,
        }
    );
    assert_eq!(system.default_dispatcher().throughput(), 10);
    assert_eq!(
        system.dispatcher("own").unwrap().kind(),
        &DispatcherKind::Pinned
    );
    assert_eq!(
        system.dispatcher("test").unwrap().kind(),
        &DispatcherKind::CallingThread
    );
    let cores = system.dispatcher("cores").unwrap();
    assert_eq!(
        cores.kind(),
        &DispatcherKind::Affinity {
            parallelism_factor: 2.0,
            parallelism_min: 2,
            parallelism_max: 3,
        }
    );
    assert!((2..=3).contains(&cores.threads()));
}

#[test]
fn config_errors_name_the_key() {
    let cases = [
        ("thruput = 4", "thruput"),
        ("throughput = 0", "throughput"),
        ("throughput = \"fast\"", "throughput"),
        ("throughput-deadline = \"soon\"", "throughput-deadline"),
        (
            "[dispatchers.io]\ntype = \"blockin\"",
            "dispatchers.io.type",
        ),
        (
            "[dispatchers.io]\ntype = \"blocking\"\nparallelism-min = 2",
            "dispatchers.io.parallelism-min",
        ),
        (
            "[dispatchers.io]\ntype = \"affinity\"\nkeep-alive = \"1s\"",
            "dispatchers.io.keep-alive",
        ),
        (
            "[dispatchers.io]\ntype = \"affinity\"\nparallelism-min = 4\nparallelism-max = 2",
            "dispatchers.io.parallelism-max",
        ),
        (
            "[dispatchers.io]\ntype = \"blocking\"\ncore-pool-size = 8\nmax-pool-size = 4",
            "dispatchers.io.max-pool-size",
        ),
        (
            "[default-dispatcher]\ntype = \"shared\"\nparallelism-min = 4\nparallelism-max = 2",
            "default-dispatcher.parallelism-max",
        ),
        (
            "[default-mailbox]\noverflow = \"drop-oldest\"",
            "default-mailbox.overflow",
        ),
        ("[monitoring]\nsample-every = 0", "monitoring.sample-every"),
        ("[monitoring]\nall = true", "monitoring.all"),
    ];
    for (text, key) in cases {
        let error = SystemConfig::from_toml(text).unwrap_err();
        assert_eq!(error.key(), Some(key), "for {text:?}: {error}");
        assert!(error.to_string().contains(key), "{error}");
    }
}
