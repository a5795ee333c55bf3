//! Remoting settings, each defaulted, with the reason for the default.

use std::time::Duration;

use rally_wire::PhiAccrualConfig;

#[cfg(feature = "toml")]
mod file;

/// Largest frame (one message) by default: big enough for a 10 MB message on the large lane,
/// small enough that one peer cannot make us buffer more than this for a single frame.
pub(crate) const DEFAULT_MAX_FRAME_BYTES: u32 = 16 * 1024 * 1024;
/// Bound on bytes queued per outbound lane: at ~100 B a message this is ~80k messages, enough
/// to ride out a hiccup of the peer, and bounded so a dead peer cannot exhaust memory.
pub(crate) const DEFAULT_OUTBOUND_LANE_BYTES: usize = 8 * 1024 * 1024;
/// Cores per ordinary lane, by default: each lane has one reader on the receiving side (one
/// task decodes and delivers everything the lane carries), and on a many-core machine that
/// reader, not the cores, caps a peer's traffic. The write path's model
/// (`docs/write-path-model.md`) puts a reader's time per message at 15–60% of what the actors
/// it feeds spend: a lane per four cores keeps the readers ahead in most of that range, with
/// few connections (a judgement, not a measurement: no many-core machine was at hand).
pub(crate) const CORES_PER_ORDINARY_LANE: usize = 4;
/// The most ordinary lanes per association by default: connections per peer stay a small set.
pub(crate) const MAX_DEFAULT_ORDINARY_LANES: usize = 8;

/// Ordinary lanes per association by default: one per [`CORES_PER_ORDINARY_LANE`] cores this
/// process may use, at least 1 (so 1 on up to 7 cores) and at most
/// [`MAX_DEFAULT_ORDINARY_LANES`]. Messages to one recipient always share a lane, so per-pair
/// order holds whatever the count.
pub(crate) fn default_ordinary_lanes() -> u8 {
    ordinary_lanes_for(std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get))
}

/// The default number of ordinary lanes for a process that may use `cores` cores.
fn ordinary_lanes_for(cores: usize) -> u8 {
    let lanes = (cores / CORES_PER_ORDINARY_LANE).clamp(1, MAX_DEFAULT_ORDINARY_LANES);
    u8::try_from(lanes).expect("at most MAX_DEFAULT_ORDINARY_LANES, which fits a u8")
}
/// Heartbeat period on the control lane (Akka's remote watch uses 1 s as well).
pub(crate) const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(1);
/// How long a handshake may take before the connection is dropped: a silent or slow peer
/// must not hold a connection slot.
pub(crate) const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait between reconnection attempts (the wait doubles from 100 ms up to this).
pub(crate) const DEFAULT_MAX_RECONNECT_BACKOFF: Duration = Duration::from_secs(5);
/// A frame must be complete this long after its first byte arrived, or the connection is
/// closed (a peer that sends half a frame then goes silent, or drips it a byte at a time):
/// a 16 MiB frame then needs at least 1.6 MB/s.
pub(crate) const DEFAULT_IDLE_PARTIAL_FRAME_TIMEOUT: Duration = Duration::from_secs(10);

/// The cluster name of a node that is not told one. Rally's node addresses carry each
/// node's own system name (nodes of one application often have different ones), so the
/// default cannot be the system name as in Akka: it is one fixed name, so that nodes that
/// share a secret talk to each other without more setup, and an application that runs
/// several clusters on one network names each.
pub(crate) const DEFAULT_CLUSTER_NAME: &str = "rally";
/// Where a node listens by default: the loopback, so a node is not reachable from other
/// machines until told to be.
const DEFAULT_HOST: &str = "127.0.0.1";
/// The port a node listens on by default: Akka's classic remoting port, a familiar one.
const DEFAULT_PORT: u16 = 2552;
/// The smallest `max_frame_bytes` a peer accepts in the handshake (every control frame fits).
pub(crate) const MIN_MAX_FRAME_BYTES: u32 = 1024;
/// Longest cluster name: the handshake's bound on every name it carries.
pub(crate) const MAX_CLUSTER_NAME_LEN: usize = 255;
/// How long a peer the failure detector suspects stays unreachable before it is declared
/// down: at once, as Akka's remote watch does, because without a cluster nothing else would
/// ever decide, and a peer silent past the detector's threshold (3 s of acceptable pause on
/// top of the heartbeat model) is more likely dead than slow.
pub(crate) const DEFAULT_QUARANTINE_UNREACHABLE_AFTER: Option<Duration> = Some(Duration::ZERO);

/// How long a node waits, after a peer's leave notice, for the peer's connections on the data
/// lanes to end before declaring it down. A leaving node closes them as soon as they are
/// flushed (within its own `leave` timeout), so this only bounds a leaver that never does;
/// meanwhile sends to it go out as before and are failed as `OutcomeUnknown` if unanswered.
pub(crate) const LEAVE_FLUSH_WAIT: Duration = Duration::from_secs(2);

/// Connections that may be in their handshake at once: a burst of peers connecting (each
/// opens one connection per lane) fits, while memory before authentication stays bounded at
/// this many times a few KiB of handshake buffer (plus TLS state when TLS is on).
pub(crate) const DEFAULT_MAX_UNAUTHENTICATED_CONNECTIONS: usize = 256;

/// Settings of a [`RemoteNode`](crate::RemoteNode): from [`builder`](Self::builder), from a
/// TOML file ([`from_toml`](Self::from_toml), [`from_file`](Self::from_file)), or
/// [`default`](Self::default) with fields assigned. `Debug` never shows the secret.
///
/// # Example
///
/// ```
/// use rally::remote::RemoteConfig;
///
/// let config = RemoteConfig::builder()
///     .listen("127.0.0.1", 0)
///     .secret(b"cluster secret")
///     .build()
///     .unwrap();
/// assert_eq!(config.port, 0);
/// assert!(!format!("{config:?}").contains("cluster secret"));
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct RemoteConfig {
    /// Host to listen on and to advertise.
    pub host: String,
    /// Port to listen on (0 picks a free one).
    pub port: u16,
    /// Shared secret that authenticates nodes (HMAC challenge/response; never sent).
    pub secret: Vec<u8>,
    /// The cluster this node belongs to: nodes with different names refuse each other in the
    /// handshake (a permanent failure, like another secret). 1 to 255 bytes.
    pub cluster_name: String,
    /// Largest frame accepted or sent.
    pub max_frame_bytes: u32,
    /// Bound on queued bytes per outbound lane; the overflow goes to dead letters.
    pub outbound_lane_bytes: usize,
    /// Number of ordinary lanes per peer (messages are spread by recipient).
    pub ordinary_lanes: u8,
    /// Recipient names whose messages travel on the large-message lane.
    pub large_message_destinations: Vec<String>,
    /// Heartbeat period.
    pub heartbeat_interval: Duration,
    /// Failure detector settings.
    pub failure_detector: PhiAccrualConfig,
    /// How long a peer stays unreachable (suspected by the failure detector) before it is
    /// declared down and its incarnation quarantined; `None`: never by the detector alone
    /// (a cluster's downing decides, through `RemoteNode::quarantine`).
    pub quarantine_unreachable_after: Option<Duration>,
    /// Handshake deadline.
    pub handshake_timeout: Duration,
    /// Longest reconnection backoff.
    pub max_reconnect_backoff: Duration,
    /// Bound on the time from a frame's first byte to its last; a connection whose frame
    /// takes longer is closed.
    pub partial_frame_timeout: Duration,
    /// Connections that may be in their handshake at once; more are refused at once and
    /// counted (`RemoteStats::connections_refused`).
    pub max_unauthenticated_connections: usize,
    /// Start with an empty secret anyway: anyone who can reach the port is then a trusted
    /// peer. For tests on a private machine only; see [`insecure_without_secret`](RemoteConfigBuilder::insecure_without_secret).
    pub allow_empty_secret: bool,
}

impl std::fmt::Debug for RemoteConfig {
    /// Everything but the secret, of which only the length shows.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteConfig")
            .field("host", &self.host)
            .field("port", &self.port)
            .field(
                "secret",
                &format_args!("<{} bytes, not shown>", self.secret.len()),
            )
            .field("cluster_name", &self.cluster_name)
            .field("max_frame_bytes", &self.max_frame_bytes)
            .field("outbound_lane_bytes", &self.outbound_lane_bytes)
            .field("ordinary_lanes", &self.ordinary_lanes)
            .field(
                "large_message_destinations",
                &self.large_message_destinations,
            )
            .field("heartbeat_interval", &self.heartbeat_interval)
            .field("failure_detector", &self.failure_detector)
            .field(
                "quarantine_unreachable_after",
                &self.quarantine_unreachable_after,
            )
            .field("handshake_timeout", &self.handshake_timeout)
            .field("max_reconnect_backoff", &self.max_reconnect_backoff)
            .field("partial_frame_timeout", &self.partial_frame_timeout)
            .field(
                "max_unauthenticated_connections",
                &self.max_unauthenticated_connections,
            )
            .field("allow_empty_secret", &self.allow_empty_secret)
            .finish()
    }
}

impl Default for RemoteConfig {
    /// Every setting at its default: listening on 127.0.0.1:2552 (Akka's classic remoting
    /// port), and no secret, which a node refuses to start with.
    fn default() -> Self {
        Self {
            host: DEFAULT_HOST.to_owned(),
            port: DEFAULT_PORT,
            secret: Vec::new(),
            cluster_name: DEFAULT_CLUSTER_NAME.to_owned(),
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            outbound_lane_bytes: DEFAULT_OUTBOUND_LANE_BYTES,
            ordinary_lanes: default_ordinary_lanes(),
            large_message_destinations: Vec::new(),
            heartbeat_interval: DEFAULT_HEARTBEAT_INTERVAL,
            failure_detector: PhiAccrualConfig::default(),
            quarantine_unreachable_after: DEFAULT_QUARANTINE_UNREACHABLE_AFTER,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            max_reconnect_backoff: DEFAULT_MAX_RECONNECT_BACKOFF,
            partial_frame_timeout: DEFAULT_IDLE_PARTIAL_FRAME_TIMEOUT,
            max_unauthenticated_connections: DEFAULT_MAX_UNAUTHENTICATED_CONNECTIONS,
            allow_empty_secret: false,
        }
    }
}

impl RemoteConfig {
    /// A builder from the defaults; [`build`](RemoteConfigBuilder::build) checks the result.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use rally::remote::RemoteConfig;
    ///
    /// let config = RemoteConfig::builder()
    ///     .listen("0.0.0.0", 2552)
    ///     .secret(b"cluster secret")
    ///     .cluster_name("orders")
    ///     .heartbeat_interval(Duration::from_millis(500))
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(config.cluster_name, "orders");
    /// ```
    pub fn builder() -> RemoteConfigBuilder {
        RemoteConfigBuilder {
            config: Self::default(),
            secret_from: None,
        }
    }

    /// Reads settings from TOML text (keys in kebab-case, durations as `"500ms"`, `"5s"`); a
    /// key left out keeps its default. The secret is never in the text: `secret-file` names a
    /// file that holds it (a trailing newline is not part of it) and `secret-env` an
    /// environment variable.
    ///
    /// # Errors
    ///
    /// [`RemoteConfigError::Syntax`] for text that is not TOML, an unknown key or a value of the
    /// wrong type; [`RemoteConfigError::Secret`] when the secret cannot be read; and what
    /// [`validate`](Self::validate) refuses. Each names the key.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use rally::remote::{RemoteConfig, RemoteConfigError};
    ///
    /// let secret = std::env::temp_dir().join(format!("rally-example-{}", std::process::id()));
    /// std::fs::write(&secret, "s3cret\n").unwrap();
    /// let config = RemoteConfig::from_toml(&format!(r#"
    ///     host = "0.0.0.0"
    ///     port = 2552
    ///     secret-file = {secret:?}
    ///     heartbeat-interval = "500ms"
    ///     [failure-detector]
    ///     acceptable-heartbeat-pause = "5s"
    /// "#)).unwrap();
    /// std::fs::remove_file(&secret).unwrap();
    /// assert_eq!(config.heartbeat_interval, Duration::from_millis(500));
    /// assert_eq!(config.secret, b"s3cret");
    ///
    /// let refused = RemoteConfig::from_toml("secret = \"inline\"").unwrap_err();
    /// assert!(matches!(refused, RemoteConfigError::Syntax { .. }));
    /// ```
    #[cfg(feature = "toml")]
    pub fn from_toml(text: &str) -> Result<Self, RemoteConfigError> {
        file::parse(text)?.build()
    }

    /// Reads settings from a TOML file, as [`from_toml`](Self::from_toml).
    ///
    /// # Errors
    ///
    /// As for [`from_toml`](Self::from_toml), and [`RemoteConfigError::Read`] when the file
    /// cannot be read.
    ///
    /// # Example
    ///
    /// ```no_run
    /// let config = rally::remote::RemoteConfig::from_file("remote.toml").unwrap();
    /// ```
    #[cfg(feature = "toml")]
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<Self, RemoteConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| RemoteConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_toml(&text)
    }

    /// Checks the settings a node would refuse at [`start`](crate::RemoteNode::start): a
    /// secret (unless [`allow_empty_secret`](Self::allow_empty_secret)), a cluster name of 1 to
    /// 255 bytes, an ordinary lane count in `1..=254`, non-zero durations and bounds, a usable
    /// failure detector.
    ///
    /// # Errors
    ///
    /// [`RemoteConfigError::EmptySecret`], or [`RemoteConfigError::Invalid`] naming the first
    /// setting out of range.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use rally::remote::{RemoteConfig, RemoteConfigError};
    ///
    /// let mut config = RemoteConfig::default();
    /// assert!(matches!(config.validate(), Err(RemoteConfigError::EmptySecret)));
    /// config.secret = b"cluster secret".to_vec();
    /// assert!(config.validate().is_ok());
    /// config.heartbeat_interval = Duration::ZERO;
    /// assert!(matches!(
    ///     config.validate(),
    ///     Err(RemoteConfigError::Invalid { key: "heartbeat-interval", .. })
    /// ));
    /// ```
    pub fn validate(&self) -> Result<(), RemoteConfigError> {
        let invalid =
            |key: &'static str, reason: String| Err(RemoteConfigError::Invalid { key, reason });
        if self.secret.is_empty() && !self.allow_empty_secret {
            return Err(RemoteConfigError::EmptySecret);
        }
        if self.cluster_name.is_empty() || self.cluster_name.len() > MAX_CLUSTER_NAME_LEN {
            return invalid(
                "cluster-name",
                format!(
                    "{:?} is not 1 to {MAX_CLUSTER_NAME_LEN} bytes long",
                    self.cluster_name
                ),
            );
        }
        if !(1..=rally_wire::MAX_ORDINARY_LANES).contains(&self.ordinary_lanes) {
            return invalid(
                "ordinary-lanes",
                format!(
                    "{} is not in 1..={}",
                    self.ordinary_lanes,
                    rally_wire::MAX_ORDINARY_LANES
                ),
            );
        }
        if self.max_frame_bytes < MIN_MAX_FRAME_BYTES {
            return invalid(
                "max-frame-bytes",
                format!(
                    "{} is below {MIN_MAX_FRAME_BYTES}, the least a peer accepts",
                    self.max_frame_bytes
                ),
            );
        }
        for (key, value) in [
            ("heartbeat-interval", self.heartbeat_interval),
            ("handshake-timeout", self.handshake_timeout),
            ("max-reconnect-backoff", self.max_reconnect_backoff),
            ("partial-frame-timeout", self.partial_frame_timeout),
        ] {
            if value.is_zero() {
                return invalid(key, "0 s is not a usable duration".to_owned());
            }
        }
        if self.outbound_lane_bytes == 0 {
            return invalid(
                "outbound-lane-bytes",
                "0 would drop every message".to_owned(),
            );
        }
        if self.max_unauthenticated_connections == 0 {
            return invalid(
                "max-unauthenticated-connections",
                "0 would refuse every peer".to_owned(),
            );
        }
        if let Err(error) = self.failure_detector.validate() {
            return invalid(
                match error.0 {
                    "threshold" => "failure-detector.threshold",
                    "max_sample_size" => "failure-detector.max-sample-size",
                    _ => "failure-detector.first-heartbeat-estimate",
                },
                error.1,
            );
        }
        Ok(())
    }
}

/// Why a [`RemoteConfig`] was refused. Every variant but `Read` names the key, as in the TOML
/// file; none shows the secret.
///
/// # Example
///
/// ```
/// use rally::remote::{RemoteConfig, RemoteConfigError};
///
/// let refused = RemoteConfig::builder().secret(b"s").ordinary_lanes(0).build().unwrap_err();
/// assert!(matches!(refused, RemoteConfigError::Invalid { key: "ordinary-lanes", .. }));
/// assert_eq!(refused.key(), Some("ordinary-lanes"));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RemoteConfigError {
    /// No secret: every peer that reaches the port would be trusted. Set one (`secret`,
    /// `secret-file`, `secret-env`), or, for a test,
    /// [`insecure_without_secret`](RemoteConfigBuilder::insecure_without_secret).
    #[error(
        "secret: the remoting secret is empty; set one (secret-file, secret-env, or the builder's secret), or insecure_without_secret for a test"
    )]
    EmptySecret,
    /// The secret could not be read from where the configuration says it is.
    #[error("{key}: cannot read the secret from {from}: {reason}")]
    Secret {
        /// `secret-file` or `secret-env`.
        key: &'static str,
        /// The file or the variable.
        from: String,
        /// What went wrong (never the secret).
        reason: String,
    },
    /// A setting is out of range.
    #[error("{key}: {reason}")]
    Invalid {
        /// The key, as in the TOML file.
        key: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The text is not TOML, has an unknown key, or a value of the wrong type.
    #[error("{key}: {message}")]
    Syntax {
        /// The dotted key, as far as it could be found (`?` if not).
        key: String,
        /// The parser's explanation.
        message: String,
    },
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The operating system's error.
        source: std::io::Error,
    },
}

impl RemoteConfigError {
    /// The key the error is about, as in the TOML file (`secret` for an empty secret).
    ///
    /// # Example
    ///
    /// ```
    /// use rally::remote::RemoteConfig;
    ///
    /// assert_eq!(RemoteConfig::default().validate().unwrap_err().key(), Some("secret"));
    /// ```
    pub fn key(&self) -> Option<&str> {
        match self {
            Self::EmptySecret => Some("secret"),
            Self::Secret { key, .. } | Self::Invalid { key, .. } => Some(key),
            Self::Syntax { key, .. } => Some(key),
            Self::Read { .. } => None,
        }
    }
}

/// Where the builder reads the secret from at [`build`](RemoteConfigBuilder::build).
#[derive(Debug, Clone)]
enum SecretFrom {
    File(std::path::PathBuf),
    Env(String),
}

impl SecretFrom {
    /// The secret, or why it cannot be had (never showing it).
    fn read(&self) -> Result<Vec<u8>, RemoteConfigError> {
        let (key, from, read) = match self {
            Self::File(path) => (
                "secret-file",
                path.display().to_string(),
                std::fs::read(path).map_err(|error| error.to_string()),
            ),
            Self::Env(name) => (
                "secret-env",
                format!("environment variable {name}"),
                std::env::var_os(name)
                    .map(std::ffi::OsString::into_encoded_bytes)
                    .ok_or_else(|| "it is not set".to_owned()),
            ),
        };
        let refused = |reason: String| RemoteConfigError::Secret {
            key,
            from: from.clone(),
            reason,
        };
        let mut secret = read.map_err(refused)?;
        // A file written by `echo` or an editor ends in a newline that is not the secret's.
        while secret.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
            secret.pop();
        }
        if secret.is_empty() {
            return Err(refused("it is empty".to_owned()));
        }
        Ok(secret)
    }
}

/// Builds a [`RemoteConfig`] from the defaults; [`build`](Self::build) reads the secret from
/// where it was told and checks the whole ([`RemoteConfig::validate`]).
///
/// # Example
///
/// ```
/// use rally::remote::RemoteConfig;
///
/// let mut builder = RemoteConfig::builder();
/// builder.listen("127.0.0.1", 0).secret_env("NO_SUCH_VARIABLE_FOR_RALLY");
/// let refused = builder.build().unwrap_err();
/// assert_eq!(refused.key(), Some("secret-env"));
/// assert!(refused.to_string().contains("NO_SUCH_VARIABLE_FOR_RALLY"));
/// ```
#[derive(Debug, Clone)]
pub struct RemoteConfigBuilder {
    config: RemoteConfig,
    secret_from: Option<SecretFrom>,
}

impl RemoteConfigBuilder {
    /// Host to listen on and to advertise, and the port (0 picks a free one).
    pub fn listen(&mut self, host: impl Into<String>, port: u16) -> &mut Self {
        self.config.host = host.into();
        self.config.port = port;
        self
    }

    /// The shared cluster secret itself.
    pub fn secret(&mut self, secret: impl Into<Vec<u8>>) -> &mut Self {
        self.config.secret = secret.into();
        self.secret_from = None;
        self
    }

    /// The secret is the content of this file (without a trailing newline), read at
    /// [`build`](Self::build).
    pub fn secret_file(&mut self, path: impl Into<std::path::PathBuf>) -> &mut Self {
        self.secret_from = Some(SecretFrom::File(path.into()));
        self
    }

    /// The secret is the value of this environment variable, read at [`build`](Self::build).
    pub fn secret_env(&mut self, variable: impl Into<String>) -> &mut Self {
        self.secret_from = Some(SecretFrom::Env(variable.into()));
        self
    }

    /// Lets the node start with an empty secret, which it otherwise refuses
    /// ([`RemoteConfigError::EmptySecret`]): every peer that can reach the port is then
    /// trusted. Only for tests on a machine of your own.
    pub fn insecure_without_secret(&mut self) -> &mut Self {
        self.config.allow_empty_secret = true;
        self
    }

    /// The cluster name (default `"rally"`): nodes with different names refuse each other
    /// during the handshake, and a send to such a node fails at once with an `Undeliverable`
    /// error naming both clusters.
    pub fn cluster_name(&mut self, name: impl Into<String>) -> &mut Self {
        self.config.cluster_name = name.into();
        self
    }

    /// Largest frame accepted or sent.
    pub fn max_frame_bytes(&mut self, bytes: u32) -> &mut Self {
        self.config.max_frame_bytes = bytes;
        self
    }

    /// Bound on queued bytes per outbound lane.
    pub fn outbound_lane_bytes(&mut self, bytes: usize) -> &mut Self {
        self.config.outbound_lane_bytes = bytes;
        self
    }

    /// Ordinary lanes per peer.
    pub fn ordinary_lanes(&mut self, lanes: u8) -> &mut Self {
        self.config.ordinary_lanes = lanes;
        self
    }

    /// Adds a recipient name whose messages travel on the large-message lane.
    pub fn large_message_destination(&mut self, name: impl Into<String>) -> &mut Self {
        self.config.large_message_destinations.push(name.into());
        self
    }

    /// Heartbeat period.
    pub fn heartbeat_interval(&mut self, period: std::time::Duration) -> &mut Self {
        self.config.heartbeat_interval = period;
        self
    }

    /// Failure detector settings.
    pub fn failure_detector(&mut self, detector: PhiAccrualConfig) -> &mut Self {
        self.config.failure_detector = detector;
        self
    }

    /// How long a suspected peer stays unreachable before it is declared down; `None`: never
    /// by the detector alone.
    pub fn quarantine_unreachable_after(
        &mut self,
        after: Option<std::time::Duration>,
    ) -> &mut Self {
        self.config.quarantine_unreachable_after = after;
        self
    }

    /// Handshake deadline.
    pub fn handshake_timeout(&mut self, timeout: std::time::Duration) -> &mut Self {
        self.config.handshake_timeout = timeout;
        self
    }

    /// Longest reconnection backoff.
    pub fn max_reconnect_backoff(&mut self, max: std::time::Duration) -> &mut Self {
        self.config.max_reconnect_backoff = max;
        self
    }

    /// Bound on the time from a frame's first byte to its last.
    pub fn partial_frame_timeout(&mut self, timeout: std::time::Duration) -> &mut Self {
        self.config.partial_frame_timeout = timeout;
        self
    }

    /// Connections that may be in their handshake at once.
    pub fn max_unauthenticated_connections(&mut self, connections: usize) -> &mut Self {
        self.config.max_unauthenticated_connections = connections;
        self
    }

    /// The configuration, with the secret read from where it was told, checked.
    ///
    /// # Errors
    ///
    /// [`RemoteConfigError::Secret`] when the secret cannot be read, and what
    /// [`RemoteConfig::validate`] refuses.
    pub fn build(&self) -> Result<RemoteConfig, RemoteConfigError> {
        let mut config = self.config.clone();
        if let Some(from) = &self.secret_from {
            config.secret = from.read()?;
        }
        config.validate()?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_ordinary_lane_per_four_cores_between_one_and_eight() {
        let lanes: Vec<u8> = [1, 2, 4, 7, 8, 15, 16, 32, 33, 64, 1024]
            .into_iter()
            .map(ordinary_lanes_for)
            .collect();
        assert_eq!(lanes, [1, 1, 1, 1, 2, 3, 4, 8, 8, 8, 8]);
    }

    #[test]
    fn the_default_lane_count_passes_validation() {
        let config = RemoteConfig {
            secret: b"s".to_vec(),
            ..RemoteConfig::default()
        };
        assert!((1..=8).contains(&config.ordinary_lanes));
        assert!(config.validate().is_ok(), "{config:?}");
    }
}
