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
    let store = &stores[0];
    assert_eq!(
        store.load("cart", "u1").await.unwrap().as_deref(),
        Some(&b"old"[..])
    );
    assert_eq!(
        store.load("cart", "u2").await.unwrap().as_deref(),
        Some(&b"old2"[..])
    );
    let (held, next) = (Fence { epoch: 4, life: 0 }, Fence { epoch: 4, life: 1 });
    let old = Fence { epoch: 3, life: 0 };
    assert_eq!(
        store.save("cart", "#1", old, "u1", b"x").await,
        Err(StoreError::StaleEpoch { fence: old })
    );
    store.save("cart", "#1", held, "u1", b"new").await.unwrap();
    store.fence("cart", "#1", next, "u1").await.unwrap();
    assert_eq!(
        stores[3].save("cart", "#1", held, "u1", b"late").await,
        Err(StoreError::StaleEpoch { fence: held })
    );
    store.fence("cart", "#1", next, "u9").await.unwrap();
    assert_eq!(store.load("cart", "u9").await, Ok(None));
    assert_eq!(store.claim("cart", "#2", "m2").await, Ok(Claim::Granted(3)));
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
