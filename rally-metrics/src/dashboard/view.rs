//! What the dashboard shows, as data: the cluster at one instant ([`ClusterView`]), what each
//! member reports of itself ([`MemberFigures`], made from its period report), and the charts'
//! series. `/api/cluster` answers it as JSON; the page and `rally top --cluster` render it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::report::{ActorPeriod, DispatcherPeriod, PeriodReport};

/// The hottest actors a member reports (worst verdict first, then longest queue): enough to
/// name a bottleneck, few enough that a member with a million monitored actors answers in a
/// few kilobytes.
pub const HOTTEST: usize = 8;

/// The cluster as the serving member sees it at one instant.
///
/// # Example
///
/// ```
/// use rally::metrics::dashboard::ClusterView;
///
/// fn summary(view: &ClusterView) -> String {
///     let up = view.members.iter().filter(|m| m.status == "up").count();
///     format!("{up} of {} members up, {} kinds", view.members.len(), view.kinds.len())
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[non_exhaustive]
pub struct ClusterView {
    /// The member serving the dashboard.
    pub served_by: String,
    /// Every member in its view, by name.
    pub members: Vec<MemberView>,
    /// Every virtual-actor kind some member reports, with the cluster's totals.
    pub kinds: Vec<KindView>,
    /// The last minutes, one point per gathering.
    pub charts: Charts,
}

/// One member: its status in the serving member's view, and the figures it reported.
///
/// # Example
///
/// ```
/// use rally::metrics::dashboard::MemberView;
///
/// fn line(m: &MemberView) -> String {
///     match &m.figures {
///         Some(f) => format!("{} {}: {:.0} msg/s", m.member, m.status, f.messages_per_sec),
///         None => format!("{} {}: {}", m.member, m.status, m.error.as_deref().unwrap_or("?")),
///     }
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[non_exhaustive]
pub struct MemberView {
    /// `rally://system@host:port#incarnation`.
    pub member: String,
    /// `joining`, `up`, `leaving`, `down` or `removed`.
    pub status: String,
    /// Whether the failure detector reaches it.
    pub reachable: bool,
    /// What it reported of itself; `None` when it did not answer (see `error`).
    pub figures: Option<MemberFigures>,
    /// Why there are no figures.
    pub error: Option<String>,
}

/// What one member reports of itself over its last period.
///
/// # Example
///
/// ```
/// use rally::metrics::dashboard::MemberFigures;
///
/// fn worst(f: &MemberFigures) -> Option<String> {
///     f.hottest.first().map(|a| format!("{}: {}", a.path, a.diagnosis.text))
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[non_exhaustive]
pub struct MemberFigures {
    /// The period's length in seconds.
    pub seconds: f64,
    /// Its dispatchers, busiest first.
    pub dispatchers: Vec<DispatcherPeriod>,
    /// Its [`HOTTEST`] worst monitored actors, with the diagnosis.
    pub hottest: Vec<ActorPeriod>,
    /// How many actors it monitors.
    pub monitored_actors: usize,
    /// Messages its monitored actors handled per second.
    pub messages_per_sec: f64,
    /// Messages waiting in its monitored actors' mailboxes at the period's end.
    pub queued: usize,
    /// Its virtual-actor kinds.
    pub kinds: Vec<KindFigures>,
}

/// One virtual-actor kind on one member over a period.
///
/// # Example
///
/// ```
/// use rally::metrics::dashboard::KindFigures;
///
/// fn line(k: &KindFigures) -> String {
///     format!("{}: {} active, {:.1} calls/s", k.kind, k.active, k.calls_per_sec)
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[non_exhaustive]
pub struct KindFigures {
    /// The kind.
    pub kind: String,
    /// Activations alive at the period's end.
    pub active: u64,
    /// Leases held at the period's end.
    pub leases: u64,
    /// Activations started since the member started.
    pub activations: u64,
    /// Activations started per second.
    pub activations_per_sec: f64,
    /// Activations moved away since the member started.
    pub moves: u64,
    /// Activations moved away per second.
    pub moves_per_sec: f64,
    /// Calls handled per second.
    pub calls_per_sec: f64,
    /// Calls per second within each bound (seconds; `None` is above every bound), ascending
    /// and cumulative: the last is `calls_per_sec`.
    pub calls_within: Vec<(Option<f64>, f64)>,
    /// The 99th percentile of the calls' time (handed to the activation until finished), in
    /// milliseconds, as the bound of the bucket it falls in; `None` without calls.
    pub p99_ms: Option<f64>,
}

/// One kind across the members that report it.
///
/// # Example
///
/// ```
/// use rally::metrics::dashboard::KindView;
///
/// fn line(k: &KindView) -> String {
///     format!("{}: {} active on {} members", k.kind, k.active, k.members)
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[non_exhaustive]
pub struct KindView {
    /// The kind.
    pub kind: String,
    /// Members that reported it.
    pub members: usize,
    /// Activations alive, summed over the members.
    pub active: u64,
    /// Leases held, summed.
    pub leases: u64,
    /// Activations started per second, summed.
    pub activations_per_sec: f64,
    /// Activations moved away per second, summed.
    pub moves_per_sec: f64,
    /// Calls handled per second, summed.
    pub calls_per_sec: f64,
    /// The 99th percentile of the calls' time over all members, in milliseconds (the bound
    /// of its bucket).
    pub p99_ms: Option<f64>,
}

/// Series of the last minutes, one value per member and gathering (`None` where a member did
/// not answer), aligned on `at`.
///
/// # Example
///
/// ```
/// use rally::metrics::dashboard::Charts;
///
/// fn points(c: &Charts) -> usize {
///     c.calls_per_sec.iter().map(|s| s.iter().flatten().count()).sum()
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[non_exhaustive]
pub struct Charts {
    /// The members the series are of, in order.
    pub members: Vec<String>,
    /// When each gathering was, in seconds since the Unix epoch.
    pub at: Vec<f64>,
    /// Virtual-actor calls handled per second, per member.
    pub calls_per_sec: Vec<Vec<Option<f64>>>,
    /// Messages handled per second by monitored actors, per member.
    pub messages_per_sec: Vec<Vec<Option<f64>>>,
    /// The 99th percentile of virtual-actor call time in milliseconds, per member.
    pub p99_ms: Vec<Vec<Option<f64>>>,
    /// Messages waiting in monitored actors' mailboxes, per member.
    pub queued: Vec<Vec<Option<f64>>>,
}

impl MemberFigures {
    /// The figures of a member from its period report.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::metrics::PeriodReport;
    /// use rally::metrics::dashboard::MemberFigures;
    ///
    /// let figures = MemberFigures::from_report(&PeriodReport::default());
    /// assert_eq!(figures.monitored_actors, 0);
    /// assert!(figures.kinds.is_empty());
    /// ```
    pub fn from_report(report: &PeriodReport) -> Self {
        Self {
            seconds: report.seconds,
            dispatchers: report.dispatchers.clone(),
            hottest: report.actors.iter().take(HOTTEST).cloned().collect(),
            monitored_actors: report.actors.len(),
            messages_per_sec: report.actors.iter().map(|a| a.throughput).sum(),
            queued: report.actors.iter().map(|a| a.queue).sum(),
            kinds: kinds(report),
        }
    }

    /// Virtual-actor calls handled per second, over every kind.
    pub fn calls_per_sec(&self) -> f64 {
        self.kinds.iter().map(|k| k.calls_per_sec).sum()
    }

    /// The 99th percentile of virtual-actor call time over every kind, in milliseconds.
    pub fn p99_ms(&self) -> Option<f64> {
        p99_ms(&merge(self.kinds.iter().map(|k| k.calls_within.as_slice())))
    }
}

/// The kinds of a report, from the virtual-actor figures of its member
/// (`rally_grain_active`, `rally_grain_activations_total`, ...).
fn kinds(report: &PeriodReport) -> Vec<KindFigures> {
    let mut kinds: BTreeMap<String, KindFigures> = BTreeMap::new();
    for figure in report
        .figures
        .iter()
        .filter(|f| f.name.starts_with("rally_grain_"))
    {
        let Some(kind) = figure.label("kind") else {
            continue;
        };
        let entry = kinds.entry(kind.to_owned()).or_insert_with(|| KindFigures {
            kind: kind.to_owned(),
            ..KindFigures::default()
        });
        let rate = figure.rate.unwrap_or(0.0);
        // Counts and levels are whole numbers carried as f64.
        let whole = figure.value.max(0.0) as u64;
        match figure.name.as_str() {
            "rally_grain_active" => entry.active = whole,
            "rally_grain_leases" => entry.leases = whole,
            "rally_grain_activations_total" => {
                entry.activations = whole;
                entry.activations_per_sec = rate;
            }
            "rally_grain_moves_total" => {
                entry.moves = whole;
                entry.moves_per_sec = rate;
            }
            "rally_grain_calls_within_total" => {
                let le = figure.label("le").and_then(|le| le.parse::<f64>().ok());
                entry
                    .calls_within
                    .push((le.filter(|b| b.is_finite()), rate));
            }
            _ => {}
        }
    }
    kinds
        .into_values()
        .map(|mut k| {
            k.calls_within.sort_by(|a, b| bound_order(a.0, b.0));
            k.calls_per_sec = k.calls_within.last().map_or(0.0, |(_, r)| *r);
            k.p99_ms = p99_ms(&k.calls_within);
            k
        })
        .collect()
}

/// Finite bounds ascending, then "above every bound".
fn bound_order(a: Option<f64>, b: Option<f64>) -> std::cmp::Ordering {
    match (a, b) {
        (Some(a), Some(b)) => a.total_cmp(&b),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    }
}

/// Sums cumulative bucket rates bound by bound.
pub(crate) fn merge<'a>(
    all: impl Iterator<Item = &'a [(Option<f64>, f64)]>,
) -> Vec<(Option<f64>, f64)> {
    let mut sum: Vec<(Option<f64>, f64)> = Vec::new();
    for buckets in all {
        for (bound, rate) in buckets {
            match sum.iter_mut().find(|(b, _)| b == bound) {
                Some((_, total)) => *total += rate,
                None => sum.push((*bound, *rate)),
            }
        }
    }
    sum.sort_by(|a, b| bound_order(a.0, b.0));
    sum
}

/// The bound of the first bucket that holds 99% of the calls, in milliseconds (above every
/// bound: the last bound, as "at least"); `None` without calls.
pub(crate) fn p99_ms(within: &[(Option<f64>, f64)]) -> Option<f64> {
    let total = within.last().map(|(_, r)| *r)?;
    if total <= 0.0 {
        return None;
    }
    let last_bound = within.iter().rev().find_map(|(b, _)| *b);
    within
        .iter()
        .find(|(_, rate)| *rate >= 0.99 * total)
        .and_then(|(bound, _)| bound.or(last_bound))
        .map(|seconds| seconds * 1000.0)
}

impl KindView {
    /// The cluster's totals per kind from what the members reported (members without figures
    /// count for nothing), by kind.
    ///
    /// # Example
    ///
    /// ```
    /// use rally::metrics::dashboard::{KindView, MemberView};
    ///
    /// assert!(KindView::totals(&[MemberView::default()]).is_empty());
    /// ```
    pub fn totals(members: &[MemberView]) -> Vec<KindView> {
        let mut kinds: BTreeMap<&str, Vec<&KindFigures>> = BTreeMap::new();
        for figures in members.iter().filter_map(|m| m.figures.as_ref()) {
            for kind in &figures.kinds {
                kinds.entry(kind.kind.as_str()).or_default().push(kind);
            }
        }
        kinds
            .into_iter()
            .map(|(kind, on)| KindView {
                kind: kind.to_owned(),
                members: on.len(),
                active: on.iter().map(|k| k.active).sum(),
                leases: on.iter().map(|k| k.leases).sum(),
                activations_per_sec: on.iter().map(|k| k.activations_per_sec).sum(),
                moves_per_sec: on.iter().map(|k| k.moves_per_sec).sum(),
                calls_per_sec: on.iter().map(|k| k.calls_per_sec).sum(),
                p99_ms: p99_ms(&merge(on.iter().map(|k| k.calls_within.as_slice()))),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::FigurePeriod;

    fn figure(name: &str, kind: &str, value: f64, rate: Option<f64>) -> FigurePeriod {
        FigurePeriod {
            name: name.to_owned(),
            labels: [("kind".to_owned(), kind.to_owned())].into_iter().collect(),
            value,
            rate,
        }
    }

    fn within(kind: &str, le: &str, rate: f64) -> FigurePeriod {
        let mut f = figure("rally_grain_calls_within_total", kind, 0.0, Some(rate));
        f.labels.insert("le".to_owned(), le.to_owned());
        f
    }

    #[test]
    fn a_members_kinds_come_from_its_grain_figures_with_rates_and_the_p99_bucket() {
        let report = PeriodReport {
            seconds: 1.0,
            figures: vec![
                figure("rally_grain_active", "cart", 12.0, None),
                figure("rally_grain_leases", "cart", 3.0, None),
                figure("rally_grain_activations_total", "cart", 40.0, Some(2.5)),
                figure("rally_grain_moves_total", "cart", 1.0, Some(0.0)),
                // 100 calls/s: 90 within 1 ms, 99 within 5 ms, all within 10 ms.
                within("cart", "+Inf", 100.0),
                within("cart", "0.001", 90.0),
                within("cart", "0.005", 99.0),
                within("cart", "0.01", 100.0),
                figure("rally_cluster_members", "none", 3.0, None),
            ],
            ..PeriodReport::default()
        };
        let figures = MemberFigures::from_report(&report);
        assert_eq!(figures.kinds.len(), 1);
        let cart = &figures.kinds[0];
        assert_eq!((cart.active, cart.leases, cart.activations), (12, 3, 40));
        assert_eq!(cart.activations_per_sec, 2.5);
        assert_eq!(cart.calls_per_sec, 100.0);
        assert_eq!(cart.p99_ms, Some(5.0));
        assert_eq!(figures.p99_ms(), Some(5.0));
    }

    #[test]
    fn the_cluster_sums_kinds_over_members_and_merges_their_buckets() {
        let member = |active, fast: f64, slow: f64| MemberView {
            figures: Some(MemberFigures {
                kinds: vec![KindFigures {
                    kind: "cart".into(),
                    active,
                    calls_per_sec: fast + slow,
                    calls_within: vec![
                        (Some(0.001), fast),
                        (Some(0.1), fast + slow),
                        (None, fast + slow),
                    ],
                    ..KindFigures::default()
                }],
                ..MemberFigures::default()
            }),
            ..MemberView::default()
        };
        // One member fast, one with 2% of the calls slow: the cluster's p99 is the slow bucket.
        let kinds = KindView::totals(&[
            member(5, 100.0, 0.0),
            member(7, 96.0, 4.0),
            MemberView::default(),
        ]);
        assert_eq!(kinds.len(), 1);
        assert_eq!((kinds[0].members, kinds[0].active), (2, 12));
        assert_eq!(kinds[0].calls_per_sec, 200.0);
        assert_eq!(kinds[0].p99_ms, Some(100.0));
        assert_eq!(
            p99_ms(&[(Some(0.001), 0.0), (None, 0.0)]),
            None,
            "no calls, no p99"
        );
        assert_eq!(
            p99_ms(&[(Some(0.001), 0.0), (None, 5.0)]),
            Some(1.0),
            "above every bound: at least the last"
        );
    }
}
