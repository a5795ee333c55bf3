//! Which life of a peer this node talks to: incarnations, generations, the failure detector,
//! and the quarantine that makes "down" final.

use std::collections::VecDeque;
use std::time::Instant;

use crate::failure_detector::{PhiAccrualConfig, PhiAccrualDetector};
use crate::ids::Incarnation;

/// Quarantined incarnations remembered per peer address: each is a process that is gone for
/// good (a restart brings a new random incarnation), so a short memory suffices to refuse a
/// paused process that wakes up; the bound keeps a flapping peer from growing it.
const QUARANTINE_MEMORY: usize = 64;

/// What a handshake with the peer revealed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observed {
    /// The incarnation this node already talks to.
    Same,
    /// The first incarnation seen in this generation: refs made before contact bind to it.
    First,
    /// A new incarnation: the old one is gone (quarantined); everything bound to it is dead.
    /// `generation` is the new generation.
    Restarted {
        /// The generation that begins.
        generation: u64,
    },
    /// An incarnation declared down earlier: refused; it must restart to be admitted.
    Quarantined,
}

/// One peer address's lives, sans-I/O (time passed in).
///
/// A *generation* is one life of the peer as this node sees it; refs, queued frames and
/// requests belong to the generation they were made in. It ends when the peer is declared down
/// (failure detector, leave, protocol violation) or a new incarnation appears; its incarnation
/// is then quarantined, and nothing of the old generation ever reaches a later one.
///
/// # Example
///
/// ```
/// use std::time::Instant;
/// use rally_wire::{Incarnation, Liveness, Observed, PhiAccrualConfig};
///
/// let mut peer = Liveness::new(PhiAccrualConfig::default());
/// let now = Instant::now();
/// assert_eq!(peer.observe(Incarnation(1), now), Observed::First);
/// assert!(peer.declare_down());                 // say the detector fired
/// assert_eq!(peer.observe(Incarnation(1), now), Observed::Quarantined); // woke up: refused
/// assert_eq!(peer.observe(Incarnation(2), now), Observed::First);       // restarted: admitted
/// assert_eq!(peer.generation(), 2);
/// ```
#[derive(Debug)]
pub struct Liveness {
    generation: u64,
    incarnation: Option<Incarnation>,
    quarantined: VecDeque<Incarnation>,
    detector: PhiAccrualDetector,
    config: PhiAccrualConfig,
    heard: bool,
}

impl Liveness {
    /// A peer not yet contacted: generation 1, no incarnation known.
    pub fn new(config: PhiAccrualConfig) -> Self {
        Self {
            generation: 1,
            incarnation: None,
            quarantined: VecDeque::new(),
            detector: PhiAccrualDetector::new(config.clone()),
            config,
            heard: false,
        }
    }

    /// The current generation.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The incarnation of the current generation, once contacted.
    pub fn incarnation(&self) -> Option<Incarnation> {
        self.incarnation
    }

    /// Whether `incarnation` was declared down here.
    pub fn is_quarantined(&self, incarnation: Incarnation) -> bool {
        self.quarantined.contains(&incarnation)
    }

    /// Whether traffic from `incarnation` belongs to the current generation.
    pub fn admits(&self, incarnation: Incarnation) -> bool {
        self.incarnation == Some(incarnation)
    }

    /// A handshake (either direction) showed the peer's incarnation at `now`. A completed
    /// handshake counts as hearing from the peer, so one that goes silent right after it is
    /// still suspected in time.
    pub fn observe(&mut self, incarnation: Incarnation, now: Instant) -> Observed {
        if self.is_quarantined(incarnation) {
            return Observed::Quarantined;
        }
        let observed = self.admit(incarnation);
        self.detector.heartbeat(now);
        self.heard = true;
        observed
    }

    fn admit(&mut self, incarnation: Incarnation) -> Observed {
        match self.incarnation {
            Some(known) if known == incarnation => Observed::Same,
            None => {
                self.incarnation = Some(incarnation);
                Observed::First
            }
            Some(_) => {
                self.end_generation();
                self.incarnation = Some(incarnation);
                Observed::Restarted {
                    generation: self.generation,
                }
            }
        }
    }

    /// A heartbeat from `incarnation` arrived at `now`; ignored unless it is the current one.
    pub fn heartbeat(&mut self, incarnation: Incarnation, now: Instant) {
        if self.admits(incarnation) {
            self.detector.heartbeat(now);
            self.heard = true;
        }
    }

    /// Whether the detector suspects the peer at `now` (only once it has been heard from).
    pub fn suspect(&self, now: Instant) -> bool {
        self.heard && !self.detector.is_available(now)
    }

    /// Declares the current life down (detector, leave, protocol violation): its incarnation is
    /// quarantined and a new generation begins, with no incarnation until a new one (never the
    /// quarantined one) completes a handshake. Returns `false` if there was nothing to end (no
    /// incarnation was ever seen in this generation).
    pub fn declare_down(&mut self) -> bool {
        if self.incarnation.is_none() {
            return false;
        }
        self.end_generation();
        true
    }

    fn end_generation(&mut self) {
        if let Some(old) = self.incarnation.take() {
            if self.quarantined.len() == QUARANTINE_MEMORY {
                self.quarantined.pop_front();
            }
            self.quarantined.push_back(old);
        }
        self.generation += 1;
        self.heard = false;
        self.detector = PhiAccrualDetector::new(self.config.clone());
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn quick() -> PhiAccrualConfig {
        PhiAccrualConfig {
            acceptable_heartbeat_pause: Duration::from_millis(600),
            first_heartbeat_estimate: Duration::from_millis(100),
            min_std_deviation: Duration::from_millis(50),
            ..PhiAccrualConfig::default()
        }
    }

    /// A peer paused past the detector's bound is declared down, and its heartbeats after it
    /// wakes change nothing: down is final for that incarnation (simulated time).
    #[test]
    fn a_paused_peer_stays_down_when_it_wakes() {
        let mut peer = Liveness::new(quick());
        let start = Instant::now();
        assert_eq!(
            peer.observe(Incarnation(7), Instant::now()),
            Observed::First
        );
        let mut now = start;
        for _ in 0..20 {
            now += Duration::from_millis(100);
            peer.heartbeat(Incarnation(7), now);
            assert!(!peer.suspect(now));
        }
        // Paused: no heartbeat for 5 s.
        let mut suspected_at = None;
        for step in 1..=50 {
            let at = now + Duration::from_millis(100 * step);
            if peer.suspect(at) {
                suspected_at = Some(at);
                break;
            }
        }
        let at = suspected_at.expect("the detector fires within 5 s");
        assert!(at - now <= Duration::from_secs(2), "{:?}", at - now);
        assert!(peer.declare_down());
        assert_eq!(peer.generation(), 2);
        // It wakes: its heartbeats are ignored, its handshakes refused.
        peer.heartbeat(Incarnation(7), at + Duration::from_millis(100));
        assert!(!peer.admits(Incarnation(7)));
        assert_eq!(
            peer.observe(Incarnation(7), Instant::now()),
            Observed::Quarantined
        );
        assert_eq!(peer.incarnation(), None);
        // Restarted as a new process: admitted at once, in the new generation.
        assert_eq!(
            peer.observe(Incarnation(8), Instant::now()),
            Observed::First
        );
        assert_eq!(peer.generation(), 2);
    }

    #[test]
    fn a_new_incarnation_ends_the_generation_of_the_old() {
        let mut peer = Liveness::new(quick());
        assert_eq!(
            peer.observe(Incarnation(1), Instant::now()),
            Observed::First
        );
        assert_eq!(peer.observe(Incarnation(1), Instant::now()), Observed::Same);
        assert_eq!(
            peer.observe(Incarnation(2), Instant::now()),
            Observed::Restarted { generation: 2 }
        );
        assert_eq!(
            peer.observe(Incarnation(1), Instant::now()),
            Observed::Quarantined
        );
        assert!(peer.declare_down());
        assert_eq!(peer.generation(), 3);
    }

    #[test]
    fn a_peer_silent_right_after_its_handshake_is_suspected() {
        let mut peer = Liveness::new(quick());
        let start = Instant::now();
        peer.observe(Incarnation(3), start);
        assert!(!peer.suspect(start));
        assert!(peer.suspect(start + Duration::from_secs(3)));
    }

    #[test]
    fn quarantine_memory_is_bounded() {
        let mut peer = Liveness::new(quick());
        for i in 0..1_000 {
            peer.observe(Incarnation(i), Instant::now());
        }
        assert_eq!(peer.quarantined.len(), QUARANTINE_MEMORY);
    }
}
