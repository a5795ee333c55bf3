//! How long `SqliteStore` holds the database file's write lock, which every member process on
//! the machine shares: while one holds it, every other's writes wait.
//!
//! ```text
//! cargo run --release -p rally-state --example sqlite_write_lock -- [--processes 2] [--tasks 64] [--seconds 10]
//! ```
//!
//! Starts `--processes` member processes (this executable again) on one new file. Each runs
//! `--tasks` tasks that, for `--seconds`, go through the life of an activation on a shard of
//! their own, over and over: claim the shard, load the identity's state, save it three times,
//! fence the next life, release the shard (six writes and a load). Each process then prints
//! its `SqliteStore::stats()`; this prints them as a table (hold times of the write
//! transactions: median, 99th and 99.9th percentile, longest), with the load average.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rally::state::{Claim, Fence, SqliteStore, StateStore};

/// Set in a member process: its file, tasks and seconds.
const CHILD_ENV: &str = "RALLY_WRITE_LOCK_MEMBER";

fn main() -> anyhow::Result<()> {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        return member(&spec);
    }
    let mut args = std::env::args().skip(1);
    let (mut processes, mut tasks, mut seconds) = (2usize, 64usize, 10u64);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .ok_or_else(|| anyhow::anyhow!("{flag} needs a value"))?;
        match flag.as_str() {
            "--processes" => processes = value.parse()?,
            "--tasks" => tasks = value.parse()?,
            "--seconds" => seconds = value.parse()?,
            other => anyhow::bail!("unknown flag {other}"),
        }
    }
    let dir = std::env::temp_dir().join(format!("rally-write-lock-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let db = dir.join("grains.db");
    let before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let children: Vec<_> = (0..processes)
        .map(|n| {
            Command::new(std::env::current_exe()?)
                .env(
                    CHILD_ENV,
                    format!("{}\t{n}\t{tasks}\t{seconds}", db.display()),
                )
                .stdout(Stdio::piped())
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    println!(
        "{processes} processes x {tasks} tasks, {seconds} s, one file; each task: claim, load, \
         3 saves, fence, release on a shard of its own, again and again"
    );
    println!(
        "| process | write ops/s | transactions | ops per transaction | hold p50 | p99 | p99.9 | longest | checkpoint restarts (longest) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (n, mut child) in children.into_iter().enumerate() {
        let stdout = child.stdout.take().expect("piped");
        for line in BufReader::new(stdout).lines() {
            let line = line?;
            if let Some(stats) = line.strip_prefix("STATS ") {
                let f: Vec<f64> = stats.split(' ').map(str::parse).collect::<Result<_, _>>()?;
                let us = |ns: f64| format!("{:.0} µs", ns / 1e3);
                println!(
                    "| {n} | {:.0} | {:.0} | {:.1} | {} | {} | {} | {} | {:.0} ({}) |",
                    f[1] / f[8],
                    f[0],
                    f[1] / f[0].max(1.0),
                    us(f[2]),
                    us(f[3]),
                    us(f[4]),
                    us(f[5]),
                    f[6],
                    us(f[7]),
                );
            }
        }
        anyhow::ensure!(child.wait()?.success(), "process {n} failed");
    }
    let after = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "load average before: {}, after: {}",
        before.trim(),
        after.trim()
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// One member process: its tasks' activations, then one line of its store's figures.
fn member(spec: &str) -> anyhow::Result<()> {
    let fields: Vec<&str> = spec.split('\t').collect();
    let [db, n, tasks, seconds] = fields.as_slice() else {
        anyhow::bail!("bad {CHILD_ENV}: {spec}");
    };
    let (tasks, seconds): (usize, u64) = (tasks.parse()?, seconds.parse()?);
    let (db, n) = (db.to_string(), n.to_string());
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let store = SqliteStore::open(&db)?;
        let deadline = Instant::now() + Duration::from_secs(seconds);
        let started = Instant::now();
        let workers: Vec<_> = (0..tasks)
            .map(|task| {
                let (store, n) = (store.clone(), n.clone());
                let (scope, identity) = (format!("#{n}-{task}"), format!("{n}-{task}"));
                tokio::spawn(async move {
                    let owner = format!("member-{n}");
                    let state = [7u8; 64];
                    while Instant::now() < deadline {
                        let Claim::Granted(epoch) = store.claim("k", &scope, &owner).await? else {
                            anyhow::bail!("{scope} is this task's alone");
                        };
                        store.load("k", &identity).await?;
                        let fence = Fence { epoch, life: 0 };
                        for _ in 0..3 {
                            store.save("k", &scope, fence, &identity, &state).await?;
                        }
                        let next = Fence { epoch, life: 1 };
                        store.fence("k", &scope, next, &identity).await?;
                        store.release("k", &scope, epoch).await?;
                    }
                    Ok(())
                })
            })
            .collect();
        for worker in workers {
            worker.await??;
        }
        let elapsed = started.elapsed().as_secs_f64();
        let stats = store.stats();
        let ns = |d: Duration| d.as_nanos();
        println!(
            "STATS {} {} {} {} {} {} {} {} {elapsed}",
            stats.transactions(),
            stats.operations(),
            ns(stats.hold_quantile(0.5)),
            ns(stats.hold_quantile(0.99)),
            ns(stats.hold_quantile(0.999)),
            ns(stats.longest_hold()),
            stats.checkpoint_restarts(),
            ns(stats.longest_checkpoint_restart()),
        );
        Ok(())
    })
}
