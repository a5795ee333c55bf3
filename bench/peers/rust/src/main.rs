//! `rust-peers`: Rally's `local-ping-pong` scenario (defined in `docs/benchmarks.md`) on actix,
//! ractor and kameo, with the same definitions and counting as rally-bench, printing the same
//! report.
//!
//! ```text
//! rust-peers --framework actix|ractor-mt|ractor-ct|kameo-mt|kameo-ct local-ping-pong [--quick] [--json]
//! ```
//!
//! A pair is a pinger and a ponger actor. The pinger sends `in_flight` requests, each carrying the
//! address to reply to, and answers every reply with the next request until it has had
//! `round_trips` replies. Total messages count both directions. Rows: 1 pair and one pair per
//! core, each with 1 and 50 in flight, plus one `ask` row (a task on the runtime awaits `ask` in a
//! loop, the frameworks' own request/response call) and, on the multi-thread runtime, the same
//! loop run from outside the runtime (`block_on`), where each ask crosses threads twice.

mod actix_peer;
mod kameo_peer;
mod pairs;
mod ractor_peer;
mod report;

use std::time::Duration;

use anyhow::{Context as _, bail};

use crate::report::{Report, Row};

/// Bounds one row; a row that takes longer is reported as a failure, never waited for.
const ROW_LIMIT: Duration = Duration::from_secs(120);

/// How the actors are scheduled: which framework, and for the tokio-based ones which runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavour {
    /// actix: one `actix_rt::System` (a current-thread tokio runtime) per OS thread, one pair each.
    Actix,
    /// ractor on one multi-threaded tokio runtime with one worker per core.
    RactorMt,
    /// ractor on current-thread tokio runtimes, one OS thread and runtime per pair.
    RactorCt,
    /// kameo on one multi-threaded tokio runtime with one worker per core.
    KameoMt,
    /// kameo on current-thread tokio runtimes, one OS thread and runtime per pair.
    KameoCt,
}

impl Flavour {
    fn parse(name: &str) -> anyhow::Result<Self> {
        Ok(match name {
            "actix" => Self::Actix,
            "ractor" | "ractor-mt" => Self::RactorMt,
            "ractor-ct" => Self::RactorCt,
            "kameo" | "kameo-mt" => Self::KameoMt,
            "kameo-ct" => Self::KameoCt,
            other => bail!(
                "unknown framework {other:?} (actix, ractor-mt, ractor-ct, kameo-mt, kameo-ct)"
            ),
        })
    }

    fn name(self) -> &'static str {
        match self {
            Self::Actix => "actix",
            Self::RactorMt => "ractor-mt",
            Self::RactorCt => "ractor-ct",
            Self::KameoMt => "kameo-mt",
            Self::KameoCt => "kameo-ct",
        }
    }

    fn runtime(self) -> &'static str {
        match self {
            Self::Actix => {
                "actix_rt::System (tokio current-thread) per OS thread, one pair per thread"
            }
            Self::RactorMt | Self::KameoMt => {
                "one tokio multi-thread runtime, one worker per core, all pairs on it"
            }
            Self::RactorCt | Self::KameoCt => {
                "tokio current-thread runtime per OS thread, one pair per thread"
            }
        }
    }

    fn version(self) -> &'static str {
        match self {
            Self::Actix => "actix 0.13.5",
            Self::RactorMt | Self::RactorCt => "ractor 0.16.5",
            Self::KameoMt | Self::KameoCt => "kameo 0.22.2",
        }
    }

    /// Runs `pairs` pairs with `in_flight` requests in flight, `round_trips` replies each, and
    /// gives the time from the start signals to the last pair done.
    fn run_pairs(self, pairs: usize, in_flight: u64, round_trips: u64) -> anyhow::Result<Duration> {
        match self {
            Self::Actix => actix_peer::run_pairs(pairs, in_flight, round_trips),
            Self::RactorMt => ractor_peer::run_pairs(true, pairs, in_flight, round_trips),
            Self::RactorCt => ractor_peer::run_pairs(false, pairs, in_flight, round_trips),
            Self::KameoMt => kameo_peer::run_pairs(true, pairs, in_flight, round_trips),
            Self::KameoCt => kameo_peer::run_pairs(false, pairs, in_flight, round_trips),
        }
    }

    /// On the multi-thread flavours: the asks made from outside the runtime (`block_on`).
    fn run_ask_outside(self, round_trips: u64) -> Option<anyhow::Result<Duration>> {
        match self {
            Self::RactorMt => Some(ractor_peer::run_ask_outside(round_trips)),
            Self::KameoMt => Some(kameo_peer::run_ask_outside(round_trips)),
            _ => None,
        }
    }

    /// One task awaiting `ask` on one ponger `round_trips` times.
    fn run_ask(self, round_trips: u64) -> anyhow::Result<Duration> {
        match self {
            Self::Actix => actix_peer::run_ask(round_trips),
            Self::RactorMt => ractor_peer::run_ask(true, round_trips),
            Self::RactorCt => ractor_peer::run_ask(false, round_trips),
            Self::KameoMt => kameo_peer::run_ask(true, round_trips),
            Self::KameoCt => kameo_peer::run_ask(false, round_trips),
        }
    }
}

struct Args {
    flavour: Flavour,
    scenario: String,
    json: bool,
    quick: bool,
    round_trips: Option<u64>,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut framework = None;
    let mut scenario = None;
    let mut json = false;
    let mut quick = false;
    let mut round_trips = None;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--framework" => framework = Some(it.next().context("--framework needs a value")?),
            "--json" => json = true,
            "--quick" => quick = true,
            "--round-trips" => {
                round_trips = Some(
                    it.next()
                        .context("--round-trips needs a value")?
                        .parse()
                        .context("--round-trips")?,
                )
            }
            "-h" | "--help" => {
                eprintln!("{USAGE}");
                std::process::exit(0);
            }
            s if s.starts_with("--") => bail!("unknown flag {s}\n{USAGE}"),
            s => {
                if scenario.replace(s.to_owned()).is_some() {
                    bail!("more than one scenario\n{USAGE}");
                }
            }
        }
    }
    let flavour = Flavour::parse(&framework.context(USAGE)?)?;
    Ok(Args {
        flavour,
        scenario: scenario.context(USAGE)?,
        json,
        quick,
        round_trips,
    })
}

const USAGE: &str = "usage: rust-peers --framework actix|ractor-mt|ractor-ct|kameo-mt|kameo-ct local-ping-pong [--quick] [--json] [--round-trips N]";

/// Bounds a whole run: reaching it means something is stuck outside the per-row timeouts (a
/// thread that never reached its barrier, say), so the process reports it and exits non-zero.
const RUN_LIMIT: Duration = Duration::from_secs(15 * 60);

fn main() {
    std::thread::spawn(|| {
        std::thread::sleep(RUN_LIMIT);
        eprintln!("rust-peers: error: did not finish within {RUN_LIMIT:?}");
        std::process::exit(1);
    });
    if let Err(err) = run() {
        eprintln!("rust-peers: error: {err:#}");
        std::process::exit(1);
    }
}

fn run() -> anyhow::Result<()> {
    let args = parse_args()?;
    if args.scenario != "local-ping-pong" {
        bail!(
            "scenario {:?} is not implemented for the Rust peers (only local-ping-pong)",
            args.scenario
        );
    }
    let report = local_ping_pong(&args)?;
    report.print(args.json);
    // Actors and runtimes are not shut down gracefully: the report is out, and a stuck shutdown
    // must not turn a finished run into a hang.
    std::process::exit(0);
}

fn local_ping_pong(args: &Args) -> anyhow::Result<Report> {
    let flavour = args.flavour;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // 1 in flight is latency-bound and far slower than 50 in flight, so it runs fewer round trips
    // (the rate, not the count, is the figure).
    let (one, fifty, ask) = match (args.round_trips, args.quick) {
        (Some(n), _) => (n, n, n),
        (None, true) => (20_000, 100_000, 20_000),
        (None, false) => (200_000, 1_000_000, 200_000),
    };
    let mut report = Report::new("local-ping-pong", flavour.name());
    report.param("framework_version", flavour.version());
    report.param("runtime", flavour.runtime());
    report.param("round_trips_per_pair_1_in_flight", one);
    report.param("round_trips_per_pair_50_in_flight", fifty);
    report.param("round_trips_ask", ask);
    report.param("pairs", format!("1 and one per core ({cores})"));
    report.param(
        "message",
        "Ping carrying the pinger's address; Pong back (tell/cast/do_send), unbounded mailboxes",
    );
    report.param(
        "warm_up",
        "1 pair x 100,000 round trips at 50 in flight, untimed",
    );

    flavour
        .run_pairs(1, 50, if args.quick { 10_000 } else { 100_000 })
        .context("warm-up")?;
    let mut pair_counts = vec![1];
    if cores > 1 {
        pair_counts.push(cores);
    }
    for &pairs in &pair_counts {
        for in_flight in [1u64, 50] {
            let n = if in_flight == 1 { one } else { fifty };
            let elapsed = flavour.run_pairs(pairs, in_flight, n)?;
            let label = format!(
                "{pairs} pair{}, {in_flight} in flight",
                if pairs == 1 { "" } else { "s" }
            );
            report.rows.push(
                Row::new(label)
                    .clients(pairs as u64)
                    .throughput(pairs as u64 * n * 2, elapsed)
                    .with("in_flight", in_flight)
                    .with("mode", "tell"),
            );
        }
    }
    let elapsed = flavour.run_ask(ask)?;
    report.rows.push(
        Row::new("1 pair, ask")
            .clients(1)
            .throughput(ask * 2, elapsed)
            .with("in_flight", 1)
            .with("mode", "ask"),
    );
    if let Some(elapsed) = flavour.run_ask_outside(ask) {
        report.rows.push(
            Row::new("1 pair, ask from outside the runtime")
                .clients(1)
                .throughput(ask * 2, elapsed?)
                .with("in_flight", 1)
                .with("mode", "ask-outside"),
        );
    }
    Ok(report)
}
