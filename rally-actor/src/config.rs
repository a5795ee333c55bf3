//! System-wide settings.

use std::time::Duration;

use crate::{MailboxConfig, SupervisorStrategy, dispatch::DEFAULT_THROUGHPUT};

/// How long `shutdown` waits for actors to stop: long enough for handlers that finish their
/// current message, short enough that a stuck handler cannot hang a process exit.
const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// Settings for an [`ActorSystem`](crate::ActorSystem).
///
/// # Example
///
/// ```
/// use rally_actor::SystemConfig;
///
/// let config = SystemConfig { throughput: 16, ..SystemConfig::default() };
/// assert_eq!(config.throughput, 16);
/// ```
#[derive(Debug, Clone)]
pub struct SystemConfig {
    /// Messages an actor handles before yielding its thread (default 64).
    pub throughput: usize,
    /// The longest an actor keeps its thread while messages remain (default: unbounded).
    pub throughput_deadline: Option<Duration>,
    /// The mailbox of actors spawned without one (default: unbounded).
    pub default_mailbox: MailboxConfig,
    /// How the system supervises top-level actors.
    pub guardian_strategy: SupervisorStrategy,
    /// How long `shutdown` waits (default 10 s).
    pub shutdown_timeout: Duration,
}

impl Default for SystemConfig {
    fn default() -> Self {
        Self {
            throughput: DEFAULT_THROUGHPUT,
            throughput_deadline: None,
            default_mailbox: MailboxConfig::default(),
            guardian_strategy: SupervisorStrategy::default(),
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
        }
    }
}
