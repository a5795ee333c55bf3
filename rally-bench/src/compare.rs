//! `rally-bench compare`: Rally and its peers side by side on one scenario.
//!
//! Runs Rally (this executable, `<scenario> --json`) and each selected peer harness of
//! `bench/peers/` alternately, `A B C A B C …`, so that drift on this shared machine spreads over
//! all of them; parses each run's JSON report (the output contract in `docs/benchmarks.md`); and prints,
//! per row, the median msgs/s with its min–max over the runs and the ratio Rally/peer (median over
//! median). With the `plots` feature it also writes a chart, `target/rally-bench/<scenario>.svg`.
//!
//! Rows of different frameworks are matched by what they measure, not by their label text: the
//! payload size (`payload_bytes`), else the offered rate (`rate`), else the client or pair count
//! with the messages in flight (`clients`, `in_flight`, and `mode` when it is not `tell`), else
//! the label. A framework that reports several rows for one key (Rally's local scenarios on the
//! multi-thread and the current-thread runtime) shows as one series per `runtime` field.
//!
//! A peer whose toolchain is missing is skipped with a one-line reason; a peer that fails to build
//! or run is reported and makes the command fail after the rest has been printed.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::report::{Machine, Report, Row};

/// `rally-bench compare` flags.
#[derive(Debug, clap::Args)]
pub(crate) struct CompareArgs {
    /// The scenario to compare (e.g. remote-ping-pong, local-ping-pong, max-throughput, latency).
    scenario: String,
    /// Runs of each framework, alternating; at least 3 unless --quick (which does 1).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Peers to run, comma-separated (default: every peer that has the scenario). Known:
    /// protoactor-go, pekko, pekko-aeron (only when named), actix, ractor-mt, ractor-ct, kameo-mt,
    /// kameo-ct; and rally-cluster (only when named: Rally with both nodes cluster members, the
    /// remote scenarios' `--cluster`, which needs the `cluster` feature).
    #[arg(long, value_delimiter = ',')]
    peers: Vec<String>,
    /// Print one JSON object instead of the tables.
    #[arg(long)]
    json: bool,
    /// Pass --quick to every run and run each framework once: a smoke test, not a measurement.
    #[arg(long)]
    quick: bool,
    /// Scenario flags passed to every framework's run, after `--` (every harness takes the
    /// same ones), e.g. `compare grain-ping -- --parallelism 32,512 --seconds 5`.
    #[arg(last = true)]
    scenario_args: Vec<String>,
}

/// Runs the comparison described by `args`.
///
/// # Errors
///
/// When the scenario is unknown to every framework, or when Rally or a selected peer fails to
/// build or run (after printing whatever was measured).
pub(crate) fn run(args: &CompareArgs) -> anyhow::Result<()> {
    let root = repo_root()?;
    let runs = if args.quick { 1 } else { args.runs.max(3) };
    let mut frameworks = vec![Framework::rally()?];
    let mut statuses = vec![];
    for peer in select_peers(&args.scenario, &args.peers)? {
        match peer {
            Selected::RallyCluster => frameworks.push(Framework::rally_cluster()?),
            Selected::Run(peer) => match peer.prepare(&root) {
                Ok(Prepared::Ready(framework)) => frameworks.push(framework),
                Ok(Prepared::Skipped(reason)) => {
                    eprintln!("compare: skipping {}: {reason}", peer.name);
                    statuses.push(Status::skipped(peer.name, reason));
                }
                Err(err) => {
                    eprintln!("compare: {} failed to build: {err:#}", peer.name);
                    statuses.push(Status::failed(peer.name, format!("build: {err:#}")));
                }
            },
            Selected::Skip(name, reason) => {
                eprintln!("compare: skipping {name}: {reason}");
                statuses.push(Status::skipped(&name, reason));
            }
        }
    }

    let mut reports: Vec<Vec<Report>> = vec![Vec::new(); frameworks.len()];
    let mut errors: Vec<Option<String>> = vec![None; frameworks.len()];
    for round in 0..runs {
        for (i, framework) in frameworks.iter().enumerate() {
            if errors[i].is_some() {
                continue;
            }
            eprintln!("compare: {} run {}/{runs}", framework.name, round + 1);
            match framework.run(&args.scenario, args.quick, &args.scenario_args) {
                Ok(report) => reports[i].push(report),
                Err(err) => {
                    eprintln!("compare: {} failed: {err:#}", framework.name);
                    errors[i] = Some(format!("{err:#}"));
                }
            }
        }
    }
    for (i, framework) in frameworks.iter().enumerate() {
        statuses.push(match &errors[i] {
            Some(err) => Status::failed(&framework.name, err.clone()),
            None => Status::ok(&framework.name, reports[i].len(), reports[i].first()),
        });
    }

    let all: Vec<Report> = reports.into_iter().flatten().collect();
    let table = Comparison::build(&all);
    let chart = chart_path(&root, &args.scenario);
    let chart_written = match draw_chart(&table, &args.scenario, &chart) {
        Ok(()) => Some(chart),
        Err(err) => {
            eprintln!("compare: chart not written: {err:#}");
            None
        }
    };

    if args.json {
        let out = CompareOutput {
            scenario: &args.scenario,
            machine: Machine::current(),
            runs,
            quick: args.quick,
            frameworks: &statuses,
            series: &table.series,
            rows: table.json_rows(),
            chart: chart_written.as_ref().map(|p| p.display().to_string()),
        };
        println!(
            "{}",
            serde_json::to_string(&out).context("serializing the comparison")?
        );
    } else {
        print!("{}", table.text(&args.scenario, runs, &statuses));
        if let Some(path) = &chart_written {
            println!("chart: {}", path.display());
        }
    }

    let failed: Vec<&str> = statuses
        .iter()
        .filter(|s| s.status == "failed")
        .map(|s| s.name.as_str())
        .collect();
    if !failed.is_empty() {
        bail!("failed: {}", failed.join(", "));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Frameworks: Rally and the peer harnesses.

/// Bounds one benchmark run of any framework; a full remote-ping-pong takes about a minute.
const RUN_LIMIT: Duration = Duration::from_secs(20 * 60);

/// Bounds one run with --quick.
const QUICK_RUN_LIMIT: Duration = Duration::from_secs(3 * 60);

/// Bounds a peer's build (the first one downloads its dependencies).
const BUILD_LIMIT: Duration = Duration::from_secs(20 * 60);

/// A peer harness under `bench/peers/`.
pub(crate) struct Peer {
    pub(crate) name: &'static str,
    /// Folder under `bench/peers/`.
    dir: &'static str,
    /// Commands that must be on PATH to build and run it.
    toolchain: &'static [&'static str],
    /// The artifact, relative to `dir`; built when missing.
    artifact: &'static str,
    /// The build command, run in `dir`.
    build: &'static [&'static str],
    /// The program and its leading arguments; `<scenario> --json [--quick]` follow.
    command: fn(&Path) -> (PathBuf, Vec<String>),
    scenarios: &'static [&'static str],
    /// Whether it runs when --peers is not given.
    by_default: bool,
}

const ALL_SCENARIOS: &[&str] = &[
    "remote-ping-pong",
    "max-throughput",
    "latency",
    "local-ping-pong",
    "grain-ping",
    "activation",
];
const LOCAL_ONLY: &[&str] = &["local-ping-pong"];
const REMOTE_ONLY: &[&str] = &["remote-ping-pong", "max-throughput", "latency"];
const RUST_BUILD: &[&str] = &["cargo", "build", "--release", "--locked"];
const RUST_BIN: &str = "target/release/rust-peers";

fn rust_peer(artifact: &Path, framework: &str) -> (PathBuf, Vec<String>) {
    (
        artifact.to_owned(),
        vec!["--framework".to_owned(), framework.to_owned()],
    )
}

/// Every known peer, in the order they are run and shown.
const PEERS: &[Peer] = &[
    Peer {
        name: "protoactor-go",
        dir: "protoactor-go",
        toolchain: &["go"],
        artifact: "bin/protoactor-bench",
        build: &["go", "build", "-o", "bin/protoactor-bench", "."],
        command: |artifact| (artifact.to_owned(), vec![]),
        scenarios: ALL_SCENARIOS,
        by_default: true,
    },
    Peer {
        name: "pekko",
        dir: "pekko",
        toolchain: &["mvn", "java"],
        artifact: "target/pekko-bench.jar",
        build: &["mvn", "-q", "-B", "package"],
        command: |artifact| {
            (
                PathBuf::from("java"),
                vec!["-jar".to_owned(), artifact.display().to_string()],
            )
        },
        scenarios: ALL_SCENARIOS,
        by_default: true,
    },
    Peer {
        name: "pekko-aeron",
        dir: "pekko",
        toolchain: &["mvn", "java"],
        artifact: "target/pekko-bench.jar",
        build: &["mvn", "-q", "-B", "package"],
        command: |artifact| {
            let jar = artifact.display().to_string();
            (
                PathBuf::from("java"),
                ["-jar", &jar, "--transport", "aeron-udp"]
                    .map(str::to_owned)
                    .to_vec(),
            )
        },
        scenarios: REMOTE_ONLY,
        // Two embedded Aeron media drivers spin on the same 2 cores as the actors: opt-in only.
        by_default: false,
    },
    Peer {
        name: "actix",
        dir: "rust",
        toolchain: &["cargo"],
        artifact: RUST_BIN,
        build: RUST_BUILD,
        command: |a| rust_peer(a, "actix"),
        scenarios: LOCAL_ONLY,
        by_default: true,
    },
    Peer {
        name: "ractor-mt",
        dir: "rust",
        toolchain: &["cargo"],
        artifact: RUST_BIN,
        build: RUST_BUILD,
        command: |a| rust_peer(a, "ractor-mt"),
        scenarios: LOCAL_ONLY,
        by_default: true,
    },
    Peer {
        name: "ractor-ct",
        dir: "rust",
        toolchain: &["cargo"],
        artifact: RUST_BIN,
        build: RUST_BUILD,
        command: |a| rust_peer(a, "ractor-ct"),
        scenarios: LOCAL_ONLY,
        by_default: true,
    },
    Peer {
        name: "kameo-mt",
        dir: "rust",
        toolchain: &["cargo"],
        artifact: RUST_BIN,
        build: RUST_BUILD,
        command: |a| rust_peer(a, "kameo-mt"),
        scenarios: LOCAL_ONLY,
        by_default: true,
    },
    Peer {
        name: "kameo-ct",
        dir: "rust",
        toolchain: &["cargo"],
        artifact: RUST_BIN,
        build: RUST_BUILD,
        command: |a| rust_peer(a, "kameo-ct"),
        scenarios: LOCAL_ONLY,
        by_default: true,
    },
];

pub(crate) enum Selected {
    Run(&'static Peer),
    /// Rally again, with `--cluster`: the same scenario between two cluster members.
    RallyCluster,
    Skip(String, String),
}

/// The peers to run: the named ones (unknown names are an error; ones without the scenario are
/// skipped), or by default every peer that has the scenario.
pub(crate) fn select_peers(scenario: &str, names: &[String]) -> anyhow::Result<Vec<Selected>> {
    if names.is_empty() {
        return Ok(PEERS
            .iter()
            .filter(|p| p.by_default && p.scenarios.contains(&scenario))
            .map(Selected::Run)
            .collect());
    }
    let mut out = Vec::new();
    for name in names.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        if name == RALLY_CLUSTER {
            out.push(if REMOTE_ONLY.contains(&scenario) {
                Selected::RallyCluster
            } else {
                Selected::Skip(
                    name.to_owned(),
                    format!("--cluster applies to the remote scenarios, not {scenario}"),
                )
            });
            continue;
        }
        let peer = PEERS.iter().find(|p| p.name == name).ok_or_else(|| {
            anyhow!(
                "unknown peer {name:?}; known: {}, {RALLY_CLUSTER}",
                PEERS.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
            )
        })?;
        if peer.scenarios.contains(&scenario) {
            out.push(Selected::Run(peer));
        } else {
            out.push(Selected::Skip(
                name.to_owned(),
                format!("its harness has no {scenario} scenario"),
            ));
        }
    }
    Ok(out)
}

pub(crate) enum Prepared {
    Ready(Framework),
    Skipped(String),
}

impl Peer {
    /// Checks the toolchain and builds the artifact if it is missing.
    pub(crate) fn prepare(&self, root: &Path) -> anyhow::Result<Prepared> {
        if let Some(missing) = self.toolchain.iter().find(|tool| !on_path(tool)) {
            return Ok(Prepared::Skipped(format!("no `{missing}` on PATH")));
        }
        let dir = root.join("bench/peers").join(self.dir);
        let artifact = dir.join(self.artifact);
        if !artifact.exists() {
            eprintln!(
                "compare: building {} ({} in {})",
                self.name,
                self.build.join(" "),
                dir.display()
            );
            let mut cmd = Command::new(self.build[0]);
            cmd.args(&self.build[1..]).current_dir(&dir);
            // The Rust peers are a workspace of their own: their build goes to their own target
            // folder even when this process runs under a CARGO_TARGET_DIR.
            cmd.env("CARGO_TARGET_DIR", dir.join("target"));
            let out = run_bounded(cmd, BUILD_LIMIT)?;
            if !out.success {
                bail!(
                    "`{}` failed:\n{}",
                    self.build.join(" "),
                    tail(&out.stderr, 20)
                );
            }
            if !artifact.exists() {
                bail!(
                    "`{}` succeeded but {} is missing",
                    self.build.join(" "),
                    artifact.display()
                );
            }
        }
        let (program, prefix) = (self.command)(&artifact);
        Ok(Prepared::Ready(Framework {
            name: self.name.to_owned(),
            program,
            prefix,
            suffix: vec![],
            dir: Some(dir),
        }))
    }
}

/// The pseudo-peer that runs Rally between two cluster members (`--cluster`).
const RALLY_CLUSTER: &str = "rally-cluster";

/// Something that can run a scenario and print a report.
#[derive(Clone)]
pub(crate) struct Framework {
    pub(crate) name: String,
    program: PathBuf,
    prefix: Vec<String>,
    /// Arguments after `<scenario> --json`.
    suffix: Vec<String>,
    dir: Option<PathBuf>,
}

impl Framework {
    /// Rally: this very executable.
    pub(crate) fn rally() -> anyhow::Result<Self> {
        let program = std::env::current_exe().context("locating the rally-bench executable")?;
        Ok(Self {
            name: "rally".to_owned(),
            program,
            prefix: vec![],
            suffix: vec![],
            dir: None,
        })
    }

    /// Rally with both nodes members of one cluster; its reports name the framework
    /// `rally-cluster`, so the ratio rally/rally-cluster is bare nodes over cluster members.
    fn rally_cluster() -> anyhow::Result<Self> {
        Ok(Self {
            name: RALLY_CLUSTER.to_owned(),
            suffix: vec!["--cluster".to_owned()],
            ..Self::rally()?
        })
    }

    fn run(&self, scenario: &str, quick: bool, extra: &[String]) -> anyhow::Result<Report> {
        self.run_wrapped(&[], scenario, quick, extra)
    }

    /// [`run`](Self::run) under `wrapper` (a command and its arguments that run the rest, as
    /// `taskset -c 0-3` does), if not empty.
    pub(crate) fn run_wrapped(
        &self,
        wrapper: &[String],
        scenario: &str,
        quick: bool,
        extra: &[String],
    ) -> anyhow::Result<Report> {
        let mut cmd = match wrapper.split_first() {
            Some((program, args)) => {
                let mut cmd = Command::new(program);
                cmd.args(args).arg(&self.program);
                cmd
            }
            None => Command::new(&self.program),
        };
        cmd.args(&self.prefix)
            .arg(scenario)
            .arg("--json")
            .args(&self.suffix)
            .args(extra);
        if quick {
            cmd.arg("--quick");
        }
        if let Some(dir) = &self.dir {
            cmd.current_dir(dir);
        }
        let out = run_bounded(cmd, if quick { QUICK_RUN_LIMIT } else { RUN_LIMIT })?;
        if !out.success {
            bail!("exited with {}:\n{}", out.status, tail(&out.stderr, 20));
        }
        parse_report(&out.stdout)
            .with_context(|| format!("reading its report (stderr:\n{})", tail(&out.stderr, 10)))
    }
}

struct Output {
    success: bool,
    status: String,
    stdout: String,
    stderr: String,
}

/// Runs `cmd` with its output captured, killing it if it takes longer than `limit`.
fn run_bounded(mut cmd: Command, limit: Duration) -> anyhow::Result<Output> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {:?}", cmd.get_program()))?;
    let mut stdout = child.stdout.take().context("stdout is piped")?;
    let mut stderr = child.stderr.take().context("stderr is piped")?;
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().context("waiting for a child")? {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "{:?} did not finish within {limit:?}; killed",
                cmd.get_program()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    Ok(Output {
        success: status.success(),
        status: status.to_string(),
        stdout,
        stderr,
    })
}

pub(crate) fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(tool).is_file()))
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The repository root: the nearest ancestor of the working directory that holds
/// `bench/peers`, else the one this crate was built from.
pub(crate) fn repo_root() -> anyhow::Result<PathBuf> {
    let cwd = std::env::current_dir().context("reading the working directory")?;
    if let Some(found) = cwd.ancestors().find(|dir| dir.join("bench/peers").is_dir()) {
        return Ok(found.to_owned());
    }
    let built_from = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_owned);
    match built_from {
        Some(dir) if dir.join("bench/peers").is_dir() => Ok(dir),
        _ => bail!(
            "cannot find bench/peers above {} (run compare inside the Rally repository)",
            cwd.display()
        ),
    }
}

/// `$CARGO_TARGET_DIR/rally-bench/<scenario>.svg`, or under the workspace's `target/`.
fn chart_path(root: &Path, scenario: &str) -> PathBuf {
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let target = if target.is_relative() {
        root.join(target)
    } else {
        target
    };
    target.join("rally-bench").join(format!("{scenario}.svg"))
}

/// Parses a harness's stdout: one JSON object, on the last line that holds one (a harness that
/// lets a library print a line before its report still parses).
fn parse_report(stdout: &str) -> anyhow::Result<Report> {
    let line = stdout
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('{'))
        .ok_or_else(|| anyhow!("no JSON object on stdout ({} bytes)", stdout.len()))?;
    let report: Report =
        serde_json::from_str(line).context("not a report in the shared JSON format")?;
    if report.rows.is_empty() {
        bail!("the report has no rows");
    }
    Ok(report)
}

// ---------------------------------------------------------------------------------------------
// Statistics and row matching (pure).

/// Median, min and max of one row's msgs/s over the runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
struct Summary {
    median: f64,
    min: f64,
    max: f64,
}

/// Summarises `values`; `None` when there are none. The median of an even count is the mean of
/// the middle two.
fn summarize(values: &[f64]) -> Option<Summary> {
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
fn ratio(rally: Option<f64>, peer: Option<f64>) -> Option<f64> {
    match (rally, peer) {
        (Some(r), Some(p)) if p > 0.0 => Some(r / p),
        _ => None,
    }
}

/// What a row measures, so rows of different frameworks can be matched.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
enum RowKey {
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

fn extra_u64(row: &Row, key: &str) -> Option<u64> {
    row.extra
        .get(key)
        .and_then(|v| v.as_u64().or_else(|| v.as_f64().map(|f| f.round() as u64)))
}

fn row_key(row: &Row) -> RowKey {
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
    fn label(&self) -> String {
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
    fn clients(&self) -> Option<u64> {
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

fn mode_suffix(mode: &Option<String>) -> String {
    mode.as_ref()
        .map_or_else(String::new, |m| format!(" ({m})"))
}

/// The series a row belongs to: its framework, plus its `runtime` field where it has one (Rally's
/// local scenarios report the multi-thread and the current-thread runtime as separate rows).
fn series_name(report: &Report, row: &Row) -> String {
    match row.extra.get("runtime").and_then(Value::as_str) {
        Some(runtime) if !runtime.contains(' ') => format!("{} {runtime}", report.framework),
        _ => report.framework.clone(),
    }
}

/// What is summarised per row and framework.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Metric {
    MsgsPerSec,
    P50,
    P99,
}

impl Metric {
    fn name(self) -> &'static str {
        match self {
            Self::MsgsPerSec => "msgs/s",
            Self::P50 => "p50",
            Self::P99 => "p99",
        }
    }
}

/// One Rally-over-peer ratio of medians on one row.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Ratio {
    rally: usize,
    peer: usize,
    metric: Metric,
    value: f64,
}

/// All runs of all frameworks, by row key and series.
struct Comparison {
    /// Keys in order of first appearance (Rally's first, as its reports come first).
    keys: Vec<RowKey>,
    /// Series in order of first appearance.
    series: Vec<String>,
    /// Values per (key index, series index, metric), one per run.
    values: BTreeMap<(usize, usize, Metric), Vec<f64>>,
    /// Per key: a request/response row of the grain scenarios, where the p99 is compared as well
    /// as the rate.
    tail_matters: Vec<bool>,
}

impl Comparison {
    fn build(reports: &[Report]) -> Self {
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
    fn summary(&self, key: usize, series: usize) -> Option<Summary> {
        self.metric(key, series, Metric::MsgsPerSec)
    }

    fn metric(&self, key: usize, series: usize, metric: Metric) -> Option<Summary> {
        self.values
            .get(&(key, series, metric))
            .and_then(|v| summarize(v))
    }

    fn is_rally(&self, series: usize) -> bool {
        self.series[series] == "rally" || self.series[series].starts_with("rally ")
    }

    /// Which medians a row's ratio compares: msgs/s, except on a latency row (a fixed offered
    /// rate), where the rate only says whether the pair kept up and p50 and p99 are the figures.
    fn ratio_metrics(&self, key: usize) -> &'static [Metric] {
        match self.keys[key] {
            RowKey::Rate(_) => &[Metric::P50, Metric::P99],
            _ if self.tail_matters[key] => &[Metric::MsgsPerSec, Metric::P99],
            _ => &[Metric::MsgsPerSec],
        }
    }

    /// Rally over peer, median over median, for every Rally series and peer series with values.
    fn ratios(&self, key: usize) -> Vec<Ratio> {
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

    fn ratio_name(&self, r: &Ratio) -> String {
        let base = format!("{}/{}", self.series[r.rally], self.series[r.peer]);
        match r.metric {
            Metric::MsgsPerSec => base,
            other => format!("{base} {}", other.name()),
        }
    }

    fn json_rows(&self) -> Vec<Value> {
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

    fn text(&self, scenario: &str, runs: usize, statuses: &[Status]) -> String {
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

fn index_of<T: PartialEq>(items: &mut Vec<T>, item: T) -> usize {
    if let Some(i) = items.iter().position(|x| *x == item) {
        return i;
    }
    items.push(item);
    items.len() - 1
}

/// 1234567.0 -> "1.23M".
fn si(v: f64) -> String {
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
struct Status {
    name: String,
    /// "ok", "skipped" or "failed".
    status: &'static str,
    runs: usize,
    reason: Option<String>,
    /// The first run's params, so the comparison states what each side ran.
    params: Option<Map<String, Value>>,
}

impl Status {
    fn ok(name: &str, runs: usize, first: Option<&Report>) -> Self {
        Self {
            name: name.to_owned(),
            status: "ok",
            runs,
            reason: None,
            params: first.map(|r| r.params.clone()),
        }
    }

    fn skipped(name: &str, reason: String) -> Self {
        Self {
            name: name.to_owned(),
            status: "skipped",
            runs: 0,
            reason: Some(reason),
            params: None,
        }
    }

    fn failed(name: &str, reason: String) -> Self {
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
struct CompareOutput<'a> {
    scenario: &'a str,
    machine: Machine,
    runs: usize,
    quick: bool,
    frameworks: &'a [Status],
    series: &'a [String],
    rows: Vec<Value>,
    chart: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// The chart.

/// Without the `plots` feature (left out of the default build to keep the main job's cold
/// build short) there is no chart; the table and JSON are the same.
#[cfg(not(feature = "plots"))]
fn draw_chart(_table: &Comparison, _scenario: &str, _path: &Path) -> anyhow::Result<()> {
    bail!("rally-bench was built without the `plots` feature (add `--features plots`)")
}

#[cfg(feature = "plots")]
fn draw_chart(table: &Comparison, scenario: &str, path: &Path) -> anyhow::Result<()> {
    use plotters::prelude::*;

    if table.keys.is_empty() {
        bail!("nothing to draw");
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    // x: the client count when every row is one (remote-ping-pong), else the row's position.
    let by_clients: Option<Vec<f64>> = table
        .keys
        .iter()
        .map(|k| k.clients().map(|c| c as f64))
        .collect();
    let xs: Vec<f64> = by_clients
        .clone()
        .unwrap_or_else(|| (0..table.keys.len()).map(|i| i as f64).collect());
    let x_max = xs.iter().copied().fold(0.0, f64::max);
    // Client counts start the axis at 0; row positions get half a slot of margin each side.
    let x_range = if by_clients.is_some() {
        0.0..x_max + 1.0
    } else {
        -0.5..x_max + 0.5
    };
    let y_max = table
        .values
        .iter()
        .filter(|((_, _, metric), _)| *metric == Metric::MsgsPerSec)
        .flat_map(|(_, values)| values)
        .copied()
        .fold(0.0, f64::max)
        .max(1.0)
        * 1.1;
    let labels: Vec<String> = table.keys.iter().map(RowKey::label).collect();

    let root = SVGBackend::new(path, (1000, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e:?}"))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("{scenario}: msgs/s, median of runs"),
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(x_range, 0.0..y_max)
        .map_err(|e| anyhow!("{e:?}"))?;
    let x_formatter = |x: &f64| -> String {
        if by_clients.is_some() {
            format!("{x:.0}")
        } else {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        }
    };
    let y_formatter = |y: &f64| si(*y);
    chart
        .configure_mesh()
        .x_desc(if by_clients.is_some() {
            "clients"
        } else {
            "row"
        })
        .y_desc("msgs/s")
        .x_labels(if by_clients.is_some() {
            10
        } else {
            table.keys.len() * 2 + 1
        })
        .x_label_formatter(&x_formatter)
        .y_label_formatter(&y_formatter)
        .draw()
        .map_err(|e| anyhow!("{e:?}"))?;
    for (s, name) in table.series.iter().enumerate() {
        let color = Palette99::pick(s).to_rgba();
        let points: Vec<(f64, f64)> = (0..table.keys.len())
            .filter_map(|k| table.summary(k, s).map(|sum| (xs[k], sum.median)))
            .collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
            .map_err(|e| anyhow!("{e:?}"))?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(|e| anyhow!("{e:?}"))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| anyhow!("{e:?}"))?;
    root.present().map_err(|e| anyhow!("{e:?}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(framework: &str, rows: Vec<Row>) -> Report {
        Report {
            scenario: "remote-ping-pong".to_owned(),
            framework: framework.to_owned(),
            machine: Machine {
                cores: 2,
                cpu: "test".to_owned(),
            },
            params: Map::new(),
            rows,
        }
    }

    fn rate_row(label: &str, clients: u64, rate: f64) -> Row {
        let mut row = Row::new(label).clients(clients);
        row.msgs_per_sec = Some(rate);
        row
    }

    #[test]
    fn summarize_gives_median_min_max() {
        let s = summarize(&[3.0, 1.0, 2.0]).expect("three values");
        assert_eq!(
            s,
            Summary {
                median: 2.0,
                min: 1.0,
                max: 3.0
            }
        );
        let even = summarize(&[4.0, 1.0, 3.0, 2.0]).expect("four values");
        assert_eq!(even.median, 2.5);
        assert_eq!(summarize(&[]), None);
        assert_eq!(summarize(&[f64::NAN]), None);
    }

    #[test]
    fn ratio_is_rally_over_peer_and_none_when_missing() {
        assert_eq!(ratio(Some(3.0), Some(1.5)), Some(2.0));
        assert_eq!(ratio(None, Some(1.0)), None);
        assert_eq!(ratio(Some(1.0), None), None);
        assert_eq!(ratio(Some(1.0), Some(0.0)), None);
    }

    #[test]
    fn rows_match_by_what_they_measure_not_by_label() {
        // Rally says "1 clients", the Go harness "1 client": the same row.
        assert_eq!(
            row_key(&Row::new("1 clients").clients(1)),
            row_key(&Row::new("1 client").clients(1))
        );
        // max-throughput: Rally has no client count, peers say 1; the payload decides.
        let rally = Row::new("100 B").with("payload_bytes", 100);
        let peer = Row::new("100 B").clients(1).with("payload_bytes", 100);
        assert_eq!(row_key(&rally), RowKey::Payload(100));
        assert_eq!(row_key(&rally), row_key(&peer));
        assert_eq!(
            row_key(&Row::new("x").clients(1).with("rate", 1000)),
            RowKey::Rate(1000)
        );
        // local-ping-pong: pairs and in-flight; "tell" is the default mode, "ask" is not.
        let a = Row::new("1 pair(s), 50 in flight, mt")
            .clients(1)
            .with("in_flight", 50)
            .with("runtime", "mt");
        let b = Row::new("1 pair, 50 in flight")
            .clients(1)
            .with("in_flight", 50)
            .with("mode", "tell");
        assert_eq!(row_key(&a), row_key(&b));
        let ask = Row::new("1 pair, ask")
            .clients(1)
            .with("in_flight", 1)
            .with("mode", "ask");
        assert_ne!(
            row_key(&ask),
            row_key(
                &Row::new("1 pair, 1 in flight")
                    .clients(1)
                    .with("in_flight", 1)
            )
        );
        assert_eq!(
            row_key(&Row::new("1 -> 1")),
            RowKey::Label("1 -> 1".to_owned())
        );
        assert_eq!(row_key(&b).label(), "1 pair, 50 in flight");
        assert_eq!(
            row_key(&Row::new("5 clients").clients(5)).label(),
            "5 clients"
        );
    }

    #[test]
    fn comparison_aggregates_runs_and_computes_ratios() {
        let reports = vec![
            report(
                "rally",
                vec![
                    rate_row("1 clients", 1, 300.0),
                    rate_row("5 clients", 5, 900.0),
                ],
            ),
            report("pekko", vec![rate_row("1 client", 1, 100.0)]),
            report(
                "rally",
                vec![
                    rate_row("1 clients", 1, 500.0),
                    rate_row("5 clients", 5, 1000.0),
                ],
            ),
            report("pekko", vec![rate_row("1 client", 1, 200.0)]),
            report("rally", vec![rate_row("1 clients", 1, 400.0)]),
            report("pekko", vec![rate_row("1 client", 1, 150.0)]),
        ];
        let table = Comparison::build(&reports);
        assert_eq!(table.series, vec!["rally".to_owned(), "pekko".to_owned()]);
        assert_eq!(table.keys.len(), 2);
        assert_eq!(
            table.summary(0, 0),
            Some(Summary {
                median: 400.0,
                min: 300.0,
                max: 500.0
            })
        );
        assert_eq!(
            table.summary(0, 1),
            Some(Summary {
                median: 150.0,
                min: 100.0,
                max: 200.0
            })
        );
        let ratios = table.ratios(0);
        assert_eq!(ratios.len(), 1);
        assert!((ratios[0].value - 400.0 / 150.0).abs() < 1e-9);
        // 5 clients: Rally only, no ratio.
        assert!(table.ratios(1).is_empty());
        let rows = table.json_rows();
        assert_eq!(rows[0]["label"], "1 client");
        assert_eq!(rows[0]["results"]["pekko"]["msgs_per_sec"]["median"], 150.0);
        assert!(rows[0]["ratios"]["rally/pekko"].as_f64().is_some());
        let text = table.text("remote-ping-pong", 3, &[]);
        assert!(text.contains("rally/pekko 2.67x"), "{text}");
    }

    #[test]
    fn latency_rows_compare_percentiles_not_rates() {
        let lat = |rate_count: f64, p50: f64, p99: f64| {
            let mut row = Row::new("10000 msg/s").clients(1).with("rate", 10_000);
            row.msgs_per_sec = Some(rate_count);
            row.p50_us = Some(p50);
            row.p99_us = Some(p99);
            row
        };
        // Rally counts one message per round trip here, the peer two: the rate ratio would
        // mislead, so only the percentiles are compared.
        let table = Comparison::build(&[
            report("rally", vec![lat(10_000.0, 50.0, 200.0)]),
            report("pekko", vec![lat(20_000.0, 100.0, 800.0)]),
        ]);
        let ratios = table.ratios(0);
        let by_metric: Vec<(Metric, f64)> = ratios.iter().map(|r| (r.metric, r.value)).collect();
        assert_eq!(by_metric, vec![(Metric::P50, 0.5), (Metric::P99, 0.25)]);
        let rows = table.json_rows();
        assert_eq!(rows[0]["ratios"]["rally/pekko p99"], 0.25);
        assert!(rows[0]["ratios"].get("rally/pekko").is_none());
        assert_eq!(rows[0]["results"]["pekko"]["p50_us"]["median"], 100.0);
        let text = table.text("latency", 1, &[]);
        assert!(text.contains("p50 100 p99 800"), "{text}");
        assert!(
            text.contains("rally/pekko p50 0.50x, rally/pekko p99 0.25x"),
            "{text}"
        );
    }

    #[test]
    fn grain_rows_compare_the_rate_and_the_p99() {
        let grain = |rate: f64, p99: f64| {
            let mut row = Row::new("P=8").clients(8).with("parallelism", 8);
            row.msgs_per_sec = Some(rate);
            row.p99_us = Some(p99);
            row
        };
        let activation = |label: &str, rate: f64| {
            let mut row = Row::new(label).with("activations", 10);
            row.msgs_per_sec = Some(rate);
            row.p99_us = Some(100.0);
            row
        };
        let table = Comparison::build(&[
            report(
                "rally",
                vec![
                    grain(3_000.0, 100.0),
                    activation("N=100000", 50.0),
                    activation("N=1000000", 40.0),
                ],
            ),
            report(
                "protoactor-go",
                vec![
                    grain(1_000.0, 400.0),
                    activation("N=100000", 10.0),
                    activation("N=1000000", 20.0),
                ],
            ),
        ]);
        let by_metric: Vec<(Metric, f64)> = table
            .ratios(0)
            .iter()
            .map(|r| (r.metric, r.value))
            .collect();
        assert_eq!(
            by_metric,
            vec![(Metric::MsgsPerSec, 3.0), (Metric::P99, 0.25)]
        );
        // The two activation rows have no client count: they are told apart by their labels.
        assert_eq!(table.keys.len(), 3);
        assert!((table.ratios(1)[0].value - 5.0).abs() < 1e-9);
        assert!((table.ratios(2)[0].value - 2.0).abs() < 1e-9);
    }

    #[test]
    fn runtime_field_splits_series() {
        let mut mt = Row::new("1 pair(s), 1 in flight, mt")
            .clients(1)
            .with("in_flight", 1)
            .with("runtime", "mt");
        mt.msgs_per_sec = Some(2.0);
        let mut ct = Row::new("1 pair(s), 1 in flight, ct")
            .clients(1)
            .with("in_flight", 1)
            .with("runtime", "ct");
        ct.msgs_per_sec = Some(4.0);
        let mut peer = Row::new("1 pair, 1 in flight")
            .clients(1)
            .with("in_flight", 1);
        peer.msgs_per_sec = Some(1.0);
        let table =
            Comparison::build(&[report("rally", vec![mt, ct]), report("actix", vec![peer])]);
        assert_eq!(
            table.series,
            vec![
                "rally mt".to_owned(),
                "rally ct".to_owned(),
                "actix".to_owned()
            ]
        );
        assert_eq!(table.keys.len(), 1);
        let ratios: Vec<f64> = table.ratios(0).iter().map(|r| r.value).collect();
        assert_eq!(ratios, vec![2.0, 4.0]);
    }

    #[test]
    fn parse_report_reads_the_shared_format_and_skips_noise() {
        let go = r#"{"scenario":"remote-ping-pong","framework":"protoactor-go","machine":{"cores":2,"cpu":"AMD EPYC"},"params":{"processes":2},"rows":[{"clients":1,"elapsed_ms":262.1,"label":"1 client","msgs_per_sec":763010.5,"p50_us":null,"p99_us":null,"total_msgs":200000}]}"#;
        let report = parse_report(&format!("some library banner\n{go}\n")).expect("a valid report");
        assert_eq!(report.framework, "protoactor-go");
        assert_eq!(report.rows[0].clients, Some(1));
        assert_eq!(report.rows[0].msgs_per_sec, Some(763010.5));
        // Extra fields land in `extra` and still match.
        let java = r#"{"scenario":"max-throughput","framework":"pekko","machine":{"cores":2,"cpu":"x"},"params":{},"rows":[{"label":"100 B","clients":1,"total_msgs":1000,"elapsed_ms":1.0,"msgs_per_sec":1.0E6,"p50_us":null,"p99_us":null,"payload_bytes":100,"mb_per_sec":100.0}]}"#;
        let report = parse_report(java).expect("a valid report");
        assert_eq!(row_key(&report.rows[0]), RowKey::Payload(100));
        assert!(parse_report("").is_err());
        assert!(parse_report("{\"not\": \"a report\"}").is_err());
        assert!(parse_report(r#"{"scenario":"s","framework":"f","machine":{"cores":1,"cpu":"c"},"params":{},"rows":[]}"#).is_err());
    }

    #[test]
    fn peers_selection() {
        let all = select_peers("remote-ping-pong", &[]).expect("default selection");
        let names: Vec<&str> = all
            .iter()
            .map(|s| match s {
                Selected::Run(p) => p.name,
                Selected::RallyCluster => "rally-cluster",
                Selected::Skip(..) => "skip",
            })
            .collect();
        assert_eq!(names, vec!["protoactor-go", "pekko"]);
        let local = select_peers("local-ping-pong", &[]).expect("default selection");
        assert_eq!(local.len(), 7);
        let aeron = select_peers("latency", &["pekko-aeron".to_owned()]).expect("known peer");
        assert!(matches!(&aeron[0], Selected::Run(p) if p.name == "pekko-aeron"));
        let named = select_peers("remote-ping-pong", &["actix".to_owned()]).expect("known peer");
        assert!(matches!(&named[0], Selected::Skip(name, _) if name == "actix"));
        assert!(select_peers("remote-ping-pong", &["nope".to_owned()]).is_err());
        // Rally between cluster members: only when named, only on the remote scenarios.
        let cluster = ["rally-cluster".to_owned()];
        let remote = select_peers("remote-ping-pong", &cluster).expect("known pseudo-peer");
        assert!(matches!(remote[..], [Selected::RallyCluster]));
        let local = select_peers("local-ping-pong", &cluster).expect("known pseudo-peer");
        assert!(matches!(&local[..], [Selected::Skip(name, _)] if name == "rally-cluster"));
    }

    #[test]
    fn si_formats_rates() {
        assert_eq!(si(1_234_567.0), "1.23M");
        assert_eq!(si(285_000.0), "285k");
        assert_eq!(si(999.0), "999");
    }
}
