//! The peer harnesses of `bench/peers/`: which peer has which scenario, how each is built
//! (once, the first time it is needed) and run, and which are selected.

use super::*;

/// A peer harness under `bench/peers/`.
pub(crate) struct Peer {
    pub(crate) name: &'static str,
    /// Folder under `bench/peers/`.
    pub(super) dir: &'static str,
    /// Commands that must be on PATH to build and run it.
    pub(super) toolchain: &'static [&'static str],
    /// The artifact, relative to `dir`; built when missing.
    pub(super) artifact: &'static str,
    /// The build command, run in `dir`.
    pub(super) build: &'static [&'static str],
    /// The program and its leading arguments; `<scenario> --json [--quick]` follow.
    pub(super) command: fn(&Path) -> (PathBuf, Vec<String>),
    pub(super) scenarios: &'static [&'static str],
    /// Whether it runs when --peers is not given.
    pub(super) by_default: bool,
}

pub(super) const ALL_SCENARIOS: &[&str] = &[
    "remote-ping-pong",
    "max-throughput",
    "latency",
    "local-ping-pong",
    "grain-ping",
    "activation",
];
pub(super) const LOCAL_ONLY: &[&str] = &["local-ping-pong"];
pub(super) const REMOTE_ONLY: &[&str] = &["remote-ping-pong", "max-throughput", "latency"];
pub(super) const RUST_BUILD: &[&str] = &["cargo", "build", "--release", "--locked"];
pub(super) const RUST_BIN: &str = "target/release/rust-peers";

pub(super) fn rust_peer(artifact: &Path, framework: &str) -> (PathBuf, Vec<String>) {
    (
        artifact.to_owned(),
        vec!["--framework".to_owned(), framework.to_owned()],
    )
}

/// Every known peer, in the order they are run and shown.
pub(super) const PEERS: &[Peer] = &[
    Peer {
        name: "protoactor-go",
        dir: "protoactor-go",
        toolchain: &["go"],
        artifact: "bin/protoactor-bench",
        build: &["go", "build", "-o", "bin/protoactor-bench", "."],
        command: |artifact| (artifact.to_owned(), vec![]),
        scenarios: ALL_SCENARIOS,
        by_default: true,
    },
    Peer {
        name: "pekko",
        dir: "pekko",
        toolchain: &["mvn", "java"],
        artifact: "target/pekko-bench.jar",
        build: &["mvn", "-q", "-B", "package"],
        command: |artifact| {
            (
                PathBuf::from("java"),
                vec!["-jar".to_owned(), artifact.display().to_string()],
            )
        },
        scenarios: ALL_SCENARIOS,
        by_default: true,
    },
    Peer {
        name: "pekko-aeron",
        dir: "pekko",
        toolchain: &["mvn", "java"],
        artifact: "target/pekko-bench.jar",
        build: &["mvn", "-q", "-B", "package"],
        command: |artifact| {
            let jar = artifact.display().to_string();
            (
                PathBuf::from("java"),
                ["-jar", &jar, "--transport", "aeron-udp"]
                    .map(str::to_owned)
                    .to_vec(),
            )
        },
        scenarios: REMOTE_ONLY,
        // Two embedded Aeron media drivers spin on the same 2 cores as the actors: opt-in only.
        by_default: false,
    },
    Peer {
        name: "actix",
        dir: "rust",
        toolchain: &["cargo"],
        artifact: RUST_BIN,
        build: RUST_BUILD,
        command: |a| rust_peer(a, "actix"),
        scenarios: LOCAL_ONLY,
        by_default: true,
    },
    Peer {
        name: "ractor-mt",
        dir: "rust",
        toolchain: &["cargo"],
        artifact: RUST_BIN,
        build: RUST_BUILD,
        command: |a| rust_peer(a, "ractor-mt"),
        scenarios: LOCAL_ONLY,
        by_default: true,
    },
    Peer {
        name: "ractor-ct",
        dir: "rust",
        toolchain: &["cargo"],
        artifact: RUST_BIN,
        build: RUST_BUILD,
        command: |a| rust_peer(a, "ractor-ct"),
        scenarios: LOCAL_ONLY,
        by_default: true,
    },
    Peer {
        name: "kameo-mt",
        dir: "rust",
        toolchain: &["cargo"],
        artifact: RUST_BIN,
        build: RUST_BUILD,
        command: |a| rust_peer(a, "kameo-mt"),
        scenarios: LOCAL_ONLY,
        by_default: true,
    },
    Peer {
        name: "kameo-ct",
        dir: "rust",
        toolchain: &["cargo"],
        artifact: RUST_BIN,
        build: RUST_BUILD,
        command: |a| rust_peer(a, "kameo-ct"),
        scenarios: LOCAL_ONLY,
        by_default: true,
    },
];

pub(crate) enum Selected {
    Run(&'static Peer),
    /// Rally again, with `--cluster`: the same scenario between two cluster members.
    RallyCluster,
    Skip(String, String),
}

/// The peers to run: the named ones (unknown names are an error; ones without the scenario are
/// skipped), or by default every peer that has the scenario.
pub(crate) fn select_peers(scenario: &str, names: &[String]) -> anyhow::Result<Vec<Selected>> {
    if names.is_empty() {
        return Ok(PEERS
            .iter()
            .filter(|p| p.by_default && p.scenarios.contains(&scenario))
            .map(Selected::Run)
            .collect());
    }
    let mut out = Vec::new();
    for name in names.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        if name == RALLY_CLUSTER {
            out.push(if REMOTE_ONLY.contains(&scenario) {
                Selected::RallyCluster
            } else {
                Selected::Skip(
                    name.to_owned(),
                    format!("--cluster applies to the remote scenarios, not {scenario}"),
                )
            });
            continue;
        }
        let peer = PEERS.iter().find(|p| p.name == name).ok_or_else(|| {
            anyhow!(
                "unknown peer {name:?}; known: {}, {RALLY_CLUSTER}",
                PEERS.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
            )
        })?;
        if peer.scenarios.contains(&scenario) {
            out.push(Selected::Run(peer));
        } else {
            out.push(Selected::Skip(
                name.to_owned(),
                format!("its harness has no {scenario} scenario"),
            ));
        }
    }
    Ok(out)
}

pub(crate) enum Prepared {
    Ready(Framework),
    Skipped(String),
}

impl Peer {
    /// Checks the toolchain and builds the artifact if it is missing.
    pub(crate) fn prepare(&self, root: &Path) -> anyhow::Result<Prepared> {
        if let Some(missing) = self.toolchain.iter().find(|tool| !on_path(tool)) {
            return Ok(Prepared::Skipped(format!("no `{missing}` on PATH")));
        }
        let dir = root.join("bench/peers").join(self.dir);
        let artifact = dir.join(self.artifact);
        if !artifact.exists() {
            eprintln!(
                "compare: building {} ({} in {})",
                self.name,
                self.build.join(" "),
                dir.display()
            );
            let mut cmd = Command::new(self.build[0]);
            cmd.args(&self.build[1..]).current_dir(&dir);
            // The Rust peers are a workspace of their own: their build goes to their own target
            // folder even when this process runs under a CARGO_TARGET_DIR.
            cmd.env("CARGO_TARGET_DIR", dir.join("target"));
            let out = run_bounded(cmd, BUILD_LIMIT)?;
            if !out.success {
                bail!(
                    "`{}` failed:\n{}",
                    self.build.join(" "),
                    tail(&out.stderr, 20)
                );
            }
            if !artifact.exists() {
                bail!(
                    "`{}` succeeded but {} is missing",
                    self.build.join(" "),
                    artifact.display()
                );
            }
        }
        let (program, prefix) = (self.command)(&artifact);
        Ok(Prepared::Ready(Framework {
            name: self.name.to_owned(),
            program,
            prefix,
            suffix: vec![],
            dir: Some(dir),
        }))
    }
}
