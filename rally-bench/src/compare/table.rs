//! The comparison table: medians and ratios per row and series, printed as text or JSON.

use super::*;

/// What is summarised per row and framework.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Metric {
    MsgsPerSec,
    P50,
    P99,
}

impl Metric {
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::MsgsPerSec => "msgs/s",
            Self::P50 => "p50",
            Self::P99 => "p99",
        }
    }
}

/// One Rally-over-peer ratio of medians on one row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Ratio {
    pub(super) rally: usize,
    pub(super) peer: usize,
    pub(super) metric: Metric,
    pub(super) value: f64,
}

/// All runs of all frameworks, by row key and series.
pub(super) struct Comparison {
    /// Keys in order of first appearance (Rally's first, as its reports come first).
    pub(super) keys: Vec<RowKey>,
    /// Series in order of first appearance.
    pub(super) series: Vec<String>,
    /// Values per (key index, series index, metric), one per run.
    pub(super) values: BTreeMap<(usize, usize, Metric), Vec<f64>>,
    /// Per key: a request/response row of the grain scenarios, where the p99 is compared as well
    /// as the rate.
    pub(super) tail_matters: Vec<bool>,
}

impl Comparison {
    pub(super) fn build(reports: &[Report]) -> Self {
        let mut table = Self {
            keys: vec![],
            series: vec![],
            values: BTreeMap::new(),
            tail_matters: vec![],
        };
        for report in reports {
            for row in &report.rows {
                let Some(rate) = row.msgs_per_sec else {
                    continue;
                };
                let key = row_key(row);
                let k = index_of(&mut table.keys, key);
                if table.tail_matters.len() <= k {
                    table.tail_matters.resize(k + 1, false);
                }
                table.tail_matters[k] |= ["parallelism", "activations"]
                    .iter()
                    .any(|field| row.extra.contains_key(*field));
                let s = index_of(&mut table.series, series_name(report, row));
                table
                    .values
                    .entry((k, s, Metric::MsgsPerSec))
                    .or_default()
                    .push(rate);
                for (metric, value) in [(Metric::P50, row.p50_us), (Metric::P99, row.p99_us)] {
                    if let Some(v) = value {
                        table.values.entry((k, s, metric)).or_default().push(v);
                    }
                }
            }
        }
        table
    }

    /// msgs/s of `series` on row `key`.
    pub(super) fn summary(&self, key: usize, series: usize) -> Option<Summary> {
        self.metric(key, series, Metric::MsgsPerSec)
    }

    pub(super) fn metric(&self, key: usize, series: usize, metric: Metric) -> Option<Summary> {
        self.values
            .get(&(key, series, metric))
            .and_then(|v| summarize(v))
    }

    pub(super) fn is_rally(&self, series: usize) -> bool {
        self.series[series] == "rally" || self.series[series].starts_with("rally ")
    }

    /// Which medians a row's ratio compares: msgs/s, except on a latency row (a fixed offered
    /// rate), where the rate only says whether the pair kept up and p50 and p99 are the figures.
    pub(super) fn ratio_metrics(&self, key: usize) -> &'static [Metric] {
        match self.keys[key] {
            RowKey::Rate(_) => &[Metric::P50, Metric::P99],
            _ if self.tail_matters[key] => &[Metric::MsgsPerSec, Metric::P99],
            _ => &[Metric::MsgsPerSec],
        }
    }

    /// Rally over peer, median over median, for every Rally series and peer series with values.
    pub(super) fn ratios(&self, key: usize) -> Vec<Ratio> {
        let mut out = vec![];
        for rally in (0..self.series.len()).filter(|&s| self.is_rally(s)) {
            for peer in (0..self.series.len()).filter(|&s| !self.is_rally(s)) {
                for &metric in self.ratio_metrics(key) {
                    let r = self.metric(key, rally, metric).map(|s| s.median);
                    let p = self.metric(key, peer, metric).map(|s| s.median);
                    if let Some(value) = ratio(r, p) {
                        out.push(Ratio {
                            rally,
                            peer,
                            metric,
                            value,
                        });
                    }
                }
            }
        }
        out
    }

    pub(super) fn ratio_name(&self, r: &Ratio) -> String {
        let base = format!("{}/{}", self.series[r.rally], self.series[r.peer]);
        match r.metric {
            Metric::MsgsPerSec => base,
            other => format!("{base} {}", other.name()),
        }
    }

    pub(super) fn json_rows(&self) -> Vec<Value> {
        (0..self.keys.len())
            .map(|k| {
                let mut results = Map::new();
                for (s, name) in self.series.iter().enumerate() {
                    let mut entry = Map::new();
                    for (metric, field) in [
                        (Metric::MsgsPerSec, "msgs_per_sec"),
                        (Metric::P50, "p50_us"),
                        (Metric::P99, "p99_us"),
                    ] {
                        if let (Some(summary), Some(values)) =
                            (self.metric(k, s, metric), self.values.get(&(k, s, metric)))
                        {
                            entry.insert(
                                field.to_owned(),
                                serde_json::json!({"median": summary.median, "min": summary.min, "max": summary.max, "values": values}),
                            );
                        }
                    }
                    if !entry.is_empty() {
                        results.insert(name.clone(), Value::Object(entry));
                    }
                }
                let mut ratios = Map::new();
                for r in self.ratios(k) {
                    ratios.insert(self.ratio_name(&r), r.value.into());
                }
                serde_json::json!({"label": self.keys[k].label(), "key": self.keys[k], "results": results, "ratios": ratios})
            })
            .collect()
    }

    pub(super) fn text(&self, scenario: &str, runs: usize, statuses: &[Status]) -> String {
        let machine = Machine::current();
        let mut out = format!(
            "# compare {scenario} on {} cores, {}: {runs} run(s) of each framework, alternating\n",
            machine.cores, machine.cpu
        );
        for status in statuses.iter().filter(|s| s.status != "ok") {
            // One line each: the reason's last non-empty line (the error itself, for a failure).
            let reason = status.reason.as_deref().unwrap_or("");
            let last = reason
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            out.push_str(&format!(
                "# {}: {} ({})\n",
                status.name,
                status.status,
                last.trim()
            ));
        }
        out.push_str("# msgs/s: median (min-max); ratio = Rally median / peer median\n");
        if self.keys.iter().any(|k| matches!(k, RowKey::Rate(_))) {
            out.push_str("# latency rows: p50 and p99 medians in us; their ratio below 1 means Rally is faster\n");
        }
        let width = self
            .series
            .iter()
            .map(String::len)
            .max()
            .unwrap_or(5)
            .max(9);
        for k in 0..self.keys.len() {
            out.push_str(&format!("\n{}\n", self.keys[k].label()));
            let ratios = self.ratios(k);
            for s in 0..self.series.len() {
                let Some(summary) = self.summary(k, s) else {
                    continue;
                };
                out.push_str(&format!(
                    "  {:width$}  {:>8}  ({} - {})",
                    self.series[s],
                    si(summary.median),
                    si(summary.min),
                    si(summary.max)
                ));
                if let (Some(p50), Some(p99)) = (
                    self.metric(k, s, Metric::P50),
                    self.metric(k, s, Metric::P99),
                ) {
                    out.push_str(&format!("  p50 {:.0} p99 {:.0}", p50.median, p99.median));
                }
                let mine: Vec<String> = ratios
                    .iter()
                    .filter(|r| r.peer == s)
                    .map(|r| format!("{} {:.2}x", self.ratio_name(r), r.value))
                    .collect();
                if !mine.is_empty() {
                    out.push_str(&format!("  {}", mine.join(", ")));
                }
                out.push('\n');
            }
        }
        out
    }
}

pub(super) fn index_of<T: PartialEq>(items: &mut Vec<T>, item: T) -> usize {
    if let Some(i) = items.iter().position(|x| *x == item) {
        return i;
    }
    items.push(item);
    items.len() - 1
}

/// 1234567.0 -> "1.23M".
pub(super) fn si(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.0}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// One framework's outcome, for the JSON output and the table header.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Status {
    pub(super) name: String,
    /// "ok", "skipped" or "failed".
    pub(super) status: &'static str,
    pub(super) runs: usize,
    pub(super) reason: Option<String>,
    /// The first run's params, so the comparison states what each side ran.
    pub(super) params: Option<Map<String, Value>>,
}

impl Status {
    pub(super) fn ok(name: &str, runs: usize, first: Option<&Report>) -> Self {
        Self {
            name: name.to_owned(),
            status: "ok",
            runs,
            reason: None,
            params: first.map(|r| r.params.clone()),
        }
    }

    pub(super) fn skipped(name: &str, reason: String) -> Self {
        Self {
            name: name.to_owned(),
            status: "skipped",
            runs: 0,
            reason: Some(reason),
            params: None,
        }
    }

    pub(super) fn failed(name: &str, reason: String) -> Self {
        Self {
            name: name.to_owned(),
            status: "failed",
            runs: 0,
            reason: Some(reason),
            params: None,
        }
    }
}

#[derive(Serialize)]
pub(super) struct CompareOutput<'a> {
    pub(super) scenario: &'a str,
    pub(super) machine: Machine,
    pub(super) runs: usize,
    pub(super) quick: bool,
    pub(super) frameworks: &'a [Status],
    pub(super) series: &'a [String],
    pub(super) rows: Vec<Value>,
    pub(super) chart: Option<String>,
}
