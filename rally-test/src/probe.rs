//! The probe actor.

use std::time::Duration;

use rally_actor::{
    Actor, ActorRef, ActorResult, ActorSystem, Context, Handler, Message, Terminated,
};
use tokio::sync::mpsc;

/// Why an expectation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ExpectError {
    /// No message arrived within the timeout.
    #[error("no message within {0:?}")]
    Timeout(Duration),
    /// A message arrived when none was expected.
    #[error("unexpected message: {0}")]
    Unexpected(String),
    /// The probe actor stopped.
    #[error("the probe stopped")]
    Stopped,
}

/// The actor behind a [`Probe`]: forwards every `M` it receives to the probe.
pub struct ProbeActor<M> {
    sink: mpsc::UnboundedSender<M>,
}

impl<M: Message> Actor for ProbeActor<M> {}

impl<M: Message<Reply = ()>> Handler<M> for ProbeActor<M> {
    async fn handle(&mut self, msg: M, _ctx: &mut Context<Self>) -> ActorResult<()> {
        // The test may have dropped the probe; then nobody is looking.
        let _ = self.sink.send(msg);
        Ok(())
    }
}

/// Runs in the probe actor's context (to call `watch` from there).
type InContext = Box<dyn FnOnce(&mut Context<ProbeActor<Terminated>>) + Send>;

struct WatchIt(InContext);

impl Message for WatchIt {
    type Reply = ();
}

impl Handler<WatchIt> for ProbeActor<Terminated> {
    async fn handle(&mut self, msg: WatchIt, ctx: &mut Context<Self>) -> ActorResult<()> {
        (msg.0)(ctx);
        Ok(())
    }
}

/// Receives messages of type `M` in a test and checks them with timeouts.
pub struct Probe<M: Message<Reply = ()>> {
    actor: ActorRef<ProbeActor<M>>,
    received: mpsc::UnboundedReceiver<M>,
}

impl<M: Message<Reply = ()>> Probe<M> {
    /// Spawns the probe actor in `system`.
    ///
    /// # Panics
    ///
    /// If the system is shutting down.
    pub fn spawn(system: &ActorSystem) -> Self {
        let (sink, received) = mpsc::unbounded_channel();
        let actor = system
            .spawn(ProbeActor { sink })
            .expect("a probe is spawned in a running system");
        Self { actor, received }
    }

    /// The probe's actor, to send to or hand out as a reply target.
    pub fn actor(&self) -> &ActorRef<ProbeActor<M>> {
        &self.actor
    }

    /// Waits at most `timeout` for the next message.
    ///
    /// # Errors
    ///
    /// [`ExpectError::Timeout`] or [`ExpectError::Stopped`].
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a message is taken from the probe only when the future returns it.
    pub async fn expect_msg(&mut self, timeout: Duration) -> Result<M, ExpectError> {
        match tokio::time::timeout(timeout, self.received.recv()).await {
            Ok(Some(msg)) => Ok(msg),
            Ok(None) => Err(ExpectError::Stopped),
            Err(_) => Err(ExpectError::Timeout(timeout)),
        }
    }

    /// Checks that no message arrives for `duration`.
    ///
    /// # Errors
    ///
    /// [`ExpectError::Unexpected`] naming the message type, if one arrives.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a message is taken from the probe only when the future returns.
    pub async fn expect_no_msg(&mut self, duration: Duration) -> Result<(), ExpectError> {
        match tokio::time::timeout(duration, self.received.recv()).await {
            Ok(Some(_)) => Err(ExpectError::Unexpected(
                std::any::type_name::<M>().to_owned(),
            )),
            Ok(None) | Err(_) => Ok(()),
        }
    }
}

impl Probe<Terminated> {
    /// Makes the probe watch `other`; [`expect_msg`](Self::expect_msg) then yields its
    /// [`Terminated`].
    ///
    /// # Panics
    ///
    /// If the probe actor has stopped.
    pub fn watch<T: Actor>(&self, other: &ActorRef<T>) {
        let other = other.clone();
        self.actor
            .tell(WatchIt(Box::new(move |ctx| ctx.watch(&other))))
            .expect("the probe runs until the test drops it");
    }
}

impl<M> std::fmt::Debug for ProbeActor<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbeActor").finish_non_exhaustive()
    }
}

impl<M: Message<Reply = ()>> std::fmt::Debug for Probe<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probe").finish_non_exhaustive()
    }
}
