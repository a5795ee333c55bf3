//! The node's errors: starting it and exposing an actor on it.

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
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
    /// The secret is empty: every peer that reaches the port would be trusted. Set one with
    /// `RemoteConfig::with_secret`, or, for a test, `RemoteConfig::insecure_without_secret`.
    #[error(
        "the remoting secret is empty; set one with RemoteConfig::with_secret (or insecure_without_secret for a test)"
    )]
    EmptySecret,
    /// A setting is out of range.
    #[error("invalid remoting setting {key}: {reason}")]
    Config {
        /// The setting.
        key: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

/// Why an actor could not be exposed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ExposeError {
    /// Another actor is exposed under this name.
    #[error("an actor is already exposed as {0:?}")]
    NameTaken(String),
}
