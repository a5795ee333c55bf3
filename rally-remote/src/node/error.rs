//! The node's errors: starting it and exposing an actor on it.

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeStartError {
    /// Binding the listener failed.
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// `host:port` asked for.
        address: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The actor system refused the node's own actors (it is shutting down).
    #[error("the actor system refused the node's actors: {0}")]
    System(rally_actor::SpawnError),
    /// The configuration is refused (no secret, a setting out of range):
    /// [`RemoteConfig::validate`](crate::RemoteConfig::validate).
    #[error("{0}")]
    Config(#[from] crate::RemoteConfigError),
}

/// Why an actor could not be exposed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ExposeError {
    /// Another actor is exposed under this name.
    #[error("an actor is already exposed as {0:?}")]
    NameTaken(String),
}
