//! Statistics and row matching (pure): medians, ratios, and the key that pairs rows of
//! different frameworks by what they measure.

use super::*;

/// Median, min and max of one row's msgs/s over the runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(super) struct Summary {
    pub(super) median: f64,
    pub(super) min: f64,
    pub(super) max: f64,
}

/// Summarises `values`; `None` when there are none. The median of an even count is the mean of
/// the middle two.
pub(super) fn summarize(values: &[f64]) -> Option<Summary> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let median = if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    };
    Some(Summary {
        median,
        min: sorted[0],
        max: sorted[n - 1],
    })
}

/// Rally over peer, median over median; `None` when either is missing or the peer's is zero.
pub(super) fn ratio(rally: Option<f64>, peer: Option<f64>) -> Option<f64> {
    match (rally, peer) {
        (Some(r), Some(p)) if p > 0.0 => Some(r / p),
        _ => None,
    }
}

/// What a row measures, so rows of different frameworks can be matched.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub(super) enum RowKey {
    /// max-throughput: the payload size.
    Payload(u64),
    /// latency: the offered rate.
    Rate(u64),
    /// Ping-pong shapes: clients or pairs, messages in flight, and a mode other than `tell`.
    Clients {
        clients: u64,
        in_flight: Option<u64>,
        mode: Option<String>,
    },
    /// Anything else: the label itself.
    Label(String),
}

pub(super) fn extra_u64(row: &Row, key: &str) -> Option<u64> {
    row.extra
        .get(key)
        .and_then(|v| v.as_u64().or_else(|| v.as_f64().map(|f| f.round() as u64)))
}

pub(super) fn row_key(row: &Row) -> RowKey {
    if let Some(bytes) = extra_u64(row, "payload_bytes") {
        return RowKey::Payload(bytes);
    }
    if let Some(rate) = extra_u64(row, "rate") {
        return RowKey::Rate(rate);
    }
    if let Some(clients) = row.clients {
        let mode = row
            .extra
            .get("mode")
            .and_then(Value::as_str)
            .filter(|m| *m != "tell")
            .map(str::to_owned);
        return RowKey::Clients {
            clients,
            in_flight: extra_u64(row, "in_flight"),
            mode,
        };
    }
    RowKey::Label(row.label.clone())
}

impl RowKey {
    /// A label that reads the same for every framework.
    pub(super) fn label(&self) -> String {
        match self {
            Self::Payload(bytes) => format!("{bytes} B"),
            Self::Rate(rate) => format!("{rate} msg/s"),
            Self::Clients {
                clients,
                in_flight: None,
                mode,
            } => {
                format!(
                    "{clients} client{}{}",
                    if *clients == 1 { "" } else { "s" },
                    mode_suffix(mode)
                )
            }
            Self::Clients {
                clients,
                in_flight: Some(f),
                mode,
            } => {
                format!(
                    "{clients} pair{}, {f} in flight{}",
                    if *clients == 1 { "" } else { "s" },
                    mode_suffix(mode)
                )
            }
            Self::Label(label) => label.clone(),
        }
    }

    /// The x value of the chart when every key is a client count.
    #[cfg(feature = "plots")]
    pub(super) fn clients(&self) -> Option<u64> {
        match self {
            Self::Clients {
                clients,
                in_flight: None,
                mode: None,
            } => Some(*clients),
            _ => None,
        }
    }
}

pub(super) fn mode_suffix(mode: &Option<String>) -> String {
    mode.as_ref()
        .map_or_else(String::new, |m| format!(" ({m})"))
}

/// The series a row belongs to: its framework, plus its `runtime` field where it has one (Rally's
/// local scenarios report the multi-thread and the current-thread runtime as separate rows).
pub(super) fn series_name(report: &Report, row: &Row) -> String {
    match row.extra.get("runtime").and_then(Value::as_str) {
        Some(runtime) if !runtime.contains(' ') => format!("{} {runtime}", report.framework),
        _ => report.framework.clone(),
    }
}
