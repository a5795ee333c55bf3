//! What the core asks its driver to do: effects as data, and the store's answers that come
//! back.

use std::sync::Arc;

use rally_state::{Claim, Epoch, StoreError};

use super::{LifeId, Types};
use crate::member::MemberId;
use crate::virtual_actors::outcome::Refusal;

/// A store operation the core is waiting for, named in [`KindCore::stored`](super::KindCore::stored).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct OpId(pub(crate) u64);

/// One thing for the driver to do. Effects of one input are done in the order given.
pub(crate) enum Effect<T: Types> {
    /// Run the activation hook of `identity` for `life`, acting under lease `scope` at
    /// `epoch` (its fence is `(epoch, life)`), then report
    /// [`activated`](super::KindCore::activated).
    Activate {
        identity: Arc<str>,
        life: LifeId,
        scope: Arc<str>,
        epoch: Epoch,
    },
    /// Hand `call` to the running `life`; report [`completed`](super::KindCore::completed) when
    /// it has been handled (replied to), or [`undelivered`](super::KindCore::undelivered) if the
    /// life would not take it.
    Deliver {
        identity: Arc<str>,
        life: LifeId,
        actor: T::Actor,
        call: T::Call,
    },
    /// Stop `life`: the call it is handling finishes, then its `stopped` hook runs; report
    /// [`ended`](super::KindCore::ended).
    Stop {
        identity: Arc<str>,
        life: LifeId,
        actor: T::Actor,
    },
    /// Send `call` to member `to`. An ask's refusal comes back through
    /// [`refused`](super::KindCore::refused); any other answer goes to its caller.
    /// `handover`: the identity's previous owner passes on what reached it, to go first there.
    Forward {
        identity: Arc<str>,
        to: MemberId,
        call: T::Call,
        handover: bool,
    },
    /// Tell `to` that every call of `identity` handed over so far was sent before this;
    /// report [`handover_acked`](super::KindCore::handover_acked) with `round` when it answers.
    HandoverDone {
        identity: Arc<str>,
        to: MemberId,
        round: u64,
    },
    /// Answer `call`: not handled, for this reason (a tell's refusal is logged and counted).
    Refuse { call: T::Call, refusal: Refusal },
    /// Run a store operation; report [`stored`](super::KindCore::stored) with `op`.
    Store { op: OpId, request: StoreRequest },
}

/// A store operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StoreRequest {
    /// Claim the lease of `scope` for this member.
    Claim { scope: Arc<str> },
    /// Take the lease of `scope` over from the holder seen at epoch `from`.
    TakeOver { scope: Arc<str>, from: Epoch },
    /// Release the lease of `scope` held at `epoch`.
    Release { scope: Arc<str>, epoch: Epoch },
    /// Refuse from now on the saves of `identity`'s lives below `life` under `epoch`.
    Fence {
        scope: Arc<str>,
        epoch: Epoch,
        life: LifeId,
        identity: Arc<str>,
    },
}

/// The store's answer to a [`StoreRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StoreAnswer {
    /// To a claim or a takeover.
    Claim(Result<Claim, StoreError>),
    /// To a release or a fence.
    Done(Result<(), StoreError>),
}

impl<T: Types> std::fmt::Debug for Effect<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Activate {
                identity,
                life,
                epoch,
                ..
            } => write!(f, "Activate({identity}, {life:?}, epoch {epoch})"),
            Self::Deliver { identity, life, .. } => write!(f, "Deliver({identity}, {life:?})"),
            Self::Stop { identity, life, .. } => write!(f, "Stop({identity}, {life:?})"),
            Self::Forward {
                identity,
                to,
                handover,
                ..
            } => write!(f, "Forward({identity} to {to}, handover {handover})"),
            Self::HandoverDone {
                identity,
                to,
                round,
            } => write!(f, "HandoverDone({identity} to {to}, round {round})"),
            Self::Refuse { refusal, .. } => write!(f, "Refuse({refusal})"),
            Self::Store { op, request } => write!(f, "Store({op:?}, {request:?})"),
        }
    }
}
