//! Flags and helpers every scenario shares.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use clap::Args;

/// Flags every scenario accepts.
#[derive(Debug, Clone, Args)]
pub(crate) struct CommonArgs {
    /// A smoke run of a few seconds (for CI); figures are not meaningful.
    #[arg(long)]
    pub quick: bool,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// A multi-threaded runtime with one worker per core (the default dispatcher).
pub(crate) fn multi_thread_runtime() -> tokio::runtime::Runtime {
    Workers::default().runtime()
}

/// `--workers N`: the worker threads of a process's tokio runtime. A scenario with a child
/// process passes the same flag to it.
#[derive(Debug, Clone, Copy, Default, Args)]
pub(crate) struct Workers {
    /// Worker threads of each process's tokio runtime (default: one per core). The remote
    /// scenarios' two nodes share this machine's cores: `--workers 1` on 2 cores gives each
    /// node one, as if each had a core of its own.
    #[arg(long = "workers", value_parser = clap::value_parser!(u16).range(1..))]
    count: Option<u16>,
}

impl Workers {
    /// A multi-threaded runtime with this many workers.
    pub(crate) fn runtime(self) -> tokio::runtime::Runtime {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        if let Some(count) = self.count {
            builder.worker_threads(usize::from(count));
        }
        builder
            .enable_all()
            .build()
            .expect("building a tokio runtime only fails when the process is out of resources")
    }

    /// The flag again, for a child process (nothing when not set).
    pub(crate) fn flag(self) -> Vec<std::ffi::OsString> {
        self.count
            .map(|n| vec!["--workers".into(), n.to_string().into()])
            .unwrap_or_default()
    }

    /// The report's `workers_per_process`: the count, or `"one per core"`.
    pub(crate) fn param(self) -> serde_json::Value {
        self.count.map_or_else(|| "one per core".into(), Into::into)
    }
}

/// A current-thread runtime.
pub(crate) fn current_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("building a tokio runtime only fails when the process is out of resources")
}

/// Microseconds as a float, for report fields.
pub(crate) fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Resident set size of this process, in bytes (Linux `/proc/self/statm`).
pub(crate) fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// Runs `future` as a task on one of the runtime's workers (not on the calling thread), so that
/// it behaves like code inside an actor: wake-ups stay on the worker instead of crossing to a
/// thread outside the pool.
pub(crate) fn on_worker<F>(runtime: &tokio::runtime::Runtime, future: F) -> F::Output
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

/// A fixed-rate schedule kept by its own OS thread: `tick(i, intended)` is called at each
/// intended send time `start + i × interval`, for `i` in `0..total`.
///
/// The thread sleeps between ticks with a timer slack of 1 µs (Linux's default of 50 µs would
/// make every tick late by that much), so no runtime worker spins waiting for the moment and the
/// cores stay free for the system under test, as with the peers' sleeping pacers. A late wake-up
/// is not hidden: callers time each round trip from `intended`, so it counts against the
/// measurement (no coordinated omission).
pub(crate) fn pace<T, F>(
    start: Instant,
    interval: Duration,
    total: u64,
    mut tick: F,
) -> JoinHandle<Vec<T>>
where
    T: Send + 'static,
    F: FnMut(u64, Instant) -> T + Send + 'static,
{
    std::thread::Builder::new()
        .name("pacer".into())
        .spawn(move || {
            // Best effort: without it ticks are up to 50 µs late, which the figures then show.
            let _ = nix::sys::prctl::set_timerslack(1_000);
            let mut out = Vec::with_capacity(usize::try_from(total).unwrap_or(0));
            for i in 0..total {
                let intended = start + interval.mul_f64(i as f64);
                let now = Instant::now();
                if intended > now {
                    std::thread::sleep(intended - now);
                }
                out.push(tick(i, intended));
            }
            out
        })
        .expect("a thread can be started")
}

/// Member processes sharing a store file in a fresh temporary directory: killed, and the
/// directory removed, when dropped.
#[cfg(feature = "grains")]
pub(crate) struct MemberProcesses {
    dir: std::path::PathBuf,
    /// In start order; the first is the seed of the others.
    pub(crate) children: Vec<tokio::process::Child>,
    /// Their addresses, in the same order.
    pub(crate) addresses: Vec<rally::remote::NodeAddress>,
}

#[cfg(feature = "grains")]
impl MemberProcesses {
    /// The store file the members share (a member started later joins with it too).
    pub(crate) fn store_file(&self) -> std::path::PathBuf {
        self.dir.join("store.db")
    }
}

#[cfg(feature = "grains")]
impl Drop for MemberProcesses {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.start_kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts `n` member processes (this executable again: `subcommand --db <file>` and `extra`)
/// sharing a store file in a fresh directory named after `name`, the first the seed of the
/// others (`--seed <its address>`).
#[cfg(feature = "grains")]
pub(crate) async fn spawn_members(
    subcommand: &str,
    n: usize,
    name: &str,
    extra: &[&std::ffi::OsStr],
) -> anyhow::Result<MemberProcesses> {
    use anyhow::Context as _;
    use std::ffi::OsStr;

    let dir = std::env::temp_dir().join(format!("rally-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut members = MemberProcesses {
        dir,
        children: Vec::with_capacity(n),
        addresses: Vec::with_capacity(n),
    };
    let db = members.store_file();
    for i in 0..n {
        let mut args: Vec<&OsStr> =
            vec![OsStr::new(subcommand), OsStr::new("--db"), db.as_os_str()];
        args.extend_from_slice(extra);
        let seed = members.addresses.first().map(ToString::to_string);
        if let Some(seed) = &seed {
            args.extend([OsStr::new("--seed"), OsStr::new(seed)]);
        }
        let (child, address) = spawn_listening_child(&args)
            .await
            .with_context(|| format!("starting member {i}"))?;
        members.children.push(child);
        members
            .addresses
            .push(address.parse().map_err(|e| anyhow::anyhow!("{e:?}"))?);
    }
    Ok(members)
}

/// Starts this executable again as a child running `args` (an internal server subcommand),
/// waits at most 20 s for its `LISTENING <where>` line and returns the child (killed when
/// dropped; it also ends when its stdin closes) and `<where>`.
pub(crate) async fn spawn_listening_child(
    args: &[&std::ffi::OsStr],
) -> anyhow::Result<(tokio::process::Child, String)> {
    let (child, place, _) = spawn_talking_child(args).await?;
    Ok((child, place))
}

/// The rest of a child's standard output, line by line, after its `LISTENING` line.
pub(crate) type ChildLines = tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>;

/// [`spawn_listening_child`], keeping the child's standard output for what it prints next.
pub(crate) async fn spawn_talking_child(
    args: &[&std::ffi::OsStr],
) -> anyhow::Result<(tokio::process::Child, String, ChildLines)> {
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
    Ok((child, place.to_owned(), lines))
}
