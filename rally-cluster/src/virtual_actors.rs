//! Virtual actors: actors addressed by a kind and an identity, activated on demand on the
//! member that owns the identity, passivated when idle or when the member holds too many, and
//! never active twice at once.
//!
//! # How it fits together
//!
//! - A **kind** ([`VirtualActor`]) is an ordinary Rally actor built from its identity by an
//!   async activation hook; its [`Actor::stopped`](rally_actor::Actor::stopped) hook is the
//!   deactivation hook. Its state is a [`State<T>`]: loaded on activation, written before a
//!   reply that promises it is kept (a killed process runs no hook); with an idempotency key
//!   ([`State::apply_once`], [`GrainRef::ask_until_definite`]) an operation is applied exactly
//!   once. Members declare the kinds they host (`ClusterConfig::kinds`) and
//!   register them ([`VirtualActorsBuilder::kind`]); a member that declares none is
//!   client-only and still sends.
//! - **Placement** ([`Placement`]; [`Hashed`] by default, [`PreferLocal`]) proposes the
//!   member that should activate an identity: rendezvous hashing of the identity's shard (one
//!   of [`SHARDS`], [`shard_of`]) over the up members hosting the kind, so the first message
//!   takes one hop and a membership change moves only what it must. The decision is the
//!   sans-I/O [`Ownership`] core, fed with member events.
//! - **Leases decide.** Ownership is leased in the [`StateStore`](rally_state::StateStore)
//!   per [`Scope`]: a shard (or, with [`PreferLocal`], the identity alone). A member's first
//!   activation in a shard claims the shard's lease (one compare-and-set): the store grants a
//!   new, higher epoch only when nobody holds it. Later activations in the shard on that
//!   member act under the held lease without a write to the store; the last to end releases
//!   it. A member whose claim finds another holder forwards the message to that holder; if
//!   the holder was downed, it waits until the takeover margin has passed (by then the holder
//!   has stopped, see `docs/cluster-protocol.md`) and takes over from the holder's epoch.
//!   Every state write carries its lease's scope and epoch and is refused once a newer epoch
//!   was granted. So two members may disagree about placement for a moment, but only one
//!   activation holds an identity at a time; the precise statement is in
//!   `docs/runtime-semantics.md`.
//! - **Passivation** after `idle_timeout` without a message, and past `max_active`
//!   activations per kind on a member (least recently used idle ones first).
//! - **Moves**: after a membership change, each member deactivates the activations whose
//!   identity is now placed elsewhere (at most `max_concurrent_moves` at once): the messages
//!   it was handed finish, the `stopped` hook runs, the activation leaves its lease (released
//!   by a shard's last); messages that arrive meanwhile wait and are then sent on to the new
//!   owner, which claims the shard once it is released.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use rally::{Actor, ActorResult, ActorSystem, Context, Handler, Message};
//! use rally::cluster::{Cluster, ClusterConfig, MemberId};
//! use rally::cluster::provider::{MemoryNetwork, MemoryProvider};
//! use rally::cluster::virtual_actors::{Activation, GrainMessages, GrainNetwork, VirtualActor, VirtualActors};
//! use rally::remote::{Incarnation, RemoteMessage};
//! use rally::state::MemoryStore;
//! use serde::{Deserialize, Serialize};
//!
//! struct Greeter { activation: Activation }
//! impl Actor for Greeter {}
//! impl VirtualActor for Greeter {
//!     const KIND: &'static str = "greeter";
//!     async fn activate(activation: Activation) -> ActorResult<Self> { Ok(Greeter { activation }) }
//!     fn messages(table: &mut GrainMessages<Self>) { table.add::<Hello>(); }
//! }
//!
//! #[derive(Serialize, Deserialize)]
//! struct Hello(String);
//! impl Message for Hello { type Reply = String; }
//! impl RemoteMessage for Hello { const MANIFEST: &'static str = "doc.Hello"; }
//! impl Handler<Hello> for Greeter {
//!     async fn handle(&mut self, msg: Hello, _: &mut Context<Self>) -> ActorResult<String> {
//!         Ok(format!("{} says hello to {}", self.activation.identity(), msg.0))
//!     }
//! }
//!
//! # #[tokio::main] async fn main() {
//! let system = ActorSystem::new("doc");
//! let me = MemberId::new("rally://doc@mem:1".parse().unwrap(), Incarnation(1), 1)
//!     .with_kinds(["greeter"]);
//! let cluster = Cluster::join_with(me, ClusterConfig::default(), MemoryProvider::new(&MemoryNetwork::new())).unwrap();
//! let grains = VirtualActors::builder(&cluster, &system)
//!     .kind::<Greeter>()
//!     .store(Arc::new(MemoryStore::new()))
//!     .start_in_memory(&GrainNetwork::new())
//!     .unwrap();
//! cluster.wait_until_up(Duration::from_secs(10)).await.unwrap();
//! let ada = grains.get::<Greeter>("ada").unwrap();
//! // The first message activates "ada".
//! let reply = ada.ask(Hello("bob".into()), Duration::from_secs(5)).await.unwrap();
//! assert_eq!(reply, "ada says hello to bob");
//! assert_eq!(grains.stats()[0].active, 1);
//! cluster.shutdown(Duration::from_secs(10)).await.unwrap();
//! # }
//! ```

mod active;
mod call;
mod config;
mod core;
mod driver;
mod error;
mod idempotent;
mod kind;
mod outcome;
mod ownership;
mod placement;
mod runtime;
mod slot_table;
mod state;
mod transport;

/// Now, on the runtime's clock: tokio's, which is simulated time in a simulation
/// (`rally::sim`) and a paused test clock's time, and the real clock otherwise. Every deadline
/// and idle time here is measured on it, as every timer here sleeps on it.
pub(crate) fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}

pub use active::{ActiveCursor, ActiveError, ActiveIdentity, ActivePage, MAX_ACTIVE_PAGE};
pub use config::{VirtualActorsConfig, VirtualActorsConfigBuilder};
pub use error::{AskError, GetError, Handled, TellError};
pub use idempotent::{IdempotencyKey, Idempotent};
pub use kind::{Activation, GrainMessages, VirtualActor};
pub use ownership::{Holder, Ownership, Route};
pub use placement::{Hashed, Placement, PreferLocal, SHARDS, Scope, fingerprint, shard_of};
pub use rally_state::Fence;
pub use runtime::{
    CALL_TIME_BOUNDS, GrainRef, KindStats, VirtualActors, VirtualActorsBuilder,
    VirtualActorsStartError,
};
pub use state::{DEFAULT_KEY_WINDOW, MAX_KEY_BYTES, State, StateError};
pub use transport::GrainNetwork;

pub(crate) use runtime::Runtime;
