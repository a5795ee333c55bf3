//! Cluster membership for the remote scenarios' `--cluster` runs: both nodes are members of one
//! cluster (default settings), so the membership protocol runs beside the measured messages.

use std::time::{Duration, Instant};

use anyhow::bail;
use rally::ActorSystem;
use rally::cluster::{Cluster, ClusterConfig, MemberStatus};
use rally::remote::{NodeAddress, RemoteNode};

/// How long the two nodes may take to see each other up.
const FORM_LIMIT: Duration = Duration::from_secs(30);

/// Node B founds a cluster of default settings (it is its own seed).
pub(crate) fn join_echo_cluster(
    system: &ActorSystem,
    node: &RemoteNode,
) -> anyhow::Result<Cluster> {
    Ok(Cluster::join(system, node, ClusterConfig::default())?)
}

/// Node A's membership in node B's cluster; leaving the scenario drops it.
pub(crate) struct ClientMember {
    _cluster: Cluster,
}

impl ClientMember {
    /// Joins node B's cluster through `seed` and waits until this member sees both up and
    /// reachable, then one more second, so that the runs measure the cluster at rest and not
    /// its join.
    pub(crate) async fn join(
        system: &ActorSystem,
        node: &RemoteNode,
        seed: &NodeAddress,
    ) -> anyhow::Result<Self> {
        let mut builder = ClusterConfig::builder();
        builder.seed(seed.clone());
        let cluster = Cluster::join(system, node, builder.build()?)?;
        let deadline = Instant::now() + FORM_LIMIT;
        loop {
            let members = cluster.members();
            if members.len() == 2
                && members
                    .iter()
                    .all(|m| m.status == MemberStatus::Up && m.reachable)
            {
                break;
            }
            if Instant::now() > deadline {
                bail!("the two nodes did not form a cluster within {FORM_LIMIT:?}: {members:?}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        Ok(Self { _cluster: cluster })
    }
}
