//! The PostgreSQL store keeps the store contract against a real server the test starts.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rally::state::{Claim, Fence, PostgresStore, StateStore, StoreError};
use support::postgres::PgServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs postgresql; run by .ci/run"]
async fn postgres_store_keeps_the_contract_and_races_have_one_winner() {
    let server = PgServer::start("contract");
    let store = PostgresStore::connect(&server.config()).await.unwrap();
    support::check_contract(&store, "p").await;
    support::check_shared_scope(&store, "p").await;
    support::check_fences(&store, "p").await;
    // Four connections, as four members would hold.
    let mut stores: Vec<Arc<dyn StateStore>> = Vec::new();
    for _ in 0..4 {
        stores.push(Arc::new(
            PostgresStore::connect(&server.config()).await.unwrap(),
        ));
    }
    support::check_one_winner(stores, "p").await;
}

#[test]
#[ignore = "needs postgresql; run by .ci/run"]
fn postgres_store_answers_as_the_model_over_random_sequences() {
    let server = PgServer::start("model");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = runtime
        .block_on(PostgresStore::connect(&server.config()))
        .unwrap();
    support::model::check_against_model(&store, &runtime, "postgres", 256);
}

/// The tables as a Rally without fences made them (`state` NOT NULL, no floor columns).
const SCHEMA_BEFORE_FENCES: &str = "
CREATE TABLE rally_leases (
    kind   TEXT    NOT NULL,
    scope  TEXT    NOT NULL,
    epoch  BIGINT  NOT NULL,
    owner  TEXT    NOT NULL,
    active BOOLEAN NOT NULL,
    PRIMARY KEY (kind, scope)
);
CREATE TABLE rally_state (
    kind     TEXT  NOT NULL,
    identity TEXT  NOT NULL,
    state    BYTEA NOT NULL,
    PRIMARY KEY (kind, identity)
);
INSERT INTO rally_leases VALUES ('cart', '#1', 4, 'm1', TRUE), ('cart', '#2', 2, 'm1', FALSE);
INSERT INTO rally_state VALUES ('cart', 'u1', 'old'), ('cart', 'u2', 'old2');
";

/// A database written before fences existed is brought up to date by the members that connect
/// to it, four at once: its leases and states are kept, and fences work on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs postgresql; run by .ci/run"]
async fn a_database_from_before_fences_is_migrated_in_place_on_connect() {
    let server = PgServer::start("migrate");
    let (client, connection) = tokio_postgres::connect(&server.config(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client.batch_execute(SCHEMA_BEFORE_FENCES).await.unwrap();
    let connects: Vec<_> = (0..4)
        .map(|_| {
            let config = server.config();
            tokio::spawn(async move { PostgresStore::connect(&config).await })
        })
        .collect();
    let mut stores = Vec::new();
    for connect in connects {
        stores.push(connect.await.unwrap().unwrap());
    }
    support::check_migrated(&stores[0], &stores[3]).await;
    // Connecting again finds nothing to migrate and loses nothing.
    let again = PostgresStore::connect(&server.config()).await.unwrap();
    assert_eq!(
        again.load("cart", "u1").await.unwrap().as_deref(),
        Some(&b"new"[..])
    );
    let columns: Vec<(String, String)> = client
        .query(
            "SELECT column_name::text, is_nullable::text FROM information_schema.columns \
             WHERE table_name = 'rally_state' ORDER BY ordinal_position",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let expected = [
        ("kind", "NO"),
        ("identity", "NO"),
        ("state", "YES"),
        ("floor_scope", "YES"),
        ("floor_epoch", "NO"),
        ("floor_life", "NO"),
    ];
    assert_eq!(
        columns,
        expected.map(|(name, nullable)| (name.to_owned(), nullable.to_owned()))
    );
}

/// What one save of the old life did, and when, in the order of a shared counter that every
/// save and the fence tick before and after their statement.
#[derive(Debug)]
struct Attempt {
    value: u64,
    started: u64,
    ended: u64,
    result: Result<(), StoreError>,
}

/// Once `fence` has returned `Ok`, no save of an older life is applied, including saves in
/// flight at that moment: the row's state read just after the fence answered is the state
/// for good (until the newer life writes), over many rounds of an older life saving from four
/// connections as fast as they can while a fifth fences. Half the rounds start on an identity
/// already saved, half on one never saved (the fence then inserts the row, racing the saves'
/// inserts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs postgresql; run by .ci/run"]
async fn no_save_of_an_older_life_is_applied_after_its_fence_returned() {
    const ROUNDS: u64 = 120;
    const SAVERS: usize = 4;
    let server = PgServer::start("fence-race");
    let mut savers = Vec::new();
    for _ in 0..SAVERS {
        savers.push(Arc::new(
            PostgresStore::connect(&server.config()).await.unwrap(),
        ));
    }
    let fencer = PostgresStore::connect(&server.config()).await.unwrap();
    let Ok(Claim::Granted(epoch)) = fencer.claim("race", "#1", "m").await else {
        panic!("a fresh scope is granted")
    };
    let clock = Arc::new(AtomicU64::new(0));
    let (mut racing, mut racing_applied, mut racing_refused) = (0, 0, 0);
    for round in 0..ROUNDS {
        let identity = format!("id-{round}");
        let (old, new) = (
            Fence {
                epoch,
                life: 2 * round,
            },
            Fence {
                epoch,
                life: 2 * round + 1,
            },
        );
        let saved_before = round % 2 == 0;
        if saved_before {
            savers[0]
                .save("race", "#1", old, &identity, &u64::MAX.to_le_bytes())
                .await
                .unwrap();
        }
        let fenced = Arc::new(AtomicBool::new(false));
        let started = Arc::new(tokio::sync::Barrier::new(SAVERS + 1));
        let tasks: Vec<_> = savers
            .iter()
            .enumerate()
            .map(|(n, store)| {
                let (store, identity, clock) =
                    (Arc::clone(store), identity.clone(), Arc::clone(&clock));
                let (fenced, started) = (Arc::clone(&fenced), Arc::clone(&started));
                tokio::spawn(async move {
                    let mut attempts = Vec::new();
                    let mut after_fence = 0;
                    started.wait().await;
                    // Until three saves each began after the fence answered.
                    for i in 0.. {
                        if fenced.load(Ordering::SeqCst) {
                            after_fence += 1;
                            if after_fence > 3 {
                                break;
                            }
                        }
                        let value = (n as u64) << 32 | i;
                        let started = clock.fetch_add(1, Ordering::SeqCst);
                        let result = store
                            .save("race", "#1", old, &identity, &value.to_le_bytes())
                            .await;
                        let ended = clock.fetch_add(1, Ordering::SeqCst);
                        attempts.push(Attempt {
                            value,
                            started,
                            ended,
                            result,
                        });
                    }
                    attempts
                })
            })
            .collect();
        started.wait().await;
        if saved_before {
            // Let the savers get going on the row first.
            tokio::task::yield_now().await;
        }
        let fence_started = clock.fetch_add(1, Ordering::SeqCst);
        fencer.fence("race", "#1", new, &identity).await.unwrap();
        let fence_ended = clock.fetch_add(1, Ordering::SeqCst);
        let at_fence = fencer.load("race", &identity).await.unwrap();
        fenced.store(true, Ordering::SeqCst);
        let mut attempts = Vec::new();
        for task in tasks {
            attempts.extend(task.await.unwrap());
        }
        let after = fencer.load("race", &identity).await.unwrap();
        assert_eq!(
            after, at_fence,
            "round {round}: a save of the older life was applied after the fence returned"
        );
        for attempt in &attempts {
            match &attempt.result {
                Ok(()) => assert!(
                    attempt.started < fence_ended,
                    "round {round}: a save begun after the fence returned was applied: {attempt:?}"
                ),
                Err(StoreError::StaleEpoch { fence }) => assert_eq!(*fence, old),
                Err(e) => panic!("round {round}: {e}"),
            }
            if attempt.started < fence_ended && attempt.ended > fence_started {
                racing += 1;
                if attempt.result.is_ok() {
                    racing_applied += 1;
                } else {
                    racing_refused += 1;
                }
            }
        }
        // The state at the fence is one a save of the old life was told it applied (or the
        // one before the round).
        if let Some(state) = &at_fence {
            let value = u64::from_le_bytes(state.as_slice().try_into().unwrap());
            assert!(
                value == u64::MAX && saved_before
                    || attempts
                        .iter()
                        .any(|a| a.value == value && a.result.is_ok()),
                "round {round}: the state {value:#x} is no applied save's"
            );
        }
        // The newer life writes.
        savers[1]
            .save("race", "#1", new, &identity, b"new")
            .await
            .unwrap();
        assert_eq!(
            fencer.load("race", &identity).await.unwrap().as_deref(),
            Some(&b"new"[..])
        );
    }
    eprintln!(
        "{ROUNDS} rounds: {racing} saves in flight while the fence ran, \
         {racing_applied} applied before it, {racing_refused} refused"
    );
    assert!(
        racing_applied > 0 && racing_refused > 0,
        "the saves and the fences raced: some of the saves in flight were applied, some refused"
    );
}

/// A member process of the store, its stdout collected line by line.
struct Member {
    child: std::process::Child,
    lines: Arc<rally::sync::Mutex<Vec<String>>>,
    arrived: Arc<tokio::sync::Notify>,
}

impl Member {
    fn start(config: &str, owner: &str, shards: u64) -> Self {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_rally-state-test-member"))
            .args([config, owner, &shards.to_string()])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("the member binary starts");
        let stdout = child.stdout.take().expect("piped");
        let lines = Arc::new(rally::sync::Mutex::new(Vec::new()));
        let arrived = Arc::new(tokio::sync::Notify::new());
        let (collected, notify) = (Arc::clone(&lines), Arc::clone(&arrived));
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                collected.lock().push(line);
                notify.notify_one();
            }
            notify.notify_one();
        });
        Self {
            child,
            lines,
            arrived,
        }
    }

    fn pid(&self) -> nix::unistd::Pid {
        nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap())
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().clone()
    }

    /// Waits (bounded) until `done` holds for the lines so far.
    async fn wait_for(&self, what: &str, done: impl Fn(&[String]) -> bool) {
        tokio::time::timeout(T, async {
            while !done(&self.lines()) {
                self.arrived.notified().await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("the member did not {what} within {T:?}"));
    }

    /// Whether the kernel shows the process stopped (state `T` in `/proc/<pid>/stat`).
    fn stopped(&self) -> bool {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap();
        // The state follows the command name, which is in parentheses.
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('T'))
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        // A test that failed while the member was stopped must not leave it behind.
        let _ = nix::sys::signal::kill(self.pid(), nix::sys::signal::Signal::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Bound on every wait of the process test: generous, since several builds share two cores.
const T: std::time::Duration = std::time::Duration::from_secs(120);

fn wall_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// Defect 8's PostgreSQL side: a member process stopped (SIGSTOP) in the middle of saving to its
/// shards blocks only those shards, and only as long as its lease is respected. While it is
/// stopped, another member claims, saves to and releases other shards (every operation
/// completes), finds the stopped member's shards held by it, and can even take one over (the
/// stopped member holds no lock in the database). Once resumed, the member's operations in
/// flight all complete; its saves to the shard taken over are refused, the rest apply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs postgresql; run by .ci/run"]
async fn a_member_stopped_mid_operation_blocks_only_its_own_shards() {
    const SHARDS: u64 = 4;
    let server = PgServer::start("stopped");
    let config = server.config();
    let mut member = Member::start(&config, "stopped", SHARDS);
    // Stop it in the middle of its saves: once every worker has saved a few times.
    member
        .wait_for("save", |lines| {
            lines.iter().filter(|l| l.starts_with("END ")).count() >= 200
        })
        .await;
    nix::sys::signal::kill(member.pid(), nix::sys::signal::Signal::SIGSTOP).unwrap();
    rally_test::eventually("the member stops", T, async || member.stopped()).await;
    let stopped_at = wall_ns();

    // Meanwhile, another member: 40 shards of its own, each claimed, saved three times, read,
    // released (200 operations), on a connection of its own.
    let other = PostgresStore::connect(&config).await.unwrap();
    let mut completed = 0;
    for shard in 0..40 {
        let scope = format!("#other-{shard}");
        let Ok(Claim::Granted(epoch)) = other.claim("paused", &scope, "other").await else {
            panic!("{scope}: a free shard is granted while the member is stopped")
        };
        let identity = format!("other-{shard}");
        for value in 0..3u8 {
            other
                .save(
                    "paused",
                    &scope,
                    Fence { epoch, life: 0 },
                    &identity,
                    &[value],
                )
                .await
                .unwrap();
        }
        assert_eq!(
            other.load("paused", &identity).await.unwrap(),
            Some(vec![2])
        );
        other.release("paused", &scope, epoch).await.unwrap();
        completed += 6;
    }
    // The stopped member's shards are its own: still held by it (the runtime waits for its
    // lease, and takes over only from a member it downed).
    let mut epochs = Vec::new();
    for shard in 0..SHARDS {
        let scope = format!("#stopped-{shard}");
        match other.claim("paused", &scope, "other").await.unwrap() {
            Claim::Held { owner, epoch } => {
                assert_eq!(owner, "stopped", "{scope}");
                epochs.push(epoch);
            }
            granted => panic!("{scope}: the stopped member's shard was {granted:?}"),
        }
    }
    // Taking one over does not wait for the stopped member either: it holds no lock.
    let Ok(Claim::Granted(taken)) = other
        .take_over("paused", "#stopped-0", "other", epochs[0])
        .await
    else {
        panic!("the takeover from the member's epoch is granted")
    };
    // Worker 0 saves to stopped-0, in the shard taken over: its state as the takeover left it.
    let at_takeover = other.load("paused", "stopped-0").await.unwrap();
    assert!(member.stopped(), "the member stayed stopped throughout");
    let resumed_at = wall_ns();
    nix::sys::signal::kill(member.pid(), nix::sys::signal::Signal::SIGCONT).unwrap();

    // Resumed: let its workers go on for a while, then stop them.
    let seen = member.lines().len();
    member
        .wait_for("save after resuming", |lines| lines.len() >= seen + 200)
        .await;
    use std::io::Write;
    writeln!(member.child.stdin.as_mut().unwrap(), "stop").unwrap();
    member
        .wait_for("finish", |lines| lines.last().is_some_and(|l| l == "DONE"))
        .await;
    assert!(member.child.wait().unwrap().success());

    // What the member did, from its lines.
    let lines = member.lines();
    let mut begun = std::collections::HashMap::new();
    let (mut in_flight_at_stop, mut refused_after, mut applied) = (0, 0, 0);
    for line in &lines {
        let fields: Vec<&str> = line.split(' ').collect();
        match fields.as_slice() {
            ["BEGIN", worker, seq, at] => {
                begun.insert(
                    (worker.to_string(), seq.to_string()),
                    at.parse::<u128>().unwrap(),
                );
            }
            ["END", worker, seq, outcome, at] => {
                let at: u128 = at.parse().unwrap();
                assert!(
                    at < stopped_at || at > resumed_at,
                    "the member wrote while stopped: {line}"
                );
                let began = begun
                    .remove(&(worker.to_string(), seq.to_string()))
                    .unwrap_or_else(|| panic!("{line}: never began"));
                if began < stopped_at && at > resumed_at {
                    in_flight_at_stop += 1;
                }
                match (*worker, *outcome) {
                    // Worker 0 (and 4) save to shard 0: refused once it was taken over.
                    ("0" | "4", "STALE") if at > resumed_at => refused_after += 1,
                    ("0" | "4", "OK") | (_, "OK") => {
                        assert!(
                            !(*worker == "0" || *worker == "4") || began < stopped_at,
                            "a save begun after the takeover applied: {line}"
                        );
                        applied += 1;
                    }
                    _ => panic!("unexpected outcome: {line}"),
                }
            }
            _ => {}
        }
    }
    assert!(begun.is_empty(), "operations never answered: {begun:?}");
    assert!(
        in_flight_at_stop >= 1,
        "the member was stopped in the middle of its operations"
    );
    assert!(
        refused_after >= 1,
        "its saves to the shard taken over were refused"
    );
    let released: Vec<&String> = lines.iter().filter(|l| l.starts_with("RELEASED")).collect();
    assert_eq!(
        released,
        [
            "RELEASED #stopped-0 STALE",
            "RELEASED #stopped-1 OK",
            "RELEASED #stopped-2 OK",
            "RELEASED #stopped-3 OK"
        ]
    );
    // No save of the member applied after the takeover; its other shards are free again.
    assert_eq!(
        other.load("paused", "stopped-0").await.unwrap(),
        at_takeover
    );
    for (shard, epoch) in epochs.iter().enumerate().skip(1) {
        assert_eq!(
            other
                .claim("paused", &format!("#stopped-{shard}"), "other")
                .await,
            Ok(Claim::Granted(epoch + 1))
        );
    }
    assert!(taken > epochs[0]);
    eprintln!(
        "while the member was stopped ({} ms): {completed} operations of another member \
         completed; {in_flight_at_stop} of the member's saves were in flight, all answered after \
         it resumed; it applied {applied} saves, {refused_after} refused after the takeover",
        (resumed_at - stopped_at) / 1_000_000
    );
}
