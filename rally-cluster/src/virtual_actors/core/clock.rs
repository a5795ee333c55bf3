//! The core's own clock: instants as offsets from when the core began, small enough to keep
//! in every activation's slot (an `Instant` takes 16 bytes; a [`Tick`] 8, a second count 4).

use std::time::{Duration, Instant};

/// Nanoseconds since the core began (584 years fit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Tick(u64);

/// Converts instants to and from the core's offsets.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    origin: Instant,
}

impl Clock {
    /// A clock whose offsets count from `origin`.
    pub(crate) fn new(origin: Instant) -> Self {
        Self { origin }
    }

    /// `now` as a tick (an instant before the origin counts as the origin).
    pub(crate) fn tick(&self, now: Instant) -> Tick {
        let nanos = now.saturating_duration_since(self.origin).as_nanos();
        Tick(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// `now` in whole seconds since the origin (136 years fit in a `u32`).
    pub(crate) fn seconds(&self, now: Instant) -> u32 {
        let secs = now.saturating_duration_since(self.origin).as_secs();
        u32::try_from(secs).unwrap_or(u32::MAX)
    }

    /// The time from `tick` to `now` (zero if `tick` is later).
    pub(crate) fn since(&self, tick: Tick, now: Instant) -> Duration {
        Duration::from_nanos(self.tick(now).0.saturating_sub(tick.0))
    }

    /// The time from the second `seconds` began to `now`: an age to within a second.
    pub(crate) fn since_second(&self, seconds: u32, now: Instant) -> Duration {
        now.saturating_duration_since(self.origin)
            .saturating_sub(Duration::from_secs(u64::from(seconds)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_and_seconds_measure_from_the_origin() {
        let origin = Instant::now();
        let clock = Clock::new(origin);
        let later = origin + Duration::from_millis(2_500);
        let tick = clock.tick(later);
        assert_eq!(
            clock.since(tick, later + Duration::from_millis(7)),
            Duration::from_millis(7)
        );
        assert_eq!(clock.seconds(later), 2);
        // Started in second 2 (at 2.5 s): at 10 s it is 8 s old by the second it began in.
        assert_eq!(
            clock.since_second(2, origin + Duration::from_secs(10)),
            Duration::from_secs(8)
        );
        // Nothing is negative: a tick after `now` is zero ago, an instant before the origin is
        // the origin.
        assert_eq!(clock.since(tick, origin), Duration::ZERO);
        assert_eq!(clock.tick(origin), Tick(0));
    }
}
