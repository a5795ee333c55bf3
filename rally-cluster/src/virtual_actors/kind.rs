//! What a virtual-actor kind is: an ordinary actor built from its identity, and the messages
//! that may reach it from other members.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use rally_actor::sync::Mutex;
use std::time::Instant;

use rally_actor::{
    Actor, ActorId, ActorResult, Handler, RequestContext, Terminated, TerminationSink,
};
use rally_remote::RemoteMessage;
use rally_state::{Epoch, Fence, StateStore, StoreError};

use super::call::{BoxCall, Completion, Reply, TypedCall};
use super::core::LifeId;
use super::outcome::Refusal;
use super::transport::InboundReply;

/// A kind of virtual actor: an ordinary Rally actor, built by [`activate`](Self::activate)
/// from its identity when the first message for that identity reaches the member that owns
/// it, and deactivated (its [`Actor::stopped`] hook runs) when idle, when its member holds
/// too many, or when it moves to another member.
///
/// Its state is a [`State<T>`](super::State): loaded by the activation hook, written before
/// a reply that promises it is kept. A process can be killed at any instant, and then no
/// hook runs: what was written survives, what was only in memory does not.
///
/// # Example
///
/// ```
/// use rally::{Actor, ActorResult, Context, Handler, Message};
/// use rally::cluster::virtual_actors::{Activation, GrainMessages, State, VirtualActor};
/// use rally::remote::RemoteMessage;
/// use serde::{Deserialize, Serialize};
///
/// struct Counter { count: State<u64> }
///
/// impl Actor for Counter {}
///
/// impl VirtualActor for Counter {
///     const KIND: &'static str = "counter";
///     async fn activate(activation: Activation) -> ActorResult<Self> {
///         // What the last activation wrote, wherever it ran (0 the first time).
///         Ok(Counter { count: State::load(&activation).await? })
///     }
///     fn messages(table: &mut GrainMessages<Self>) {
///         table.add::<Add>();
///     }
/// }
///
/// #[derive(Serialize, Deserialize)]
/// struct Add(u64);
/// impl Message for Add { type Reply = u64; }
/// impl RemoteMessage for Add { const MANIFEST: &'static str = "example.counter.Add"; }
/// impl Handler<Add> for Counter {
///     async fn handle(&mut self, msg: Add, _: &mut Context<Self>) -> ActorResult<u64> {
///         *self.count += msg.0;
///         // The reply says the count is kept: write it first.
///         self.count.write().await?;
///         Ok(*self.count)
///     }
/// }
/// ```
pub trait VirtualActor: Actor {
    /// The kind's name, as members declare it (`ClusterConfig::kinds`) and the state store
    /// records it. Keep it when you rename the type.
    const KIND: &'static str;

    /// The activation hook: builds the actor for `activation.identity()` (loading its state,
    /// say). An error or a panic fails the messages waiting for this activation with
    /// [`AskError::ActivationFailed`](super::AskError::ActivationFailed) (not handled); the
    /// next message tries again.
    ///
    /// What the hook does before its first wait runs on the path of the message that
    /// activates it, where the member receives its grain messages (no task of its own, no
    /// hand-off to another thread): keep it short, await I/O, and move long computations to
    /// `tokio::task::spawn_blocking`.
    fn activate(activation: Activation) -> impl Future<Output = ActorResult<Self>> + Send;

    /// Adds every message type that may reach this kind from another member.
    fn messages(table: &mut GrainMessages<Self>);
}

/// One activation of a virtual actor (one *life* of its identity on a member): its identity, the
/// lease it acts under, its [`Fence`], and its state in the store. [`State<T>`](super::State)
/// keeps a typed state through it (the usual way); [`load`](Self::load) and
/// [`save`](Self::save) are the raw bytes underneath.
///
/// Every life has a fence of its own, `(epoch, life)`: the epoch of the lease it acts under
/// and its number under that lease. The store applies a save only while the epoch is held and
/// no later life of the identity has been fenced past it, so the saves of a life that outlived
/// its turn (its `stopped` hook ran past `deactivation-timeout`, its member was paused or cut
/// off) are refused with [`StoreError::StaleEpoch`]. Once its actor has stopped, a life's
/// handle refuses saves by itself.
///
/// # Example
///
/// ```
/// use rally::cluster::virtual_actors::Activation;
///
/// fn describe(activation: &Activation) -> String {
///     let fence = activation.fence();
///     format!("{}/{} at epoch {}, life {}", activation.kind(), activation.identity(), fence.epoch, fence.life)
/// }
/// ```
#[derive(Clone)]
pub struct Activation {
    kind: &'static str,
    owner: Arc<str>,
    identity: Arc<str>,
    scope: Arc<str>,
    fence: Fence,
    store: Arc<dyn StateStore>,
    life: Arc<LifeState>,
}

impl Activation {
    pub(crate) fn new(
        kind: &'static str,
        owner: Arc<str>,
        identity: Arc<str>,
        scope: Arc<str>,
        fence: Fence,
        store: Arc<dyn StateStore>,
        life: Arc<LifeState>,
    ) -> Self {
        Self {
            kind,
            owner,
            identity,
            scope,
            fence,
            store,
            life,
        }
    }

    /// The kind.
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// The member this activation runs on, as the store records owners
    /// (`address#incarnation`).
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The identity this activation is for.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The lease this activation acts under, as the state store names it: `#` and the shard's
    /// number for an identity leased with its shard, `=` and the identity for one leased alone.
    pub fn scope(&self) -> &str {
        &self.scope
    }

    /// The epoch of the lease this activation acts under. Every activation of the identity on
    /// another member, or after a lease was released, acts under a higher one.
    pub fn epoch(&self) -> Epoch {
        self.fence.epoch
    }

    /// This life's fence: the epoch and the life's number under it. It grows from one life of
    /// the identity to the next, on this member or any other.
    pub fn fence(&self) -> Fence {
        self.fence
    }

    /// The state last saved for this identity, by any activation on any member.
    ///
    /// # Errors
    ///
    /// The store's error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a load changes nothing.
    pub async fn load(&self) -> Result<Option<Vec<u8>>, StoreError> {
        self.store.load(self.kind, &self.identity).await
    }

    /// Saves the state, only while this life is the identity's current one: its lease is held
    /// under its epoch and no later life has been fenced past it. Returns once the store has it.
    ///
    /// # Errors
    ///
    /// [`StoreError::StaleEpoch`] if this life is no longer current (its lease was taken over
    /// or released, or a later life was fenced, or its actor has stopped): nothing is written.
    /// The store's error otherwise.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the save applied or not; this life counts as stopped only
    /// once no save of it is under way.
    pub async fn save(&self, state: &[u8]) -> Result<(), StoreError> {
        let Some(_saving) = self.life.begin_save() else {
            return Err(StoreError::StaleEpoch { fence: self.fence });
        };
        self.store
            .save(self.kind, &self.scope, self.fence, &self.identity, state)
            .await
    }
}

impl fmt::Debug for Activation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Activation")
            .field("kind", &self.kind)
            .field("identity", &self.identity)
            .field("scope", &self.scope)
            .field("fence", &self.fence)
            .finish_non_exhaustive()
    }
}

/// A life as its handles and its driver share it: whether its actor has stopped, and the saves
/// under way. The life is over (the driver is told, once) when its actor has stopped and no
/// save of it is under way.
///
/// It is also the actor's watcher (fixed at spawn): one allocation per life for all of it.
pub(crate) struct LifeState {
    /// Its id as a watcher.
    watcher: ActorId,
    saves: AtomicUsize,
    stopped: AtomicBool,
    /// Who is told that the life is over, and which life it is.
    over: Mutex<Option<Over>>,
}

/// Who hears that a life is over, and which life of which identity it is.
type Over = (Weak<dyn Completion>, Arc<str>, LifeId);

impl LifeState {
    /// `life` of `identity`, whose end `to` hears of ([`Completion::ended`]); `watcher` is its
    /// id as the actor's watcher.
    pub(crate) fn new(
        watcher: ActorId,
        to: Weak<dyn Completion>,
        identity: Arc<str>,
        life: LifeId,
    ) -> Self {
        Self {
            watcher,
            saves: AtomicUsize::new(0),
            stopped: AtomicBool::new(false),
            over: Mutex::new(Some((to, identity, life))),
        }
    }

    /// A life whose end nobody hears of (for tests of what its handles do).
    #[cfg(test)]
    pub(crate) fn unwatched(watcher: ActorId) -> Self {
        Self {
            watcher,
            saves: AtomicUsize::new(0),
            stopped: AtomicBool::new(false),
            over: Mutex::new(None),
        }
    }

    /// A save starts; `None` once the actor has stopped.
    fn begin_save(self: &Arc<Self>) -> Option<Saving> {
        self.saves.fetch_add(1, Ordering::SeqCst);
        let saving = Saving(Arc::clone(self));
        if self.stopped.load(Ordering::SeqCst) {
            return None; // `saving` drops, and the life may be over now
        }
        Some(saving)
    }

    /// Holds the life's end back, as a save under way does, until the hold is dropped: the
    /// core hears of the life's start before it hears of its end, even when the actor stops
    /// before the start is passed on.
    pub(crate) fn hold(self: &Arc<Self>) -> Saving {
        self.saves.fetch_add(1, Ordering::SeqCst);
        Saving(Arc::clone(self))
    }

    /// The life never ran (its hook failed): a handle the hook leaked refuses to save.
    pub(crate) fn refuse_saves(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.over.lock().take();
    }

    /// The actor has stopped.
    pub(crate) fn stopped(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        if self.saves.load(Ordering::SeqCst) == 0 {
            self.over();
        }
    }

    fn over(&self) {
        let over = self.over.lock().take();
        if let Some((to, identity, life)) = over
            && let Some(to) = to.upgrade()
        {
            to.ended(&identity, life);
        }
    }
}

impl TerminationSink for LifeState {
    fn watcher(&self) -> ActorId {
        self.watcher
    }

    fn notify(&self, _: Terminated) {
        self.stopped();
    }
}

/// A save under way (or a [`LifeState::hold`]).
pub(crate) struct Saving(Arc<LifeState>);

impl Drop for Saving {
    fn drop(&mut self) {
        if self.0.saves.fetch_sub(1, Ordering::SeqCst) == 1 && self.0.stopped.load(Ordering::SeqCst)
        {
            self.0.over();
        }
    }
}

/// The messages a kind accepts from other members; built by [`VirtualActor::messages`].
///
/// # Example
///
/// See [`VirtualActor`].
pub struct GrainMessages<K: VirtualActor> {
    decoders: HashMap<&'static str, DecodeFn<K>>,
}

/// Turns a payload from another member into a call.
type DecodeFn<K> = fn(&[u8], Incoming) -> Result<BoxCall<K>, (Refusal, Incoming)>;

/// What travels with a call from another member besides the message.
pub(crate) struct Incoming {
    pub(crate) reply: Option<InboundReply>,
    pub(crate) hops: u8,
    pub(crate) deadline: Option<Instant>,
    pub(crate) handed_over: bool,
    pub(crate) context: Option<RequestContext>,
}

impl<K: VirtualActor> GrainMessages<K> {
    pub(crate) fn of() -> Self {
        let mut table = Self {
            decoders: HashMap::new(),
        };
        K::messages(&mut table);
        table
    }

    /// Registers `M` under its manifest.
    ///
    /// # Panics
    ///
    /// If two message types of this kind share one manifest.
    pub fn add<M>(&mut self) -> &mut Self
    where
        M: RemoteMessage,
        K: Handler<M>,
    {
        let previous = self.decoders.insert(M::MANIFEST, decode::<K, M>);
        assert!(
            previous.is_none(),
            "manifest {:?} registered twice for kind {:?}",
            M::MANIFEST,
            K::KIND
        );
        self
    }

    /// The call a payload from another member stands for, or why there is none.
    pub(crate) fn decode(
        &self,
        manifest: &str,
        payload: &[u8],
        incoming: Incoming,
    ) -> Result<BoxCall<K>, (Refusal, Incoming)> {
        match self.decoders.get(manifest) {
            None => Err((Refusal::UnknownMessage(manifest.to_owned()), incoming)),
            Some(decode) => decode(payload, incoming),
        }
    }
}

impl<K: VirtualActor> fmt::Debug for GrainMessages<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GrainMessages")
            .field("kind", &K::KIND)
            .field("manifests", &self.decoders.keys().collect::<Vec<_>>())
            .finish()
    }
}

fn decode<K, M>(payload: &[u8], incoming: Incoming) -> Result<BoxCall<K>, (Refusal, Incoming)>
where
    K: VirtualActor + Handler<M>,
    M: RemoteMessage,
{
    let msg: M = match rally_remote::codec::decode(payload) {
        Ok(msg) => msg,
        Err(e) => {
            let refusal = Refusal::Undecodable(format!("decoding {}: {e}", M::MANIFEST));
            return Err((refusal, incoming));
        }
    };
    Ok(Box::new(TypedCall::<M> {
        msg,
        reply: incoming.reply.map_or(Reply::Tell, Reply::Remote),
        deadline: incoming.deadline,
        hops: incoming.hops,
        handed_over: incoming.handed_over,
        kind: K::KIND,
        context: incoming.context,
    }))
}
