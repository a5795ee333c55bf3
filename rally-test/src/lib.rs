//! Test kit for Rally actors.
//!
//! - [`Probe`]: an actor that records the messages it receives, with [`Probe::expect_msg`] and
//!   [`Probe::expect_no_msg`] bounded by timeouts, so a test never hangs.
//! - [`paused_runtime`]: a single-thread tokio runtime whose clock only moves when every task
//!   is idle (or when told), so timer tests take no real time and are deterministic.
//! - [`eventually`]: the one bounded poll for a condition no event announces, with a failure
//!   message that says what did not happen and why.
//! - `harness` (feature `harness`): multi-process tests whose binary is also their child
//!   process, without a vacuous `#[test]` for the child.
//! - `otlp` (feature `otlp`): a real OTLP/gRPC trace receiver on loopback, to check the spans
//!   `rally::otel` exports.
//! - `sim` (feature `sim`, `rally::sim` in the facade): many nodes in one process on
//!   simulated time and a simulated network, partitions, delays and crashes reproducible from
//!   a seed.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use rally::{ActorSystem, Message};
//! use rally_test::Probe;
//!
//! #[derive(Debug, PartialEq)]
//! struct Hello;
//! impl Message for Hello { type Reply = (); }
//!
//! rally_test::paused_runtime().block_on(async {
//!     let system = ActorSystem::new("test");
//!     let mut probe = Probe::<Hello>::spawn(&system);
//!     probe.actor().tell(Hello).unwrap();
//!     assert_eq!(probe.expect_msg(Duration::from_secs(1)).await.unwrap(), Hello);
//!     probe.expect_no_msg(Duration::from_millis(100)).await.unwrap();
//! });
//! ```

#![doc(test(attr(deny(warnings), allow(dead_code, unused_variables))))]

mod eventually;
#[cfg(feature = "harness")]
pub mod harness;
#[cfg(feature = "otlp")]
pub mod otlp;
mod probe;
#[cfg(feature = "sim")]
pub mod sim;

pub use eventually::{Settled, eventually};
pub use probe::{ExpectError, Probe, ProbeActor};

/// A current-thread tokio runtime with the clock paused: `sleep`s complete as soon as every
/// task is idle, in virtual time.
///
/// # Panics
///
/// If the runtime cannot be built (out of resources).
pub fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime builds unless the process is out of resources")
}
