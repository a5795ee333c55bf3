//! Which message types may cross the network, under which stable names, to which actors.
//!
//! Only registered types are ever decoded: a frame naming an unknown manifest is dropped and
//! counted, never turned into a value.

use std::any::{Any, TypeId};
use std::sync::Arc;

use bytes::BytesMut;
use rally_actor::{
    Actor, ActorRef, Envelope, ErasedReply, Handler, Message, Origin, Pool, ReplyError, ReplyTo,
    RequestContext,
};

use rustc_hash::FxHashMap;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::codec;
use crate::outbound::ReplyRoute;

/// A message that can be sent to an actor on another node.
///
/// The manifest is the message's stable name on the wire: keep it when you rename the type.
///
/// # Example
///
/// ```
/// use rally::Message;
/// use rally::remote::RemoteMessage;
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct Ping(String);
/// impl Message for Ping { type Reply = String; }
/// impl RemoteMessage for Ping { const MANIFEST: &'static str = "example.Ping"; }
///
/// let ping = Ping("hit".into());
/// assert_eq!(ping.0, "hit");
/// assert_eq!(Ping::MANIFEST, "example.Ping");
/// ```
pub trait RemoteMessage:
    Message<Reply: Serialize + DeserializeOwned> + Serialize + DeserializeOwned
{
    /// The stable name of this type on the wire.
    const MANIFEST: &'static str;
}

/// An actor type that can be reached from other nodes: it lists the messages it accepts.
///
/// # Example
///
/// ```
/// use rally::{Actor, ActorResult, Context, Handler, Message};
/// use rally::remote::{MessageTable, RemoteActor, RemoteMessage};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct Ping;
/// impl Message for Ping { type Reply = (); }
/// impl RemoteMessage for Ping { const MANIFEST: &'static str = "example.Ping"; }
///
/// struct Echo;
/// impl Actor for Echo {}
/// impl Handler<Ping> for Echo {
///     async fn handle(&mut self, _: Ping, _: &mut Context<Self>) -> ActorResult<()> { Ok(()) }
/// }
/// impl RemoteActor for Echo {
///     fn messages(table: &mut MessageTable<Self>) {
///         table.add::<Ping>();
///     }
/// }
///
/// # #[tokio::main] async fn main() {
/// // An ordinary actor: remote-capable only adds the table.
/// let system = rally::ActorSystem::new("doc");
/// let echo = system.spawn(Echo).unwrap();
/// assert_eq!(echo.ask(Ping, std::time::Duration::from_secs(1)).await, Ok(()));
/// # }
/// ```
pub trait RemoteActor: Actor {
    /// Adds every message type this actor accepts from other nodes.
    fn messages(table: &mut MessageTable<Self>);
}

/// Why a payload could not be decoded or delivered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DeliverError {
    /// The manifest is not registered for the target actor.
    #[error("manifest {0:?} is not registered for this actor")]
    UnknownManifest(String),
    /// The payload is not a valid encoding of the registered type.
    #[error("payload of {manifest:?} failed to decode: {reason}")]
    Decode {
        /// The manifest of the payload.
        manifest: String,
        /// The decoder's complaint.
        reason: String,
    },
    /// The actor has stopped or its mailbox refused the message.
    #[error("the actor did not take the message: {0}")]
    Undelivered(String),
}

type EncodeFn = fn(&(dyn Any + Send), &mut BytesMut) -> Result<(), postcard::Error>;
type CompleteFn = fn(ErasedReply, Result<&[u8], ReplyError>);
type DeliverFn<A> = fn(
    &[u8],
    &ActorRef<A>,
    Option<ReplyRoute>,
    &Origin,
    Option<RequestContext>,
) -> Result<(), DeliverError>;

/// How to encode one message type and decode its reply (the sending side).
pub(crate) struct Outgoing {
    pub(crate) manifest: &'static str,
    pub(crate) encode: EncodeFn,
    pub(crate) complete: CompleteFn,
}

/// The messages an actor type accepts from other nodes; built by [`RemoteActor::messages`].
pub struct MessageTable<A: Actor> {
    outgoing: FxHashMap<TypeId, Outgoing>,
    incoming: FxHashMap<&'static str, DeliverFn<A>>,
    /// The same messages delivered to a [`Pool`] of `A`, which handles every message `A`
    /// handles: what makes `Pool<A>` a [`RemoteActor`] whenever `A` is one.
    pool_incoming: FxHashMap<&'static str, DeliverFn<Pool<A>>>,
}

/// A pool of remote-capable actors is itself remote-capable, with the same messages: expose
/// it like any actor and its routees answer askers on other nodes.
///
/// # Example
///
/// ```
/// use rally::{Actor, ActorResult, Context, Handler, Message, Pool};
/// use rally::remote::{MessageTable, RemoteActor, RemoteMessage};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct Square(u64);
/// impl Message for Square { type Reply = u64; }
/// impl RemoteMessage for Square { const MANIFEST: &'static str = "example.Square"; }
///
/// struct Worker;
/// impl Actor for Worker {}
/// impl Handler<Square> for Worker {
///     async fn handle(&mut self, n: Square, _: &mut Context<Self>) -> ActorResult<u64> { Ok(n.0 * n.0) }
/// }
/// impl RemoteActor for Worker {
///     fn messages(table: &mut MessageTable<Self>) { table.add::<Square>(); }
/// }
///
/// // `Pool<Worker>` is a RemoteActor: `node.expose("squares", &pool)` on one node,
/// // `node.lookup::<Pool<Worker>>(&address, "squares")` on another.
/// fn exposable<A: RemoteActor>() {}
/// exposable::<Pool<Worker>>();
/// ```
impl<A: RemoteActor> RemoteActor for Pool<A> {
    fn messages(table: &mut MessageTable<Self>) {
        let routee = MessageTable::<A>::of();
        table.outgoing = routee.outgoing;
        table.incoming = routee.pool_incoming;
    }
}

impl<A: Actor> MessageTable<A> {
    /// The table of `A`, from its [`RemoteActor`] implementation.
    pub(crate) fn of() -> Self
    where
        A: RemoteActor,
    {
        let mut table = Self {
            outgoing: FxHashMap::default(),
            incoming: FxHashMap::default(),
            pool_incoming: FxHashMap::default(),
        };
        A::messages(&mut table);
        table
    }

    /// Registers `M` under its manifest.
    ///
    /// # Panics
    ///
    /// If two message types of this actor share one manifest (a programming error that would
    /// make the wire ambiguous).
    pub fn add<M>(&mut self) -> &mut Self
    where
        M: RemoteMessage,
        A: Handler<M>,
    {
        let previous = self.incoming.insert(M::MANIFEST, deliver::<A, M>);
        self.pool_incoming
            .insert(M::MANIFEST, deliver::<Pool<A>, M>);
        assert!(
            previous.is_none(),
            "manifest {:?} registered twice for one actor type",
            M::MANIFEST
        );
        self.outgoing.insert(
            TypeId::of::<M>(),
            Outgoing {
                manifest: M::MANIFEST,
                encode: encode::<M>,
                complete: complete::<M>,
            },
        );
        self
    }

    pub(crate) fn outgoing(&self, type_id: TypeId) -> Option<&Outgoing> {
        self.outgoing.get(&type_id)
    }

    /// The manifests of the messages this table sends.
    pub(crate) fn manifests(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.outgoing.values().map(|outgoing| outgoing.manifest)
    }
}

fn encode<M: RemoteMessage>(
    msg: &(dyn Any + Send),
    out: &mut BytesMut,
) -> Result<(), postcard::Error> {
    let msg = msg
        .downcast_ref::<M>()
        .expect("the table maps M's TypeId to M's encoder");
    codec::encode_into(msg, out)
}

/// Decodes the reply to an `M` and hands it to the asker, typed (no box on the way).
fn complete<M: RemoteMessage>(reply: ErasedReply, payload: Result<&[u8], ReplyError>) {
    let value = payload.and_then(|bytes| {
        codec::decode::<M::Reply>(bytes)
            .map_err(|e| ReplyError::Undeliverable(format!("reply failed to decode: {e}")))
    });
    match reply.downcast::<M::Reply>() {
        Ok(typed) => typed.send(value),
        // A destination of another type (never made by `RemoteRef`): the erased path says so.
        Err(other) => other.send(value.map(|v| Box::new(v) as Box<dyn Any + Send>)),
    }
}

fn deliver<A, M>(
    payload: &[u8],
    target: &ActorRef<A>,
    reply: Option<ReplyRoute>,
    origin: &Origin,
    context: Option<RequestContext>,
) -> Result<(), DeliverError>
where
    A: Handler<M>,
    M: RemoteMessage,
{
    let msg: M = codec::decode(payload).map_err(|e| DeliverError::Decode {
        manifest: M::MANIFEST.to_owned(),
        reason: e.to_string(),
    })?;
    let typed_reply = match reply {
        Some(route) => {
            ReplyTo::callback(move |result: Result<M::Reply, ReplyError>| route.send(result))
        }
        None => ReplyTo::ignore(),
    };
    target
        .deliver(Envelope::with_origin(msg, typed_reply, origin.clone()).in_context(context))
        .map_err(|e| DeliverError::Undelivered(format!("{:?}", e.reason)))
}

/// A local actor reachable from other nodes, with its type erased.
pub(crate) trait Exposed: Send + Sync + 'static {
    /// Decodes and delivers one message from the node `origin`; the reply (already encoded)
    /// goes to `reply`.
    fn deliver(
        &self,
        manifest: &str,
        payload: &[u8],
        reply: Option<ReplyRoute>,
        origin: &Origin,
        context: Option<RequestContext>,
    ) -> Result<(), DeliverError>;
    /// Registers a watcher (see `rally_actor::TerminationSink`).
    fn watch(&self, watcher: Arc<dyn rally_actor::TerminationSink>);
    /// Removes a watcher.
    fn unwatch(&self, watcher: rally_actor::ActorId);
    /// Asks the actor to stop.
    fn stop(&self);
}

pub(crate) struct ExposedActor<A: Actor> {
    pub(crate) actor: ActorRef<A>,
    pub(crate) table: Arc<MessageTable<A>>,
}

impl<A: Actor> Exposed for ExposedActor<A> {
    fn deliver(
        &self,
        manifest: &str,
        payload: &[u8],
        reply: Option<ReplyRoute>,
        origin: &Origin,
        context: Option<RequestContext>,
    ) -> Result<(), DeliverError> {
        let deliver = self
            .table
            .incoming
            .get(manifest)
            .ok_or_else(|| DeliverError::UnknownManifest(manifest.to_owned()))?;
        deliver(payload, &self.actor, reply, origin, context)
    }

    fn watch(&self, watcher: Arc<dyn rally_actor::TerminationSink>) {
        self.actor.watch_with(watcher);
    }

    fn unwatch(&self, watcher: rally_actor::ActorId) {
        self.actor.unwatch_with(watcher);
    }

    fn stop(&self) {
        self.actor.stop();
    }
}

/// The reply of a remote ask, decoded without naming its type.
pub(crate) enum PendingReply {
    /// An actor's ask: the reply is decoded as its message's reply type.
    Actor {
        complete: CompleteFn,
        reply: ErasedReply,
    },
    /// A grain ask (see `grain`), waited for until `deadline`.
    Grain {
        ask: Box<dyn crate::grain::GrainAsk>,
        deadline: Option<std::time::Instant>,
    },
}

impl rally_wire::Waiting for PendingReply {
    fn is_abandoned(&self) -> bool {
        match self {
            Self::Actor { reply, .. } => reply.is_abandoned(),
            Self::Grain { ask, deadline } => crate::grain::abandoned(ask.as_ref(), *deadline),
        }
    }
}

impl PendingReply {
    /// A reply frame answered it.
    pub(crate) fn replied(self, status: rally_wire::ReplyStatus, payload: &[u8]) {
        match self {
            Self::Actor { complete, reply } => complete(reply, reply_result(status, payload)),
            Self::Grain { ask, .. } => crate::grain::replied(ask, status, payload),
        }
    }

    /// No reply will come.
    pub(crate) fn failed(self, error: ReplyError) {
        match self {
            Self::Actor { complete, reply } => complete(reply, Err(error)),
            Self::Grain { ask, .. } => crate::grain::failed(ask, &error),
        }
    }
}

/// An actor's reply, from a reply frame's status and payload.
fn reply_result(status: rally_wire::ReplyStatus, payload: &[u8]) -> Result<&[u8], ReplyError> {
    use rally_wire::ReplyStatus;
    match status {
        ReplyStatus::Ok => Ok(payload),
        ReplyStatus::RecipientGone => Err(ReplyError::Stopped),
        ReplyStatus::HandlerFailed => {
            Err(ReplyError::Failed("the remote handler failed".to_owned()))
        }
        ReplyStatus::UnknownRecipient => Err(ReplyError::Undeliverable(
            "no actor is exposed under that name on the remote node".to_owned(),
        )),
        ReplyStatus::Rejected => Err(ReplyError::Rejected(
            String::from_utf8_lossy(payload).into_owned(),
        )),
        other => Err(ReplyError::Undeliverable(format!(
            "the remote node answered {other:?}"
        ))),
    }
}

impl<A: Actor> std::fmt::Debug for MessageTable<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageTable")
            .field("manifests", &self.incoming.keys().collect::<Vec<_>>())
            .finish()
    }
}
