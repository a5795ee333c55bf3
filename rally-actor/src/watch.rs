//! Death watch: being told once when another actor stops, by an actor or by plain async code.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context as TaskContext, Poll};

use tokio::sync::oneshot;

use crate::envelope::ReplyTo;
use crate::mailbox::{Mailbox, SystemMsg};
use crate::sync::Mutex;
use crate::{
    Actor, ActorId, ActorRef, Envelope, Handler, Terminated, TerminationReason, WeakActorRef,
};

/// Something that is told, once, that a watched actor has terminated.
///
/// Local watchers are actors implementing `Handler<Terminated>`; transports implement it to
/// carry the notification to a watcher on another node.
pub trait TerminationSink: Send + Sync + 'static {
    /// The watcher's id (a watcher is registered at most once per watched actor).
    fn watcher(&self) -> ActorId;
    /// Delivers the notification (which carries the reason, [`Terminated::reason`]).
    fn notify(&self, terminated: Terminated);
}

/// A local actor that handles `Terminated`, notified on its priority lane.
pub(crate) struct LocalWatcher<W: Handler<Terminated>> {
    pub(crate) mailbox: Arc<Mailbox<W>>,
}

impl<W: Handler<Terminated>> TerminationSink for LocalWatcher<W> {
    fn watcher(&self) -> ActorId {
        self.mailbox.id
    }

    fn notify(&self, terminated: Terminated) {
        // A watcher that has itself stopped no longer cares.
        let _ = self.mailbox.system(SystemMsg::Priority(Envelope::new(
            terminated,
            ReplyTo::ignore(),
        )));
    }
}

/// Ids for watchers that are not actors, counted down from the top of the id space so that
/// they never meet an actor's id (those count up from 1).
static NEXT_FUTURE_WATCHER: AtomicU64 = AtomicU64::new(u64::MAX);

/// Completes a [`Termination`] future.
struct FutureWatcher {
    id: ActorId,
    tx: Mutex<Option<oneshot::Sender<TerminationReason>>>,
}

impl FutureWatcher {
    fn complete(&self, reason: TerminationReason) {
        let sender = self.tx.lock().take();
        if let Some(tx) = sender {
            // The future may have been dropped: then nobody waits.
            let _ = tx.send(reason);
        }
    }
}

impl TerminationSink for FutureWatcher {
    fn watcher(&self) -> ActorId {
        self.id
    }

    fn notify(&self, terminated: Terminated) {
        self.complete(terminated.reason);
    }
}

/// The end of an actor, awaited from plain async code: resolves once, with the reason, when the
/// actor stops (at once if it already has). Made by [`ActorRef::terminated`]; dropping it
/// stops watching.
///
/// # Cancel safety
///
/// Dropping it unregisters the watch; nothing is lost, as there is nothing else to receive.
#[must_use = "a Termination does nothing unless awaited"]
pub struct Termination {
    rx: oneshot::Receiver<TerminationReason>,
    unwatch: Option<Box<dyn FnOnce() + Send>>,
}

impl std::fmt::Debug for Termination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Termination").finish_non_exhaustive()
    }
}

impl Future for Termination {
    type Output = TerminationReason;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<TerminationReason> {
        match Pin::new(&mut self.rx).poll(cx) {
            Poll::Ready(result) => {
                // Told (or the watch was dropped unanswered, which only a transport that lost
                // its link without saying why can do): either way, nothing more will come.
                self.unwatch = None;
                Poll::Ready(result.unwrap_or(TerminationReason::Unknown))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for Termination {
    fn drop(&mut self) {
        if let Some(unwatch) = self.unwatch.take() {
            unwatch();
        }
    }
}

impl<A: Actor> ActorRef<A> {
    /// Watches this actor from plain async code (no helper actor): the returned future
    /// resolves once, with the reason, when the actor stops, at once if it already has. It
    /// works for local and remote actors alike; a remote actor's transport may not report a
    /// reason ([`TerminationReason::Unknown`]).
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::Duration;
    /// use rally::{Actor, ActorSystem, TerminationReason};
    ///
    /// struct Worker;
    /// impl Actor for Worker {}
    ///
    /// # #[tokio::main] async fn main() {
    /// let system = ActorSystem::new("doc");
    /// let worker = system.spawn(Worker).unwrap();
    /// let stopped = worker.terminated();
    /// tokio::spawn({
    ///     let worker = worker.clone();
    ///     async move { worker.stop() }
    /// });
    /// let reason = tokio::time::timeout(Duration::from_secs(5), stopped).await.unwrap();
    /// assert_eq!(reason, TerminationReason::Stopped);
    /// # }
    /// ```
    pub fn terminated(&self) -> Termination {
        let (tx, rx) = oneshot::channel();
        let id = ActorId(NEXT_FUTURE_WATCHER.fetch_sub(1, Ordering::Relaxed));
        let watcher = Arc::new(FutureWatcher {
            id,
            tx: Mutex::new(Some(tx)),
        });
        self.watch_with(watcher);
        let weak: WeakActorRef<A> = self.downgrade();
        Termination {
            rx,
            unwatch: Some(Box::new(move || {
                if let Some(target) = weak.upgrade() {
                    target.unwatch_with(id);
                }
            })),
        }
    }
}
