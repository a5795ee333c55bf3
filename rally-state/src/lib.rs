//! Rally state stores: where a virtual actor's state lives between activations, and the
//! arbiter of which activation of an identity may write it.
//!
//! A virtual actor can be activated on any member that hosts its kind, so its state cannot
//! live in one member's memory: it lives in a [`StateStore`]. The same store grants the
//! **ownership epochs**: a member claims the lease of a *scope* (a shard of a kind's
//! identities, or one identity) with [`StateStore::claim`], which succeeds only when nobody
//! else holds it and returns an epoch one higher than any granted for it before.
//!
//! **One fence per life.** Each activation of an identity (a *life*) acts under a [`Fence`]:
//! its lease's epoch and its life number under that lease, ordered so that a later life's is
//! greater. Every state write carries its life's fence and is refused with
//! [`StoreError::StaleEpoch`] unless the fence's epoch is the scope's held epoch (so a life
//! whose member lost the lease, to a takeover or a release, cannot write) and the fence is not
//! below the identity's floor, which [`StateStore::fence`] raises before a new life starts
//! while an older one on the same member may still write (lives under one lease share its
//! epoch, so only the floor tells them apart). Both are checked in the statement that writes,
//! never by a read followed by a write: an activation that outlived its lease (a paused
//! process, a member on the losing side of a partition) or its life (a deactivation hook that
//! overran its deadline) cannot overwrite the state written after it.
//!
//! # Stores
//!
//! | store | feature | for |
//! |---|---|---|
//! | [`MemoryStore`] | always | tests, and members in one process |
//! | [`SqliteStore`] | `sqlite` | members on one machine, sharing one file: the zero-setup default |
//! | [`PostgresStore`] | `postgres` | members on many machines, sharing one database |
//!
//! The three keep one contract, checked against one model over random sequences of
//! operations. A member process that is stopped (SIGSTOP) while it holds SQLite's write lock
//! stalls the writes of every member on the machine until it resumes (see [`SqliteStore`]);
//! in PostgreSQL it delays at most its own scopes.
//!
//! # Example
//!
//! ```
//! use rally::state::{Claim, Fence, MemoryStore, StateStore, StoreError};
//!
//! # #[tokio::main] async fn main() {
//! let store = MemoryStore::new();
//! // Shard 7 of the kind "cart" holds "user-42".
//! let Claim::Granted(first) = store.claim("cart", "#7", "member-a").await.unwrap() else {
//!     unreachable!("nobody held it")
//! };
//! let life_1 = Fence { epoch: first, life: 1 };
//! store.save("cart", "#7", life_1, "user-42", b"3 apples").await.unwrap();
//! // Life 1's deactivation overran its deadline; life 2 fences it out before it starts.
//! let life_2 = Fence { epoch: first, life: 2 };
//! store.fence("cart", "#7", life_2, "user-42").await.unwrap();
//! assert_eq!(
//!     store.save("cart", "#7", life_1, "user-42", b"late").await,
//!     Err(StoreError::StaleEpoch { fence: life_1 })
//! );
//! store.save("cart", "#7", life_2, "user-42", b"4 apples").await.unwrap();
//! // member-a was downed; member-b takes over from the epoch it saw.
//! let Claim::Granted(second) = store.take_over("cart", "#7", "member-b", first).await.unwrap() else {
//!     unreachable!("the epoch had not moved")
//! };
//! assert!(second > first);
//! assert_eq!(store.load("cart", "user-42").await.unwrap().as_deref(), Some(&b"4 apples"[..]));
//! // Every life under the old lease is fenced by its epoch.
//! assert_eq!(
//!     store.save("cart", "#7", life_2, "user-42", b"stale").await,
//!     Err(StoreError::StaleEpoch { fence: life_2 })
//! );
//! store.save("cart", "#7", Fence { epoch: second, life: 0 }, "user-42", b"5 apples").await.unwrap();
//! # }
//! ```

#![doc(test(attr(deny(warnings), allow(dead_code, unused_variables))))]

mod memory;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;
mod store;

pub use memory::MemoryStore;
#[cfg(feature = "postgres")]
pub use postgres::PostgresStore;
#[cfg(feature = "sqlite")]
pub use sqlite::{SqliteStats, SqliteStore};
pub use store::{
    BoxFuture, Claim, Epoch, Fence, MAX_IDENTITY_BYTES, MAX_KIND_BYTES, MAX_LIFE, MAX_SCOPE_BYTES,
    StateStore, StoreError,
};
