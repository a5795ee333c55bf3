//! What comes back of a call this member sent to another: only a refusal that says no
//! activation received it brings the call back here to be sent again, within its deadline.
//! Everything else (handled, with a reply or an error; outcome unknown) goes to the caller as
//! the truth, never through here.

use std::sync::Arc;
use std::time::Instant;

use super::{CallMeta, KindCore, RETRY_PAUSE, Timer, Types};
use crate::member::MemberId;
use crate::virtual_actors::outcome::Refusal;
use crate::virtual_actors::ownership::Route;

impl<T: Types> KindCore<T> {
    /// Member `from` refused `call` for `identity` (or it never reached `from`): not handled.
    /// A refusal Rally may resend ([`Refusal::resend`]) sends the call again by this member's
    /// view, within its deadline: `Stopped` once the view no longer routes the identity to
    /// `from`, `Unreachable` a moment later. Any other refusal, or a call past its deadline,
    /// goes to the caller.
    pub(crate) fn refused(
        &mut self,
        identity: Arc<str>,
        mut call: T::Call,
        from: &MemberId,
        refusal: Refusal,
        now: Instant,
    ) {
        let in_time = call.deadline().is_some_and(|deadline| deadline > now);
        if !refusal.resend() || !in_time {
            return self.refuse(call, refusal);
        }
        // The hop was not taken.
        call.set_hops(call.hops().saturating_sub(1));
        match refusal {
            Refusal::Stopped => {
                if self.stopped {
                    return self.pass_on(identity, call);
                }
                if self.route(&identity) == Route::Remote(from.clone()) {
                    self.wait_for_view(identity, call, Some(from.clone()), now);
                } else {
                    self.request(identity, call, now);
                }
            }
            _ => {
                if self.retrying.is_empty() {
                    self.arm(now + RETRY_PAUSE, Timer::Retry);
                }
                self.retrying.push((identity, call));
            }
        }
    }

    /// Sends again, by the view as it is now, the calls that another member never took.
    pub(super) fn retry(&mut self, now: Instant) {
        for (identity, call) in std::mem::take(&mut self.retrying) {
            self.request(identity, call, now);
        }
    }
}
