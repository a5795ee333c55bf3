//! How a request for a virtual actor reaches another member: over Rally's own connections, or
//! through an in-process network for tests.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use rally_actor::{Actor, ActorRef, ActorResult, Context, Handler, Message, ReplyError, ReplyTo};
use rally_remote::{MessageTable, RemoteActor, RemoteMessage, RemoteNode};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

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
    pub(crate) kind: String,
    pub(crate) identity: String,
    pub(crate) manifest: String,
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
    type Reply = Result<Vec<u8>, GrainError>;
}

impl RemoteMessage for GrainRequest {
    const MANIFEST: &'static str = "rally.cluster.GrainRequest";
}

impl GrainRequest {
    pub(crate) fn new(kind: &str, identity: &str, outgoing: Outgoing) -> Self {
        Self {
            kind: kind.to_owned(),
            identity: identity.to_owned(),
            manifest: outgoing.manifest.to_owned(),
            payload: outgoing.payload,
            hops: outgoing.hops,
            wait_ms: outgoing.deadline.map(wait_ms),
            handover: Handover::No,
        }
    }

    /// The end of a handover of `identity`, answered by the next owner within `wait`.
    pub(crate) fn handover_done(kind: &str, identity: &str, wait: Duration) -> Self {
        Self {
            kind: kind.to_owned(),
            identity: identity.to_owned(),
            manifest: String::new(),
            payload: Vec::new(),
            hops: 1,
            wait_ms: Some(wait_ms(Instant::now() + wait)),
            handover: Handover::Done,
        }
    }

    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.wait_ms
            .map(|ms| Instant::now() + Duration::from_millis(ms))
    }
}

fn wait_ms(deadline: Instant) -> u64 {
    u64::try_from(
        deadline
            .saturating_duration_since(Instant::now())
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
        endpoints: Mutex<HashMap<MemberId, ActorRef<GrainEndpoint>>>,
    },
}

impl Transport {
    pub(crate) fn remote(node: &RemoteNode) -> Self {
        Self::Remote {
            node: node.clone(),
            endpoints: Mutex::new(HashMap::new()),
        }
    }

    /// Sends `request` to `to`; `reply` gets the reply bytes or why there is none.
    pub(crate) fn send(&self, to: &MemberId, request: GrainRequest, reply: WireReply) {
        match self {
            Self::Memory(network) => network.send(to, request, reply),
            Self::Remote { node, endpoints } => {
                let endpoint = {
                    let mut endpoints = endpoints.lock().unwrap_or_else(PoisonError::into_inner);
                    if let Some(endpoint) = endpoints.get(to) {
                        endpoint.clone()
                    } else {
                        // A new life at an address replaces the previous one's reference, so
                        // the map holds one entry per address at most.
                        endpoints.retain(|member, _| member.address != to.address);
                        let endpoint = node.lookup::<GrainEndpoint>(&to.address, ENDPOINT);
                        endpoints.insert(to.clone(), endpoint.clone());
                        endpoint
                    }
                };
                match request.wait_ms {
                    None => {
                        if endpoint.tell(request).is_err() {
                            reply(Err(GrainError::Unreachable(format!(
                                "member {to} did not take the message"
                            ))));
                        }
                    }
                    Some(ms) => {
                        let wait = Duration::from_millis(ms);
                        // Sent here, not from the task that waits: requests leave in the
                        // order they were made, asks and tells alike.
                        let (reply_to, answer) = ReplyTo::channel();
                        if endpoint.send_with(request, reply_to).is_err() {
                            return reply(Err(GrainError::Unreachable(format!(
                                "member {to} did not take the message"
                            ))));
                        }
                        tokio::spawn(async move {
                            reply(match tokio::time::timeout(wait, answer).await {
                                Err(_) => Err(GrainError::Timeout(wait)),
                                Ok(Err(_)) => Err(GrainError::Failed(
                                    "the reply destination was dropped unanswered".into(),
                                )),
                                Ok(Ok(Ok(result))) => result,
                                Ok(Ok(Err(ReplyError::Failed(why)))) => {
                                    Err(GrainError::Failed(why))
                                }
                                Ok(Ok(Err(ReplyError::OutcomeUnknown(why)))) => {
                                    Err(GrainError::OutcomeUnknown(why))
                                }
                                Ok(Ok(Err(other))) => {
                                    Err(GrainError::Unreachable(other.to_string()))
                                }
                            });
                        });
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
    ) -> ActorResult<Result<Vec<u8>, GrainError>> {
        let Some(inner) = self.inner.upgrade() else {
            return Ok(Err(GrainError::Stopped));
        };
        let reply: WireReply = match ctx.reply_later::<Result<Vec<u8>, GrainError>>() {
            Some(reply) => Box::new(move |result| reply.send(Ok(result))),
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
