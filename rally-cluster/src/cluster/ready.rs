//! Waiting until this member is up, and the seeds' refusals that say it never will be (another
//! secret, cluster name or protocol version): what [`Cluster::wait_until_up`](super::Cluster::wait_until_up)
//! reads.

use std::collections::BTreeMap;
use std::time::Duration;

use rally_remote::{NodeAddress, PeerEvent, RemoteNode};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::watch;

use crate::member::MemberStatus;

/// Why [`Cluster::wait_until_up`](super::Cluster::wait_until_up) returned before this member
/// was up.
///
/// # Example
///
/// ```
/// use rally::cluster::UpError;
///
/// let error = UpError::Refused {
///     seed: "rally://shop@10.0.0.1:2552".parse().unwrap(),
///     reason: "secrets differ".into(),
/// };
/// assert!(error.to_string().contains("secrets differ"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UpError {
    /// Every seed (but this member itself) refused this node's handshake for a reason
    /// retrying cannot fix: another secret, another cluster name (the system name in the seed's
    /// address), another protocol version, a certificate not trusted. `reason` is the first
    /// seed's (never the secret).
    #[error("seed {seed} refused this node: {reason}")]
    Refused {
        /// The seed.
        seed: NodeAddress,
        /// What was wrong.
        reason: String,
    },
    /// This member was not up within the time given; `status` is how it saw itself then
    /// (`Joining`: no seed answered, or the others have not admitted it yet).
    #[error("not up within {waited:?} (still {status:?})")]
    Timeout {
        /// The time waited.
        waited: Duration,
        /// This member's status at the end.
        status: MemberStatus,
    },
    /// This member left or was downed before it was up.
    #[error("this member left or was downed before it was up")]
    Stopped,
}

/// The seeds that refused this node, with their reasons, as the node's peer events report
/// them (a later successful handshake with a seed takes it off).
#[derive(Debug, Clone)]
pub(crate) struct SeedRefusals {
    /// The seeds other than this member.
    seeds: Vec<NodeAddress>,
    refused: watch::Receiver<BTreeMap<NodeAddress, String>>,
}

impl SeedRefusals {
    /// No seed can refuse (a member with no node, as in `join_with`).
    pub(crate) fn none() -> Self {
        let (_, refused) = watch::channel(BTreeMap::new());
        Self {
            seeds: Vec::new(),
            refused,
        }
    }

    /// Watches `node`'s peer events for refusals by `seeds` (this node's own address left
    /// out). Call before the node first dials a seed, so that no refusal is missed.
    pub(crate) fn watch(node: &RemoteNode, seeds: &[NodeAddress]) -> Self {
        let seeds: Vec<NodeAddress> = seeds
            .iter()
            .filter(|seed| *seed != node.address())
            .cloned()
            .collect();
        let (tell, refused) = watch::channel(BTreeMap::new());
        let mut events = node.peer_events();
        let watched = seeds.clone();
        tokio::spawn(async move {
            loop {
                let event = match events.recv().await {
                    Ok(event) => event,
                    Err(RecvError::Lagged(_)) => continue,
                    Err(RecvError::Closed) => return,
                };
                match event {
                    PeerEvent::Refused { address, reason } if watched.contains(&address) => {
                        tell.send_modify(|refused| {
                            refused.insert(address, reason);
                        });
                    }
                    PeerEvent::Connected(peer) => {
                        tell.send_if_modified(|refused| refused.remove(&peer.address).is_some());
                    }
                    _ => {}
                }
                if tell.is_closed() {
                    return; // nobody reads them any more
                }
            }
        });
        Self { seeds, refused }
    }

    /// The first seed and its reason, if every seed has refused this node.
    pub(crate) fn all_refused(&self) -> Option<(NodeAddress, String)> {
        let refused = self.refused.borrow();
        let all = !self.seeds.is_empty() && self.seeds.iter().all(|s| refused.contains_key(s));
        all.then(|| {
            let seed = &self.seeds[0];
            (seed.clone(), refused[seed].clone())
        })
    }

    /// Resolves when the refusals change (never, once nothing can change them).
    pub(crate) async fn changed(&mut self) {
        if self.refused.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}
