//! The in-memory provider: the membership core over in-process channels, for many members in
//! one process (tests of what stands on membership), with no node and no socket.

use std::collections::HashMap;
use std::sync::Arc;

use rally_remote::NodeAddress;
use tokio::sync::mpsc;

use super::{Inbound, Provider, ProviderContext, ProviderStartError, ProviderTask, drive};
use crate::membership::Membership;
use rally_actor::sync::Mutex;

/// Packets waiting per member; beyond it they are dropped, as a network would.
const INBOUND_PACKETS: usize = 1024;

/// The in-process network that [`MemoryProvider`] members share.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use rally::cluster::provider::{MemoryNetwork, MemoryProvider};
/// use rally::cluster::{Cluster, ClusterConfig, MemberEvent, MemberId};
/// use rally::remote::Incarnation;
///
/// # #[tokio::main] async fn main() {
/// let network = MemoryNetwork::new();
/// let id = |port: u16| MemberId::new(format!("rally://shop@mem:{port}").parse().unwrap(), Incarnation(port.into()), port.into());
/// let a = Cluster::join_with(id(1), ClusterConfig::default(), MemoryProvider::new(&network)).unwrap();
/// let mut config = ClusterConfig::default();
/// config.seeds = vec![id(1).address];
/// let b = Cluster::join_with(id(2), config, MemoryProvider::new(&network)).unwrap();
/// let mut events = a.events();
/// let up = tokio::time::timeout(Duration::from_secs(10), async {
///     while let Some(event) = events.next().await {
///         if event == MemberEvent::Up(id(2)) { return true; }
///     }
///     false
/// });
/// assert!(up.await.unwrap());
/// assert_eq!(a.members().len(), 2);
/// # drop(b);
/// # }
/// ```
#[derive(Clone, Default)]
pub struct MemoryNetwork {
    members: Arc<Mutex<HashMap<NodeAddress, mpsc::Sender<Inbound>>>>,
}

impl MemoryNetwork {
    /// An empty network.
    pub fn new() -> Self {
        Self::default()
    }

    fn members(&self) -> std::sync::MutexGuard<'_, HashMap<NodeAddress, mpsc::Sender<Inbound>>> {
        self.members.lock()
    }
}

/// SWIM over a [`MemoryNetwork`].
pub struct MemoryProvider {
    network: MemoryNetwork,
}

impl MemoryProvider {
    /// A member of `network`.
    pub fn new(network: &MemoryNetwork) -> Self {
        Self {
            network: network.clone(),
        }
    }
}

impl Provider for MemoryProvider {
    fn start(
        self: Box<Self>,
        context: ProviderContext,
    ) -> Result<ProviderTask, ProviderStartError> {
        super::refuse_lease(&context.config)?;
        let (inbound_tx, inbound) = mpsc::channel(INBOUND_PACKETS);
        let address = context.local.address.clone();
        self.network
            .members()
            .insert(address.clone(), inbound_tx.clone());
        let core = Membership::new(
            context.local,
            context.config,
            rand::random(),
            tokio::time::Instant::now().into_std(),
        )
        .expect("Cluster::join_with validates the configuration before it starts a provider");
        let network = self.network.clone();
        let send = move |transmit: crate::Transmit| {
            let peer = network.members().get(&transmit.to).cloned();
            if let Some(peer) = peer {
                let _ = peer.try_send((None, transmit.payload));
            }
        };
        let network = self.network;
        Ok(Box::pin(async move {
            drive(
                core,
                inbound,
                send,
                context.commands,
                context.publisher,
                None,
            )
            .await;
            let mut members = network.members();
            // A later life at this address may have registered meanwhile: keep it.
            if members
                .get(&address)
                .is_some_and(|s| s.same_channel(&inbound_tx))
            {
                members.remove(&address);
            }
        }))
    }
}

impl std::fmt::Debug for MemoryNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryNetwork").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for MemoryProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryProvider").finish_non_exhaustive()
    }
}
