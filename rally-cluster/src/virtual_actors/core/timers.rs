//! The core's timers as data: what is due when. Nothing here sleeps; the driver asks for the
//! earliest deadline ([`Timers::next`]) and hands the time back when it has passed
//! ([`Timers::due`]). A timer is never cancelled: whatever it was for checks, when it fires,
//! that it still applies (a life it was armed for may have ended meanwhile).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use super::LifeId;
use super::claim::LeaseKey;

/// What a timer is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Timer {
    /// Passivate idle activations, fail calls past their deadline.
    Sweep,
    /// Ask the store again about a scope whose claim met a holder (or failed): the claim's
    /// attempt it was armed for.
    Claim(LeaseKey, u64),
    /// Try a release that failed again.
    Release(LeaseKey, u64),
    /// Try a fence that failed again.
    Fence(Arc<str>, LifeId),
    /// A stopping life's time is up: fence it.
    StopDeadline(Arc<str>, LifeId),
    /// The next owner did not confirm a handover in time: release anyway.
    Handover(Arc<str>, u64),
    /// Send the calls waiting to be sent again.
    Retry,
    /// A stopped member has been quiet long enough to be drained.
    Quiet,
    /// A member that went away stops counting towards the kind's agreed settings.
    Agreement,
}

/// The armed timers, earliest first.
#[derive(Debug, Default)]
pub(crate) struct Timers {
    queue: BTreeMap<(Instant, u64), Timer>,
    sequence: u64,
}

impl Timers {
    /// Arms `timer` for `at`. Returns whether it is now the earliest (the driver's sleep must
    /// be shortened).
    pub(crate) fn arm(&mut self, at: Instant, timer: Timer) -> bool {
        let earliest = self.next().is_none_or(|next| at < next);
        self.sequence += 1;
        self.queue.insert((at, self.sequence), timer);
        earliest
    }

    /// When the earliest timer is due.
    pub(crate) fn next(&self) -> Option<Instant> {
        self.queue.keys().next().map(|(at, _)| *at)
    }

    /// Takes the timers due at `now`, in the order they are due.
    pub(crate) fn due(&mut self, now: Instant) -> Vec<Timer> {
        let mut due = Vec::new();
        while let Some(entry) = self.queue.first_entry() {
            if entry.key().0 > now {
                break;
            }
            due.push(entry.remove());
        }
        due
    }

    /// Timers armed.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.queue.len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn timers_fire_in_order_once_and_report_a_new_earliest() {
        let t0 = Instant::now();
        let mut timers = Timers::default();
        assert!(timers.arm(t0 + Duration::from_secs(2), Timer::Sweep));
        assert!(!timers.arm(t0 + Duration::from_secs(3), Timer::Retry));
        assert!(timers.arm(t0 + Duration::from_secs(1), Timer::Quiet));
        // Two at one instant keep the order they were armed in.
        assert!(!timers.arm(t0 + Duration::from_secs(1), Timer::Retry));
        assert_eq!(timers.next(), Some(t0 + Duration::from_secs(1)));
        assert_eq!(timers.due(t0), Vec::<Timer>::new());
        assert_eq!(
            timers.due(t0 + Duration::from_secs(2)),
            vec![Timer::Quiet, Timer::Retry, Timer::Sweep]
        );
        assert_eq!(timers.len(), 1);
        assert_eq!(timers.due(t0 + Duration::from_secs(9)), vec![Timer::Retry]);
        assert_eq!(timers.next(), None);
    }
}
