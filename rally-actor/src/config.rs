//! System-wide settings, in code or from a TOML file.

// Without the `toml` feature only the error type is used.
#[cfg_attr(not(feature = "toml"), allow(dead_code, unused_imports))]
mod file;

use std::time::Duration;

use crate::dispatch::DispatcherKind;
use crate::{MailboxConfig, MonitoringConfig, SupervisorStrategy, dispatch::DEFAULT_THROUGHPUT};
pub use file::SystemConfigError;

/// How long `shutdown` waits for actors to stop: long enough for handlers that finish their
/// current message, short enough that a stuck handler cannot hang a process exit.
const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// Settings for an [`ActorSystem`](crate::ActorSystem).
///
/// Every field has a default; build one with [`SystemConfig::builder`], or start from
/// `default()` and set fields. The same settings can come from a TOML file
/// (`SystemConfig::from_toml`, feature `toml`; keys listed in `docs/configuration.md`).
/// Non-exhaustive, so a new setting is not a breaking change.
///
/// # Example
///
/// ```
/// use rally::{DispatcherConfig, DispatcherKind, SystemConfig};
///
/// let config = SystemConfig::builder()
///     .throughput(16)
///     .dispatcher(DispatcherConfig::new("io", DispatcherKind::blocking()))
///     .build()
///     .unwrap();
/// assert_eq!(config.throughput, 16);
/// assert_eq!(config.dispatchers[0].name, "io");
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
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
    /// A builder starting from the defaults.
    pub fn builder() -> SystemConfigBuilder {
        SystemConfigBuilder::default()
    }

    /// Reads settings from TOML text; every key is optional.
    ///
    /// # Errors
    ///
    /// [`SystemConfigError`] naming the key of an unknown key, a value of the wrong type or an
    /// invalid value.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::SystemConfig;
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
    #[cfg(feature = "toml")]
    pub fn from_toml(text: &str) -> Result<Self, SystemConfigError> {
        file::parse(text)
    }

    /// Reads settings from a TOML file.
    ///
    /// # Errors
    ///
    /// As for [`from_toml`](Self::from_toml), and [`SystemConfigError::Read`] when the file cannot
    /// be read.
    #[cfg(feature = "toml")]
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<Self, SystemConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| SystemConfigError::Read {
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
/// use rally::{DispatcherConfig, DispatcherKind};
///
/// let mut fair = DispatcherConfig::new("fair", DispatcherKind::shared());
/// fair.throughput = Some(1);
/// fair.throughput_deadline = Some(Duration::from_millis(5));
/// assert!(!fair.monitored);
/// ```
///
/// Non-exhaustive: made with [`DispatcherConfig::new`], then its fields set.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
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

/// Builds a [`SystemConfig`]: setters take `&mut self`, [`build`](Self::build) checks the
/// whole.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use rally::{MailboxConfig, Overflow, SystemConfig};
///
/// let mut builder = SystemConfig::builder();
/// builder
///     .shutdown_timeout(Duration::from_secs(2))
///     .default_mailbox(MailboxConfig::bounded(1_000, Overflow::Fail));
/// let config = builder.build().unwrap();
/// assert_eq!(config.shutdown_timeout, Duration::from_secs(2));
///
/// let error = SystemConfig::builder().throughput(0).build().unwrap_err();
/// assert_eq!(error.key(), Some("throughput"));
/// ```
#[derive(Debug, Clone, Default)]
pub struct SystemConfigBuilder {
    config: SystemConfig,
}

impl SystemConfigBuilder {
    /// Messages an actor handles before yielding its thread (at least 1; default 64).
    pub fn throughput(&mut self, messages: usize) -> &mut Self {
        self.config.throughput = messages;
        self
    }

    /// The longest an actor keeps its thread while messages remain (default: unbounded).
    pub fn throughput_deadline(&mut self, deadline: Option<Duration>) -> &mut Self {
        self.config.throughput_deadline = deadline;
        self
    }

    /// The mailbox of actors spawned without one (default: unbounded).
    pub fn default_mailbox(&mut self, mailbox: MailboxConfig) -> &mut Self {
        self.config.default_mailbox = mailbox;
        self
    }

    /// How the system supervises top-level actors.
    pub fn guardian_strategy(&mut self, strategy: SupervisorStrategy) -> &mut Self {
        self.config.guardian_strategy = strategy;
        self
    }

    /// How long `shutdown` waits (default 10 s).
    pub fn shutdown_timeout(&mut self, timeout: Duration) -> &mut Self {
        self.config.shutdown_timeout = timeout;
        self
    }

    /// The dispatcher actors use unless told otherwise (default: the current tokio runtime).
    pub fn default_dispatcher(&mut self, dispatcher: DispatcherConfig) -> &mut Self {
        self.config.default_dispatcher = dispatcher;
        self
    }

    /// Adds a named dispatcher, started with the system.
    pub fn dispatcher(&mut self, dispatcher: DispatcherConfig) -> &mut Self {
        self.config.dispatchers.push(dispatcher);
        self
    }

    /// What is monitored and how.
    pub fn monitoring(&mut self, monitoring: MonitoringConfig) -> &mut Self {
        self.config.monitoring = monitoring;
        self
    }

    /// The settings.
    ///
    /// # Errors
    ///
    /// [`SystemConfigError::Invalid`] naming the setting (as its TOML key): a throughput of 0, a
    /// named dispatcher called `default` or named twice.
    pub fn build(&self) -> Result<SystemConfig, SystemConfigError> {
        let config = &self.config;
        let invalid = |key: &str, reason: &str| SystemConfigError::Invalid {
            key: key.to_owned(),
            reason: reason.to_owned(),
        };
        if config.throughput == 0 {
            return Err(invalid("throughput", "must be at least 1"));
        }
        let mut names = std::collections::HashSet::new();
        for d in &config.dispatchers {
            let key = format!("dispatchers.{}", d.name);
            if d.name == "default" || d.name.is_empty() {
                return Err(invalid(
                    &key,
                    "a named dispatcher needs a name other than \"default\"",
                ));
            }
            if !names.insert(d.name.as_str()) {
                return Err(invalid(&key, "named twice"));
            }
            if d.throughput == Some(0) {
                return Err(invalid(&format!("{key}.throughput"), "must be at least 1"));
            }
        }
        Ok(config.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builder_starts_from_the_defaults() {
        let config = SystemConfig::builder().build().unwrap();
        assert_eq!(config.throughput, DEFAULT_THROUGHPUT);
        assert_eq!(config.shutdown_timeout, DEFAULT_SHUTDOWN_TIMEOUT);
        assert!(config.dispatchers.is_empty());
    }

    #[test]
    fn the_builder_refuses_what_the_toml_file_refuses_naming_the_key() {
        let io = || DispatcherConfig::new("io", DispatcherKind::blocking());
        let twice = SystemConfig::builder()
            .dispatcher(io())
            .dispatcher(io())
            .build()
            .unwrap_err();
        assert_eq!(twice.key(), Some("dispatchers.io"));
        let default = SystemConfig::builder()
            .dispatcher(DispatcherConfig::new("default", DispatcherKind::blocking()))
            .build()
            .unwrap_err();
        assert_eq!(default.key(), Some("dispatchers.default"));
        let mut stalled = io();
        stalled.throughput = Some(0);
        let zero = SystemConfig::builder()
            .dispatcher(stalled)
            .build()
            .unwrap_err();
        assert_eq!(zero.key(), Some("dispatchers.io.throughput"));
    }

    #[test]
    fn setters_chain_on_one_builder() {
        let mut builder = SystemConfig::builder();
        builder.throughput(5);
        builder.throughput_deadline(Some(Duration::from_millis(2)));
        let config = builder.build().unwrap();
        assert_eq!(config.throughput, 5);
        assert_eq!(config.throughput_deadline, Some(Duration::from_millis(2)));
    }
}
