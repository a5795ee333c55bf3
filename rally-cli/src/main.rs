//! `rally`: the command-line companion of a Rally node.
//!
//! `rally top` shows a running node's actors and dispatchers, worst first, refreshed live, and,
//! on a cluster member, its virtual actors per kind and its membership. It reads the JSON report
//! that `rally_metrics::prometheus::serve` publishes at `/report` next to the Prometheus
//! `/metrics`. `rally top --cluster` shows the whole cluster instead, from the dashboard that
//! `rally_metrics::dashboard::serve` runs on any member.

mod top;

use clap::{Parser, Subcommand};

/// The `rally` command.
#[derive(Debug, Parser)]
#[command(name = "rally", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// A live view of a node's actors and dispatchers, worst first, and of a cluster member's
    /// virtual actors and membership (q or Esc quits).
    Top(TopArgs),
}

#[derive(Debug, clap::Args)]
struct TopArgs {
    /// The node's metrics endpoint (host:port of `rally::metrics::prometheus::serve`), or with
    /// `--cluster` the cluster dashboard's (of `rally::metrics::dashboard::serve`).
    #[arg(long, default_value = "127.0.0.1:9464")]
    endpoint: String,
    /// The whole cluster, as the dashboard at `--endpoint` gathers it from every member:
    /// members and their status, each member's dispatchers and hottest actors with the
    /// diagnosis, the virtual-actor kinds, and the cluster's calls per second.
    #[arg(long)]
    cluster: bool,
    /// Refresh interval in milliseconds.
    #[arg(long, default_value_t = 1000)]
    interval_ms: u64,
    /// Print one plain-text view and exit (for scripts and terminals without a TUI); its
    /// rates are over the node's last period.
    #[arg(long)]
    once: bool,
    /// The live view's rates (act/s, deact/s, membership packets and bytes per second) are
    /// the increase across the reports of the last this many seconds.
    #[arg(long, default_value_t = 10)]
    window_s: u64,
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Top(args) => top::run(&args),
    }
}
