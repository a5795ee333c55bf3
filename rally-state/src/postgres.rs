//! A store in a PostgreSQL database, shared by members on many machines.

use tokio_postgres::{Client, NoTls};

use crate::store::{
    BoxFuture, Claim, Epoch, StateStore, StoreError, check_key, check_scope, from_sql, to_sql,
};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS rally_leases (
    kind   TEXT    NOT NULL,
    scope  TEXT    NOT NULL,
    epoch  BIGINT  NOT NULL,
    owner  TEXT    NOT NULL,
    active BOOLEAN NOT NULL,
    PRIMARY KEY (kind, scope)
);
CREATE TABLE IF NOT EXISTS rally_state (
    kind     TEXT  NOT NULL,
    identity TEXT  NOT NULL,
    state    BYTEA NOT NULL,
    PRIMARY KEY (kind, identity)
)";

// As in SQLite: the WHERE is the compare, the SET the swap, RETURNING says whether it applied.
const CLAIM: &str = "
INSERT INTO rally_leases (kind, scope, epoch, owner, active) VALUES ($1, $2, 1, $3, TRUE)
ON CONFLICT (kind, scope) DO UPDATE
    SET epoch = rally_leases.epoch + 1, owner = EXCLUDED.owner, active = TRUE
    WHERE NOT rally_leases.active OR rally_leases.owner = EXCLUDED.owner
RETURNING epoch";
const TAKE_OVER: &str = "
INSERT INTO rally_leases (kind, scope, epoch, owner, active) VALUES ($1, $2, 1, $3, TRUE)
ON CONFLICT (kind, scope) DO UPDATE
    SET epoch = rally_leases.epoch + 1, owner = EXCLUDED.owner, active = TRUE
    WHERE rally_leases.epoch = $4 OR NOT rally_leases.active
RETURNING epoch";
const HOLDER: &str = "SELECT owner, epoch FROM rally_leases WHERE kind = $1 AND scope = $2";
const RELEASE: &str = "UPDATE rally_leases SET active = FALSE \
     WHERE kind = $1 AND scope = $2 AND epoch = $3 AND active";
// The lease's row is the compare, share-locked by the statement that writes: a takeover or a
// release waits for this write to commit, and a write that waited for one of them reads the
// row again (READ COMMITTED re-checks a locked row's new version) and writes nothing.
const SAVE: &str = "
WITH lease AS (
    SELECT 1 FROM rally_leases
    WHERE kind = $1 AND scope = $2 AND epoch = $3 AND active
    FOR SHARE
)
INSERT INTO rally_state (kind, identity, state)
SELECT $1::text, $4::text, $5::bytea FROM lease
ON CONFLICT (kind, identity) DO UPDATE SET state = EXCLUDED.state";
const LOAD: &str = "SELECT state FROM rally_state WHERE kind = $1 AND identity = $2";

/// A [`StateStore`] in a PostgreSQL database: for members on many machines, since an actor's
/// state must follow it to whichever member activates it next.
///
/// # Example
///
/// ```no_run
/// use rally::state::{PostgresStore, StateStore};
///
/// # #[tokio::main] async fn main() {
/// let store = PostgresStore::connect("host=127.0.0.1 port=5432 user=rally dbname=rally")
///     .await
///     .unwrap();
/// let state = store.load("cart", "user-42").await.unwrap();
/// # }
/// ```
#[derive(Debug)]
pub struct PostgresStore {
    client: Client,
}

impl PostgresStore {
    /// Connects (without TLS) with a `tokio-postgres` connection string and creates the table
    /// if needed. The connection runs on a task of the current runtime.
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] if the server cannot be reached or the table created.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropped before it returns, the connection is closed; the table, if it was
    /// already created, stays (creating it is idempotent).
    pub async fn connect(config: &str) -> Result<Self, StoreError> {
        let (client, connection) = tokio_postgres::connect(config, NoTls)
            .await
            .map_err(backend)?;
        tokio::spawn(async move {
            // Ends when the client is dropped or the server goes away; every later call then
            // fails with a Backend error, so there is nothing more to report here.
            let _ = connection.await;
        });
        client.batch_execute(SCHEMA).await.map_err(backend)?;
        Ok(Self { client })
    }

    async fn claim_with(
        &self,
        kind: &str,
        scope: &str,
        owner: &str,
        from: Option<Epoch>,
    ) -> Result<Claim, StoreError> {
        check_scope(kind, scope)?;
        let granted = match from {
            None => self
                .client
                .query_opt(CLAIM, &[&kind, &scope, &owner])
                .await
                .map_err(backend)?,
            Some(from) => self
                .client
                .query_opt(TAKE_OVER, &[&kind, &scope, &owner, &to_sql(from)?])
                .await
                .map_err(backend)?,
        };
        if let Some(row) = granted {
            return Ok(Claim::Granted(from_sql(row.get(0))));
        }
        let row = self
            .client
            .query_one(HOLDER, &[&kind, &scope])
            .await
            .map_err(backend)?;
        Ok(Claim::Held {
            owner: row.get(0),
            epoch: from_sql(row.get(1)),
        })
    }
}

impl StateStore for PostgresStore {
    fn claim<'a>(
        &'a self,
        kind: &'a str,
        scope: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<Claim, StoreError>> {
        Box::pin(self.claim_with(kind, scope, owner, None))
    }

    fn take_over<'a>(
        &'a self,
        kind: &'a str,
        scope: &'a str,
        owner: &'a str,
        from: Epoch,
    ) -> BoxFuture<'a, Result<Claim, StoreError>> {
        Box::pin(self.claim_with(kind, scope, owner, Some(from)))
    }

    fn release<'a>(
        &'a self,
        kind: &'a str,
        scope: &'a str,
        epoch: Epoch,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            check_scope(kind, scope)?;
            let changed = self
                .client
                .execute(RELEASE, &[&kind, &scope, &to_sql(epoch)?])
                .await
                .map_err(backend)?;
            fenced(changed, epoch)
        })
    }

    fn load<'a>(
        &'a self,
        kind: &'a str,
        identity: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>> {
        Box::pin(async move {
            check_key(kind, identity)?;
            let row = self
                .client
                .query_opt(LOAD, &[&kind, &identity])
                .await
                .map_err(backend)?;
            Ok(row.map(|row| row.get::<_, Vec<u8>>(0)))
        })
    }

    fn save<'a>(
        &'a self,
        kind: &'a str,
        scope: &'a str,
        epoch: Epoch,
        identity: &'a str,
        state: &'a [u8],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            check_scope(kind, scope)?;
            check_key(kind, identity)?;
            let changed = self
                .client
                .execute(SAVE, &[&kind, &scope, &to_sql(epoch)?, &identity, &state])
                .await
                .map_err(backend)?;
            fenced(changed, epoch)
        })
    }
}

fn backend(e: tokio_postgres::Error) -> StoreError {
    StoreError::Backend(format!("postgres: {e}"))
}

fn fenced(changed: u64, epoch: Epoch) -> Result<(), StoreError> {
    if changed == 1 {
        Ok(())
    } else {
        Err(StoreError::StaleEpoch { epoch })
    }
}
