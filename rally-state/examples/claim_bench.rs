//! Scratch: claim latency and throughput of the SQLite store (not committed).
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use rally_state::{SqliteStore, StateStore};

fn stats(name: &str, mut v: Vec<u64>, elapsed: std::time::Duration) {
    v.sort_unstable();
    let n = v.len();
    let mean = v.iter().sum::<u64>() as f64 / n as f64;
    println!(
        "{name}: n={n} rate={:.0}/s p50={} p90={} p99={} mean={:.1} (µs)",
        n as f64 / elapsed.as_secs_f64(),
        v[n / 2],
        v[n * 9 / 10],
        v[n * 99 / 100],
        mean
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args[1].clone();
    let path = args[2].clone();
    let n: usize = args[3].parse().unwrap();
    let conc: usize = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(1);
    let tag: String = args.get(5).cloned().unwrap_or_else(|| "0".into());
    if mode == "raw" {
        raw(&path, n, &args[4..]);
        return;
    }
    if mode == "alt" {
        alt(&path, n);
        return;
    }
    if mode == "pair" {
        let exe = std::env::current_exe().unwrap();
        let mut child = std::process::Command::new(&exe)
            .args(["run", &path, &n.to_string(), &conc.to_string(), "1"])
            .spawn()
            .unwrap();
        run(&path, n, conc, "0");
        child.wait().unwrap();
        return;
    }
    run(&path, n, conc, &tag);
}

fn run(path: &str, n: usize, conc: usize, tag: &str) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let store = Arc::new(SqliteStore::open(path).unwrap());
        let owner = format!("127.0.0.1:4{tag}123#1732437000000{tag}");
        // warm
        for k in 0..100 {
            store
                .claim("ping", &format!("warm-{tag}-{k}"), &owner)
                .await
                .unwrap();
        }
        let next = Arc::new(AtomicUsize::new(0));
        let start = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..conc {
            let (store, next, owner, tag) = (
                Arc::clone(&store),
                Arc::clone(&next),
                owner.clone(),
                tag.to_owned(),
            );
            tasks.push(tokio::spawn(async move {
                let mut lat = Vec::new();
                let pollute: usize = std::env::var("POLLUTE")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                let nap: u64 = std::env::var("NAP")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                let mut buf = vec![0u8; pollute];
                loop {
                    if pollute > 0 {
                        for i in (0..pollute).step_by(64) {
                            buf[i] = buf[i].wrapping_add(1);
                        }
                        std::hint::black_box(&buf);
                    }
                    if nap > 0 {
                        std::thread::sleep(std::time::Duration::from_micros(nap));
                    }
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    if k >= n {
                        break;
                    }
                    let id = format!("act-{tag}-{k}");
                    let t = Instant::now();
                    store.claim("ping", &id, &owner).await.unwrap();
                    lat.push(t.elapsed().as_micros() as u64);
                }
                lat
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        stats(&format!("proc {tag} conc {conc}"), all, start.elapsed());
    });
}

/// Two stores (two connections, as two member processes have) on one file, claims alternating
/// between them one at a time: each transaction follows the other connection's commit.
fn alt(path: &str, n: usize) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let a = SqliteStore::open(path).unwrap();
        let b = SqliteStore::open(path).unwrap();
        for k in 0..100 {
            a.claim("ping", &format!("warm-a-{k}"), "o1").await.unwrap();
            b.claim("ping", &format!("warm-b-{k}"), "o2").await.unwrap();
        }
        let (mut la, mut lb) = (Vec::new(), Vec::new());
        let start = Instant::now();
        for k in 0..n {
            let id = format!("act-0-{k}");
            let t = Instant::now();
            if k % 2 == 0 {
                a.claim("ping", &id, "127.0.0.1:40123#17324370000000")
                    .await
                    .unwrap();
                la.push(t.elapsed().as_micros() as u64);
            } else {
                b.claim("ping", &id, "127.0.0.1:41123#17324370000001")
                    .await
                    .unwrap();
                lb.push(t.elapsed().as_micros() as u64);
            }
        }
        let e = start.elapsed();
        stats("alt a", la, e);
        stats("alt b", lb, e);
    });
}

/// The claim's SQL on this thread, no hand-off; pragmas from the arguments ("name=value").
fn raw(path: &str, n: usize, pragmas: &[String]) {
    if let Ok(ps) = std::env::var("PAGE") {
        let c0 = rusqlite::Connection::open(path).unwrap();
        c0.pragma_update(None, "page_size", ps.parse::<i64>().unwrap())
            .unwrap();
        c0.execute_batch("CREATE TABLE IF NOT EXISTS x(a)").unwrap();
    }
    let store = SqliteStore::open(path).unwrap(); // creates the table, WAL
    let c = rusqlite::Connection::open(path).unwrap();
    c.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
    c.pragma_update(None, "synchronous", "NORMAL").unwrap();
    for p in pragmas {
        let (k, v) = p.split_once('=').unwrap();
        c.pragma_update(None, k, v).unwrap();
    }
    let sql =
        "INSERT INTO rally_grains (kind, identity, epoch, owner, active) VALUES (?1, ?2, 1, ?3, 1)
ON CONFLICT (kind, identity) DO UPDATE
    SET epoch = epoch + 1, owner = excluded.owner, active = 1
    WHERE active = 0 OR owner = excluded.owner
RETURNING epoch";
    let other = std::env::var("OTHER").is_ok();
    let c2 = rusqlite::Connection::open(path).unwrap();
    c2.pragma_update(None, "synchronous", "NORMAL").unwrap();
    let batch: usize = std::env::var("BATCH")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let noret = std::env::var("NORET").is_ok();
    let mut lat = Vec::new();
    let (mut tb, mut ts, mut tc) = (0u128, 0u128, 0u128);
    let start = Instant::now();
    for k in 0..n {
        let id = format!("act-0-{k}");
        if other {
            c2.execute_batch("BEGIN IMMEDIATE").unwrap();
            let _: i64 = c2
                .prepare_cached(sql)
                .unwrap()
                .query_row(
                    rusqlite::params![
                        "ping",
                        format!("act-1-{k}"),
                        "127.0.0.1:41123#17324370000001"
                    ],
                    |r| r.get(0),
                )
                .unwrap();
            c2.execute_batch("COMMIT").unwrap();
        }
        let t = Instant::now();
        if k % batch == 0 {
            c.execute_batch("BEGIN IMMEDIATE").unwrap();
        }
        let t1 = Instant::now();
        if noret {
            let changed = c
                .prepare_cached(NORET_SQL)
                .unwrap()
                .execute(rusqlite::params![
                    "ping",
                    id,
                    "127.0.0.1:40123#17324370000000"
                ])
                .unwrap();
            assert_eq!(changed, 1);
            let e: i64 = c
                .prepare_cached("SELECT epoch FROM rally_grains WHERE kind = ?1 AND identity = ?2")
                .unwrap()
                .query_row(rusqlite::params!["ping", id], |r| r.get(0))
                .unwrap();
            assert!(e >= 1);
        } else {
            let e: i64 = c
                .prepare_cached(sql)
                .unwrap()
                .query_row(
                    rusqlite::params!["ping", id, "127.0.0.1:40123#17324370000000"],
                    |r| r.get(0),
                )
                .unwrap();
            assert!(e >= 1);
        }
        let t2 = Instant::now();
        if k % batch == batch - 1 {
            c.execute_batch("COMMIT").unwrap();
        }
        let t3 = Instant::now();
        tb += (t1 - t).as_nanos();
        ts += (t2 - t1).as_nanos();
        tc += (t3 - t2).as_nanos();
        lat.push(t.elapsed().as_micros() as u64);
        if k % 1024 == 1023 {
            c.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
                .unwrap();
        }
    }
    let e = start.elapsed();
    println!(
        "begin {:.1} stmt {:.1} commit {:.1} µs mean",
        tb as f64 / n as f64 / 1e3,
        ts as f64 / n as f64 / 1e3,
        tc as f64 / n as f64 / 1e3
    );
    stats("raw", lat, e);
    drop(store);
}

const NORET_SQL: &str =
    "INSERT INTO rally_grains (kind, identity, epoch, owner, active) VALUES (?1, ?2, 1, ?3, 1)
ON CONFLICT (kind, identity) DO UPDATE
    SET epoch = epoch + 1, owner = excluded.owner, active = 1
    WHERE active = 0 OR owner = excluded.owner";
