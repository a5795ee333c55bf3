//! System-wide settings, in code or from a TOML file.

mod file;

use std::time::Duration;

use crate::dispatch::DispatcherKind;
use crate::{MailboxConfig, MonitoringConfig, SupervisorStrategy, dispatch::DEFAULT_THROUGHPUT};
pub use file::ConfigError;

/// How long `shutdown` waits for actors to stop: long enough for handlers that finish their
/// current message, short enough that a stuck handler cannot hang a process exit.
const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// Settings for an [`ActorSystem`](crate::ActorSystem).
///
/// Every field has a default; the same settings can come from a TOML file
/// ([`SystemConfig::from_toml`], keys listed in `docs/configuration.md`).
///
/// # Example
///
/// ```
/// use rally_actor::{DispatcherConfig, DispatcherKind, SystemConfig};
///
/// let mut config = SystemConfig { throughput: 16, ..SystemConfig::default() };
/// config.dispatchers.push(DispatcherConfig::new("io", DispatcherKind::blocking()));
/// assert_eq!(config.throughput, 16);
/// ```
#[derive(Debug, Clone)]
pub struct SystemConfig {
    /// Messages an actor handles before yielding its thread, for dispatchers that do not set
    /// their own (default 64).
    pub throughput: usize,
    /// The longest an actor keeps its thread while messages remain, for dispatchers that do not
    /// set their own (default: unbounded).
    pub throughput_deadline: Option<Duration>,
    /// The mailbox of actors spawned without one (default: unbounded).
    pub default_mailbox: MailboxConfig,
    /// How the system supervises top-level actors.
    pub guardian_strategy: SupervisorStrategy,
    /// How long `shutdown` waits (default 10 s).
    pub shutdown_timeout: Duration,
    /// The dispatcher actors use unless told otherwise (default: the current tokio runtime).
    pub default_dispatcher: DispatcherConfig,
    /// Further named dispatchers, started with the system.
    pub dispatchers: Vec<DispatcherConfig>,
    /// What is monitored and how.
    pub monitoring: MonitoringConfig,
}

impl Default for SystemConfig {
    fn default() -> Self {
        Self {
            throughput: DEFAULT_THROUGHPUT,
            throughput_deadline: None,
            default_mailbox: MailboxConfig::default(),
            guardian_strategy: SupervisorStrategy::default(),
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
            default_dispatcher: DispatcherConfig::new("default", DispatcherKind::CurrentRuntime),
            dispatchers: Vec::new(),
            monitoring: MonitoringConfig::default(),
        }
    }
}

impl SystemConfig {
    /// Reads settings from TOML text; every key is optional.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the key of an unknown key, a value of the wrong type or an
    /// invalid value.
    ///
    /// # Example
    ///
    /// ```
    /// use rally_actor::SystemConfig;
    ///
    /// let config = SystemConfig::from_toml(r#"
    ///     throughput = 5
    ///     [dispatchers.io]
    ///     type = "blocking"
    ///     max-pool-size = 16
    /// "#).unwrap();
    /// assert_eq!(config.throughput, 5);
    /// assert_eq!(config.dispatchers[0].name, "io");
    ///
    /// let error = SystemConfig::from_toml("thruput = 5").unwrap_err();
    /// assert_eq!(error.key(), Some("thruput"));
    /// ```
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        file::parse(text)
    }

    /// Reads settings from a TOML file.
    ///
    /// # Errors
    ///
    /// As for [`from_toml`](Self::from_toml), and [`ConfigError::Read`] when the file cannot
    /// be read.
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_toml(&text)
    }
}

/// One dispatcher's settings.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use rally_actor::{DispatcherConfig, DispatcherKind};
///
/// let mut fair = DispatcherConfig::new("fair", DispatcherKind::shared());
/// fair.throughput = Some(1);
/// fair.throughput_deadline = Some(Duration::from_millis(5));
/// assert!(!fair.monitored);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct DispatcherConfig {
    /// The name actors use in `Props::on_dispatcher`.
    pub name: String,
    /// What kind of executor, with its sizing.
    pub kind: DispatcherKind,
    /// Messages per turn (default: the system's `throughput`).
    pub throughput: Option<usize>,
    /// The longest turn (default: the system's `throughput_deadline`).
    pub throughput_deadline: Option<Duration>,
    /// Monitor every actor on it (default `false`).
    pub monitored: bool,
}

impl DispatcherConfig {
    /// A dispatcher of this kind with the system's throughput settings.
    pub fn new(name: impl Into<String>, kind: DispatcherKind) -> Self {
        Self {
            name: name.into(),
            kind,
            throughput: None,
            throughput_deadline: None,
            monitored: false,
        }
    }
}
