//! The store trait, its epochs and its errors.

use std::future::Future;
use std::pin::Pin;

/// An ownership epoch: granted by [`StateStore::claim`] and [`StateStore::take_over`], one
/// higher than every epoch granted before for the same scope. Epoch 0 is never granted.
pub type Epoch = u64;

/// The fence of one life of an identity: the epoch of the lease it acts under and its life
/// number under that lease. Ordered lexicographically (epoch, then life), so the fence of a
/// later life is greater: a later lease has a higher epoch, and a member numbers the lives it
/// starts under one lease in order.
///
/// Every state write carries the fence of the life that makes it. The store refuses it
/// ([`StoreError::StaleEpoch`]) unless its epoch is the scope's held epoch and it is not below
/// the identity's floor (raised by [`StateStore::fence`]).
///
/// # Example
///
/// ```
/// use rally::state::Fence;
///
/// let first = Fence { epoch: 3, life: 7 };
/// assert!(first < Fence { epoch: 3, life: 8 }, "a later life under the same lease");
/// assert!(first < Fence { epoch: 4, life: 0 }, "any life under a later lease");
/// assert_eq!(first.to_string(), "epoch 3, life 7");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fence {
    /// The epoch of the lease the life acts under.
    pub epoch: Epoch,
    /// The life's number under that lease.
    pub life: u64,
}

impl std::fmt::Display for Fence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "epoch {}, life {}", self.epoch, self.life)
    }
}

/// The highest life number a store accepts: SQL stores integers as signed 64-bit numbers.
pub const MAX_LIFE: u64 = i64::MAX as u64;

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
/// use rally::state::{Fence, MemoryStore, StateStore, StoreError};
///
/// # #[tokio::main] async fn main() {
/// let store = MemoryStore::new();
/// let fence = Fence { epoch: 7, life: 0 };
/// assert_eq!(store.save("k", "#7", fence, "i", b"x").await, Err(StoreError::StaleEpoch { fence }));
/// assert!(matches!(store.claim("", "i", "a").await, Err(StoreError::InvalidKey(_))));
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The writer's lease or life is no longer current: the fence's epoch is not the one held
    /// for the scope (a newer one was granted, or the scope was released), or the fence is
    /// below the identity's floor (a later life of the identity was fenced in). The operation
    /// is refused and nothing changed. (A refused [`release`](StateStore::release) carries
    /// its epoch and life 0.)
    #[error("the writer's lease or life is no longer current ({fence}): write refused")]
    StaleEpoch {
        /// The fence the refused operation carried.
        fence: Fence,
    },
    /// An empty or too long kind, scope or identity, or a life number above [`MAX_LIFE`];
    /// nothing was done.
    #[error("invalid key: {0}")]
    InvalidKey(String),
    /// The backend failed (I/O, connection, SQL). The operation may or may not have applied.
    #[error("state store backend: {0}")]
    Backend(String),
}

/// Where virtual actors keep their state, and the leases and fences that say which life of an
/// identity may write it.
///
/// **Leases.** Ownership is granted per *scope*, a group of identities of one kind that one
/// member holds at a time: [`claim`](Self::claim) grants a scope under an epoch one higher
/// than any granted for it before, and only while nobody else holds it. Rally groups a
/// kind's identities into shards (scope `#` and the shard's number), so one claim serves
/// every identity of a shard a member activates while it holds the shard; an identity placed
/// on its own (`PreferLocal`) is a scope of its own (`=` and the identity).
///
/// **Lives and fences.** Each activation of an identity is a *life* with a [`Fence`] of its
/// own: its lease's epoch and its life number under that lease. A write carries its life's
/// fence and is refused unless the fence's epoch is the scope's held epoch, so a life whose
/// member lost the lease cannot write. Lives one after another on one member share the lease,
/// so the lease cannot tell them apart: when a life may still write (its deactivation overran
/// its deadline) and the next is about to start, the runtime raises the identity's *floor*
/// with [`fence`](Self::fence) to the next life's fence, and from then on the older life's
/// writes are refused too.
///
/// **State** is kept per identity. Every method is one atomic step in the backend, checked in
/// the statement that writes; none reads and then writes. An owner is an opaque string (Rally
/// uses the member's address and incarnation).
///
/// # Example
///
/// ```
/// use rally::state::{Claim, Fence, MemoryStore, StateStore, StoreError};
/// use std::sync::Arc;
///
/// # #[tokio::main] async fn main() {
/// let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
/// let Ok(Claim::Granted(epoch)) = store.claim("counter", "#12", "m1").await else { panic!() };
/// // Two identities of shard 12, each in its first life under the lease.
/// let first = Fence { epoch, life: 0 };
/// store.save("counter", "#12", first, "c-1", &7u64.to_le_bytes()).await.unwrap();
/// store.save("counter", "#12", first, "c-9", &1u64.to_le_bytes()).await.unwrap();
/// // The first life of c-1 overran its deactivation: fence it out before the next starts.
/// let next = Fence { epoch, life: 1 };
/// store.fence("counter", "#12", next, "c-1").await.unwrap();
/// assert_eq!(
///     store.save("counter", "#12", first, "c-1", b"late").await,
///     Err(StoreError::StaleEpoch { fence: first })
/// );
/// store.save("counter", "#12", next, "c-1", &8u64.to_le_bytes()).await.unwrap();
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
    /// [`StoreError::StaleEpoch`] (with life 0) if `epoch` is no longer the held epoch (it
    /// was taken over). [`StoreError::InvalidKey`], [`StoreError::Backend`].
    fn release<'a>(
        &'a self,
        kind: &'a str,
        scope: &'a str,
        epoch: Epoch,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// The state saved for `identity`, if any (an identity fenced but never saved has none).
    ///
    /// # Errors
    ///
    /// [`StoreError::InvalidKey`], [`StoreError::Backend`].
    fn load<'a>(
        &'a self,
        kind: &'a str,
        identity: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>>;

    /// Replaces the state of `identity`, only while `fence.epoch` is the held epoch of `scope`
    /// (the scope the writer's life was granted) and `fence` is not below the identity's floor
    /// (see [`fence`](Self::fence)); both checked in the statement that writes. A save does not
    /// raise the floor.
    ///
    /// # Errors
    ///
    /// [`StoreError::StaleEpoch`] if either check fails: nothing is written.
    /// [`StoreError::InvalidKey`], [`StoreError::Backend`].
    fn save<'a>(
        &'a self,
        kind: &'a str,
        scope: &'a str,
        fence: Fence,
        identity: &'a str,
        state: &'a [u8],
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Raises `identity`'s floor to `fence` (never lowers it): once this returned `Ok`, every
    /// save carrying a lower fence is refused, a save already in flight included. It leaves the
    /// state as it is, and works as well for an identity never saved (a later first save by an
    /// older life is refused).
    ///
    /// The floor belongs to `scope`: a save under another scope is not compared with it (fences
    /// of two scopes are not ordered: each scope counts its epochs from 1), and a fence under
    /// another scope replaces it. An identity changes scope only when the kind's placement
    /// settings change (its shard count, or `PreferLocal`).
    ///
    /// # Errors
    ///
    /// [`StoreError::StaleEpoch`] if `fence.epoch` is not the held epoch of `scope` (then
    /// every older life is fenced by its epoch already): the floor is left as it was.
    /// [`StoreError::InvalidKey`], [`StoreError::Backend`].
    fn fence<'a>(
        &'a self,
        kind: &'a str,
        scope: &'a str,
        fence: Fence,
        identity: &'a str,
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

/// Checks a write's keys (its lease's and its state's) and its fence's life.
pub(crate) fn check_write(
    kind: &str,
    scope: &str,
    fence: Fence,
    identity: &str,
) -> Result<(), StoreError> {
    check_scope(kind, scope)?;
    check_key(kind, identity)?;
    if fence.life > MAX_LIFE {
        return Err(StoreError::InvalidKey(format!(
            "life must be at most {MAX_LIFE}, got {}",
            fence.life
        )));
    }
    Ok(())
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

/// The refusal of an operation carrying `fence`.
pub(crate) fn stale(fence: Fence) -> StoreError {
    StoreError::StaleEpoch { fence }
}

/// The answer of a statement that changes one row when its compare holds: one row changed,
/// applied; none, the operation carrying `fence` is refused.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn applied(changed: u64, fence: Fence) -> Result<(), StoreError> {
    if changed == 1 {
        Ok(())
    } else {
        Err(stale(fence))
    }
}

/// An epoch as SQL stores it (a signed 64-bit integer). No epoch above `i64::MAX` is ever
/// granted, so one that high from outside (a caller's argument) becomes -1, which no lease
/// holds and no takeover's `from` matches: the statement then refuses it as it would any
/// epoch not held.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn epoch_to_sql(epoch: Epoch) -> i64 {
    i64::try_from(epoch).unwrap_or(-1)
}

/// A life as SQL stores it. [`check_write`] refused lives above [`MAX_LIFE`] before any
/// reaches a statement, so this never saturates.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn life_to_sql(life: u64) -> i64 {
    i64::try_from(life).unwrap_or(i64::MAX)
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn from_sql(epoch: i64) -> Epoch {
    // Epochs start at 1 and only grow, so a stored one is never negative.
    Epoch::try_from(epoch).unwrap_or(0)
}
