//! The contract every state store keeps, checked the same way for each.

#![allow(dead_code, unreachable_pub)]

pub mod postgres;

use std::sync::Arc;

use rally::state::{Claim, StateStore, StoreError};

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
    store.save("cart", scope, 1, id, b"one").await.unwrap();
    assert_eq!(
        store.save("cart", scope, 2, id, b"never").await,
        Err(StoreError::StaleEpoch { epoch: 2 })
    );
    assert_eq!(
        store.load("cart", id).await.unwrap().as_deref(),
        Some(&b"one"[..])
    );
    // A scope nobody holds fences every write named under it.
    assert_eq!(
        store.save("cart", "#never-claimed", 1, id, b"never").await,
        Err(StoreError::StaleEpoch { epoch: 1 })
    );

    // b takes over from epoch 1 (a was downed): a's writes and release are fenced.
    assert_eq!(
        store.take_over("cart", scope, "b", 1).await,
        Ok(Claim::Granted(2))
    );
    assert_eq!(
        store.save("cart", scope, 1, id, b"stale").await,
        Err(StoreError::StaleEpoch { epoch: 1 })
    );
    assert_eq!(
        store.release("cart", scope, 1).await,
        Err(StoreError::StaleEpoch { epoch: 1 })
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
    store.save("cart", scope, 2, id, b"two").await.unwrap();

    // Released: the next claim by anyone is granted a higher epoch; the state stays; a write
    // under the released epoch is refused.
    store.release("cart", scope, 2).await.unwrap();
    assert_eq!(
        store.save("cart", scope, 2, id, b"late").await,
        Err(StoreError::StaleEpoch { epoch: 2 })
    );
    assert_eq!(store.claim("cart", scope, "a").await, Ok(Claim::Granted(3)));
    assert_eq!(
        store.load("cart", id).await.unwrap().as_deref(),
        Some(&b"two"[..])
    );
    // The holder claiming again (its earlier hold is gone) gets a new epoch.
    assert_eq!(store.claim("cart", scope, "a").await, Ok(Claim::Granted(4)));
    assert_eq!(
        store.save("cart", scope, 3, id, b"x").await,
        Err(StoreError::StaleEpoch { epoch: 3 })
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
            store.save(kind, key, 1, "i", b"x").await,
            Err(StoreError::InvalidKey(_))
        ));
        assert!(matches!(
            store.save(kind, "#1", 1, key, b"x").await,
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
        .save("cart", &longest_scope, 1, &longest, b"y")
        .await
        .unwrap();
    assert!(matches!(
        store
            .save("cart", &longest_scope, 1, &long[..257], b"y")
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
        store.save("cart", &shard, 1, id, b"a").await.unwrap();
    }
    store
        .save("cart", &other, 1, "elsewhere", b"a")
        .await
        .unwrap();

    assert_eq!(
        store.take_over("cart", &shard, "b", 1).await,
        Ok(Claim::Granted(2))
    );
    for id in &ids {
        assert_eq!(
            store.save("cart", &shard, 1, id, b"stale").await,
            Err(StoreError::StaleEpoch { epoch: 1 }),
            "{id}"
        );
        assert_eq!(
            store.load("cart", id).await.unwrap().as_deref(),
            Some(&b"a"[..])
        );
        store.save("cart", &shard, 2, id, b"b").await.unwrap();
    }
    // The other shard's lease did not move.
    store
        .save("cart", &other, 1, "elsewhere", b"still a")
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
