//! Running a framework: Rally itself or a built peer, each run a bounded child process whose
//! JSON report is parsed.

use super::*;

/// The pseudo-peer that runs Rally between two cluster members (`--cluster`).
pub(super) const RALLY_CLUSTER: &str = "rally-cluster";

/// Something that can run a scenario and print a report.
#[derive(Clone)]
pub(crate) struct Framework {
    pub(crate) name: String,
    pub(super) program: PathBuf,
    pub(super) prefix: Vec<String>,
    /// Arguments after `<scenario> --json`.
    pub(super) suffix: Vec<String>,
    pub(super) dir: Option<PathBuf>,
}

impl Framework {
    /// Rally: this very executable.
    pub(crate) fn rally() -> anyhow::Result<Self> {
        let program = std::env::current_exe().context("locating the rally-bench executable")?;
        Ok(Self {
            name: "rally".to_owned(),
            program,
            prefix: vec![],
            suffix: vec![],
            dir: None,
        })
    }

    /// Rally with both nodes members of one cluster; its reports name the framework
    /// `rally-cluster`, so the ratio rally/rally-cluster is bare nodes over cluster members.
    pub(super) fn rally_cluster() -> anyhow::Result<Self> {
        Ok(Self {
            name: RALLY_CLUSTER.to_owned(),
            suffix: vec!["--cluster".to_owned()],
            ..Self::rally()?
        })
    }

    pub(super) fn run(
        &self,
        scenario: &str,
        quick: bool,
        extra: &[String],
    ) -> anyhow::Result<Report> {
        self.run_wrapped(&[], scenario, quick, extra)
    }

    /// [`run`](Self::run) under `wrapper` (a command and its arguments that run the rest, as
    /// `taskset -c 0-3` does), if not empty.
    pub(crate) fn run_wrapped(
        &self,
        wrapper: &[String],
        scenario: &str,
        quick: bool,
        extra: &[String],
    ) -> anyhow::Result<Report> {
        let mut cmd = match wrapper.split_first() {
            Some((program, args)) => {
                let mut cmd = Command::new(program);
                cmd.args(args).arg(&self.program);
                cmd
            }
            None => Command::new(&self.program),
        };
        cmd.args(&self.prefix)
            .arg(scenario)
            .arg("--json")
            .args(&self.suffix)
            .args(extra);
        if quick {
            cmd.arg("--quick");
        }
        if let Some(dir) = &self.dir {
            cmd.current_dir(dir);
        }
        let out = run_bounded(cmd, if quick { QUICK_RUN_LIMIT } else { RUN_LIMIT })?;
        if !out.success {
            bail!("exited with {}:\n{}", out.status, tail(&out.stderr, 20));
        }
        parse_report(&out.stdout)
            .with_context(|| format!("reading its report (stderr:\n{})", tail(&out.stderr, 10)))
    }
}

pub(super) struct Output {
    pub(super) success: bool,
    pub(super) status: String,
    pub(super) stdout: String,
    pub(super) stderr: String,
}

/// Runs `cmd` with its output captured, killing it if it takes longer than `limit`.
pub(super) fn run_bounded(mut cmd: Command, limit: Duration) -> anyhow::Result<Output> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {:?}", cmd.get_program()))?;
    let mut stdout = child.stdout.take().context("stdout is piped")?;
    let mut stderr = child.stderr.take().context("stderr is piped")?;
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().context("waiting for a child")? {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "{:?} did not finish within {limit:?}; killed",
                cmd.get_program()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    Ok(Output {
        success: status.success(),
        status: status.to_string(),
        stdout,
        stderr,
    })
}

pub(crate) fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(tool).is_file()))
}

pub(super) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The repository root: the nearest ancestor of the working directory that holds
/// `bench/peers`, else the one this crate was built from.
pub(crate) fn repo_root() -> anyhow::Result<PathBuf> {
    let cwd = std::env::current_dir().context("reading the working directory")?;
    if let Some(found) = cwd.ancestors().find(|dir| dir.join("bench/peers").is_dir()) {
        return Ok(found.to_owned());
    }
    let built_from = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_owned);
    match built_from {
        Some(dir) if dir.join("bench/peers").is_dir() => Ok(dir),
        _ => bail!(
            "cannot find bench/peers above {} (run compare inside the Rally repository)",
            cwd.display()
        ),
    }
}

/// `$CARGO_TARGET_DIR/rally-bench/<scenario>.svg`, or under the workspace's `target/`.
pub(super) fn chart_path(root: &Path, scenario: &str) -> PathBuf {
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    let target = if target.is_relative() {
        root.join(target)
    } else {
        target
    };
    target.join("rally-bench").join(format!("{scenario}.svg"))
}

/// Parses a harness's stdout: one JSON object, on the last line that holds one (a harness that
/// lets a library print a line before its report still parses).
pub(super) fn parse_report(stdout: &str) -> anyhow::Result<Report> {
    let line = stdout
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('{'))
        .ok_or_else(|| anyhow!("no JSON object on stdout ({} bytes)", stdout.len()))?;
    let report: Report =
        serde_json::from_str(line).context("not a report in the shared JSON format")?;
    if report.rows.is_empty() {
        bail!("the report has no rows");
    }
    Ok(report)
}
