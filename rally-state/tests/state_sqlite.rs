//! The SQLite store keeps the store contract on a real file, shared by several handles (as the
//! members on one machine share it).

mod support;

use std::future::Future;
use std::sync::Arc;

use rally::state::{Claim, Fence, SqliteStore, StateStore, StoreError};
use rally_test::eventually;
use support::lease;

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
    support::check_fences(&store, "s").await;
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
                store
                    .save("cart", &identity, lease(epoch), &identity, b"s")
                    .await,
            )
        });
    }
    while let Some(done) = saves.join_next().await {
        let (i, saved) = done.unwrap();
        if i % 10 == 0 {
            assert_eq!(
                saved,
                Err(StoreError::StaleEpoch { fence: lease(7) }),
                "u{i}"
            );
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
        first
            .save("cart", "u1", lease(1), "u1", b"kept")
            .await
            .unwrap();
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
        second.save("cart", "u1", lease(1), "u1", b"stale").await,
        Err(StoreError::StaleEpoch { fence: lease(1) })
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

#[test]
fn sqlite_store_answers_as_the_model_over_random_sequences() {
    let db = TempDb::new("model");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let store = SqliteStore::open(db.path()).unwrap();
    support::model::check_against_model(&store, &runtime, "sqlite", 512);
}

/// The tables as a Rally without fences made them (`state` NOT NULL, no floor columns).
const SCHEMA_BEFORE_FENCES: &str = "
PRAGMA journal_mode = WAL;
CREATE TABLE rally_leases (
    kind   TEXT    NOT NULL,
    scope  TEXT    NOT NULL,
    epoch  INTEGER NOT NULL,
    owner  TEXT    NOT NULL,
    active INTEGER NOT NULL,
    PRIMARY KEY (kind, scope)
) WITHOUT ROWID;
CREATE TABLE rally_state (
    kind     TEXT NOT NULL,
    identity TEXT NOT NULL,
    state    BLOB NOT NULL,
    PRIMARY KEY (kind, identity)
) WITHOUT ROWID;
INSERT INTO rally_leases VALUES ('cart', '#1', 4, 'm1', 1), ('cart', '#2', 2, 'm1', 0);
INSERT INTO rally_state VALUES ('cart', 'u1', X'6F6C64'), ('cart', 'u2', X'6F6C6432');
";

/// A file written before fences existed is brought up to date when a member opens it, by eight
/// opening it at once as well: its leases and states are kept, and fences work on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_from_before_fences_is_migrated_in_place_on_open() {
    let db = TempDb::new("migrate");
    rusqlite::Connection::open(db.path())
        .unwrap()
        .execute_batch(SCHEMA_BEFORE_FENCES)
        .unwrap();
    let barrier = Arc::new(std::sync::Barrier::new(8));
    let opens: Vec<_> = (0..8)
        .map(|_| {
            let (path, barrier) = (db.path(), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                SqliteStore::open(&path)
            })
        })
        .collect();
    let stores: Vec<SqliteStore> = opens
        .into_iter()
        .map(|open| open.join().unwrap().unwrap())
        .collect();
    support::check_migrated(&stores[0], &stores[3]).await;
    drop(stores);

    // Opened again: nothing to migrate, nothing lost.
    let again = SqliteStore::open(db.path()).unwrap();
    assert_eq!(
        again.load("cart", "u1").await.unwrap().as_deref(),
        Some(&b"new"[..])
    );
    let held = Fence { epoch: 4, life: 0 };
    assert_eq!(
        again.save("cart", "#1", held, "u1", b"late").await,
        Err(StoreError::StaleEpoch { fence: held })
    );
    let columns: Vec<(String, bool)> = rusqlite::Connection::open(db.path())
        .unwrap()
        .prepare("SELECT name, \"notnull\" FROM pragma_table_info('rally_state') ORDER BY cid")
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let expected = [
        ("kind", true),
        ("identity", true),
        ("state", false),
        ("floor_scope", false),
        ("floor_epoch", true),
        ("floor_life", true),
    ];
    assert_eq!(
        columns,
        expected.map(|(name, not_null)| (name.to_owned(), not_null))
    );
}

/// Every write transaction is measured: its count, its operations and how long it held the
/// file's write lock; loads hold none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_count_every_write_transaction_and_its_hold_time() {
    let db = TempDb::new("stats");
    let store = SqliteStore::open(db.path()).unwrap();
    assert_eq!(store.stats().transactions(), 0);
    assert_eq!(store.stats().longest_hold(), std::time::Duration::ZERO);
    // One at a time: a transaction each.
    assert_eq!(store.claim("cart", "#1", "m1").await, Ok(Claim::Granted(1)));
    store
        .save("cart", "#1", lease(1), "u1", b"s")
        .await
        .unwrap();
    store.load("cart", "u1").await.unwrap();
    let stats = store.stats();
    assert_eq!((stats.transactions(), stats.operations()), (2, 2));
    // Many at once: they share transactions, and every operation is counted once.
    let mut saves = tokio::task::JoinSet::new();
    for i in 0..400 {
        let store = store.clone();
        saves.spawn(async move {
            let identity = format!("u{i}");
            store.save("cart", "#1", lease(1), &identity, b"s").await
        });
    }
    while let Some(saved) = saves.join_next().await {
        saved.unwrap().unwrap();
    }
    let stats = store.stats();
    assert_eq!(stats.operations(), 402);
    assert!(
        stats.transactions() > 2 && stats.transactions() <= 402,
        "{}",
        stats.transactions()
    );
    // A commit writes the log (a system call at least): never under a microsecond, so a
    // figure below one would be the histogram's, not the lock's.
    assert!(stats.hold_quantile(0.5) >= std::time::Duration::from_micros(1));
    assert!(stats.hold_quantile(0.5) <= stats.hold_quantile(0.99));
    assert!(stats.hold_quantile(0.99) <= stats.longest_hold());
}

/// A member stopped while it holds the file's write lock (here: another connection in the
/// middle of a write transaction) stalls every write on the machine, but not loads: they read
/// the last commit, on the caller's thread, and never wait for the writer.
#[tokio::test(flavor = "current_thread")]
async fn loads_go_on_while_another_connection_holds_the_write_lock() {
    let db = TempDb::new("load-under-lock");
    let store = SqliteStore::open(db.path()).unwrap();
    assert_eq!(store.claim("cart", "#1", "a").await, Ok(Claim::Granted(1)));
    store
        .save("cart", "#1", lease(1), "u1", b"committed")
        .await
        .unwrap();
    let other = rusqlite::Connection::open(db.path()).unwrap();
    other
        .execute_batch(
            "BEGIN IMMEDIATE; UPDATE rally_state SET state = X'00' WHERE identity = 'u1';",
        )
        .unwrap();
    // On this (the only) runtime thread: a load that waited for the lock could not return
    // before the commit below, which runs only after it.
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let load = std::pin::pin!(store.load("cart", "u1")).poll(&mut cx);
    assert_eq!(
        load.map(|loaded| loaded.unwrap()),
        std::task::Poll::Ready(Some(b"committed".to_vec())),
        "answered at once, with the last commit"
    );
    let save = store.save("cart", "#1", lease(1), "u1", b"after");
    other.execute_batch("ROLLBACK").unwrap();
    save.await.unwrap();
    assert_eq!(
        store.load("cart", "u1").await.unwrap().as_deref(),
        Some(&b"after"[..])
    );
}
