//! A store in a PostgreSQL database, shared by members on many machines.

use tokio_postgres::{Client, NoTls, Statement};

use crate::store::{
    BoxFuture, Claim, Epoch, Fence, StateStore, StoreError, applied, check_key, check_scope,
    check_write, epoch_to_sql, from_sql, life_to_sql,
};

/// `state` is NULL for an identity fenced and never saved. The floor (`floor_scope`,
/// `floor_epoch`, `floor_life`) is the highest fence `fence` raised it to, under that scope
/// (NULL: never fenced); it sits on the identity's row so that a save and a fence lock the
/// same row (see [`SAVE`]).
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
    kind        TEXT   NOT NULL,
    identity    TEXT   NOT NULL,
    state       BYTEA,
    floor_scope TEXT,
    floor_epoch BIGINT NOT NULL DEFAULT 0,
    floor_life  BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (kind, identity)
)";

/// Connections that set up at once take turns (the set-up's transaction holds this lock until
/// it ends): two `CREATE TABLE IF NOT EXISTS` racing on an empty database can fail on a
/// duplicate key in PostgreSQL's catalog, and the migration below is not done twice. The key
/// is "rally" in ASCII, an arbitrary number other applications are unlikely to pick.
const SET_UP_LOCK: &str = "SELECT pg_advisory_xact_lock(491496384633)";

/// Whether `rally_state` has its floor columns (a Rally without fences made it without).
const FENCED: &str = "SELECT count(*) FROM information_schema.columns
    WHERE table_schema = current_schema() AND table_name = 'rally_state'
    AND column_name = 'floor_scope'";

/// Brings a `rally_state` made by a Rally without fences up to date, in place: adding a column
/// with a constant default rewrites no row, and dropping NOT NULL checks none.
const MIGRATE_STATE: &str = "ALTER TABLE rally_state
    ALTER COLUMN state DROP NOT NULL,
    ADD COLUMN IF NOT EXISTS floor_scope TEXT,
    ADD COLUMN IF NOT EXISTS floor_epoch BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS floor_life  BIGINT NOT NULL DEFAULT 0";

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

/// A save: two compares, both in the statement that writes, under READ COMMITTED.
///
/// **The lease.** Its row is share-locked by the statement: a takeover or a release waits for
/// this write to commit, and a write that waited for one of them reads the row again (READ
/// COMMITTED re-checks a locked row's newest version) and writes nothing.
///
/// **The floor** is on the identity's own row, which [`FENCE`] writes too, so the two always
/// lock the same row and take turns. With a row in place, `ON CONFLICT DO UPDATE` locks it
/// (waiting for a fence in progress to commit) and evaluates its `WHERE` on the row's newest
/// committed version, not on the statement's snapshot: a save whose snapshot was taken before
/// a fence committed still sees that fence's floor. With no row yet, the insert checks the
/// primary key against every row, committed or in progress, whatever its snapshot: it waits
/// for a fence inserting the row and then takes the conflict path above, and a fence meeting
/// the save's insert waits for the save's commit. Either way the one that commits second sees
/// the first: once a fence has committed (before it answers `Ok`), no save below its floor
/// commits after it. A floor kept anywhere but on the row the save writes (another table, say)
/// would be read from the save's snapshot, and a save racing a fence could commit after it.
const SAVE: &str = "
WITH lease AS (
    SELECT 1 FROM rally_leases
    WHERE kind = $1 AND scope = $2 AND epoch = $3 AND active
    FOR SHARE
)
INSERT INTO rally_state (kind, identity, state)
SELECT $1::text, $5::text, $6::bytea FROM lease
ON CONFLICT (kind, identity) DO UPDATE SET state = EXCLUDED.state
    WHERE rally_state.floor_scope IS DISTINCT FROM $2::text
       OR (rally_state.floor_epoch, rally_state.floor_life) <= ($3::bigint, $4::bigint)";

/// A fence: the lease compared as in [`SAVE`]; then the identity's row is inserted with no
/// state, or locked and its floor raised (or, from another scope, replaced) and never lowered.
/// The update applies whenever the lease is held, so one row changed says exactly that (a
/// floor already higher is left as it was, the row locked all the same).
const FENCE: &str = "
WITH lease AS (
    SELECT 1 FROM rally_leases
    WHERE kind = $1 AND scope = $2 AND epoch = $3 AND active
    FOR SHARE
)
INSERT INTO rally_state AS s (kind, identity, floor_scope, floor_epoch, floor_life)
SELECT $1::text, $5::text, $2::text, $3::bigint, $4::bigint FROM lease
ON CONFLICT (kind, identity) DO UPDATE SET
    floor_scope = EXCLUDED.floor_scope,
    floor_epoch = CASE WHEN s.floor_scope IS DISTINCT FROM EXCLUDED.floor_scope
            OR (s.floor_epoch, s.floor_life) < (EXCLUDED.floor_epoch, EXCLUDED.floor_life)
        THEN EXCLUDED.floor_epoch ELSE s.floor_epoch END,
    floor_life = CASE WHEN s.floor_scope IS DISTINCT FROM EXCLUDED.floor_scope
            OR (s.floor_epoch, s.floor_life) < (EXCLUDED.floor_epoch, EXCLUDED.floor_life)
        THEN EXCLUDED.floor_life ELSE s.floor_life END";
const LOAD: &str = "SELECT state FROM rally_state WHERE kind = $1 AND identity = $2";

/// A [`StateStore`] in a PostgreSQL database: for members on many machines, since an actor's
/// state must follow it to whichever member activates it next.
///
/// Every operation is one statement, its own transaction: between two operations a member
/// holds no lock in the database. A member stopped in the middle of one (SIGSTOP, a debugger)
/// delays at most the rows that statement locks, its own scope's lease and identity; every
/// other member's operations on other scopes go on. (Compare [`SqliteStore`](crate::SqliteStore),
/// where one write lock serves the whole machine.)
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
    statements: Statements,
}

/// The statements, prepared once per connection: each operation is then one round trip.
#[derive(Debug)]
struct Statements {
    claim: Statement,
    take_over: Statement,
    holder: Statement,
    release: Statement,
    save: Statement,
    fence: Statement,
    load: Statement,
}

impl PostgresStore {
    /// Connects (without TLS) with a `tokio-postgres` connection string, creates the tables if
    /// needed (or brings those of an older Rally up to date: the floor columns of
    /// `rally_state`, added in one transaction) and prepares the statements. The connection
    /// runs on a task of the current runtime.
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] if the server cannot be reached or the tables created or
    /// migrated.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the connection; a set-up in progress is rolled back by the
    /// server.
    pub async fn connect(config: &str) -> Result<Self, StoreError> {
        let (mut client, connection) = tokio_postgres::connect(config, NoTls)
            .await
            .map_err(backend)?;
        tokio::spawn(async move {
            // Ends when the client is dropped or the server goes away; every later call then
            // fails with a Backend error, so there is nothing more to report here.
            let _ = connection.await;
        });
        let set_up = client.transaction().await.map_err(backend)?;
        set_up.batch_execute(SET_UP_LOCK).await.map_err(backend)?;
        set_up.batch_execute(SCHEMA).await.map_err(backend)?;
        let fenced: i64 = set_up.query_one(FENCED, &[]).await.map_err(backend)?.get(0);
        if fenced == 0 {
            set_up.batch_execute(MIGRATE_STATE).await.map_err(backend)?;
        }
        set_up.commit().await.map_err(backend)?;
        let (claim, take_over, holder, release, save, fence, load) = tokio::try_join!(
            client.prepare(CLAIM),
            client.prepare(TAKE_OVER),
            client.prepare(HOLDER),
            client.prepare(RELEASE),
            client.prepare(SAVE),
            client.prepare(FENCE),
            client.prepare(LOAD),
        )
        .map_err(backend)?;
        Ok(Self {
            client,
            statements: Statements {
                claim,
                take_over,
                holder,
                release,
                save,
                fence,
                load,
            },
        })
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
                .query_opt(&self.statements.claim, &[&kind, &scope, &owner])
                .await
                .map_err(backend)?,
            Some(from) => self
                .client
                .query_opt(
                    &self.statements.take_over,
                    &[&kind, &scope, &owner, &epoch_to_sql(from)],
                )
                .await
                .map_err(backend)?,
        };
        if let Some(row) = granted {
            return Ok(Claim::Granted(from_sql(row.get(0))));
        }
        let row = self
            .client
            .query_one(&self.statements.holder, &[&kind, &scope])
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
                .execute(
                    &self.statements.release,
                    &[&kind, &scope, &epoch_to_sql(epoch)],
                )
                .await
                .map_err(backend)?;
            applied(changed, Fence { epoch, life: 0 })
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
                .query_opt(&self.statements.load, &[&kind, &identity])
                .await
                .map_err(backend)?;
            Ok(row.and_then(|row| row.get::<_, Option<Vec<u8>>>(0)))
        })
    }

    fn save<'a>(
        &'a self,
        kind: &'a str,
        scope: &'a str,
        fence: Fence,
        identity: &'a str,
        state: &'a [u8],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            check_write(kind, scope, fence, identity)?;
            let (epoch, life) = (epoch_to_sql(fence.epoch), life_to_sql(fence.life));
            let changed = self
                .client
                .execute(
                    &self.statements.save,
                    &[&kind, &scope, &epoch, &life, &identity, &state],
                )
                .await
                .map_err(backend)?;
            applied(changed, fence)
        })
    }

    fn fence<'a>(
        &'a self,
        kind: &'a str,
        scope: &'a str,
        fence: Fence,
        identity: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            check_write(kind, scope, fence, identity)?;
            let (epoch, life) = (epoch_to_sql(fence.epoch), life_to_sql(fence.life));
            let changed = self
                .client
                .execute(
                    &self.statements.fence,
                    &[&kind, &scope, &epoch, &life, &identity],
                )
                .await
                .map_err(backend)?;
            applied(changed, fence)
        })
    }
}

fn backend(e: tokio_postgres::Error) -> StoreError {
    StoreError::Backend(format!("postgres: {e}"))
}
