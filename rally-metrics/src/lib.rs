//! Rally's observer: it reads the runtime's monitoring counters and turns them into figures per
//! period, a diagnosis in plain words, and a Prometheus endpoint. Nothing depends on it; the
//! runtime only counts (see `rally::monitor`).
//!
//! # Example
//!
//! ```
//! use rally::{Actor, ActorSystem, Props};
//! use rally::metrics::Recorder;
//!
//! struct Idle;
//! impl Actor for Idle {}
//!
//! # #[tokio::main] async fn main() {
//! let system = ActorSystem::new("doc");
//! system.spawn(Props::new(Idle).named("idle").monitored(true)).unwrap();
//! let mut recorder = Recorder::new(&system);
//! let report = recorder.period();
//! assert_eq!(report.actors[0].path, "/user/idle");
//! assert_eq!(report.actors[0].diagnosis.verdict, rally::metrics::Verdict::Healthy);
//! system.shutdown().await.unwrap();
//! # }
//! ```
//!
//! # Modules
//!
//! - [`Recorder`], [`PeriodReport`]: figures per period from two snapshots
//! - [`Diagnosis`], [`Verdict`]: saturated, starved for threads, blocking its dispatcher, healthy
//! - [`FigurePeriod`]: figures of other parts of Rally (cluster membership, virtual actors) that
//!   register a `rally::monitor::FigureSource`, with their rates
//! - [`prometheus`]: the text exposition format and a small HTTP endpoint serving it
//! - [`dashboard`]: the cluster dashboard, a web page any member serves, gathering from every
//!   member (its server needs the `cluster` feature)

#![doc(test(attr(deny(warnings), allow(dead_code, unused_variables))))]

pub mod dashboard;
pub mod prometheus;
mod report;

pub use report::{
    ActorPeriod, Diagnosis, DispatcherPeriod, FigurePeriod, PeriodReport, Recorder, Verdict,
    spawn_periodic,
};
