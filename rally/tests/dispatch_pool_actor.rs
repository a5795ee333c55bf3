//! `Pool`: a router that is an ordinary actor: children of a supervisor, restarted with it,
//! one cloneable ref used from many tasks.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rally::{
    Actor, ActorRef, ActorResult, ActorSystem, Context, Handler, Message, Pool, Props, Routing,
};

const T: Duration = Duration::from_secs(5);

/// Counts how many routees were ever started.
struct Square {
    started: Arc<AtomicUsize>,
}
impl Actor for Square {
    async fn started(&mut self, ctx: &mut Context<Self>) -> ActorResult<()> {
        let _ = ctx;
        self.started.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

struct N(u64);
impl Message for N {
    type Reply = (u64, rally::ActorId);
}
impl Handler<N> for Square {
    async fn handle(
        &mut self,
        n: N,
        ctx: &mut Context<Self>,
    ) -> ActorResult<(u64, rally::ActorId)> {
        Ok((n.0 * n.0, ctx.id()))
    }
}

struct Boom;
impl Message for Boom {
    type Reply = ();
}
impl Handler<Boom> for Square {
    async fn handle(&mut self, _: Boom, _: &mut Context<Self>) -> ActorResult<()> {
        Ok(())
    }
}

/// A supervisor whose only child is the pool; it restarts when told to fail.
struct Supervisor {
    started: Arc<AtomicUsize>,
    pool: Option<ActorRef<Pool<Square>>>,
}
impl Actor for Supervisor {
    async fn started(&mut self, ctx: &mut Context<Self>) -> ActorResult<()> {
        let started = self.started.clone();
        let pool = Pool::new(3, Routing::RoundRobin, move || {
            Props::new(Square {
                started: started.clone(),
            })
        });
        self.pool = Some(ctx.spawn(Props::new(pool).named("squares"))?);
        Ok(())
    }
}

struct GetPool;
impl Message for GetPool {
    type Reply = ActorRef<Pool<Square>>;
}
impl Handler<GetPool> for Supervisor {
    async fn handle(
        &mut self,
        _: GetPool,
        _: &mut Context<Self>,
    ) -> ActorResult<ActorRef<Pool<Square>>> {
        Ok(self.pool.clone().expect("spawned in started"))
    }
}

struct Crash;
impl Message for Crash {
    type Reply = ();
}
impl Handler<Crash> for Supervisor {
    async fn handle(&mut self, _: Crash, _: &mut Context<Self>) -> ActorResult<()> {
        Err("crash on purpose".into())
    }
}

#[tokio::test]
async fn many_tasks_share_one_pool_ref_and_round_robin_spreads_the_work() {
    let system = ActorSystem::new("t");
    let started = Arc::new(AtomicUsize::new(0));
    let counted = started.clone();
    let pool = system
        .spawn(Pool::new(3, Routing::RoundRobin, move || {
            Props::new(Square {
                started: counted.clone(),
            })
        }))
        .unwrap();
    let tasks: Vec<_> = (0..30u64)
        .map(|i| {
            let pool = pool.clone();
            tokio::spawn(async move { (i, pool.ask(N(i), T).await) })
        })
        .collect();
    let mut routees = std::collections::HashMap::new();
    for task in tasks {
        let (i, reply) = task.await.unwrap();
        let (square, routee) = reply.unwrap();
        assert_eq!(square, i * i);
        *routees.entry(routee).or_insert(0) += 1;
    }
    assert_eq!(started.load(Ordering::SeqCst), 3);
    assert_eq!(routees.len(), 3, "every routee got work: {routees:?}");
    assert!(routees.values().all(|&n| n == 10), "{routees:?}");
    pool.tell(Boom).unwrap();
    system.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_pool_under_a_supervisor_restarts_with_it_and_spawns_fresh_routees() {
    let system = ActorSystem::new("t");
    let started = Arc::new(AtomicUsize::new(0));
    let supervisor = system
        .spawn(
            Props::new(Supervisor {
                started: started.clone(),
                pool: None,
            })
            .named("sup"),
        )
        .unwrap();
    let pool = supervisor.ask(GetPool, T).await.unwrap();
    assert_eq!(&**pool.path(), "/user/sup/squares");
    assert_eq!(pool.ask(N(3), T).await.unwrap().0, 9);
    assert_eq!(started.load(Ordering::SeqCst), 3);

    // The supervisor fails and is restarted by the system: its children, the pool and the
    // pool's routees, stop and are made again.
    let old_pool_end = pool.terminated();
    supervisor.tell(Crash).unwrap();
    tokio::time::timeout(T, old_pool_end).await.unwrap();
    let new_pool = supervisor.ask(GetPool, T).await.unwrap();
    assert_ne!(new_pool.id(), pool.id());
    assert_eq!(new_pool.ask(N(4), T).await.unwrap().0, 16);
    assert_eq!(started.load(Ordering::SeqCst), 6);
    system.shutdown().await.unwrap();
}

#[tokio::test]
async fn random_routing_reaches_every_routee() {
    let system = ActorSystem::new("t");
    let started = Arc::new(AtomicUsize::new(0));
    let counted = started.clone();
    let pool = system
        .spawn(Pool::new(3, Routing::Random, move || {
            Props::new(Square {
                started: counted.clone(),
            })
        }))
        .unwrap();
    let mut routees = std::collections::HashSet::new();
    // 300 picks among 3: missing one has probability (2/3)^300, never in practice.
    for i in 0..300u64 {
        let (square, routee) = pool.ask(N(i), T).await.unwrap();
        assert_eq!(square, i * i);
        routees.insert(routee);
    }
    assert_eq!(routees.len(), 3);
    system.shutdown().await.unwrap();
}

/// Keeps its routee busy until the test lets go; tells which routee it is when it starts.
struct Hold {
    started: tokio::sync::oneshot::Sender<rally::ActorId>,
    release: tokio::sync::oneshot::Receiver<()>,
}
impl Message for Hold {
    type Reply = ();
}
impl Handler<Hold> for Square {
    async fn handle(&mut self, hold: Hold, ctx: &mut Context<Self>) -> ActorResult<()> {
        let _ = hold.started.send(ctx.id());
        let _ = hold.release.await;
        Ok(())
    }
}

#[tokio::test]
async fn smallest_mailbox_routing_passes_by_a_busy_routee() {
    let system = ActorSystem::new("t");
    let started = Arc::new(AtomicUsize::new(0));
    let counted = started.clone();
    let pool = system
        .spawn(Pool::new(2, Routing::SmallestMailbox, move || {
            Props::new(Square {
                started: counted.clone(),
            })
        }))
        .unwrap();
    // One routee is held busy (a message in hand counts as one waiting)...
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let (release, release_rx) = tokio::sync::oneshot::channel();
    pool.tell(Hold {
        started: started_tx,
        release: release_rx,
    })
    .unwrap();
    let held = started_rx.await.unwrap();
    // ...so every ask goes to the other one, whose mailbox is empty at each pick.
    for i in 0..10u64 {
        let (square, routee) = pool.ask(N(i), T).await.unwrap();
        assert_eq!(square, i * i);
        assert_ne!(routee, held, "ask {i} went to the busy routee");
    }
    release.send(()).unwrap();
    system.shutdown().await.unwrap();
}
