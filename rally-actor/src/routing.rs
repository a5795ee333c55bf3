//! Routers: one handle in front of several actors of one type, and the balancing pool.
//!
//! A [`Router`] picks a routee per message: round-robin, random, smallest mailbox, or by
//! consistent hashing of a key; [`Router::broadcast`] sends a clone to every routee. A router
//! made with [`Router::pool`] spawns its routees and can grow and shrink them with a
//! [`Resizer`]. A [`BalancingPool`] keeps one queue for all its workers: a message waits there
//! until a worker is idle, so a slow message never holds up the ones behind it while another
//! worker has nothing to do.

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::envelope::ReplyError;
use crate::sync::Mutex;
use crate::{
    Actor, ActorRef, ActorSystem, AskError, Envelope, Handler, Message, Props, ReplyTo, SendError,
    SpawnError,
};

/// How a [`Router`] picks the routee for a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Routing {
    /// Each routee in turn.
    RoundRobin,
    /// A routee at random.
    Random,
    /// The routee with the fewest unfinished messages: waiting plus the one in hand, so a
    /// routee busy with a long message is passed by even when its mailbox is empty
    /// ([`ActorRef::load`](crate::ActorRef::load); local routees; ties go to the first).
    SmallestMailbox,
    /// The routee a key hashes to on a ring of virtual nodes: the same key always reaches the
    /// same routee, and adding a routee moves only about 1/n of the keys.
    ConsistentHashing,
}

/// Virtual nodes per routee on the consistent-hashing ring: enough that keys spread within a few
/// per cent of evenly over a handful of routees, few enough that the ring stays small.
const VIRTUAL_NODES: usize = 64;

/// Grows a pool when its routees are busy and shrinks it when they idle (Akka's default resizer,
/// simplified).
///
/// # Example
///
/// ```
/// use rally::Resizer;
///
/// let resizer = Resizer::new(2, 8);
/// assert_eq!(resizer.messages_per_resize, 10);
/// ```
///
/// Non-exhaustive: made with [`Resizer::new`] or `default()` and then its fields set, so a new
/// setting is not a breaking change.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Resizer {
    /// The fewest routees (default 1).
    pub lower_bound: usize,
    /// The most routees (default 10).
    pub upper_bound: usize,
    /// A routee with at least this many messages waiting counts as busy (default 1).
    pub pressure_threshold: usize,
    /// When every routee is busy, grow by this share of the current size, at least 1
    /// (default 0.2, Akka's).
    pub rampup_rate: f64,
    /// When fewer than this share of routees is busy, retire one routee that has nothing waiting
    /// (default 0.3, Akka's backoff threshold). A busy routee is never retired, so shrinking
    /// loses no message.
    pub backoff_threshold: f64,
    /// Check after this many messages (default 10, Akka's).
    pub messages_per_resize: usize,
}

impl Resizer {
    /// Between `lower_bound` and `upper_bound` routees, other settings at their defaults.
    pub fn new(lower_bound: usize, upper_bound: usize) -> Self {
        Self {
            lower_bound,
            upper_bound,
            ..Self::default()
        }
    }
}

impl Default for Resizer {
    fn default() -> Self {
        Self {
            lower_bound: 1,
            upper_bound: 10,
            pressure_threshold: 1,
            rampup_rate: 0.2,
            backoff_threshold: 0.3,
            messages_per_resize: 10,
        }
    }
}

/// A handle that routes messages to a group of actors of type `A`.
///
/// A `Router` is a value owned by one caller (`tell` and `ask` take `&mut self`), not an actor.
/// For a router that is an actor, [`Pool`](crate::Pool): spawned under a supervisor and
/// restarted with it, one `ActorRef` cloned into many tasks, watched, exposed to other nodes.
/// A `Router` is for what a pool does not do: keyed routing ([`Routing::ConsistentHashing`]
/// with [`tell_keyed`](Self::tell_keyed)), [`broadcast`](Self::broadcast), routing over
/// actors you spawned yourself ([`group`](Self::group)), and a [`Resizer`].
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use rally::{Actor, ActorResult, ActorSystem, Context, Handler, Message, Props, Router, Routing};
///
/// struct Square;
/// impl Actor for Square {}
/// struct N(u64);
/// impl Message for N { type Reply = u64; }
/// impl Handler<N> for Square {
///     async fn handle(&mut self, n: N, _: &mut Context<Self>) -> ActorResult<u64> { Ok(n.0 * n.0) }
/// }
///
/// # #[tokio::main] async fn main() {
/// let system = ActorSystem::new("doc");
/// let mut router = Router::pool(&system, 3, Routing::RoundRobin, || Props::new(Square)).unwrap();
/// assert_eq!(router.ask(N(4), Duration::from_secs(1)).await, Ok(16));
/// assert_eq!(router.routees().len(), 3);
/// system.shutdown().await.unwrap();
/// # }
/// ```
pub struct Router<A: Actor> {
    routees: Vec<ActorRef<A>>,
    routing: Routing,
    next: AtomicUsize,
    ring: Vec<(u64, usize)>,
    pool: Option<Pool<A>>,
}

struct Pool<A: Actor> {
    system: ActorSystem,
    factory: Box<dyn FnMut() -> Props<A> + Send>,
    resizer: Option<Resizer>,
    sent: usize,
}

impl<A: Actor> std::fmt::Debug for Router<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router")
            .field("routing", &self.routing)
            .field("routees", &self.routees.len())
            .finish()
    }
}

impl<A: Actor> Router<A> {
    /// A router over existing actors (Akka's group).
    pub fn group(routees: Vec<ActorRef<A>>, routing: Routing) -> Self {
        let mut router = Self {
            routees,
            routing,
            next: AtomicUsize::new(0),
            ring: Vec::new(),
            pool: None,
        };
        router.rebuild_ring();
        router
    }

    /// Spawns `size` routees (at least 1) from `props` under the system and routes to them.
    ///
    /// # Errors
    ///
    /// The first [`SpawnError`].
    pub fn pool(
        system: &ActorSystem,
        size: usize,
        routing: Routing,
        mut props: impl FnMut() -> Props<A> + Send + 'static,
    ) -> Result<Self, SpawnError> {
        let routees = (0..size.max(1))
            .map(|_| system.spawn(props()))
            .collect::<Result<Vec<_>, _>>()?;
        let mut router = Self::group(routees, routing);
        router.pool = Some(Pool {
            system: system.clone(),
            factory: Box::new(props),
            resizer: None,
            sent: 0,
        });
        Ok(router)
    }

    /// Lets a pool grow and shrink between the resizer's bounds (no effect on a group).
    pub fn with_resizer(mut self, resizer: Resizer) -> Self {
        if let Some(pool) = &mut self.pool {
            pool.resizer = Some(resizer);
        }
        self
    }

    /// The routees now.
    pub fn routees(&self) -> &[ActorRef<A>] {
        &self.routees
    }

    /// Sends `msg` to the routee the routing picks (for consistent hashing: the routee of the
    /// key `()`, always the same one; use [`tell_keyed`](Self::tell_keyed)).
    ///
    /// # Errors
    ///
    /// As for [`ActorRef::tell`].
    pub fn tell<M>(&mut self, msg: M) -> Result<(), SendError<M>>
    where
        M: Message,
        A: Handler<M>,
    {
        self.tell_keyed(&(), msg)
    }

    /// Sends `msg`, routed by `key` when the routing is consistent hashing.
    ///
    /// # Errors
    ///
    /// As for [`ActorRef::tell`].
    pub fn tell_keyed<M>(&mut self, key: &impl Hash, msg: M) -> Result<(), SendError<M>>
    where
        M: Message,
        A: Handler<M>,
    {
        self.resize_if_due();
        let routee = self.pick(key);
        self.routees[routee].tell(msg)
    }

    /// Sends `msg` and waits for the reply from the routee the routing picks.
    ///
    /// # Errors
    ///
    /// As for [`ActorRef::ask`].
    ///
    /// # Cancel safety
    ///
    /// As for [`ActorRef::ask`].
    pub async fn ask<M>(&mut self, msg: M, timeout: Duration) -> Result<M::Reply, AskError>
    where
        M: Message,
        A: Handler<M>,
    {
        self.resize_if_due();
        let routee = self.pick(&());
        self.routees[routee].ask(msg, timeout).await
    }

    /// Sends a clone of `msg` to every routee (Akka's broadcast).
    ///
    /// # Errors
    ///
    /// The first routee that refuses it; the others still get theirs.
    pub fn broadcast<M>(&self, msg: M) -> Result<(), SendError<M>>
    where
        M: Message + Clone,
        A: Handler<M>,
    {
        let mut first = None;
        for routee in &self.routees {
            if let Err(error) = routee.tell(msg.clone()) {
                first.get_or_insert(error);
            }
        }
        first.map_or(Ok(()), Err)
    }

    fn pick(&self, key: &impl Hash) -> usize {
        let n = self.routees.len();
        match self.routing {
            Routing::RoundRobin => self.next.fetch_add(1, Ordering::Relaxed) % n,
            Routing::Random => (random() % n as u64) as usize,
            Routing::SmallestMailbox => self
                .routees
                .iter()
                .enumerate()
                // Waiting plus in hand: a routee busy with a long message is not idle.
                .min_by_key(|(_, r)| r.load().unwrap_or(usize::MAX))
                .map_or(0, |(i, _)| i),
            Routing::ConsistentHashing => {
                let h = hash(key);
                let at = self.ring.partition_point(|(point, _)| *point < h);
                self.ring[at % self.ring.len()].1
            }
        }
    }

    fn rebuild_ring(&mut self) {
        self.ring = self
            .routees
            .iter()
            .enumerate()
            .flat_map(|(i, r)| (0..VIRTUAL_NODES).map(move |v| (hash(&(r.id().as_u64(), v)), i)))
            .collect();
        self.ring.sort_unstable();
    }

    fn resize_if_due(&mut self) {
        let Some(pool) = &mut self.pool else {
            return;
        };
        let Some(resizer) = &pool.resizer else {
            return;
        };
        pool.sent += 1;
        if pool.sent % resizer.messages_per_resize.max(1) != 0 {
            return;
        }
        let n = self.routees.len();
        let busy = self
            .routees
            .iter()
            .filter(|r| r.mailbox_len().unwrap_or(0) >= resizer.pressure_threshold)
            .count();
        let target = if busy == n {
            (n + ((n as f64 * resizer.rampup_rate).ceil() as usize).max(1)).min(resizer.upper_bound)
        } else if (busy as f64) < n as f64 * resizer.backoff_threshold {
            n.saturating_sub(1).max(resizer.lower_bound)
        } else {
            n
        };
        let target = target.max(resizer.lower_bound.max(1));
        if target > n {
            for _ in n..target {
                match pool.system.spawn((pool.factory)()) {
                    Ok(routee) => self.routees.push(routee),
                    Err(error) => {
                        tracing::warn!(%error, "a router could not grow");
                        break;
                    }
                }
            }
        } else if target < n {
            // Retire only routees with nothing waiting: a stopped actor's queued messages would
            // go to dead letters. The one in hand is finished before it stops.
            let mut surplus = n - target;
            self.routees.retain(|routee| {
                let retire = surplus > 0 && routee.mailbox_len() == Some(0);
                if retire {
                    surplus -= 1;
                    routee.stop();
                }
                !retire
            });
        }
        if self.routees.len() != n {
            self.rebuild_ring();
        }
    }
}

fn hash(key: &impl Hash) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut hasher);
    hasher.finish()
}

/// A cheap per-thread xorshift: routing needs spread, not unpredictability.
fn random() -> u64 {
    use std::cell::Cell;
    thread_local! {
        static STATE: Cell<u64> = Cell::new(
            hash(&(std::time::Instant::now(), std::thread::current().id())) | 1,
        );
    }
    STATE.with(|state| {
        let mut x = state.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        state.set(x);
        x
    })
}

/// Workers sharing one queue: a message goes to a worker only when it is idle.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use rally::{Actor, ActorResult, ActorSystem, BalancingPool, Context, Handler, Message, Props};
///
/// struct Worker;
/// impl Actor for Worker {}
/// struct Job(u32);
/// impl Message for Job { type Reply = u32; }
/// impl Handler<Job> for Worker {
///     async fn handle(&mut self, job: Job, _: &mut Context<Self>) -> ActorResult<u32> { Ok(job.0 + 1) }
/// }
///
/// # #[tokio::main] async fn main() {
/// let system = ActorSystem::new("doc");
/// let pool = BalancingPool::new(&system, 4, || Props::new(Worker)).unwrap();
/// assert_eq!(pool.ask(Job(1), Duration::from_secs(1)).await, Ok(2));
/// system.shutdown().await.unwrap();
/// # }
/// ```
pub struct BalancingPool<A: Actor> {
    shared: Arc<Balance<A>>,
}

impl<A: Actor> Clone for BalancingPool<A> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<A: Actor> std::fmt::Debug for BalancingPool<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BalancingPool")
            .field("workers", &self.shared.workers.len())
            .finish()
    }
}

struct Balance<A: Actor> {
    workers: Vec<ActorRef<A>>,
    state: Mutex<BalanceState<A>>,
}

struct BalanceState<A: Actor> {
    queue: VecDeque<(Envelope<A>, Arc<AtomicUsize>)>,
    idle: Vec<usize>,
}

/// Tells the pool that a worker is free again, when the reply is sent or dropped (a failed
/// handler drops it).
struct Done<A: Actor> {
    pool: Arc<Balance<A>>,
    worker: Arc<AtomicUsize>,
}

impl<A: Actor> Drop for Done<A> {
    fn drop(&mut self) {
        self.pool.free(self.worker.load(Ordering::Acquire));
    }
}

impl<A: Actor> BalancingPool<A> {
    /// Spawns `size` workers (at least 1) from `props`.
    ///
    /// # Errors
    ///
    /// The first [`SpawnError`].
    pub fn new(
        system: &ActorSystem,
        size: usize,
        mut props: impl FnMut() -> Props<A>,
    ) -> Result<Self, SpawnError> {
        let workers = (0..size.max(1))
            .map(|_| system.spawn(props()))
            .collect::<Result<Vec<_>, _>>()?;
        let idle = (0..workers.len()).rev().collect();
        Ok(Self {
            shared: Arc::new(Balance {
                workers,
                state: Mutex::new(BalanceState {
                    queue: VecDeque::new(),
                    idle,
                }),
            }),
        })
    }

    /// The workers.
    pub fn workers(&self) -> &[ActorRef<A>] {
        &self.shared.workers
    }

    /// Messages waiting for an idle worker.
    pub fn queued(&self) -> usize {
        self.shared.lock().queue.len()
    }

    /// Sends `msg` to an idle worker, or queues it for the next worker that becomes idle.
    ///
    /// # Errors
    ///
    /// [`SendError::Stopped`] when the worker it was handed to has stopped.
    pub fn tell<M>(&self, msg: M) -> Result<(), SendError<M>>
    where
        M: Message,
        A: Handler<M>,
    {
        match self.submit(msg, ReplyTo::ignore()) {
            Ok(()) => Ok(()),
            Err((msg, why)) => Err(SendError::Rejected(msg, why)),
        }
    }

    /// Sends `msg` as [`tell`](Self::tell) does and waits for the reply.
    ///
    /// # Errors
    ///
    /// As for [`ActorRef::ask`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future abandons the reply; the message is still handled.
    pub async fn ask<M>(&self, msg: M, timeout: Duration) -> Result<M::Reply, AskError>
    where
        M: Message,
        A: Handler<M>,
    {
        if timeout.is_zero() {
            return Err(AskError::InvalidTimeout);
        }
        let (reply, rx) = ReplyTo::channel();
        self.submit(msg, reply)
            .map_err(|(_, why)| AskError::Rejected(why))?;
        match tokio::time::timeout(timeout, rx).await {
            Err(_) => Err(AskError::Timeout(timeout)),
            Ok(Err(_)) => Err(AskError::Failed(
                "the reply destination was dropped unanswered".to_owned(),
            )),
            Ok(Ok(reply)) => reply.map_err(AskError::from),
        }
    }

    /// Hands `msg` to an idle worker or queues it, with the request context of the code
    /// running now; a call filter's rejection gives the message back with why.
    fn submit<M>(&self, msg: M, reply: ReplyTo<M::Reply>) -> Result<(), (M, String)>
    where
        M: Message,
        A: Handler<M>,
    {
        let worker = Arc::new(AtomicUsize::new(usize::MAX));
        let done = Done {
            pool: self.shared.clone(),
            worker: worker.clone(),
        };
        let entry = self
            .shared
            .workers
            .first()
            .and_then(ActorRef::entry_filters);
        let context = match crate::filter::context_for_send(
            entry,
            || "balancing-pool",
            None,
            std::any::type_name::<M>(),
        ) {
            Ok(context) => context,
            Err(rejection) => return Err((msg, rejection.reason().to_owned())),
        };
        let envelope = Envelope::new(
            msg,
            ReplyTo::callback(move |result| {
                reply.send(result);
                drop(done);
            }),
        )
        .in_context(context);
        let mut state = self.shared.lock();
        match state.idle.pop() {
            Some(idle) => {
                drop(state);
                self.shared.hand(idle, envelope, &worker);
            }
            None => state.queue.push_back((envelope, worker)),
        }
        Ok(())
    }
}

impl<A: Actor> Balance<A> {
    fn lock(&self) -> std::sync::MutexGuard<'_, BalanceState<A>> {
        self.state.lock()
    }

    fn hand(&self, worker: usize, envelope: Envelope<A>, slot: &AtomicUsize) {
        slot.store(worker, Ordering::Release);
        if let Err(error) = self.workers[worker].deliver(envelope) {
            // The worker stopped: the message fails; the worker is not handed more.
            slot.store(usize::MAX, Ordering::Release);
            drop(error.envelope.reject(ReplyError::Stopped));
        }
    }

    fn free(&self, worker: usize) {
        if worker == usize::MAX {
            return;
        }
        let mut state = self.lock();
        match state.queue.pop_front() {
            Some((envelope, slot)) => {
                drop(state);
                self.hand(worker, envelope, &slot);
            }
            None => state.idle.push(worker),
        }
    }
}
