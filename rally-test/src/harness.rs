//! Tests whose binary is also their own child process (feature `harness`).
//!
//! A multi-process test re-runs its own binary as the other processes. With the built-in test
//! harness the child's entry point has to be a `#[test]` of its own, which passes vacuously in
//! every normal run. Instead, the test target sets `harness = false`, and its `main` runs the
//! child when told to (an environment variable) and the tests otherwise, through
//! [`run`] and [`trial`]: the same command line, output and exit code as the built-in harness
//! (libtest-mimic).
//!
//! # Example
//!
//! ```no_run
//! // tests/two_processes.rs, with `[[test]] name = "two_processes" harness = false`
//! use rally_test::harness::{run, trial};
//!
//! async fn the_child_answers() { /* spawn std::env::current_exe() with CHILD set … */ }
//!
//! fn main() -> std::process::ExitCode {
//!     if std::env::var("CHILD").is_ok() {
//!         // The child's own work.
//!         return std::process::ExitCode::SUCCESS;
//!     }
//!     run(vec![trial("the_child_answers", the_child_answers)])
//! }
//! ```

use std::process::ExitCode;

pub use libtest_mimic::Trial;

/// A test: `body` on a multi-thread tokio runtime of its own with two workers, as
/// `#[tokio::test(flavor = "multi_thread", worker_threads = 2)]` runs it.
///
/// # Panics
///
/// The trial fails (it does not panic the harness) when `body` panics.
pub fn trial<F>(name: &str, body: fn() -> F) -> Trial
where
    F: Future<Output = ()> + 'static,
{
    Trial::test(name, move || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime builds unless the process is out of resources")
            .block_on(body());
        Ok(())
    })
}

/// Runs `trials` as the built-in harness would, with this process's command line (filters,
/// `--ignored`, `--test-threads`, …).
pub fn run(trials: Vec<Trial>) -> ExitCode {
    libtest_mimic::run(&libtest_mimic::Arguments::from_args(), trials).exit_code()
}
