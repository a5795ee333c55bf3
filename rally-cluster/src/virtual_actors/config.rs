//! The settings of the virtual-actor runtime, each defaulted, with the reason for the default.

use std::time::Duration;

use rally_state::MAX_IDENTITY_BYTES;
use serde::{Deserialize, Serialize};

use crate::config::{ClusterConfigError, duration};

/// Five minutes: between Pekko's 120 s (which re-activates an actor read every few minutes
/// over and over, each time reloading its state) and Orleans' 15 min and Dapr's 60 min (which
/// keep a burst's worth of one-off identities in memory for a quarter to a whole hour); the
/// cap on active actors bounds memory whatever the idle time.
const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// A few hundred bytes of runtime overhead per activation: 100,000 is tens of MB per kind.
const DEFAULT_MAX_ACTIVE: usize = 100_000;
/// Room for one state save (milliseconds on SQLite or a nearby PostgreSQL); part of the
/// takeover wait after a member is downed, so short.
const DEFAULT_DEACTIVATION_TIMEOUT: Duration = Duration::from_secs(2);
/// A join moves identities this many at a time instead of stopping the world; enough that a
/// few thousand moves finish in a few rounds of state saves.
const DEFAULT_MAX_CONCURRENT_MOVES: usize = 64;
/// A stale cache and a move each cost one forward; four covers both with room, and stops a
/// loop between members whose views disagree.
const DEFAULT_MAX_HOPS: u8 = 4;
/// Members that start together see each other within a few gossip rounds (well under a
/// second); ten seconds also covers a member still joining a loaded cluster.
const DEFAULT_HOST_WAIT: Duration = Duration::from_secs(10);

/// How virtual actors are activated, passivated and moved on one member.
///
/// In a TOML file every key is optional and kebab-case ([`from_toml`](Self::from_toml)); in
/// code, start from [`VirtualActorsConfig::default`] and assign fields, or use
/// [`VirtualActorsConfig::builder`], whose `build()` checks the whole. The keys, their defaults
/// and why are listed in `docs/configuration.md`.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use rally::cluster::virtual_actors::VirtualActorsConfig;
///
/// let mut config = VirtualActorsConfig::default();
/// assert_eq!(config.idle_timeout, Duration::from_secs(300));
/// config.max_active = 10_000;
/// assert_eq!(config.max_active, 10_000);
///
/// let built = VirtualActorsConfig::builder()
///     .idle_timeout(Duration::from_secs(60))
///     .max_active(10_000)
///     .build()
///     .unwrap();
/// assert_eq!(built.idle_timeout, Duration::from_secs(60));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
#[non_exhaustive]
pub struct VirtualActorsConfig {
    /// An activation that has handled no message for this long is deactivated (default
    /// 5 min; see `docs/configuration.md` for why).
    #[serde(with = "duration")]
    pub idle_timeout: Duration,
    /// Activations of one kind this member holds at most; past it, the least recently used
    /// idle ones are deactivated (default 100,000: a few hundred bytes of runtime overhead
    /// each is tens of MB).
    pub max_active: usize,
    /// How long a deactivation may take (the messages already queued, then the actor's
    /// `stopped` hook) before the actor is stopped regardless. It is part of the takeover
    /// wait after a member is downed, so keep it short: the default 2 s is room for one state
    /// save.
    #[serde(with = "duration")]
    pub deactivation_timeout: Duration,
    /// Identities this member moves away at once after a membership change, so a join does
    /// not stop the world: the rest wait their turn, still serving (default 64).
    pub max_concurrent_moves: usize,
    /// Forwards a message may take before it fails with `TooManyHops`: a stale cache and a
    /// move each cost one; four covers both with room, and stops a loop between members
    /// whose views disagree.
    pub max_hops: u8,
    /// The longest identity, in bytes (default and most: the state stores' limit, 256).
    pub max_identity_bytes: usize,
    /// How long a `tell` for a kind that no member is yet seen hosting waits for one before
    /// it is dropped (default 10 s: members that start together see each other within a few
    /// gossip rounds). An `ask` waits at most its own timeout and then fails with `NoHost`.
    #[serde(with = "duration")]
    pub host_wait: Duration,
}

impl Default for VirtualActorsConfig {
    fn default() -> Self {
        Self {
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_active: DEFAULT_MAX_ACTIVE,
            deactivation_timeout: DEFAULT_DEACTIVATION_TIMEOUT,
            max_concurrent_moves: DEFAULT_MAX_CONCURRENT_MOVES,
            max_hops: DEFAULT_MAX_HOPS,
            max_identity_bytes: MAX_IDENTITY_BYTES,
            host_wait: DEFAULT_HOST_WAIT,
        }
    }
}

impl VirtualActorsConfig {
    /// A builder, starting from the defaults.
    ///
    /// # Example
    ///
    /// See [`VirtualActorsConfig`].
    pub fn builder() -> VirtualActorsConfigBuilder {
        VirtualActorsConfigBuilder {
            config: Self::default(),
        }
    }

    /// Reads the settings from TOML text: every key optional, kebab-case, durations as
    /// `"250ms"`, `"5s"`, `"2m"`; then checks them as [`validate`](Self::validate) does.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use rally::cluster::ClusterConfigError;
    /// use rally::cluster::virtual_actors::VirtualActorsConfig;
    ///
    /// let config = VirtualActorsConfig::from_toml("idle-timeout = \"2m\"\nmax-active = 5000").unwrap();
    /// assert_eq!(config.idle_timeout, Duration::from_secs(120));
    ///
    /// let refused = VirtualActorsConfig::from_toml("max-active = 0").unwrap_err();
    /// assert_eq!(refused.key(), "max-active");
    /// let refused = VirtualActorsConfig::from_toml("idle-timeout = \"soon\"").unwrap_err();
    /// assert!(matches!(refused, ClusterConfigError::Syntax { .. }));
    /// assert_eq!(refused.key(), "idle-timeout");
    /// ```
    ///
    /// # Errors
    ///
    /// [`ClusterConfigError::Syntax`] for text that is not TOML, an unknown key or a value of the
    /// wrong type; [`ClusterConfigError::Invalid`] for a value out of range. Both name the key.
    #[cfg(feature = "toml")]
    pub fn from_toml(text: &str) -> Result<Self, ClusterConfigError> {
        let config: Self = crate::config::parse_toml(text)?;
        config.validate()?;
        Ok(config)
    }

    /// Checks that the settings can work.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::cluster::virtual_actors::VirtualActorsConfig;
    ///
    /// let mut config = VirtualActorsConfig::default();
    /// config.max_identity_bytes = 1_000;
    /// assert_eq!(config.validate().unwrap_err().key(), "max-identity-bytes");
    /// ```
    ///
    /// # Errors
    ///
    /// [`ClusterConfigError::Invalid`] naming the first key out of range.
    pub fn validate(&self) -> Result<(), ClusterConfigError> {
        let invalid = |key, reason| Err(ClusterConfigError::Invalid { key, reason });
        if self.idle_timeout.is_zero() {
            return invalid("idle-timeout", "must be above zero");
        }
        if self.max_active == 0 {
            return invalid("max-active", "must be at least 1");
        }
        if self.deactivation_timeout.is_zero() {
            return invalid("deactivation-timeout", "must be above zero");
        }
        if self.max_concurrent_moves == 0 {
            return invalid("max-concurrent-moves", "must be at least 1");
        }
        if self.max_hops == 0 {
            return invalid(
                "max-hops",
                "must be at least 1: a stale cache is corrected by one forward",
            );
        }
        if self.max_identity_bytes == 0 || self.max_identity_bytes > MAX_IDENTITY_BYTES {
            return invalid(
                "max-identity-bytes",
                "must be 1 to 256 (the state stores' limit)",
            );
        }
        if self.host_wait.is_zero() {
            return invalid("host-wait", "must be above zero");
        }
        Ok(())
    }
}

/// Builds a [`VirtualActorsConfig`]; [`build`](Self::build) checks it.
///
/// # Example
///
/// ```
/// use rally::cluster::virtual_actors::VirtualActorsConfig;
///
/// let refused = VirtualActorsConfig::builder().max_hops(0).build();
/// assert_eq!(refused.unwrap_err().key(), "max-hops");
/// ```
#[derive(Debug, Clone)]
pub struct VirtualActorsConfigBuilder {
    config: VirtualActorsConfig,
}

impl VirtualActorsConfigBuilder {
    /// Sets `idle-timeout`.
    pub fn idle_timeout(&mut self, after: Duration) -> &mut Self {
        self.config.idle_timeout = after;
        self
    }

    /// Sets `max-active`.
    pub fn max_active(&mut self, max: usize) -> &mut Self {
        self.config.max_active = max;
        self
    }

    /// Sets `deactivation-timeout`.
    pub fn deactivation_timeout(&mut self, timeout: Duration) -> &mut Self {
        self.config.deactivation_timeout = timeout;
        self
    }

    /// Sets `max-concurrent-moves`.
    pub fn max_concurrent_moves(&mut self, max: usize) -> &mut Self {
        self.config.max_concurrent_moves = max;
        self
    }

    /// Sets `max-hops`.
    pub fn max_hops(&mut self, max: u8) -> &mut Self {
        self.config.max_hops = max;
        self
    }

    /// Sets `max-identity-bytes`.
    pub fn max_identity_bytes(&mut self, max: usize) -> &mut Self {
        self.config.max_identity_bytes = max;
        self
    }

    /// Sets `host-wait`.
    pub fn host_wait(&mut self, wait: Duration) -> &mut Self {
        self.config.host_wait = wait;
        self
    }

    /// Checks and returns the configuration.
    ///
    /// # Errors
    ///
    /// [`ClusterConfigError::Invalid`] as [`VirtualActorsConfig::validate`].
    pub fn build(&self) -> Result<VirtualActorsConfig, ClusterConfigError> {
        self.config.validate()?;
        Ok(self.config.clone())
    }
}

// The reason given for `max-identity-bytes` names this limit.
const _: () = assert!(MAX_IDENTITY_BYTES == 256);

#[cfg(test)]
mod start_tests {
    use super::*;
    use crate::provider::{MemoryNetwork, MemoryProvider};
    use crate::virtual_actors::{GrainNetwork, VirtualActors, VirtualActorsStartError};
    use crate::{Cluster, ClusterConfig, MemberId};

    #[tokio::test]
    async fn a_runtime_with_a_bad_setting_does_not_start_and_names_the_key() {
        let system = rally_actor::ActorSystem::new("config");
        let me = MemberId::new(
            "rally://config@mem:1".parse().unwrap(),
            rally_remote::Incarnation(1),
            1,
        );
        let cluster = Cluster::join_with(
            me,
            ClusterConfig::default(),
            MemoryProvider::new(&MemoryNetwork::new()),
        )
        .unwrap();
        let bad = VirtualActorsConfig {
            max_concurrent_moves: 0,
            ..VirtualActorsConfig::default()
        };
        let refused = VirtualActors::builder(&cluster, &system)
            .config(bad)
            .start_in_memory(&GrainNetwork::new());
        match refused {
            Err(VirtualActorsStartError::Config(error)) => {
                assert_eq!(error.key(), "max-concurrent-moves")
            }
            other => panic!("expected a configuration error, got {other:?}"),
        }
        let started = VirtualActors::builder(&cluster, &system)
            .config(VirtualActorsConfig::default())
            .start_in_memory(&GrainNetwork::new());
        assert!(started.is_ok());
    }
}

#[cfg(all(test, feature = "toml"))]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_round_trip_through_toml() {
        let config = VirtualActorsConfig::default();
        config.validate().unwrap();
        let text = toml::to_string(&config).unwrap();
        assert!(text.contains("idle-timeout = \"300s\""), "{text}");
        assert!(text.contains("max-hops = 4"), "{text}");
        assert_eq!(VirtualActorsConfig::from_toml(&text).unwrap(), config);
        assert_eq!(VirtualActorsConfig::from_toml("").unwrap(), config);
    }

    #[test]
    fn every_key_from_toml_agrees_with_the_builder() {
        let from_file = VirtualActorsConfig::from_toml(
            r#"
            idle-timeout = "90s"
            max-active = 5000
            deactivation-timeout = "2s"
            max-concurrent-moves = 16
            max-hops = 3
            max-identity-bytes = 64
            host-wait = "3s"
            "#,
        )
        .unwrap();
        let built = VirtualActorsConfig::builder()
            .idle_timeout(Duration::from_secs(90))
            .max_active(5000)
            .deactivation_timeout(Duration::from_secs(2))
            .max_concurrent_moves(16)
            .max_hops(3)
            .max_identity_bytes(64)
            .host_wait(Duration::from_secs(3))
            .build()
            .unwrap();
        assert_eq!(from_file, built);
    }

    /// Each bad input, and the key and kind of error it gets.
    #[test]
    fn bad_values_get_a_typed_error_naming_the_key() {
        let cases: [(&str, &str, bool); 12] = [
            // (text, key named, is a syntax error rather than a range error)
            ("idle-timeout = \"soon\"", "idle-timeout", true),
            ("idle-timeout = 5", "idle-timeout", true),
            ("idle-timeout = \"0s\"", "idle-timeout", false),
            ("max-active = 0", "max-active", false),
            ("max-active = -1", "max-active", true),
            (
                "deactivation-timeout = \"0ms\"",
                "deactivation-timeout",
                false,
            ),
            ("max-concurrent-moves = 0", "max-concurrent-moves", false),
            ("max-hops = 0", "max-hops", false),
            ("max-hops = 300", "max-hops", true),
            ("max-identity-bytes = 257", "max-identity-bytes", false),
            ("host-wait = \"0s\"", "host-wait", false),
            ("idle-timout = \"1m\"", "idle-timout", true),
        ];
        for (text, key, syntax) in cases {
            let error = VirtualActorsConfig::from_toml(text).unwrap_err();
            assert_eq!(error.key(), key, "{text}: {error}");
            assert_eq!(
                matches!(error, ClusterConfigError::Syntax { .. }),
                syntax,
                "{text}: {error:?}"
            );
            assert!(error.to_string().starts_with(key), "{text}: {error}");
        }
    }
}
