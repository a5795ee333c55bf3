//! The report shared with rally-bench (the output contract in `docs/benchmarks.md`): a plain
//! table, or one JSON object.

use std::time::Duration;

use serde_json::{Map, Value, json};

pub struct Row {
    label: String,
    clients: Option<u64>,
    total_msgs: Option<u64>,
    elapsed_ms: Option<f64>,
    msgs_per_sec: Option<f64>,
    extra: Map<String, Value>,
}

impl Row {
    pub fn new(label: impl Into<String>) -> Self {
        Self {
            label: label.into(),
            clients: None,
            total_msgs: None,
            elapsed_ms: None,
            msgs_per_sec: None,
            extra: Map::new(),
        }
    }

    pub fn clients(mut self, n: u64) -> Self {
        self.clients = Some(n);
        self
    }

    pub fn throughput(mut self, total: u64, elapsed: Duration) -> Self {
        let secs = elapsed.as_secs_f64();
        self.total_msgs = Some(total);
        self.elapsed_ms = Some(secs * 1e3);
        self.msgs_per_sec = Some(if secs > 0.0 { total as f64 / secs } else { 0.0 });
        self
    }

    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.extra.insert(key.to_owned(), value.into());
        self
    }

    fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("label".into(), json!(self.label));
        m.insert("clients".into(), json!(self.clients));
        m.insert("total_msgs".into(), json!(self.total_msgs));
        m.insert("elapsed_ms".into(), json!(self.elapsed_ms));
        m.insert("msgs_per_sec".into(), json!(self.msgs_per_sec));
        m.insert("p50_us".into(), Value::Null);
        m.insert("p99_us".into(), Value::Null);
        m.extend(self.extra.clone());
        Value::Object(m)
    }
}

pub struct Report {
    scenario: String,
    framework: String,
    params: Map<String, Value>,
    pub rows: Vec<Row>,
}

impl Report {
    pub fn new(scenario: &str, framework: &str) -> Self {
        Self {
            scenario: scenario.into(),
            framework: framework.into(),
            params: Map::new(),
            rows: Vec::new(),
        }
    }

    pub fn param(&mut self, key: &str, value: impl Into<Value>) {
        self.params.insert(key.to_owned(), value.into());
    }

    pub fn print(&self, as_json: bool) {
        let (cores, cpu) = machine();
        if as_json {
            let value = json!({
                "scenario": self.scenario,
                "framework": self.framework,
                "machine": {"cores": cores, "cpu": cpu},
                "params": self.params,
                "rows": self.rows.iter().map(Row::to_json).collect::<Vec<_>>(),
            });
            println!("{value}");
            return;
        }
        println!(
            "# {} ({}) on {cores} cores, {cpu}",
            self.scenario, self.framework
        );
        for (k, v) in &self.params {
            println!(
                "#   {k} = {}",
                v.as_str().map_or_else(|| v.to_string(), str::to_owned)
            );
        }
        println!("label, Total [msg], Msgs/sec, Total [ms], in_flight, mode");
        for r in &self.rows {
            println!(
                "{}, {}, {:.0}, {:.1}, {}, {}",
                r.label,
                r.total_msgs.unwrap_or(0),
                r.msgs_per_sec.unwrap_or(0.0),
                r.elapsed_ms.unwrap_or(0.0),
                r.extra
                    .get("in_flight")
                    .map_or_else(|| "-".to_owned(), Value::to_string),
                r.extra.get("mode").and_then(Value::as_str).unwrap_or("-"),
            );
        }
    }
}

fn machine() -> (usize, String) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned());
    (cores, cpu)
}
