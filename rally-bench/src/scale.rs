//! `rally-bench scale`: how throughput, batching and CPU per message change with the cores a
//! run is given.
//!
//! For each core count it runs the remote scenarios (remote-ping-pong at 1, 5 and 20 clients,
//! max-throughput, latency, grain-ping at P = 512), Rally's `raw-echo` (the bare socket) and the same
//! scenarios of the selected peers, each process of a run pinned with `taskset` to the first N
//! cores, and prints one table: msgs/s, messages per socket write and writer wake-ups per
//! message (Rally's counters), CPU per message over every process of the run, and futex calls
//! and eventfd writes per message (the cross-thread wake-ups) where `perf stat` can count them.
//!
//! CPU and system calls are counted over the whole run (start-up and warm-up included) and
//! divided by the messages its rows report: a little high, and alike for every framework.

use std::path::Path;

use anyhow::{Context as _, bail};
use serde::Serialize;

use crate::compare::{self, Framework, Prepared, Selected};
use crate::report::{Machine, Report, Row};

/// `rally-bench scale` flags.
#[derive(Debug, clap::Args)]
pub(crate) struct ScaleArgs {
    /// Core counts to run at, comma separated (those above this machine's are left out).
    #[arg(long, value_delimiter = ',', default_value = "2,4,8,16,32,64")]
    cores: Vec<usize>,
    /// Peers beside Rally (known: protoactor-go, pekko; pekko runs only where `java` is).
    #[arg(long, value_delimiter = ',', default_value = "protoactor-go,pekko")]
    peers: Vec<String>,
    /// Scenarios, comma separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "remote-ping-pong,max-throughput,latency,grain-ping,raw-echo"
    )]
    scenarios: Vec<String>,
    /// A smoke run: every scenario with --quick, figures meaningless.
    #[arg(long)]
    quick: bool,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

/// The flags each scenario runs with (every harness takes them): the rows the many-core
/// targets are stated for.
fn scenario_args(scenario: &str) -> &'static [&'static str] {
    match scenario {
        "remote-ping-pong" | "raw-echo" => &["--clients", "1,5,20"],
        // The peers' latency harnesses run their own rates (1k, 10k, 100k msg/s).
        "latency" => &["--seconds", "5"],
        "grain-ping" => &["--parallelism", "512"],
        _ => &[],
    }
}

/// One row of the table.
#[derive(Debug, Clone, Serialize)]
struct ScaleRow {
    cores: usize,
    scenario: String,
    framework: String,
    row: String,
    msgs_per_sec: Option<f64>,
    p50_us: Option<f64>,
    p99_us: Option<f64>,
    msgs_per_write: Option<f64>,
    wakeups_per_msg: Option<f64>,
    cpu_us_per_msg: Option<f64>,
    futex_per_msg: Option<f64>,
    eventfd_per_msg: Option<f64>,
}

/// What `perf stat` counted over one run, when it could.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    cpu_ms: Option<f64>,
    futex: Option<f64>,
    writes: Option<f64>,
}

/// Runs the scale table described by `args`.
///
/// # Errors
///
/// When `taskset` is missing, or Rally fails to run (a peer that fails is reported and left
/// out).
pub(crate) fn run(args: &ScaleArgs) -> anyhow::Result<()> {
    if !compare::on_path("taskset") {
        bail!("scale pins each run to N cores with `taskset` (util-linux): install it first");
    }
    let machine = Machine::current();
    let cores: Vec<usize> = args
        .cores
        .iter()
        .copied()
        .filter(|&n| n >= 1 && n <= machine.cores)
        .collect();
    if cores.is_empty() {
        bail!(
            "no core count in {:?} fits {} cores",
            args.cores,
            machine.cores
        );
    }
    let perf = perf_works();
    if !perf {
        eprintln!("scale: `perf stat` cannot count here: CPU and wake-up columns left empty");
    }
    let root = compare::repo_root()?;
    let rally = Framework::rally()?;
    let mut rows = Vec::new();
    for scenario in &args.scenarios {
        let mut frameworks = vec![rally_for(&rally, scenario)];
        if scenario != "raw-echo" {
            for peer in compare::select_peers(scenario, &args.peers)? {
                match peer {
                    Selected::Run(peer) => match peer.prepare(&root) {
                        Ok(Prepared::Ready(framework)) => frameworks.push(framework),
                        Ok(Prepared::Skipped(why)) => {
                            eprintln!("scale: {scenario}: skipping {}: {why}", peer.name);
                        }
                        Err(error) => {
                            eprintln!(
                                "scale: {scenario}: {} failed to build: {error:#}",
                                peer.name
                            )
                        }
                    },
                    Selected::Skip(name, why) => {
                        eprintln!("scale: {scenario}: skipping {name}: {why}")
                    }
                    Selected::RallyCluster => {}
                }
            }
        }
        for &n in &cores {
            for framework in &frameworks {
                eprintln!("scale: {n} cores, {scenario}, {}", framework.name);
                let perf_file = std::env::temp_dir()
                    .join(format!("rally-scale-{}-{n}.perf", std::process::id()));
                let wrapper = wrapper(n, perf.then_some(perf_file.as_path()));
                let extra: Vec<String> = scenario_args(scenario)
                    .iter()
                    .map(|s| (*s).to_owned())
                    .collect();
                let scenario_name = if scenario == "raw-echo" {
                    "raw-echo"
                } else {
                    scenario.as_str()
                };
                match framework.run_wrapped(&wrapper, scenario_name, args.quick, &extra) {
                    Ok(report) => {
                        let counts = if perf {
                            read_perf(&perf_file)
                        } else {
                            Counts::default()
                        };
                        rows.extend(scale_rows(n, scenario, &report, counts));
                    }
                    Err(error) => {
                        if framework.name == "rally" {
                            return Err(error.context(format!("{scenario} at {n} cores")));
                        }
                        eprintln!("scale: {} failed at {n} cores: {error:#}", framework.name);
                    }
                }
                let _ = std::fs::remove_file(&perf_file);
            }
        }
    }
    if args.json {
        #[derive(Serialize)]
        struct Out<'a> {
            scenario: &'static str,
            machine: Machine,
            quick: bool,
            rows: &'a [ScaleRow],
        }
        let out = Out {
            scenario: "scale",
            machine,
            quick: args.quick,
            rows: &rows,
        };
        println!(
            "{}",
            serde_json::to_string(&out).context("serializing the table")?
        );
    } else {
        print!("{}", table(&machine, &rows));
    }
    Ok(())
}

/// Rally for `scenario`: this executable, where `raw-echo` is a scenario of its own.
fn rally_for(rally: &Framework, scenario: &str) -> Framework {
    let mut framework = rally.clone();
    if scenario == "raw-echo" {
        framework.name = "raw-echo".to_owned();
    }
    framework
}

/// `taskset -c 0-{n-1}`, and `perf stat` writing its counts to `perf_file` when it can count.
fn wrapper(cores: usize, perf_file: Option<&Path>) -> Vec<String> {
    let mut wrapper = vec![
        "taskset".to_owned(),
        "-c".to_owned(),
        format!("0-{}", cores - 1),
    ];
    if let Some(file) = perf_file {
        wrapper.extend(
            [
                "perf",
                "stat",
                "-x",
                ",",
                "-e",
                "task-clock,syscalls:sys_enter_futex,syscalls:sys_enter_write",
                "-o",
            ]
            .map(str::to_owned),
        );
        wrapper.push(file.display().to_string());
        wrapper.push("--".to_owned());
    }
    wrapper
}

/// Whether `perf stat` can count task-clock and the two system calls here (it needs the
/// tracepoints and the permission to read them).
fn perf_works() -> bool {
    let file = std::env::temp_dir().join(format!("rally-scale-probe-{}.perf", std::process::id()));
    let counted = std::process::Command::new("perf")
        .args(["stat", "-x", ",", "-e"])
        .arg("task-clock,syscalls:sys_enter_futex,syscalls:sys_enter_write")
        .arg("-o")
        .arg(&file)
        .args(["--", "true"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
        && read_perf(&file).futex.is_some();
    let _ = std::fs::remove_file(&file);
    counted
}

/// Reads `perf stat -x,` output: `value,unit,event,...` lines.
fn read_perf(file: &Path) -> Counts {
    let mut counts = Counts::default();
    let Ok(text) = std::fs::read_to_string(file) else {
        return counts;
    };
    for line in text.lines() {
        let fields: Vec<&str> = line.split(',').collect();
        let (Some(value), Some(event)) = (fields.first(), fields.get(2)) else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        match *event {
            "task-clock" => counts.cpu_ms = Some(value),
            "syscalls:sys_enter_futex" => counts.futex = Some(value),
            "syscalls:sys_enter_write" => counts.writes = Some(value),
            _ => {}
        }
    }
    counts
}

/// The table's rows of one run: its report's rows, with the run's counts per message.
fn scale_rows(cores: usize, scenario: &str, report: &Report, counts: Counts) -> Vec<ScaleRow> {
    let messages: f64 = report
        .rows
        .iter()
        .filter_map(|row| row.total_msgs)
        .map(|n| n as f64)
        .sum();
    let per_msg = |count: Option<f64>, scale: f64| {
        count
            .filter(|_| messages > 0.0)
            .map(|c| c * scale / messages)
    };
    report
        .rows
        .iter()
        .map(|row| ScaleRow {
            cores,
            scenario: scenario.to_owned(),
            framework: report.framework.clone(),
            row: row.label.clone(),
            msgs_per_sec: row.msgs_per_sec,
            p50_us: row.p50_us,
            p99_us: row.p99_us,
            msgs_per_write: extra(row, "msgs_per_write"),
            wakeups_per_msg: extra(row, "wakeups_per_msg"),
            cpu_us_per_msg: per_msg(counts.cpu_ms, 1e3),
            futex_per_msg: per_msg(counts.futex, 1.0),
            // Rally writes to sockets with `sendto`: its `write` calls wake the I/O driver.
            eventfd_per_msg: per_msg(counts.writes, 1.0).filter(|_| report.framework == "rally"),
        })
        .collect()
}

fn extra(row: &Row, key: &str) -> Option<f64> {
    row.extra.get(key).and_then(serde_json::Value::as_f64)
}

/// The plain table: one line per core count, scenario, framework and row.
fn table(machine: &Machine, rows: &[ScaleRow]) -> String {
    let mut out = format!(
        "# scale on {} ({} cores); each run pinned to the first N cores\n\
         cores, scenario, framework, row, msgs/s, p50 [us], p99 [us], msgs/write, \
         wake-ups/msg, CPU [us]/msg, futex/msg, eventfd/msg\n",
        machine.cpu, machine.cores
    );
    let num = |v: Option<f64>, digits: usize| {
        v.map_or_else(|| "-".to_owned(), |v| format!("{v:.digits$}"))
    };
    for row in rows {
        out.push_str(&format!(
            "{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}\n",
            row.cores,
            row.scenario,
            row.framework,
            row.row,
            num(row.msgs_per_sec, 0),
            num(row.p50_us, 1),
            num(row.p99_us, 1),
            num(row.msgs_per_write, 1),
            num(row.wakeups_per_msg, 4),
            num(row.cpu_us_per_msg, 3),
            num(row.futex_per_msg, 4),
            num(row.eventfd_per_msg, 4),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_output_is_read_and_spread_over_the_reported_messages() {
        let file =
            std::env::temp_dir().join(format!("rally-scale-test-{}.perf", std::process::id()));
        std::fs::write(
            &file,
            "# started on ...\n\n2000.5,msec,task-clock,2000500000,100.00,1.9,CPUs utilized\n\
             400,,syscalls:sys_enter_futex,2000500000,100.00,,\n\
             1000,,syscalls:sys_enter_write,2000500000,100.00,,\n",
        )
        .unwrap();
        let counts = read_perf(&file);
        let _ = std::fs::remove_file(&file);
        assert_eq!(counts.cpu_ms, Some(2000.5));
        assert_eq!(counts.futex, Some(400.0));
        let mut report = Report::new("remote-ping-pong");
        report.rows.push(
            Row::new("1 client")
                .clients(1)
                .throughput(1_000_000, std::time::Duration::from_secs(1))
                .with("msgs_per_write", 50.0),
        );
        report.rows.push(
            Row::new("5 clients")
                .clients(5)
                .throughput(1_000_000, std::time::Duration::from_secs(1)),
        );
        let rows = scale_rows(4, "remote-ping-pong", &report, counts);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].msgs_per_write, Some(50.0));
        assert_eq!(rows[1].msgs_per_write, None);
        // 2000.5 ms over 2M messages.
        assert!((rows[0].cpu_us_per_msg.unwrap() - 1.00025).abs() < 1e-9);
        assert_eq!(rows[0].futex_per_msg, Some(0.0002));
        assert_eq!(rows[0].eventfd_per_msg, Some(0.0005));
        assert!(table(&Machine::current(), &rows).contains("4, remote-ping-pong, rally, 1 client"));
    }

    #[test]
    fn the_wrapper_pins_and_counts() {
        assert_eq!(wrapper(4, None), ["taskset", "-c", "0-3"]);
        let counted = wrapper(2, Some(Path::new("/tmp/x")));
        assert_eq!(&counted[..5], ["taskset", "-c", "0-1", "perf", "stat"]);
        assert_eq!(counted.last().map(String::as_str), Some("--"));
    }
}
