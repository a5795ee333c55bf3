//! A member process for `tests/state_postgres.rs`: it holds shards of a PostgreSQL store and
//! saves to them as fast as it can, so the test can stop it (SIGSTOP) in the middle of its
//! operations. Not a test and not a tool: the test runs it through `CARGO_BIN_EXE_…`.
//!
//! Arguments: `<connection string> <owner> <shards>`. It claims `#<owner>-0..shards` of the
//! kind `paused` and prints, one line each, stamped with the wall clock in nanoseconds (the
//! test compares them with the moments it stopped and resumed this process):
//!
//! ```text
//! CLAIMED <scope> <epoch>
//! BEGIN <worker> <seq> <ns>          (about to save the value <seq> to <owner>-<worker>)
//! END <worker> <seq> <OK|STALE|ERR> <ns>
//! RELEASED <scope> <OK|STALE|ERR>
//! DONE
//! ```
//!
//! Eight workers save, worker `w` to the identity `<owner>-<w>` in the shard `w % shards`,
//! until a line `stop` on stdin; then it releases its shards and exits.

use std::io::{BufRead, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use rally_state::{Claim, Fence, PostgresStore, StateStore, StoreError};

const WORKERS: u64 = 8;

fn now() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is past 1970")
        .as_nanos()
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    // The test reads every line; if it is gone, so is the point of going on.
    writeln!(out, "{line}").expect("stdout is the test's pipe");
    out.flush().expect("stdout is the test's pipe");
}

fn outcome(result: &Result<(), StoreError>) -> &'static str {
    match result {
        Ok(()) => "OK",
        Err(StoreError::StaleEpoch { .. }) => "STALE",
        Err(_) => "ERR",
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, config, owner, shards] = args.as_slice() else {
        panic!("usage: postgres_member <connection string> <owner> <shards>");
    };
    let shards: u64 = shards.parse().expect("a number of shards");
    let store = Arc::new(PostgresStore::connect(config).await.expect("connects"));
    let mut epochs = Vec::new();
    for shard in 0..shards {
        let scope = format!("#{owner}-{shard}");
        let Ok(Claim::Granted(epoch)) = store.claim("paused", &scope, owner).await else {
            panic!("{scope}: a fresh shard is granted")
        };
        say(&format!("CLAIMED {scope} {epoch}"));
        epochs.push((scope, epoch));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..WORKERS)
        .map(|worker| {
            let (store, stop) = (Arc::clone(&store), Arc::clone(&stop));
            let (scope, epoch) = epochs[usize::try_from(worker % shards).expect("small")].clone();
            let identity = format!("{owner}-{worker}");
            tokio::spawn(async move {
                let fence = Fence { epoch, life: 0 };
                for seq in 0u64.. {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    say(&format!("BEGIN {worker} {seq} {}", now()));
                    let saved = store
                        .save("paused", &scope, fence, &identity, &seq.to_le_bytes())
                        .await;
                    say(&format!("END {worker} {seq} {} {}", outcome(&saved), now()));
                }
            })
        })
        .collect();
    // A line on stdin (or its end) stops the workers.
    tokio::task::spawn_blocking(|| {
        let _ = std::io::stdin().lock().lines().next();
    })
    .await
    .expect("the stdin thread does not panic");
    stop.store(true, Ordering::SeqCst);
    for worker in workers {
        worker.await.expect("a worker does not panic");
    }
    for (scope, epoch) in &epochs {
        let released = store.release("paused", scope, *epoch).await;
        say(&format!("RELEASED {scope} {}", outcome(&released)));
    }
    say("DONE");
}
