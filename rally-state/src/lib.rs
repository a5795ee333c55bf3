//! Rally state stores: where a virtual actor's state lives between activations, and the
//! arbiter of which activation of an identity may act.
//!
//! A virtual actor can be activated on any member that hosts its kind, so its state cannot
//! live in one member's memory: it lives in a [`StateStore`]. The same store grants the
//! **ownership epochs**: a member claims the lease of a *scope* (a shard of a kind's
//! identities, or one identity) with [`StateStore::claim`], which succeeds only when nobody
//! else holds it and returns an epoch one higher than any granted for it before. Every
//! activation in the scope acts under that epoch; every state write carries it and is refused
//! with [`StoreError::StaleEpoch`] once a newer epoch has been granted for the scope (or the
//! lease was released): a compare-and-set on the epoch in the statement that writes, never a
//! read followed by a write. An activation that outlived its member's lease (a paused process,
//! a member on the losing side of a partition) therefore cannot overwrite the state written
//! under the lease that replaced it.
//!
//! # Stores
//!
//! | store | feature | for |
//! |---|---|---|
//! | [`MemoryStore`] | always | tests, and members in one process |
//! | [`SqliteStore`] | `sqlite` | members on one machine, sharing one file: the zero-setup default |
//! | [`PostgresStore`] | `postgres` | members on many machines, sharing one database |
//!
//! # Example
//!
//! ```
//! use rally::state::{Claim, MemoryStore, StateStore, StoreError};
//!
//! # #[tokio::main] async fn main() {
//! let store = MemoryStore::new();
//! // Shard 7 of the kind "cart" holds "user-42".
//! let Claim::Granted(first) = store.claim("cart", "#7", "member-a").await.unwrap() else {
//!     unreachable!("nobody held it")
//! };
//! store.save("cart", "#7", first, "user-42", b"3 apples").await.unwrap();
//! // member-a was downed; member-b takes over from the epoch it saw.
//! let Claim::Granted(second) = store.take_over("cart", "#7", "member-b", first).await.unwrap() else {
//!     unreachable!("the epoch had not moved")
//! };
//! assert!(second > first);
//! assert_eq!(store.load("cart", "user-42").await.unwrap().as_deref(), Some(&b"3 apples"[..]));
//! // The old activation's write is fenced.
//! assert_eq!(
//!     store.save("cart", "#7", first, "user-42", b"stale").await,
//!     Err(StoreError::StaleEpoch { epoch: first })
//! );
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
pub use sqlite::SqliteStore;
pub use store::{
    BoxFuture, Claim, Epoch, MAX_IDENTITY_BYTES, MAX_KIND_BYTES, MAX_SCOPE_BYTES, StateStore,
    StoreError,
};
