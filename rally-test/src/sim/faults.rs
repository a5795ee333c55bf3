//! Faults drawn from the seed ([`RandomFaults`]) and the record of every fault ([`Fault`]).

use super::*;

/// The random faults running, and what they changed that must be undone.
pub(super) struct Random {
    pub(super) faults: RandomFaults,
    pub(super) next_at: Duration,
    pub(super) spiked: Vec<(String, String)>,
}

/// Faults drawn from the seed, for [`HostSimulation::start_random_faults`]: every `interval` of
/// simulated time, each link between two hosts has its connections broken with
/// `break_probability`, and is slowed to `spike` latency (both ways, for that interval) with
/// `spike_probability`.
///
/// This is how packet loss looks to a TCP user: the simulated TCP, like a real one, never
/// loses bytes inside a connection (turmoil's does not retransmit, so a lost segment would
/// stall the stream forever instead); a connection breaks (both ends get an I/O error, the
/// remoting reconnects) or stalls while segments are retransmitted.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use rally::sim::RandomFaults;
///
/// let faults = RandomFaults::every(Duration::from_millis(500))
///     .breaks(0.05)
///     .delay_spikes(0.02, Duration::from_millis(120));
/// assert_eq!(faults.break_probability, 0.05);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RandomFaults {
    /// How often the dice are thrown for each link.
    pub interval: Duration,
    /// The probability that a link's connections are broken at each throw.
    pub break_probability: f64,
    /// The probability that a link is slowed down for the next interval at each throw.
    pub spike_probability: f64,
    /// The latency of a slowed-down link.
    pub spike: Duration,
}

impl RandomFaults {
    /// No faults yet, thrown every `interval`; add them with [`breaks`](Self::breaks) and
    /// [`delay_spikes`](Self::delay_spikes).
    ///
    /// # Example
    ///
    /// See [`RandomFaults`].
    pub fn every(interval: Duration) -> Self {
        Self {
            interval,
            break_probability: 0.0,
            spike_probability: 0.0,
            spike: Duration::ZERO,
        }
    }

    /// Breaks each link's connections with `probability` at each throw.
    ///
    /// # Example
    ///
    /// See [`RandomFaults`].
    #[must_use]
    pub fn breaks(mut self, probability: f64) -> Self {
        self.break_probability = probability;
        self
    }

    /// Slows each link down to `latency` for an interval with `probability` at each throw.
    ///
    /// # Example
    ///
    /// See [`RandomFaults`].
    #[must_use]
    pub fn delay_spikes(mut self, probability: f64, latency: Duration) -> Self {
        self.spike_probability = probability;
        self.spike = latency;
        self
    }

    pub(super) fn validate(&self) -> Result<(), SimError> {
        if self.interval.is_zero() {
            return Err(SimError::InvalidFaults("the interval is zero"));
        }
        for p in [self.break_probability, self.spike_probability] {
            if !(0.0..=1.0).contains(&p) {
                return Err(SimError::InvalidFaults("a probability is not within 0–1"));
            }
        }
        Ok(())
    }
}

/// A fault the simulation caused, as [`HostSimulation::faults`] lists it.
///
/// # Example
///
/// See [`HostSimulation::drop_connections`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// The connections between hosts `a` and `b` were broken (`connections` were open).
    Broke {
        /// One host.
        a: String,
        /// The other.
        b: String,
        /// How many connections were open between them and broke.
        connections: usize,
    },
    /// The link between `a` and `b` was slowed down to `latency` for an interval.
    Spike {
        /// One host.
        a: String,
        /// The other.
        b: String,
        /// The latency of every message on the link during the spike.
        latency: Duration,
    },
}
