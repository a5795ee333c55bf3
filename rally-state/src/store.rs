//! The store trait, its epochs and its errors.

use std::future::Future;
use std::pin::Pin;

/// An ownership epoch: granted by [`StateStore::claim`] and [`StateStore::take_over`], one
/// higher than every epoch granted before for the same identity. Epoch 0 is never granted.
pub type Epoch = u64;

/// A boxed future, as the store's methods return (the trait is used as `dyn StateStore`).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The longest kind name a store accepts, in bytes.
pub const MAX_KIND_BYTES: usize = 128;

/// The longest identity a store accepts, in bytes: room for a UUID, an e-mail address or a
/// composite key, small enough to index in every database.
pub const MAX_IDENTITY_BYTES: usize = 256;

/// The outcome of a claim.
///
/// # Example
///
/// ```
/// use rally::state::{Claim, MemoryStore, StateStore};
///
/// # #[tokio::main] async fn main() {
/// let store = MemoryStore::new();
/// assert_eq!(store.claim("k", "i", "a").await, Ok(Claim::Granted(1)));
/// assert_eq!(
///     store.claim("k", "i", "b").await,
///     Ok(Claim::Held { owner: "a".into(), epoch: 1 })
/// );
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Claim {
    /// The identity is now held under this epoch.
    Granted(Epoch),
    /// Another owner holds the identity under this epoch (at the time of the answer).
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
/// assert_eq!(store.save("k", "i", 7, b"x").await, Err(StoreError::StaleEpoch { epoch: 7 }));
/// assert!(matches!(store.claim("", "i", "a").await, Err(StoreError::InvalidKey(_))));
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The epoch is not the one currently granted (a newer one was, or the identity was
    /// released): the write is refused and nothing changed.
    #[error("epoch {epoch} is no longer the owner's epoch: write refused")]
    StaleEpoch {
        /// The epoch the refused operation carried.
        epoch: Epoch,
    },
    /// An empty or too long kind or identity; nothing was done.
    #[error("invalid key: {0}")]
    InvalidKey(String),
    /// The backend failed (I/O, connection, SQL). The operation may or may not have applied.
    #[error("state store backend: {0}")]
    Backend(String),
}

/// Where virtual actors keep their state and their ownership epochs.
///
/// Every method is one atomic step in the backend; none reads and then writes. Records are
/// keyed by `(kind, identity)`; an owner is an opaque string (Rally uses the member's address
/// and incarnation).
///
/// # Example
///
/// ```
/// use rally::state::{Claim, MemoryStore, StateStore};
/// use std::sync::Arc;
///
/// # #[tokio::main] async fn main() {
/// let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
/// let Ok(Claim::Granted(epoch)) = store.claim("counter", "c-1", "m1").await else { panic!() };
/// store.save("counter", "c-1", epoch, &7u64.to_le_bytes()).await.unwrap();
/// store.release("counter", "c-1", epoch).await.unwrap();
/// // Released: anyone may claim again, under a higher epoch.
/// assert_eq!(store.claim("counter", "c-1", "m2").await, Ok(Claim::Granted(epoch + 1)));
/// # }
/// ```
pub trait StateStore: Send + Sync + std::fmt::Debug + 'static {
    /// Claims `(kind, identity)` for `owner`: granted, under an epoch one higher than any
    /// before, if nobody holds it or `owner` itself does (its earlier activation is gone);
    /// otherwise the current holder is reported.
    ///
    /// # Errors
    ///
    /// [`StoreError::InvalidKey`], [`StoreError::Backend`].
    fn claim<'a>(
        &'a self,
        kind: &'a str,
        identity: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<Claim, StoreError>>;

    /// Takes `(kind, identity)` over for `owner` from a holder known to be gone (downed, and
    /// the takeover margin passed): granted only if the epoch is still `from`; otherwise the
    /// current holder is reported (someone else took over first).
    ///
    /// # Errors
    ///
    /// As [`claim`](Self::claim).
    fn take_over<'a>(
        &'a self,
        kind: &'a str,
        identity: &'a str,
        owner: &'a str,
        from: Epoch,
    ) -> BoxFuture<'a, Result<Claim, StoreError>>;

    /// Releases the identity held under `epoch` (the activation ended): the next claim by
    /// anyone is granted.
    ///
    /// # Errors
    ///
    /// [`StoreError::StaleEpoch`] if `epoch` is no longer the held epoch (it was taken over).
    fn release<'a>(
        &'a self,
        kind: &'a str,
        identity: &'a str,
        epoch: Epoch,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// The saved state, if any.
    ///
    /// # Errors
    ///
    /// [`StoreError::InvalidKey`], [`StoreError::Backend`].
    fn load<'a>(
        &'a self,
        kind: &'a str,
        identity: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>>;

    /// Replaces the state, only while `epoch` is the held epoch.
    ///
    /// # Errors
    ///
    /// [`StoreError::StaleEpoch`] if `epoch` is not the held epoch: nothing is written.
    fn save<'a>(
        &'a self,
        kind: &'a str,
        identity: &'a str,
        epoch: Epoch,
        state: &'a [u8],
    ) -> BoxFuture<'a, Result<(), StoreError>>;
}

/// Checks a key before it reaches a backend.
pub(crate) fn check_key(kind: &str, identity: &str) -> Result<(), StoreError> {
    if kind.is_empty() || kind.len() > MAX_KIND_BYTES {
        return Err(StoreError::InvalidKey(format!(
            "kind must be 1..={MAX_KIND_BYTES} bytes, got {}",
            kind.len()
        )));
    }
    if identity.is_empty() || identity.len() > MAX_IDENTITY_BYTES {
        return Err(StoreError::InvalidKey(format!(
            "identity must be 1..={MAX_IDENTITY_BYTES} bytes, got {}",
            identity.len()
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
