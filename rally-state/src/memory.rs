//! A store in this process's memory.

use std::collections::HashMap;
use std::sync::MutexGuard;

use crate::store::{
    BoxFuture, Claim, Epoch, Fence, StateStore, StoreError, check_key, check_scope, check_write,
    stale,
};
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
    states: HashMap<(String, String), Record>,
}

/// What the store keeps of an identity: its state, and its floor with the scope it belongs to.
#[derive(Debug, Default)]
struct Record {
    state: Option<Vec<u8>>,
    floor: Option<(String, Fence)>,
}

impl Record {
    /// Whether a write under `scope` carrying `fence` is at or above the floor.
    fn admits(&self, scope: &str, fence: Fence) -> bool {
        self.floor
            .as_ref()
            .is_none_or(|(floor_scope, floor)| floor_scope != scope || fence >= *floor)
    }
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

    /// Checks a write's keys and that its fence's epoch is held, then runs `write` on the
    /// identity's record (an empty one if it has none), all under the lock.
    fn write(
        &self,
        kind: &str,
        scope: &str,
        fence: Fence,
        identity: &str,
        write: impl FnOnce(&mut Record) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        check_write(kind, scope, fence, identity)?;
        let mut tables = self.tables();
        if !tables.holds(kind, scope, fence.epoch) {
            return Err(stale(fence));
        }
        write(
            tables
                .states
                .entry((kind.to_owned(), identity.to_owned()))
                .or_default(),
        )
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
                _ => Err(stale(Fence { epoch, life: 0 })),
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
                .and_then(|record| record.state.clone())
        });
        Box::pin(async move { result })
    }

    fn save<'a>(
        &'a self,
        kind: &'a str,
        scope: &'a str,
        fence: Fence,
        identity: &'a str,
        state: &'a [u8],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let result = self.write(kind, scope, fence, identity, |record| {
            if !record.admits(scope, fence) {
                return Err(stale(fence));
            }
            record.state = Some(state.to_vec());
            Ok(())
        });
        Box::pin(async move { result })
    }

    fn fence<'a>(
        &'a self,
        kind: &'a str,
        scope: &'a str,
        fence: Fence,
        identity: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let result = self.write(kind, scope, fence, identity, |record| {
            let raised = match &record.floor {
                Some((floor_scope, floor)) => floor_scope != scope || fence > *floor,
                None => true,
            };
            if raised {
                record.floor = Some((scope.to_owned(), fence));
            }
            Ok(())
        });
        Box::pin(async move { result })
    }
}
