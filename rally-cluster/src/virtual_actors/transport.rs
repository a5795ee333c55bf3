//! How a grain request reaches another member: the grain frame over Rally's own connections, or
//! an in-process network for tests that encodes and decodes exactly as the wire does.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use rally_actor::sync::Mutex;
use std::time::Duration;

use bytes::BytesMut;
use rally_remote::{
    GrainAnswer, GrainAsk, GrainFlags, GrainOutcome, GrainPeer, GrainReplyTo, GrainRequest,
    GrainSend, RemoteNode, UniqueAddress,
};
use rustc_hash::FxHashMap;
use tokio::sync::mpsc;

use crate::member::MemberId;

/// How long the in-memory network waits for a member's runtime to attach: 20 × 10 ms.
const MEMORY_ATTACH_WAITS: u32 = 20;
const MEMORY_ATTACH_PAUSE: Duration = Duration::from_millis(10);

/// What serves the grain requests that reach a member (its runtime), on either transport.
pub(crate) trait Inbound: Send + Sync + 'static {
    /// A request from `from`; an ask is answered through `reply`.
    fn request(&self, from: &UniqueAddress, request: GrainRequest<'_>, reply: Option<InboundReply>);
}

/// Where the answer to a request from another member goes. Dropped unanswered, it answers
/// [`GrainOutcome::UNKNOWN`].
pub(crate) enum InboundReply {
    Remote(GrainReplyTo),
    Memory(MemoryReply),
}

impl InboundReply {
    /// Sends `outcome`, its body written by `encode` (a body that fails to encode makes it
    /// "handled, reply lost", as on the wire).
    pub(crate) fn send(
        self,
        outcome: GrainOutcome,
        encode: impl FnOnce(&mut BytesMut) -> Result<(), String>,
    ) {
        match self {
            Self::Remote(reply) => reply.send(outcome, encode),
            Self::Memory(reply) => reply.send(outcome, encode),
        }
    }

    /// Sends `outcome` with a text body.
    pub(crate) fn send_text(self, outcome: GrainOutcome, text: &str) {
        self.send(outcome, |buf| {
            buf.extend_from_slice(text.as_bytes());
            Ok(())
        });
    }
}

/// The in-process answer to one request.
pub(crate) struct MemoryReply(Option<Box<dyn GrainAsk>>);

impl MemoryReply {
    fn send(
        mut self,
        outcome: GrainOutcome,
        encode: impl FnOnce(&mut BytesMut) -> Result<(), String>,
    ) {
        let Some(ask) = self.0.take() else {
            return;
        };
        let mut body = BytesMut::new();
        match encode(&mut body) {
            Ok(()) => ask.answer(GrainAnswer::Replied {
                outcome,
                body: &body,
            }),
            Err(why) => ask.answer(GrainAnswer::Replied {
                outcome: GrainOutcome::REPLY_LOST,
                body: why.as_bytes(),
            }),
        }
    }
}

impl Drop for MemoryReply {
    fn drop(&mut self) {
        if let Some(ask) = self.0.take() {
            ask.answer(GrainAnswer::Replied {
                outcome: GrainOutcome::UNKNOWN,
                body: b"the request was dropped unanswered",
            });
        }
    }
}

/// The way out of this member.
pub(crate) enum Transport {
    Memory(GrainNetwork),
    Remote {
        node: RemoteNode,
        /// A peer per member life: a peer stays bound to the life it was made for, so a process
        /// restarted at the same address needs a new one.
        peers: Mutex<FxHashMap<MemberId, GrainPeer>>,
    },
}

/// A member requests can be sent to, cheap to clone (a sender keeps it, see `GrainRef`, and
/// clones it for every request): one reference count, whatever the member declares.
#[derive(Clone)]
pub(crate) struct Peer(Arc<PeerParts>);

struct PeerParts {
    member: MemberId,
    way: Way,
}

#[derive(Clone)]
enum Way {
    Remote(GrainPeer),
    Memory(GrainNetwork, UniqueAddress),
}

impl Peer {
    /// The member it sends to.
    pub(crate) fn member(&self) -> &MemberId {
        &self.0.member
    }

    /// Sends an ask.
    pub(crate) fn ask(&self, request: &GrainSend<'_>, ask: Box<dyn GrainAsk>) {
        match &self.0.way {
            Way::Remote(peer) => peer.ask(request, ask),
            Way::Memory(network, from) => {
                network.send(from, &self.0.member, request, Message::Ask(ask))
            }
        }
    }

    /// Sends a tell.
    ///
    /// # Errors
    ///
    /// Why it was not sent.
    pub(crate) fn tell(
        &self,
        request: &GrainSend<'_>,
        encode: impl FnOnce(&mut BytesMut) -> Result<(), String>,
    ) -> Result<(), String> {
        match &self.0.way {
            Way::Remote(peer) => peer.tell(request, encode),
            Way::Memory(network, from) => {
                let mut payload = BytesMut::new();
                encode(&mut payload)?;
                network.send(from, &self.0.member, request, Message::Tell(payload));
                Ok(())
            }
        }
    }
}

impl Transport {
    pub(crate) fn remote(node: &RemoteNode) -> Self {
        Self::Remote {
            node: node.clone(),
            peers: Mutex::new(FxHashMap::default()),
        }
    }

    /// The way to `to` (from `local`).
    pub(crate) fn peer(&self, local: &MemberId, to: &MemberId) -> Peer {
        let way = match self {
            Self::Memory(network) => Way::Memory(network.clone(), unique(local)),
            Self::Remote { node, peers } => {
                let mut peers = peers.lock();
                let peer = match peers.get(to) {
                    Some(peer) => peer.clone(),
                    None => {
                        // A new life at an address replaces the previous one's peer.
                        peers.retain(|member, _| member.address != to.address);
                        let peer = node.grain_peer(&to.address);
                        peers.insert(to.clone(), peer.clone());
                        peer
                    }
                };
                Way::Remote(peer)
            }
        };
        Peer(Arc::new(PeerParts {
            member: to.clone(),
            way,
        }))
    }

    /// Forgets the peer of `to` (its life ended, or sends to it were refused): the next send
    /// makes a new one.
    pub(crate) fn forget(&self, to: &MemberId) {
        if let Self::Remote { peers, .. } = self {
            peers.lock().remove(to);
        }
    }
}

/// A member's identity as the remote layer names its sender.
fn unique(member: &MemberId) -> UniqueAddress {
    UniqueAddress {
        address: member.address.clone(),
        incarnation: member.incarnation,
    }
}

/// A request on the in-process network.
enum Message {
    Ask(Box<dyn GrainAsk>),
    Tell(BytesMut),
}

/// A request queued for one member.
struct Queued {
    from: UniqueAddress,
    kind: &'static str,
    manifest: Option<&'static str>,
    identity: Arc<str>,
    hops: u8,
    wait: Option<Duration>,
    flags: GrainFlags,
    payload: BytesMut,
    reply: Option<MemoryReply>,
}

/// What waits to reach one member of an in-process network, in the order it was sent.
type MemoryQueue = mpsc::UnboundedSender<Queued>;

/// The in-process network that members started with
/// [`VirtualActorsBuilder::start_in_memory`](super::VirtualActorsBuilder::start_in_memory) share.
/// Requests are encoded and decoded as on the wire, and arrive in the order they were sent
/// between two members.
///
/// # Example
///
/// ```
/// use rally::cluster::virtual_actors::GrainNetwork;
///
/// let network = GrainNetwork::new();
/// let same = network.clone();
/// ```
#[derive(Clone, Default)]
pub struct GrainNetwork {
    /// Each member's runtime (requests to one that is gone are refused as not taken).
    members: Arc<Mutex<HashMap<MemberId, Weak<dyn Inbound>>>>,
    /// One queue per destination, drained by one task.
    queues: Arc<Mutex<HashMap<MemberId, MemoryQueue>>>,
}

impl std::fmt::Debug for GrainNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrainNetwork").finish_non_exhaustive()
    }
}

impl GrainNetwork {
    /// An empty network.
    pub fn new() -> Self {
        Self::default()
    }

    fn members(&self) -> std::sync::MutexGuard<'_, HashMap<MemberId, Weak<dyn Inbound>>> {
        self.members.lock()
    }

    pub(crate) fn attach(&self, member: &MemberId, inbound: Weak<dyn Inbound>) {
        self.members().insert(member.clone(), inbound);
    }

    /// Queues a request for `to`; a task of its own delivers it, as a network would.
    fn send(&self, from: &UniqueAddress, to: &MemberId, request: &GrainSend<'_>, message: Message) {
        let (payload, reply) = match message {
            Message::Tell(payload) => (payload, None),
            Message::Ask(ask) => {
                let mut payload = BytesMut::new();
                if let Err(why) = ask.encode(&mut payload) {
                    return ask.answer(GrainAnswer::NotSent(&why));
                }
                (payload, Some(MemoryReply(Some(ask))))
            }
        };
        let mut item = Queued {
            from: from.clone(),
            kind: request.kind,
            manifest: request.manifest,
            identity: Arc::from(request.identity),
            hops: request.hops,
            wait: request.wait,
            flags: request.flags,
            payload,
            reply,
        };
        let mut queues = self.queues.lock();
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
        let (queue, mut requests) = mpsc::unbounded_channel::<Queued>();
        let network = self.clone();
        tokio::spawn(async move {
            while let Some(queued) = requests.recv().await {
                network.deliver(&to, queued).await;
            }
        });
        queue
    }

    /// A member seen up may not have attached its runtime yet (it joins, then starts it), as
    /// a connection takes a moment to establish: a bounded wait, then "not taken".
    async fn deliver(&self, to: &MemberId, queued: Queued) {
        for _ in 0..MEMORY_ATTACH_WAITS {
            let target = self.members().get(to).map(Weak::upgrade);
            match target {
                Some(Some(target)) => {
                    let request = GrainRequest::new(
                        queued.kind,
                        queued.manifest,
                        &queued.identity,
                        queued.hops,
                        queued.wait,
                        queued.flags,
                        &queued.payload,
                    );
                    target.request(
                        &queued.from,
                        request,
                        queued.reply.map(InboundReply::Memory),
                    );
                    return;
                }
                Some(None) => break,
                None => tokio::time::sleep(MEMORY_ATTACH_PAUSE).await,
            }
        }
        if let Some(mut reply) = queued.reply
            && let Some(ask) = reply.0.take()
        {
            ask.answer(GrainAnswer::Replied {
                outcome: GrainOutcome::UNREACHABLE,
                body: b"the member's virtual-actor runtime is not started",
            });
        }
    }
}

/// A remote node's grain requests, served by a member's runtime.
pub(crate) struct RemoteInbound(pub(crate) Weak<dyn Inbound>);

impl rally_remote::GrainService for RemoteInbound {
    fn request(
        &self,
        from: &UniqueAddress,
        request: GrainRequest<'_>,
        reply: Option<GrainReplyTo>,
    ) {
        match self.0.upgrade() {
            Some(inbound) => inbound.request(from, request, reply.map(InboundReply::Remote)),
            None => {
                if let Some(reply) = reply {
                    reply.send_text(GrainOutcome::STOPPED, "");
                }
            }
        }
    }
}
