//! What can be sent to an actor.

/// A value that can be sent to an actor.
///
/// `Reply` is what the actor's handler returns; `tell` discards it, `ask` hands it back to the
/// caller. Use `()` for fire-and-forget messages.
///
/// # Example
///
/// ```
/// use rally_actor::Message;
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

/// Delivered once to every watcher of an actor when that actor stops.
///
/// A watcher receives it through `Handler<Terminated>`, on the priority lane, so it is never
/// stuck behind user messages.
///
/// # Example
///
/// ```
/// use rally_actor::{Actor, ActorResult, Context, Handler, Terminated};
///
/// struct Watcher;
/// impl Actor for Watcher {}
/// impl Handler<Terminated> for Watcher {
///     async fn handle(&mut self, t: Terminated, _ctx: &mut Context<Self>) -> ActorResult<()> {
///         println!("{} stopped", t.path);
///         Ok(())
///     }
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terminated {
    /// The stopped actor's id.
    pub id: crate::ActorId,
    /// The stopped actor's path, e.g. `/user/worker`.
    pub path: std::sync::Arc<str>,
}

impl Message for Terminated {
    type Reply = ();
}
