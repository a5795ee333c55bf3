//! What a sender of a message to a virtual actor can get instead of a reply: one error type per
//! operation, each telling whether the message was handled.
//!
//! The protocol carries its own codes (`outcome.rs`, the grain reply's outcome byte); these
//! public types are made from them, so a new variant here never changes the protocol.

use std::time::Duration;

pub use rally_remote::Handled;

use super::outcome::Refusal;

/// Why [`VirtualActors::get`](super::VirtualActors::get) or
/// [`Cluster::get`](crate::Cluster::get) gave no ref. Nothing was sent.
///
/// # Example
///
/// ```
/// use rally::cluster::virtual_actors::GetError;
///
/// let error = GetError::InvalidIdentity("identity must be 1..=256 bytes, got 0".into());
/// assert!(error.to_string().contains("identity"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GetError {
    /// The identity is empty or longer than the limit.
    #[error("invalid identity: {0}")]
    InvalidIdentity(String),
    /// This member's virtual-actor runtime was not started (`VirtualActors::builder(..).start(..)`).
    #[error("virtual actors are not started on this member (VirtualActors::builder(..).start(..))")]
    NotStarted,
}

/// Why a [`tell`](super::GrainRef::tell) was not sent. A tell that was sent has no answer: what
/// becomes of it is not reported (use an ask to know).
///
/// # Example
///
/// ```
/// use rally::cluster::virtual_actors::TellError;
///
/// assert!(TellError::Stopped.to_string().contains("stopped"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TellError {
    /// This member's virtual-actor runtime has stopped (it left or was downed).
    #[error("the virtual-actor runtime of this member has stopped")]
    Stopped,
    /// A call filter rejected the message as it was sent, with its reason; nothing was sent.
    #[error("the message was rejected: {0}")]
    Rejected(String),
}

/// Why an [`ask`](super::GrainRef::ask) has no reply, and whether the message was handled
/// ([`handled`](Self::handled)): `No` means no activation saw it, so sending it again cannot
/// apply it twice; `Yes` means an activation handled it; `Unknown` means it may or may not
/// have been. Rally itself sends a message again only when it knows no activation received it,
/// and only within the ask's timeout. The table of every case is in
/// `docs/runtime-semantics.md`.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use rally::cluster::virtual_actors::{AskError, Handled};
///
/// assert_eq!(AskError::NoHost("cart".into()).handled(), Handled::No);
/// assert_eq!(AskError::Failed("out of stock".into()).handled(), Handled::Yes);
/// assert_eq!(AskError::Timeout(Duration::from_secs(5)).handled(), Handled::Unknown);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AskError {
    /// Not handled: a zero timeout can never be met; nothing was sent.
    #[error("an ask needs a timeout greater than zero")]
    InvalidTimeout,
    /// Not handled: this member's virtual-actor runtime has stopped (it left or was downed).
    #[error("the virtual-actor runtime of this member has stopped")]
    Stopped,
    /// Not handled: no serving member hosts the kind, and none was seen before the timeout.
    #[error("no member hosts kind {0:?}")]
    NoHost(String),
    /// Not handled, at once: every member this member sees is up (none is joining), no member
    /// event came for `stable-after`, and no member hosts the kind, so no host is on its way; `similar` is a kind some member hosts whose
    /// name is close (a typo in a kind's name, or a member started without it). Before the
    /// view has settled, a message waits for a host instead (then [`NoHost`](Self::NoHost)).
    #[error("no member hosts kind {kind:?}{}", similar.as_ref().map(|s| format!(" (did you mean {s:?}?)")).unwrap_or_default())]
    UnknownKind {
        /// The kind asked for.
        kind: String,
        /// A hosted kind with a similar name.
        similar: Option<String>,
    },
    /// Not handled: the member it reached declares the kind but has not registered it.
    #[error("member {member} does not host kind {kind:?}")]
    NotHosted {
        /// The kind.
        kind: String,
        /// The member, as `address#incarnation`.
        member: String,
    },
    /// Not handled: the message type is not registered for the kind
    /// ([`GrainMessages::add`](super::GrainMessages::add)).
    #[error("message {0:?} is not registered for this kind")]
    UnknownMessage(String),
    /// Not handled: the message could not be encoded or decoded.
    #[error("undeliverable: {0}")]
    Undeliverable(String),
    /// Not handled: the activation hook failed or panicked; the identity can be activated
    /// again later.
    #[error("activation failed: {0}")]
    ActivationFailed(String),
    /// Not handled: the state store failed while the identity's lease was claimed.
    #[error("state store: {0}")]
    Store(String),
    /// Not handled: forwarded too many times without reaching an activation (the members'
    /// views disagreed for longer than a message's hops).
    #[error("forwarded {0} times without reaching an activation")]
    TooManyHops(u8),
    /// Not handled: this member's placement settings for the kind differ from the cluster's
    /// (see `docs/cluster.md`).
    #[error("placement settings differ: {0}")]
    SettingsMismatch(String),
    /// Not handled: the timeout passed while the message still waited on this member (for a
    /// host of its kind to be seen, for its activation, for a retry).
    #[error("not handled within the timeout ({0})")]
    Expired(String),
    /// Not handled: too many messages wait for the identity already.
    #[error("too many messages wait for the identity")]
    Overloaded,
    /// Not handled: the member it was sent to never took it (its runtime not started, its node
    /// gone), and it could not be sent elsewhere before the timeout.
    #[error("the member the message was sent to did not take it: {0}")]
    Unreachable(String),
    /// Not handled: the activation had stopped before it took the message.
    #[error("the activation stopped before it took the message")]
    ActivationStopped,
    /// Not handled: a call filter rejected the message (on this member as it was sent, or on
    /// the hosting member before the handler), with its reason.
    #[error("the message was rejected: {0}")]
    Rejected(String),
    /// Handled: the handler failed (returned an error or panicked).
    #[error("the handler failed: {0}")]
    Failed(String),
    /// Handled: the handler ran, but its reply could not be encoded, sent or decoded.
    #[error("handled, but the reply was lost: {0}")]
    ReplyLost(String),
    /// Unknown: no answer within the timeout, after the message had left this member.
    #[error("no reply within {0:?}; the message may have been handled")]
    Timeout(Duration),
    /// Unknown: the message left for another member, and the link failed before an answer came.
    #[error("outcome unknown: {0}")]
    OutcomeUnknown(String),
}

impl AskError {
    /// Whether the message was handled by an activation.
    pub fn handled(&self) -> Handled {
        match self {
            Self::Failed(_) | Self::ReplyLost(_) => Handled::Yes,
            Self::Timeout(_) | Self::OutcomeUnknown(_) => Handled::Unknown,
            _ => Handled::No,
        }
    }

    /// The error a caller of `kind` sees for a refusal.
    pub(crate) fn refused(refusal: Refusal, kind: &str) -> Self {
        match refusal {
            Refusal::Stopped => Self::Stopped,
            Refusal::Unreachable(why) => Self::Unreachable(why),
            Refusal::NoHost => Self::NoHost(kind.to_owned()),
            Refusal::UnknownKind(similar) => Self::UnknownKind {
                kind: kind.to_owned(),
                similar,
            },
            Refusal::NotHosted(member) => Self::NotHosted {
                kind: kind.to_owned(),
                member,
            },
            Refusal::UnknownMessage(manifest) => Self::UnknownMessage(manifest),
            Refusal::Undecodable(why) => Self::Undeliverable(why),
            Refusal::ActivationFailed(why) => Self::ActivationFailed(why),
            Refusal::Store(why) => Self::Store(why),
            Refusal::TooManyHops(hops) => Self::TooManyHops(hops),
            Refusal::SettingsMismatch(why) => Self::SettingsMismatch(why),
            Refusal::Expired => Self::Expired("it waited on this member".into()),
            Refusal::InvalidIdentity(why) => {
                Self::Undeliverable(format!("invalid identity: {why}"))
            }
            Refusal::Overloaded => Self::Overloaded,
            Refusal::Ended => Self::ActivationStopped,
            Refusal::Rejected(why) => Self::Rejected(why),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every refusal is "not handled" to its caller, whatever it becomes.
    #[test]
    fn every_refusal_reaches_the_caller_as_not_handled() {
        for refusal in [
            Refusal::Stopped,
            Refusal::Unreachable("gone".into()),
            Refusal::NoHost,
            Refusal::UnknownKind(Some("cart".into())),
            Refusal::NotHosted("m".into()),
            Refusal::UnknownMessage("x".into()),
            Refusal::Undecodable("x".into()),
            Refusal::ActivationFailed("x".into()),
            Refusal::Store("x".into()),
            Refusal::TooManyHops(4),
            Refusal::SettingsMismatch("x".into()),
            Refusal::Expired,
            Refusal::InvalidIdentity("x".into()),
            Refusal::Overloaded,
            Refusal::Ended,
            Refusal::Rejected("no".into()),
        ] {
            let (code, text) = refusal.to_wire();
            assert_eq!(code.handled(), Handled::No, "{refusal}");
            assert_eq!(Refusal::from_wire(code, text.as_bytes()), refusal);
            assert_eq!(
                AskError::refused(refusal.clone(), "k").handled(),
                Handled::No
            );
        }
    }
}
