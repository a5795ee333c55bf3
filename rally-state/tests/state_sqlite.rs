//! The SQLite store keeps the store contract on a real file, shared by several handles (as the
//! members on one machine share it).

mod support;

use std::sync::Arc;

use rally::state::{Claim, SqliteStore, StateStore, StoreError};

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
    support::check_contract(&SqliteStore::open(db.path()).unwrap(), "s").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_claims_through_separate_connections_have_one_winner() {
    let db = TempDb::new("race");
    let stores: Vec<Arc<dyn StateStore>> = (0..4)
        .map(|_| Arc::new(SqliteStore::open(db.path()).unwrap()) as Arc<dyn StateStore>)
        .collect();
    support::check_one_winner(stores, "s").await;
}

#[tokio::test]
async fn state_and_fencing_survive_reopening_the_file() {
    let db = TempDb::new("reopen");
    {
        let first = SqliteStore::open(db.path()).unwrap();
        assert_eq!(first.claim("cart", "u1", "m1").await, Ok(Claim::Granted(1)));
        first.save("cart", "u1", 1, b"kept").await.unwrap();
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
        second.save("cart", "u1", 1, b"stale").await,
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
