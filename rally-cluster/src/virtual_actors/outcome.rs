//! What became of a call, as the protocol tells it: handled, refused before any activation saw
//! it, or unknown. These cross the wire (as the grain reply's outcome byte, `rally-wire`); the
//! public errors (`AskError`, `TellError`) are made from them, so a new public variant never
//! changes the protocol.

use std::fmt;

use rally_remote::GrainOutcome;

/// Why a call was not handled: it was refused before any activation saw it, so sending it again
/// cannot apply it twice. Rally itself sends again only [`resend`](Self::resend)-able ones, and
/// only within the call's deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The member's virtual-actor runtime has stopped (it is leaving, left or was downed).
    Stopped,
    /// The call was never handed to the member: its runtime is not started, its node is gone,
    /// or the connection refused the frame before it left.
    Unreachable(String),
    /// No serving member hosts the kind.
    NoHost,
    /// No member of this member's settled view (it is up, nobody is joining) hosts the kind:
    /// refused at once, with a kind of a similar name that some member hosts, if any. On the
    /// wire it is `NoHost` with that name as its text.
    UnknownKind(Option<String>),
    /// The member declares the kind but has not registered it.
    NotHosted(String),
    /// The message type is not registered for the kind.
    UnknownMessage(String),
    /// The message could not be encoded or decoded.
    Undecodable(String),
    /// The activation hook failed or panicked.
    ActivationFailed(String),
    /// The state store failed while the identity's lease was claimed.
    Store(String),
    /// Forwarded too many times.
    TooManyHops(u8),
    /// The members disagree on the kind's placement settings (see `docs/cluster.md`).
    SettingsMismatch(String),
    /// Its deadline passed before an activation could take it.
    Expired,
    /// The identity is empty or too long.
    InvalidIdentity(String),
    /// Too many calls wait for the identity already.
    Overloaded,
    /// The activation it was handed to had stopped before it took it.
    Ended,
    /// A call filter rejected it (on the sending member, or before the handler), with why.
    Rejected(String),
}

impl Refusal {
    /// Whether Rally sends the call again by itself (within its deadline): the member stopped
    /// hosting (its peers route elsewhere once their view moves on), or the call never left.
    pub(crate) fn resend(&self) -> bool {
        matches!(self, Self::Stopped | Self::Unreachable(_) | Self::Ended)
    }

    /// The outcome code and text it travels as.
    pub(crate) fn to_wire(&self) -> (GrainOutcome, String) {
        let text = |s: &String| s.clone();
        match self {
            Self::Stopped => (GrainOutcome::STOPPED, String::new()),
            Self::Unreachable(why) => (GrainOutcome::UNREACHABLE, text(why)),
            Self::NoHost => (GrainOutcome::NO_HOST, String::new()),
            Self::UnknownKind(similar) => {
                (GrainOutcome::NO_HOST, similar.clone().unwrap_or_default())
            }
            Self::NotHosted(member) => (GrainOutcome::NOT_HOSTED, text(member)),
            Self::UnknownMessage(manifest) => (GrainOutcome::UNKNOWN_MESSAGE, text(manifest)),
            Self::Undecodable(why) => (GrainOutcome::UNDECODABLE, text(why)),
            Self::ActivationFailed(why) => (GrainOutcome::ACTIVATION_FAILED, text(why)),
            Self::Store(why) => (GrainOutcome::STORE, text(why)),
            Self::TooManyHops(hops) => (GrainOutcome::TOO_MANY_HOPS, hops.to_string()),
            Self::SettingsMismatch(why) => (GrainOutcome::SETTINGS_MISMATCH, text(why)),
            Self::Expired => (GrainOutcome::EXPIRED, String::new()),
            Self::InvalidIdentity(why) => (GrainOutcome::INVALID_IDENTITY, text(why)),
            Self::Overloaded => (GrainOutcome::OVERLOADED, String::new()),
            Self::Ended => (GrainOutcome::ENDED, String::new()),
            Self::Rejected(why) => (GrainOutcome::REJECTED, text(why)),
        }
    }

    /// The refusal an outcome code in the not-handled range stands for (`text` is its body);
    /// a code this version does not know is a refusal all the same, not sent again.
    pub(crate) fn from_wire(outcome: GrainOutcome, text: &[u8]) -> Self {
        let text = String::from_utf8_lossy(text).into_owned();
        match outcome {
            GrainOutcome::STOPPED => Self::Stopped,
            GrainOutcome::UNREACHABLE => Self::Unreachable(text),
            GrainOutcome::NO_HOST if text.is_empty() => Self::NoHost,
            GrainOutcome::NO_HOST => Self::UnknownKind(Some(text)),
            GrainOutcome::NOT_HOSTED => Self::NotHosted(text),
            GrainOutcome::UNKNOWN_MESSAGE => Self::UnknownMessage(text),
            GrainOutcome::UNDECODABLE => Self::Undecodable(text),
            GrainOutcome::ACTIVATION_FAILED => Self::ActivationFailed(text),
            GrainOutcome::STORE => Self::Store(text),
            GrainOutcome::TOO_MANY_HOPS => Self::TooManyHops(text.parse().unwrap_or(u8::MAX)),
            GrainOutcome::SETTINGS_MISMATCH => Self::SettingsMismatch(text),
            GrainOutcome::EXPIRED => Self::Expired,
            GrainOutcome::INVALID_IDENTITY => Self::InvalidIdentity(text),
            GrainOutcome::OVERLOADED => Self::Overloaded,
            GrainOutcome::ENDED => Self::Ended,
            GrainOutcome::REJECTED => Self::Rejected(text),
            other => Self::Undecodable(format!("refused with code {} ({text})", other.0)),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Stopped => f.write_str("the member's virtual-actor runtime has stopped"),
            Self::Unreachable(why) => write!(f, "the member did not take the call: {why}"),
            Self::NoHost => f.write_str("no member hosts the kind"),
            Self::UnknownKind(None) => f.write_str("no member of the settled view hosts the kind"),
            Self::UnknownKind(Some(similar)) => write!(
                f,
                "no member of the settled view hosts the kind (kind {similar:?} is hosted)"
            ),
            Self::NotHosted(member) => {
                write!(f, "member {member} declares the kind but does not host it")
            }
            Self::UnknownMessage(manifest) => {
                write!(f, "message {manifest:?} is not registered for the kind")
            }
            Self::Undecodable(why) => {
                write!(f, "the message could not be encoded or decoded: {why}")
            }
            Self::ActivationFailed(why) => write!(f, "activation failed: {why}"),
            Self::Store(why) => write!(f, "state store: {why}"),
            Self::TooManyHops(hops) => {
                write!(f, "forwarded {hops} times without reaching an activation")
            }
            Self::SettingsMismatch(why) => write!(f, "placement settings differ: {why}"),
            Self::Expired => f.write_str("its deadline passed before an activation took it"),
            Self::InvalidIdentity(why) => write!(f, "invalid identity: {why}"),
            Self::Overloaded => f.write_str("too many calls wait for the identity"),
            Self::Ended => f.write_str("the activation had stopped before it took the call"),
            Self::Rejected(why) => write!(f, "rejected by a call filter: {why}"),
        }
    }
}
