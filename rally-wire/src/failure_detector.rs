//! The phi-accrual failure detector (Hayashibara et al.), sans-IO: the caller passes `now`.
//!
//! Heartbeat inter-arrival times are modelled as a normal distribution; `phi` is
//! `-log10(P(a heartbeat arrives later than now))`. A node is suspected when `phi` exceeds the
//! threshold, so the detector adapts to the observed jitter instead of using a fixed timeout.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Settings of a [`PhiAccrualDetector`].
///
/// Non-exhaustive: start from `default()` and set fields, so a new setting is not a breaking
/// change. A node checks them when it starts ([`validate`](Self::validate)).
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use rally::remote::PhiAccrualConfig;
///
/// let mut detector = PhiAccrualConfig::default();
/// detector.acceptable_heartbeat_pause = Duration::from_secs(10); // a long-haul link
/// assert!(detector.validate().is_ok());
/// detector.threshold = 0.0;
/// assert_eq!(detector.validate().unwrap_err().0, "threshold");
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct PhiAccrualConfig {
    /// Suspicion level that declares a node down. 8 is a mistaken-suspicion chance of about
    /// 1 in 10^8 per check under the model; Akka uses 10 for remote watch on long-haul networks,
    /// 8 suits the LANs and loopback this runs on while keeping detection quick.
    pub threshold: f64,
    /// Inter-arrival samples kept (Akka's default: 200 — enough for a stable estimate, a few KB).
    pub max_sample_size: usize,
    /// Floor of the standard deviation: with perfectly regular heartbeats the deviation tends
    /// to zero and any delay would look fatal; 100 ms keeps the detector sane.
    pub min_std_deviation: Duration,
    /// Pause tolerated on top of the model (GC pauses, scheduling hiccups).
    pub acceptable_heartbeat_pause: Duration,
    /// Assumed interval before two heartbeats have been seen.
    pub first_heartbeat_estimate: Duration,
}

/// A [`PhiAccrualConfig`] setting out of range: the setting's name and what is wrong.
///
/// # Example
///
/// ```
/// use rally::remote::PhiAccrualConfig;
///
/// let mut config = PhiAccrualConfig::default();
/// config.threshold = -1.0;
/// let error = config.validate().unwrap_err();
/// assert_eq!(error.0, "threshold");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("failure detector setting {0}: {1}")]
pub struct InvalidPhiAccrualConfig(pub &'static str, pub String);

impl PhiAccrualConfig {
    /// Checks that every setting is usable: a positive finite threshold, at least one sample,
    /// a positive first estimate.
    ///
    /// # Errors
    ///
    /// [`InvalidPhiAccrualConfig`] naming the first setting out of range.
    pub fn validate(&self) -> Result<(), InvalidPhiAccrualConfig> {
        if !(self.threshold.is_finite() && self.threshold > 0.0) {
            return Err(InvalidPhiAccrualConfig(
                "threshold",
                format!("{} is not a positive number", self.threshold),
            ));
        }
        if self.max_sample_size == 0 {
            return Err(InvalidPhiAccrualConfig(
                "max_sample_size",
                "0 keeps no sample".to_owned(),
            ));
        }
        if self.first_heartbeat_estimate.is_zero() {
            return Err(InvalidPhiAccrualConfig(
                "first_heartbeat_estimate",
                "0 s would make every heartbeat look late".to_owned(),
            ));
        }
        Ok(())
    }
}

impl Default for PhiAccrualConfig {
    fn default() -> Self {
        Self {
            threshold: 8.0,
            max_sample_size: 200,
            min_std_deviation: Duration::from_millis(100),
            acceptable_heartbeat_pause: Duration::from_secs(3),
            first_heartbeat_estimate: Duration::from_secs(1),
        }
    }
}

/// Tracks one peer's heartbeats.
///
/// # Example
///
/// ```
/// use std::time::{Duration, Instant};
/// use rally_wire::{PhiAccrualConfig, PhiAccrualDetector};
///
/// let mut detector = PhiAccrualDetector::new(PhiAccrualConfig::default());
/// let start = Instant::now();
/// for i in 0..10 {
///     detector.heartbeat(start + Duration::from_secs(i));
/// }
/// assert!(detector.is_available(start + Duration::from_secs(10)));
/// assert!(!detector.is_available(start + Duration::from_secs(60)));
/// ```
#[derive(Debug, Clone)]
pub struct PhiAccrualDetector {
    config: PhiAccrualConfig,
    intervals: VecDeque<f64>,
    sum: f64,
    sum_squares: f64,
    last: Option<Instant>,
}

impl PhiAccrualDetector {
    /// A detector that has heard nothing yet (it reports available until the first heartbeat).
    pub fn new(config: PhiAccrualConfig) -> Self {
        let mut detector = Self {
            config,
            intervals: VecDeque::new(),
            sum: 0.0,
            sum_squares: 0.0,
            last: None,
        };
        // Seed with the estimate (mean ± a quarter), as Akka does, so the first checks are sane.
        let estimate = detector.config.first_heartbeat_estimate.as_secs_f64();
        detector.record(estimate - estimate / 4.0);
        detector.record(estimate + estimate / 4.0);
        detector
    }

    fn record(&mut self, interval: f64) {
        if self.intervals.len() >= self.config.max_sample_size {
            if let Some(old) = self.intervals.pop_front() {
                self.sum -= old;
                self.sum_squares -= old * old;
            }
        }
        self.intervals.push_back(interval);
        self.sum += interval;
        self.sum_squares += interval * interval;
    }

    /// Records a heartbeat arriving at `now`.
    pub fn heartbeat(&mut self, now: Instant) {
        if let Some(last) = self.last {
            self.record(now.saturating_duration_since(last).as_secs_f64());
        }
        self.last = Some(now);
    }

    /// The suspicion level at `now` (0 before the first heartbeat).
    pub fn phi(&self, now: Instant) -> f64 {
        let Some(last) = self.last else { return 0.0 };
        let n = self.intervals.len() as f64;
        let mean = self.sum / n + self.config.acceptable_heartbeat_pause.as_secs_f64();
        let variance = (self.sum_squares / n - (self.sum / n).powi(2)).max(0.0);
        let std = variance
            .sqrt()
            .max(self.config.min_std_deviation.as_secs_f64());
        let elapsed = now.saturating_duration_since(last).as_secs_f64();
        // Logistic approximation of the normal CDF's tail (as in Akka's implementation notes).
        let y = (elapsed - mean) / std;
        let e = (-y * (1.5976 + 0.070566 * y * y)).exp();
        if elapsed > mean {
            -(e / (1.0 + e)).log10()
        } else {
            -(1.0 - 1.0 / (1.0 + e)).log10()
        }
    }

    /// Whether the peer is considered alive at `now`.
    pub fn is_available(&self, now: Instant) -> bool {
        self.phi(now) < self.config.threshold
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regular(every: Duration, count: u32) -> (PhiAccrualDetector, Instant) {
        let mut detector = PhiAccrualDetector::new(PhiAccrualConfig::default());
        let start = Instant::now();
        for i in 0..count {
            detector.heartbeat(start + every * i);
        }
        (detector, start + every * (count - 1))
    }

    #[test]
    fn regular_heartbeats_keep_phi_low() {
        let (detector, last) = regular(Duration::from_millis(100), 50);
        assert!(detector.phi(last + Duration::from_millis(100)) < 1.0);
        assert!(detector.is_available(last + Duration::from_millis(500)));
    }

    #[test]
    fn silence_past_the_pause_is_suspected() {
        let (detector, last) = regular(Duration::from_millis(100), 50);
        assert!(!detector.is_available(last + Duration::from_secs(5)));
    }

    #[test]
    fn phi_grows_with_silence() {
        let (detector, last) = regular(Duration::from_millis(200), 20);
        let mut previous = 0.0;
        for ms in (0..6000).step_by(250) {
            let phi = detector.phi(last + Duration::from_millis(ms));
            assert!(
                phi >= previous,
                "phi fell from {previous} to {phi} at {ms} ms"
            );
            previous = phi;
        }
    }

    #[test]
    fn nothing_heard_means_available() {
        let detector = PhiAccrualDetector::new(PhiAccrualConfig::default());
        assert!(detector.is_available(Instant::now() + Duration::from_secs(3600)));
    }
}
