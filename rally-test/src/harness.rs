//! Tests whose binary is also their own child process (feature `harness`).
//!
//! A multi-process test re-runs its own binary as the other processes. With the built-in test
//! harness the child's entry point has to be a `#[test]` of its own, which passes vacuously in
//! every normal run. Instead, the test target sets `harness = false`, and its `main` runs the
//! child when told to (an environment variable) and the tests otherwise, through
//! [`run`] and [`trial`]: the same command line, output and exit code as the built-in harness
//! (libtest-mimic).
//!
//! The two sides talk by lines: the child reads commands with [`commands`] and reports facts
//! with [`say`] (`@@ <CLOCK_MONOTONIC ns> WORD args…` on stdout); the test starts it as a
//! [`Child`], sends it commands and waits for its [`Fact`]s. The instants of all processes are
//! on one clock, so a test can order what several of them did.
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
use std::sync::Arc;

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

/// One fact a child process reported: a line `@@ <mono-ns> <WORD> <args…>` on its stdout
/// (see [`say`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fact {
    /// Which process (its name in the test).
    pub from: String,
    /// `CLOCK_MONOTONIC` in the process when it said it: one clock for every process and
    /// network namespace of the machine, so facts of several processes can be ordered.
    pub at: u64,
    /// The fact's first word.
    pub word: String,
    /// The words after it.
    pub args: Vec<String>,
}

impl Fact {
    /// Whether this is `word` with `args` as its first arguments.
    pub fn is(&self, word: &str, args: &[&str]) -> bool {
        self.word == word && self.args.iter().zip(args).all(|(a, b)| a == b)
    }
}

/// `CLOCK_MONOTONIC` now, in nanoseconds.
///
/// # Panics
///
/// If the clock cannot be read (it always can on Linux).
pub fn mono_ns() -> u64 {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .expect("CLOCK_MONOTONIC reads");
    u64::try_from(now.tv_sec()).expect("after boot") * 1_000_000_000
        + u64::try_from(now.tv_nsec()).expect("within a second")
}

/// Said by a child process: `@@ <mono-ns> <line>` on stdout, which its [`Child`] reads as a
/// [`Fact`]. Lines without `@@ ` are not facts (libtest may print before the first one).
pub fn say(line: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "@@ {} {line}", mono_ns());
    let _ = out.flush();
}

/// The command lines a child process reads on its stdin (from [`Child::send`]), read on a
/// thread of their own; the stream ends when stdin closes.
pub fn commands() -> tokio::sync::mpsc::UnboundedReceiver<String> {
    use std::io::BufRead as _;
    let (tx, commands) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    commands
}

/// Port numbers free now (the kernel's choice; released before the children bind them).
///
/// # Panics
///
/// If loopback has no free port.
pub fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("a free port"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("bound").port())
        .collect()
}

/// A child process started by a test: the facts it [`say`]s are read as they come, it reads
/// commands on stdin, and it is killed when dropped (passing or not, no child outlives its
/// test).
#[derive(Debug)]
pub struct Child {
    /// Its name in the test (in panics and in each [`Fact::from`]).
    pub name: String,
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    facts: tokio::sync::mpsc::UnboundedReceiver<Fact>,
    /// Every fact read so far, in order of arrival.
    pub seen: Vec<Fact>,
    /// Its last lines on stderr (its logs, a panic), for the message of a failed wait.
    stderr: Arc<std::sync::Mutex<std::collections::VecDeque<String>>>,
    /// Closed once its stderr has ended (read to its end).
    stderr_ended: std::sync::mpsc::Receiver<()>,
}

/// Lines of a child's stderr kept for a failed wait's message.
const STDERR_KEPT: usize = 40;

impl Child {
    /// Starts `command` with piped stdin, stdout and stderr. Its stderr is passed on to this
    /// process's, and its last lines are kept for the message of a failed wait.
    ///
    /// # Panics
    ///
    /// If the process cannot be started.
    pub fn spawn(name: &str, mut command: std::process::Command) -> Self {
        use std::io::BufRead as _;
        let mut child = command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{name}: the process starts: {e}"));
        let stderr = Arc::new(std::sync::Mutex::new(std::collections::VecDeque::new()));
        let kept = Arc::clone(&stderr);
        let errors = child.stderr.take().expect("piped");
        let (ended, stderr_ended) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            let _ended = ended;
            for line in std::io::BufReader::new(errors).lines() {
                let Ok(line) = line else { break };
                eprintln!("{line}");
                let mut kept = kept
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if kept.len() == STDERR_KEPT {
                    kept.pop_front();
                }
                kept.push_back(line);
            }
        });
        let stdout = child.stdout.take().expect("piped");
        let (tx, facts) = tokio::sync::mpsc::unbounded_channel();
        let from = name.to_owned();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let Some(fact) = parse(&from, &line) else {
                    continue;
                };
                if tx.send(fact).is_err() {
                    break;
                }
            }
        });
        Self {
            name: name.to_owned(),
            stdin: child.stdin.take(),
            child,
            facts,
            seen: Vec::new(),
            stderr,
            stderr_ended,
        }
    }

    /// Sends one command line to its stdin.
    ///
    /// # Panics
    ///
    /// If the process no longer reads it.
    pub fn send(&mut self, command: &str) {
        use std::io::Write as _;
        let stdin = self.stdin.as_mut().expect("stdin is open");
        writeln!(stdin, "{command}")
            .and_then(|()| stdin.flush())
            .unwrap_or_else(|e| panic!("{}: reads its commands: {e}", self.name));
    }

    /// Waits at most `within` for the next fact matching `wanted` (those before it are kept in
    /// [`seen`](Self::seen)).
    ///
    /// # Panics
    ///
    /// When none comes within `within`, or the process exits first, with its last facts.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a fact read is kept in `seen`.
    pub async fn expect(
        &mut self,
        what: &str,
        within: std::time::Duration,
        wanted: impl Fn(&Fact) -> bool,
    ) -> Fact {
        let found = tokio::time::timeout(within, async {
            loop {
                let fact = self.facts.recv().await?;
                self.seen.push(fact.clone());
                if wanted(&fact) {
                    return Some(fact);
                }
            }
        })
        .await;
        let why = match found {
            Ok(Some(fact)) => return fact,
            Ok(None) => {
                // Its stderr ends with it (a second at most: a process it started may hold it).
                let _ = self
                    .stderr_ended
                    .recv_timeout(std::time::Duration::from_secs(1));
                format!("exited before {what}")
            }
            Err(_) => format!("no {what} within {within:?}"),
        };
        panic!(
            "{}: {why}; last facts: {:#?}\nlast lines on its stderr: {:#?}",
            self.name,
            self.tail(),
            self.stderr_tail()
        )
    }

    /// The first fact matching `wanted`, already read or still to come (waiting at most
    /// `within`).
    ///
    /// # Panics
    ///
    /// As [`expect`](Self::expect).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn find(
        &mut self,
        what: &str,
        within: std::time::Duration,
        wanted: impl Fn(&Fact) -> bool,
    ) -> Fact {
        self.drain();
        if let Some(fact) = self.seen.iter().find(|f| wanted(f)) {
            return fact.clone();
        }
        self.expect(what, within, wanted).await
    }

    /// Reads what the process reported so far, without waiting.
    pub fn drain(&mut self) {
        while let Ok(fact) = self.facts.try_recv() {
            self.seen.push(fact);
        }
    }

    /// The last 30 facts read, oldest first, a run of the same fact written once with its
    /// count (so that a fact said in a loop does not hide the others).
    pub fn tail(&self) -> Vec<String> {
        let mut runs: Vec<(String, usize)> = Vec::new();
        for fact in &self.seen {
            let line = format!("{} {}", fact.word, fact.args.join(" "));
            match runs.last_mut() {
                Some((last, count)) if *last == line => *count += 1,
                _ => runs.push((line, 1)),
            }
        }
        runs[runs.len().saturating_sub(30)..]
            .iter()
            .map(|(line, count)| match count {
                1 => line.clone(),
                n => format!("{line} (x{n})"),
            })
            .collect()
    }

    /// Its last lines on stderr, oldest first (at most 40).
    pub fn stderr_tail(&self) -> Vec<String> {
        let kept = self
            .stderr
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        kept.iter().cloned().collect()
    }

    /// Kills the process (SIGKILL) and waits until it is gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGSTOP; returns once the kernel shows the process stopped (waiting at most `within`).
    ///
    /// # Panics
    ///
    /// If the signal cannot be sent, or the process does not show stopped within `within`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the process stays stopped.
    pub async fn pause(&self, within: std::time::Duration) {
        self.signal(nix::sys::signal::Signal::SIGSTOP);
        let stat = format!("/proc/{}/stat", self.id());
        crate::eventually("the kernel shows it stopped", within, async || {
            let text = std::fs::read_to_string(&stat).map_err(|e| e.to_string())?;
            // The state follows the parenthesised command name.
            match text.rsplit_once(") ") {
                Some((_, state)) if state.starts_with('T') => Ok(()),
                _ => Err(text),
            }
        })
        .await;
    }

    /// SIGCONT: a paused process runs again.
    ///
    /// # Panics
    ///
    /// If the signal cannot be sent.
    pub fn resume(&self) {
        self.signal(nix::sys::signal::Signal::SIGCONT);
    }

    /// SIGTERM: what a supervisor sends to stop a process gracefully.
    ///
    /// # Panics
    ///
    /// If the signal cannot be sent.
    pub fn terminate(&self) {
        self.signal(nix::sys::signal::Signal::SIGTERM);
    }

    fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.id()).expect("a pid"));
        nix::sys::signal::kill(pid, signal)
            .unwrap_or_else(|e| panic!("{}: {signal} sent: {e}", self.name));
    }

    /// Its exit status, if it has exited (without waiting).
    ///
    /// # Panics
    ///
    /// If its status cannot be read.
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().expect("the child's status")
    }

    /// Its process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The fact on `line`, if it holds one.
fn parse(from: &str, line: &str) -> Option<Fact> {
    let at = line.find("@@ ")?;
    let mut words = line[at + 3..].split_whitespace();
    let at = words.next()?.parse().ok()?;
    let word = words.next()?.to_owned();
    Some(Fact {
        from: from.to_owned(),
        at,
        word,
        args: words.map(str::to_owned).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fact_is_read_after_any_prefix_and_other_lines_are_not_facts() {
        let fact = parse("m1", "test member_process ... @@ 42 READY a b").expect("a fact");
        assert_eq!(fact.from, "m1");
        assert_eq!(fact.at, 42);
        assert!(fact.is("READY", &["a"]));
        assert!(!fact.is("READY", &["b"]));
        assert_eq!(parse("m1", "running 1 test"), None);
        assert_eq!(parse("m1", "@@ READY a"), None, "a fact has its instant");
    }

    /// A child that exits before the fact a test waits for: the panic says so and lists its
    /// last facts, a fact repeated in a loop once with its count.
    #[test]
    fn a_child_that_exits_first_is_reported_with_its_last_facts_runs_counted() {
        let mut command = std::process::Command::new("sh");
        command.args([
            "-c",
            "echo '@@ 1 READY m1'; for i in 1 2 3; do echo '@@ 2 LOADED 40'; done; echo noise; \
             echo 'member: the shutdown overran' >&2",
        ]);
        let mut child = Child::spawn("m1", command);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let ready = runtime.block_on(child.expect(
            "READY",
            std::time::Duration::from_secs(10),
            |f| f.word == "READY",
        ));
        assert_eq!(ready.args, ["m1"]);
        let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            runtime.block_on(
                child.expect("STOPPED", std::time::Duration::from_secs(10), |f| {
                    f.word == "STOPPED"
                }),
            )
        }));
        let message = *waited
            .expect_err("it exited first")
            .downcast::<String>()
            .expect("a message");
        assert!(
            message.starts_with("m1: exited before STOPPED"),
            "{message}"
        );
        assert!(message.contains("\"LOADED 40 (x3)\""), "{message}");
        assert!(
            message.contains("\"member: the shutdown overran\""),
            "{message}"
        );
        assert_eq!(child.tail(), ["READY m1", "LOADED 40 (x3)"]);
    }
}
