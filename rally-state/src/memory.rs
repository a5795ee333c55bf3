//! A store in this process's memory.

use std::collections::HashMap;
use std::sync::MutexGuard;

use crate::store::{BoxFuture, Claim, Epoch, StateStore, StoreError, check_key, check_scope};
use rally_actor::sync::Mutex;

/// A [`StateStore`] in this process's memory: for tests and for members that share one
/// process. Its epochs and state are lost when the process exits.
///
/// # Example
///
/// ```
/// use rally::state::{Claim, MemoryStore, StateStore};
///
/// # #[tokio::main] async fn main() {
/// let store = MemoryStore::new();
/// assert_eq!(store.claim("cart", "#3", "m1").await, Ok(Claim::Granted(1)));
/// # }
/// ```
#[derive(Debug, Default)]
pub struct MemoryStore {
    tables: Mutex<Tables>,
}

#[derive(Debug, Default)]
struct Tables {
    leases: HashMap<(String, String), Lease>,
    states: HashMap<(String, String), Vec<u8>>,
}

#[derive(Debug, Default)]
struct Lease {
    epoch: Epoch,
    owner: String,
    active: bool,
}

impl Tables {
    /// Whether `epoch` is the held epoch of `(kind, scope)`.
    fn holds(&self, kind: &str, scope: &str, epoch: Epoch) -> bool {
        self.leases
            .get(&(kind.to_owned(), scope.to_owned()))
            .is_some_and(|lease| lease.active && lease.epoch == epoch)
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The tables, locked (every update below is a single assignment).
    fn tables(&self) -> MutexGuard<'_, Tables> {
        self.tables.lock()
    }

    fn claim_now(
        &self,
        kind: &str,
        scope: &str,
        owner: &str,
        from: Option<Epoch>,
    ) -> Result<Claim, StoreError> {
        check_scope(kind, scope)?;
        let mut tables = self.tables();
        let lease = tables
            .leases
            .entry((kind.to_owned(), scope.to_owned()))
            .or_default();
        let granted = match from {
            None => !lease.active || lease.owner == owner,
            Some(from) => lease.epoch == from || !lease.active,
        };
        if granted {
            lease.epoch += 1;
            lease.owner = owner.to_owned();
            lease.active = true;
            Ok(Claim::Granted(lease.epoch))
        } else {
            Ok(Claim::Held {
                owner: lease.owner.clone(),
                epoch: lease.epoch,
            })
        }
    }
}

impl StateStore for MemoryStore {
    fn claim<'a>(
        &'a self,
        kind: &'a str,
        scope: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<Claim, StoreError>> {
        let result = self.claim_now(kind, scope, owner, None);
        Box::pin(async move { result })
    }

    fn take_over<'a>(
        &'a self,
        kind: &'a str,
        scope: &'a str,
        owner: &'a str,
        from: Epoch,
    ) -> BoxFuture<'a, Result<Claim, StoreError>> {
        let result = self.claim_now(kind, scope, owner, Some(from));
        Box::pin(async move { result })
    }

    fn release<'a>(
        &'a self,
        kind: &'a str,
        scope: &'a str,
        epoch: Epoch,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let result = check_scope(kind, scope).and_then(|()| {
            let mut tables = self.tables();
            match tables.leases.get_mut(&(kind.to_owned(), scope.to_owned())) {
                Some(lease) if lease.active && lease.epoch == epoch => {
                    lease.active = false;
                    Ok(())
                }
                _ => Err(StoreError::StaleEpoch { epoch }),
            }
        });
        Box::pin(async move { result })
    }

    fn load<'a>(
        &'a self,
        kind: &'a str,
        identity: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>> {
        let result = check_key(kind, identity).map(|()| {
            self.tables()
                .states
                .get(&(kind.to_owned(), identity.to_owned()))
                .cloned()
        });
        Box::pin(async move { result })
    }

    fn save<'a>(
        &'a self,
        kind: &'a str,
        scope: &'a str,
        epoch: Epoch,
        identity: &'a str,
        state: &'a [u8],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let result = check_scope(kind, scope)
            .and_then(|()| check_key(kind, identity))
            .and_then(|()| {
                let mut tables = self.tables();
                if !tables.holds(kind, scope, epoch) {
                    return Err(StoreError::StaleEpoch { epoch });
                }
                tables
                    .states
                    .insert((kind.to_owned(), identity.to_owned()), state.to_vec());
                Ok(())
            });
        Box::pin(async move { result })
    }
}
