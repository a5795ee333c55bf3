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
//!
//! Rooms: this file (the flags and the run's order), `peers` (the peer table, building and
//! selecting peers), `process` (running one framework, bounded, and parsing its report),
//! `matching` (statistics and the row key), `table` (the comparison, as text and JSON) and
//! `chart` (the SVG, feature `plots`).

mod chart;
mod matching;
mod peers;
mod process;
mod table;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::report::{Machine, Report, Row};
// The rooms of this command see each other through here (each opens with `use super::*`).
use chart::*;
use matching::*;

use process::*;
use table::*;

pub(crate) use peers::{Prepared, Selected, select_peers};
pub(crate) use process::{Framework, on_path, repo_root};

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
// Bounds on every run and build.

/// Bounds one benchmark run of any framework; a full remote-ping-pong takes about a minute.
const RUN_LIMIT: Duration = Duration::from_secs(20 * 60);

/// Bounds one run with --quick.
const QUICK_RUN_LIMIT: Duration = Duration::from_secs(3 * 60);

/// Bounds a peer's build (the first one downloads its dependencies).
const BUILD_LIMIT: Duration = Duration::from_secs(20 * 60);

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
