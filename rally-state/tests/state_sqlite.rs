//! The SQLite store keeps the store contract on a real file, shared by several handles (as the
//! members on one machine share it).

mod support;

use std::sync::Arc;

use rally::state::{Claim, SqliteStore, StateStore, StoreError};
use rally_test::eventually;

/// A database file in a fresh temporary directory, removed with it.
struct TempDb {
    dir: std::path::PathBuf,
}

impl TempDb {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("rally-state-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self { dir }
    }

    fn path(&self) -> std::path::PathBuf {
        self.dir.join("grains.db")
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test]
async fn sqlite_store_keeps_the_contract() {
    let db = TempDb::new("contract");
    let store = SqliteStore::open(db.path()).unwrap();
    support::check_contract(&store, "s").await;
    support::check_shared_scope(&store, "s").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_claims_through_separate_connections_have_one_winner() {
    let db = TempDb::new("race");
    let stores: Vec<Arc<dyn StateStore>> = (0..4)
        .map(|_| Arc::new(SqliteStore::open(db.path()).unwrap()) as Arc<dyn StateStore>)
        .collect();
    support::check_one_winner(stores, "s").await;
}

/// The store's thread runs every operation waiting in one transaction: operations issued
/// together from two handles still get one answer each, a lost race is a `Held` naming the
/// winner, and a stale write in the same batch as good ones fails alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_issued_together_share_commits_and_keep_their_own_answers() {
    let db = TempDb::new("batch");
    let a = SqliteStore::open(db.path()).unwrap();
    let b = SqliteStore::open(db.path()).unwrap();
    let mut claims = tokio::task::JoinSet::new();
    for i in 0..500 {
        for (store, owner) in [(a.clone(), "a"), (b.clone(), "b")] {
            claims.spawn(async move {
                let identity = format!("u{i}");
                let claim = store.claim("cart", &identity, owner).await;
                (identity, owner, claim)
            });
        }
    }
    let mut winners = std::collections::HashMap::new();
    let mut losers = Vec::new();
    while let Some(done) = claims.join_next().await {
        let (identity, owner, claim) = done.unwrap();
        match claim.unwrap() {
            Claim::Granted(epoch) => {
                assert_eq!(epoch, 1, "{identity}: the first grant is epoch 1");
                assert!(
                    winners.insert(identity.clone(), owner).is_none(),
                    "{identity} granted twice"
                );
            }
            Claim::Held {
                owner: holder,
                epoch,
            } => {
                assert_eq!(epoch, 1);
                losers.push((identity, owner, holder));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(winners.len(), 500, "every identity granted once");
    assert_eq!(losers.len(), 500, "every race lost once");
    for (identity, owner, holder) in losers {
        assert_ne!(owner, holder);
        assert_eq!(
            winners[&identity], holder,
            "{identity}: Held names the winner"
        );
    }
    // Good and stale writes issued together: only the stale ones fail.
    let mut saves = tokio::task::JoinSet::new();
    for i in 0..100 {
        let store = if i % 2 == 0 { a.clone() } else { b.clone() };
        let epoch = if i % 10 == 0 { 7 } else { 1 };
        saves.spawn(async move {
            let identity = format!("u{i}");
            (
                i,
                store.save("cart", &identity, epoch, &identity, b"s").await,
            )
        });
    }
    while let Some(done) = saves.join_next().await {
        let (i, saved) = done.unwrap();
        if i % 10 == 0 {
            assert_eq!(saved, Err(StoreError::StaleEpoch { epoch: 7 }), "u{i}");
        } else {
            assert_eq!(saved, Ok(()), "u{i}");
        }
    }
    assert_eq!(
        b.load("cart", "u3").await.unwrap().as_deref(),
        Some(&b"s"[..])
    );
    assert_eq!(a.load("cart", "u10").await.unwrap(), None);
}

#[tokio::test]
async fn state_and_fencing_survive_reopening_the_file() {
    let db = TempDb::new("reopen");
    {
        let first = SqliteStore::open(db.path()).unwrap();
        assert_eq!(first.claim("cart", "u1", "m1").await, Ok(Claim::Granted(1)));
        first.save("cart", "u1", 1, "u1", b"kept").await.unwrap();
    }
    // Another member on the machine, as a member process restarted would open it.
    let second = SqliteStore::open(db.path()).unwrap();
    assert_eq!(
        second.load("cart", "u1").await.unwrap().as_deref(),
        Some(&b"kept"[..])
    );
    assert_eq!(
        second.take_over("cart", "u1", "m2", 1).await,
        Ok(Claim::Granted(2))
    );
    assert_eq!(
        second.save("cart", "u1", 1, "u1", b"stale").await,
        Err(StoreError::StaleEpoch { epoch: 1 })
    );
}

#[test]
fn an_unopenable_path_is_a_backend_error() {
    let db = TempDb::new("bad");
    // A directory is not a database file.
    assert!(matches!(
        SqliteStore::open(&db.dir),
        Err(StoreError::Backend(_))
    ));
}

/// Members on one machine start at once and open the same new file together: every open
/// succeeds (turning on WAL and creating the table race with each other).
#[test]
fn many_opens_of_one_new_file_at_once_all_succeed() {
    for round in 0..20 {
        let dir =
            std::env::temp_dir().join(format!("rally-sqlite-opens-{}-{round}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("grains.db");
        let barrier = Arc::new(std::sync::Barrier::new(8));
        let opens: Vec<_> = (0..8)
            .map(|_| {
                let (path, barrier) = (path.clone(), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    barrier.wait();
                    SqliteStore::open(&path).map(drop)
                })
            })
            .collect();
        for open in opens {
            open.join()
                .unwrap()
                .unwrap_or_else(|e| panic!("round {round}: {e}"));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// What is committed reaches the database file while the store stays open and idle: a
/// checkpointer copies the write-ahead log in the background (no commit does it on the way,
/// so none waits for it), which keeps the log from growing without bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_are_copied_into_the_database_file_in_the_background() {
    let db = TempDb::new("checkpoint");
    let store = SqliteStore::open(db.path()).unwrap();
    let claims: Vec<_> = (0..2000)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let identity = format!("identity-{i:05}");
                store
                    .claim("kind", &identity, "rally://member@127.0.0.1:4000#1")
                    .await
            })
        })
        .collect();
    for claim in claims {
        assert!(matches!(claim.await.unwrap(), Ok(Claim::Granted(1))));
    }
    // 2,000 rows of about 60 bytes: over 64 KiB once in the file, not just in its log.
    let within = std::time::Duration::from_secs(30);
    eventually(
        "the log is copied into the database file",
        within,
        async || match std::fs::metadata(db.path()).unwrap().len() {
            size if size >= 64 * 1024 => Ok(()),
            size => Err(format!("the file is {size} bytes")),
        },
    )
    .await;
    drop(store);
}

/// An operation that meets the write lock held by another connection (another member process's
/// commit) does not wait for it on the caller's thread: the call returns at once, the store's
/// thread waits for the lock, and the claim is granted once the other connection commits.
#[tokio::test(flavor = "current_thread")]
async fn a_claim_meeting_another_connections_write_lock_waits_on_the_stores_thread() {
    let db = TempDb::new("held-lock");
    let store = SqliteStore::open(db.path()).unwrap();
    assert_eq!(store.claim("cart", "u0", "a").await, Ok(Claim::Granted(1)));
    let other = rusqlite::Connection::open(db.path()).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    // On this (the only) runtime thread: if the call waited for the lock, the commit below
    // could not run before the store's busy timeout, and the claim would fail.
    let claim = store.claim("cart", "u1", "a");
    other.execute_batch("COMMIT").unwrap();
    assert_eq!(claim.await, Ok(Claim::Granted(1)));
    // Idle again: the next claim is served as well (on whichever thread).
    assert_eq!(store.claim("cart", "u0", "a").await, Ok(Claim::Granted(2)));
}

/// Under commits that never pause (two handles, as two member processes, claiming one identity
/// after another), the write-ahead log's file stays bounded: SQLite writes it from its start
/// again only when a transaction begins with every frame copied into the database, which
/// passive checkpoints never achieve while commits keep coming, so without a restarting
/// checkpoint the log grew by every commit (about 210 MB over this test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_write_ahead_log_stays_bounded_under_commits_that_never_pause() {
    const CLAIMS_PER_HANDLE: usize = 18_000;
    // The restart threshold (16 MiB) plus what gathers during a checkpoint period and the
    // checkpoint's passes (more when other tests take the CPU), with room.
    const BOUND: u64 = 128 * 1024 * 1024;
    let db = TempDb::new("wal-bound");
    let log = db.dir.join("grains.db-wal");
    let stores = [
        SqliteStore::open(db.path()).unwrap(),
        SqliteStore::open(db.path()).unwrap(),
    ];
    let writers: Vec<_> = stores
        .iter()
        .enumerate()
        .map(|(n, store)| {
            let store = store.clone();
            tokio::spawn(async move {
                for i in 0..CLAIMS_PER_HANDLE {
                    let identity = format!("identity-{n}-{i:06}");
                    let claim = store.claim("kind", &identity, "rally://member@127.0.0.1:4000#1");
                    assert_eq!(claim.await, Ok(Claim::Granted(1)), "{identity}");
                }
            })
        })
        .collect();
    let mut largest = 0;
    while !writers.iter().all(tokio::task::JoinHandle::is_finished) {
        largest = largest.max(std::fs::metadata(&log).map_or(0, |m| m.len()));
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    for writer in writers {
        writer.await.unwrap();
    }
    largest = largest.max(std::fs::metadata(&log).map_or(0, |m| m.len()));
    assert!(
        largest < BOUND,
        "the write-ahead log reached {largest} bytes (bound {BOUND})"
    );
}
