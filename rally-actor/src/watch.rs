//! Death watch: being told once when another actor stops.

use std::sync::Arc;

use crate::envelope::ReplyTo;
use crate::mailbox::{Mailbox, SystemMsg};
use crate::{ActorId, Envelope, Handler, Terminated};

/// Something that is told, once, that a watched actor has terminated.
///
/// Local watchers are actors implementing `Handler<Terminated>`; transports implement it to
/// carry the notification to a watcher on another node.
pub trait TerminationSink: Send + Sync + 'static {
    /// The watcher's id (a watcher is registered at most once per watched actor).
    fn watcher(&self) -> ActorId;
    /// Delivers the notification.
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
