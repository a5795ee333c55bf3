//! The contract every state store keeps, checked the same way for each.

#![allow(dead_code, unreachable_pub)]

pub mod model;
pub mod postgres;

use std::sync::Arc;

use rally::state::{Claim, Epoch, Fence, MAX_LIFE, StateStore, StoreError};

/// The fence of a life numbered 0 under the lease of `epoch`.
pub fn lease(epoch: Epoch) -> Fence {
    Fence { epoch, life: 0 }
}

fn life(epoch: Epoch, life: u64) -> Fence {
    Fence { epoch, life }
}

fn stale(fence: Fence) -> Result<(), StoreError> {
    Err(StoreError::StaleEpoch { fence })
}

/// Claims, fencing, release and bad keys, on scopes and identities no other check uses.
pub async fn check_contract(store: &dyn StateStore, prefix: &str) {
    let scope = format!("#{prefix}-contract");
    let scope = scope.as_str();
    let id = format!("{prefix}-contract-1");
    let id = id.as_str();

    // A fresh scope is granted epoch 1; another owner is told who holds it.
    assert_eq!(store.claim("cart", scope, "a").await, Ok(Claim::Granted(1)));
    assert_eq!(
        store.claim("cart", scope, "b").await,
        Ok(Claim::Held {
            owner: "a".into(),
            epoch: 1
        })
    );
    assert_eq!(store.load("cart", id).await, Ok(None));

    // The holder writes; an epoch nobody was granted is refused, nothing written.
    store
        .save("cart", scope, lease(1), id, b"one")
        .await
        .unwrap();
    assert_eq!(
        store.save("cart", scope, lease(2), id, b"never").await,
        Err(StoreError::StaleEpoch { fence: lease(2) })
    );
    assert_eq!(
        store.load("cart", id).await.unwrap().as_deref(),
        Some(&b"one"[..])
    );
    // A scope nobody holds fences every write named under it.
    assert_eq!(
        store
            .save("cart", "#never-claimed", lease(1), id, b"never")
            .await,
        Err(StoreError::StaleEpoch { fence: lease(1) })
    );

    // b takes over from epoch 1 (a was downed): a's writes and release are fenced.
    assert_eq!(
        store.take_over("cart", scope, "b", 1).await,
        Ok(Claim::Granted(2))
    );
    assert_eq!(
        store.save("cart", scope, lease(1), id, b"stale").await,
        Err(StoreError::StaleEpoch { fence: lease(1) })
    );
    assert_eq!(
        store.release("cart", scope, 1).await,
        Err(StoreError::StaleEpoch { fence: lease(1) })
    );
    assert_eq!(
        store.load("cart", id).await.unwrap().as_deref(),
        Some(&b"one"[..])
    );
    // A second taker from the same old epoch loses to the first.
    assert_eq!(
        store.take_over("cart", scope, "c", 1).await,
        Ok(Claim::Held {
            owner: "b".into(),
            epoch: 2
        })
    );
    store
        .save("cart", scope, lease(2), id, b"two")
        .await
        .unwrap();

    // Released: the next claim by anyone is granted a higher epoch; the state stays; a write
    // under the released epoch is refused.
    store.release("cart", scope, 2).await.unwrap();
    assert_eq!(
        store.save("cart", scope, lease(2), id, b"late").await,
        Err(StoreError::StaleEpoch { fence: lease(2) })
    );
    assert_eq!(store.claim("cart", scope, "a").await, Ok(Claim::Granted(3)));
    assert_eq!(
        store.load("cart", id).await.unwrap().as_deref(),
        Some(&b"two"[..])
    );
    // The holder claiming again (its earlier hold is gone) gets a new epoch.
    assert_eq!(store.claim("cart", scope, "a").await, Ok(Claim::Granted(4)));
    assert_eq!(
        store.save("cart", scope, lease(3), id, b"x").await,
        Err(StoreError::StaleEpoch { fence: lease(3) })
    );

    // Other kinds are other records.
    assert_eq!(
        store.claim("order", scope, "z").await,
        Ok(Claim::Granted(1))
    );
    assert_eq!(store.load("order", id).await, Ok(None));

    // Bad keys: a typed error, nothing created.
    let long = "x".repeat(258);
    for (kind, key) in [("", "i"), ("cart", ""), ("cart", long.as_str())] {
        assert!(matches!(
            store.claim(kind, key, "a").await,
            Err(StoreError::InvalidKey(_))
        ));
        assert!(matches!(
            store.save(kind, key, lease(1), "i", b"x").await,
            Err(StoreError::InvalidKey(_))
        ));
        assert!(matches!(
            store.save(kind, "#1", lease(1), key, b"x").await,
            Err(StoreError::InvalidKey(_))
        ));
        assert!(matches!(
            store.load(kind, key).await,
            Err(StoreError::InvalidKey(_))
        ));
    }
    // The longest identity, and the longest scope (a prefix and that identity).
    let longest = "y".repeat(256);
    let longest_scope = format!("={longest}");
    assert_eq!(
        store.claim("cart", &longest_scope, "a").await,
        Ok(Claim::Granted(1))
    );
    store
        .save("cart", &longest_scope, lease(1), &longest, b"y")
        .await
        .unwrap();
    assert!(matches!(
        store
            .save("cart", &longest_scope, lease(1), &long[..257], b"y")
            .await,
        Err(StoreError::InvalidKey(_))
    ));
}

/// One lease fences every identity written under its scope: identities of one shard share
/// the holder's epoch, and a takeover of the shard refuses the old holder's writes to all of
/// them, while another shard's lease is untouched.
pub async fn check_shared_scope(store: &dyn StateStore, prefix: &str) {
    let (shard, other) = (format!("#{prefix}-s1"), format!("#{prefix}-s2"));
    let ids: Vec<String> = (0..3).map(|i| format!("{prefix}-shared-{i}")).collect();
    assert_eq!(
        store.claim("cart", &shard, "a").await,
        Ok(Claim::Granted(1))
    );
    assert_eq!(
        store.claim("cart", &other, "a").await,
        Ok(Claim::Granted(1))
    );
    for id in &ids {
        store
            .save("cart", &shard, lease(1), id, b"a")
            .await
            .unwrap();
    }
    store
        .save("cart", &other, lease(1), "elsewhere", b"a")
        .await
        .unwrap();

    assert_eq!(
        store.take_over("cart", &shard, "b", 1).await,
        Ok(Claim::Granted(2))
    );
    for id in &ids {
        assert_eq!(
            store.save("cart", &shard, lease(1), id, b"stale").await,
            Err(StoreError::StaleEpoch { fence: lease(1) }),
            "{id}"
        );
        assert_eq!(
            store.load("cart", id).await.unwrap().as_deref(),
            Some(&b"a"[..])
        );
        store
            .save("cart", &shard, lease(2), id, b"b")
            .await
            .unwrap();
    }
    // The other shard's lease did not move.
    store
        .save("cart", &other, lease(1), "elsewhere", b"still a")
        .await
        .unwrap();
    assert_eq!(
        store.load("cart", "elsewhere").await.unwrap().as_deref(),
        Some(&b"still a"[..])
    );
}

/// Claims racing from many tasks (and, for shared stores, many handles): exactly one wins,
/// the others are told who holds it.
pub async fn check_one_winner(stores: Vec<Arc<dyn StateStore>>, prefix: &str) {
    let id = format!("{prefix}-race");
    let mut tasks = Vec::new();
    for round in 0..32 {
        let store = Arc::clone(&stores[round % stores.len()]);
        let id = id.clone();
        tasks.push(tokio::spawn(async move {
            store.claim("race", &id, &format!("owner-{round}")).await
        }));
    }
    let mut granted = Vec::new();
    let mut held = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(Claim::Granted(epoch)) => granted.push(epoch),
            Ok(Claim::Held { epoch, .. }) => {
                assert_eq!(epoch, 1);
                held += 1;
            }
            other => panic!("unexpected claim outcome {other:?}"),
        }
    }
    assert_eq!(granted, vec![1], "exactly one claim wins");
    assert_eq!(held, 31);
}

/// One fence per life: a fence raises the identity's floor (never lowers it), refuses every
/// later save below it, works before the first save, belongs to its scope, and is itself
/// refused unless its epoch is held.
pub async fn check_fences(store: &dyn StateStore, prefix: &str) {
    let scope = format!("#{prefix}-fences");
    let scope = scope.as_str();
    let (id, fresh) = (format!("{prefix}-fenced"), format!("{prefix}-fresh"));
    let (id, fresh) = (id.as_str(), fresh.as_str());
    let Ok(Claim::Granted(e)) = store.claim("cart", scope, "a").await else {
        panic!("a fresh scope is granted")
    };

    // Life 0 saves; life 2 is about to start while life 0 may still write: fence.
    store
        .save("cart", scope, life(e, 0), id, b"0")
        .await
        .unwrap();
    store.fence("cart", scope, life(e, 2), id).await.unwrap();
    assert_eq!(
        store.save("cart", scope, life(e, 0), id, b"late").await,
        stale(life(e, 0))
    );
    assert_eq!(
        store.save("cart", scope, life(e, 1), id, b"late").await,
        stale(life(e, 1))
    );
    assert_eq!(
        store.load("cart", id).await.unwrap().as_deref(),
        Some(&b"0"[..]),
        "the fence keeps the state"
    );
    store
        .save("cart", scope, life(e, 2), id, b"2")
        .await
        .unwrap();
    store
        .save("cart", scope, life(e, 3), id, b"3")
        .await
        .unwrap();
    // A save does not raise the floor: life 2 still writes after life 3 did.
    store
        .save("cart", scope, life(e, 2), id, b"2 again")
        .await
        .unwrap();
    // A lower fence leaves the floor where it is.
    store.fence("cart", scope, life(e, 1), id).await.unwrap();
    assert_eq!(
        store.save("cart", scope, life(e, 1), id, b"late").await,
        stale(life(e, 1))
    );
    // A fence under an epoch not held is refused and changes nothing.
    assert_eq!(
        store.fence("cart", scope, life(e + 1, 9), id).await,
        stale(life(e + 1, 9))
    );
    store
        .save("cart", scope, life(e, 2), id, b"2")
        .await
        .unwrap();
    assert_eq!(
        store
            .fence("cart", "#nobody-holds-it", life(e, 0), id)
            .await,
        stale(life(e, 0))
    );

    // An identity never saved: the fence alone refuses the older life's first save.
    store.fence("cart", scope, life(e, 5), fresh).await.unwrap();
    assert_eq!(
        store.load("cart", fresh).await,
        Ok(None),
        "a floor is no state"
    );
    assert_eq!(
        store.save("cart", scope, life(e, 4), fresh, b"4").await,
        stale(life(e, 4))
    );
    assert_eq!(store.load("cart", fresh).await, Ok(None));
    store
        .save("cart", scope, life(e, 5), fresh, b"5")
        .await
        .unwrap();
    assert_eq!(
        store.load("cart", fresh).await.unwrap().as_deref(),
        Some(&b"5"[..])
    );

    // A later lease is above every floor of an earlier one, whatever its life.
    let Ok(Claim::Granted(e2)) = store.take_over("cart", scope, "b", e).await else {
        panic!("the epoch had not moved")
    };
    assert_eq!(
        store
            .save("cart", scope, life(e, 9), id, b"old lease")
            .await,
        stale(life(e, 9))
    );
    assert_eq!(
        store.fence("cart", scope, life(e, 9), id).await,
        stale(life(e, 9))
    );
    store
        .save("cart", scope, life(e2, 0), id, b"b")
        .await
        .unwrap();
    // Releasing and claiming again keeps the floor's order (the epoch only grows).
    store.fence("cart", scope, life(e2, 3), id).await.unwrap();
    store.release("cart", scope, e2).await.unwrap();
    let Ok(Claim::Granted(e3)) = store.claim("cart", scope, "c").await else {
        panic!("a released scope is granted")
    };
    store
        .save("cart", scope, life(e3, 0), id, b"c")
        .await
        .unwrap();

    // The floor is its scope's: under another scope (the kind's placement changed), epochs
    // count from 1 again and are not compared with it; a fence there replaces it.
    let other = format!("={id}");
    assert_eq!(
        store.claim("cart", &other, "d").await,
        Ok(Claim::Granted(1))
    );
    store.fence("cart", scope, life(e3, 7), id).await.unwrap();
    store
        .save("cart", &other, life(1, 0), id, b"d")
        .await
        .unwrap();
    store.fence("cart", &other, life(1, 1), id).await.unwrap();
    assert_eq!(
        store.save("cart", &other, life(1, 0), id, b"late").await,
        stale(life(1, 0))
    );
    store
        .save("cart", scope, life(e3, 0), id, b"c again")
        .await
        .unwrap();
    assert_eq!(
        store.load("cart", id).await.unwrap().as_deref(),
        Some(&b"c again"[..])
    );

    // Out of range: a life SQL cannot store is a bad key; an epoch never granted is stale;
    // a takeover from an epoch never granted finds the holder.
    for too_high in [MAX_LIFE + 1, u64::MAX] {
        assert!(matches!(
            store
                .save("cart", scope, life(e3, too_high), id, b"x")
                .await,
            Err(StoreError::InvalidKey(_))
        ));
        assert!(matches!(
            store.fence("cart", scope, life(e3, too_high), id).await,
            Err(StoreError::InvalidKey(_))
        ));
    }
    store
        .fence("cart", scope, life(e3, MAX_LIFE), fresh)
        .await
        .unwrap();
    assert_eq!(
        store.save("cart", scope, life(u64::MAX, 0), id, b"x").await,
        stale(life(u64::MAX, 0))
    );
    assert_eq!(
        store.fence("cart", scope, life(u64::MAX, 0), id).await,
        stale(life(u64::MAX, 0))
    );
    assert_eq!(
        store.release("cart", scope, u64::MAX).await,
        stale(life(u64::MAX, 0))
    );
    assert_eq!(
        store.take_over("cart", scope, "z", u64::MAX).await,
        Ok(Claim::Held {
            owner: "c".into(),
            epoch: e3
        })
    );
    // Bad keys: a typed error, nothing created.
    assert!(matches!(
        store.fence("", scope, life(e3, 0), id).await,
        Err(StoreError::InvalidKey(_))
    ));
    assert!(matches!(
        store.fence("cart", "", life(e3, 0), id).await,
        Err(StoreError::InvalidKey(_))
    ));
    assert!(matches!(
        store.fence("cart", scope, life(e3, 0), "").await,
        Err(StoreError::InvalidKey(_))
    ));
}

/// What a store must show on tables made before fences existed, holding the leases
/// `cart #1` (epoch 4, held by m1) and `cart #2` (epoch 2, released) and the states `u1`
/// ("old") and `u2` ("old2"), once opened by `store` and `other`: nothing lost, and fences work.
pub async fn check_migrated(store: &dyn StateStore, other: &dyn StateStore) {
    let loaded = |id: &'static str| async move { store.load("cart", id).await.unwrap() };
    assert_eq!(loaded("u1").await.as_deref(), Some(&b"old"[..]));
    assert_eq!(loaded("u2").await.as_deref(), Some(&b"old2"[..]));
    // The lease held before the migration still fences, and its holder writes.
    let (held, next) = (life(4, 0), life(4, 1));
    assert_eq!(
        store.save("cart", "#1", lease(3), "u1", b"x").await,
        stale(lease(3))
    );
    store.save("cart", "#1", held, "u1", b"new").await.unwrap();
    store.fence("cart", "#1", next, "u1").await.unwrap();
    assert_eq!(
        other.save("cart", "#1", held, "u1", b"late").await,
        stale(held)
    );
    store.fence("cart", "#1", next, "u9").await.unwrap();
    assert_eq!(store.load("cart", "u9").await, Ok(None));
    // The released lease is granted again above its old epoch.
    assert_eq!(store.claim("cart", "#2", "m2").await, Ok(Claim::Granted(3)));
}
