//! Cluster scenarios (defined in `docs/benchmarks.md`): `cluster-convergence`, how long members
//! take to agree after a join, a kill and a graceful leave, and what membership costs at rest;
//! and `failover`, from the SIGKILL of a member process until its virtual actor answers from
//! another member.
//!
//! `cluster-convergence` needs the `cluster` feature (Rally's cluster, no state store);
//! `failover` needs `grains` (virtual actors and the SQLite store the member processes share).

#[cfg(feature = "cluster")]
mod convergence;
#[cfg(feature = "grains")]
mod failover;
#[cfg(feature = "cluster")]
mod member;

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::common::CommonArgs;

#[cfg(feature = "cluster")]
pub(crate) use convergence::convergence;
#[cfg(feature = "grains")]
pub(crate) use failover::{failover, member_main};
#[cfg(feature = "cluster")]
pub(crate) use member::{ClientMember, join_echo_cluster};

/// `cluster-convergence` flags.
#[derive(Debug, Args)]
pub(crate) struct ConvergenceArgs {
    #[command(flatten)]
    pub(crate) common: CommonArgs,
    /// Member counts on real loopback sockets, comma separated (default 3,10,50; --quick 3,10).
    #[arg(long, value_delimiter = ',')]
    pub(crate) members: Vec<usize>,
    /// Member counts in the simulator, comma separated (default 200; --quick 50).
    #[arg(long, value_delimiter = ',')]
    pub(crate) sim_members: Vec<usize>,
    /// Repetitions of each count on real sockets, each on a fresh cluster (default 3; --quick 1).
    #[arg(long)]
    pub(crate) reps: Option<usize>,
    /// Repetitions of each simulated count, seeds 1, 2, … (default 1: 200 simulated members
    /// take minutes of wall time per repetition).
    #[arg(long, default_value_t = 1)]
    pub(crate) sim_reps: usize,
    /// Seconds at rest over which membership traffic is measured (default 10; --quick 1).
    #[arg(long)]
    pub(crate) rest_seconds: Option<f64>,
}

/// The cluster settings a `failover` row runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum FailoverSetting {
    /// Every setting at its default.
    Default,
    /// `stable-after` (and so `down-all-when-unstable`) 1 s; the rest default.
    StableAfter1s,
    /// `stable-after` 1 s, probe period 100 ms (probe-rtt 50 ms), deactivation timeout 500 ms.
    Fast,
}

/// `failover` flags.
#[derive(Debug, Args)]
pub(crate) struct FailoverArgs {
    #[command(flatten)]
    pub(crate) common: CommonArgs,
    /// Settings to run, one row each, comma separated (default: all three; --quick fast).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub(crate) settings: Vec<FailoverSetting>,
    /// Repetitions per setting, each on fresh member processes (default 5; --quick 1).
    #[arg(long)]
    pub(crate) reps: Option<usize>,
}

/// `failover-member` flags (internal).
#[derive(Debug, Args)]
pub(crate) struct FailoverMemberArgs {
    /// The seed member's address; without it this member founds the cluster.
    #[arg(long)]
    pub(crate) seed: Option<String>,
    /// The SQLite file the members share as their state store.
    #[arg(long)]
    pub(crate) db: PathBuf,
    /// The settings of the run.
    #[arg(long, value_enum)]
    pub(crate) setting: FailoverSetting,
}

/// Without the feature a scenario needs (left out of the default build to keep the main job's
/// cold build short), it says how to get it.
#[cfg(not(all(feature = "cluster", feature = "grains")))]
fn without(feature: &str, scenario: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "{scenario} needs rally-bench built with the `{feature}` feature: \
         cargo run --release -p rally-bench --features {feature} -- {scenario}"
    )
}

/// Runs `cluster-convergence` (needs the `cluster` feature).
#[cfg(not(feature = "cluster"))]
pub(crate) fn convergence(_: &ConvergenceArgs) -> anyhow::Result<()> {
    Err(without("cluster", "cluster-convergence"))
}

/// Runs `failover` (needs the `grains` feature).
#[cfg(not(feature = "grains"))]
pub(crate) fn failover(_: &FailoverArgs) -> anyhow::Result<()> {
    Err(without("grains", "failover"))
}

/// Runs a failover member (needs the `grains` feature).
#[cfg(not(feature = "grains"))]
pub(crate) fn member_main(_: &FailoverMemberArgs) -> anyhow::Result<()> {
    Err(without("grains", "failover"))
}
