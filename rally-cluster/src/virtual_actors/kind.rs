//! What a virtual-actor kind is: an ordinary actor built from its identity, and the messages
//! that may reach it from other members.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use rally_actor::{Actor, ActorRef, ActorResult, Handler, Message, ReplyError, ReplyTo};
use rally_remote::RemoteMessage;
use rally_state::{Epoch, Fence, StateStore, StoreError};

use super::error::GrainError;

/// A kind of virtual actor: an ordinary Rally actor, built by [`activate`](Self::activate)
/// from its identity when the first message for that identity reaches the member that owns
/// it, and deactivated (its [`Actor::stopped`] hook runs) when idle, when its member holds
/// too many, or when it moves to another member.
///
/// # Example
///
/// ```
/// use rally::{Actor, ActorResult, Context, Handler, Message};
/// use rally::cluster::virtual_actors::{Activation, GrainMessages, VirtualActor};
/// use rally::remote::RemoteMessage;
/// use serde::{Deserialize, Serialize};
///
/// struct Counter { activation: Activation, count: u64 }
///
/// impl Actor for Counter {
///     // The deactivation hook: save before going.
///     async fn stopped(&mut self, _: &mut Context<Self>) {
///         let _ = self.activation.save(&self.count.to_le_bytes()).await;
///     }
/// }
///
/// impl VirtualActor for Counter {
///     const KIND: &'static str = "counter";
///     async fn activate(activation: Activation) -> ActorResult<Self> {
///         let count = match activation.load().await? {
///             Some(bytes) => u64::from_le_bytes(bytes.as_slice().try_into()?),
///             None => 0,
///         };
///         Ok(Counter { activation, count })
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
///         self.count += msg.0;
///         Ok(self.count)
///     }
/// }
/// ```
pub trait VirtualActor: Actor {
    /// The kind's name, as members declare it (`ClusterConfig::kinds`) and the state store
    /// records it. Keep it when you rename the type.
    const KIND: &'static str;

    /// The activation hook: builds the actor for `activation.identity()` (loading its state,
    /// say). An error or a panic fails the messages waiting for this activation with
    /// [`GrainError::ActivationFailed`]; the next message tries again.
    ///
    /// What the hook does before its first wait runs on the path of the message that
    /// activates it, where the member receives its grain messages (no task of its own, no
    /// hand-off to another thread): keep it short, await I/O, and move long computations to
    /// `tokio::task::spawn_blocking`.
    fn activate(activation: Activation) -> impl Future<Output = ActorResult<Self>> + Send;

    /// Adds every message type that may reach this kind from another member.
    fn messages(table: &mut GrainMessages<Self>);
}

/// One activation of a virtual actor: its identity, the lease it acts under (its scope and
/// epoch, see [`Scope`](super::Scope)), and its state in the store, fenced by that lease.
///
/// # Example
///
/// ```
/// use rally::cluster::virtual_actors::Activation;
///
/// fn describe(activation: &Activation) -> String {
///     format!("{}/{} at epoch {}", activation.kind(), activation.identity(), activation.epoch())
/// }
/// ```
#[derive(Clone)]
pub struct Activation {
    kind: &'static str,
    owner: Arc<str>,
    identity: Arc<str>,
    scope: Arc<str>,
    epoch: Epoch,
    store: Arc<dyn StateStore>,
}

impl Activation {
    pub(crate) fn new(
        kind: &'static str,
        owner: Arc<str>,
        identity: Arc<str>,
        (scope, epoch): (Arc<str>, Epoch),
        store: Arc<dyn StateStore>,
    ) -> Self {
        Self {
            kind,
            owner,
            identity,
            scope,
            epoch,
            store,
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
    /// another member, or after a lease was released, acts under a higher one; activations of
    /// the identity one after another on this member, under one lease, share it.
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// The state last saved for this identity, by any activation on any member.
    ///
    /// # Errors
    ///
    /// The store's error.
    pub async fn load(&self) -> Result<Option<Vec<u8>>, StoreError> {
        self.store.load(self.kind, &self.identity).await
    }

    /// Saves the state, only while this activation's lease is held under its epoch.
    ///
    /// # Errors
    ///
    /// [`StoreError::StaleEpoch`] if the lease was taken over or released (this activation
    /// outlived its member's ownership): nothing is written.
    pub async fn save(&self, state: &[u8]) -> Result<(), StoreError> {
        self.store
            .save(
                self.kind,
                &self.scope,
                // Lives are not numbered yet: every life under one lease shares its fence.
                Fence {
                    epoch: self.epoch,
                    life: 0,
                },
                &self.identity,
                state,
            )
            .await
    }
}

impl fmt::Debug for Activation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Activation")
            .field("kind", &self.kind)
            .field("identity", &self.identity)
            .field("scope", &self.scope)
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
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

/// Turns a payload into a call whose reply is encoded for the wire.
pub(crate) type DecodeFn<K> =
    fn(&[u8], Envelope) -> Result<Box<dyn Call<K>>, (GrainError, Envelope)>;

/// Where a reply encoded for the wire goes.
pub(crate) type WireReply = Box<dyn FnOnce(Result<Vec<u8>, GrainError>) + Send>;

/// What travels with a call besides the message.
pub(crate) struct Envelope {
    pub(crate) reply: WireReply,
    pub(crate) hops: u8,
    pub(crate) deadline: Option<Instant>,
    /// Handed over by the identity's previous owner (see [`Call::handed_over`]).
    pub(crate) handed_over: bool,
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

    pub(crate) fn decode(
        &self,
        manifest: &str,
        payload: &[u8],
        envelope: Envelope,
    ) -> Result<Box<dyn Call<K>>, (GrainError, Envelope)> {
        match self.decoders.get(manifest) {
            None => Err((GrainError::UnknownMessage(manifest.to_owned()), envelope)),
            Some(decode) => decode(payload, envelope),
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

fn decode<K, M>(
    payload: &[u8],
    envelope: Envelope,
) -> Result<Box<dyn Call<K>>, (GrainError, Envelope)>
where
    K: VirtualActor + Handler<M>,
    M: RemoteMessage,
{
    let msg: M = match postcard::from_bytes(payload) {
        Ok(msg) => msg,
        Err(e) => {
            let error = GrainError::Undeliverable(format!("decoding {}: {e}", M::MANIFEST));
            return Err((error, envelope));
        }
    };
    let wire = envelope.reply;
    Ok(Box::new(TypedCall::<M> {
        msg,
        reply: Box::new(move |result: Result<M::Reply, GrainError>| {
            wire(result.and_then(|reply| {
                postcard::to_allocvec(&reply)
                    .map_err(|e| GrainError::Undeliverable(format!("encoding the reply: {e}")))
            }));
        }),
        hops: envelope.hops,
        deadline: envelope.deadline,
        handed_over: envelope.handed_over,
    }))
}

/// A message on its way to an activation, with its reply destination, erased over its type.
pub(crate) trait Call<K: Actor>: Send {
    /// Hands the message to the activation (its mailbox counts it until it is handled).
    fn deliver(self: Box<Self>, actor: &ActorRef<K>);
    /// Fails the call.
    fn fail(self: Box<Self>, error: GrainError);
    /// The message part of a request to another member, one more hop (the call stays, to
    /// take the reply with [`answer`](Self::answer), or to be routed again).
    fn request(&mut self) -> Result<Outgoing, GrainError>;
    /// Takes another member's reply bytes (or why there are none) to this call.
    fn answer(self: Box<Self>, result: Result<Vec<u8>, GrainError>);
    /// Forwards taken so far.
    fn hops(&self) -> u8;
    /// Takes back the last hop: the member it went to did not take the call.
    fn unhop(&mut self);
    /// When the caller stops waiting for the reply (`None` for a `tell`).
    fn deadline(&self) -> Option<Instant>;
    /// Whether the identity's previous owner handed this call over at the end of a move: it
    /// reached the previous owner before anything that reached this member directly, so it
    /// goes first.
    fn handed_over(&self) -> bool;
}

/// The message part of a request to another member.
#[derive(Debug)]
pub(crate) struct Outgoing {
    pub(crate) manifest: &'static str,
    pub(crate) payload: Vec<u8>,
    pub(crate) hops: u8,
    pub(crate) deadline: Option<Instant>,
}

pub(crate) type TypedReply<R> = Box<dyn FnOnce(Result<R, GrainError>) + Send>;

/// A call of one message type.
pub(crate) struct TypedCall<M: Message> {
    pub(crate) msg: M,
    pub(crate) reply: TypedReply<M::Reply>,
    pub(crate) hops: u8,
    pub(crate) deadline: Option<Instant>,
    pub(crate) handed_over: bool,
}

impl<K, M> Call<K> for TypedCall<M>
where
    K: Handler<M>,
    M: RemoteMessage,
{
    fn deliver(self: Box<Self>, actor: &ActorRef<K>) {
        let TypedCall { msg, reply, .. } = *self;
        let slot = Arc::new(std::sync::Mutex::new(Some(reply)));
        let on_reply = Arc::clone(&slot);
        let sent = actor.send_with(
            msg,
            ReplyTo::callback(move |result: Result<M::Reply, ReplyError>| {
                if let Some(reply) = take(&on_reply) {
                    reply(result.map_err(reply_error));
                }
            }),
        );
        if sent.is_err() {
            if let Some(reply) = take(&slot) {
                reply(Err(GrainError::Failed(
                    "the activation stopped before taking the message".into(),
                )));
            }
        }
    }

    fn fail(self: Box<Self>, error: GrainError) {
        (self.reply)(Err(error));
    }

    fn request(&mut self) -> Result<Outgoing, GrainError> {
        let payload = postcard::to_allocvec(&self.msg)
            .map_err(|e| GrainError::Undeliverable(format!("encoding {}: {e}", M::MANIFEST)))?;
        self.hops = self.hops.saturating_add(1);
        Ok(Outgoing {
            manifest: M::MANIFEST,
            payload,
            hops: self.hops,
            deadline: self.deadline,
        })
    }

    fn answer(self: Box<Self>, result: Result<Vec<u8>, GrainError>) {
        (self.reply)(result.and_then(|bytes| decode_reply::<M>(&bytes)));
    }

    fn hops(&self) -> u8 {
        self.hops
    }

    fn unhop(&mut self) {
        self.hops = self.hops.saturating_sub(1);
    }

    fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    fn handed_over(&self) -> bool {
        self.handed_over
    }
}

/// The reply to an `M`, from the bytes the member that handled it sent.
pub(super) fn decode_reply<M: Message>(bytes: &[u8]) -> Result<M::Reply, GrainError>
where
    M::Reply: serde::de::DeserializeOwned,
{
    postcard::from_bytes(bytes)
        .map_err(|e| GrainError::Undeliverable(format!("decoding the reply: {e}")))
}

/// Takes the reply destination once: the runtime calls the callback at most once, but a
/// refused send hands the message back instead, and either path may come first.
fn take<R>(slot: &std::sync::Mutex<Option<TypedReply<R>>>) -> Option<TypedReply<R>> {
    slot.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take()
}

fn reply_error(error: ReplyError) -> GrainError {
    match error {
        ReplyError::Failed(why) => GrainError::Failed(why),
        ReplyError::Stopped => GrainError::Failed("the activation stopped".into()),
        ReplyError::MailboxFull => GrainError::Failed("the activation's mailbox is full".into()),
        ReplyError::Undeliverable(why) => GrainError::Undeliverable(why),
        ReplyError::OutcomeUnknown(why) => GrainError::OutcomeUnknown(why),
        other => GrainError::Failed(other.to_string()),
    }
}
