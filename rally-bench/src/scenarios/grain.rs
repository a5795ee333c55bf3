//! Virtual-actor scenarios (defined in `docs/benchmarks.md`): `grain-ping`, the messaging test,
//! `activation`, the activation test (with the first message to a cold identity against the
//! second, warm one), and `grain-churn`, grain-ping load through a member join, a graceful
//! leave and a kill.
//!
//! Three processes on loopback TCP: this one is a client-only cluster member (it hosts no kind)
//! and starts two member processes (this executable again, `grain-member`) that host the kind
//! `ping`. The members share one SQLite file in a fresh temporary directory as their state
//! store, where every activation claims its identity. Each member also exposes a small stats
//! actor, through which the client reads the member's CPU time, resident bytes, active grains
//! and view of the cluster.

#[cfg(feature = "grains")]
mod churn;
#[cfg(feature = "grains")]
mod run;

use std::path::PathBuf;

use clap::Args;

use super::common::CommonArgs;

#[cfg(feature = "grains")]
pub(crate) use churn::grain_churn;
#[cfg(feature = "grains")]
pub(crate) use run::{activation, grain_ping, member_main};

/// `grain-ping` flags.
#[derive(Debug, Args)]
pub(crate) struct GrainPingArgs {
    #[command(flatten)]
    pub(crate) common: CommonArgs,
    /// Parallelism per row, comma separated (default 8,32,128,512; --quick 8,32).
    #[arg(long, value_delimiter = ',')]
    pub(crate) parallelism: Vec<usize>,
    /// Timed seconds per row (default 10; --quick 1).
    #[arg(long)]
    pub(crate) seconds: Option<f64>,
}

/// `activation` flags.
#[derive(Debug, Args)]
pub(crate) struct ActivationArgs {
    #[command(flatten)]
    pub(crate) common: CommonArgs,
    /// Activations per row, comma separated (default 100000,1000000; --quick 10000).
    #[arg(long, value_delimiter = ',')]
    pub(crate) activations: Vec<u64>,
    /// Parallel workers.
    #[arg(long, default_value_t = 64)]
    pub(crate) workers: usize,
    /// Activations of the one-worker row, run first, on the fresh cluster (default 2000;
    /// --quick 200; 0 leaves the row out).
    #[arg(long)]
    pub(crate) one_worker_activations: Option<u64>,
    /// Where the members claim identities: `sqlite` (the definition: one shared file) or
    /// `memory` (each member its own in-memory store; shows what the durable claim costs, and
    /// is sound here only because the two members' view never changes during a run).
    #[arg(long, value_enum, default_value_t = Store::Sqlite)]
    pub(crate) store: Store,
}

/// Where the member processes keep their claims and state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Store {
    /// One SQLite file in a fresh temporary directory, shared by the member processes.
    Sqlite,
    /// Each member process its own in-memory store.
    Memory,
}

/// `grain-churn` flags.
#[derive(Debug, Args)]
pub(crate) struct GrainChurnArgs {
    #[command(flatten)]
    pub(crate) common: CommonArgs,
    /// Request loops, each owning one grain.
    #[arg(long, default_value_t = 128)]
    pub(crate) parallelism: usize,
    /// Seconds between the start of the load, the join, the leave and the kill (default 10,
    /// twice the request timeout, so that a request an event makes time out ends in its
    /// window; --quick 1).
    #[arg(long)]
    pub(crate) phase_seconds: Option<f64>,
    /// Seconds of load after the kill (default 20; --quick 2).
    #[arg(long)]
    pub(crate) after_kill_seconds: Option<f64>,
}

/// `grain-member` flags (internal).
#[derive(Debug, Args)]
pub(crate) struct MemberArgs {
    /// The seed member's address; without it this member is the seed (it seeds itself).
    #[arg(long)]
    pub(crate) seed: Option<String>,
    /// The SQLite file the members share as their state store.
    #[arg(long)]
    pub(crate) db: PathBuf,
    /// The cap on active grains on this member (set above what the run activates).
    #[arg(long)]
    pub(crate) max_active: usize,
    /// The store: the shared SQLite file at `--db`, or one in this process's memory.
    #[arg(long, value_enum, default_value_t = Store::Sqlite)]
    pub(crate) store: Store,
}

/// Without the `grains` feature (left out of the default build to keep the main job's cold build
/// short), the grain scenarios say how to get it.
#[cfg(not(feature = "grains"))]
fn without_feature() -> anyhow::Error {
    anyhow::anyhow!(
        "the grain scenarios need rally-bench built with the `grains` feature: \
         cargo run --release -p rally-bench --features grains -- <scenario>"
    )
}

/// Runs `grain-ping` (needs the `grains` feature).
#[cfg(not(feature = "grains"))]
pub(crate) fn grain_ping(_: &GrainPingArgs) -> anyhow::Result<()> {
    Err(without_feature())
}

/// Runs `activation` (needs the `grains` feature).
#[cfg(not(feature = "grains"))]
pub(crate) fn activation(_: &ActivationArgs) -> anyhow::Result<()> {
    Err(without_feature())
}

/// Runs `grain-churn` (needs the `grains` feature).
#[cfg(not(feature = "grains"))]
pub(crate) fn grain_churn(_: &GrainChurnArgs) -> anyhow::Result<()> {
    Err(without_feature())
}

/// Runs a grain member (needs the `grains` feature).
#[cfg(not(feature = "grains"))]
pub(crate) fn member_main(_: &MemberArgs) -> anyhow::Result<()> {
    Err(without_feature())
}
