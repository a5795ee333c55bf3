//! Remoting settings, each defaulted, with the reason for the default.

use std::time::Duration;

use rally_wire::PhiAccrualConfig;

/// Largest frame (one message) by default: big enough for a 10 MB message on the large lane,
/// small enough that one peer cannot make us buffer more than this for a single frame.
pub(crate) const DEFAULT_MAX_FRAME_BYTES: u32 = 16 * 1024 * 1024;
/// Bound on bytes queued per outbound lane: at ~100 B a message this is ~80k messages, enough
/// to ride out a hiccup of the peer, and bounded so a dead peer cannot exhaust memory.
pub(crate) const DEFAULT_OUTBOUND_LANE_BYTES: usize = 8 * 1024 * 1024;
/// Ordinary lanes per association: one per core on a small machine keeps decoding parallel
/// without multiplying connections.
pub(crate) const DEFAULT_ORDINARY_LANES: u8 = 1;
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

/// Settings of a [`RemoteNode`](crate::RemoteNode).
///
/// # Example
///
/// ```
/// use rally::remote::RemoteConfig;
///
/// let config = RemoteConfig::new("127.0.0.1", 0).with_secret(b"cluster secret".to_vec());
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
    /// peer. For tests on a private machine only; see [`insecure_without_secret`](Self::insecure_without_secret).
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

impl RemoteConfig {
    /// Defaults, listening on `host:port`, with no secret yet: set one with
    /// [`with_secret`](Self::with_secret) (a node refuses to start without one unless told
    /// [`insecure_without_secret`](Self::insecure_without_secret)).
    pub fn new(host: impl Into<String>, port: u16) -> Self {
        Self {
            host: host.into(),
            port,
            secret: Vec::new(),
            cluster_name: DEFAULT_CLUSTER_NAME.to_owned(),
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            outbound_lane_bytes: DEFAULT_OUTBOUND_LANE_BYTES,
            ordinary_lanes: DEFAULT_ORDINARY_LANES,
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

    /// Sets the shared cluster secret.
    pub fn with_secret(mut self, secret: Vec<u8>) -> Self {
        self.secret = secret;
        self
    }

    /// Sets the cluster name (default `"rally"`): nodes with different names refuse each other
    /// during the handshake, and a send to such a node fails at once with an `Undeliverable`
    /// error naming both clusters.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::remote::RemoteConfig;
    ///
    /// let config = RemoteConfig::new("127.0.0.1", 0).with_cluster_name("orders");
    /// assert_eq!(config.cluster_name, "orders");
    /// assert_eq!(RemoteConfig::new("127.0.0.1", 0).cluster_name, "rally");
    /// ```
    pub fn with_cluster_name(mut self, name: impl Into<String>) -> Self {
        self.cluster_name = name.into();
        self
    }

    /// Checks the settings a node would refuse at [`start`](crate::RemoteNode::start): a
    /// cluster name of 1 to 255 bytes, an ordinary lane count in `1..=254`, non-zero
    /// durations and bounds, a usable failure detector. (An empty secret is checked at start
    /// too, as [`StartError::EmptySecret`](crate::StartError::EmptySecret).)
    ///
    /// # Errors
    ///
    /// [`StartError::Config`](crate::StartError::Config) naming the first setting out of range.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use rally::remote::{RemoteConfig, StartError};
    ///
    /// let mut config = RemoteConfig::new("127.0.0.1", 0);
    /// assert!(config.validate().is_ok());
    /// config.heartbeat_interval = Duration::ZERO;
    /// assert!(matches!(config.validate(), Err(StartError::Config { key: "heartbeat_interval", .. })));
    /// ```
    pub fn validate(&self) -> Result<(), crate::StartError> {
        let invalid =
            |key: &'static str, reason: String| Err(crate::StartError::Config { key, reason });
        if self.cluster_name.is_empty() || self.cluster_name.len() > MAX_CLUSTER_NAME_LEN {
            return invalid(
                "cluster_name",
                format!(
                    "{:?} is not 1 to {MAX_CLUSTER_NAME_LEN} bytes long",
                    self.cluster_name
                ),
            );
        }
        if !(1..=rally_wire::MAX_ORDINARY_LANES).contains(&self.ordinary_lanes) {
            return invalid(
                "ordinary_lanes",
                format!(
                    "{} is not in 1..={}",
                    self.ordinary_lanes,
                    rally_wire::MAX_ORDINARY_LANES
                ),
            );
        }
        if self.max_frame_bytes < MIN_MAX_FRAME_BYTES {
            return invalid(
                "max_frame_bytes",
                format!(
                    "{} is below {MIN_MAX_FRAME_BYTES}, the least a peer accepts",
                    self.max_frame_bytes
                ),
            );
        }
        for (key, value) in [
            ("heartbeat_interval", self.heartbeat_interval),
            ("handshake_timeout", self.handshake_timeout),
            ("max_reconnect_backoff", self.max_reconnect_backoff),
            ("partial_frame_timeout", self.partial_frame_timeout),
        ] {
            if value.is_zero() {
                return invalid(key, "0 s is not a usable duration".to_owned());
            }
        }
        if self.outbound_lane_bytes == 0 {
            return invalid(
                "outbound_lane_bytes",
                "0 would drop every message".to_owned(),
            );
        }
        if self.max_unauthenticated_connections == 0 {
            return invalid(
                "max_unauthenticated_connections",
                "0 would refuse every peer".to_owned(),
            );
        }
        if let Err(error) = self.failure_detector.validate() {
            return invalid(
                match error.0 {
                    "threshold" => "failure_detector.threshold",
                    "max_sample_size" => "failure_detector.max_sample_size",
                    _ => "failure_detector.first_heartbeat_estimate",
                },
                error.1,
            );
        }
        Ok(())
    }

    /// Lets the node start with an empty secret, which it otherwise refuses
    /// ([`StartError::EmptySecret`](crate::StartError::EmptySecret)): every peer that can reach
    /// the port is then trusted. Only for tests on a machine of your own.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::remote::RemoteConfig;
    ///
    /// let config = RemoteConfig::new("127.0.0.1", 0).insecure_without_secret();
    /// assert!(config.allow_empty_secret);
    /// ```
    pub fn insecure_without_secret(mut self) -> Self {
        self.allow_empty_secret = true;
        self
    }
}
