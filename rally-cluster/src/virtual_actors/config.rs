//! The settings of the virtual-actor runtime.

use std::time::Duration;

use rally_state::MAX_IDENTITY_BYTES;

/// How virtual actors are activated, passivated and moved on one member.
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
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct VirtualActorsConfig {
    /// An activation that has handled no message for this long is deactivated. Five minutes:
    /// between Pekko's 120 s (which re-activates an actor read every few minutes over and
    /// over, each time reloading its state) and Orleans' 15 min and Dapr's 60 min (which keep
    /// a burst's worth of one-off identities in memory for a quarter to a whole hour); the
    /// per-member cap below bounds memory whatever the idle time.
    pub idle_timeout: Duration,
    /// Active actors this member holds at most; past it, the least recently used idle ones
    /// are deactivated. 100,000: a few hundred bytes of runtime overhead each is tens of MB.
    pub max_active: usize,
    /// How long a deactivation may take (the messages already queued, then the actor's
    /// `stopped` hook) before the actor is stopped regardless. It is part of the takeover
    /// wait after a member is downed, so keep it short: 5 s is room for one state save.
    pub deactivation_timeout: Duration,
    /// Identities this member moves away at once after a membership change, so a join does
    /// not stop the world: the rest wait their turn, still serving.
    pub max_concurrent_moves: usize,
    /// Forwards a message may take before it fails with `TooManyHops`: a stale cache and a
    /// move each cost one; four covers both with room, and stops a loop between members
    /// whose views disagree.
    pub max_hops: u8,
    /// The longest identity, in bytes (the state stores' limit).
    pub max_identity_bytes: usize,
}

impl Default for VirtualActorsConfig {
    fn default() -> Self {
        Self {
            idle_timeout: Duration::from_secs(300),
            max_active: 100_000,
            deactivation_timeout: Duration::from_secs(5),
            max_concurrent_moves: 64,
            max_hops: 4,
            max_identity_bytes: MAX_IDENTITY_BYTES,
        }
    }
}
