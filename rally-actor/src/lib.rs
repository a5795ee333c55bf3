//! Rally's local actor runtime.
//!
//! Actors own their state and are driven by messages, one at a time. This crate has everything
//! that runs inside one process: typed refs ([`ActorRef`], [`Recipient`]), mailboxes with a
//! priority lane for system messages, supervision (Akka/Erlang style), death watch, timers,
//! stash, a name registry, an event stream, dead letters and dispatchers. It knows nothing of
//! networking: a transport makes an `ActorRef` to a remote actor through [`ExternalTarget`], so
//! user code is the same for local and remote actors.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use rally::{Actor, ActorResult, ActorSystem, Context, Handler, Message};
//!
//! #[derive(Default)]
//! struct Counter(u64);
//! impl Actor for Counter {}
//!
//! struct Add(u64);
//! impl Message for Add {
//!     type Reply = u64;
//! }
//!
//! impl Handler<Add> for Counter {
//!     async fn handle(&mut self, msg: Add, _ctx: &mut Context<Self>) -> ActorResult<u64> {
//!         self.0 += msg.0;
//!         Ok(self.0)
//!     }
//! }
//!
//! # #[tokio::main] async fn main() {
//! let system = ActorSystem::new("example");
//! let counter = system.spawn(Counter::default()).unwrap();
//! counter.tell(Add(1)).unwrap();
//! assert_eq!(counter.ask(Add(2), Duration::from_secs(1)).await, Ok(3));
//! system.shutdown().await.unwrap();
//! # }
//! ```
//!
//! # Modules
//!
//! - actors and messages: [`Actor`], [`Handler`], [`Message`], [`Context`]
//! - handles: [`ActorRef`], [`Recipient`], [`WeakActorRef`], [`ExternalTarget`]
//! - delivery: [`Envelope`], [`ReplyTo`], [`MailboxConfig`], [`Overflow`]
//! - failure: [`SupervisorStrategy`], [`Directive`], [`Backoff`], [`Terminated`]
//! - system: [`ActorSystem`], [`SystemConfig`] (also from TOML), [`Dispatcher`] and
//!   [`DispatcherKind`], [`EventStream`], [`DeadLetters`]
//! - routing: [`Pool`], a router that is an ordinary actor (children, supervision, a
//!   cloneable `ActorRef`); [`Router`] (round-robin, random, smallest mailbox, consistent
//!   hashing, broadcast, optional [`Resizer`]) and [`BalancingPool`] as handles
//! - waiting for an end: [`ActorRef::terminated`] ([`Termination`], [`TerminationReason`])
//! - [`monitor`]: per-actor and per-dispatcher counters and their snapshots
//! - [`config_text`]: the duration and key-naming rules every configuration file shares
//! - [`sync`]: the poison-tolerant locks every Rally crate uses
//! - [`hold`]: for transports, how the work a batch of deliveries caused is known to have run
//!
//! # Features
//!
//! | feature | default | adds |
//! |---|---|---|
//! | `monitoring` | yes | the counters behind [`monitor`]; off, they are a zero-sized no-op |
//! | `toml` | yes | `SystemConfig::from_toml` and `from_file` |
//!
//! Semantics (ordering, supervision, ask timeouts, shutdown) are written down in
//! `docs/runtime-semantics.md` at the repository root.
//!
//! A handler that panics is a failure like a returned error: its supervisor decides, an `ask`
//! waiting on it gets [`AskError::Failed`] with the panic message, and the runtime logs it
//! once through `tracing` with the actor's path. To keep such panics from printing as if the
//! process crashed, the first [`ActorSystem`] installs a panic hook that stays silent for
//! panics inside a handler and passes every other panic to the hook that was there before.

#![doc(test(attr(deny(warnings), allow(dead_code, unused_variables))))]

mod actor;
mod actor_ref;
mod config;
pub mod config_text;
mod context;
mod dead_letters;
mod dispatch;
mod envelope;
mod error;
mod event_stream;
mod filter;
pub mod hold;
mod mailbox;
mod message;
pub mod monitor;
mod panic;
mod pool;
mod props;
mod request_context;
mod routing;
mod runner;
mod supervision;
pub mod sync;
mod system;
mod watch;

pub use actor::{Actor, ActorError, ActorResult, Handler};
pub use actor_ref::{
    ActorId, ActorRef, DeliveryError, ExternalTarget, Recipient, Undelivered, WeakActorRef,
};
pub use config::{DispatcherConfig, SystemConfig, SystemConfigBuilder, SystemConfigError};
pub use context::{Context, TimerId};
pub use dead_letters::{DeadLetter, DeadLetterReason, DeadLetters};
pub use dispatch::{
    DEFAULT_CORE_POOL_SIZE, DEFAULT_KEEP_ALIVE, DEFAULT_MAX_POOL_SIZE, DEFAULT_PARALLELISM_FACTOR,
    DEFAULT_PARALLELISM_MAX, DEFAULT_PARALLELISM_MIN, DEFAULT_QUEUE_SIZE, DEFAULT_THROUGHPUT,
    Dispatcher, DispatcherError, DispatcherKind, PoolStatus,
};
pub use envelope::{Envelope, ErasedReply, Origin, ReplyError, ReplySink, ReplyTo};
pub use error::{AskError, LookupError, SendError, ShutdownError, SpawnError};
pub use event_stream::EventStream;
pub use filter::{CallFilter, EntryFilters, Incoming, Kept, Outcome, Outgoing, Rejection, Sees};
pub use mailbox::{MailboxConfig, Overflow};
pub use message::{Message, Terminated, TerminationReason};
pub use monitor::{Monitor, MonitoringConfig};
pub use panic::{CatchPanic, catch_panic};
pub use pool::Pool;
pub use props::Props;
pub use request_context::{
    ContextError, MAX_CONTEXT_BYTES, MAX_CONTEXT_ENTRIES, MAX_CONTEXT_KEY_LEN, RequestContext,
    TraceParent,
};
pub use routing::{BalancingPool, Resizer, Router, Routing};
pub use supervision::{Backoff, Directive, Failure, Scope, SupervisorStrategy};
pub use system::ActorSystem;
pub use watch::{Termination, TerminationSink};

/// The names most actor code needs.
pub mod prelude {
    pub use crate::{
        Actor, ActorRef, ActorResult, ActorSystem, Context, Handler, Message, Props, Recipient,
        Terminated,
    };
}
