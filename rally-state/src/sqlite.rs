//! A store in one SQLite file, shared by the members on one machine.

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};

use crate::store::{BoxFuture, Claim, Epoch, StateStore, StoreError, check_key, from_sql, to_sql};

/// How long a statement waits for another process's write lock before failing: far above a
/// single-row write, short enough that a wedged process is reported rather than waited on.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS rally_grains (
    kind     TEXT    NOT NULL,
    identity TEXT    NOT NULL,
    epoch    INTEGER NOT NULL,
    owner    TEXT    NOT NULL,
    active   INTEGER NOT NULL,
    state    BLOB,
    PRIMARY KEY (kind, identity)
) WITHOUT ROWID;
";

// Each statement decides on its own: the WHERE of the upsert or update is the compare, the
// SET the swap, RETURNING says whether it applied.
const CLAIM: &str = "
INSERT INTO rally_grains (kind, identity, epoch, owner, active) VALUES (?1, ?2, 1, ?3, 1)
ON CONFLICT (kind, identity) DO UPDATE
    SET epoch = epoch + 1, owner = excluded.owner, active = 1
    WHERE active = 0 OR owner = excluded.owner
RETURNING epoch";
const TAKE_OVER: &str = "
INSERT INTO rally_grains (kind, identity, epoch, owner, active) VALUES (?1, ?2, 1, ?3, 1)
ON CONFLICT (kind, identity) DO UPDATE
    SET epoch = epoch + 1, owner = excluded.owner, active = 1
    WHERE epoch = ?4 OR active = 0
RETURNING epoch";
const HOLDER: &str = "SELECT owner, epoch FROM rally_grains WHERE kind = ?1 AND identity = ?2";
const RELEASE: &str = "UPDATE rally_grains SET active = 0 WHERE kind = ?1 AND identity = ?2 AND epoch = ?3 AND active = 1";
const SAVE: &str = "UPDATE rally_grains SET state = ?4 WHERE kind = ?1 AND identity = ?2 AND epoch = ?3 AND active = 1";
const LOAD: &str = "SELECT state FROM rally_grains WHERE kind = ?1 AND identity = ?2";

/// A [`StateStore`] in one SQLite file (write-ahead log), shared by every member on the
/// machine that opens the same path: the zero-setup default. SQLite is compiled in.
///
/// # Example
///
/// ```
/// use rally::state::{Claim, SqliteStore, StateStore};
///
/// # #[tokio::main] async fn main() {
/// let path = std::env::temp_dir().join(format!("rally-doc-{}.db", std::process::id()));
/// let store = SqliteStore::open(&path).unwrap();
/// let Ok(Claim::Granted(epoch)) = store.claim("cart", "u1", "m1").await else { panic!() };
/// store.save("cart", "u1", epoch, b"state").await.unwrap();
/// // Another member on this machine opens the same file.
/// let other = SqliteStore::open(&path).unwrap();
/// assert_eq!(other.load("cart", "u1").await.unwrap().as_deref(), Some(&b"state"[..]));
/// # drop((store, other)); let _ = std::fs::remove_file(&path);
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct SqliteStore {
    connection: Arc<Mutex<Connection>>,
}

impl SqliteStore {
    /// Opens (creating if needed) the store at `path`.
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] if the file cannot be opened or the table created.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let connection = Connection::open(path).map_err(backend)?;
        connection.busy_timeout(BUSY_TIMEOUT).map_err(backend)?;
        // WAL lets readers in other processes go on during a write; NORMAL syncs at
        // checkpoints, which keeps every committed epoch across a process crash.
        connection
            .pragma_update(None, "journal_mode", "WAL")
            .map_err(backend)?;
        connection
            .pragma_update(None, "synchronous", "NORMAL")
            .map_err(backend)?;
        connection.execute_batch(SCHEMA).map_err(backend)?;
        Ok(Self {
            connection: Arc::new(Mutex::new(connection)),
        })
    }

    /// Runs `f` on the connection on a blocking thread (SQLite calls block).
    fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> BoxFuture<'static, Result<T, StoreError>> {
        let connection = Arc::clone(&self.connection);
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                // A statement that panicked leaves SQLite consistent (it rolls back itself).
                let connection = connection.lock().unwrap_or_else(PoisonError::into_inner);
                f(&connection)
            })
            .await
            .map_err(|e| StoreError::Backend(format!("sqlite task: {e}")))?
        })
    }

    fn claim_with(
        &self,
        kind: &str,
        identity: &str,
        owner: &str,
        from: Option<Epoch>,
    ) -> BoxFuture<'static, Result<Claim, StoreError>> {
        if let Err(e) = check_key(kind, identity) {
            return Box::pin(async move { Err(e) });
        }
        let (kind, identity, owner) = (kind.to_owned(), identity.to_owned(), owner.to_owned());
        self.run(move |c| {
            let granted: Option<i64> = match from {
                None => c
                    .query_row(CLAIM, params![kind, identity, owner], |row| row.get(0))
                    .optional(),
                Some(from) => c
                    .query_row(
                        TAKE_OVER,
                        params![kind, identity, owner, to_sql(from)?],
                        |row| row.get(0),
                    )
                    .optional(),
            }
            .map_err(backend)?;
            if let Some(epoch) = granted {
                return Ok(Claim::Granted(from_sql(epoch)));
            }
            let (owner, epoch): (String, i64) = c
                .query_row(HOLDER, params![kind, identity], |row| {
                    Ok((row.get(0)?, row.get(1)?))
                })
                .map_err(backend)?;
            Ok(Claim::Held {
                owner,
                epoch: from_sql(epoch),
            })
        })
    }
}

impl StateStore for SqliteStore {
    fn claim<'a>(
        &'a self,
        kind: &'a str,
        identity: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<Claim, StoreError>> {
        self.claim_with(kind, identity, owner, None)
    }

    fn take_over<'a>(
        &'a self,
        kind: &'a str,
        identity: &'a str,
        owner: &'a str,
        from: Epoch,
    ) -> BoxFuture<'a, Result<Claim, StoreError>> {
        self.claim_with(kind, identity, owner, Some(from))
    }

    fn release<'a>(
        &'a self,
        kind: &'a str,
        identity: &'a str,
        epoch: Epoch,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        if let Err(e) = check_key(kind, identity) {
            return Box::pin(async move { Err(e) });
        }
        let (kind, identity) = (kind.to_owned(), identity.to_owned());
        self.run(move |c| {
            let changed = c
                .execute(RELEASE, params![kind, identity, to_sql(epoch)?])
                .map_err(backend)?;
            fenced(changed, epoch)
        })
    }

    fn load<'a>(
        &'a self,
        kind: &'a str,
        identity: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>> {
        if let Err(e) = check_key(kind, identity) {
            return Box::pin(async move { Err(e) });
        }
        let (kind, identity) = (kind.to_owned(), identity.to_owned());
        self.run(move |c| {
            let state: Option<Option<Vec<u8>>> = c
                .query_row(LOAD, params![kind, identity], |row| row.get(0))
                .optional()
                .map_err(backend)?;
            Ok(state.flatten())
        })
    }

    fn save<'a>(
        &'a self,
        kind: &'a str,
        identity: &'a str,
        epoch: Epoch,
        state: &'a [u8],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        if let Err(e) = check_key(kind, identity) {
            return Box::pin(async move { Err(e) });
        }
        let (kind, identity, state) = (kind.to_owned(), identity.to_owned(), state.to_vec());
        self.run(move |c| {
            let changed = c
                .execute(SAVE, params![kind, identity, to_sql(epoch)?, state])
                .map_err(backend)?;
            fenced(changed, epoch)
        })
    }
}

fn backend(e: rusqlite::Error) -> StoreError {
    StoreError::Backend(format!("sqlite: {e}"))
}

/// One row changed: the compare held; none: the epoch was stale.
fn fenced(changed: usize, epoch: Epoch) -> Result<(), StoreError> {
    if changed == 1 {
        Ok(())
    } else {
        Err(StoreError::StaleEpoch { epoch })
    }
}
