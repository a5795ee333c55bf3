//! The gossip provider: the membership core over Rally's own connections.
//!
//! Every member exposes one actor under [`ENDPOINT`]; membership packets travel to it as
//! [`GossipPacket`] messages, so they use the node's authenticated connections, lanes and
//! bounds like any other message: no second port, no second secret.

use rally_actor::{Actor, ActorResult, ActorSystem, Context, Handler, Message};
use rally_remote::{MessageTable, RemoteActor, RemoteContext, RemoteMessage, RemoteNode};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::{Inbound, Provider, ProviderContext, ProviderStartError, ProviderTask, drive};
use crate::membership::Membership;

/// The name the membership endpoint is exposed under on every member (reserved).
pub(super) const ENDPOINT: &str = "rally.cluster.membership";

/// Packets waiting for the membership loop: at ~100 B each a few hundred KiB at most; a
/// flood beyond it is dropped (and SWIM tolerates loss).
const INBOUND_PACKETS: usize = 1024;

/// SWIM over a [`RemoteNode`]'s connections: the default provider.
///
/// # Example
///
/// ```no_run
/// use rally::ActorSystem;
/// use rally::cluster::provider::GossipProvider;
/// use rally::cluster::{Cluster, ClusterConfig};
/// use rally::remote::{RemoteConfig, RemoteNode};
///
/// # #[tokio::main] async fn main() {
/// let system = ActorSystem::new("shop");
/// let remote = RemoteConfig::builder().listen("127.0.0.1", 0).secret(b"cluster secret".to_vec()).build().unwrap();
/// let node = RemoteNode::start(&system, remote).await.unwrap();
/// let provider = GossipProvider::new(&system, &node);
/// let cluster = Cluster::join_with(Cluster::member_id(&node), ClusterConfig::default(), provider).unwrap();
/// assert_eq!(cluster.self_member().id.address, *node.address());
/// # }
/// ```
pub struct GossipProvider {
    system: ActorSystem,
    node: RemoteNode,
    seed: Option<u64>,
}

impl GossipProvider {
    /// Gossip over `node`, whose actors live in `system`.
    pub fn new(system: &ActorSystem, node: &RemoteNode) -> Self {
        Self {
            system: system.clone(),
            node: node.clone(),
            seed: None,
        }
    }

    /// Seeds the protocol's random choices (the order of probes, the members gossiped to)
    /// with `seed` instead of the operating system's randomness: for a simulation that must
    /// replay exactly from its seed (`rally::sim::join` does this). In production leave it
    /// unset: members that share a seed probe in the same order.
    ///
    /// # Example
    ///
    /// ```no_run
    /// use rally::ActorSystem;
    /// use rally::cluster::provider::GossipProvider;
    /// use rally::cluster::{Cluster, ClusterConfig};
    /// use rally::remote::{RemoteConfig, RemoteNode};
    ///
    /// # #[tokio::main] async fn main() {
    /// let system = ActorSystem::new("shop");
    /// let remote = RemoteConfig::builder().listen("127.0.0.1", 0).secret(b"cluster secret".to_vec()).build().unwrap();
    /// let node = RemoteNode::start(&system, remote).await.unwrap();
    /// let provider = GossipProvider::new(&system, &node).with_seed(7);
    /// let cluster = Cluster::join_using(&system, &node, ClusterConfig::default(), provider).unwrap();
    /// # }
    /// ```
    #[must_use]
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }
}

impl Provider for GossipProvider {
    fn start(
        self: Box<Self>,
        context: ProviderContext,
    ) -> Result<ProviderTask, ProviderStartError> {
        super::refuse_lease(&context.config)?;
        let (inbound_tx, inbound) = mpsc::channel(INBOUND_PACKETS);
        let endpoint = self.system.spawn(Endpoint {
            inbound: inbound_tx,
        })?;
        if let Err(e) = self.node.expose(ENDPOINT, &endpoint) {
            endpoint.stop();
            return Err(e.into());
        }
        let core = Membership::new(
            context.local,
            context.config.clone(),
            self.seed.unwrap_or_else(rand::random),
            tokio::time::Instant::now().into_std(),
        )
        .expect("Cluster::join_with validates the configuration before it starts a provider");
        let node = self.node.clone();
        let send = move |transmit: crate::Transmit| {
            // Looked up for every packet, never cached: a ref is bound to the incarnation its
            // address had when it was looked up, so a cached one would never reach a process
            // restarted at that address (a new member, which must be admitted at once).
            // Membership sends a few packets per second; a lookup is a map read.
            let peer = node.lookup::<Endpoint>(&transmit.to, ENDPOINT);
            // A refused send (queue full, peer gone) is a lost packet: SWIM tolerates loss.
            let _ = peer.tell(GossipPacket(transmit.payload));
        };
        // The node's own failure detector joins SWIM's probes in one reachability view.
        let peer_events = Some(self.node.peer_events());
        let node = self.node;
        Ok(Box::pin(async move {
            drive(
                core,
                inbound,
                send,
                context.commands,
                context.publisher,
                peer_events,
            )
            .await;
            node.unexpose(ENDPOINT);
            endpoint.stop();
        }))
    }
}

/// One membership packet (see `docs/cluster-protocol.md`), carried as a remote message.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct GossipPacket(#[serde(with = "bytes")] Vec<u8>);

impl Message for GossipPacket {
    type Reply = ();
}

impl RemoteMessage for GossipPacket {
    const MANIFEST: &'static str = "rally.cluster.Gossip";
}

/// Receives membership packets and hands them to the membership loop.
pub(crate) struct Endpoint {
    inbound: mpsc::Sender<Inbound>,
}

impl Actor for Endpoint {}

impl Handler<GossipPacket> for Endpoint {
    async fn handle(&mut self, packet: GossipPacket, ctx: &mut Context<Self>) -> ActorResult<()> {
        // The node the connection's handshake authenticated: the membership core drops a
        // packet that speaks for another member.
        let from = ctx.remote_origin().cloned();
        if self.inbound.try_send((from, packet.0)).is_err() {
            tracing::debug!("membership packet dropped: the membership loop is behind or gone");
        }
        Ok(())
    }
}

impl RemoteActor for Endpoint {
    fn messages(table: &mut MessageTable<Self>) {
        table.add::<GossipPacket>();
    }
}

/// Packets as one byte string (postcard would otherwise encode them byte by byte as a
/// sequence, which is the same bytes but slower).
mod bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(bytes)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        <Vec<u8>>::deserialize(d)
    }
}

impl std::fmt::Debug for GossipProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GossipProvider").finish_non_exhaustive()
    }
}
