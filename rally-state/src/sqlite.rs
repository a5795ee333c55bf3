//! A store in one SQLite file, shared by the members on one machine.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rusqlite::{Connection, ErrorCode, OptionalExtension, params};
use tokio::sync::{mpsc, oneshot};

use crate::store::{
    BoxFuture, Claim, Epoch, Fence, StateStore, StoreError, applied, check_key, check_scope,
    check_write, epoch_to_sql, from_sql, life_to_sql,
};
use rally_actor::sync::Mutex;

/// How long a statement waits for another process's write lock before failing: far above a
/// single-row write, short enough that a wedged process is reported rather than waited on.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The first waits for another process's write lock are short: that process holds it for one
/// batch's commit, tens to hundreds of microseconds. (SQLite's own busy timeout sleeps 1, 2,
/// 5, 10 ms and longer between tries, so a claim that met the other member's commit waited
/// a millisecond or more for a lock free long before.)
const BUSY_FAST_TRIES: u32 = 20;
const BUSY_FAST_PAUSE: Duration = Duration::from_micros(50);
/// Past the fast tries, one try a millisecond until [`BUSY_TIMEOUT`].
const BUSY_SLOW_PAUSE: Duration = Duration::from_millis(1);

thread_local! {
    /// Set while an operation runs on its caller's thread (see [`SqliteStore::run`]): there a
    /// lock another process holds is not waited for, the operation goes to the store's thread.
    static NO_WAIT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether to try again after `tries` failed tries for a lock another process holds (SQLite's
/// busy handler; it sleeps before saying yes). Gives up after about [`BUSY_TIMEOUT`], or at
/// once on a caller's thread.
fn busy_wait(tries: i32) -> bool {
    if NO_WAIT.get() {
        return false;
    }
    let tries = u32::try_from(tries).unwrap_or(0);
    let slow_tries =
        u32::try_from(BUSY_TIMEOUT.as_micros() / BUSY_SLOW_PAUSE.as_micros()).unwrap_or(u32::MAX);
    if tries < BUSY_FAST_TRIES {
        std::thread::sleep(BUSY_FAST_PAUSE);
        true
    } else if tries - BUSY_FAST_TRIES < slow_tries {
        std::thread::sleep(BUSY_SLOW_PAUSE);
        true
    } else {
        false
    }
}

/// How the store tells a lone operation from one among many (see [`SqliteStore::run`]): each
/// operation, as it starts, notes how many operations are in flight (its own included), in
/// sixteenths, and the largest such count decays by an eighth per operation. An operation runs
/// on its caller's thread only while that decayed peak is at most [`INLINE_MAX_PEAK`]: no
/// operation overlapped another in the last few. Under load operations overlap all the time,
/// and they queue for the store's thread, where they share commits; operations that arrive one
/// at a time (a lone activation) skip the hand-off to that thread and back. How long ago the
/// last transaction ended does not tell the two apart: a lone caller's next operation comes
/// one network round trip after its last commit, as soon as a busy caller's does.
const PEAK_SCALE: u64 = 16;
/// One operation in flight and a quarter: four lone operations after two overlapped.
const INLINE_MAX_PEAK: u64 = PEAK_SCALE + PEAK_SCALE / 4;

/// Frames in the write-ahead log (4 KiB pages: 16 MiB) past which a checkpoint also restarts
/// the log (see [`checkpoints`]). The restart holds writers back while it copies the frames
/// committed during the passive pass before it and syncs the files.
const RESTART_AFTER_FRAMES: i64 = 4096;

/// How long the checkpointer lets writes gather after the first commit it is told of before it
/// copies the write-ahead log into the database file (see [`checkpoints`]).
const CHECKPOINT_PERIOD: Duration = Duration::from_millis(100);

/// Turns on WAL and creates the tables, or brings those of an older Rally up to date (see
/// [`create_or_migrate`]). WAL lets readers in other processes go on during a write; NORMAL
/// syncs at checkpoints, which keeps every committed epoch across a process crash. Processes
/// that open a new file at the same moment race to change its journal mode, and SQLite refuses
/// the losers with "database is locked" without waiting on the busy handler: the setup is tried
/// again, for at most `BUSY_TIMEOUT`.
fn set_up(connection: &Connection) -> Result<(), StoreError> {
    let deadline = Instant::now() + BUSY_TIMEOUT;
    loop {
        let attempt = connection
            .pragma_update(None, "journal_mode", "WAL")
            .and_then(|()| connection.pragma_update(None, "synchronous", "NORMAL"))
            .and_then(|()| create_or_migrate(connection));
        match attempt {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if matches!(e.code, ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
                    && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            other => return other.map_err(backend),
        }
    }
}

/// Creates the tables if they are missing, and rebuilds a `rally_state` made by a Rally
/// without fences (its `state` NOT NULL, no floor columns), all in one write transaction: every
/// process that opens the file meets either the old table or the new one, never half of a
/// migration, and the second of two processes migrating at once finds the work done. (SQLite
/// cannot drop a NOT NULL constraint in place, hence the copy; the rows keep their state and
/// get no floor.)
fn create_or_migrate(c: &Connection) -> rusqlite::Result<()> {
    c.execute_batch("BEGIN IMMEDIATE")?;
    let done = c.execute_batch(SCHEMA).and_then(|()| {
        let fenced: i64 = c.query_row(
            "SELECT count(*) FROM pragma_table_info('rally_state') WHERE name = 'floor_scope'",
            [],
            |row| row.get(0),
        )?;
        if fenced == 0 {
            c.execute_batch(MIGRATE_STATE)
        } else {
            Ok(())
        }
    });
    match done {
        Ok(()) => c.execute_batch("COMMIT"),
        Err(e) => {
            let _ = c.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

/// The columns of `rally_state`. `state` is NULL for an identity fenced and never saved. The
/// floor (`floor_scope`, `floor_epoch`, `floor_life`) is the highest fence `fence` raised it
/// to, under that scope (NULL: never fenced); it sits on the identity's row so that a save and
/// a fence write the same row.
macro_rules! state_columns {
    () => {
        "(
    kind        TEXT    NOT NULL,
    identity    TEXT    NOT NULL,
    state       BLOB,
    floor_scope TEXT,
    floor_epoch INTEGER NOT NULL DEFAULT 0,
    floor_life  INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (kind, identity)
) WITHOUT ROWID"
    };
}

const SCHEMA: &str = concat!(
    "
CREATE TABLE IF NOT EXISTS rally_leases (
    kind   TEXT    NOT NULL,
    scope  TEXT    NOT NULL,
    epoch  INTEGER NOT NULL,
    owner  TEXT    NOT NULL,
    active INTEGER NOT NULL,
    PRIMARY KEY (kind, scope)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rally_state ",
    state_columns!(),
    ";"
);

/// Rebuilds a `rally_state` without floor columns (see [`create_or_migrate`]).
const MIGRATE_STATE: &str = concat!(
    "CREATE TABLE rally_state_fenced ",
    state_columns!(),
    ";
INSERT INTO rally_state_fenced (kind, identity, state)
    SELECT kind, identity, state FROM rally_state;
DROP TABLE rally_state;
ALTER TABLE rally_state_fenced RENAME TO rally_state;"
);

// Each statement decides on its own: the WHERE of the upsert or update is the compare, the
// SET the swap, the count of rows it changed says whether it applied. (A claim then reads the
// row it decided on, in the same write transaction; `RETURNING` would do both in one statement
// but costs more: SQLite builds an ephemeral table for the returned rows of every execution.)
const CLAIM: &str = "
INSERT INTO rally_leases (kind, scope, epoch, owner, active) VALUES (?1, ?2, 1, ?3, 1)
ON CONFLICT (kind, scope) DO UPDATE
    SET epoch = epoch + 1, owner = excluded.owner, active = 1
    WHERE active = 0 OR owner = excluded.owner";
const CLAIM_NEW: &str = "
INSERT OR IGNORE INTO rally_leases (kind, scope, epoch, owner, active)
VALUES (?1, ?2, 1, ?3, 1)";
const TAKE_OVER: &str = "
INSERT INTO rally_leases (kind, scope, epoch, owner, active) VALUES (?1, ?2, 1, ?3, 1)
ON CONFLICT (kind, scope) DO UPDATE
    SET epoch = epoch + 1, owner = excluded.owner, active = 1
    WHERE epoch = ?4 OR active = 0";
const HOLDER: &str = "SELECT owner, epoch FROM rally_leases WHERE kind = ?1 AND scope = ?2";
const RELEASE: &str = "UPDATE rally_leases SET active = 0 WHERE kind = ?1 AND scope = ?2 AND epoch = ?3 AND active = 1";
// The lease's row is the first compare: no row comes out of the SELECT unless the epoch is
// held, and then nothing is written. The floor is the second: an existing row is replaced
// only if the fence is not below a floor of the same scope. (One writer at a time holds the
// file, so a save and a fence never interleave: whichever commits first, the other sees.)
const SAVE: &str = "
INSERT INTO rally_state (kind, identity, state)
SELECT ?1, ?5, ?6 FROM rally_leases WHERE kind = ?1 AND scope = ?2 AND epoch = ?3 AND active = 1
ON CONFLICT (kind, identity) DO UPDATE SET state = excluded.state
    WHERE floor_scope IS NOT ?2 OR (floor_epoch, floor_life) <= (?3, ?4)";
// The same compare on the lease; then the floor is raised (or, from another scope, replaced)
// and never lowered. The update applies whenever the lease is held, so one row changed says
// exactly that (a floor already higher is left as it was).
const FENCE: &str = "
INSERT INTO rally_state (kind, identity, floor_scope, floor_epoch, floor_life)
SELECT ?1, ?5, ?2, ?3, ?4 FROM rally_leases
    WHERE kind = ?1 AND scope = ?2 AND epoch = ?3 AND active = 1
ON CONFLICT (kind, identity) DO UPDATE SET
    floor_scope = excluded.floor_scope,
    floor_epoch = CASE WHEN floor_scope IS NOT excluded.floor_scope
            OR (floor_epoch, floor_life) < (excluded.floor_epoch, excluded.floor_life)
        THEN excluded.floor_epoch ELSE floor_epoch END,
    floor_life = CASE WHEN floor_scope IS NOT excluded.floor_scope
            OR (floor_epoch, floor_life) < (excluded.floor_epoch, excluded.floor_life)
        THEN excluded.floor_life ELSE floor_life END";
const LOAD: &str = "SELECT state FROM rally_state WHERE kind = ?1 AND identity = ?2";

/// A [`StateStore`] in one SQLite file (write-ahead log), shared by every member on the
/// machine that opens the same path: the zero-setup default. SQLite is compiled in.
///
/// **Durability.** An operation is answered only after the transaction that ran it committed,
/// and a commit is in the write-ahead log when it returns (`synchronous = NORMAL`): a granted
/// epoch or a saved state survives the crash of any process, the member's own included. It is
/// not synced to the disk at every commit, only at checkpoints (at most every 100 ms while
/// there are writes), so a power loss or an operating-system crash may lose the commits since
/// the last checkpoint (every member on the machine stops with it). For members on many
/// machines, or state that must outlive the machine, use `PostgresStore`.
///
/// **One write lock for the machine.** SQLite lets one connection write the file at a time, so
/// every member on the machine waits while one of them holds the write lock. This store holds
/// it only to run its statements and commit: no `.await`, no callback, no user code and no
/// channel send runs inside a write transaction (answers go out after the commit), and loads
/// take no write lock at all. [`stats`](Self::stats) measures how long it was held: with 2
/// member processes of 64 busy tasks each on a 2-core machine (the example
/// `sqlite_write_lock`; 2026-11-27, load average about 5), a median of 100 µs per transaction
/// (35 operations share one), 0.3 ms at the 99th percentile, 8–12 ms at the longest (a thread
/// preempted while it held the lock); 7 µs for a lone operation. A checkpoint that restarts
/// the write-ahead log (once it passed 16 MiB) holds it too, up to tens of milliseconds.
///
/// **A stopped member stalls the machine's writes.** A member process stopped (SIGSTOP, a
/// debugger, a frozen virtual machine) at an instant it holds the lock keeps it for as long as
/// it is stopped: every write of every member on the machine (claims, takeovers, releases,
/// saves, fences) waits meanwhile and fails with [`StoreError::Backend`] ("database is
/// locked") after 5 s, so no identity can be activated and no state saved on the machine until
/// it resumes or is killed; loads go on. Nothing is lost or half-written: the stopped member's
/// transaction commits when it resumes, or vanishes if it is killed. When a stopped member
/// must not stall the others, use `PostgresStore`, where such a member holds no lock between
/// its operations and delays at most its own scopes.
///
/// # Example
///
/// ```
/// use rally::state::{Claim, Fence, SqliteStore, StateStore};
///
/// # #[tokio::main] async fn main() {
/// let path = std::env::temp_dir().join(format!("rally-doc-{}.db", std::process::id()));
/// let store = SqliteStore::open(&path).unwrap();
/// let Ok(Claim::Granted(epoch)) = store.claim("cart", "#5", "m1").await else { panic!() };
/// store.save("cart", "#5", Fence { epoch, life: 0 }, "u1", b"state").await.unwrap();
/// // Another member on this machine opens the same file.
/// let other = SqliteStore::open(&path).unwrap();
/// assert_eq!(other.load("cart", "u1").await.unwrap().as_deref(), Some(&b"state"[..]));
/// // Two write transactions so far (the claim's and the save's); the load took no write lock.
/// assert_eq!(store.stats().transactions(), 2);
/// # drop((store, other)); let _ = std::fs::remove_file(&path);
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct SqliteStore {
    jobs: mpsc::UnboundedSender<Job>,
    shared: Arc<Shared>,
}

/// What the handles and the store's thread share.
struct Shared {
    /// The connection that writes: the store's thread holds it for a batch; a caller whose
    /// operation comes alone runs it with the connection on its own thread.
    writer: Mutex<Connection>,
    /// What the write transactions held the write lock for (apart from `writer`, so that
    /// reading it never waits for a transaction).
    holds: Mutex<Holds>,
    /// The connection that loads, on the caller's thread, outside any write transaction.
    reader: Mutex<Connection>,
    /// Operations started and not answered yet, on a caller's thread or the store's.
    in_flight: AtomicUsize,
    /// The decayed peak of `in_flight`, in sixteenths (see [`INLINE_MAX_PEAK`]). A hint: two
    /// operations that start at the same instant may each miss the other's update.
    peak: AtomicU64,
    /// Tells the checkpointer (without waiting) that a transaction committed.
    committed: std::sync::mpsc::SyncSender<()>,
    /// What the checkpointer's restarts held the write lock for.
    restarts: Arc<Restarts>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("in_flight", &self.in_flight.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// The longest hold [`Holds`] tells apart, in nanoseconds (an hour); longer ones count as an
/// hour. Two significant digits (1%) over this range take about 40 KiB.
const HOLD_BOUND_NS: u64 = 3_600_000_000_000;

/// What the write transactions held the write lock for.
struct Holds {
    transactions: u64,
    operations: u64,
    /// Nanoseconds from `BEGIN IMMEDIATE` taking the lock to `COMMIT` releasing it.
    histogram: Histogram<u64>,
}

impl Holds {
    fn new() -> Self {
        Self {
            transactions: 0,
            operations: 0,
            histogram: Histogram::new_with_bounds(1, HOLD_BOUND_NS, 2)
                .expect("1 ns to an hour at 2 significant digits are valid bounds"),
        }
    }
}

/// Takes the file's write lock (`BEGIN IMMEDIATE`); when it was taken.
fn begin(connection: &Connection) -> rusqlite::Result<Instant> {
    run_cached(connection, "BEGIN IMMEDIATE")?;
    Ok(Instant::now())
}

/// Commits the open transaction of `operations` operations (rolls it back if that fails),
/// notes how long the lock was held since `locked`, and tells the checkpointer.
fn commit(
    connection: &Connection,
    shared: &Shared,
    locked: Instant,
    operations: usize,
) -> Result<(), StoreError> {
    let committed = run_cached(connection, "COMMIT").map_err(backend);
    if committed.is_err() {
        let _ = run_cached(connection, "ROLLBACK");
    }
    let held = u64::try_from(locked.elapsed().as_nanos()).unwrap_or(u64::MAX);
    {
        let mut holds = shared.holds.lock();
        holds.transactions += 1;
        holds.operations += u64::try_from(operations).unwrap_or(u64::MAX);
        holds.histogram.saturating_record(held);
    }
    if committed.is_ok() {
        // Full: the checkpointer has been told already.
        let _ = shared.committed.try_send(());
    }
    committed
}

/// The checkpointer's restarts (see [`checkpoints`]): how many, and the longest in nanoseconds.
#[derive(Debug, Default)]
struct Restarts {
    count: AtomicU64,
    longest: AtomicU64,
}

/// How long a [`SqliteStore`] (every clone of it) held the database file's write lock, which
/// every member on the machine shares: one sample per write transaction, from the moment
/// `BEGIN IMMEDIATE` took the lock to the moment `COMMIT` released it. A transaction is one
/// operation run alone on its caller's thread, or a batch of up to 256 on the store's thread.
/// The checkpointer's restarts, which also hold the lock (rarely: once the log passed 16 MiB),
/// are counted apart.
///
/// # Example
///
/// ```
/// use rally::state::{SqliteStore, StateStore};
///
/// # #[tokio::main] async fn main() {
/// # let path = std::env::temp_dir().join(format!("rally-doc-stats-{}.db", std::process::id()));
/// let store = SqliteStore::open(&path).unwrap();
/// store.claim("cart", "#1", "m1").await.unwrap();
/// let stats = store.stats();
/// assert_eq!((stats.transactions(), stats.operations()), (1, 1));
/// assert!(stats.hold_quantile(0.5) <= stats.longest_hold());
/// # drop(store); let _ = std::fs::remove_file(&path);
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct SqliteStats {
    transactions: u64,
    operations: u64,
    hold: Histogram<u64>,
    restarts: u64,
    longest_restart: Duration,
}

impl SqliteStats {
    /// Write transactions committed or rolled back.
    pub fn transactions(&self) -> u64 {
        self.transactions
    }

    /// Operations those transactions ran (claims, takeovers, releases, saves, fences; loads
    /// run outside them).
    pub fn operations(&self) -> u64 {
        self.operations
    }

    /// The hold time at `quantile` (0.0 to 1.0) of the transactions, to two significant
    /// digits; zero before any.
    pub fn hold_quantile(&self, quantile: f64) -> Duration {
        Duration::from_nanos(self.hold.value_at_quantile(quantile))
    }

    /// The longest hold of a transaction.
    pub fn longest_hold(&self) -> Duration {
        Duration::from_nanos(self.hold.max())
    }

    /// Checkpoints that restarted the write-ahead log (each holds the write lock while it
    /// copies the last frames and syncs the file).
    pub fn checkpoint_restarts(&self) -> u64 {
        self.restarts
    }

    /// The longest of those restarts, from asking for the lock to releasing it.
    pub fn longest_checkpoint_restart(&self) -> Duration {
        self.longest_restart
    }
}

/// One operation for the store's thread: run against the connection inside the batch's
/// transaction; its result is handed back only after that transaction committed. Only this
/// module makes jobs, each one of the store's statements: no user code runs inside a write
/// transaction.
type Job = Box<dyn FnOnce(&Connection) -> Box<dyn FnOnce(Result<(), StoreError>) + Send> + Send>;

/// The most operations one transaction carries (a bound on how long one commit holds the
/// file's write lock, which the members on this machine share).
const MAX_BATCH: usize = 256;

impl SqliteStore {
    /// Opens (creating if needed) the store at `path`, bringing a file written by an older
    /// Rally up to date (the floor columns of `rally_state`, added in one transaction).
    ///
    /// The writing connection is shared by the callers and a thread of the store's own. While
    /// operations come one at a time (none of the last few overlapped another), the connection
    /// is free and so is the file's write lock, an operation runs in a transaction of its own on
    /// the caller's thread (tens of microseconds: one activation arriving alone skips the
    /// hand-off to another thread and back). Otherwise it queues for the store's thread, which
    /// takes every operation waiting (up to 256) and runs them in one transaction, so one commit
    /// serves as many activations as arrived while the previous one ran, and a lone operation
    /// waits for nothing (no timer); a caller's thread never waits for another process's lock.
    /// Each operation is still one compare-and-set statement: where it runs and how many share a
    /// commit change nothing else. Loads run on the caller's thread on a second connection, in a
    /// read transaction of their own, which never waits for a writer. A third thread copies the
    /// write-ahead log into the file (a passive checkpoint, at most every 100 ms while there are
    /// writes), so no commit waits for that copy and its fsyncs; the store's thread tries a lock
    /// held by another process's commit again every 50 µs at first, then every millisecond, for
    /// up to 5 s.
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] if the file cannot be opened or the tables created or migrated.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref();
        let connection = Connection::open(path).map_err(backend)?;
        connection.busy_handler(Some(busy_wait)).map_err(backend)?;
        set_up(&connection)?;
        // Checkpoints run on a thread of their own (below), not in the commit that crossed
        // SQLite's threshold: that commit's operations would wait for the copy and its fsyncs.
        connection
            .pragma_update(None, "wal_autocheckpoint", 0)
            .map_err(backend)?;
        let reader = Connection::open(path).map_err(backend)?;
        reader.busy_handler(Some(busy_wait)).map_err(backend)?;
        reader
            .pragma_update(None, "query_only", true)
            .map_err(backend)?;
        let checkpointer = Connection::open(path).map_err(backend)?;
        checkpointer
            .busy_handler(Some(busy_wait))
            .map_err(backend)?;
        let restarts = Arc::new(Restarts::default());
        let (committed, commits) = std::sync::mpsc::sync_channel(1);
        let noted = Arc::clone(&restarts);
        std::thread::Builder::new()
            .name("rally-sqlite-checkpoint".into())
            .spawn(move || checkpoints(&checkpointer, &commits, &noted))
            .map_err(|e| StoreError::Backend(format!("sqlite thread: {e}")))?;
        let shared = Arc::new(Shared {
            writer: Mutex::new(connection),
            holds: Mutex::new(Holds::new()),
            reader: Mutex::new(reader),
            in_flight: AtomicUsize::new(0),
            peak: AtomicU64::new(0),
            committed,
            restarts,
        });
        let (jobs, queue) = mpsc::unbounded_channel();
        let served = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("rally-sqlite".into())
            .spawn(move || serve(&served, queue))
            .map_err(|e| StoreError::Backend(format!("sqlite thread: {e}")))?;
        Ok(Self { jobs, shared })
    }

    /// How long this store's write transactions held the file's write lock so far.
    pub fn stats(&self) -> SqliteStats {
        let holds = self.shared.holds.lock();
        SqliteStats {
            transactions: holds.transactions,
            operations: holds.operations,
            hold: holds.histogram.clone(),
            restarts: self.shared.restarts.count.load(Ordering::Relaxed),
            longest_restart: Duration::from_nanos(
                self.shared.restarts.longest.load(Ordering::Relaxed),
            ),
        }
    }

    /// Runs `f` in a write transaction and answers once that transaction committed: on the
    /// caller's thread if operations come one at a time and the connection and the write lock
    /// are free at once; otherwise queued for the store's thread.
    fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> BoxFuture<'static, Result<T, StoreError>> {
        let in_flight = self.shared.in_flight.fetch_add(1, Ordering::AcqRel) + 1;
        let f = match self.run_here(in_flight, f) {
            Ok(result) => {
                self.shared.in_flight.fetch_sub(1, Ordering::AcqRel);
                return Box::pin(std::future::ready(result));
            }
            Err(f) => f,
        };
        self.queue(f)
    }

    /// Queues `f` for the store's thread (see [`serve`]).
    fn queue<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> BoxFuture<'static, Result<T, StoreError>> {
        let (reply, answer) = oneshot::channel();
        let job: Job = Box::new(move |connection| {
            let result = f(connection);
            Box::new(move |committed: Result<(), StoreError>| {
                let _ = reply.send(committed.and(result));
            })
        });
        let queued = self.jobs.send(job).is_ok();
        if !queued {
            self.shared.in_flight.fetch_sub(1, Ordering::AcqRel);
        }
        Box::pin(async move {
            if !queued {
                return Err(StoreError::Backend("sqlite thread: stopped".into()));
            }
            answer
                .await
                .map_err(|_| StoreError::Backend("sqlite thread: stopped".into()))?
        })
    }

    /// Runs `f` in a transaction of its own on this thread if operations come one at a time
    /// (`in_flight`, this one included, joins the decayed peak, which must stay at most
    /// [`INLINE_MAX_PEAK`]: under load operations queue for the store's thread to share its
    /// commits, and none waits behind this one), the connection is free and so is the file's
    /// write lock (no wait for another process on a caller's thread); gives `f` back otherwise.
    fn run_here<T, F>(&self, in_flight: usize, f: F) -> Result<Result<T, StoreError>, F>
    where
        F: FnOnce(&Connection) -> Result<T, StoreError>,
    {
        if !one_at_a_time(&self.shared.peak, in_flight) {
            return Err(f);
        }
        let Some(writer) = self.shared.writer.try_lock() else {
            return Err(f);
        };
        NO_WAIT.set(true);
        let began = begin(&writer);
        NO_WAIT.set(false);
        let locked = match began {
            Ok(locked) => locked,
            Err(rusqlite::Error::SqliteFailure(e, _))
                if matches!(e.code, ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) =>
            {
                return Err(f);
            }
            Err(e) => return Ok(Err(backend(e))),
        };
        let result = f(&writer);
        Ok(commit(&writer, &self.shared, locked, 1).and(result))
    }

    /// Checks the key (`checked`), then runs `f` in a write transaction with owned copies of
    /// it (see [`run`](Self::run)).
    fn run_keyed<T: Send + 'static>(
        &self,
        kind: &str,
        key: &str,
        checked: Result<(), StoreError>,
        f: impl FnOnce(&Connection, String, String) -> Result<T, StoreError> + Send + 'static,
    ) -> BoxFuture<'static, Result<T, StoreError>> {
        if let Err(e) = checked {
            return Box::pin(async move { Err(e) });
        }
        let (kind, key) = (kind.to_owned(), key.to_owned());
        self.run(move |c| f(c, kind, key))
    }

    fn claim_with(
        &self,
        kind: &str,
        scope: &str,
        owner: &str,
        from: Option<Epoch>,
    ) -> BoxFuture<'static, Result<Claim, StoreError>> {
        let owner = owner.to_owned();
        let checked = check_scope(kind, scope);
        self.run_keyed(kind, scope, checked, move |c, kind, scope| {
            // A scope never claimed before (rows are never deleted) gets the first epoch,
            // with no read-back.
            if from.is_none() && execute(c, CLAIM_NEW, params![kind, scope, owner])? == 1 {
                return Ok(Claim::Granted(1));
            }
            let changed = match from {
                None => execute(c, CLAIM, params![kind, scope, owner])?,
                Some(from) => execute(
                    c,
                    TAKE_OVER,
                    params![kind, scope, owner, epoch_to_sql(from)],
                )?,
            };
            // The row the upsert decided on, read under the same write lock: the epoch it
            // granted (one row changed), or the holder it left in place (none).
            let (owner, epoch): (String, i64) = c
                .prepare_cached(HOLDER)
                .and_then(|mut statement| {
                    statement.query_row(params![kind, scope], |row| Ok((row.get(0)?, row.get(1)?)))
                })
                .map_err(backend)?;
            let epoch = from_sql(epoch);
            Ok(if changed == 1 {
                Claim::Granted(epoch)
            } else {
                Claim::Held { owner, epoch }
            })
        })
    }

    /// Loads on the caller's thread with the reading connection, in a read transaction of its
    /// own (WAL: it sees every commit before it and never waits for a writer). `None` if the
    /// file is busy all the same (a checkpoint restarting the log, a recovery): then the load
    /// queues for the store's thread, which waits.
    fn load_here(&self, kind: &str, identity: &str) -> Option<Result<Option<Vec<u8>>, StoreError>> {
        let reader = self.shared.reader.lock();
        NO_WAIT.set(true);
        let loaded = load_with(&reader, kind, identity);
        NO_WAIT.set(false);
        match loaded {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if matches!(e.code, ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) =>
            {
                None
            }
            other => Some(other.map_err(backend)),
        }
    }
}

/// The state of `identity`: none if it has no row or only a floor (a NULL state).
fn load_with(c: &Connection, kind: &str, identity: &str) -> rusqlite::Result<Option<Vec<u8>>> {
    let state: Option<Option<Vec<u8>>> = c
        .prepare_cached(LOAD)?
        .query_row(params![kind, identity], |row| row.get(0))
        .optional()?;
    Ok(state.flatten())
}

/// Notes in the decayed `peak` an operation that starts with `in_flight` operations in flight
/// (its own included); whether operations come one at a time (see [`INLINE_MAX_PEAK`]).
fn one_at_a_time(peak: &AtomicU64, in_flight: usize) -> bool {
    let now = u64::try_from(in_flight)
        .unwrap_or(u64::MAX)
        .saturating_mul(PEAK_SCALE);
    let decayed = peak.load(Ordering::Relaxed);
    let noted = now.max(decayed - decayed / 8);
    peak.store(noted, Ordering::Relaxed);
    noted <= INLINE_MAX_PEAK
}

/// Runs a cached statement that returns nothing (a transaction's `BEGIN`, `COMMIT`): parsed
/// once per connection, not once per transaction.
fn run_cached(c: &Connection, sql: &str) -> rusqlite::Result<()> {
    c.prepare_cached(sql)?.execute([]).map(|_| ())
}

/// Runs a cached statement that changes rows; how many it changed.
fn execute(c: &Connection, sql: &str, params: impl rusqlite::Params) -> Result<u64, StoreError> {
    let changed = c
        .prepare_cached(sql)
        .and_then(|mut statement| statement.execute(params))
        .map_err(backend)?;
    Ok(u64::try_from(changed).unwrap_or(u64::MAX))
}

impl StateStore for SqliteStore {
    fn claim<'a>(
        &'a self,
        kind: &'a str,
        scope: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<Claim, StoreError>> {
        self.claim_with(kind, scope, owner, None)
    }

    fn take_over<'a>(
        &'a self,
        kind: &'a str,
        scope: &'a str,
        owner: &'a str,
        from: Epoch,
    ) -> BoxFuture<'a, Result<Claim, StoreError>> {
        self.claim_with(kind, scope, owner, Some(from))
    }

    fn release<'a>(
        &'a self,
        kind: &'a str,
        scope: &'a str,
        epoch: Epoch,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let checked = check_scope(kind, scope);
        self.run_keyed(kind, scope, checked, move |c, kind, scope| {
            let changed = execute(c, RELEASE, params![kind, scope, epoch_to_sql(epoch)])?;
            applied(changed, Fence { epoch, life: 0 })
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
        if let Some(loaded) = self.load_here(kind, identity) {
            return Box::pin(std::future::ready(loaded));
        }
        let (kind, identity) = (kind.to_owned(), identity.to_owned());
        self.shared.in_flight.fetch_add(1, Ordering::AcqRel);
        self.queue(move |c| load_with(c, &kind, &identity).map_err(backend))
    }

    fn save<'a>(
        &'a self,
        kind: &'a str,
        scope: &'a str,
        fence: Fence,
        identity: &'a str,
        state: &'a [u8],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let checked = check_write(kind, scope, fence, identity);
        let (identity, state) = (identity.to_owned(), state.to_vec());
        self.run_keyed(kind, scope, checked, move |c, kind, scope| {
            let (epoch, life) = (epoch_to_sql(fence.epoch), life_to_sql(fence.life));
            let changed = execute(c, SAVE, params![kind, scope, epoch, life, identity, state])?;
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
        let checked = check_write(kind, scope, fence, identity);
        let identity = identity.to_owned();
        self.run_keyed(kind, scope, checked, move |c, kind, scope| {
            let (epoch, life) = (epoch_to_sql(fence.epoch), life_to_sql(fence.life));
            let changed = execute(c, FENCE, params![kind, scope, epoch, life, identity])?;
            applied(changed, fence)
        })
    }
}

/// The store's thread: until every handle is dropped, takes the operations waiting, runs them
/// in one transaction and answers each after the commit. A statement that fails fails only its
/// own operation; a transaction that cannot begin or commit fails every operation in it.
fn serve(shared: &Shared, mut queue: mpsc::UnboundedReceiver<Job>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while let Some(job) = queue.blocking_recv() {
        batch.push(job);
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let taken = batch.len();
        let writer = shared.writer.lock();
        // IMMEDIATE takes the write lock at once (waiting up to the busy timeout), so no
        // statement of the batch meets a lock it cannot wait for. Between it and the commit
        // only the batch's statements run: the answers are sent after the commit.
        let (answers, committed) = match begin(&writer) {
            Ok(locked) => {
                let answers: Vec<_> = batch.drain(..).map(|job| job(&writer)).collect();
                let committed = commit(&writer, shared, locked, taken);
                (answers, committed)
            }
            Err(e) => {
                batch.clear();
                (Vec::new(), Err(backend(e)))
            }
        };
        drop(writer);
        shared.in_flight.fetch_sub(taken, Ordering::AcqRel);
        for answer in answers {
            answer(committed.clone());
        }
    }
}

/// The checkpointer's thread: once told of a commit, lets writes gather for
/// [`CHECKPOINT_PERIOD`], then copies what the write-ahead log holds into the database file
/// (a passive checkpoint: it takes no lock that writers wait on, in this process or another).
/// SQLite writes the log from its start again only when a transaction begins with every frame
/// copied, which never happens while commits follow one another closer than a checkpoint
/// takes: past [`RESTART_AFTER_FRAMES`] the passive pass is followed by a restarting one, which
/// keeps the log's file bounded; a restart holds the write lock (noted in `restarts`).
/// Ends when the store's thread has ended. A committed transaction is in the log (written
/// before its commit returned) whether or not it was copied yet: checkpoints bound the log's
/// size, they are not what keeps an epoch across a process crash.
fn checkpoints(
    connection: &Connection,
    commits: &std::sync::mpsc::Receiver<()>,
    restarts: &Restarts,
) {
    while commits.recv().is_ok() {
        std::thread::sleep(CHECKPOINT_PERIOD);
        while commits.try_recv().is_ok() {}
        // One that fails (the file gone, say) is tried again after the next commit.
        let frames: i64 = connection
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| row.get(1))
            .unwrap_or(0);
        if frames > RESTART_AFTER_FRAMES {
            // A second passive pass copies what was committed during the first; the restart
            // then copies only what came during the second, holding writers back meanwhile,
            // and makes the next commit write the log from its start again.
            let _ = connection.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
            let started = Instant::now();
            let _ = connection.query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(()));
            let took = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
            restarts.count.fetch_add(1, Ordering::Relaxed);
            restarts.longest.fetch_max(took, Ordering::Relaxed);
        }
    }
}

fn backend(e: rusqlite::Error) -> StoreError {
    StoreError::Backend(format!("sqlite: {e}"))
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    use super::*;

    #[test]
    fn operations_one_at_a_time_run_inline_until_two_overlap_then_after_four_lone_ones() {
        let peak = AtomicU64::new(0);
        assert!((0..10).all(|_| one_at_a_time(&peak, 1)), "lone operations");
        assert!(!one_at_a_time(&peak, 2), "one that overlaps another");
        // The peak decays an eighth per operation: 32, 28, 25, 22, then 20 (1.25 in flight).
        let after: Vec<bool> = (0..5).map(|_| one_at_a_time(&peak, 1)).collect();
        assert_eq!(after, [false, false, false, true, true]);
        // Under load operations keep overlapping: none runs inline.
        assert!((0..100).all(|i| !one_at_a_time(&peak, 2 + i % 3)));
    }

    #[test]
    fn a_lone_operation_is_answered_on_the_callers_thread() {
        let dir = std::env::temp_dir().join(format!("rally-sqlite-inline-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let store = SqliteStore::open(dir.join("grains.db")).unwrap();
        let mut cx = Context::from_waker(Waker::noop());
        for identity in ["u1", "u2"] {
            // Ready at its first poll: committed before `claim` returned, no thread involved.
            let claim = std::pin::pin!(store.claim("cart", identity, "m1")).poll(&mut cx);
            assert_eq!(claim, Poll::Ready(Ok(Claim::Granted(1))), "{identity}");
        }
        assert_eq!(store.shared.in_flight.load(Ordering::Relaxed), 0);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
