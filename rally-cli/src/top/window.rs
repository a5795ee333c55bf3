//! Rates over a window a person can read: the node's report gives each counter's rate over its
//! last period (1 s by default), which reads 0.0 between bursts while the counter grows; the
//! live view keeps the counters it fetched over the last `span` and shows their increase per
//! second across it. No I/O, no clock: the instants come in with the reports.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use rally_metrics::PeriodReport;

/// A counter: its name and labels.
type Key = (String, BTreeMap<String, String>);

/// The counters fetched over the last `span`, oldest first.
#[derive(Debug)]
pub(super) struct Window {
    span: Duration,
    samples: VecDeque<(Instant, BTreeMap<Key, f64>)>,
}

impl Window {
    pub(super) fn new(span: Duration) -> Self {
        Self {
            span,
            samples: VecDeque::new(),
        }
    }

    /// A report fetched at `at`: its counters join the window; samples older than the span
    /// leave it, but for the newest of them, which the rates start from.
    pub(super) fn observe(&mut self, at: Instant, report: &PeriodReport) {
        let counters = report
            .figures
            .iter()
            .filter(|f| f.rate.is_some())
            .map(|f| ((f.name.clone(), f.labels.clone()), f.value))
            .collect();
        self.samples.push_back((at, counters));
        while self
            .samples
            .get(1)
            .is_some_and(|(second, _)| at.saturating_duration_since(*second) >= self.span)
        {
            self.samples.pop_front();
        }
    }

    /// The time the window covers, from its first sample to its last; `None` before two.
    pub(super) fn covered(&self) -> Option<Duration> {
        let (first, _) = self.samples.front()?;
        let (last, _) = self.samples.back()?;
        let covered = last.saturating_duration_since(*first);
        (!covered.is_zero()).then_some(covered)
    }

    /// The increase per second of counter `name` with `labels` (a subset of its labels) across
    /// the window; `None` before two samples or for a counter not in the first one (it
    /// appeared meanwhile: a new kind, a new member).
    pub(super) fn rate(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let covered = self.covered()?;
        let find = |counters: &BTreeMap<Key, f64>| {
            counters
                .iter()
                .find(|((n, l), _)| {
                    n == name
                        && labels
                            .iter()
                            .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
                })
                .map(|(_, value)| *value)
        };
        let first = find(&self.samples.front()?.1)?;
        let last = find(&self.samples.back()?.1)?;
        // A counter that went down belongs to a member that restarted: no rate across it.
        (last >= first).then(|| (last - first) / covered.as_secs_f64())
    }

    /// What the rates are over, for a caption.
    pub(super) fn caption(&self, report: &PeriodReport) -> String {
        match self.covered() {
            Some(covered) => format!(
                "rates per second over the last {:.0} s",
                covered.as_secs_f64()
            ),
            None => format!(
                "rates per second over the node's last period ({:.1} s)",
                report.seconds
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report of one counter with `value`, whose rate over the node's period is `rate`.
    fn report(value: f64, rate: f64) -> PeriodReport {
        serde_json::from_str(&format!(
            r#"{{"seconds":1.0,"actors":[],"dispatchers":[],"figures":[{{"name":"rally_grain_activations_total","labels":{{"kind":"cart","member":"m"}},"value":{value},"rate":{rate}}}]}}"#
        ))
        .unwrap()
    }

    const CART: &[(&str, &str)] = &[("kind", "cart"), ("member", "m")];
    const NAME: &str = "rally_grain_activations_total";

    #[test]
    fn a_counter_growing_in_bursts_has_a_steady_rate_over_the_window() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut window = Window::new(10 * s);
        window.observe(t0, &report(0.0, 0.0));
        assert_eq!(window.rate(NAME, CART), None, "one sample");
        assert!(
            window
                .caption(&report(0.0, 0.0))
                .contains("last period (1.0 s)")
        );
        // 50 activations in a burst every 5 s; the node's own rate reads 0 in between.
        window.observe(t0 + 5 * s, &report(50.0, 0.0));
        window.observe(t0 + 10 * s, &report(100.0, 0.0));
        assert_eq!(window.rate(NAME, CART), Some(10.0));
        assert_eq!(window.covered(), Some(10 * s));
        assert!(
            window
                .caption(&report(0.0, 0.0))
                .contains("over the last 10 s")
        );
        // The oldest sample leaves once a newer one is a whole span old.
        window.observe(t0 + 15 * s, &report(100.0, 0.0));
        assert_eq!(window.covered(), Some(10 * s));
        assert_eq!(window.rate(NAME, CART), Some(5.0));
    }

    #[test]
    fn a_counter_that_went_down_or_appeared_meanwhile_has_no_rate() {
        let t0 = Instant::now();
        let mut window = Window::new(Duration::from_secs(10));
        window.observe(t0, &report(100.0, 0.0));
        window.observe(t0 + Duration::from_secs(2), &report(3.0, 0.0));
        assert_eq!(window.rate(NAME, CART), None, "restarted");
        assert_eq!(window.rate(NAME, &[("kind", "order")]), None, "not there");
    }
}
