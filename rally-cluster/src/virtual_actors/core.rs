//! The sans-I/O core of one virtual-actor kind on one member: where each call goes, which life
//! of an identity handles it, when lives start and end, which leases the member claims,
//! releases and fences, and what happens to calls another member did not take.
//!
//! It does no I/O and reads no clock. Inputs are method calls with `now` (a call arrived, a life
//! finished a call or ended, the store answered, a member event, a refusal came back, time
//! passed); outputs are [`Effect`]s the driver takes with
//! [`take_effects`](KindCore::take_effects) and timers it asks for with
//! [`poll_timeout`](KindCore::poll_timeout) — as membership's core does, and as quinn-proto's
//! connection does. The driver (`driver.rs`) runs the effects on tokio; the deterministic
//! harness in the tests runs them against a synchronous store and a simulated clock.
//!
//! The rules it keeps (`docs/cluster-protocol.md`, "Virtual actors"):
//!
//! - **One life at a time per identity on a member, one call at a time per life.** A call waits
//!   in the core until its identity's life is free; so on a move or a leave the calls not yet
//!   handled are still here, and go to the next owner instead of failing.
//! - **One fence per life.** A life acts under `(epoch, life)`. A new life of an identity starts
//!   only once the previous one has ended, or, if it overran its deactivation deadline, once the
//!   store has fenced it (its later saves are refused).
//! - **Re-send only what no activation received**: only a [`Refusal`] that says so
//!   ([`Refusal::resend`]) brings a call back here to be sent again.
//! - **Store operations that fail are retried** (claims, takeovers, releases, fences) with a
//!   bounded backoff until they succeed or are overtaken.
//!
//! Facets live in sibling files: `slots` (per-identity states and lives), `claim` (leases),
//! `routing` (where a call goes, moves, stopping), `relay` (what another member refused),
//! `timers`, `effect`.

mod active;
mod call_times;
mod claim;
mod clock;
mod effect;
mod relay;
mod routing;
mod slots;
mod timers;

#[cfg(test)]
mod harness;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) use self::active::{ActiveEntry, CorePage};
pub(crate) use self::call_times::{BOUNDS_US, CallTimes};
pub(crate) use self::claim::LeaseKey;
use self::claim::{Lease, Op};
use self::clock::Clock;
pub(crate) use self::effect::{Effect, OpId, StoreAnswer, StoreRequest};
use self::slots::Slot;
use self::timers::{Timer, Timers};
use super::config::VirtualActorsConfig;
use super::outcome::Refusal;
use super::ownership::Ownership;
use super::placement::{Placement, Placements};
use super::runtime::KindStats;
use super::slot_table::SlotTable;
use crate::member::MemberEvent;

/// What a driver's calls and lives are, to the core: opaque values it moves around.
pub(crate) trait Types: 'static {
    /// A call: a message with its reply destination.
    type Call: CallMeta;
    /// A running life's handle (the actor's reference).
    type Actor: Clone;
}

/// What the core reads of a call.
pub(crate) trait CallMeta {
    /// When its caller stops waiting; `None` for a tell.
    fn deadline(&self) -> Option<Instant>;
    /// Members it has been passed between so far.
    fn hops(&self) -> u8;
    /// Sets [`hops`](Self::hops).
    fn set_hops(&mut self, hops: u8);
    /// Whether the identity's previous owner handed it over (it goes before what reached this
    /// member directly).
    fn handed_over(&self) -> bool;
}

/// One life of an identity on this member: numbers grow, so `(epoch, life)` grows from one life
/// to the next under a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct LifeId(pub(crate) u64);

/// Calls waiting at most on one member for a membership change; past it a call fails at once,
/// so a cluster with no host cannot fill memory.
const MAX_WAITING: usize = 10_000;

/// Calls waiting at most for one identity (handled one at a time); past it a call is refused
/// (`Overloaded`), so one hot identity cannot fill memory.
const MAX_QUEUED: usize = 100_000;

/// How long an ask another member never took waits before it is routed again.
const RETRY_PAUSE: Duration = Duration::from_millis(20);

/// How long a member that stopped hosting keeps answering (with `Stopped`, so its senders
/// route anew) before it counts as drained, counted from the last call from another member it
/// refused. Its peers saw it leave before it stopped, but calls sent just before their view
/// changed are still on their way; a node that closed its connections then would leave them
/// unanswered.
pub(crate) const QUIET_AFTER_STOP: Duration = Duration::from_millis(100);

/// One kind's activations, leases and waiting calls on one member.
pub(crate) struct KindCore<T: Types> {
    kind: &'static str,
    /// Whether this member hosts the kind (else it only sends to it).
    hosting: bool,
    config: VirtualActorsConfig,
    /// The strategies this member knows, and the one the kind is placed by: this member's own
    /// declaration when it hosts the kind, else its hosts' (`None` while unknown here).
    placements: Arc<Placements>,
    placement: Arc<dyn Placement>,
    unknown_placement: Option<String>,
    ownership: Ownership,
    slots: SlotTable<Slot<T>>,
    leases: HashMap<LeaseKey, Lease>,
    ops: HashMap<OpId, Op>,
    next_op: u64,
    next_life: u64,
    next_attempt: u64,
    timers: Timers,
    /// The earliest timer moved earlier since the driver last asked.
    timer_moved: bool,
    effects: Vec<Effect<T>>,
    /// Calls waiting for a membership change.
    waiting: Vec<Waiting<T>>,
    /// Calls to send again at the next retry.
    retrying: Vec<(Arc<str>, T::Call)>,
    /// Lives stopping because their identity moved, and identities waiting to.
    moving: usize,
    to_move: VecDeque<Arc<str>>,
    stopped: bool,
    /// When this member last stopped hosting or refused a call from another member because it
    /// had.
    last_refused: Option<Instant>,
    counters: Counters,
    /// Instants kept in slots are offsets on this clock (smaller than `Instant`s).
    clock: Clock,
    /// Counts the calls finished by lives here: a life's last use is this count when its
    /// last call finished, an exact order of use for the cap (instants tie).
    uses: u64,
    /// Members (and this one) whose placement settings for the kind were found to differ,
    /// logged once each.
    mismatch_logged: std::collections::HashSet<String>,
}

/// A call waiting for a membership change.
struct Waiting<T: Types> {
    until: Instant,
    identity: Arc<str>,
    call: T::Call,
    /// The member that refused it because it stopped hosting: the call waits until the view
    /// routes it elsewhere. `None`: it waits for any host of the kind.
    from: Option<crate::member::MemberId>,
}

#[derive(Debug, Default, Clone)]
struct Counters {
    active: usize,
    activations: u64,
    deactivations: u64,
    failed: u64,
    moves: u64,
    forwarded: u64,
    mismatches: u64,
    /// How long the calls finished by lives here took.
    call_times: CallTimes,
}

impl<T: Types> KindCore<T> {
    /// The core of `kind` on a member whose view is `ownership` (it hosts the kind when
    /// `hosting`), knowing the placement strategies `placements`.
    pub(crate) fn new(
        kind: &'static str,
        hosting: bool,
        config: VirtualActorsConfig,
        placements: Arc<Placements>,
        ownership: Ownership,
        now: Instant,
    ) -> Self {
        let mut core = Self {
            kind,
            hosting,
            config,
            placement: Arc::new(super::placement::Hashed),
            placements,
            unknown_placement: None,
            ownership,
            slots: SlotTable::new(),
            leases: HashMap::new(),
            ops: HashMap::new(),
            next_op: 0,
            next_life: 0,
            next_attempt: 0,
            timers: Timers::default(),
            timer_moved: false,
            effects: Vec::new(),
            waiting: Vec::new(),
            retrying: Vec::new(),
            moving: 0,
            to_move: VecDeque::new(),
            stopped: false,
            last_refused: None,
            counters: Counters::default(),
            clock: Clock::new(now),
            uses: 0,
            mismatch_logged: std::collections::HashSet::new(),
        };
        core.resolve_placement();
        if hosting {
            let at = now + core.sweep_period();
            core.arm(at, Timer::Sweep);
        }
        core
    }

    /// Whether this member stopped hosting (it was downed, left, or shut down).
    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// The effects of the inputs so far, in order; the core keeps none.
    pub(crate) fn take_effects(&mut self, into: &mut Vec<Effect<T>>) {
        into.append(&mut self.effects);
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next due.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next()
    }

    /// Whether the earliest timer moved earlier since the last call (the driver must wake its
    /// timer sooner). Clears the mark.
    pub(crate) fn timer_moved(&mut self) -> bool {
        std::mem::take(&mut self.timer_moved)
    }

    /// Time passed: runs the timers due at `now`.
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        for timer in self.timers.due(now) {
            match timer {
                Timer::Sweep => self.sweep(now),
                Timer::Claim(key, attempt) => self.claim_again(&key, attempt, now),
                Timer::Release(key, attempt) => self.release_again(&key, attempt, now),
                Timer::Fence(identity, life) => self.fence_again(&identity, life, now),
                Timer::StopDeadline(identity, life) => self.stop_overran(&identity, life, now),
                Timer::Handover(identity, round) => self.handover_over(&identity, round, now),
                Timer::Retry => self.retry(now),
                Timer::Quiet => {}
                Timer::Agreement => {
                    self.ownership.refresh(now);
                    if !self.ownership.is_stopped() {
                        self.resolve_placement();
                        self.view_changed(now);
                        self.arm_agreement();
                    }
                }
            }
        }
    }

    /// Whether this member has stopped hosting and has nothing left: no life, no call waiting
    /// here, and no call refused for [`QUIET_AFTER_STOP`].
    pub(crate) fn is_drained(&self, now: Instant) -> bool {
        self.stopped
            && self.slots.len() == 0
            && self.waiting.is_empty()
            && self.retrying.is_empty()
            && self
                .last_refused
                .is_none_or(|at| now.saturating_duration_since(at) >= QUIET_AFTER_STOP)
    }

    /// Takes in a member event seen at `now`.
    pub(crate) fn member_event(&mut self, event: &MemberEvent, now: Instant) {
        self.ownership.apply(event, now);
        self.resolve_placement();
        self.arm_agreement();
        if self.ownership.is_stopped() {
            self.stop(now);
        } else {
            self.view_changed(now);
        }
    }

    /// The figures of the kind on this member.
    pub(crate) fn stats(&self) -> KindStats {
        let c = &self.counters;
        KindStats {
            kind: self.kind,
            active: c.active,
            leases: self
                .leases
                .values()
                .filter(|lease| matches!(lease, Lease::Held { .. }))
                .count(),
            activations: c.activations,
            deactivations: c.deactivations,
            failed_activations: c.failed,
            moves: c.moves,
            forwarded: c.forwarded,
            settings_mismatches: c.mismatches,
            call_times: c.call_times.buckets.to_vec(),
        }
    }

    /// Finds the strategy the kind is placed by: this member's own declaration when it hosts
    /// the kind, else the one its hosts agree on.
    fn resolve_placement(&mut self) {
        let declared = if self.hosting {
            self.ownership.local().declaration(self.kind)
        } else {
            self.ownership.agreed(self.kind)
        };
        let Some(name) = declared.map(|d| d.placement.clone()) else {
            return;
        };
        if name == self.placement.name() {
            self.unknown_placement = None;
            return;
        }
        match self.placements.get(&name) {
            Some(placement) => {
                self.placement = placement;
                self.unknown_placement = None;
            }
            None => self.unknown_placement = Some(name),
        }
    }

    /// Why this member may not take part in the kind, if its placement settings differ from
    /// the cluster's (or it does not know the strategy the kind's hosts declared).
    pub(super) fn mismatch(&self) -> Option<String> {
        if let Some(name) = &self.unknown_placement {
            return Some(format!(
                "kind {:?} is placed by {name:?}, which this member does not know (register it \
                 with VirtualActorsBuilder::placement)",
                self.kind
            ));
        }
        if !self.hosting {
            return None;
        }
        let ours = self.ownership.local().declaration(self.kind)?;
        let agreed = self.ownership.agreed(self.kind)?;
        (agreed.fingerprint != ours.fingerprint).then(|| {
            format!(
                "this member places kind {:?} by {:?}, the cluster (its oldest host) by {:?} or \
                 with other settings",
                self.kind, ours.placement, agreed.placement
            )
        })
    }

    /// Counts a call refused because placement settings differ, and logs it once per `who`.
    pub(super) fn count_mismatch(&mut self, who: String, why: &str) {
        self.counters.mismatches += 1;
        if self.mismatch_logged.len() < 1024 && self.mismatch_logged.insert(who.clone()) {
            tracing::warn!(kind = self.kind, member = %who, %why, "placement settings differ: calls refused");
        }
    }

    /// Arms the refresh of the view for when a member that went away stops counting towards
    /// the kind's agreed settings.
    fn arm_agreement(&mut self) {
        if let Some(at) = self.ownership.next_change() {
            self.arm(at, Timer::Agreement);
        }
    }

    fn arm(&mut self, at: Instant, timer: Timer) {
        if self.timers.arm(at, timer) {
            self.timer_moved = true;
        }
    }

    fn emit(&mut self, effect: Effect<T>) {
        self.effects.push(effect);
    }

    fn refuse(&mut self, call: T::Call, refusal: Refusal) {
        self.emit(Effect::Refuse { call, refusal });
    }

    fn new_op(&mut self, op: Op, request: StoreRequest) {
        self.next_op += 1;
        let id = OpId(self.next_op);
        self.ops.insert(id, op);
        self.emit(Effect::Store { op: id, request });
    }

    fn new_life(&mut self) -> LifeId {
        self.next_life += 1;
        LifeId(self.next_life)
    }

    fn new_attempt(&mut self) -> u64 {
        self.next_attempt += 1;
        self.next_attempt
    }

    /// How often idle activations are looked for: a tenth of the idle time, between 10 ms and
    /// 1 s, so an idle activation goes within 10% of its idle time.
    fn sweep_period(&self) -> Duration {
        (self.config.idle_timeout / 10).clamp(Duration::from_millis(10), Duration::from_secs(1))
    }
}

/// A bounded backoff for store operations that failed: 50 ms doubling to 2 s.
fn backoff(failures: u32) -> Duration {
    Duration::from_millis(50)
        .saturating_mul(1 << failures.min(6))
        .min(Duration::from_secs(2))
}
