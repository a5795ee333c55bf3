//! The store trait, its epochs and its errors.

use std::future::Future;
use std::pin::Pin;

/// An ownership epoch: granted by [`StateStore::claim`] and [`StateStore::take_over`], one
/// higher than every epoch granted before for the same scope. Epoch 0 is never granted.
pub type Epoch = u64;

/// A boxed future, as the store's methods return (the trait is used as `dyn StateStore`).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The longest kind name a store accepts, in bytes.
pub const MAX_KIND_BYTES: usize = 128;

/// The longest identity a store accepts, in bytes: room for a UUID, an e-mail address or a
/// composite key, small enough to index in every database.
pub const MAX_IDENTITY_BYTES: usize = 256;

/// The longest scope a store accepts, in bytes: an identity and a one-byte prefix (Rally
/// writes `#` and a shard number for a shard's lease, `=` and the identity for an identity
/// leased on its own).
pub const MAX_SCOPE_BYTES: usize = MAX_IDENTITY_BYTES + 1;

/// The outcome of a claim.
///
/// # Example
///
/// ```
/// use rally::state::{Claim, MemoryStore, StateStore};
///
/// # #[tokio::main] async fn main() {
/// let store = MemoryStore::new();
/// assert_eq!(store.claim("k", "#7", "a").await, Ok(Claim::Granted(1)));
/// assert_eq!(
///     store.claim("k", "#7", "b").await,
///     Ok(Claim::Held { owner: "a".into(), epoch: 1 })
/// );
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Claim {
    /// The scope is now held under this epoch.
    Granted(Epoch),
    /// Another owner holds the scope under this epoch (at the time of the answer).
    Held {
        /// Who holds it (as given to `claim`).
        owner: String,
        /// Under which epoch.
        epoch: Epoch,
    },
}

/// Why a store operation failed.
///
/// # Example
///
/// ```
/// use rally::state::{MemoryStore, StateStore, StoreError};
///
/// # #[tokio::main] async fn main() {
/// let store = MemoryStore::new();
/// assert_eq!(store.save("k", "#7", 7, "i", b"x").await, Err(StoreError::StaleEpoch { epoch: 7 }));
/// assert!(matches!(store.claim("", "i", "a").await, Err(StoreError::InvalidKey(_))));
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The epoch is not the one currently granted for the scope (a newer one was, or the
    /// scope was released): the write is refused and nothing changed.
    #[error("epoch {epoch} is no longer the owner's epoch: write refused")]
    StaleEpoch {
        /// The epoch the refused operation carried.
        epoch: Epoch,
    },
    /// An empty or too long kind, scope or identity; nothing was done.
    #[error("invalid key: {0}")]
    InvalidKey(String),
    /// The backend failed (I/O, connection, SQL). The operation may or may not have applied.
    #[error("state store backend: {0}")]
    Backend(String),
}

/// Where virtual actors keep their state, and the leases that say which member may act for
/// them.
///
/// **Leases.** Ownership is granted per *scope*, a group of identities of one kind that one
/// member holds at a time: [`claim`](Self::claim) grants a scope under an epoch one higher
/// than any granted for it before, and only while nobody else holds it. Rally groups a
/// kind's identities into shards (scope `#` and the shard's number), so one claim serves
/// every identity of a shard a member activates while it holds the shard; an identity placed
/// on its own (`PreferLocal`) is a scope of its own (`=` and the identity).
///
/// **State** is kept per identity. A write names the scope and epoch it acts under and is
/// refused unless that epoch is the scope's held epoch, checked in the statement that writes.
///
/// Every method is one atomic step in the backend; none reads and then writes. An owner is an
/// opaque string (Rally uses the member's address and incarnation).
///
/// # Example
///
/// ```
/// use rally::state::{Claim, MemoryStore, StateStore};
/// use std::sync::Arc;
///
/// # #[tokio::main] async fn main() {
/// let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
/// let Ok(Claim::Granted(epoch)) = store.claim("counter", "#12", "m1").await else { panic!() };
/// // Two identities of shard 12, written under its lease.
/// store.save("counter", "#12", epoch, "c-1", &7u64.to_le_bytes()).await.unwrap();
/// store.save("counter", "#12", epoch, "c-9", &1u64.to_le_bytes()).await.unwrap();
/// store.release("counter", "#12", epoch).await.unwrap();
/// // Released: anyone may claim again, under a higher epoch.
/// assert_eq!(store.claim("counter", "#12", "m2").await, Ok(Claim::Granted(epoch + 1)));
/// # }
/// ```
pub trait StateStore: Send + Sync + std::fmt::Debug + 'static {
    /// Claims the lease of `(kind, scope)` for `owner`: granted, under an epoch one higher
    /// than any before, if nobody holds it or `owner` itself does (its earlier hold is gone);
    /// otherwise the current holder is reported.
    ///
    /// # Errors
    ///
    /// [`StoreError::InvalidKey`], [`StoreError::Backend`].
    fn claim<'a>(
        &'a self,
        kind: &'a str,
        scope: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<Claim, StoreError>>;

    /// Takes the lease of `(kind, scope)` over for `owner` from a holder known to be gone
    /// (downed, and the takeover margin passed): granted only if the epoch is still `from`
    /// (or nobody holds it); otherwise the current holder is reported (someone else took
    /// over first).
    ///
    /// # Errors
    ///
    /// As [`claim`](Self::claim).
    fn take_over<'a>(
        &'a self,
        kind: &'a str,
        scope: &'a str,
        owner: &'a str,
        from: Epoch,
    ) -> BoxFuture<'a, Result<Claim, StoreError>>;

    /// Releases the lease held under `epoch` (its holder ended every activation under it):
    /// the next claim by anyone is granted, and writes under `epoch` are refused.
    ///
    /// # Errors
    ///
    /// [`StoreError::StaleEpoch`] if `epoch` is no longer the held epoch (it was taken over).
    fn release<'a>(
        &'a self,
        kind: &'a str,
        scope: &'a str,
        epoch: Epoch,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// The state saved for `identity`, if any.
    ///
    /// # Errors
    ///
    /// [`StoreError::InvalidKey`], [`StoreError::Backend`].
    fn load<'a>(
        &'a self,
        kind: &'a str,
        identity: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>>;

    /// Replaces the state of `identity`, only while `epoch` is the held epoch of `scope`
    /// (the scope the writer's activation was granted).
    ///
    /// # Errors
    ///
    /// [`StoreError::StaleEpoch`] if `epoch` is not the scope's held epoch: nothing is
    /// written. [`StoreError::InvalidKey`], [`StoreError::Backend`].
    fn save<'a>(
        &'a self,
        kind: &'a str,
        scope: &'a str,
        epoch: Epoch,
        identity: &'a str,
        state: &'a [u8],
    ) -> BoxFuture<'a, Result<(), StoreError>>;
}

/// Checks a state's key before it reaches a backend.
pub(crate) fn check_key(kind: &str, identity: &str) -> Result<(), StoreError> {
    check_len("kind", kind, MAX_KIND_BYTES)?;
    check_len("identity", identity, MAX_IDENTITY_BYTES)
}

/// Checks a lease's key before it reaches a backend.
pub(crate) fn check_scope(kind: &str, scope: &str) -> Result<(), StoreError> {
    check_len("kind", kind, MAX_KIND_BYTES)?;
    check_len("scope", scope, MAX_SCOPE_BYTES)
}

fn check_len(what: &str, value: &str, max: usize) -> Result<(), StoreError> {
    if value.is_empty() || value.len() > max {
        return Err(StoreError::InvalidKey(format!(
            "{what} must be 1..={max} bytes, got {}",
            value.len()
        )));
    }
    Ok(())
}

/// Epochs are stored as SQL's signed 64-bit integers; one past `i64::MAX` grants is not
/// reachable, but an epoch from outside (a caller's argument) may be out of range.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn to_sql(epoch: Epoch) -> Result<i64, StoreError> {
    i64::try_from(epoch).map_err(|_| StoreError::StaleEpoch { epoch })
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn from_sql(epoch: i64) -> Epoch {
    // Epochs start at 1 and only grow, so a stored one is never negative.
    Epoch::try_from(epoch).unwrap_or(0)
}
