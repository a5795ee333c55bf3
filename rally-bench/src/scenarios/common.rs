//! Flags and helpers every scenario shares.

use std::time::Duration;

use clap::Args;

/// Flags every scenario accepts.
#[derive(Debug, Clone, Args)]
pub struct CommonArgs {
    /// A smoke run of a few seconds (for CI); figures are not meaningful.
    #[arg(long)]
    pub quick: bool,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// A multi-threaded runtime with one worker per core (the default dispatcher).
pub fn multi_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("building a tokio runtime only fails when the process is out of resources")
}

/// A current-thread runtime.
pub fn current_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("building a tokio runtime only fails when the process is out of resources")
}

/// Microseconds as a float, for report fields.
pub fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Resident set size of this process, in bytes (Linux `/proc/self/statm`).
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// Runs `future` as a task on one of the runtime's workers (not on the calling thread), so that
/// it behaves like code inside an actor: wake-ups stay on the worker instead of crossing to a
/// thread outside the pool.
pub fn on_worker<F>(runtime: &tokio::runtime::Runtime, future: F) -> F::Output
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    runtime.block_on(async {
        tokio::spawn(future)
            .await
            .expect("the benchmark task does not panic")
    })
}

/// Waits until `intended`, for senders paced at a fixed rate: sleeps while more than 2 ms remain
/// (tokio's timer ticks in milliseconds), then yields until the moment, so the message leaves on
/// time (lateness counts against the measurement) and the worker's other tasks (replies,
/// writers) still run meanwhile. Yielding rather than spinning also leaves the core to the other
/// process on a small machine.
pub async fn pace_until(intended: std::time::Instant) {
    let now = std::time::Instant::now();
    if intended <= now {
        return;
    }
    let wait = intended - now;
    if wait > Duration::from_micros(2_000) {
        tokio::time::sleep(wait - Duration::from_micros(1_500)).await;
    }
    while std::time::Instant::now() < intended {
        tokio::task::yield_now().await;
    }
}

/// Starts this executable again as a child running `args` (an internal server subcommand),
/// waits at most 20 s for its `LISTENING <where>` line and returns the child (killed when
/// dropped; it also ends when its stdin closes) and `<where>`.
pub async fn spawn_listening_child(
    args: &[&std::ffi::OsStr],
) -> anyhow::Result<(tokio::process::Child, String)> {
    use anyhow::Context as _;
    use tokio::io::AsyncBufReadExt;

    let exe = std::env::current_exe().context("finding this executable")?;
    let mut child = tokio::process::Command::new(exe)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("starting the child process")?;
    let stdout = child.stdout.take().context("child stdout")?;
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .context("the child did not start within 20 s")??
        .context("the child exited before listening")?;
    let place = line
        .strip_prefix("LISTENING ")
        .with_context(|| format!("unexpected line from the child: {line}"))?;
    Ok((child, place.to_owned()))
}
