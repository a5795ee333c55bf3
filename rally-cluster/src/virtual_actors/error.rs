//! What a sender of a message to a virtual actor can get instead of a reply.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Why a message to a virtual actor was not handled (or its outcome is unknown).
///
/// Every variant except [`Timeout`](Self::Timeout), [`Failed`](Self::Failed) and
/// [`OutcomeUnknown`](Self::OutcomeUnknown) means the message was not handled and nothing was
/// activated for it.
///
/// # Example
///
/// ```
/// use rally::cluster::virtual_actors::GrainError;
///
/// let error = GrainError::InvalidIdentity("identity must be 1..=256 bytes, got 0".into());
/// assert!(error.to_string().contains("identity"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[non_exhaustive]
pub enum GrainError {
    /// The identity is empty or longer than the limit.
    #[error("invalid identity: {0}")]
    InvalidIdentity(String),
    /// No serving member of the cluster hosts this kind (none declared it, or all are down),
    /// and none was seen before the ask's timeout.
    #[error("no member hosts kind {0:?}")]
    NoHost(String),
    /// The member the message reached declares the kind but has not registered it.
    #[error("member {member} does not host kind {kind:?}")]
    NotHosted {
        /// The kind.
        kind: String,
        /// The member, as `address#incarnation`.
        member: String,
    },
    /// The message type is not registered for the kind
    /// ([`GrainMessages::add`](super::GrainMessages::add)), so it cannot cross the network.
    #[error("message {0:?} is not registered for this kind")]
    UnknownMessage(String),
    /// The activation hook failed or panicked; the identity can be activated again later.
    #[error("activation failed: {0}")]
    ActivationFailed(String),
    /// The handler failed (returned an error or panicked) while handling this message.
    #[error("the handler failed: {0}")]
    Failed(String),
    /// No reply within the timeout. The message may still be handled.
    #[error("no reply within {0:?}")]
    Timeout(Duration),
    /// A zero timeout can never be met; nothing was sent.
    #[error("an ask needs a timeout greater than zero")]
    InvalidTimeout,
    /// The message was forwarded too many times without reaching an activation (the
    /// members' views disagree for longer than a message's hops).
    #[error("forwarded {0} times without reaching an activation")]
    TooManyHops(u8),
    /// The state store failed; nothing was activated.
    #[error("state store: {0}")]
    Store(String),
    /// The message or its reply could not be encoded, decoded or sent.
    #[error("undeliverable: {0}")]
    Undeliverable(String),
    /// The member the message was sent to did not take it: its virtual-actor runtime was not
    /// started yet, or it is gone. Not handled; an `ask` meets it only if that lasted until
    /// its timeout (until then it is routed again, every few milliseconds, by the sender's
    /// view as it is then).
    #[error("the member the message was sent to did not take it: {0}")]
    Unreachable(String),
    /// The message left for another member that went away before replying: it may or may
    /// not have been handled.
    #[error("outcome unknown: {0}")]
    OutcomeUnknown(String),
    /// This member's virtual-actor runtime has stopped (the member left or was downed).
    #[error("the virtual-actor runtime of this member has stopped")]
    Stopped,
    /// [`Cluster::get`](crate::Cluster::get) on a member whose virtual-actor runtime was not
    /// started (`VirtualActors::builder(..).start(..)`).
    #[error("virtual actors are not started on this member (VirtualActors::builder(..).start(..))")]
    NotStarted,
}
