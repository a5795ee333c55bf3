//! Dead letters: every message that could not be delivered is counted and published.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::{EventStream, Message};

/// Why a message became a dead letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeadLetterReason {
    /// The recipient had stopped (or stopped with the message still queued).
    Stopped,
    /// The recipient's bounded mailbox was full and drops the newest message.
    MailboxFull,
    /// A transport's bounded outbound queue was full.
    OutboundFull,
    /// A transport could not deliver it (unreachable node, unknown recipient).
    Unreachable,
    /// A call filter rejected it (see [`CallFilter`](crate::CallFilter)).
    Rejected,
}

/// Published on the event stream for every dead letter. Subscribe with
/// [`EventStream::subscribe`].
///
/// The message itself is dropped (it cannot be cloned in general); its type name is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// Path of the intended recipient.
    pub recipient: Arc<str>,
    /// The message type's name.
    pub message_type: &'static str,
    /// Why it was not delivered.
    pub reason: DeadLetterReason,
}

impl Message for DeadLetter {
    type Reply = ();
}

/// The system's dead-letter office: a counter plus publication on the event stream.
///
/// # Example
///
/// ```
/// # #[tokio::main] async fn main() {
/// let system = rally::ActorSystem::new("doc");
/// assert_eq!(system.dead_letters().count(), 0);
/// # }
/// ```
#[derive(Clone)]
pub struct DeadLetters {
    inner: Arc<Inner>,
}

struct Inner {
    count: AtomicU64,
    stream: EventStream,
}

thread_local! {
    /// Set while a dead letter is being published, so that a dead letter about a dead-letter
    /// subscriber is counted but not published again (no recursion).
    static PUBLISHING: Cell<bool> = const { Cell::new(false) };
}

impl DeadLetters {
    pub(crate) fn new(stream: EventStream) -> Self {
        Self {
            inner: Arc::new(Inner {
                count: AtomicU64::new(0),
                stream,
            }),
        }
    }

    /// Dead letters so far.
    pub fn count(&self) -> u64 {
        self.inner.count.load(Ordering::Relaxed)
    }

    /// Records one dead letter (used by the runtime and by transports).
    pub fn record(
        &self,
        recipient: &Arc<str>,
        message_type: &'static str,
        reason: DeadLetterReason,
    ) {
        self.inner.count.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(%recipient, message_type, ?reason, "dead letter");
        if PUBLISHING.with(Cell::get) || !self.inner.stream.has_subscribers::<DeadLetter>() {
            return;
        }
        PUBLISHING.with(|p| p.set(true));
        self.inner.stream.publish(DeadLetter {
            recipient: recipient.clone(),
            message_type,
            reason,
        });
        PUBLISHING.with(|p| p.set(false));
    }
}

impl std::fmt::Debug for DeadLetters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeadLetters")
            .field("count", &self.count())
            .finish()
    }
}
