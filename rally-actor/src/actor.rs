//! The actor and handler traits.

use std::future::Future;

use crate::{Context, Message, SupervisorStrategy};

/// A failure returned by a handler or hook: any error type converts into it with `?`.
pub type ActorError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What handlers and hooks return: `Err` is a failure that the supervisor decides about.
pub type ActorResult<T> = Result<T, ActorError>;

/// An object that owns its state and is driven by messages.
///
/// Every hook has a default, so a plain `impl Actor for MyActor {}` is enough. Hooks returning an
/// error (or panicking) count as a failure of the actor, handled by its supervisor.
///
/// # Example
///
/// ```
/// use rally::{Actor, ActorResult, Context, Handler, Message};
///
/// #[derive(Default)]
/// struct Counter(u64);
/// impl Actor for Counter {}
///
/// struct Add(u64);
/// impl Message for Add {
///     type Reply = u64;
/// }
/// impl Handler<Add> for Counter {
///     async fn handle(&mut self, msg: Add, _ctx: &mut Context<Self>) -> ActorResult<u64> {
///         self.0 += msg.0;
///         Ok(self.0)
///     }
/// }
/// ```
pub trait Actor: Sized + Send + 'static {
    /// Runs before the first message (and again after a restart).
    fn started(&mut self, ctx: &mut Context<Self>) -> impl Future<Output = ActorResult<()>> + Send {
        let _ = ctx;
        async { Ok(()) }
    }

    /// Runs once when the actor stops, after its children have stopped.
    fn stopped(&mut self, ctx: &mut Context<Self>) -> impl Future<Output = ()> + Send {
        let _ = ctx;
        async {}
    }

    /// Runs on the failed instance before a restart; the default does nothing.
    fn pre_restart(
        &mut self,
        ctx: &mut Context<Self>,
        failure: &str,
    ) -> impl Future<Output = ()> + Send {
        let _ = (ctx, failure);
        async {}
    }

    /// Runs on the instance that continues after a restart, before `started`.
    fn post_restart(&mut self, ctx: &mut Context<Self>) -> impl Future<Output = ()> + Send {
        let _ = ctx;
        async {}
    }

    /// How this actor supervises its children. The default restarts a failing child, at most
    /// 10 times within a minute, then stops it.
    fn supervisor_strategy(&self) -> SupervisorStrategy {
        SupervisorStrategy::default()
    }
}

/// An actor that handles messages of type `M`.
///
/// Returning `Err` is a failure (supervision decides what happens next, and an `ask` waiting for
/// this message gets [`AskError::Failed`](crate::AskError::Failed)). To answer with an error
/// without failing, make the reply a `Result` and return `Ok(Err(..))`.
pub trait Handler<M: Message>: Actor {
    /// Handles one message; the actor processes one message at a time.
    fn handle(
        &mut self,
        msg: M,
        ctx: &mut Context<Self>,
    ) -> impl Future<Output = ActorResult<M::Reply>> + Send;
}
