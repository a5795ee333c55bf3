//! Where a call goes: to its identity's slot here, to a new life here, to the member that
//! owns it, or to wait for a membership change; what a member that stopped hosting does with
//! calls; what a membership change moves.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use super::slots::Slot;
use super::{CallMeta, Effect, KindCore, MAX_WAITING, Timer, Types, Waiting};
use crate::member::MemberId;
use crate::virtual_actors::outcome::Refusal;
use crate::virtual_actors::ownership::Route;

impl<T: Types> KindCore<T> {
    /// A call for `identity` reached this member: from a sender here, or from another member.
    pub(crate) fn request(&mut self, identity: Arc<str>, call: T::Call, now: Instant) {
        if call.deadline().is_some_and(|deadline| deadline <= now) {
            return self.refuse(call, Refusal::Expired);
        }
        if self.stopped {
            return self.refuse_stopped(identity, call, now);
        }
        let call = match self.queue_in_slot(&identity, call, now) {
            Ok(()) => return,
            Err(call) => call,
        };
        self.route_call(identity, call, true, now);
    }

    /// A call from member `from` (`address`, `incarnation`) reached this member: refused if
    /// `from` hosts the kind with other placement settings than this member (it must not take
    /// part in the kind beside the others), else as [`request`](Self::request).
    pub(crate) fn received(
        &mut self,
        identity: Arc<str>,
        call: T::Call,
        from: (&rally_remote::NodeAddress, rally_remote::Incarnation),
        now: Instant,
    ) {
        if self.hosting
            && let Some(ours) = self.ownership.local().declaration(self.kind)
            && let Some(Some(theirs)) = self.ownership.declaration_of(from.0, from.1, self.kind)
            && theirs.fingerprint != ours.fingerprint
        {
            let why = format!(
                "member {} places kind {:?} by {:?}, this member by {:?} or with other settings",
                from.0, self.kind, theirs.placement, ours.placement
            );
            self.count_mismatch(from.0.to_string(), &why);
            return self.refuse(call, Refusal::SettingsMismatch(why));
        }
        self.request(identity, call, now);
    }

    /// Where `identity` goes by this member's view: never here once this member stopped
    /// hosting, or when it does not host the kind.
    pub(crate) fn route(&self, identity: &str) -> Route {
        if self.stopped || !self.hosting {
            self.ownership
                .route_elsewhere(self.kind, identity, self.placement.as_ref())
        } else {
            self.ownership
                .route(self.kind, identity, self.placement.as_ref())
        }
    }

    /// Routes a call for an identity that has no slot here. A handed-over call that this
    /// member's view does not place here waits (parked) for the view to agree, if `may_park`.
    fn route_call(&mut self, identity: Arc<str>, call: T::Call, may_park: bool, now: Instant) {
        if let Some(why) = self.mismatch() {
            let me = self.ownership.local().to_string();
            self.count_mismatch(me, &why);
            return self.refuse(call, Refusal::SettingsMismatch(why));
        }
        // This member declares the kind (so its view places identities on it) but never
        // registered it: it cannot activate them.
        if !self.hosting
            && !self.stopped
            && self.ownership.local().hosts_kind(self.kind)
            && self
                .ownership
                .route(self.kind, &identity, self.placement.as_ref())
                == Route::Local
        {
            let member = self.ownership.local().to_string();
            return self.refuse(call, Refusal::NotHosted(member));
        }
        match self.route(&identity) {
            // A call from this member waits until the member sees itself up, and with it the
            // members that joined before it and the placement settings they declared: before
            // that, it could activate an identity another member holds under other settings.
            // (A call from another member may be served: its sender saw this member up.)
            Route::Local if call.hops() == 0 && !self.ownership.is_up() => {
                self.wait_for_view(identity, call, None, now);
            }
            Route::Local => self.start(identity, VecDeque::from([call]), now),
            // The member that handed it over sees this one as the identity's next owner: this
            // member's view is behind (sending it back would bounce it between the two). It is
            // parked until the next membership change, and what comes for the identity
            // meanwhile queues behind it.
            Route::Remote(_) if may_park && self.hosting && call.handed_over() => {
                let until = now + 2 * self.config.deactivation_timeout;
                self.slots.insert(
                    identity,
                    Slot::Parked {
                        queue: VecDeque::from([call]),
                        until,
                    },
                );
            }
            Route::Remote(to) => self.forward(identity, to, call, false),
            // No host on its way: every member this one sees is up, none hosts the kind, and
            // the view has not changed for `stable-after`. A call sent here is refused at
            // once (one from another member still waits: its sender's view saw a host).
            Route::NoHost if call.hops() == 0 && self.ownership.is_settled(now) => {
                let similar = self.ownership.similar_kind(self.kind);
                self.refuse(call, Refusal::UnknownKind(similar));
            }
            Route::NoHost => self.wait_for_view(identity, call, None, now),
        }
    }

    /// Passes `call` on to `to`, one more hop.
    pub(super) fn forward(
        &mut self,
        identity: Arc<str>,
        to: MemberId,
        mut call: T::Call,
        handover: bool,
    ) {
        let hops = call.hops();
        if hops >= self.config.max_hops {
            return self.refuse(call, Refusal::TooManyHops(hops));
        }
        if hops > 0 || handover {
            self.counters.forwarded += 1;
        }
        call.set_hops(hops + 1);
        self.emit(Effect::Forward {
            identity,
            to,
            call,
            handover,
        });
    }

    /// A call that reached this member after it stopped hosting. While a life of its identity
    /// is still ending here, it waits in that slot behind the calls that reached this member
    /// before it, and goes on with them to the next owner (refused or passed on at once, it
    /// would reach the next owner ahead of them, and a sender's later call would be handled
    /// before its earlier one). Otherwise an ask is refused with `Stopped` (not handled: its
    /// sender routes it anew). A tell has no way back to its sender: one from another member
    /// is passed on to the member this one's view now routes it to, marked handed over (it may
    /// have been sent here while this member owned the identity); one from a sender here goes
    /// there as any call does (marked handed over, it would be queued ahead of the calls that
    /// reached the owner before it). Only a call from another member (one hop or more)
    /// restarts the quiet period: one from a sender here takes no connection, and a sender
    /// that keeps asking must not keep the member from draining.
    fn refuse_stopped(&mut self, identity: Arc<str>, call: T::Call, now: Instant) {
        if call.hops() > 0 {
            self.note_refused(now);
        }
        let call = match self.queue_in_slot(&identity, call, now) {
            Ok(()) => return,
            Err(call) => call,
        };
        if call.deadline().is_some() {
            self.refuse(call, Refusal::Stopped);
        } else if call.hops() == 0 {
            self.route_call(identity, call, false, now);
        } else {
            self.pass_on(identity, call);
        }
    }

    /// Passes on a call this member holds after it stopped hosting, to the member its view now
    /// routes the identity to (marked handed over: it reached the previous owner first); refused
    /// with `Stopped` when there is none (an ask's sender then routes it anew).
    pub(super) fn pass_on(&mut self, identity: Arc<str>, call: T::Call) {
        match self.route(&identity) {
            Route::Remote(to) => self.forward(identity, to, call, true),
            Route::Local | Route::NoHost => self.refuse(call, Refusal::Stopped),
        }
    }

    pub(super) fn note_refused(&mut self, now: Instant) {
        self.last_refused = Some(now);
        let at = now + super::QUIET_AFTER_STOP;
        self.arm(at, Timer::Quiet);
    }

    /// Keeps `call` until a membership change (then it is routed again) or its deadline (a
    /// tell's: `host-wait`); refused at once when this member stopped, the deadline passed, or
    /// [`MAX_WAITING`] calls wait already. `from`: the member that refused it because it
    /// stopped hosting; the call waits until the view routes it elsewhere.
    pub(super) fn wait_for_view(
        &mut self,
        identity: Arc<str>,
        call: T::Call,
        from: Option<MemberId>,
        now: Instant,
    ) {
        let until = call
            .deadline()
            .unwrap_or_else(|| now + self.config.host_wait);
        if self.stopped || self.waiting.len() >= MAX_WAITING || until <= now {
            let refusal = if from.is_some() || self.stopped {
                Refusal::Stopped
            } else {
                Refusal::NoHost
            };
            return self.refuse(call, refusal);
        }
        self.waiting.push(Waiting {
            until,
            identity,
            call,
            from,
        });
    }

    /// Fails the waiting calls whose time is up.
    pub(super) fn expire_waiting(&mut self, now: Instant) {
        if self.waiting.iter().all(|w| w.until > now) {
            return;
        }
        let (due, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|w| w.until <= now);
        self.waiting = kept;
        for waiting in due {
            let refusal = if waiting.from.is_some() {
                Refusal::Stopped
            } else {
                Refusal::NoHost
            };
            self.refuse(waiting.call, refusal);
        }
    }

    /// After a membership change: calls that waited for one are routed again, parked ones
    /// this member now owns activate, and lives whose identity is now placed elsewhere move.
    pub(super) fn view_changed(&mut self, now: Instant) {
        // A member that hosts the kind with other placement settings is never placed on:
        // counted and logged once, on this side too.
        let agreed = self.ownership.agreed(self.kind).map(|d| d.fingerprint);
        let dissenting: Vec<MemberId> = self
            .ownership
            .dissenting(self.kind)
            .iter()
            .filter(|member| {
                *member != self.ownership.local()
                    && member.declaration(self.kind).map(|d| d.fingerprint) != agreed
            })
            .cloned()
            .collect();
        for member in dissenting {
            let who = member.to_string();
            if !self.mismatch_logged.contains(&who) {
                let why = format!(
                    "member {who} hosts kind {:?} with other placement settings than the \
                     cluster's oldest host: it is not placed on",
                    self.kind
                );
                self.count_mismatch(who, &why);
            }
        }
        let waiting = std::mem::take(&mut self.waiting);
        for w in waiting {
            if w.until <= now {
                let refusal = if w.from.is_some() {
                    Refusal::Stopped
                } else {
                    Refusal::NoHost
                };
                self.refuse(w.call, refusal);
                continue;
            }
            match &w.from {
                Some(from) if self.route(&w.identity) == Route::Remote(from.clone()) => {
                    self.waiting.push(w);
                }
                _ => self.request(w.identity, w.call, now),
            }
        }
        let mut parked: Vec<Arc<str>> = self
            .slots
            .iter()
            .filter(|(_, slot)| matches!(slot, Slot::Parked { .. }))
            .map(|(identity, _)| Arc::clone(identity))
            .collect();
        parked.sort();
        for identity in parked {
            if self.route(&identity) == Route::Local {
                self.unpark(&identity, true, now);
            }
        }
        if self.hosting {
            self.moves_after_view_change(now);
        }
    }

    /// Ends a parking: activates here with what waited (`ours`), or routes each call anew
    /// (its time is up).
    pub(super) fn unpark(&mut self, identity: &Arc<str>, ours: bool, now: Instant) {
        let Some(Slot::Parked { queue, .. }) = self.slots.remove(identity) else {
            return;
        };
        if ours {
            self.start(Arc::clone(identity), queue, now);
        } else {
            for call in queue {
                if let Err(call) = self.queue_in_slot(identity, call, now) {
                    self.route_call(Arc::clone(identity), call, false, now);
                }
            }
        }
    }

    /// Stops hosting: no new call is taken, every life is told to stop, and what waits here
    /// goes to whoever hosts the identity now.
    pub(crate) fn stop(&mut self, now: Instant) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        self.note_refused(now);
        let mut waiting: Vec<(Arc<str>, VecDeque<T::Call>)> = self
            .slots
            .iter_mut()
            .filter_map(|(identity, slot)| match slot {
                Slot::Claiming(queue) | Slot::Parked { queue, .. } => {
                    Some((Arc::clone(identity), std::mem::take(queue)))
                }
                _ => None,
            })
            .collect();
        waiting.sort_by(|a, b| a.0.cmp(&b.0));
        for (identity, _) in &waiting {
            self.slots.remove(identity);
        }
        for (identity, queue) in waiting {
            for call in queue {
                self.pass_on(Arc::clone(&identity), call);
            }
        }
        self.deactivate_all(now);
        for w in std::mem::take(&mut self.waiting) {
            self.refuse(w.call, Refusal::Stopped);
        }
        for (identity, call) in std::mem::take(&mut self.retrying) {
            self.refuse_stopped(identity, call, now);
        }
    }
}
