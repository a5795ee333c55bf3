//! How a request for a virtual actor reaches another member: over Rally's own connections, or
//! through an in-process network for tests.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use rally_actor::{Actor, ActorRef, ActorResult, Context, Handler, Message, ReplyError, ReplyTo};
use rally_remote::{MessageTable, RemoteActor, RemoteMessage, RemoteNode};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

use super::error::GrainError;
use super::host::Inner;
use super::kind::{Outgoing, WireReply};
use crate::member::MemberId;

/// The name under which each member's endpoint for virtual-actor requests is exposed.
pub(crate) const ENDPOINT: &str = "rally.cluster.grains";

/// How long the in-memory network waits for a member's runtime to attach: 20 × 10 ms.
const MEMORY_ATTACH_WAITS: u32 = 20;
const MEMORY_ATTACH_PAUSE: Duration = Duration::from_millis(10);

/// A message for a virtual actor on its way to another member.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct GrainRequest {
    pub(crate) kind: Cow<'static, str>,
    #[serde(with = "wire_str")]
    pub(crate) identity: Arc<str>,
    pub(crate) manifest: Cow<'static, str>,
    #[serde(with = "wire_bytes")]
    pub(crate) payload: Vec<u8>,
    pub(crate) hops: u8,
    /// Milliseconds the sender still waits for a reply; none for a tell.
    pub(crate) wait_ms: Option<u64>,
    pub(crate) handover: Handover,
}

/// A request's part in a move: the previous owner of an identity hands what reached it during
/// the move to the next owner, then says it is done, then releases the identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Handover {
    /// An ordinary request.
    No,
    /// A call handed over: it goes before the calls that reached the next owner directly.
    Call,
    /// Every call handed over was sent before this one (requests between two members arrive
    /// in order). Answered on arrival; the previous owner releases the identity after it.
    Done,
}

impl Message for GrainRequest {
    type Reply = Result<ReplyBytes, GrainError>;
}

/// A reply's bytes, as one byte string on the wire.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct ReplyBytes(#[serde(with = "wire_bytes")] pub(crate) Vec<u8>);

/// Bytes as one byte string on the wire: serde's default for a `Vec<u8>` is a sequence,
/// written and read one element at a time.
mod wire_bytes {
    use std::fmt;

    use serde::{Deserializer, Serializer, de};

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(bytes)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<u8>, D::Error> {
        deserializer.deserialize_byte_buf(Bytes)
    }

    struct Bytes;

    impl de::Visitor<'_> for Bytes {
        type Value = Vec<u8>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a byte string")
        }

        fn visit_bytes<E: de::Error>(self, bytes: &[u8]) -> Result<Vec<u8>, E> {
            Ok(bytes.to_vec())
        }

        fn visit_byte_buf<E: de::Error>(self, bytes: Vec<u8>) -> Result<Vec<u8>, E> {
            Ok(bytes)
        }
    }
}

/// A shared string as a plain string on the wire, read straight into its shared form (one
/// allocation).
mod wire_str {
    use std::fmt;
    use std::sync::Arc;

    use serde::{Deserializer, Serializer, de};

    pub(super) fn serialize<S: Serializer>(s: &Arc<str>, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Arc<str>, D::Error> {
        deserializer.deserialize_str(Str)
    }

    struct Str;

    impl de::Visitor<'_> for Str {
        type Value = Arc<str>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string")
        }

        fn visit_str<E: de::Error>(self, s: &str) -> Result<Arc<str>, E> {
            Ok(Arc::from(s))
        }
    }
}

impl RemoteMessage for GrainRequest {
    const MANIFEST: &'static str = "rally.cluster.GrainRequest";
}

impl GrainRequest {
    pub(crate) fn new(kind: &'static str, identity: &Arc<str>, outgoing: Outgoing) -> Self {
        Self {
            kind: Cow::Borrowed(kind),
            identity: Arc::clone(identity),
            manifest: Cow::Borrowed(outgoing.manifest),
            payload: outgoing.payload,
            hops: outgoing.hops,
            wait_ms: outgoing.deadline.map(wait_ms),
            handover: Handover::No,
        }
    }

    /// The end of a handover of `identity`, answered by the next owner within `wait`.
    pub(crate) fn handover_done(kind: &'static str, identity: &Arc<str>, wait: Duration) -> Self {
        Self {
            kind: Cow::Borrowed(kind),
            identity: Arc::clone(identity),
            manifest: Cow::Borrowed(""),
            payload: Vec::new(),
            hops: 1,
            wait_ms: Some(wait_ms(crate::virtual_actors::now() + wait)),
            handover: Handover::Done,
        }
    }

    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.wait_ms
            .map(|ms| crate::virtual_actors::now() + Duration::from_millis(ms))
    }
}

fn wait_ms(deadline: Instant) -> u64 {
    u64::try_from(
        deadline
            .saturating_duration_since(crate::virtual_actors::now())
            .as_millis(),
    )
    .unwrap_or(u64::MAX)
    .max(1)
}

/// What waits to reach one member of an in-process network, in the order it was sent.
type MemoryQueue = mpsc::UnboundedSender<(GrainRequest, WireReply)>;

/// The in-process network that members started with
/// [`VirtualActorsBuilder::start_in_memory`](super::VirtualActorsBuilder::start_in_memory) share.
///
/// # Example
///
/// ```
/// use rally::cluster::virtual_actors::GrainNetwork;
///
/// let network = GrainNetwork::new();
/// let same = network.clone();
/// ```
#[derive(Debug, Clone, Default)]
pub struct GrainNetwork {
    /// Each member's runtime (requests to one that is gone get `Stopped`).
    members: Arc<Mutex<HashMap<MemberId, Weak<Inner>>>>,
    /// One queue per destination, drained by one task: requests between two members arrive
    /// in the order they were sent, as over a connection.
    queues: Arc<Mutex<HashMap<MemberId, MemoryQueue>>>,
}

impl GrainNetwork {
    /// An empty network.
    pub fn new() -> Self {
        Self::default()
    }

    /// One insert or lookup per call: a poisoned lock is still consistent.
    fn members(&self) -> std::sync::MutexGuard<'_, HashMap<MemberId, Weak<Inner>>> {
        self.members.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn attach(&self, member: &MemberId, inner: &Arc<Inner>) {
        self.members().insert(member.clone(), Arc::downgrade(inner));
    }

    /// Queues `request` for `to`; a task of its own delivers it, as a network would (the
    /// sender's locks are not held).
    fn send(&self, to: &MemberId, request: GrainRequest, reply: WireReply) {
        let mut queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        let mut item = (request, reply);
        loop {
            let queue = queues
                .entry(to.clone())
                .or_insert_with(|| self.deliverer(to.clone()));
            match queue.send(item) {
                Ok(()) => return,
                // Its task ended with the runtime that ran it: a new one on this runtime.
                Err(mpsc::error::SendError(returned)) => {
                    queues.remove(to);
                    item = returned;
                }
            }
        }
    }

    fn deliverer(&self, to: MemberId) -> MemoryQueue {
        let (queue, mut requests) = mpsc::unbounded_channel::<(GrainRequest, WireReply)>();
        let network = self.clone();
        tokio::spawn(async move {
            while let Some((request, reply)) = requests.recv().await {
                network.deliver(&to, request, reply).await;
            }
        });
        queue
    }

    /// A member seen up may not have attached its runtime yet (it joins, then starts it), as
    /// a connection takes a moment to establish: a bounded wait.
    async fn deliver(&self, to: &MemberId, request: GrainRequest, reply: WireReply) {
        for _ in 0..MEMORY_ATTACH_WAITS {
            let target = self.members().get(to).cloned();
            match target.map(|weak| weak.upgrade()) {
                Some(Some(target)) => return target.receive(request, reply),
                Some(None) => return reply(Err(GrainError::Stopped)),
                None => tokio::time::sleep(MEMORY_ATTACH_PAUSE).await,
            }
        }
        reply(Err(GrainError::Unreachable(format!(
            "member {to} is not reachable"
        ))));
    }
}

/// The way out of this member.
pub(crate) enum Transport {
    Memory(GrainNetwork),
    Remote {
        node: RemoteNode,
        /// A reference per member life: a remote reference stays bound to the incarnation it
        /// was made for, so a process restarted at the same address needs a new one.
        endpoints: Mutex<FxHashMap<MemberId, ActorRef<GrainEndpoint>>>,
    },
}

/// A member requests can be sent to: its identity and, over Rally's connections, its
/// endpoint's reference. Cheap to clone, so a sender may keep it (see [`Transport::peer`]).
pub(crate) type Peer = Arc<PeerRef>;

/// See [`Peer`].
pub(crate) struct PeerRef {
    pub(crate) member: MemberId,
    /// `None` on the in-process network.
    endpoint: Option<ActorRef<GrainEndpoint>>,
}

/// The answer to one ask sent with [`Transport::ask`], to be awaited by whoever wants it.
pub(crate) enum Answer {
    Memory(oneshot::Receiver<Result<Vec<u8>, GrainError>>),
    Remote(oneshot::Receiver<Result<Result<ReplyBytes, GrainError>, ReplyError>>),
}

impl Answer {
    /// The reply's bytes, or why there are none (no time limit: the caller sets one).
    pub(crate) async fn reply(self) -> Result<Vec<u8>, GrainError> {
        match self {
            Self::Memory(answer) => answer.await.unwrap_or_else(|_| {
                Err(GrainError::Failed(
                    "the reply destination was dropped unanswered".into(),
                ))
            }),
            Self::Remote(answer) => match answer.await {
                Err(_) => Err(GrainError::Failed(
                    "the reply destination was dropped unanswered".into(),
                )),
                Ok(Ok(result)) => result.map(|bytes| bytes.0),
                Ok(Err(ReplyError::Failed(why))) => Err(GrainError::Failed(why)),
                Ok(Err(ReplyError::OutcomeUnknown(why))) => Err(GrainError::OutcomeUnknown(why)),
                Ok(Err(other)) => Err(GrainError::Unreachable(other.to_string())),
            },
        }
    }
}

impl Transport {
    pub(crate) fn remote(node: &RemoteNode) -> Self {
        Self::Remote {
            node: node.clone(),
            endpoints: Mutex::new(FxHashMap::default()),
        }
    }

    /// The way to `to`.
    pub(crate) fn peer(&self, to: &MemberId) -> Peer {
        Arc::new(PeerRef {
            member: to.clone(),
            endpoint: self.endpoint(to),
        })
    }

    /// The reference to `to`'s endpoint over Rally's connections (`None` on the in-process
    /// network), made once per member life.
    fn endpoint(&self, to: &MemberId) -> Option<ActorRef<GrainEndpoint>> {
        let Self::Remote { node, endpoints } = self else {
            return None;
        };
        let mut endpoints = endpoints.lock().unwrap_or_else(PoisonError::into_inner);
        Some(if let Some(endpoint) = endpoints.get(to) {
            endpoint.clone()
        } else {
            // A new life at an address replaces the previous one's reference, so the map
            // holds one entry per address at most.
            endpoints.retain(|member, _| member.address != to.address);
            let endpoint = node.lookup::<GrainEndpoint>(&to.address, ENDPOINT);
            endpoints.insert(to.clone(), endpoint.clone());
            endpoint
        })
    }

    /// Sends the ask `request` to `to` now (requests leave in the order they were made, asks
    /// and tells alike); the answer comes to whoever awaits the returned [`Answer`]. Dropping
    /// it abandons the reply (the connection's request table frees its slot).
    ///
    /// # Errors
    ///
    /// `Unreachable` if the member's connection did not take the request.
    pub(crate) fn ask(&self, to: &PeerRef, request: GrainRequest) -> Result<Answer, GrainError> {
        self.ask_to(&to.member, to.endpoint.as_ref(), request)
    }

    /// [`ask`](Self::ask) to member `to` through `endpoint` (its reference, on Rally's
    /// connections).
    fn ask_to(
        &self,
        to: &MemberId,
        endpoint: Option<&ActorRef<GrainEndpoint>>,
        request: GrainRequest,
    ) -> Result<Answer, GrainError> {
        let unreachable =
            || GrainError::Unreachable(format!("member {to} did not take the message"));
        match (self, endpoint) {
            (Self::Remote { .. }, Some(endpoint)) => {
                let (reply_to, answer) = ReplyTo::channel();
                endpoint
                    .send_with(request, reply_to)
                    .map_err(|_| unreachable())?;
                Ok(Answer::Remote(answer))
            }
            (Self::Memory(network), _) => {
                let (tx, answer) = oneshot::channel();
                network.send(
                    to,
                    request,
                    Box::new(move |result| {
                        let _ = tx.send(result);
                    }),
                );
                Ok(Answer::Memory(answer))
            }
            (Self::Remote { .. }, None) => Err(unreachable()),
        }
    }

    /// Sends `request` to `to`; `reply` gets the reply bytes or why there is none (an ask's
    /// after at most its wait).
    pub(crate) fn send(&self, to: &MemberId, request: GrainRequest, reply: WireReply) {
        match self {
            Self::Memory(network) => network.send(to, request, reply),
            Self::Remote { .. } => {
                let endpoint = self.endpoint(to);
                match request.wait_ms {
                    None => {
                        let taken = endpoint
                            .as_ref()
                            .is_some_and(|endpoint| endpoint.tell(request).is_ok());
                        if !taken {
                            reply(Err(GrainError::Unreachable(format!(
                                "member {to} did not take the message"
                            ))));
                        }
                    }
                    Some(ms) => {
                        let wait = Duration::from_millis(ms);
                        // Sent here, not from the task that waits: requests leave in the
                        // order they were made, asks and tells alike.
                        match self.ask_to(to, endpoint.as_ref(), request) {
                            Err(error) => reply(Err(error)),
                            Ok(answer) => {
                                tokio::spawn(async move {
                                    reply(
                                        tokio::time::timeout(wait, answer.reply())
                                            .await
                                            .unwrap_or(Err(GrainError::Timeout(wait))),
                                    );
                                });
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The actor each member exposes to receive requests for its virtual actors.
pub(crate) struct GrainEndpoint {
    pub(crate) inner: Weak<Inner>,
}

impl Actor for GrainEndpoint {}

impl Handler<GrainRequest> for GrainEndpoint {
    async fn handle(
        &mut self,
        request: GrainRequest,
        ctx: &mut Context<Self>,
    ) -> ActorResult<Result<ReplyBytes, GrainError>> {
        let Some(inner) = self.inner.upgrade() else {
            return Ok(Err(GrainError::Stopped));
        };
        let reply: WireReply = match ctx.reply_later::<Result<ReplyBytes, GrainError>>() {
            Some(reply) => Box::new(move |result| reply.send(Ok(result.map(ReplyBytes)))),
            None => Box::new(|_| {}),
        };
        inner.receive(request, reply);
        ctx.deferred()
    }
}

impl RemoteActor for GrainEndpoint {
    fn messages(table: &mut MessageTable<Self>) {
        table.add::<GrainRequest>();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same request with its payload as a plain `Vec<u8>` (serde's sequence).
    #[derive(Serialize)]
    struct AsSequence<'a> {
        kind: &'a str,
        identity: &'a str,
        manifest: &'a str,
        payload: &'a Vec<u8>,
        hops: u8,
        wait_ms: Option<u64>,
        handover: Handover,
    }

    #[test]
    fn payloads_travel_as_one_byte_string_in_the_same_wire_format() {
        let payload: Vec<u8> = (0..=255).collect();
        let request = GrainRequest {
            kind: "cart".into(),
            identity: "c-1".into(),
            manifest: "shop.Add".into(),
            payload: payload.clone(),
            hops: 1,
            wait_ms: Some(500),
            handover: Handover::Call,
        };
        let bytes = postcard::to_allocvec(&request).unwrap();
        let sequence = postcard::to_allocvec(&AsSequence {
            kind: "cart",
            identity: "c-1",
            manifest: "shop.Add",
            payload: &payload,
            hops: 1,
            wait_ms: Some(500),
            handover: Handover::Call,
        })
        .unwrap();
        assert_eq!(bytes, sequence, "the bytes on the wire do not change");
        let back: GrainRequest = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back.payload, payload);
        assert_eq!(back.handover, Handover::Call);

        let reply: Result<ReplyBytes, GrainError> = Ok(ReplyBytes(payload.clone()));
        let reply_bytes = postcard::to_allocvec(&reply).unwrap();
        let plain: Result<Vec<u8>, GrainError> = Ok(payload.clone());
        assert_eq!(reply_bytes, postcard::to_allocvec(&plain).unwrap());
        let back: Result<ReplyBytes, GrainError> = postcard::from_bytes(&reply_bytes).unwrap();
        assert_eq!(back.unwrap().0, payload);
    }
}
