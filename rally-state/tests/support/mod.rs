//! The contract every state store keeps, checked the same way for each.

#![allow(dead_code, unreachable_pub)]

pub mod postgres;

use std::sync::Arc;

use rally::state::{Claim, StateStore, StoreError};

/// Claims, fencing, release and bad keys, on identities no other check uses.
pub async fn check_contract(store: &dyn StateStore, prefix: &str) {
    let id = format!("{prefix}-contract");
    let id = id.as_str();

    // A fresh identity is granted epoch 1; another owner is told who holds it.
    assert_eq!(store.claim("cart", id, "a").await, Ok(Claim::Granted(1)));
    assert_eq!(
        store.claim("cart", id, "b").await,
        Ok(Claim::Held {
            owner: "a".into(),
            epoch: 1
        })
    );
    assert_eq!(store.load("cart", id).await, Ok(None));

    // The holder writes; an epoch nobody was granted is refused, nothing written.
    store.save("cart", id, 1, b"one").await.unwrap();
    assert_eq!(
        store.save("cart", id, 2, b"never").await,
        Err(StoreError::StaleEpoch { epoch: 2 })
    );
    assert_eq!(
        store.load("cart", id).await.unwrap().as_deref(),
        Some(&b"one"[..])
    );

    // b takes over from epoch 1 (a was downed): a's writes and release are fenced.
    assert_eq!(
        store.take_over("cart", id, "b", 1).await,
        Ok(Claim::Granted(2))
    );
    assert_eq!(
        store.save("cart", id, 1, b"stale").await,
        Err(StoreError::StaleEpoch { epoch: 1 })
    );
    assert_eq!(
        store.release("cart", id, 1).await,
        Err(StoreError::StaleEpoch { epoch: 1 })
    );
    assert_eq!(
        store.load("cart", id).await.unwrap().as_deref(),
        Some(&b"one"[..])
    );
    // A second taker from the same old epoch loses to the first.
    assert_eq!(
        store.take_over("cart", id, "c", 1).await,
        Ok(Claim::Held {
            owner: "b".into(),
            epoch: 2
        })
    );
    store.save("cart", id, 2, b"two").await.unwrap();

    // Released: the next claim by anyone is granted a higher epoch; the state stays; a write
    // under the released epoch is refused.
    store.release("cart", id, 2).await.unwrap();
    assert_eq!(
        store.save("cart", id, 2, b"late").await,
        Err(StoreError::StaleEpoch { epoch: 2 })
    );
    assert_eq!(store.claim("cart", id, "a").await, Ok(Claim::Granted(3)));
    assert_eq!(
        store.load("cart", id).await.unwrap().as_deref(),
        Some(&b"two"[..])
    );
    // The holder claiming again (its earlier activation is gone) gets a new epoch.
    assert_eq!(store.claim("cart", id, "a").await, Ok(Claim::Granted(4)));
    assert_eq!(
        store.save("cart", id, 3, b"x").await,
        Err(StoreError::StaleEpoch { epoch: 3 })
    );

    // Other kinds are other records.
    assert_eq!(store.claim("order", id, "z").await, Ok(Claim::Granted(1)));

    // Bad keys: a typed error, nothing created.
    let long = "x".repeat(257);
    for (kind, identity) in [("", "i"), ("cart", ""), ("cart", long.as_str())] {
        assert!(matches!(
            store.claim(kind, identity, "a").await,
            Err(StoreError::InvalidKey(_))
        ));
        assert!(matches!(
            store.save(kind, identity, 1, b"x").await,
            Err(StoreError::InvalidKey(_))
        ));
    }
    let longest = "y".repeat(256);
    assert_eq!(
        store.claim("cart", &longest, "a").await,
        Ok(Claim::Granted(1))
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
