//! `rally-bench`: the scenarios of `shared/BENCHMARKS.md`, each printing a plain table or, with
//! `--json`, one JSON object in the shared format (see [`report`]).

mod report;
mod scenarios;

use clap::{Parser, Subcommand};

use scenarios::local;

/// Rally's benchmark scenarios.
#[derive(Debug, Parser)]
#[command(name = "rally-bench", version, about)]
struct Cli {
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Debug, Subcommand)]
enum Scenario {
    /// Pairs of actors in request/response in one process.
    LocalPingPong(local::PingPongArgs),
    /// One sender to one receiver, and many to one, in one process.
    LocalThroughput(local::ThroughputArgs),
    /// Create and stop many actors; report actors/s and bytes per idle actor.
    Spawn(local::SpawnArgs),
    /// `ask` round-trip latency on the multi-threaded and the current-thread runtime.
    AskLatency(local::AskArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.scenario {
        Scenario::LocalPingPong(args) => local::ping_pong(&args),
        Scenario::LocalThroughput(args) => local::throughput(&args),
        Scenario::Spawn(args) => local::spawn(&args),
        Scenario::AskLatency(args) => local::ask_latency(&args),
    }
}
