//! Cluster settings, each defaulted, with the reason for the default.

use std::collections::BTreeMap;
use std::time::Duration;

use rally_remote::NodeAddress;
use serde::{Deserialize, Serialize};

use crate::downing::DowningStrategy;

/// How often each member probes one other member. A member probes the others one at a time,
/// so on the two sides of a partition the last suspicion comes up to a round of probes after
/// the first; a fifth of a second keeps that spread (0.8 s for 5 members) inside
/// `stable-after`, and the detection bound, which is part of the failover time, at 1.8 s for
/// four members, for two small packets per member per period.
pub(crate) const DEFAULT_PROBE_PERIOD: Duration = Duration::from_millis(200);
/// How long a direct probe may take before others are asked to probe indirectly: a hundred
/// times a LAN round trip, so a member busy for a moment is not suspected, and below the
/// probe period, as the indirect probes must fit in it.
pub(crate) const DEFAULT_PROBE_RTT: Duration = Duration::from_millis(150);
/// How long the view must stay the same before a downing decision: long enough to ride out a
/// lost probe or a member busy for a moment (a suspicion refuted within it changes the view
/// and restarts the wait), short enough that a killed member's work is served elsewhere
/// within 10 s: detection, then this, then the takeover wait (`detection_bound(n)` + this +
/// the virtual actors' `deactivation-timeout`). Pekko's 20 s and Proto.Actor's 20 s heartbeat
/// expiry buy tolerance of longer pauses at the price of 45 s and 20 s failovers.
pub(crate) const DEFAULT_STABLE_AFTER: Duration = Duration::from_secs(2);
/// How often membership updates are pushed to a few members besides the probe traffic; 200 ms
/// spreads a change through 50 members in about a second for a few hundred bytes per second.
pub(crate) const DEFAULT_GOSSIP_PERIOD: Duration = Duration::from_millis(200);
/// How often a joining member re-sends its join to the seeds: a seed that is still starting
/// is found within a second of listening.
pub(crate) const DEFAULT_JOIN_RETRY: Duration = Duration::from_millis(500);
/// Most members remembered, live or down. Bounds memory against a flood of forged join
/// requests; ten times the largest cluster Rally is tested with.
pub(crate) const DEFAULT_MAX_MEMBERS: usize = 2_000;
/// How long a down member is remembered before it is removed. A down incarnation never comes
/// back (a restart is a new member), so this only needs to outlast stale gossip about it.
pub(crate) const DEFAULT_REMOVE_DOWN_AFTER: Duration = Duration::from_secs(10 * 60);
/// Largest membership packet: plenty for dozens of updates, small next to a Rally frame.
pub(crate) const DEFAULT_MAX_PACKET_BYTES: usize = 16 * 1024;

/// Settings of a cluster member.
///
/// In a TOML file every key is optional and kebab-case ([`from_toml`](Self::from_toml); an
/// unknown key is refused, so a misspelt one is not silently ignored); in code, start from
/// [`ClusterConfig::default`] or [`ClusterConfig::builder`].
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use rally::cluster::{ClusterConfig, DowningStrategy};
///
/// let config = ClusterConfig::builder()
///     .seed("rally://shop@10.0.0.1:2552".parse().unwrap())
///     .stable_after(Duration::from_secs(4))
///     .downing(DowningStrategy::KeepOldest { down_if_alone: true, role: None })
///     .build()
///     .unwrap();
/// assert_eq!(config.seeds.len(), 1);
///
/// let from_file: ClusterConfig = toml::from_str(r#"
///     seeds = ["rally://shop@10.0.0.1:2552"]
///     stable-after = "4s"
///     downing = "keep-majority"
/// "#).unwrap();
/// assert_eq!(from_file.stable_after, Duration::from_secs(4));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case", deny_unknown_fields)]
#[non_exhaustive]
pub struct ClusterConfig {
    /// Members to join through (default none: this member founds a cluster). Listing this
    /// member's own address is harmless, so every member can share one list.
    #[serde(with = "addresses")]
    pub seeds: Vec<NodeAddress>,
    /// Roles this member declares (default none): what it is for, so that placement can
    /// choose among members (`"frontend"`, `"worker"`). Fixed for the member's incarnation.
    pub roles: Vec<String>,
    /// Virtual-actor kinds this member hosts (default none: a client-only member, on which
    /// nothing is placed). Gossiped with its identity ([`MemberId::kinds`](crate::MemberId)),
    /// fixed for the member's incarnation.
    pub kinds: Vec<String>,
    /// How each hosted kind is placed, by the placement strategy's name (default `"hashed"`
    /// for every kind; `"prefer-local"` is the other built-in one). Every member that hosts a
    /// kind must declare the same; a member that declares another is refused for the kind.
    pub placements: BTreeMap<String, String>,
    /// How a partition is resolved (default keep-majority).
    pub downing: DowningStrategy,
    /// How long the view must be unchanged before a downing decision (default 2 s).
    #[serde(with = "duration")]
    pub stable_after: Duration,
    /// If members stay unreachable this long past the earliest decision (`stable-after`, or
    /// the detection bound if longer) without the view ever settling, every member downs
    /// itself (default: `stable_after`, 2 s): a flapping network
    /// must not keep two sides alive forever, and an honest partition, whose suspicions all
    /// arrive within a round of probes, must settle before it fires.
    #[serde(with = "duration")]
    pub down_all_when_unstable: Duration,
    /// Probe period of the SWIM failure detector (default 200 ms).
    #[serde(with = "duration")]
    pub probe_period: Duration,
    /// Wait for a direct probe's answer before probing indirectly (default 150 ms).
    #[serde(with = "duration")]
    pub probe_rtt: Duration,
    /// Members asked to probe indirectly (default 3, SWIM's usual figure).
    pub indirect_probes: usize,
    /// Period of the extra gossip of updates (default 200 ms).
    #[serde(with = "duration")]
    pub gossip_period: Duration,
    /// Members gossiped to each period (default 3).
    pub gossip_fanout: usize,
    /// Times each update is piggybacked (default 8: enough for clusters of a few hundred,
    /// log-scaled like memberlist's).
    pub max_transmissions: u8,
    /// Re-send period of the join to the seeds while joining (default 500 ms).
    #[serde(with = "duration")]
    pub join_retry: Duration,
    /// How long a down member is remembered (default 10 min).
    #[serde(with = "duration")]
    pub remove_down_after: Duration,
    /// Most members remembered, live or down (default 2000).
    pub max_members: usize,
    /// Largest membership packet, in bytes (default 16 KiB).
    pub max_packet_bytes: usize,
    /// What this member does when it learns the cluster downed it (default `exit`): it can
    /// never serve again, only a new process (a new incarnation) is admitted.
    pub when_downed: WhenDowned,
}

/// What a member does when it learns the cluster downed it. Either way it says so in the log
/// (WARN), sets `rally_cluster_downed` to 1, and resolves [`Cluster::downed`](crate::Cluster::downed).
///
/// # Example
///
/// ```
/// use rally::cluster::{ClusterConfig, WhenDowned};
///
/// assert_eq!(ClusterConfig::default().when_downed, WhenDowned::Exit);
/// let config = ClusterConfig::builder().when_downed(WhenDowned::Stop).build().unwrap();
/// assert_eq!(config.when_downed, WhenDowned::Stop);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum WhenDowned {
    /// The process exits with code [`DOWNED_EXIT_CODE`] (75, `EX_TEMPFAIL`) a moment after
    /// saying so, so that its supervisor (systemd, Kubernetes, a shell loop) starts it again
    /// as a new member: what Akka's `run-coordinated-shutdown-when-down` with `exit-jvm` does.
    #[default]
    Exit,
    /// The member stops (it hosts nothing, its event streams end) and the process goes on:
    /// for a process that decides itself, awaiting [`Cluster::downed`](crate::Cluster::downed),
    /// and for several members in one process (tests, simulations).
    Stop,
}

/// The exit code of a process whose member was downed, with [`WhenDowned::Exit`]: 75,
/// `EX_TEMPFAIL` ("try again"), so a supervisor that restarts on failure starts it again.
pub const DOWNED_EXIT_CODE: i32 = 75;

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            seeds: Vec::new(),
            roles: Vec::new(),
            kinds: Vec::new(),
            placements: BTreeMap::new(),
            downing: DowningStrategy::default(),
            stable_after: DEFAULT_STABLE_AFTER,
            down_all_when_unstable: DEFAULT_STABLE_AFTER,
            probe_period: DEFAULT_PROBE_PERIOD,
            probe_rtt: DEFAULT_PROBE_RTT,
            indirect_probes: 3,
            gossip_period: DEFAULT_GOSSIP_PERIOD,
            gossip_fanout: 3,
            max_transmissions: 8,
            join_retry: DEFAULT_JOIN_RETRY,
            remove_down_after: DEFAULT_REMOVE_DOWN_AFTER,
            max_members: DEFAULT_MAX_MEMBERS,
            max_packet_bytes: DEFAULT_MAX_PACKET_BYTES,
            when_downed: WhenDowned::Exit,
        }
    }
}

/// Why a configuration ([`ClusterConfig`], `VirtualActorsConfig`) was refused. Every variant
/// names the key, as in the TOML file.
///
/// # Example
///
/// ```
/// use rally::cluster::{ClusterConfig, ClusterConfigError};
///
/// let refused = ClusterConfig::from_toml("max-members = 1").unwrap_err();
/// assert!(matches!(refused, ClusterConfigError::Invalid { key: "max-members", .. }));
/// assert_eq!(refused.to_string(), "max-members: must be at least 2");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterConfigError {
    /// A setting is out of range.
    #[error("{key}: {reason}")]
    Invalid {
        /// The key, as in the TOML file.
        key: &'static str,
        /// What is wrong.
        reason: &'static str,
    },
    /// The text is not TOML, has an unknown key, or a value of the wrong type.
    #[error("{key}: {message}")]
    Syntax {
        /// The key, as in the TOML file (a dotted path inside a table), or `?` when the
        /// parser could not point at one.
        key: String,
        /// The parser's explanation.
        message: String,
    },
}

impl ClusterConfigError {
    /// The key the error is about, as in the TOML file.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::cluster::ClusterConfig;
    ///
    /// let refused = ClusterConfig::from_toml("stable-after = \"soon\"").unwrap_err();
    /// assert_eq!(refused.key(), "stable-after");
    /// ```
    pub fn key(&self) -> &str {
        match self {
            Self::Invalid { key, .. } => key,
            Self::Syntax { key, .. } => key,
        }
    }
}

/// Deserializes TOML text into `T`, a syntax error naming the key it is about.
#[cfg(feature = "toml")]
pub(crate) fn parse_toml<T: serde::de::DeserializeOwned>(
    text: &str,
) -> Result<T, ClusterConfigError> {
    toml::from_str(text).map_err(|error: toml::de::Error| ClusterConfigError::Syntax {
        key: error.span().map_or_else(
            || "?".to_owned(),
            |span| rally_actor::config_text::key_at(text, span.start),
        ),
        message: error.message().to_owned(),
    })
}

impl ClusterConfig {
    /// A builder, starting from the defaults.
    pub fn builder() -> ClusterConfigBuilder {
        ClusterConfigBuilder {
            config: Self::default(),
        }
    }

    /// The longest a member of `cluster_size` can take to see every member it cannot reach as
    /// unreachable: `(2 * cluster_size + 1) * probe-period`. Each member probes the others in
    /// a shuffled round, one per period, so within two rounds it has probed everyone; a probe
    /// without an answer marks its target unreachable one period later. Gossip usually
    /// spreads a suspicion much sooner; this is the worst case. See `docs/cluster-protocol.md`.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use rally::cluster::ClusterConfig;
    ///
    /// assert_eq!(ClusterConfig::default().detection_bound(5), Duration::from_millis(2_200));
    /// ```
    pub fn detection_bound(&self, cluster_size: usize) -> Duration {
        let periods =
            u32::try_from(cluster_size.saturating_mul(2).saturating_add(1)).unwrap_or(u32::MAX);
        self.probe_period.saturating_mul(periods)
    }

    /// How long after a member is downed the winning side may take over what it hosted:
    /// `detection_bound(cluster_size) + down-all-when-unstable`. By then
    /// every member of a losing side has downed itself and stopped hosting, so two members
    /// never act as owners of the same thing at once. The arithmetic is in
    /// `docs/cluster-protocol.md`.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use rally::cluster::ClusterConfig;
    ///
    /// // 2.2 s of worst-case detection plus 2 s.
    /// assert_eq!(ClusterConfig::default().takeover_margin(5), Duration::from_millis(4_200));
    /// ```
    pub fn takeover_margin(&self, cluster_size: usize) -> Duration {
        self.detection_bound(cluster_size) + self.down_all_when_unstable
    }

    /// Reads the settings from TOML text: every key optional, kebab-case, durations as
    /// `"250ms"`, `"5s"`, `"2m"`, seeds as `"rally://system@host:port"`; then checks them as
    /// [`validate`](Self::validate) does.
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use rally::cluster::ClusterConfig;
    ///
    /// let config = ClusterConfig::from_toml(r#"
    ///     seeds = ["rally://shop@10.0.0.1:2552"]
    ///     kinds = ["cart"]
    ///     stable-after = "4s"
    /// "#).unwrap();
    /// assert_eq!(config.stable_after, Duration::from_secs(4));
    /// assert_eq!(ClusterConfig::from_toml("stable-afte = \"2s\"").unwrap_err().key(), "stable-afte");
    /// ```
    ///
    /// # Errors
    ///
    /// [`ClusterConfigError::Syntax`] for text that is not TOML, an unknown key or a value of the
    /// wrong type; [`ClusterConfigError::Invalid`] for a value out of range. Both name the key.
    #[cfg(feature = "toml")]
    pub fn from_toml(text: &str) -> Result<Self, ClusterConfigError> {
        let config: Self = parse_toml(text)?;
        config.validate()?;
        Ok(config)
    }

    /// Checks that the settings can work together.
    ///
    /// # Errors
    ///
    /// [`ClusterConfigError::Invalid`] naming the first key out of range.
    pub fn validate(&self) -> Result<(), ClusterConfigError> {
        let invalid = |key, reason| Err(ClusterConfigError::Invalid { key, reason });
        if self.probe_rtt.is_zero() || self.probe_rtt >= self.probe_period {
            return invalid("probe-rtt", "must be above zero and below probe-period");
        }
        if self.stable_after.is_zero() {
            return invalid("stable-after", "must be above zero");
        }
        if self.gossip_period.is_zero() || self.join_retry.is_zero() {
            return invalid("gossip-period", "periods must be above zero");
        }
        if self
            .placements
            .iter()
            .any(|(kind, placement)| placement.is_empty() || !self.kinds.contains(kind))
        {
            return invalid(
                "placements",
                "every entry names a declared kind (in kinds) and a placement strategy",
            );
        }
        if self.remove_down_after.is_zero() {
            return invalid("remove-down-after", "must be above zero");
        }
        if self.indirect_probes == 0 || self.gossip_fanout == 0 || self.max_transmissions == 0 {
            return invalid("indirect-probes", "counts must be above zero");
        }
        if self.max_members < 2 {
            return invalid("max-members", "must be at least 2");
        }
        if self.max_packet_bytes < 512 {
            return invalid("max-packet-bytes", "must be at least 512");
        }
        if let DowningStrategy::StaticQuorum { quorum_size: 0 } = self.downing {
            return invalid("downing", "static-quorum needs a quorum-size above zero");
        }
        Ok(())
    }
}

/// Builds a [`ClusterConfig`]; [`build`](Self::build) checks it.
///
/// # Example
///
/// ```
/// use rally::cluster::ClusterConfig;
///
/// let refused = ClusterConfig::builder().max_members(1).build();
/// assert!(refused.is_err());
/// ```
#[derive(Debug, Clone)]
pub struct ClusterConfigBuilder {
    config: ClusterConfig,
}

impl ClusterConfigBuilder {
    /// Adds a seed.
    pub fn seed(&mut self, address: NodeAddress) -> &mut Self {
        self.config.seeds.push(address);
        self
    }

    /// Adds a role.
    pub fn role(&mut self, role: impl Into<String>) -> &mut Self {
        self.config.roles.push(role.into());
        self
    }

    /// Adds a hosted virtual-actor kind, placed by the default strategy (hashed).
    pub fn kind(&mut self, kind: impl Into<String>) -> &mut Self {
        self.config.kinds.push(kind.into());
        self
    }

    /// Adds a hosted virtual-actor kind placed by `placement` (every member hosting the kind
    /// must declare the same strategy).
    pub fn kind_placed(
        &mut self,
        kind: impl Into<String>,
        placement: &impl crate::virtual_actors::Placement,
    ) -> &mut Self {
        let kind = kind.into();
        self.config
            .placements
            .insert(kind.clone(), placement.name().to_owned());
        self.config.kinds.push(kind);
        self
    }

    /// Sets what this member does when it is downed (`when-downed`).
    pub fn when_downed(&mut self, when: WhenDowned) -> &mut Self {
        self.config.when_downed = when;
        self
    }

    /// Sets the downing strategy.
    pub fn downing(&mut self, strategy: DowningStrategy) -> &mut Self {
        self.config.downing = strategy;
        self
    }

    /// Sets `stable-after`, and `down-all-when-unstable` to the same.
    pub fn stable_after(&mut self, stable_after: Duration) -> &mut Self {
        self.config.stable_after = stable_after;
        self.config.down_all_when_unstable = stable_after;
        self
    }

    /// Sets `down-all-when-unstable`.
    pub fn down_all_when_unstable(&mut self, after: Duration) -> &mut Self {
        self.config.down_all_when_unstable = after;
        self
    }

    /// Sets the probe period and the direct-probe wait.
    pub fn probe(&mut self, period: Duration, rtt: Duration) -> &mut Self {
        self.config.probe_period = period;
        self.config.probe_rtt = rtt;
        self
    }

    /// Sets the gossip period.
    pub fn gossip_period(&mut self, period: Duration) -> &mut Self {
        self.config.gossip_period = period;
        self
    }

    /// Sets the join retry period.
    pub fn join_retry(&mut self, period: Duration) -> &mut Self {
        self.config.join_retry = period;
        self
    }

    /// Sets how long a down member is remembered.
    pub fn remove_down_after(&mut self, after: Duration) -> &mut Self {
        self.config.remove_down_after = after;
        self
    }

    /// Sets the bound on remembered members.
    pub fn max_members(&mut self, max: usize) -> &mut Self {
        self.config.max_members = max;
        self
    }

    /// Checks and returns the configuration.
    ///
    /// # Errors
    ///
    /// [`ClusterConfigError::Invalid`] as [`ClusterConfig::validate`].
    pub fn build(&self) -> Result<ClusterConfig, ClusterConfigError> {
        self.config.validate()?;
        Ok(self.config.clone())
    }
}

/// Durations in the file form: `"250ms"`, `"5s"`, `"2m"`.
pub(crate) mod duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer, de};

    pub(crate) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        if d.subsec_nanos() == 0 {
            s.serialize_str(&format!("{}s", d.as_secs()))
        } else {
            s.serialize_str(&format!("{}ms", d.as_millis()))
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        parse(&text).ok_or_else(|| {
            de::Error::custom(format!(
                "{text:?} is not a duration like \"250ms\", \"5s\" or \"2m\""
            ))
        })
    }

    fn parse(text: &str) -> Option<Duration> {
        rally_actor::config_text::duration(text)
    }
}

/// Node addresses in the file form: `"rally://system@host:port"`.
mod addresses {
    use rally_remote::NodeAddress;
    use serde::{Deserialize, Deserializer, Serializer, de, ser::SerializeSeq};

    pub(super) fn serialize<S: Serializer>(a: &[NodeAddress], s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(a.len()))?;
        for address in a {
            seq.serialize_element(&address.to_string())?;
        }
        seq.end()
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<NodeAddress>, D::Error> {
        Vec::<String>::deserialize(d)?
            .iter()
            .map(|text| {
                text.parse()
                    .map_err(|e| de::Error::custom(format!("seed {text:?}: {e}")))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_round_trip_through_toml() {
        let config = ClusterConfig::default();
        config.validate().unwrap();
        let text = toml::to_string(&config).unwrap();
        let back: ClusterConfig = toml::from_str(&text).unwrap();
        assert_eq!(back, config);
        assert!(text.contains("stable-after = \"2s\""), "{text}");
        assert!(text.contains("probe-period = \"200ms\""), "{text}");
    }

    #[test]
    fn an_empty_file_is_the_defaults() {
        let config: ClusterConfig = toml::from_str("").unwrap();
        assert_eq!(config, ClusterConfig::default());
    }

    #[test]
    fn roles_and_kinds_from_toml_and_builder_agree() {
        let from_file: ClusterConfig =
            toml::from_str("roles = [\"worker\"]\nkinds = [\"cart\", \"order\"]").unwrap();
        let built = ClusterConfig::builder()
            .role("worker")
            .kind("cart")
            .kind("order")
            .build()
            .unwrap();
        assert_eq!(from_file, built);
        assert_eq!(built.kinds, ["cart", "order"]);
    }

    #[test]
    #[cfg(feature = "toml")]
    fn from_toml_names_the_key_of_a_bad_value() {
        let cases: [(&str, &str); 6] = [
            ("stable-after = \"soon\"", "stable-after"),
            ("seeds = [\"10.0.0.1:2552\"]", "seeds"),
            ("max-members = 1", "max-members"),
            ("gossip-fanout = -3", "gossip-fanout"),
            ("probe-periodd = \"1s\"", "probe-periodd"),
            (
                "downing = { static-quorum = { quorum-size = 0 } }",
                "downing",
            ),
        ];
        for (text, key) in cases {
            let error = ClusterConfig::from_toml(text).unwrap_err();
            assert_eq!(error.key(), key, "{text}: {error}");
            assert!(error.to_string().starts_with(key), "{text}: {error}");
        }
        assert_eq!(
            ClusterConfig::from_toml("stable-after = \"soon\"").unwrap_err(),
            ClusterConfigError::Syntax {
                key: "stable-after".into(),
                message: "\"soon\" is not a duration like \"250ms\", \"5s\" or \"2m\"".into(),
            }
        );
    }

    #[test]
    fn bad_values_say_which_key() {
        let e = toml::from_str::<ClusterConfig>("stable-after = \"soon\"").unwrap_err();
        assert!(e.to_string().contains("not a duration"), "{e}");
        let e = toml::from_str::<ClusterConfig>("seeds = [\"10.0.0.1:2552\"]").unwrap_err();
        assert!(e.to_string().contains("rally://"), "{e}");
        let e = ClusterConfig::builder()
            .probe(Duration::from_millis(100), Duration::from_millis(100))
            .build()
            .unwrap_err();
        assert!(e.to_string().starts_with("probe-rtt"), "{e}");
    }
}
