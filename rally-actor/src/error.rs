//! One small error type per operation.

use std::fmt;
use std::time::Duration;

/// A `tell` (or `send`) that could not enqueue the message; the message comes back.
///
/// # Example
///
/// ```
/// use rally::SendError;
///
/// let err = SendError::Stopped("hello");
/// assert_eq!(err.into_inner(), "hello");
/// ```
#[non_exhaustive]
pub enum SendError<M> {
    /// The actor has stopped; the message was also counted as a dead letter.
    Stopped(M),
    /// The actor's bounded mailbox is full and its overflow policy refuses the message.
    Full(M),
    /// A transport refused the message (for example, its type is not registered for remoting,
    /// it failed to encode, or it exceeds the maximum message size).
    Refused(M, String),
    /// A call filter's `on_send` rejected it, with the reason; nothing was sent.
    Rejected(M, String),
}

impl<M> SendError<M> {
    /// The message that was not sent.
    pub fn into_inner(self) -> M {
        match self {
            Self::Stopped(m) | Self::Full(m) | Self::Refused(m, _) | Self::Rejected(m, _) => m,
        }
    }

    /// Maps the carried message, keeping the reason.
    pub fn map<N>(self, f: impl FnOnce(M) -> N) -> SendError<N> {
        match self {
            Self::Stopped(m) => SendError::Stopped(f(m)),
            Self::Full(m) => SendError::Full(f(m)),
            Self::Refused(m, why) => SendError::Refused(f(m), why),
            Self::Rejected(m, why) => SendError::Rejected(f(m), why),
        }
    }
}

impl<M> fmt::Debug for SendError<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl<M> fmt::Display for SendError<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stopped(_) => f.write_str("the actor has stopped"),
            Self::Full(_) => f.write_str("the actor's mailbox is full"),
            Self::Refused(_, why) => write!(f, "the message was refused: {why}"),
            Self::Rejected(_, why) => write!(f, "the message was rejected: {why}"),
        }
    }
}

impl<M> std::error::Error for SendError<M> {}

/// Why an `ask` returned no reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AskError {
    /// No reply within the timeout. The message may still be handled later.
    #[error("no reply within {0:?}")]
    Timeout(Duration),
    /// A zero timeout can never be met; nothing was sent.
    #[error("an ask needs a timeout greater than zero")]
    InvalidTimeout,
    /// The actor had stopped, or stopped before handling the message.
    #[error("the actor stopped, before or while this ask waited, and did not reply")]
    Stopped,
    /// The actor's bounded mailbox was full; the message was not enqueued.
    #[error("the actor's mailbox is full")]
    Full,
    /// The handler failed (returned an error or panicked) while handling this message.
    #[error("the handler failed: {0}")]
    Failed(String),
    /// The message was never handed to the actor: a transport refused it, or its node was
    /// down or unreachable before the message left. It was not and will not be handled.
    #[error("the message or its reply could not be delivered: {0}")]
    Undeliverable(String),
    /// The message left for another node, but that node was declared down (or the link
    /// failed) before its reply came: it may or may not have been handled. Never handled twice.
    #[error("the message was sent but its outcome is unknown: {0}")]
    OutcomeUnknown(String),
    /// A call filter rejected the message (on send, or before its handler): it was not
    /// handled, and sending it again is safe.
    #[error("the message was rejected: {0}")]
    Rejected(String),
}

impl From<crate::ReplyError> for AskError {
    /// What an asker is told when the reply destination got `error` instead of a reply.
    fn from(error: crate::ReplyError) -> Self {
        use crate::ReplyError;
        match error {
            ReplyError::Stopped => Self::Stopped,
            ReplyError::MailboxFull => Self::Full,
            ReplyError::Failed(why) => Self::Failed(why),
            ReplyError::Undeliverable(why) => Self::Undeliverable(why),
            ReplyError::OutcomeUnknown(why) => Self::OutcomeUnknown(why),
            ReplyError::Rejected(why) => Self::Rejected(why),
        }
    }
}

/// Why an actor could not be spawned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpawnError {
    /// The system is shutting down.
    #[error("the actor system is shutting down")]
    ShuttingDown,
    /// Another live actor already has this name.
    #[error("an actor named {0:?} already exists")]
    NameTaken(String),
    /// The name is empty or contains `/`.
    #[error("invalid actor name {0:?}: names are non-empty and contain no '/'")]
    InvalidName(String),
    /// The named dispatcher is not configured.
    #[error("no dispatcher named {0:?} is configured")]
    UnknownDispatcher(String),
    /// The parent actor has stopped.
    #[error("the parent actor has stopped")]
    ParentStopped,
}

/// Why a name lookup failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LookupError {
    /// No live actor has that path.
    #[error("no actor at {0:?}")]
    NotFound(String),
    /// The actor at that path is of another type.
    #[error("the actor at {path:?} is a {actual}, not the requested type")]
    WrongType {
        /// The path looked up.
        path: String,
        /// The actual actor type's name.
        actual: &'static str,
    },
}

/// Why a shutdown did not finish cleanly.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShutdownError {
    /// Some actors were still running when the shutdown timeout passed; they were aborted.
    #[error("{remaining} actors were still running after {timeout:?} and were aborted")]
    TimedOut {
        /// How many actors were aborted.
        remaining: usize,
        /// The timeout that passed.
        timeout: Duration,
    },
}
