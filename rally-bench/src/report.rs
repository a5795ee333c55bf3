//! The output contract every scenario shares: a plain table, or one JSON object with `--json`.
//!
//! The JSON shape is fixed (the output contract in `docs/benchmarks.md`) so that one script can compare Rally with any
//! peer harness: `{"scenario", "framework", "machine", "params", "rows": [...]}`. Fields that do
//! not apply are `null`; a row may carry extra fields.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The machine a report was measured on.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct Machine {
    /// Logical cores visible to the process.
    pub cores: usize,
    /// CPU model name as `/proc/cpuinfo` states it.
    pub cpu: String,
}

impl Machine {
    /// Reads the current machine's core count and CPU model.
    pub(crate) fn current() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|text| {
                text.lines()
                    .find(|line| line.starts_with("model name"))
                    .and_then(|line| line.split(':').nth(1))
                    .map(|name| name.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".to_owned());
        Self { cores, cpu }
    }
}

/// One row of a scenario's result table.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct Row {
    /// Human label, e.g. `"20 clients"`.
    pub label: String,
    /// Client count (pairs, tasks), where it applies.
    pub clients: Option<u64>,
    /// Messages counted in the figure (both directions for round trips).
    pub total_msgs: Option<u64>,
    /// Wall-clock milliseconds of the timed part.
    pub elapsed_ms: Option<f64>,
    /// `total_msgs / elapsed`.
    pub msgs_per_sec: Option<f64>,
    /// Median latency in microseconds, where measured.
    pub p50_us: Option<f64>,
    /// 99th percentile latency in microseconds, where measured.
    pub p99_us: Option<f64>,
    /// Scenario-specific extra fields.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Row {
    /// A row with only a label; fill the rest with the setters.
    pub(crate) fn new(label: impl Into<String>) -> Self {
        Self {
            label: label.into(),
            clients: None,
            total_msgs: None,
            elapsed_ms: None,
            msgs_per_sec: None,
            p50_us: None,
            p99_us: None,
            extra: Map::new(),
        }
    }

    /// Sets the message count and elapsed time, and derives the rate from them.
    pub(crate) fn throughput(mut self, total_msgs: u64, elapsed: std::time::Duration) -> Self {
        let secs = elapsed.as_secs_f64();
        self.total_msgs = Some(total_msgs);
        self.elapsed_ms = Some(secs * 1e3);
        self.msgs_per_sec = Some(if secs > 0.0 {
            total_msgs as f64 / secs
        } else {
            0.0
        });
        self
    }

    /// Sets the client count.
    pub(crate) fn clients(mut self, clients: u64) -> Self {
        self.clients = Some(clients);
        self
    }

    /// Adds a scenario-specific field.
    pub(crate) fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.extra.insert(key.to_owned(), value.into());
        self
    }
}

/// A scenario's whole result.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct Report {
    /// Scenario name, as `docs/benchmarks.md` lists them.
    pub scenario: String,
    /// Always `"rally"` for this crate's scenarios; peers write their own name.
    pub framework: String,
    /// Where it ran.
    pub machine: Machine,
    /// The parameters the run used.
    pub params: Map<String, Value>,
    /// One row per setting.
    pub rows: Vec<Row>,
}

impl Report {
    /// An empty Rally report for `scenario` on the current machine.
    pub(crate) fn new(scenario: &str) -> Self {
        Self {
            scenario: scenario.to_owned(),
            framework: "rally".to_owned(),
            machine: Machine::current(),
            params: Map::new(),
            rows: Vec::new(),
        }
    }

    /// Records a parameter.
    pub(crate) fn param(&mut self, key: &str, value: impl Into<Value>) -> &mut Self {
        self.params.insert(key.to_owned(), value.into());
        self
    }

    /// Prints the report: one JSON object, or a header line and a plain table.
    pub(crate) fn print(&self, json: bool) {
        if json {
            println!(
                "{}",
                serde_json::to_string(self).expect("a report is plain data")
            );
        } else {
            print!("{}", self.table());
        }
    }

    /// The plain-text table: machine line, then one line per row.
    pub(crate) fn table(&self) -> String {
        let mut out = format!(
            "# {} ({}) on {} cores, {}\n",
            self.scenario, self.framework, self.machine.cores, self.machine.cpu
        );
        let extra_keys: Vec<&String> = self
            .rows
            .first()
            .map(|r| r.extra.keys().collect())
            .unwrap_or_default();
        out.push_str("label, Total [msg], Msgs/sec, Total [ms], p50 [us], p99 [us]");
        for key in &extra_keys {
            out.push_str(", ");
            out.push_str(key);
        }
        out.push('\n');
        for row in &self.rows {
            out.push_str(&format!(
                "{}, {}, {}, {}, {}, {}",
                row.label,
                opt(row.total_msgs.map(|v| v as f64), 0),
                opt(row.msgs_per_sec, 0),
                opt(row.elapsed_ms, 1),
                opt(row.p50_us, 1),
                opt(row.p99_us, 1),
            ));
            for key in &extra_keys {
                out.push_str(", ");
                out.push_str(
                    &row.extra
                        .get(*key)
                        .map_or_else(|| "-".to_owned(), value_text),
                );
            }
            out.push('\n');
        }
        out
    }
}

fn opt(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.decimals$}"))
}

fn value_text(value: &Value) -> String {
    match value {
        Value::Number(n) => n.as_f64().map_or_else(
            || n.to_string(),
            |f| {
                if f.fract() == 0.0 {
                    format!("{f:.0}")
                } else if f.abs() < 0.1 {
                    // A rate per message (wake-ups, writes): three significant digits.
                    format!("{f:.3e}")
                } else {
                    format!("{f:.2}")
                }
            },
        ),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_has_the_contract_fields_and_nulls() {
        let mut report = Report::new("remote-ping-pong");
        report.param("in_flight", 50);
        report.rows.push(
            Row::new("1 client")
                .clients(1)
                .throughput(200_000, std::time::Duration::from_millis(100)),
        );
        let value: Value = serde_json::to_value(&report).unwrap();
        assert_eq!(value["scenario"], "remote-ping-pong");
        assert_eq!(value["framework"], "rally");
        assert_eq!(value["rows"][0]["total_msgs"], 200_000);
        assert_eq!(value["rows"][0]["msgs_per_sec"], 2_000_000.0);
        assert!(value["rows"][0]["p50_us"].is_null());
        let back: Report = serde_json::from_value(value).unwrap();
        assert_eq!(back, report);
    }
}
