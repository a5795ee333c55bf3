//! What happens to peer nodes, as remoting sees it: published to anyone who subscribed with
//! [`RemoteNode::peer_events`](crate::RemoteNode::peer_events), and who sent the message an
//! actor is handling ([`RemoteContext`]).

use rally_actor::{Actor, Context};
use rally_wire::{NodeAddress, UniqueAddress};

/// Events a slow subscriber may fall behind by before it loses the oldest ones (and is told,
/// with `RecvError::Lagged`): peer events are rare (a few per peer and failure), so this
/// covers a burst of a few hundred peers joining at once, in a few tens of KiB.
pub(crate) const PEER_EVENTS_CAPACITY: usize = 1024;

/// Something that happened to a peer node. Events about one peer arrive in the order they
/// happened; see [`RemoteNode::peer_events`](crate::RemoteNode::peer_events).
///
/// # Example
///
/// ```
/// use rally::remote::{DownReason, PeerEvent};
///
/// fn describe(event: &PeerEvent) -> String {
///     match event {
///         PeerEvent::Connected(peer) => format!("{} is up (incarnation {})", peer.address, peer.incarnation),
///         PeerEvent::Unreachable(peer) => format!("{} is unreachable", peer.address),
///         PeerEvent::Reachable(peer) => format!("{} is reachable again", peer.address),
///         PeerEvent::Down { peer, reason: DownReason::Left } => format!("{} left", peer.address),
///         PeerEvent::Down { peer, reason } => format!("{} is down: {reason}", peer.address),
///         PeerEvent::Refused { address, reason } => format!("{address} refused: {reason}"),
///         _ => "something new".to_owned(),
///     }
/// }
/// let peer = "rally://b@127.0.0.1:4000".parse().unwrap();
/// let refused = PeerEvent::Refused { address: peer, reason: "secrets differ".into() };
/// assert!(describe(&refused).contains("secrets differ"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PeerEvent {
    /// A handshake (in either direction) authenticated an incarnation of the peer this node
    /// had not talked to before: its first contact, or a restart (then `Down` with
    /// [`DownReason::Restarted`] for the old incarnation comes first).
    Connected(UniqueAddress),
    /// The phi-accrual failure detector suspects the peer: its heartbeats stopped arriving.
    /// What follows depends on `RemoteConfig::quarantine_unreachable_after`: `Down` after that
    /// long, or `Reachable` if heartbeats come back first.
    Unreachable(UniqueAddress),
    /// Heartbeats of a peer reported `Unreachable` arrive again.
    Reachable(UniqueAddress),
    /// This incarnation of the peer is gone for good here: it is quarantined (refused if it
    /// comes back; only a restarted process, a new incarnation, is admitted), watchers of its
    /// actors got `Terminated`, requests waiting for it failed.
    Down {
        /// The incarnation that ended.
        peer: UniqueAddress,
        /// Why.
        reason: DownReason,
    },
    /// Connecting to the node at `address` failed for a reason retrying cannot fix (another
    /// secret, cluster name or protocol version, a certificate it does not trust, this node
    /// quarantined there). Sends to it fail at once with `reason` until a handshake succeeds.
    Refused {
        /// Whom this node tried to reach.
        address: NodeAddress,
        /// What was wrong (never the secret).
        reason: String,
    },
}

/// Why an incarnation of a peer was declared down ([`PeerEvent::Down`]).
///
/// # Example
///
/// ```
/// use rally::remote::DownReason;
///
/// assert_eq!(DownReason::Left.to_string(), "the peer left");
/// assert!(DownReason::Requested("downed by the cluster".into()).to_string().contains("cluster"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DownReason {
    /// The failure detector found it unreachable for `quarantine_unreachable_after`.
    #[error("failure detector: no heartbeat")]
    Unreachable,
    /// It said it was leaving (`RemoteNode::leave`).
    #[error("the peer left")]
    Left,
    /// A handshake showed a new incarnation: the old process is gone.
    #[error("restarted with a new incarnation")]
    Restarted,
    /// It broke the protocol after authenticating (malformed or oversized frames).
    #[error("protocol violation: {0}")]
    ProtocolViolation(String),
    /// Code on this node asked for it ([`RemoteNode::quarantine`](crate::RemoteNode::quarantine)),
    /// for example a cluster's downing decision.
    #[error("{0}")]
    Requested(String),
}

/// Who sent the message being handled, as authenticated by the handshake: the extension of
/// [`Context`] for actors reachable from other nodes.
///
/// `remote_origin` is the sending node's [`UniqueAddress`] (address and incarnation) for a
/// message that arrived from another node, and `None` for a message sent on this node. The
/// address is the one the peer proved with the shared secret when its connection opened, so a
/// message cannot claim to come from another node than the one that sent it (what it says
/// *inside* the payload is another matter: compare the two).
///
/// # Example
///
/// ```
/// use rally::{Actor, ActorResult, Context, Handler, Message};
/// use rally::remote::{MessageTable, RemoteActor, RemoteContext, RemoteMessage};
/// use serde::{Deserialize, Serialize};
///
/// /// `from`: the sender's address as it claims it, `rally://system@host:port`.
/// #[derive(Serialize, Deserialize)]
/// struct Gossip { from: String, incarnation: u64 }
/// impl Message for Gossip { type Reply = bool; }
/// impl RemoteMessage for Gossip { const MANIFEST: &'static str = "example.Gossip"; }
///
/// struct Membership;
/// impl Actor for Membership {}
/// impl Handler<Gossip> for Membership {
///     async fn handle(&mut self, msg: Gossip, ctx: &mut Context<Self>) -> ActorResult<bool> {
///         // Accept only a packet whose claimed sender is the node that actually sent it.
///         Ok(ctx.remote_origin().is_some_and(|sender| {
///             sender.address.to_string() == msg.from && sender.incarnation.0 == msg.incarnation
///         }))
///     }
/// }
/// impl RemoteActor for Membership {
///     fn messages(table: &mut MessageTable<Self>) { table.add::<Gossip>(); }
/// }
/// ```
pub trait RemoteContext {
    /// The node that sent the message being handled, if it came from another node.
    fn remote_origin(&self) -> Option<&UniqueAddress>;
}

impl<A: Actor> RemoteContext for Context<A> {
    fn remote_origin(&self) -> Option<&UniqueAddress> {
        self.origin()?.downcast_ref::<UniqueAddress>()
    }
}
