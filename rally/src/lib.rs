//! Rally: a distributed actor runtime for Rust.
//!
//! Actors own their state and talk only by messages, in one process or across machines. An
//! [`ActorRef<A>`] is the same type whether the actor is local or on another node; `tell`
//! never blocks, `ask` returns the typed reply or a typed error within a timeout.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use rally::prelude::*;
//!
//! struct Greeter;
//! impl Actor for Greeter {}
//!
//! struct Greet(String);
//! impl Message for Greet {
//!     type Reply = String;
//! }
//!
//! impl Handler<Greet> for Greeter {
//!     async fn handle(&mut self, msg: Greet, _ctx: &mut Context<Self>) -> ActorResult<String> {
//!         Ok(format!("Hello {}", msg.0))
//!     }
//! }
//!
//! # #[tokio::main] async fn main() {
//! let system = ActorSystem::new("example");
//! let greeter = system.spawn(Greeter).unwrap();
//! let reply = greeter.ask(Greet("Rally".into()), Duration::from_secs(1)).await;
//! assert_eq!(reply.unwrap(), "Hello Rally");
//! system.shutdown().await.unwrap();
//! # }
//! ```
//!
//! # Crate tour
//!
//! | crate | what | here as |
//! |---|---|---|
//! | `rally-actor` | local runtime: actors, refs, mailboxes, supervision, watch, timers | the root |
//! | `rally-remote` | nodes, remote refs, batching transport | [`remote`] (feature `remote`) |
//! | `rally-wire` | the wire protocol, no I/O | used by `rally-remote` |
//! | `rally-metrics` | period reports, the diagnosis, the `/metrics` endpoint | `rally::metrics` (feature `metrics`) |
//! | `rally-cluster` | membership, member events, downing, the cluster singleton, virtual actors | `rally::cluster` (feature `cluster`) |
//! | `rally-state` | state stores for virtual actors: in memory, SQLite, PostgreSQL | `rally::state` (feature `state`) |
//! | `rally-otel` | OpenTelemetry tracing: the call filter that makes spans, the OTLP exporter | `rally::otel` (feature `otel`) |
//! | `rally-test` | probes, paused time, the multi-node simulation | `rally::sim` (feature `sim`); the rest a dev-dependency of yours |
//!
//! # Features
//!
//! | feature | default | adds |
//! |---|---|---|
//! | `remote` | yes | [`remote`]: [`remote::RemoteNode`] and friends |
//! | `monitoring` | yes | the counters behind [`monitor`]; off, they compile to a no-op |
//! | `toml` | yes | [`SystemConfig::from_toml`] and `from_file` |
//! | `metrics` | no | `rally::metrics`: the period recorder, the diagnosis and the HTTP endpoint `rally top` reads; with `cluster`, the cluster dashboard (`rally::metrics::dashboard`) |
//! | `cluster` | no | `rally::cluster`: membership, member events, downing, the cluster singleton and virtual actors (turns on `remote`) |
//! | `etcd` | no | the etcd membership provider with lease-based downing, `rally::cluster::provider::EtcdProvider` (turns on `cluster`; building it needs `protoc`) |
//! | `state` | no | `rally::state`: state stores for virtual actors, in memory and in one SQLite file (bundled SQLite, built from C) |
//! | `state-postgres` | no | `rally::state::PostgresStore`, for members on many machines (turns on `state`) |
//! | `sim` | no | `rally::sim`: N nodes in one process on simulated time and network, for tests (turns on `cluster`) |
//! | `otel` | no | `rally::otel`: OpenTelemetry tracing, every hop a span, exported over OTLP/gRPC |
//!
//! # Logs
//!
//! Rally logs through [`tracing`](https://docs.rs/tracing): install any subscriber, e.g.
//! `tracing_subscriber::fmt::init();` at the start of `main`, to see them.

#![doc(test(attr(deny(warnings), allow(dead_code, unused_variables))))]

pub use rally_actor::{
    Actor, ActorError, ActorId, ActorRef, ActorResult, ActorSystem, AskError, Backoff, Context,
    DEFAULT_CORE_POOL_SIZE, DEFAULT_KEEP_ALIVE, DEFAULT_MAX_POOL_SIZE, DEFAULT_PARALLELISM_FACTOR,
    DEFAULT_PARALLELISM_MAX, DEFAULT_PARALLELISM_MIN, DEFAULT_QUEUE_SIZE, DEFAULT_THROUGHPUT,
    DeadLetter, DeadLetterReason, DeadLetters, DeliveryError, Directive, Dispatcher, Envelope,
    ErasedReply, EventStream, ExternalTarget, Failure, Handler, LookupError, MailboxConfig,
    Message, Origin, Overflow, Props, Recipient, ReplyError, ReplySink, ReplyTo, Scope, SendError,
    ShutdownError, SpawnError, SupervisorStrategy, SystemConfig, Terminated, Termination,
    TerminationReason, TerminationSink, TimerId, Undelivered, WeakActorRef,
};
pub use rally_actor::{
    BalancingPool, CatchPanic, DispatcherConfig, DispatcherError, DispatcherKind, Monitor,
    MonitoringConfig, Pool, PoolStatus, Resizer, Router, Routing, SystemConfigBuilder,
    SystemConfigError, catch_panic, config_text, hold, monitor, sync,
};
pub use rally_actor::{
    CallFilter, ContextError, EntryFilters, Incoming, Kept, MAX_CONTEXT_BYTES, MAX_CONTEXT_ENTRIES,
    MAX_CONTEXT_KEY_LEN, Outcome, Outgoing, Rejection, RequestContext, Sees, TraceParent,
};

/// Actors on other nodes: [`RemoteNode`](remote::RemoteNode), registration of remote message
/// types, transports.
#[cfg(feature = "remote")]
pub mod remote {
    pub use rally_remote::*;
    /// Types that appear in [`RemoteConfig`]'s fields and in address parsing.
    pub use rally_wire::{AddressParseError, InvalidPhiAccrualConfig, PhiAccrualConfig};
}

/// Monitoring reports: the period [`Recorder`](metrics::Recorder), the diagnosis that names the
/// bottleneck, the HTTP endpoint (`/metrics`, `/report`) that `rally top` reads, and (with
/// `cluster`) the cluster dashboard ([`dashboard::serve`](metrics::dashboard)).
#[cfg(feature = "metrics")]
pub mod metrics {
    pub use rally_metrics::*;
}

/// Cluster membership on top of remoting: members, their events, failure detection and
/// downing ([`Cluster`](cluster::Cluster), [`ClusterConfig`](cluster::ClusterConfig)).
#[cfg(feature = "cluster")]
pub mod cluster {
    pub use rally_cluster::*;
}

/// State stores for virtual actors, with writes fenced by the ownership epoch
/// ([`StateStore`](state::StateStore); in-memory, SQLite, and PostgreSQL with `state-postgres`).
#[cfg(feature = "state")]
pub mod state {
    pub use rally_state::*;
}

/// Many nodes in one process on simulated time and a simulated network, for tests:
/// partitions, delays and crashes reproducible from a seed
/// ([`HostSimulation`](sim::HostSimulation), [`SimTransport`](sim::SimTransport)).
#[cfg(feature = "sim")]
pub mod sim {
    pub use rally_test::sim::*;
}

/// OpenTelemetry tracing: every hop of a message (send, mailbox wait, handler) a span, linked
/// into one trace across actors, members and virtual actors, exported over OTLP/gRPC
/// ([`Tracing`](otel::Tracing)).
#[cfg(feature = "otel")]
pub mod otel {
    pub use rally_otel::*;
}

/// The names most actor code needs.
pub mod prelude {
    pub use rally_actor::prelude::*;

    #[cfg(feature = "remote")]
    pub use rally_remote::{MessageTable, RemoteActor, RemoteContext, RemoteMessage, RemoteNode};

    #[cfg(feature = "cluster")]
    pub use rally_cluster::{Cluster, ClusterConfig, MemberEvent, MemberStatus};
}

/// The README's examples, compiled as doc tests so they stay true (the virtual-actor example
/// needs the features the README's `[dependencies]` line turns on).
#[doc = include_str!("../../README.md")]
#[cfg(all(doctest, feature = "cluster", feature = "state"))]
pub struct ReadmeDoctests;

/// The examples of `docs/cluster.md`, compiled as doc tests so they stay true.
#[doc = include_str!("../../docs/cluster.md")]
#[cfg(all(doctest, feature = "cluster", feature = "state"))]
pub struct ClusterGuideDoctests;

/// The examples of `docs/observability.md` (tracing, the cluster dashboard, what is active),
/// compiled as doc tests so they stay true.
#[doc = include_str!("../../docs/observability.md")]
#[cfg(all(doctest, feature = "cluster", feature = "metrics", feature = "otel"))]
pub struct ObservabilityDoctests;

/// The example of `docs/testing.md` (a partition test on the simulation), compiled and run as
/// a doc test so it stays true.
#[doc = include_str!("../../docs/testing.md")]
#[cfg(all(doctest, feature = "sim"))]
pub struct TestingGuideDoctests;

/// The examples of `docs/configuration.md`, compiled as doc tests so they stay true.
#[doc = include_str!("../../docs/configuration.md")]
#[cfg(all(doctest, feature = "remote"))]
pub struct ConfigurationDoctests;
