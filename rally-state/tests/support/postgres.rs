//! A private PostgreSQL server for one test: `initdb` in a temporary directory, started with
//! `pg_ctl` on a free loopback port as the unprivileged user `nobody` (the server refuses to
//! run as root), stopped and removed on drop, also when the test fails.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;

/// Where Debian's `postgresql` 15 puts the server programs.
const BIN: &str = "/usr/lib/postgresql/15/bin";

pub struct PgServer {
    dir: PathBuf,
    pub port: u16,
}

impl PgServer {
    pub fn start(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("rally-pg-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let server = Self { dir, port };
        let as_root = nix_is_root();
        server.run(
            as_root,
            "initdb",
            &[
                "-D",
                server.data().as_str(),
                "-A",
                "trust",
                "-U",
                "rally",
                "--no-sync",
            ],
        );
        let options = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            server.dir.display()
        );
        let log = server.dir.join("log");
        server.run(
            as_root,
            "pg_ctl",
            &[
                "-D",
                server.data().as_str(),
                "-o",
                options.as_str(),
                "-l",
                log.to_str().unwrap(),
                "-w",
                "-t",
                "60",
                "start",
            ],
        );
        server
    }

    pub fn config(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=rally dbname=postgres",
            self.port
        )
    }

    fn data(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    fn run(&self, as_root: bool, program: &str, args: &[&str]) {
        let program = format!("{BIN}/{program}");
        let status = if as_root {
            Command::new("chown")
                .args(["-R", "nobody", self.dir.to_str().unwrap()])
                .status()
                .unwrap();
            Command::new("runuser")
                .args(["-u", "nobody", "--", program.as_str()])
                .args(args)
                .status()
        } else {
            Command::new(&program).args(args).status()
        }
        .unwrap_or_else(|e| panic!("cannot run {program}: {e} (is postgresql installed?)"));
        assert!(status.success(), "{program} {args:?} failed: {status}");
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let data = self.data();
        let stop = [data.as_str(), "-m", "immediate", "-w"];
        let program = format!("{BIN}/pg_ctl");
        let _ = if nix_is_root() {
            Command::new("runuser")
                .args(["-u", "nobody", "--", program.as_str(), "stop", "-D"])
                .args(stop)
                .status()
        } else {
            Command::new(&program)
                .args(["stop", "-D"])
                .args(stop)
                .status()
        };
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn nix_is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.starts_with(b"0\n"))
        .unwrap_or(false)
}
