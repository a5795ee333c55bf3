//! Each identity's slot on this member, and the lives that run in it: a call is queued in the
//! slot until its life is free; a life starts under a held lease, runs one call at a time, and
//! ends (idle, over the cap, moved, the member stopping, or by itself); what waited then goes
//! to the next life or, after a move, to the next owner.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use super::claim::LeaseKey;
use super::clock::Tick;
use super::{CallMeta, Effect, KindCore, LifeId, MAX_QUEUED, StoreRequest, Timer, Types};
use crate::member::MemberId;
use crate::virtual_actors::outcome::Refusal;
use crate::virtual_actors::ownership::Route;

/// Calls waiting for an identity, in the order they will be handled.
pub(super) type Queue<T> = VecDeque<<T as Types>::Call>;

/// Whether a life has a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Busy {
    Free,
    /// An ask, whose caller waits until the instant.
    Ask(Instant),
    Tell,
}

/// Why a life ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reason {
    Idle,
    OverCap,
    Moved,
    Stopping,
}

/// One identity on this member.
pub(super) enum Slot<T: Types> {
    /// Waiting for the identity's lease (a claim under way, a holder to hand over, a release
    /// to finish).
    Claiming(Queue<T>),
    /// The lease is held; the activation hook runs for `life`.
    Activating {
        life: LifeId,
        queue: Queue<T>,
    },
    Active(Active<T>),
    /// `life` was told to stop; calls wait for what comes after it. It counts as overrun
    /// (and is fenced) if it has not ended by `deadline`: the deactivation timeout after its
    /// last call finished (`busy` while it has one), and never before that call's deadline.
    Deactivating {
        life: LifeId,
        reason: Reason,
        busy: bool,
        deadline: Instant,
        queue: Queue<T>,
    },
    /// `life` overran its deadline: the store fences it before anything else happens.
    Fencing {
        life: LifeId,
        reason: Reason,
        queue: Queue<T>,
    },
    /// The calls that waited went to the next owner `to`; this member keeps the identity's
    /// lease until `to` confirms it has them (`round`), and queues what comes meanwhile.
    HandingOver {
        /// Boxed: the variant is rare, and every slot is as large as its largest variant.
        to: Box<MemberId>,
        round: u64,
        queue: Queue<T>,
    },
    /// Handed over by a member whose view makes this one the identity's next owner while this
    /// member's view does not yet: the calls wait until it agrees, at most until `until`.
    Parked {
        queue: Queue<T>,
        until: Instant,
    },
}

/// A running life.
pub(super) struct Active<T: Types> {
    life: LifeId,
    actor: T::Actor,
    /// Whether a call is with the life now, and until when its caller waits.
    busy: Busy,
    /// When it last was handed a call or finished one (or started), on the core's clock: its
    /// last message. Free, it has been idle since then.
    pub(super) last_message: Tick,
    /// When it started, in whole seconds on the core's clock (its age, for listings). With
    /// `last_message` it takes the 16 bytes one `Instant` took before listings showed ages.
    pub(super) started: u32,
    /// The kind's use count when it last finished a call (or started): the order of use.
    last_use: u64,
    queue: Queue<T>,
}

impl<T: Types> Active<T> {
    /// Whether a call is with the life now.
    pub(super) fn is_busy(&self) -> bool {
        self.busy != Busy::Free
    }

    /// Calls waiting for the life.
    pub(super) fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Gives `call` to the life, which is free: it is busy until the call is done.
    fn hand(&mut self, identity: &Arc<str>, call: T::Call, now: Tick) -> Effect<T> {
        self.busy = call.deadline().map_or(Busy::Tell, Busy::Ask);
        self.last_message = now;
        Effect::Deliver {
            identity: Arc::clone(identity),
            life: self.life,
            actor: self.actor.clone(),
            call,
        }
    }
}

impl<T: Types> Slot<T> {
    /// The calls waiting in the slot.
    pub(super) fn queue_mut(&mut self) -> &mut Queue<T> {
        match self {
            Self::Claiming(queue)
            | Self::Activating { queue, .. }
            | Self::Active(Active { queue, .. })
            | Self::Deactivating { queue, .. }
            | Self::Fencing { queue, .. }
            | Self::HandingOver { queue, .. }
            | Self::Parked { queue, .. } => queue,
        }
    }
}

/// Puts `call` in line: after the calls handed over if it was handed over too (they reached the
/// previous owner before anything reached this member), else last. `false` if the queue is full.
fn enqueue<T: Types>(queue: &mut Queue<T>, call: T::Call) -> Result<(), T::Call> {
    if queue.len() >= MAX_QUEUED {
        return Err(call);
    }
    if call.handed_over() {
        let at = queue
            .iter()
            .take_while(|queued| queued.handed_over())
            .count();
        queue.insert(at, call);
    } else {
        queue.push_back(call);
    }
    Ok(())
}

impl<T: Types> KindCore<T> {
    pub(super) fn lease_key(&self, identity: &Arc<str>) -> LeaseKey {
        LeaseKey::new(self.placement.scope(self.kind, identity), identity)
    }

    /// A call for an identity that has a slot here: handed to its life if free, else queued.
    /// `Err` gives the call back when there is no slot.
    pub(super) fn queue_in_slot(
        &mut self,
        identity: &Arc<str>,
        call: T::Call,
        now: Instant,
    ) -> Result<(), T::Call> {
        let Some(slot) = self.slots.get_mut(identity) else {
            return Err(call);
        };
        if let Slot::Active(active) = slot
            && active.busy == Busy::Free
            && active.queue.is_empty()
        {
            // Its life is free and nothing waits: straight to it, with no buffer for one call.
            if call.deadline().is_some_and(|deadline| deadline <= now) {
                self.refuse(call, Refusal::Expired);
                return Ok(());
            }
            let deliver = active.hand(identity, call, self.clock.tick(now));
            self.emit(deliver);
            return Ok(());
        }
        if let Err(call) = enqueue::<T>(slot.queue_mut(), call) {
            self.refuse(call, Refusal::Overloaded);
            return Ok(());
        }
        self.pump(identity, now);
        Ok(())
    }

    /// Starts a life of `identity` (routed here, no slot yet) with `queue` waiting for it.
    pub(super) fn start(&mut self, identity: Arc<str>, queue: Queue<T>, now: Instant) {
        let key = self.lease_key(&identity);
        match self.acquire(&key, &identity, now) {
            Some((scope, epoch)) => self.begin_life(identity, queue, scope, epoch),
            None => {
                self.slots.insert(identity, Slot::Claiming(queue));
            }
        }
    }

    /// Starts a new life of `identity` under the lease `(scope, epoch)`, which counts it
    /// already.
    pub(super) fn begin_life(
        &mut self,
        identity: Arc<str>,
        queue: Queue<T>,
        scope: Arc<str>,
        epoch: rally_state::Epoch,
    ) {
        let life = self.new_life();
        self.slots
            .insert(Arc::clone(&identity), Slot::Activating { life, queue });
        self.emit(Effect::Activate {
            identity,
            life,
            scope,
            epoch,
        });
    }

    /// The activation hook of `life` finished: the life runs (`Ok`, its handle), or it failed.
    pub(crate) fn activated(
        &mut self,
        identity: &Arc<str>,
        life: LifeId,
        result: Result<T::Actor, String>,
        now: Instant,
    ) {
        let current = matches!(self.slots.get(identity), Some(Slot::Activating { life: l, .. }) if *l == life);
        if !current {
            // Not this slot's life (cannot happen: only `activated` ends `Activating`): stop
            // what was started, nothing waits for it.
            if let Ok(actor) = result {
                self.emit(Effect::Stop {
                    identity: Arc::clone(identity),
                    life,
                    actor,
                });
            }
            return;
        }
        let Some(Slot::Activating { queue, .. }) = self.slots.remove(identity) else {
            unreachable!("checked above")
        };
        match result {
            Ok(actor) => {
                self.counters.activations += 1;
                self.counters.active += 1;
                self.uses += 1;
                self.slots.insert(
                    Arc::clone(identity),
                    Slot::Active(Active {
                        life,
                        actor,
                        busy: Busy::Free,
                        last_message: self.clock.tick(now),
                        started: self.clock.seconds(now),
                        last_use: self.uses,
                        queue,
                    }),
                );
                if self.stopped {
                    self.deactivate(identity, Reason::Stopping, now);
                } else if self.placement.moves_on_change() && self.route(identity) != Route::Local {
                    // The view changed while it activated: it belongs elsewhere now.
                    self.deactivate(identity, Reason::Moved, now);
                } else {
                    self.pump(identity, now);
                    self.enforce_cap(now);
                }
            }
            Err(why) => {
                self.counters.failed += 1;
                for call in queue {
                    self.refuse(call, Refusal::ActivationFailed(why.clone()));
                }
                let key = self.lease_key(identity);
                self.leave_lease(&key, now);
            }
        }
    }

    /// `life` finished the call it had (its reply went out, or it had none).
    pub(crate) fn completed(&mut self, identity: &Arc<str>, life: LifeId, now: Instant) {
        let timeout = self.config.deactivation_timeout;
        match self.slots.get_mut(identity) {
            Some(Slot::Active(active)) if active.life == life => {
                // Handed its call at `last_message`.
                let took = self.clock.since(active.last_message, now);
                self.counters.call_times.record(took);
                active.busy = Busy::Free;
                active.last_message = self.clock.tick(now);
                self.uses += 1;
                active.last_use = self.uses;
                self.pump(identity, now);
            }
            Some(Slot::Deactivating {
                life: l,
                busy,
                deadline,
                ..
            }) if *l == life && *busy => {
                // Its last call is done: its `stopped` hook runs now, within the timeout.
                *busy = false;
                *deadline = now + timeout;
                let at = *deadline;
                self.arm(at, Timer::StopDeadline(Arc::clone(identity), life));
            }
            _ => {}
        }
    }

    /// A call handed to `life` was not taken (the life had stopped): it goes first in line
    /// again, and the life counts as ended.
    pub(crate) fn undelivered(
        &mut self,
        identity: &Arc<str>,
        life: LifeId,
        call: T::Call,
        now: Instant,
    ) {
        match self.slots.get_mut(identity) {
            Some(Slot::Active(active)) if active.life == life => {
                active.busy = Busy::Free;
                active.queue.push_front(call);
                self.ended(identity, life, now);
            }
            _ => self.request(Arc::clone(identity), call, now),
        }
    }

    /// `life` has ended (whatever stopped it) and none of its saves is still on its way.
    pub(crate) fn ended(&mut self, identity: &Arc<str>, life: LifeId, now: Instant) {
        match self.slots.get(identity) {
            Some(Slot::Active(active)) if active.life == life => {
                let Some(Slot::Active(active)) = self.slots.remove(identity) else {
                    unreachable!("checked above")
                };
                self.after_life(identity, active.queue, Reason::Idle, now);
            }
            Some(Slot::Deactivating { life: l, .. }) if *l == life => {
                let Some(Slot::Deactivating { queue, reason, .. }) = self.slots.remove(identity)
                else {
                    unreachable!("checked above")
                };
                self.after_life(identity, queue, reason, now);
            }
            // A life being fenced ends when the store has fenced it; any other is long gone.
            _ => {}
        }
    }

    /// Hands the next call to the identity's life if the life is free.
    pub(super) fn pump(&mut self, identity: &Arc<str>, now: Instant) {
        let Some(Slot::Active(active)) = self.slots.get_mut(identity) else {
            return;
        };
        if active.busy != Busy::Free {
            return;
        }
        let mut expired = Vec::new();
        let mut next = None;
        while let Some(call) = active.queue.pop_front() {
            if call.deadline().is_some_and(|deadline| deadline <= now) {
                expired.push(call);
            } else {
                next = Some(call);
                break;
            }
        }
        if let Some(call) = next {
            let deliver = active.hand(identity, call, self.clock.tick(now));
            self.emit(deliver);
        } else {
            active.last_message = self.clock.tick(now);
            // A life at rest keeps no buffer (its first call waited in one while it activated):
            // a million idle lives would carry 64 bytes each.
            if active.queue.capacity() > 0 {
                active.queue = Queue::<T>::new();
            }
        }
        for call in expired {
            self.refuse(call, Refusal::Expired);
        }
    }

    /// Tells the life of `identity` to stop; calls that come meanwhile wait. Moves start at most
    /// `max-concurrent-moves` at once; the rest wait their turn, still serving.
    pub(super) fn deactivate(&mut self, identity: &Arc<str>, reason: Reason, now: Instant) {
        if !matches!(self.slots.get(identity), Some(Slot::Active(_))) {
            return;
        }
        if reason == Reason::Moved {
            if self.moving >= self.config.max_concurrent_moves {
                self.to_move.push_back(Arc::clone(identity));
                return;
            }
            self.moving += 1;
        }
        let Some(Slot::Active(active)) = self.slots.remove(identity) else {
            unreachable!("checked above")
        };
        let life = active.life;
        // A call it is handling finishes first (a graceful move or leave fails nothing), at
        // least until its caller stops waiting; then the `stopped` hook has the timeout.
        let timeout = now + self.config.deactivation_timeout;
        let deadline = match active.busy {
            Busy::Ask(until) => until.max(timeout),
            Busy::Free | Busy::Tell => timeout,
        };
        self.slots.insert(
            Arc::clone(identity),
            Slot::Deactivating {
                life,
                reason,
                busy: active.busy != Busy::Free,
                deadline,
                queue: active.queue,
            },
        );
        self.emit(Effect::Stop {
            identity: Arc::clone(identity),
            life,
            actor: active.actor,
        });
        self.arm(deadline, Timer::StopDeadline(Arc::clone(identity), life));
    }

    /// A stopping life's deadline passed. If it has not ended, it overran (its `stopped` hook
    /// is still running, say): the store fences it, so none of its later saves is applied,
    /// before anything else happens to the identity.
    pub(super) fn stop_overran(&mut self, identity: &Arc<str>, life: LifeId, now: Instant) {
        let overran = matches!(
            self.slots.get(identity),
            Some(Slot::Deactivating { life: l, deadline, .. }) if *l == life && *deadline <= now
        );
        if !overran {
            return;
        }
        let Some(Slot::Deactivating { reason, queue, .. }) = self.slots.remove(identity) else {
            unreachable!("checked above")
        };
        tracing::warn!(
            kind = self.kind,
            %identity,
            timeout = ?self.config.deactivation_timeout,
            "an activation did not stop within deactivation-timeout; fencing it in the state store \
             before its identity is activated again"
        );
        self.slots.insert(
            Arc::clone(identity),
            Slot::Fencing {
                life,
                reason,
                queue,
            },
        );
        self.fence(identity, life, now);
    }

    /// The store fenced `life` (or its lease was no longer held: fenced by its epoch): it counts
    /// as ended.
    pub(super) fn fenced(&mut self, identity: &Arc<str>, life: LifeId, now: Instant) {
        let current =
            matches!(self.slots.get(identity), Some(Slot::Fencing { life: l, .. }) if *l == life);
        if !current {
            return;
        }
        let Some(Slot::Fencing { reason, queue, .. }) = self.slots.remove(identity) else {
            unreachable!("checked above")
        };
        self.after_life(identity, queue, reason, now);
    }

    fn fence(&mut self, identity: &Arc<str>, life: LifeId, _now: Instant) {
        let key = self.lease_key(identity);
        let Some((scope, epoch)) = self.held(&key) else {
            // Not held (cannot happen while a life counts on it): nothing to fence.
            return self.fenced(identity, life, _now);
        };
        self.new_op(
            super::Op::Fence {
                identity: Arc::clone(identity),
                life,
            },
            StoreRequest::Fence {
                scope,
                epoch,
                life: LifeId(life.0 + 1),
                identity: Arc::clone(identity),
            },
        );
    }

    /// Tries a failed fence again.
    pub(super) fn fence_again(&mut self, identity: &Arc<str>, life: LifeId, now: Instant) {
        if matches!(self.slots.get(identity), Some(Slot::Fencing { life: l, .. }) if *l == life) {
            self.fence(identity, life, now);
        }
    }

    /// A life of `identity` is over (ended, or fenced) and its slot removed; it still counts on
    /// its lease. What waited goes on: to the next owner if the identity moved (this member
    /// keeps the lease until the next owner has the calls), to a new life under the same lease
    /// if it is still placed here, or nowhere (the lease is left).
    pub(super) fn after_life(
        &mut self,
        identity: &Arc<str>,
        queue: Queue<T>,
        reason: Reason,
        now: Instant,
    ) {
        self.counters.active = self.counters.active.saturating_sub(1);
        self.counters.deactivations += 1;
        if reason == Reason::Moved {
            self.counters.moves += 1;
            self.moving = self.moving.saturating_sub(1);
            self.next_move(now);
        }
        let key = self.lease_key(identity);
        let route = self.route(identity);
        if !queue.is_empty() {
            match route {
                Route::Local if !self.stopped => {
                    // The old life's use of the lease passes to the new one.
                    if let Some((scope, epoch)) = self.held(&key) {
                        return self.begin_life(Arc::clone(identity), queue, scope, epoch);
                    }
                }
                Route::Remote(to) => return self.hand_over(identity, to, queue, now),
                _ => {}
            }
        }
        self.leave_lease(&key, now);
        for call in queue {
            self.request(Arc::clone(identity), call, now);
        }
    }

    /// Sends what waited for `identity` to its next owner `to`, marked handed over, then the end
    /// of the handover; the lease is left once `to` has answered that (or after the
    /// deactivation timeout), so `to` cannot activate before it has the calls.
    fn hand_over(&mut self, identity: &Arc<str>, to: MemberId, queue: Queue<T>, now: Instant) {
        for call in queue {
            self.forward(Arc::clone(identity), to.clone(), call, true);
        }
        let round = self.new_attempt();
        self.slots.insert(
            Arc::clone(identity),
            Slot::HandingOver {
                to: Box::new(to.clone()),
                round,
                queue: VecDeque::new(),
            },
        );
        self.emit(Effect::HandoverDone {
            identity: Arc::clone(identity),
            to,
            round,
        });
        let at = now + self.config.deactivation_timeout;
        self.arm(at, Timer::Handover(Arc::clone(identity), round));
    }

    /// The next owner confirmed the handover `round` of `identity`: every call handed over is
    /// queued there.
    pub(crate) fn handover_acked(&mut self, identity: &Arc<str>, round: u64, now: Instant) {
        self.handover_over(identity, round, now);
    }

    /// The handover `round` is over (confirmed, or its time is up): what came meanwhile follows
    /// it, and the lease is left.
    pub(super) fn handover_over(&mut self, identity: &Arc<str>, round: u64, now: Instant) {
        let current = matches!(self.slots.get(identity), Some(Slot::HandingOver { round: r, .. }) if *r == round);
        if !current {
            return;
        }
        let Some(Slot::HandingOver { to, queue, .. }) = self.slots.remove(identity) else {
            unreachable!("checked above")
        };
        for call in queue {
            self.forward(Arc::clone(identity), (*to).clone(), call, true);
        }
        let key = self.lease_key(identity);
        self.leave_lease(&key, now);
    }

    /// Starts the next waiting move, if any may start.
    fn next_move(&mut self, now: Instant) {
        while self.moving < self.config.max_concurrent_moves {
            let Some(identity) = self.to_move.pop_front() else {
                return;
            };
            let still = matches!(self.slots.get(&identity), Some(Slot::Active(_)))
                && self.route(&identity) != Route::Local;
            if still {
                self.deactivate(&identity, Reason::Moved, now);
            }
        }
    }

    /// Passivates what has been idle for `idle-timeout`, fails what waited past its deadline,
    /// routes again what was parked too long.
    pub(super) fn sweep(&mut self, now: Instant) {
        let idle_timeout = self.config.idle_timeout;
        let mut idle = Vec::new();
        let mut expired = Vec::new();
        let mut unparked = Vec::new();
        for (identity, slot) in self.slots.iter_mut() {
            match slot {
                Slot::Active(active) => {
                    if active.busy == Busy::Free
                        && active.queue.is_empty()
                        && self.clock.since(active.last_message, now) >= idle_timeout
                    {
                        idle.push(Arc::clone(identity));
                    }
                }
                Slot::Parked { until, .. } if *until <= now => unparked.push(Arc::clone(identity)),
                other => {
                    let queue = other.queue_mut();
                    if queue
                        .iter()
                        .any(|call| call.deadline().is_some_and(|d| d <= now))
                    {
                        let (gone, kept): (Queue<T>, Queue<T>) = std::mem::take(queue)
                            .into_iter()
                            .partition(|call| call.deadline().is_some_and(|d| d <= now));
                        *queue = kept;
                        expired.extend(gone);
                    }
                }
            }
        }
        for call in expired {
            self.refuse(call, Refusal::Expired);
        }
        // In a stable order, whatever the table's hashing: a schedule replays exactly.
        idle.sort();
        unparked.sort();
        for identity in idle {
            self.deactivate(&identity, Reason::Idle, now);
        }
        for identity in unparked {
            self.unpark(&identity, false, now);
        }
        self.expire_waiting(now);
        if !self.stopped {
            let at = now + self.sweep_period();
            self.arm(at, Timer::Sweep);
        }
    }

    /// Over the cap: deactivates the least recently used idle lives, a batch at a time so the
    /// scan is paid once per many activations.
    pub(super) fn enforce_cap(&mut self, now: Instant) {
        let cap = self.config.max_active;
        let active = self.counters.active;
        if active <= cap {
            return;
        }
        let batch = (active - cap).max(cap / 32).max(1);
        let mut idle: Vec<(u64, Arc<str>)> = self
            .slots
            .iter()
            .filter_map(|(identity, slot)| match slot {
                Slot::Active(active) if active.busy == Busy::Free && active.queue.is_empty() => {
                    Some((active.last_use, Arc::clone(identity)))
                }
                _ => None,
            })
            .collect();
        if idle.len() > batch {
            idle.select_nth_unstable(batch);
            idle.truncate(batch);
        }
        idle.sort();
        for (_, identity) in idle {
            self.deactivate(&identity, Reason::OverCap, now);
        }
    }

    /// Lives that must move after a view change: those now placed on another member.
    pub(super) fn moves_after_view_change(&mut self, now: Instant) {
        if !self.placement.moves_on_change() {
            return;
        }
        let mut moving: Vec<Arc<str>> = self
            .slots
            .iter()
            .filter(|(_, slot)| matches!(slot, Slot::Active(_)))
            .map(|(identity, _)| Arc::clone(identity))
            .filter(|identity| self.route(identity) != Route::Local)
            .collect();
        // A scope is left once its last life here has ended: started scope by scope, so the
        // first scopes reach their next owner while the last are still moving.
        moving.sort_by_cached_key(|identity| {
            (
                self.placement.scope(self.kind, identity),
                Arc::clone(identity),
            )
        });
        for identity in moving {
            self.deactivate(&identity, Reason::Moved, now);
        }
    }

    /// Every life is told to stop (this member stops hosting).
    pub(super) fn deactivate_all(&mut self, now: Instant) {
        let mut active: Vec<Arc<str>> = self
            .slots
            .iter()
            .filter(|(_, slot)| matches!(slot, Slot::Active(_)))
            .map(|(identity, _)| Arc::clone(identity))
            .collect();
        active.sort();
        for identity in active {
            self.deactivate(&identity, Reason::Stopping, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    struct Idle;
    impl rally_actor::Actor for Idle {}

    struct Call;
    impl super::CallMeta for Call {
        fn deadline(&self) -> Option<Instant> {
            None
        }
        fn hops(&self) -> u8 {
            0
        }
        fn set_hops(&mut self, _: u8) {}
        fn handed_over(&self) -> bool {
            false
        }
    }

    struct Live;
    impl super::Types for Live {
        type Call = Call;
        type Actor = rally_actor::ActorRef<Idle>;
    }

    /// Every idle activation holds one slot: its age and last message (for listings) take the
    /// 16 bytes one `Instant` took before, so a slot is 104 bytes, as it was without them.
    #[test]
    fn a_slot_stays_small() {
        assert_eq!(std::mem::size_of::<super::Active<Live>>(), 104);
        assert_eq!(std::mem::size_of::<super::Slot<Live>>(), 104);
    }
}
