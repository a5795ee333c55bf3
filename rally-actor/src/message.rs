//! What can be sent to an actor.

/// A value that can be sent to an actor.
///
/// `Reply` is what the actor's handler returns; `tell` discards it, `ask` hands it back to the
/// caller. Use `()` for fire-and-forget messages.
///
/// # Example
///
/// ```
/// use rally::Message;
///
/// struct Add(u64);
/// impl Message for Add {
///     type Reply = u64;
/// }
/// ```
pub trait Message: Send + 'static {
    /// The handler's answer.
    type Reply: Send + 'static;
}

/// Delivered once to every watcher of an actor when that actor stops, with the reason.
///
/// A watcher receives it through `Handler<Terminated>`, on the priority lane, so it is never
/// stuck behind user messages. The same value, and so the same reason, reaches an actor that
/// watches ([`Context::watch`](crate::Context::watch)) and plain async code that awaits
/// [`ActorRef::terminated`](crate::ActorRef::terminated).
///
/// # Example
///
/// ```
/// use rally::{Actor, ActorResult, Context, Handler, Terminated};
///
/// struct Watcher;
/// impl Actor for Watcher {}
/// impl Handler<Terminated> for Watcher {
///     async fn handle(&mut self, t: Terminated, _ctx: &mut Context<Self>) -> ActorResult<()> {
///         // "stopped", "failed: …" or "its node is down"
///         println!("{} ended: {}", t.path, t.reason);
///         Ok(())
///     }
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Terminated {
    /// The stopped actor's id.
    pub id: crate::ActorId,
    /// The stopped actor's path, e.g. `/user/worker`.
    pub path: std::sync::Arc<str>,
    /// Why it stopped: asked to, failed, its node is down, or not reported.
    pub reason: TerminationReason,
}

impl Message for Terminated {
    type Reply = ();
}

impl Terminated {
    /// The notification for the actor `id` at `path`, which ended for `reason`.
    ///
    /// # Example
    ///
    /// ```
    /// use std::sync::Arc;
    /// use rally::{ActorSystem, Terminated, TerminationReason};
    ///
    /// # #[tokio::main] async fn main() {
    /// let system = ActorSystem::new("doc");
    /// let t = Terminated::new(system.next_id(), Arc::from("/user/worker"), TerminationReason::NodeDown);
    /// assert_eq!(&*t.path, "/user/worker");
    /// assert_eq!(t.reason, TerminationReason::NodeDown);
    /// # }
    /// ```
    pub fn new(id: crate::ActorId, path: std::sync::Arc<str>, reason: TerminationReason) -> Self {
        Self { id, path, reason }
    }
}

/// Why an actor stopped, as told to code that awaits its end
/// ([`ActorRef::terminated`](crate::ActorRef::terminated)).
///
/// # Example
///
/// ```
/// use rally::{Actor, ActorSystem, TerminationReason};
///
/// struct Idle;
/// impl Actor for Idle {}
///
/// # #[tokio::main] async fn main() {
/// let system = ActorSystem::new("doc");
/// let idle = system.spawn(Idle).unwrap();
/// let end = idle.terminated();
/// idle.stop();
/// assert_eq!(end.await, TerminationReason::Stopped);
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TerminationReason {
    /// It was asked to stop ([`ActorRef::stop`](crate::ActorRef::stop),
    /// [`Context::stop`](crate::Context::stop)), or its parent or the system stopped.
    Stopped,
    /// It failed and its supervisor stopped it; the failure's text.
    Failed(String),
    /// Its node is down or unreachable (told by a transport).
    NodeDown,
    /// The one who reported the stop did not say why (a transport that reports no reason).
    Unknown,
}

impl std::fmt::Display for TerminationReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Stopped => f.write_str("stopped"),
            Self::Failed(why) => write!(f, "failed: {why}"),
            Self::NodeDown => f.write_str("its node is down"),
            Self::Unknown => f.write_str("stopped for a reason not reported"),
        }
    }
}
