//! A store in this process's memory.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::store::{BoxFuture, Claim, Epoch, StateStore, StoreError, check_key};

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
/// assert_eq!(store.claim("cart", "u1", "m1").await, Ok(Claim::Granted(1)));
/// # }
/// ```
#[derive(Debug, Default)]
pub struct MemoryStore {
    records: Mutex<HashMap<(String, String), Record>>,
}

#[derive(Debug, Default)]
struct Record {
    epoch: Epoch,
    owner: String,
    active: bool,
    state: Option<Vec<u8>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// No method panics while holding the lock, but a poisoned lock must not take the store
    /// down with it: every update below is a single assignment, so the data stays whole.
    fn records(&self) -> MutexGuard<'_, HashMap<(String, String), Record>> {
        self.records.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn claim_now(
        &self,
        kind: &str,
        identity: &str,
        owner: &str,
        from: Option<Epoch>,
    ) -> Result<Claim, StoreError> {
        check_key(kind, identity)?;
        let mut records = self.records();
        let record = records
            .entry((kind.to_owned(), identity.to_owned()))
            .or_default();
        let granted = match from {
            None => !record.active || record.owner == owner,
            Some(from) => record.epoch == from || !record.active,
        };
        if granted {
            record.epoch += 1;
            record.owner = owner.to_owned();
            record.active = true;
            Ok(Claim::Granted(record.epoch))
        } else {
            Ok(Claim::Held {
                owner: record.owner.clone(),
                epoch: record.epoch,
            })
        }
    }

    fn with_held(
        &self,
        kind: &str,
        identity: &str,
        epoch: Epoch,
        update: impl FnOnce(&mut Record),
    ) -> Result<(), StoreError> {
        check_key(kind, identity)?;
        let mut records = self.records();
        match records.get_mut(&(kind.to_owned(), identity.to_owned())) {
            Some(record) if record.active && record.epoch == epoch => {
                update(record);
                Ok(())
            }
            _ => Err(StoreError::StaleEpoch { epoch }),
        }
    }
}

impl StateStore for MemoryStore {
    fn claim<'a>(
        &'a self,
        kind: &'a str,
        identity: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<Claim, StoreError>> {
        let result = self.claim_now(kind, identity, owner, None);
        Box::pin(async move { result })
    }

    fn take_over<'a>(
        &'a self,
        kind: &'a str,
        identity: &'a str,
        owner: &'a str,
        from: Epoch,
    ) -> BoxFuture<'a, Result<Claim, StoreError>> {
        let result = self.claim_now(kind, identity, owner, Some(from));
        Box::pin(async move { result })
    }

    fn release<'a>(
        &'a self,
        kind: &'a str,
        identity: &'a str,
        epoch: Epoch,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let result = self.with_held(kind, identity, epoch, |record| record.active = false);
        Box::pin(async move { result })
    }

    fn load<'a>(
        &'a self,
        kind: &'a str,
        identity: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>> {
        let result = check_key(kind, identity).map(|()| {
            self.records()
                .get(&(kind.to_owned(), identity.to_owned()))
                .and_then(|record| record.state.clone())
        });
        Box::pin(async move { result })
    }

    fn save<'a>(
        &'a self,
        kind: &'a str,
        identity: &'a str,
        epoch: Epoch,
        state: &'a [u8],
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let result = self.with_held(kind, identity, epoch, |record| {
            record.state = Some(state.to_vec());
        });
        Box::pin(async move { result })
    }
}
