//! A router that is an ordinary actor: [`Pool`] spawns its routees as its own children and
//! forwards each message to one of them with the sender's reply destination, so an `ask`
//! through the pool gets the routee's answer.
//!
//! Because it is an actor, a pool is made like any other: under the system, or as the child
//! of a supervisor (and restarted with it: a restart stops the routees and `started` spawns
//! fresh ones). Its handle is an ordinary `ActorRef<Pool<A>>`: cloned freely and used from
//! many tasks at once, watched, looked up by name.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::sync::Mutex;
use crate::{
    Actor, ActorRef, ActorResult, Context, DeliveryError, Envelope, Handler, Message, Props,
    ReplyError, ReplyTo, Routing, Undelivered,
};

/// A pool of `size` routees of type `A`, as an actor. Every message `A` handles, the pool
/// handles by forwarding.
///
/// Routing: [`Routing::RoundRobin`], [`Routing::Random`] or [`Routing::SmallestMailbox`],
/// which here means the routee with the fewest messages the pool has handed it and not yet
/// seen finished (the one in hand included, so a busy routee with an empty mailbox is passed
/// by); keyed routing needs a key per message, which [`Router`](crate::Router) offers.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use rally::{Actor, ActorResult, ActorSystem, Context, Handler, Message, Pool, Props, Routing};
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
/// let pool = system
///     .spawn(Props::new(Pool::new(3, Routing::RoundRobin, || Props::new(Square))).named("squares"))
///     .unwrap();
/// // An ordinary ActorRef: clone it into as many tasks as you like.
/// let tasks: Vec<_> = (1..=4u64)
///     .map(|i| {
///         let pool = pool.clone();
///         tokio::spawn(async move { pool.ask(N(i), Duration::from_secs(1)).await })
///     })
///     .collect();
/// for (i, task) in (1..=4u64).zip(tasks) {
///     assert_eq!(task.await.unwrap(), Ok(i * i));
/// }
/// system.shutdown().await.unwrap();
/// # }
/// ```
pub struct Pool<A: Actor> {
    size: usize,
    routing: Routing,
    props: Box<dyn FnMut() -> Props<A> + Send>,
    routees: Vec<ActorRef<A>>,
    /// Per routee, messages handed over and not yet finished (kept for `SmallestMailbox`).
    outstanding: Vec<Arc<AtomicUsize>>,
    next: usize,
}

/// Counts a message as finished when its reply destination is used or dropped.
struct Finished(Arc<AtomicUsize>);

impl Drop for Finished {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl<A: Actor> std::fmt::Debug for Pool<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("size", &self.size)
            .field("routing", &self.routing)
            .field("routees", &self.routees.len())
            .finish_non_exhaustive()
    }
}

impl<A: Actor> Pool<A> {
    /// A pool of `size` routees (at least 1) made from `props`, spawned when the pool starts.
    ///
    /// # Panics
    ///
    /// With [`Routing::ConsistentHashing`]: a pool has no key per message to hash (a
    /// [`Router`](crate::Router) has), and routing some other way without saying so would
    /// break what the caller asked for.
    pub fn new(
        size: usize,
        routing: Routing,
        props: impl FnMut() -> Props<A> + Send + 'static,
    ) -> Self {
        assert!(
            routing != Routing::ConsistentHashing,
            "Pool::new: a pool cannot route by Routing::ConsistentHashing (it has no key per \
             message); use a Router for keyed routing"
        );
        Self {
            size: size.max(1),
            routing,
            props: Box::new(props),
            routees: Vec::new(),
            outstanding: Vec::new(),
            next: 0,
        }
    }

    /// The index of the routee for the next message.
    fn pick(&mut self) -> usize {
        let n = self.routees.len();
        match self.routing {
            Routing::Random => random_below(n),
            Routing::SmallestMailbox => (0..n)
                .min_by_key(|&i| self.outstanding[i].load(Ordering::Acquire))
                .unwrap_or(0),
            _ => {
                self.next = self.next.wrapping_add(1);
                self.next % n
            }
        }
    }
}

impl<A: Actor> Actor for Pool<A> {
    async fn started(&mut self, ctx: &mut Context<Self>) -> ActorResult<()> {
        // After a restart the old routees were stopped with the pool's other children.
        self.routees.clear();
        self.outstanding.clear();
        for _ in 0..self.size {
            let routee = ctx.spawn((self.props)())?;
            self.routees.push(routee);
            self.outstanding.push(Arc::new(AtomicUsize::new(0)));
        }
        Ok(())
    }
}

impl<A, M> Handler<M> for Pool<A>
where
    A: Handler<M>,
    M: Message,
{
    async fn handle(&mut self, msg: M, ctx: &mut Context<Self>) -> ActorResult<M::Reply> {
        let reply = ctx
            .reply_later::<M::Reply>()
            .expect("a handler's reply destination is there until taken");
        if self.routing == Routing::SmallestMailbox {
            return self.forward_counted(msg, reply, ctx);
        }
        // A forward, not a new send: the message keeps the context it came with.
        let mut envelope = Envelope::new(msg, reply).in_context(ctx.request_context());
        // A routee its supervisor stopped leaves the pool; the message goes to the next one.
        while !self.routees.is_empty() {
            let routee = self.pick();
            match self.routees[routee].deliver(envelope) {
                Ok(()) => return ctx.deferred(),
                Err(DeliveryError {
                    envelope: back,
                    reason: Undelivered::Stopped,
                }) => {
                    self.remove(routee);
                    envelope = back;
                }
                Err(error) => {
                    let why = match error.reason {
                        Undelivered::Full => ReplyError::MailboxFull,
                        Undelivered::Refused(why) => ReplyError::Undeliverable(why),
                        _ => ReplyError::Stopped,
                    };
                    drop(error.envelope.reject(why));
                    return ctx.deferred();
                }
            }
        }
        drop(envelope.reject(ReplyError::Stopped));
        ctx.deferred()
    }
}

impl<A: Actor> Pool<A> {
    fn remove(&mut self, routee: usize) {
        self.routees.swap_remove(routee);
        if routee < self.outstanding.len() {
            self.outstanding.swap_remove(routee);
        }
    }

    /// Forwards to the routee with the fewest unfinished messages, counting this one until its
    /// reply destination is used or dropped.
    fn forward_counted<M>(
        &mut self,
        msg: M,
        reply: ReplyTo<M::Reply>,
        ctx: &mut Context<Self>,
    ) -> ActorResult<M::Reply>
    where
        A: Handler<M>,
        M: Message,
    {
        let mut msg = msg;
        let mut reply = Some(reply);
        while let Some(original) = reply.take() {
            if self.routees.is_empty() {
                drop(msg);
                original.send(Err(ReplyError::Stopped));
                return ctx.deferred();
            }
            let routee = self.pick();
            let counter = self.outstanding[routee].clone();
            counter.fetch_add(1, Ordering::AcqRel);
            let finished = Finished(counter);
            // Shared, so that the original destination can be taken back if delivery fails.
            let slot = Arc::new(Mutex::new(Some(original)));
            let answer = slot.clone();
            let counted = ReplyTo::callback(move |result| {
                drop(finished);
                if let Some(original) = answer.lock().take() {
                    original.send(result);
                }
            });
            let envelope = Envelope::new(msg, counted).in_context(ctx.request_context());
            match self.routees[routee].deliver(envelope) {
                Ok(()) => return ctx.deferred(),
                Err(error) => {
                    let (back, wrapper) = error.envelope.into_parts();
                    // Dropping the unused wrapper counts the attempt as finished.
                    drop(wrapper);
                    msg = *back
                        .downcast::<M>()
                        .expect("the pool built this envelope from an M");
                    let original = slot
                        .lock()
                        .take()
                        .expect("an undelivered wrapper was never called");
                    match error.reason {
                        // A routee its supervisor stopped leaves the pool; the next one is tried.
                        Undelivered::Stopped => {
                            self.remove(routee);
                            reply = Some(original);
                        }
                        Undelivered::Full => original.send(Err(ReplyError::MailboxFull)),
                        Undelivered::Refused(why) => {
                            original.send(Err(ReplyError::Undeliverable(why)));
                        }
                    }
                }
            }
        }
        ctx.deferred()
    }
}

fn random_below(n: usize) -> usize {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_usize(n);
    (hasher.finish() % n as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Idle;
    impl Actor for Idle {}

    #[test]
    #[should_panic(expected = "use a Router for keyed routing")]
    fn a_pool_refuses_keyed_routing_instead_of_routing_otherwise() {
        let _ = Pool::new(2, Routing::ConsistentHashing, || Props::new(Idle));
    }
}
