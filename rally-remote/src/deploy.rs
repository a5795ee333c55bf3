//! Remote deployment, as Akka's remote deploy: spawning a registered actor kind on a chosen
//! node. Each node runs a spawner actor, exposed as [`SPAWNER`], that spawns kinds registered
//! with [`RemoteNode::register_kind`](crate::RemoteNode::register_kind) on request.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use rally_actor::sync::RwLock;

use rally_actor::{Actor, ActorResult, AskError, Context, Handler, Message};
use serde::{Deserialize, Serialize};

use crate::node::NodeInner;
use crate::registry::{MessageTable, RemoteActor, RemoteMessage};

/// The name under which every node exposes its spawner.
pub const SPAWNER: &str = "$spawner";

/// Why a remote spawn failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RemoteSpawnError {
    /// The node refused: unknown kind, name in use, or the spawn failed there.
    #[error("the node refused to spawn: {0}")]
    Refused(String),
    /// The request or its answer did not make it.
    #[error("the spawn request failed: {0}")]
    Ask(#[from] AskError),
}

/// Spawns an actor of a registered kind and exposes it under a name.
pub(crate) type KindFactory =
    Arc<dyn Fn(&Arc<NodeInner>, &str) -> Result<(), String> + Send + Sync>;

/// The registered kinds of one node.
pub(crate) type Kinds = RwLock<HashMap<String, KindFactory>>;

/// Asks the spawner of a node for an actor of `kind`, exposed as `name`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SpawnRequest {
    pub(crate) kind: String,
    pub(crate) name: String,
}

impl Message for SpawnRequest {
    type Reply = Result<(), String>;
}

impl RemoteMessage for SpawnRequest {
    const MANIFEST: &'static str = "rally.SpawnRequest";
}

/// The per-node actor that serves spawn requests.
pub(crate) struct Spawner {
    pub(crate) node: Weak<NodeInner>,
}

impl Actor for Spawner {}

impl Handler<SpawnRequest> for Spawner {
    async fn handle(
        &mut self,
        request: SpawnRequest,
        _ctx: &mut Context<Self>,
    ) -> ActorResult<Result<(), String>> {
        let Some(node) = self.node.upgrade() else {
            return Ok(Err("the node is shutting down".to_owned()));
        };
        let factory = node.kind(&request.kind);
        Ok(match factory {
            Some(factory) => factory(&node, &request.name),
            None => Err(format!(
                "no actor kind {:?} is registered on {}",
                request.kind, node.local.address
            )),
        })
    }
}

impl RemoteActor for Spawner {
    fn messages(table: &mut MessageTable<Self>) {
        table.add::<SpawnRequest>();
    }
}
