//! How long the calls handled here took, from being handed to their life until it finished
//! them (the wait in its mailbox and the handler), counted in fixed buckets per kind, so an
//! observer reads rates and quantiles per period from two readings, as from a Prometheus
//! histogram. A count per bucket, not per call: nothing grows with the calls.

use std::time::Duration;

/// The buckets' upper bounds in microseconds, about three per decade from 50 µs to 10 s; the
/// last bucket (above 10 s) has none.
pub(crate) const BOUNDS_US: [u64; 16] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 10_000_000,
];

/// Calls by the bucket their time fell in (the last: above the last bound).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct CallTimes {
    pub(crate) buckets: [u64; BOUNDS_US.len() + 1],
}

impl CallTimes {
    /// Counts one call that took `took`.
    pub(crate) fn record(&mut self, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let at = BOUNDS_US.partition_point(|&bound| bound < us);
        self.buckets[at] += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_counts_in_the_first_bucket_whose_bound_it_does_not_pass() {
        let mut times = CallTimes::default();
        times.record(Duration::from_micros(50));
        times.record(Duration::from_micros(51));
        times.record(Duration::from_millis(3));
        times.record(Duration::from_secs(60));
        assert_eq!(times.buckets[0], 1, "50 µs is within 50 µs");
        assert_eq!(times.buckets[1], 1, "51 µs is within 100 µs");
        assert_eq!(times.buckets[6], 1, "3 ms is within 5 ms");
        assert_eq!(
            times.buckets[BOUNDS_US.len()],
            1,
            "a minute is above every bound"
        );
        assert_eq!(times.buckets.iter().sum::<u64>(), 4);
    }
}
