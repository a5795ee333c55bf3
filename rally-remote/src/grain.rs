//! Requests for virtual actors between nodes: the grain request frame and its answer, carried
//! on the same lanes, batches and request table as messages to actors.
//!
//! This layer moves them and keeps track of what is known about each: a request never handed to
//! the connection was not sent ([`GrainAnswer::NotSent`]); one that left before the connection
//! broke has an unknown outcome ([`GrainAnswer::Unknown`]); otherwise the receiver's answer
//! ([`GrainAnswer::Replied`]) says, by its [`GrainOutcome`], whether an activation handled it.
//! What a request means (kinds, identities, activations) is the virtual-actor runtime's, which
//! serves the receiving side ([`GrainService`], [`RemoteNode::serve_grains`]) and sends through
//! [`GrainPeer`]s.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use rally_actor::{ReplyError, RequestContext};
use rally_wire::{
    GrainFlags, GrainOutcome, NodeAddress, ReplyStatus, UniqueAddress, decode_grain_outcome,
    write_grain_outcome,
};

use crate::association::Association;
use crate::node::RemoteNode;
use crate::outbound::{PushError, ReplyRoute};
use crate::registry::PendingReply;

/// What serves the grain requests that reach this node: the virtual-actor runtime, installed
/// with [`RemoteNode::serve_grains`].
///
/// # Example
///
/// ```
/// use rally::remote::{GrainOutcome, GrainReplyTo, GrainRequest, GrainService, UniqueAddress};
///
/// /// Refuses everything: no activation sees anything.
/// struct Closed;
/// impl GrainService for Closed {
///     fn request(&self, _from: &UniqueAddress, _request: GrainRequest<'_>, reply: Option<GrainReplyTo>) {
///         if let Some(reply) = reply {
///             reply.send_text(GrainOutcome::STOPPED, "closed");
///         }
///     }
/// }
/// ```
pub trait GrainService: Send + Sync + 'static {
    /// A grain request from `from` (the authenticated sender); an ask is answered through
    /// `reply` (`None` for a tell). Called on the connection's reader: do not block.
    fn request(&self, from: &UniqueAddress, request: GrainRequest<'_>, reply: Option<GrainReplyTo>);
}

/// A grain request as it arrived.
///
/// # Example
///
/// See [`GrainService`].
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct GrainRequest<'a> {
    /// The kind.
    pub kind: &'a str,
    /// The message's manifest; `None` for an end-of-handover marker.
    pub manifest: Option<&'a str>,
    /// The identity.
    pub identity: &'a str,
    /// Members it has been passed between so far (this hop included).
    pub hops: u8,
    /// How long its sender still waits for the outcome; `None` for a tell.
    pub wait: Option<Duration>,
    /// Its flags.
    pub flags: GrainFlags,
    /// The request context it carries, if any.
    pub context: Option<&'a RequestContext>,
    /// The encoded message.
    pub payload: &'a [u8],
}

impl<'a> GrainRequest<'a> {
    /// A request with these parts (what an in-process network hands a service).
    pub fn new(
        kind: &'a str,
        manifest: Option<&'a str>,
        identity: &'a str,
        hops: u8,
        wait: Option<Duration>,
        flags: GrainFlags,
        payload: &'a [u8],
    ) -> Self {
        Self {
            kind,
            manifest,
            identity,
            hops,
            wait,
            flags,
            context: None,
            payload,
        }
    }

    /// The same request carrying `context`.
    pub fn in_context(self, context: Option<&'a RequestContext>) -> Self {
        Self { context, ..self }
    }
}

/// Where the outcome of one grain request goes: back to its sender. Dropped unanswered, it
/// answers [`GrainOutcome::UNKNOWN`].
///
/// # Example
///
/// See [`GrainService`].
pub struct GrainReplyTo {
    route: Option<ReplyRoute>,
}

impl GrainReplyTo {
    pub(crate) fn new(route: ReplyRoute) -> Self {
        Self { route: Some(route) }
    }

    /// Sends `outcome`, its body written by `encode`. A body that fails to encode, or makes the
    /// reply larger than the frame limit, goes as an `EncodeFailed` reply, which the sender
    /// reads as [`GrainOutcome::REPLY_LOST`] (the request was handled; its reply is lost).
    pub fn send(
        mut self,
        outcome: GrainOutcome,
        encode: impl FnOnce(&mut BytesMut) -> Result<(), String>,
    ) {
        let Some(route) = self.route.take() else {
            return;
        };
        let mut encode = Some(encode);
        let mut write = |buf: &mut BytesMut| {
            write_grain_outcome(buf, outcome, &[]);
            match encode.take() {
                Some(encode) => encode(buf),
                None => Err("a reply is encoded once".to_owned()),
            }
        };
        let queued =
            route
                .lane()
                .push_encoded_reply(route.generation, route.request_id, &mut write);
        match queued {
            Ok(rally_wire::ReplyQueued::AsGiven) => {}
            Ok(rally_wire::ReplyQueued::Replaced(error)) => {
                tracing::warn!(%error, "a virtual actor's reply could not be sent; its sender hears that it was handled and the reply lost");
            }
            Err(error) => {
                tracing::debug!(%error, "a virtual actor's reply could not be queued");
            }
        }
    }

    /// Sends `outcome` with a text body (a reason).
    pub fn send_text(self, outcome: GrainOutcome, text: &str) {
        self.send(outcome, |buf| {
            buf.extend_from_slice(text.as_bytes());
            Ok(())
        });
    }
}

impl Drop for GrainReplyTo {
    fn drop(&mut self) {
        if self.route.is_some() {
            let route = Self {
                route: self.route.take(),
            };
            route.send_text(GrainOutcome::UNKNOWN, "the request was dropped unanswered");
        }
    }
}

impl std::fmt::Debug for GrainReplyTo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrainReplyTo").finish_non_exhaustive()
    }
}

/// What a sender learns of a grain request it asked about.
///
/// # Example
///
/// ```
/// use rally::remote::{GrainAnswer, GrainOutcome, Handled};
///
/// fn handled(answer: &GrainAnswer<'_>) -> Handled {
///     match answer {
///         GrainAnswer::Replied { outcome, .. } => outcome.handled(),
///         GrainAnswer::NotSent(_) => Handled::No,
///         GrainAnswer::Unknown(_) => Handled::Unknown,
///     }
/// }
/// assert_eq!(handled(&GrainAnswer::Replied { outcome: GrainOutcome::OK, body: b"" }), Handled::Yes);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrainAnswer<'a> {
    /// The receiver answered: what became of the request, and the body (the reply, or a text).
    Replied {
        /// Whether and how it was handled.
        outcome: GrainOutcome,
        /// The encoded reply for [`GrainOutcome::OK`], a text otherwise.
        body: &'a [u8],
    },
    /// It never left this node (the connection refused it, or the peer's life ended first).
    NotSent(&'a str),
    /// It left, and the connection broke before the answer came: it may have been handled.
    Unknown(&'a str),
}

/// One grain ask, as the transport needs it: its message's encoding, and where its answer goes.
///
/// # Example
///
/// ```
/// use bytes::BytesMut;
/// use rally::remote::{GrainAnswer, GrainAsk};
///
/// struct Ping;
/// impl GrainAsk for Ping {
///     fn encode(&self, buf: &mut BytesMut) -> Result<(), String> {
///         buf.extend_from_slice(b"ping");
///         Ok(())
///     }
///     fn answer(self: Box<Self>, answer: GrainAnswer<'_>) {
///         println!("{answer:?}");
///     }
/// }
/// ```
pub trait GrainAsk: Send + 'static {
    /// Writes the message (called once, as the request is queued).
    ///
    /// # Errors
    ///
    /// The message's encoder failed: nothing is sent, and the answer says so.
    fn encode(&self, buf: &mut BytesMut) -> Result<(), String>;

    /// The answer (called once).
    fn answer(self: Box<Self>, answer: GrainAnswer<'_>);

    /// Whether nobody waits for the answer any more (its slot may be freed unanswered).
    fn is_abandoned(&self) -> bool {
        false
    }
}

/// The way to one peer node's virtual-actor runtime, for the life of that node it was made
/// for (a process restarted at the address needs a new one). Cheap to clone.
///
/// # Example
///
/// ```no_run
/// use rally::remote::{GrainFlags, GrainSend, RemoteNode};
///
/// fn tell(node: &RemoteNode, peer: &rally::remote::NodeAddress) {
///     let peer = node.grain_peer(peer);
///     let request = GrainSend { kind: "cart", manifest: Some("shop.Add"), identity: "u-1", hops: 1, wait: None, flags: GrainFlags::default(), context: None };
///     let _ = peer.tell(&request, |buf| { buf.extend_from_slice(b"\x01"); Ok(()) });
/// }
/// ```
#[derive(Clone)]
pub struct GrainPeer {
    association: Arc<Association>,
    generation: u64,
}

/// A grain request to send.
///
/// # Example
///
/// See [`GrainPeer`].
#[derive(Debug, Clone, Copy)]
pub struct GrainSend<'a> {
    /// The kind.
    pub kind: &'static str,
    /// The message's manifest; `None` for an end-of-handover marker.
    pub manifest: Option<&'static str>,
    /// The identity.
    pub identity: &'a str,
    /// Members it will have been passed between on arrival (this hop included).
    pub hops: u8,
    /// How long the sender still waits (an ask); `None` for a tell.
    pub wait: Option<Duration>,
    /// Its flags.
    pub flags: GrainFlags,
    /// The request context it carries, if any.
    pub context: Option<&'a RequestContext>,
}

impl GrainPeer {
    /// The node this peer is.
    pub fn address(&self) -> &NodeAddress {
        &self.association.remote
    }

    /// Sends a tell: no answer comes back.
    ///
    /// # Errors
    ///
    /// Why it was not sent (nothing left this node).
    pub fn tell(
        &self,
        request: &GrainSend<'_>,
        encode: impl FnOnce(&mut BytesMut) -> Result<(), String>,
    ) -> Result<(), String> {
        self.push(request, 0, encode).map(drop)
    }

    /// Sends an ask; it gets what became of it, at once if it was not sent.
    pub fn ask(&self, request: &GrainSend<'_>, ask: Box<dyn GrainAsk>) {
        let request_id = self.association.next_request_id();
        match self.push(request, request_id, |buf| ask.encode(buf)) {
            Ok((lane, sequence)) => self.association.register_request(
                request_id,
                PendingReply::Grain {
                    ask,
                    deadline: request.wait.map(|wait| crate::now() + wait),
                },
                lane,
                sequence,
                self.generation,
            ),
            Err(why) => ask.answer(GrainAnswer::NotSent(&why)),
        }
    }

    fn push(
        &self,
        request: &GrainSend<'_>,
        request_id: u64,
        encode: impl FnOnce(&mut BytesMut) -> Result<(), String>,
    ) -> Result<(usize, u64), String> {
        if let Some(refused) = self.association.refused_fast() {
            return Err(refused);
        }
        let wait_ms = request.wait.map_or(0, |wait| {
            u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1)
        });
        let lane = self.association.lane_for(request.identity, false);
        let pushed = self.association.lanes[lane].push_grain_request(
            self.generation,
            request.kind,
            request.manifest,
            request.identity,
            request_id,
            request.hops,
            wait_ms,
            request.flags,
            request.context,
            |buf| crate::outbound::guarded_encode(encode, buf),
        );
        match pushed {
            Ok(sequence) => Ok((lane, sequence)),
            Err(PushError::PeerDown) => Err(format!(
                "the life of {} this peer was made for has ended",
                self.association.remote
            )),
            Err(error) => Err(error.to_string()),
        }
    }
}

impl std::fmt::Debug for GrainPeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrainPeer")
            .field("node", &self.association.remote)
            .field("generation", &self.generation)
            .finish()
    }
}

impl RemoteNode {
    /// Serves the grain requests that reach this node with `service` (the virtual-actor
    /// runtime); until one is installed, or once it is dropped, asks are answered that this
    /// node's runtime is not started (not handled). Installing another replaces it.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # use std::sync::Arc;
    /// # use rally::remote::{GrainReplyTo, GrainRequest, GrainService, RemoteNode, UniqueAddress};
    /// # struct Closed;
    /// # impl GrainService for Closed {
    /// #     fn request(&self, _: &UniqueAddress, _: GrainRequest<'_>, _: Option<GrainReplyTo>) {}
    /// # }
    /// fn install(node: &RemoteNode, service: &Arc<Closed>) {
    ///     let service: Arc<dyn GrainService> = service.clone();
    ///     node.serve_grains(Arc::downgrade(&service));
    /// }
    /// ```
    pub fn serve_grains(&self, service: Weak<dyn GrainService>) {
        self.inner.set_grain_service(service);
    }

    /// Keeps the grain tells that reach this node before its virtual-actor runtime serves it,
    /// and hands them to the runtime in the order they came once [`serve_grains`] installs it;
    /// past 4,096 more are dropped (counted as unknown recipients). A member's
    /// peers send to it as soon as they see it up, which can be before its runtime started;
    /// without this, a tell that came then was lost (an ask is answered "not handled", and its
    /// sender sends it again). `Cluster::join` calls it for a member that hosts kinds. Does
    /// nothing once a runtime was installed.
    ///
    /// [`serve_grains`]: Self::serve_grains
    ///
    /// # Example
    ///
    /// ```no_run
    /// # use rally::remote::RemoteNode;
    /// fn joining(node: &RemoteNode) {
    ///     // Before the cluster is joined; the runtime installed later gets what came meanwhile.
    ///     node.hold_grain_tells();
    /// }
    /// ```
    pub fn hold_grain_tells(&self) {
        self.inner.hold_grain_tells();
    }

    /// The way to `node`'s virtual-actor runtime, for the life of `node` this node knows now.
    ///
    /// # Example
    ///
    /// See [`GrainPeer`].
    pub fn grain_peer(&self, node: &NodeAddress) -> GrainPeer {
        let association = self.inner.association(node);
        let generation = association.generation();
        GrainPeer {
            association,
            generation,
        }
    }
}

/// How many grain tells a node keeps for a runtime that has not started
/// ([`RemoteNode::hold_grain_tells`]).
pub(crate) const HELD_TELLS_MAX: usize = 4096;

/// The grain tells a node keeps until its virtual-actor runtime is installed.
#[derive(Default)]
pub(crate) struct HeldTells(std::collections::VecDeque<HeldTell>);

/// A grain tell as it arrived, owned.
struct HeldTell {
    from: UniqueAddress,
    kind: Box<str>,
    manifest: Option<Box<str>>,
    identity: Box<str>,
    hops: u8,
    flags: GrainFlags,
    context: Option<RequestContext>,
    payload: Box<[u8]>,
}

impl HeldTells {
    /// Keeps `request` from `from`; `false` when as many as are kept are held already.
    pub(crate) fn keep(&mut self, from: &UniqueAddress, request: &GrainRequest<'_>) -> bool {
        if self.0.len() >= HELD_TELLS_MAX {
            return false;
        }
        self.0.push_back(HeldTell {
            from: from.clone(),
            kind: request.kind.into(),
            manifest: request.manifest.map(Into::into),
            identity: request.identity.into(),
            hops: request.hops,
            flags: request.flags,
            context: request.context.cloned(),
            payload: request.payload.into(),
        });
        true
    }

    /// Hands every tell to `service`, in the order they came (dropped if it is gone already).
    pub(crate) fn hand_to(self, service: &Weak<dyn GrainService>) {
        let Some(service) = service.upgrade() else {
            return;
        };
        for tell in self.0 {
            let request = GrainRequest {
                kind: &tell.kind,
                manifest: tell.manifest.as_deref(),
                identity: &tell.identity,
                hops: tell.hops,
                wait: None,
                flags: tell.flags,
                context: tell.context.as_ref(),
                payload: &tell.payload,
            };
            service.request(&tell.from, request, None);
        }
    }
}

/// Completes a grain ask from a reply frame's status and payload.
pub(crate) fn replied(answer_to: Box<dyn GrainAsk>, status: ReplyStatus, payload: &[u8]) {
    match status {
        ReplyStatus::Ok => match decode_grain_outcome(payload) {
            Ok((outcome, body)) => answer_to.answer(GrainAnswer::Replied { outcome, body }),
            Err(_) => answer_to.answer(GrainAnswer::Unknown("an empty grain reply")),
        },
        // Only a reply that was handled is sent with a body that can fail to encode.
        ReplyStatus::EncodeFailed => answer_to.answer(GrainAnswer::Replied {
            outcome: GrainOutcome::REPLY_LOST,
            body: b"the reply could not be encoded, or was larger than the frame limit",
        }),
        // The node has no virtual-actor runtime serving: not handled.
        ReplyStatus::UnknownRecipient => answer_to.answer(GrainAnswer::Replied {
            outcome: GrainOutcome::UNREACHABLE,
            body: b"the node's virtual-actor runtime is not started",
        }),
        other => {
            let why = format!("the node answered {other:?}");
            answer_to.answer(GrainAnswer::Unknown(&why));
        }
    }
}

/// Completes a grain ask that got no reply.
pub(crate) fn failed(answer_to: Box<dyn GrainAsk>, error: &ReplyError) {
    match error {
        ReplyError::Undeliverable(why) => answer_to.answer(GrainAnswer::NotSent(why)),
        ReplyError::OutcomeUnknown(why) => answer_to.answer(GrainAnswer::Unknown(why)),
        other => answer_to.answer(GrainAnswer::Unknown(&other.to_string())),
    }
}

/// Whether a grain ask's wait is over.
pub(crate) fn abandoned(answer_to: &dyn GrainAsk, deadline: Option<Instant>) -> bool {
    answer_to.is_abandoned() || deadline.is_some_and(|deadline| crate::now() >= deadline)
}
