//! `rally-bench`: the benchmark scenarios defined in `docs/benchmarks.md`, each printing a plain
//! table or, with `--json`, one JSON object in the shared format (see [`report`]).

mod compare;
mod report;
mod scale;
mod scenarios;

use clap::{Parser, Subcommand};

/// mimalloc, as a production Rust service would use: the actor layer allocates an envelope per
/// message, and glibc's allocator showed up at ~14% of remote-ping-pong profiles. Go and the
/// JVM, the peers, bring their own tuned allocators.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use scenarios::{cluster, dispatcher, grain, local, otel, raw_echo, remote};

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
    /// A receiver starved by blocking workers, and the two fixes.
    DispatcherStarvation(dispatcher::StarvationArgs),
    /// Total time of 40 actors on 4 threads per `throughput` setting.
    DispatcherThroughput(dispatcher::ThroughputArgs),
    /// 3 actors on 2 threads: total time per `throughput`, with and without a deadline.
    DispatcherFairness(dispatcher::FairnessArgs),
    /// The Akka.NET RemotePingPong between two nodes (the main benchmark).
    RemotePingPong(remote::PingPongArgs),
    /// One-way flood of 100 B, 1 KiB and 10 KiB messages to another node.
    MaxThroughput(remote::MaxThroughputArgs),
    /// Round trips at fixed offered rates, from the intended send time.
    Latency(remote::LatencyArgs),
    /// The limit: the same frames echoed over one TCP connection with no actors.
    RawEcho(raw_echo::RawEchoArgs),
    /// Virtual actors: closed request loops to P grains hosted by 2 member processes.
    GrainPing(grain::GrainPingArgs),
    /// Virtual actors: N fresh identities activated by 64 workers; rate and bytes per actor.
    Activation(grain::ActivationArgs),
    /// Virtual actors: grain-ping load at P = 128 through a member join, a leave and a kill.
    GrainChurn(grain::GrainChurnArgs),
    /// Cluster: time for members to agree after a join, a kill and a leave; traffic at rest.
    ClusterConvergence(cluster::ConvergenceArgs),
    /// Cluster: SIGKILL of 1 of 3 member processes until its virtual actor answers elsewhere.
    Failover(cluster::FailoverArgs),
    /// Runs a scenario on Rally and on peer frameworks, alternately, and prints ratios.
    Compare(compare::CompareArgs),
    /// Runs the remote scenarios on Rally and peers pinned to 2, 4, 8, 16… cores: one table.
    Scale(scale::ScaleArgs),
    /// An OTLP/gRPC trace receiver that counts spans, for runs with `RALLY_BENCH_OTEL=1`
    /// (feature `otel`; stops when stdin closes).
    OtlpSink(otel::SinkArgs),
    /// Internal: node B of the remote scenarios, in a child process.
    #[command(hide = true)]
    RemoteEchoNode(remote::EchoNodeArgs),
    /// Internal: the raw echo server, in a child process.
    #[command(hide = true)]
    RawEchoServer(raw_echo::ServerArgs),
    /// Internal: a member hosting the virtual-actor kind of the grain scenarios.
    #[command(hide = true)]
    GrainMember(grain::MemberArgs),
    /// Internal: a member process of the failover scenario.
    #[command(hide = true)]
    FailoverMember(cluster::FailoverMemberArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.scenario {
        Scenario::LocalPingPong(args) => local::ping_pong(&args),
        Scenario::LocalThroughput(args) => local::throughput(&args),
        Scenario::Spawn(args) => local::spawn(&args),
        Scenario::AskLatency(args) => local::ask_latency(&args),
        Scenario::DispatcherStarvation(args) => dispatcher::starvation(&args),
        Scenario::DispatcherThroughput(args) => dispatcher::throughput(&args),
        Scenario::DispatcherFairness(args) => dispatcher::fairness(&args),
        Scenario::RemotePingPong(args) => remote::ping_pong(&args),
        Scenario::MaxThroughput(args) => remote::max_throughput(&args),
        Scenario::Latency(args) => remote::latency(&args),
        Scenario::RawEcho(args) => raw_echo::raw_echo(&args),
        Scenario::GrainPing(args) => grain::grain_ping(&args),
        Scenario::Activation(args) => grain::activation(&args),
        Scenario::GrainChurn(args) => grain::grain_churn(&args),
        Scenario::ClusterConvergence(args) => cluster::convergence(&args),
        Scenario::Failover(args) => cluster::failover(&args),
        Scenario::Compare(args) => compare::run(&args),
        Scenario::Scale(args) => scale::run(&args),
        Scenario::OtlpSink(args) => otel::sink(&args),
        Scenario::RemoteEchoNode(args) => remote::echo_node_main(&args),
        Scenario::RawEchoServer(args) => raw_echo::server_main(&args),
        Scenario::GrainMember(args) => grain::member_main(&args),
        Scenario::FailoverMember(args) => cluster::member_main(&args),
    }
}
