//! Rally remoting: actors on other nodes, reached through ordinary `ActorRef`s.
//!
//! A [`RemoteNode`] makes an actor system reachable over TCP. Actors are exposed under a name
//! ([`RemoteNode::expose`]) and looked up from other nodes ([`RemoteNode::lookup`]); the
//! resulting `ActorRef<A>` is used exactly like a local one: `tell`, `ask`, `request`, watch.
//!
//! Only message types registered for an actor type ([`RemoteActor`], [`RemoteMessage`]) cross
//! the wire, under stable manifests; anything else is refused at the sender or dropped and
//! counted at the receiver. Nodes authenticate each other with a shared secret.
//!
//! Writes batch themselves: each lane has one writer that sends everything queued in one
//! system call, with no timer and no threshold (see `outbound`). The wire format is in
//! `docs/wire-protocol.md`; delivery guarantees in `docs/runtime-semantics.md`.
//!
//! # Modules
//!
//! - [`RemoteNode`], [`RemoteConfig`], [`RemoteStats`]: the node and its settings and figures
//! - [`RemoteActor`], [`RemoteMessage`], [`MessageTable`]: what may cross the wire
//! - [`PeerEvent`] ([`RemoteNode::peer_events`]): peers connected, unreachable, down;
//!   [`RemoteContext`]: which node sent the message being handled
//! - [`transport`]: TCP and in-memory streams behind one trait

#![doc(test(attr(deny(warnings), allow(dead_code, unused_variables))))]

mod association;
pub mod codec;
mod config;
mod connection;
mod context;
mod deploy;
mod events;
mod grain;
mod inbound;
mod node;
mod outbound;
mod registry;
mod remote_ref;
mod stats;

/// Now, on the runtime's clock: the real clock, or a paused and simulated one in tests (so
/// heartbeats, the failure detector and frame deadlines follow simulated time).
pub(crate) fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}
pub mod transport;

pub use config::{RemoteConfig, RemoteConfigBuilder, RemoteConfigError};
pub use connection::ConnectError;
pub use deploy::{RemoteSpawnError, SPAWNER};
pub use events::{DownReason, PeerEvent, RemoteContext};
pub use grain::{
    GrainAnswer, GrainAsk, GrainPeer, GrainReplyTo, GrainRequest, GrainSend, GrainService,
};
pub use node::{ExposeError, NodeStartError, RemoteNode};
pub use outbound::PushError;
pub use rally_wire::{GrainFlags, GrainOutcome, Handled, Incarnation, NodeAddress, UniqueAddress};
pub use registry::{DeliverError, MessageTable, RemoteActor, RemoteMessage};
pub use stats::RemoteStats;
