//! Routers and the balancing pool.

use std::sync::Arc;
use std::time::Duration;

use rally::sync::Mutex;
use rally::{
    Actor, ActorResult, ActorSystem, BalancingPool, Context, Handler, Message, Props, Resizer,
    Router, Routing,
};
use rally_test::eventually;
use tokio::sync::Semaphore;

const T: Duration = Duration::from_secs(5);

/// Records which worker handled which job; a job may wait for a permit first.
struct Worker {
    id: usize,
    log: Arc<Mutex<Vec<(usize, u32)>>>,
    gate: Arc<Semaphore>,
}
impl Actor for Worker {}

#[derive(Clone)]
struct Job {
    n: u32,
    gated: bool,
}
impl Message for Job {
    type Reply = usize;
}

impl Handler<Job> for Worker {
    async fn handle(&mut self, job: Job, _: &mut Context<Self>) -> ActorResult<usize> {
        if job.gated {
            self.gate.acquire().await?.forget();
        }
        self.log.lock().push((self.id, job.n));
        Ok(self.id)
    }
}

fn job(n: u32) -> Job {
    Job { n, gated: false }
}

/// A job number that marks a flush, not work.
const FLUSH: u32 = u32::MAX;

/// Waits until every routee has handled what was sent to it before (mailboxes are FIFO), and
/// returns the log of real jobs.
async fn settled(router: &Router<Worker>, f: &Fixture) -> Vec<(usize, u32)> {
    for routee in router.routees() {
        routee.ask(job(FLUSH), T).await.unwrap();
    }
    let log = f.log.lock().clone();
    log.into_iter().filter(|(_, n)| *n != FLUSH).collect()
}

struct Fixture {
    log: Arc<Mutex<Vec<(usize, u32)>>>,
    gate: Arc<Semaphore>,
    next: Arc<Mutex<usize>>,
}

impl Fixture {
    fn new() -> Self {
        Self {
            log: Arc::default(),
            gate: Arc::new(Semaphore::new(0)),
            next: Arc::default(),
        }
    }

    fn props(&self) -> impl FnMut() -> Props<Worker> + Send + 'static {
        let (log, gate, next) = (self.log.clone(), self.gate.clone(), self.next.clone());
        move || {
            let mut n = next.lock();
            *n += 1;
            Props::new(Worker {
                id: *n,
                log: log.clone(),
                gate: gate.clone(),
            })
        }
    }
}

#[tokio::test]
async fn round_robin_takes_each_routee_in_turn() {
    let system = ActorSystem::new("rr");
    let f = Fixture::new();
    let mut router = Router::pool(&system, 3, Routing::RoundRobin, f.props()).unwrap();
    let mut ids = Vec::new();
    for n in 0..6 {
        ids.push(router.ask(job(n), T).await.unwrap());
    }
    assert_eq!(ids, [1, 2, 3, 1, 2, 3]);
    system.shutdown().await.unwrap();
}

#[tokio::test]
async fn consistent_hashing_sends_a_key_to_the_same_routee() {
    let system = ActorSystem::new("hash");
    let f = Fixture::new();
    let mut router = Router::pool(&system, 4, Routing::ConsistentHashing, f.props()).unwrap();
    for key in ["alice", "bob", "carol", "dave", "erin"] {
        for n in 0..3 {
            router.tell_keyed(&key, job(n)).unwrap();
        }
    }
    let log = settled(&router, &f).await;
    assert_eq!(log.len(), 15);
    // Each key's three jobs landed on one worker: 5 keys, at most 5 (worker, key) groups.
    let mut per_worker = std::collections::HashMap::<usize, usize>::new();
    for (worker, _) in &log {
        *per_worker.entry(*worker).or_default() += 1;
    }
    assert!(per_worker.values().all(|count| count % 3 == 0), "{log:?}");
    system.shutdown().await.unwrap();
}

#[tokio::test]
async fn smallest_mailbox_avoids_the_busy_routee() {
    let system = ActorSystem::new("smallest");
    let f = Fixture::new();
    let mut router = Router::pool(&system, 2, Routing::SmallestMailbox, f.props()).unwrap();
    // Worker 1 takes a gated job and three more queue behind it.
    router.routees()[0].tell(Job { n: 0, gated: true }).unwrap();
    for n in 1..4 {
        router.routees()[0].tell(job(n)).unwrap();
    }
    for _ in 0..3 {
        assert_eq!(router.ask(job(9), T).await.unwrap(), 2);
    }
    f.gate.add_permits(1);
    system.shutdown().await.unwrap();
}

/// A routee busy with a long message and nothing queued is not idle: the router passes it by.
#[tokio::test]
async fn smallest_mailbox_passes_a_routee_busy_with_an_empty_mailbox() {
    let system = ActorSystem::new("smallest-busy");
    let f = Fixture::new();
    let mut router = Router::pool(&system, 2, Routing::SmallestMailbox, f.props()).unwrap();
    let busy = router.routees()[0].clone();
    busy.tell(Job { n: 0, gated: true }).unwrap();
    // Bounded wait until the worker has taken the job: its mailbox is empty, it is busy.
    eventually("the worker takes the job", T, async || {
        busy.mailbox_len() == Some(0)
    })
    .await;
    assert_eq!(busy.load(), Some(1), "the job in hand counts");
    for _ in 0..3 {
        assert_eq!(router.ask(job(9), T).await.unwrap(), 2);
    }
    f.gate.add_permits(1);
    system.shutdown().await.unwrap();
}

#[tokio::test]
async fn broadcast_reaches_every_routee() {
    let system = ActorSystem::new("broadcast");
    let f = Fixture::new();
    let router = Router::pool(&system, 3, Routing::Random, f.props()).unwrap();
    router.broadcast(job(7)).unwrap();
    let mut workers: Vec<usize> = settled(&router, &f).await.iter().map(|(w, _)| *w).collect();
    workers.sort_unstable();
    assert_eq!(workers, [1, 2, 3]);
    system.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_balancing_pool_hands_work_to_idle_workers() {
    let system = ActorSystem::new("balancing");
    let f = Fixture::new();
    let pool = BalancingPool::new(&system, 2, f.props()).unwrap();
    // One worker is stuck on a gated job; every other job goes to the idle one, none waits
    // behind the stuck worker (round-robin would put every other job there).
    pool.tell(Job { n: 0, gated: true }).unwrap();
    let mut ids = Vec::new();
    for n in 1..=5 {
        ids.push(pool.ask(job(n), T).await.unwrap());
    }
    let stuck = 3 - ids[0];
    assert!(ids.iter().all(|id| *id != stuck), "{ids:?}");
    // Both busy: messages queue in the pool and the first worker to finish takes them.
    pool.tell(Job { n: 6, gated: true }).unwrap();
    pool.tell(job(7)).unwrap();
    // The idle worker takes job 6 and blocks on the gate; job 7 waits in the pool.
    eventually("one job waits for a free worker", T, async || {
        pool.queued() == 1 && f.gate.available_permits() == 0
    })
    .await;
    f.gate.add_permits(2);
    eventually("all eight jobs are handled", T, async || {
        f.log.lock().len() == 8
    })
    .await;
    assert_eq!(pool.queued(), 0);
    system.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_resizer_grows_a_busy_pool_up_to_its_bound() {
    let system = ActorSystem::new("resize");
    let f = Fixture::new();
    let mut router = Router::pool(&system, 1, Routing::RoundRobin, f.props())
        .unwrap()
        .with_resizer({
            let mut resizer = Resizer::new(1, 3);
            resizer.messages_per_resize = 2;
            resizer
        });
    for n in 0..20 {
        router.tell(Job { n, gated: true }).unwrap();
    }
    assert_eq!(router.routees().len(), 3);
    f.gate.add_permits(20);
    system.shutdown().await.unwrap();
}

#[tokio::test]
async fn random_spreads_over_every_routee() {
    let system = ActorSystem::new("random");
    let f = Fixture::new();
    let mut router = Router::pool(&system, 3, Routing::Random, f.props()).unwrap();
    for n in 0..300 {
        router.tell(job(n)).unwrap();
    }
    let log = settled(&router, &f).await;
    assert_eq!(log.len(), 300);
    let mut per_worker = [0usize; 3];
    for (worker, _) in &log {
        per_worker[worker - 1] += 1;
    }
    // Each routee's chance of getting fewer than 50 of 300 is below 1e-9.
    assert!(
        per_worker.iter().all(|&count| count >= 50),
        "{per_worker:?}"
    );
    system.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_resizer_shrinks_an_idle_pool_without_losing_a_message() {
    let system = ActorSystem::new("shrink");
    let f = Fixture::new();
    let mut router = Router::pool(&system, 4, Routing::SmallestMailbox, f.props())
        .unwrap()
        .with_resizer({
            let mut resizer = Resizer::new(2, 4);
            resizer.backoff_threshold = 0.5;
            resizer.messages_per_resize = 1;
            resizer
        });
    // The last worker holds a gated job and three more wait behind it; the others are idle, so
    // every check finds fewer than half busy and retires one, never the one with work waiting.
    let loaded = router.routees()[3].clone();
    loaded.tell(Job { n: 0, gated: true }).unwrap();
    for n in 1..4 {
        loaded.tell(job(n)).unwrap();
    }
    for n in 4..10 {
        router.ask(job(n), T).await.unwrap();
    }
    assert_eq!(router.routees().len(), 2);
    assert!(router.routees().iter().any(|r| r.id() == loaded.id()));
    assert!(
        loaded.mailbox_len() >= Some(3),
        "{:?}",
        loaded.mailbox_len()
    );
    f.gate.add_permits(1);
    let mut done: Vec<u32> = settled(&router, &f).await.iter().map(|(_, n)| *n).collect();
    done.sort_unstable();
    assert_eq!(done, (0..10).collect::<Vec<_>>());
    assert_eq!(system.dead_letters().count(), 0);
    system.shutdown().await.unwrap();
}
