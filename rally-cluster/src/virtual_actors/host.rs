//! The runtime on one member: its activations per kind, the activation and deactivation
//! protocol, passivation, and moves after membership changes.

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::{Duration, Instant};

use rally_actor::{ActorId, ActorRef, ActorSystem, Terminated, TerminationSink};
use rally_state::{Claim, Epoch, StateStore};
use tokio::sync::{Notify, Semaphore, oneshot};

use super::config::VirtualActorsConfig;
use super::error::GrainError;
use super::kind::{Activation, Call, Envelope, GrainMessages, VirtualActor, WireReply};
use super::leases::{Acquired, LeaseKey, Leases};
use super::ownership::{Holder, Ownership, Route};
use super::placement::Placement;
use super::slot_table::SlotTable;
use super::transport::{GrainRequest, Handover, Peer, Transport};
use crate::member::MemberId;

/// How many times an activation retries its claim (each retry follows a holder that went
/// away or a lost race) before its messages fail.
const CLAIM_ATTEMPTS: u32 = 8;

/// How long an ask that another member never took (`Unreachable`: its runtime not started
/// yet, or its node gone) waits before it is routed again, within its deadline.
const RETRY_PAUSE: Duration = Duration::from_millis(20);

/// How often, at first, a member that now owns an identity asks the store again whether the
/// previous owner, still serving, has handed it over; doubled after each ask up to
/// [`HANDOVER_POLL_MAX`].
const HANDOVER_POLL: Duration = Duration::from_millis(10);
const HANDOVER_POLL_MAX: Duration = Duration::from_millis(100);
/// How often at most a member waiting to take a lease over from a holder that is down or gone
/// asks the store whether the holder released it meanwhile (a graceful leaver does, as it
/// stops; a crashed one never does, so this stays rare: about ten asks in a takeover wait).
const GONE_POLL_MAX: Duration = Duration::from_secs(1);

/// Messages waiting at most on one member for a membership change (a host of their kind to
/// be seen, or a stopped owner to be seen leaving); past it a message fails at once, so a
/// cluster with no host cannot fill memory.
const MAX_WAITING: usize = 10_000;

/// Routes a waiting message again (`true`) or fails it (`false`: its wait is over, or this
/// member's runtime stopped).
type Resume = Box<dyn FnOnce(&Arc<Inner>, bool) + Send>;

/// A message waiting for a membership change.
struct Waiting {
    /// When it fails.
    until: Instant,
    resume: Resume,
}

/// What this member's runtime shares between its handles, its tasks and the transport.
pub(crate) struct Inner {
    pub(crate) local: MemberId,
    owner_key: Arc<str>,
    system: ActorSystem,
    store: Arc<dyn StateStore>,
    placement: Arc<dyn Placement>,
    pub(crate) config: VirtualActorsConfig,
    ownership: Mutex<Ownership>,
    kinds: RwLock<HashMap<&'static str, Arc<dyn KindHost>>>,
    pub(crate) transport: Transport,
    stopped: AtomicBool,
    moves: Arc<Semaphore>,
    /// Wakes the sweeper after a membership change.
    pub(crate) view_changed: Notify,
    view_dirty: AtomicBool,
    /// Membership changes taken in so far.
    view_generation: AtomicU64,
    /// Messages waiting for a membership change.
    waiting: Mutex<Vec<Waiting>>,
    /// Asks this member passed on for another member whose answers have not come back
    /// through it yet (see [`drained`](Self::drained)).
    relaying: AtomicUsize,
    /// When this member last stopped hosting or refused a request because it had: see
    /// [`drained`](Self::drained).
    last_refused: Mutex<Option<Instant>>,
}

/// How long a member that stopped hosting keeps answering (with `Stopped`, so its senders
/// route anew) before [`Inner::drained`] lets it go, counted from the last request it refused.
/// Its peers saw it leave before it stopped, but a sender's requests sent just before its
/// view changed are still on their way; a node that closed its connections then would leave
/// them unanswered, and they would fail as `OutcomeUnknown` although nothing handled them.
const QUIET_AFTER_STOP: Duration = Duration::from_millis(100);

/// One ask passed on for another member, counted until its answer has come back through this
/// member (or the answer's way back was dropped).
struct Relaying(std::sync::Weak<Inner>);

impl Drop for Relaying {
    fn drop(&mut self) {
        if let Some(inner) = self.0.upgrade() {
            inner.relaying.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// What becomes of the answer (`result`) to an ask sent one hop, to `from`: an ask that was
/// not handled there is routed anew, within its deadline; any other answer is the call's.
/// An ask `from` refused because its runtime stopped (it is leaving or was shut down) is
/// routed once this member's view no longer sends it there, so a member that stops hosting a
/// moment before the others see it leave costs its callers a wait, not an error. An ask never
/// handed to the member (its runtime not started yet, or its node gone) is routed again a
/// moment later, to wherever the view then says. An ask relayed for another member
/// (`relaying`) stays counted while it waits to be routed again.
fn answered<K: VirtualActor>(
    inner: Option<Arc<Inner>>,
    from: &MemberId,
    identity: Arc<str>,
    mut call: Box<dyn Call<K>>,
    deadline: Instant,
    result: Result<Vec<u8>, GrainError>,
    relaying: Option<Relaying>,
) {
    match (result, inner) {
        (Err(GrainError::Stopped), Some(inner)) if crate::virtual_actors::now() < deadline => {
            call.unhop();
            inner.reroute(from, identity, call, relaying);
        }
        (Err(GrainError::Unreachable(_)), Some(inner))
            if crate::virtual_actors::now() + RETRY_PAUSE < deadline =>
        {
            call.unhop();
            inner.retry_later(identity, call, relaying);
        }
        (result, _) => call.answer(result),
    }
}

/// The figures of one kind on this member.
///
/// # Example
///
/// ```
/// use rally::cluster::virtual_actors::KindStats;
///
/// fn report(stats: &KindStats) -> String {
///     format!("{}: {} active, {} activations", stats.kind, stats.active, stats.activations)
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct KindStats {
    /// The kind.
    pub kind: &'static str,
    /// Activations alive now.
    pub active: usize,
    /// Leases of the kind held now: shards (or identities leased alone) this member may
    /// activate in without a claim in the state store.
    pub leases: usize,
    /// Activations started since this member started.
    pub activations: u64,
    /// Activations ended (idle, over the cap, moved, or this member stopping).
    pub deactivations: u64,
    /// Activations whose hook failed or panicked (or whose claim failed).
    pub failed_activations: u64,
    /// Activations ended because their identity now belongs to another member.
    pub moves: u64,
    /// Messages this member passed on to another member instead of handling them.
    pub forwarded: u64,
}

impl Inner {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        local: MemberId,
        system: ActorSystem,
        store: Arc<dyn StateStore>,
        placement: Arc<dyn Placement>,
        config: VirtualActorsConfig,
        ownership: Ownership,
        kinds: HashMap<&'static str, Arc<dyn KindHost>>,
        transport: Transport,
    ) -> Self {
        let moves = Arc::new(Semaphore::new(config.max_concurrent_moves.max(1)));
        Self {
            owner_key: Arc::from(Ownership::owner_key(&local)),
            local,
            system,
            store,
            placement,
            config,
            ownership: Mutex::new(ownership),
            kinds: RwLock::new(kinds),
            transport,
            stopped: AtomicBool::new(false),
            moves,
            view_changed: Notify::new(),
            view_dirty: AtomicBool::new(false),
            view_generation: AtomicU64::new(0),
            waiting: Mutex::new(Vec::new()),
            relaying: AtomicUsize::new(0),
            last_refused: Mutex::new(None),
        }
    }

    /// Decisions are plain data updates: a poisoned lock is still consistent.
    pub(crate) fn ownership(&self) -> MutexGuard<'_, Ownership> {
        self.ownership
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn kind(&self, kind: &str) -> Option<Arc<dyn KindHost>> {
        self.kinds
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(kind)
            .cloned()
    }

    fn all_kinds(&self) -> Vec<Arc<dyn KindHost>> {
        self.kinds
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    pub(crate) fn stats(&self) -> Vec<KindStats> {
        let mut stats: Vec<_> = self.all_kinds().iter().map(|k| k.stats()).collect();
        stats.sort_by_key(|s| s.kind);
        stats
    }

    pub(crate) fn check_identity(&self, identity: &str) -> Result<(), GrainError> {
        if identity.is_empty() || identity.len() > self.config.max_identity_bytes {
            return Err(GrainError::InvalidIdentity(format!(
                "identity must be 1..={} bytes, got {}",
                self.config.max_identity_bytes,
                identity.len()
            )));
        }
        Ok(())
    }

    /// Sends a typed call for `K` from this member: to the local host if this member hosts
    /// `K`, otherwise to the owner.
    pub(crate) fn send<K: VirtualActor>(
        self: &Arc<Self>,
        identity: &Arc<str>,
        call: Box<dyn Call<K>>,
    ) {
        if self.is_stopped() {
            return call.fail(GrainError::Stopped);
        }
        if let Some(host) = self.kind(K::KIND) {
            let host = host
                .as_any()
                .downcast::<Host<K>>()
                .unwrap_or_else(|_| unreachable!("kinds map K::KIND to Host<K>"));
            return host.dispatch(self, Arc::clone(identity), call);
        }
        let route = self
            .ownership()
            .route(K::KIND, identity, self.placement.as_ref());
        match route {
            Route::Remote(to) => self.forward(identity, &to, call),
            Route::NoHost => self.await_host(Arc::clone(identity), call),
            Route::Local => call.fail(GrainError::NotHosted {
                kind: K::KIND.to_owned(),
                member: self.local.to_string(),
            }),
        }
    }

    /// Passes a call on to `to`, one more hop. An ask that `to` refuses because its runtime
    /// stopped (it is leaving or was shut down: the message was not handled) does not fail:
    /// it is routed anew once this member's view no longer sends it there, within its
    /// deadline. So a member that stops hosting a moment before the others see it leave
    /// costs its callers a wait, not an error.
    fn forward<K: VirtualActor>(
        self: &Arc<Self>,
        identity: &Arc<str>,
        to: &MemberId,
        call: Box<dyn Call<K>>,
    ) {
        self.forward_as(identity, to, call, Handover::No);
    }

    /// [`forward`](Self::forward), marked as a handed-over call or not.
    fn forward_as<K: VirtualActor>(
        self: &Arc<Self>,
        identity: &Arc<str>,
        to: &MemberId,
        mut call: Box<dyn Call<K>>,
        handover: Handover,
    ) {
        if call.hops() >= self.config.max_hops {
            let hops = call.hops();
            return call.fail(GrainError::TooManyHops(hops));
        }
        // An ask that came from another member (it took a hop already) is answered through
        // this one: a leaving member waits for it (see `drained`).
        let relaying = (call.hops() > 0 && call.deadline().is_some()).then(|| {
            self.relaying.fetch_add(1, Ordering::AcqRel);
            Relaying(Arc::downgrade(self))
        });
        let outgoing = match call.request() {
            Ok(outgoing) => outgoing,
            Err(error) => return call.fail(error),
        };
        let mut request = GrainRequest::new(K::KIND, identity, outgoing);
        request.handover = handover;
        let reply: WireReply = match call.deadline() {
            None => Box::new(move |result| call.answer(result)),
            Some(deadline) => {
                let inner = Arc::downgrade(self);
                let (identity, from) = (Arc::clone(identity), to.clone());
                Box::new(move |result| {
                    answered(
                        inner.upgrade(),
                        &from,
                        identity,
                        call,
                        deadline,
                        result,
                        relaying,
                    );
                })
            }
        };
        self.transport.send(to, request, reply);
    }

    /// The member an ask from this member for `identity` of `kind` goes to straight from its
    /// asker (one hop, the answer straight back to the asker): the owner by this member's
    /// view, kept in `cache` with the view it was found by, while no membership change came
    /// since. `None` when this member hosts the kind or has stopped (the ask then takes the
    /// general way) or no other member owns the identity by its view.
    pub(crate) fn direct_peer(
        &self,
        kind: &'static str,
        identity: &str,
        cache: &Mutex<Option<(u64, Peer)>>,
    ) -> Option<Peer> {
        if self.is_stopped() || self.kind(kind).is_some() {
            return None;
        }
        // Read before routing: a change that lands meanwhile makes the entry stale at once.
        let generation = self.view_generation.load(Ordering::Acquire);
        if let Some((seen, peer)) = &*cache.lock().unwrap_or_else(PoisonError::into_inner)
            && *seen == generation
        {
            return Some(Arc::clone(peer));
        }
        let Route::Remote(to) = self
            .ownership()
            .route(kind, identity, self.placement.as_ref())
        else {
            return None;
        };
        let peer = self.transport.peer(&to);
        *cache.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((generation, Arc::clone(&peer)));
        Some(peer)
    }

    /// What becomes of an ask that `from` did not answer (see [`answered`]), from the asker
    /// that sent it there itself.
    pub(crate) fn not_answered<K: VirtualActor>(
        self: &Arc<Self>,
        from: &MemberId,
        identity: Arc<str>,
        call: Box<dyn Call<K>>,
        deadline: Instant,
        error: GrainError,
    ) {
        answered(
            Some(Arc::clone(self)),
            from,
            identity,
            call,
            deadline,
            Err(error),
            None,
        );
    }

    /// Sends an ask again after [`RETRY_PAUSE`], by the view as it is then.
    /// An ask relayed for another member stays counted until it is sent again.
    fn retry_later<K: VirtualActor>(
        self: &Arc<Self>,
        identity: Arc<str>,
        call: Box<dyn Call<K>>,
        relaying: Option<Relaying>,
    ) {
        let inner = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep(RETRY_PAUSE).await;
            match inner.upgrade() {
                Some(inner) => inner.send::<K>(&identity, call),
                None => call.fail(GrainError::Stopped),
            }
            drop(relaying);
        });
    }

    /// Passes on a call that reached this member after it stopped hosting, to the member its
    /// view now routes the identity to; fails it with `Stopped` if there is none (an ask's
    /// sender then routes it anew).
    fn pass_on<K: VirtualActor>(self: &Arc<Self>, identity: &Arc<str>, call: Box<dyn Call<K>>) {
        match self.route_now(K::KIND, identity) {
            Route::Remote(to) => {
                if let Some(host) = self.kind(K::KIND) {
                    host.count_forwarded();
                }
                self.forward_as(identity, &to, call, Handover::Call);
            }
            Route::Local | Route::NoHost => call.fail(GrainError::Stopped),
        }
    }

    /// Where `identity` of `kind` goes by this member's view: never here once this member
    /// stopped hosting.
    fn route_now(&self, kind: &str, identity: &str) -> Route {
        let ownership = self.ownership();
        if self.is_stopped() {
            ownership.route_elsewhere(kind, identity, self.placement.as_ref())
        } else {
            ownership.route(kind, identity, self.placement.as_ref())
        }
    }

    /// Routes an ask that `from` refused because it stopped hosting: at once if this
    /// member's view already routes it elsewhere, otherwise after the next membership change.
    /// An ask relayed for another member (`relaying`) stays counted until it is sent again
    /// or answered, waiting included, so `drained` waits for it.
    fn reroute<K: VirtualActor>(
        self: &Arc<Self>,
        from: &MemberId,
        identity: Arc<str>,
        call: Box<dyn Call<K>>,
        relaying: Option<Relaying>,
    ) {
        let route = self
            .ownership()
            .route(K::KIND, &identity, self.placement.as_ref());
        let moved_on = match &route {
            Route::Remote(to) => to != from,
            Route::Local => true,
            Route::NoHost => false,
        };
        if moved_on || self.is_stopped() {
            self.send::<K>(&identity, call);
            drop(relaying);
            return;
        }
        let until = call.deadline().unwrap_or_else(crate::virtual_actors::now);
        let from = from.clone();
        self.wait_for_view(
            until,
            Box::new(move |inner, again| {
                if again {
                    inner.reroute(&from, identity, call, relaying);
                } else {
                    call.fail(GrainError::Stopped);
                    drop(relaying);
                }
            }),
        );
    }

    /// Holds a message that found no member hosting its kind until a membership change shows
    /// one, or fails it with `NoHost` at its deadline (a `tell`: after `host-wait`). Members
    /// that start together do not see each other at the same instant; a message sent in
    /// that gap is delivered, not refused.
    fn await_host<K: VirtualActor>(self: &Arc<Self>, identity: Arc<str>, call: Box<dyn Call<K>>) {
        let until = call
            .deadline()
            .unwrap_or_else(|| crate::virtual_actors::now() + self.config.host_wait);
        self.wait_for_view(
            until,
            Box::new(move |inner, again| {
                if again {
                    inner.send::<K>(&identity, call);
                } else if inner.is_stopped() {
                    call.fail(GrainError::Stopped);
                } else {
                    call.fail(GrainError::NoHost(K::KIND.to_owned()));
                }
            }),
        );
    }

    /// Keeps `resume` until the next membership change (then `resume(true)`) or `until`
    /// (`resume(false)`); `resume(false)` at once when this member stopped, `until` has
    /// passed, or `MAX_WAITING` messages already wait.
    fn wait_for_view(self: &Arc<Self>, until: Instant, resume: Resume) {
        let mut waiting = self.waiting();
        if self.is_stopped()
            || waiting.len() >= MAX_WAITING
            || until <= crate::virtual_actors::now()
        {
            drop(waiting);
            return resume(self, false);
        }
        waiting.push(Waiting { until, resume });
    }

    fn waiting(&self) -> MutexGuard<'_, Vec<Waiting>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// After a membership change, routes again every message that waited for one (those
    /// that still cannot go wait again); at any time, fails those past their deadline.
    fn resume_waiting(self: &Arc<Self>, view_changed: bool) {
        let now = crate::virtual_actors::now();
        let due = {
            let mut waiting = self.waiting();
            if view_changed || self.is_stopped() {
                std::mem::take(&mut *waiting)
            } else {
                let (due, kept) = std::mem::take(&mut *waiting)
                    .into_iter()
                    .partition(|w| w.until <= now);
                *waiting = kept;
                due
            }
        };
        for waiting in due {
            let again = view_changed && waiting.until > now && !self.is_stopped();
            (waiting.resume)(self, again);
        }
    }

    /// Whether no member is seen hosting `kind`: an `ask` that timed out says `NoHost`
    /// rather than `Timeout` then.
    pub(crate) fn no_host(&self, kind: &str, identity: &str) -> bool {
        self.ownership()
            .route(kind, identity, self.placement.as_ref())
            == Route::NoHost
    }

    /// A request from another member.
    pub(crate) fn receive(self: &Arc<Self>, request: GrainRequest, reply: WireReply) {
        if request.handover == Handover::Done {
            // The calls handed over before it arrived first, and are queued: arrival is the
            // answer.
            return reply(Ok(Vec::new()));
        }
        if self.is_stopped() {
            return self.refuse(request, reply);
        }
        if let Err(e) = self.check_identity(&request.identity) {
            return reply(Err(e));
        }
        match self.kind(&request.kind) {
            None => reply(Err(GrainError::NotHosted {
                kind: request.kind.into_owned(),
                member: self.local.to_string(),
            })),
            Some(host) => host.receive(self, request, reply),
        }
    }

    /// A request that reached this member after it stopped hosting. An ask is refused with
    /// `Stopped` (not handled: its sender routes it anew). A tell has no way back to its
    /// sender: it is passed on to the member this one's view now routes it to, and only
    /// dropped (with a warning) when there is none or it has taken too many hops.
    fn refuse(self: &Arc<Self>, mut request: GrainRequest, reply: WireReply) {
        self.note_refused();
        if request.wait_ms.is_some() {
            return reply(Err(GrainError::Stopped));
        }
        match self.route_now(&request.kind, &request.identity) {
            Route::Remote(to) if request.hops < self.config.max_hops => {
                if let Some(host) = self.kind(&request.kind) {
                    host.count_forwarded();
                }
                request.hops += 1;
                // It reached the identity's previous owner, as a call handed over does.
                request.handover = Handover::Call;
                self.transport.send(&to, request, reply);
            }
            _ => tracing::warn!(
                kind = %request.kind,
                identity = %request.identity,
                hops = request.hops,
                "a tell reached a member that stopped hosting, and no other member hosts its \
                 kind (or it took too many hops): dropped"
            ),
        }
    }

    /// Takes in a membership change: records it, and stops everything if this member was
    /// downed or removed.
    pub(crate) fn apply(self: &Arc<Self>, event: &crate::member::MemberEvent) {
        let stopped = {
            let mut ownership = self.ownership();
            ownership.apply(event, crate::virtual_actors::now());
            ownership.is_stopped()
        };
        if stopped {
            self.stop();
        } else {
            self.view_generation.fetch_add(1, Ordering::AcqRel);
            self.view_dirty.store(true, Ordering::Release);
            self.view_changed.notify_one();
            for host in self.all_kinds() {
                host.unpark(self, true);
            }
            self.resume_waiting(true);
        }
    }

    /// Stops hosting: no new message is taken, every activation is deactivated.
    pub(crate) fn stop(self: &Arc<Self>) {
        if self.stopped.swap(true, Ordering::AcqRel) {
            return;
        }
        self.note_refused();
        for host in self.all_kinds() {
            host.deactivate_all(self);
        }
        self.resume_waiting(false);
        self.view_changed.notify_one();
    }

    /// Deactivates what has been idle too long and, after a membership change, what now
    /// belongs to another member.
    pub(crate) fn sweep(self: &Arc<Self>) {
        let moved = self.view_dirty.swap(false, Ordering::AcqRel);
        for host in self.all_kinds() {
            host.sweep(self, crate::virtual_actors::now(), moved);
            host.unpark(self, false);
        }
        self.resume_waiting(false);
    }

    pub(crate) fn attach(self: &Arc<Self>) {
        if let Transport::Memory(network) = &self.transport {
            network.attach(&self.local, self);
        }
    }

    fn note_refused(&self) {
        *self
            .last_refused
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(crate::virtual_actors::now());
    }

    /// Resolves once every activation of every kind has ended, every ask this member passed on
    /// for another member (a handed-over call, say) has had its answer back through it or
    /// given up at its deadline (a member that leaves right after must not take the way back
    /// of an answer with it), and no request has come in for [`QUIET_AFTER_STOP`] since this
    /// member stopped hosting (those still on their way are answered `Stopped`, not lost with
    /// its connections).
    pub(crate) async fn drained(&self) {
        loop {
            let hosts = self.all_kinds();
            let quiet_since = *self
                .last_refused
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let quiet = quiet_since.is_none_or(|at| {
                crate::virtual_actors::now().saturating_duration_since(at) >= QUIET_AFTER_STOP
            });
            if quiet
                && hosts.iter().all(|h| h.slot_count() == 0)
                && self.relaying.load(Ordering::Acquire) == 0
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// One kind's host, erased over the kind.
pub(crate) trait KindHost: Send + Sync + 'static {
    fn receive(&self, inner: &Arc<Inner>, request: GrainRequest, reply: WireReply);
    fn sweep(&self, inner: &Arc<Inner>, now: Instant, moved: bool);
    fn unpark(&self, inner: &Arc<Inner>, view_changed: bool);
    fn deactivate_all(&self, inner: &Arc<Inner>);
    fn stats(&self) -> KindStats;
    fn slot_count(&self) -> usize;
    fn count_forwarded(&self);
    fn as_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
}

/// The activations of kind `K` on this member.
pub(crate) struct Host<K: VirtualActor> {
    me: std::sync::Weak<Host<K>>,
    table: GrainMessages<K>,
    slots: Mutex<SlotTable<Slot<K>>>,
    /// The leases this member holds or claims for the kind's scopes. Never locked while the
    /// slots' lock is held, nor the other way round.
    leases: Mutex<Leases>,
    /// Parked slots, so a membership change looks for them only when there are some.
    parked: AtomicUsize,
    counters: Counters,
}

#[derive(Default)]
struct Counters {
    active: AtomicUsize,
    activations: AtomicU64,
    deactivations: AtomicU64,
    failed: AtomicU64,
    moves: AtomicU64,
    forwarded: AtomicU64,
}

enum Slot<K: VirtualActor> {
    /// Claiming and running the activation hook; messages wait in order.
    Activating(Vec<Box<dyn Call<K>>>),
    Active(ActiveSlot<K>),
    /// Draining, stopping and releasing; messages wait in order, then are routed anew.
    Deactivating(Vec<Box<dyn Call<K>>>),
    /// Handed over by a member whose view makes this one the identity's next owner, while
    /// this member's view does not yet: messages wait in order until this member's view
    /// agrees (then they activate here) or until the instant (then they are routed anew).
    Parked(Vec<Box<dyn Call<K>>>, Instant),
}

struct ActiveSlot<K: VirtualActor> {
    /// Its mailbox's load (messages waiting plus the one being handled) says whether it is
    /// idle: calls are enqueued under the slots' lock, so a deactivation that takes the slot
    /// sees every call handed to it.
    actor: ActorRef<K>,
    last_used: Instant,
}

impl<K: VirtualActor> ActiveSlot<K> {
    fn is_idle(&self) -> bool {
        self.actor.load().is_none_or(|load| load == 0)
    }
}

/// How often a deactivation looks whether the activation has handled what it was handed.
const IDLE_POLL: Duration = Duration::from_millis(1);

/// How a claim ended.
enum Claimed {
    Granted(Epoch),
    /// A serving member holds the scope: the activation's messages go there.
    HeldBy(MemberId),
}

/// Why an activation ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reason {
    Idle,
    OverCap,
    Moved,
    Stopping,
}

impl<K: VirtualActor> Host<K> {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new_cyclic(|me| Self {
            me: me.clone(),
            table: GrainMessages::of(),
            slots: Mutex::new(SlotTable::new()),
            leases: Mutex::new(Leases::default()),
            parked: AtomicUsize::new(0),
            counters: Counters::default(),
        })
    }

    fn this(&self) -> Arc<Self> {
        self.me
            .upgrade()
            .expect("a host is only used through the Arc that holds it")
    }

    /// Slot changes are single map operations: a poisoned lock is still consistent.
    fn slots(&self) -> MutexGuard<'_, SlotTable<Slot<K>>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// As [`slots`](Self::slots).
    fn leases(&self) -> MutexGuard<'_, Leases> {
        self.leases.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lease_key(inner: &Inner, identity: &Arc<str>) -> LeaseKey {
        LeaseKey::new(inner.placement.scope(K::KIND, identity), identity)
    }

    /// An activation under `key` ended (or never started): releases the lease in the store if
    /// it was the last under it.
    async fn leave_lease(&self, inner: &Inner, key: &LeaseKey) {
        let last = self.leases().leave(key);
        if let Some((scope, epoch)) = last {
            let _ = inner.store.release(K::KIND, &scope, epoch).await;
        }
    }

    /// Delivers, queues, activates or forwards one call.
    pub(crate) fn dispatch(&self, inner: &Arc<Inner>, identity: Arc<str>, call: Box<dyn Call<K>>) {
        self.dispatch_once(inner, identity, call, true);
    }

    /// [`dispatch`](Self::dispatch); a handed-over call that this member's view does not
    /// route here waits for the next membership change if `may_wait`.
    fn dispatch_once(
        &self,
        inner: &Arc<Inner>,
        identity: Arc<str>,
        call: Box<dyn Call<K>>,
        may_wait: bool,
    ) {
        if inner.is_stopped() {
            return call.fail(GrainError::Stopped);
        }
        let mut slots = self.slots();
        match slots.get_mut(&identity) {
            Some(Slot::Active(active)) => {
                active.last_used = crate::virtual_actors::now();
                // Under the lock: a deactivation taking the slot then sees it in the load.
                call.deliver(&active.actor);
            }
            Some(Slot::Activating(queue) | Slot::Deactivating(queue) | Slot::Parked(queue, _)) => {
                // A handed-over call reached the previous owner before anything here did.
                let at = if call.handed_over() {
                    queue
                        .iter()
                        .take_while(|queued| queued.handed_over())
                        .count()
                } else {
                    queue.len()
                };
                queue.insert(at, call);
            }
            None => {
                let route = inner
                    .ownership()
                    .route(K::KIND, &identity, inner.placement.as_ref());
                match route {
                    Route::Local => {
                        slots.insert(Arc::clone(&identity), Slot::Activating(vec![call]));
                        drop(slots);
                        let host = self.this();
                        let inner = Arc::clone(inner);
                        run_or_spawn(async move { host.activate(inner, identity).await });
                    }
                    // The member that handed it over sees this one as the identity's next
                    // owner: this member's view is behind (sending it back would bounce it
                    // between the two). It is parked until the next membership change, and
                    // what comes for the identity meanwhile queues behind it.
                    Route::Remote(_) if may_wait && call.handed_over() => {
                        let until =
                            crate::virtual_actors::now() + 2 * inner.config.deactivation_timeout;
                        slots.insert(identity, Slot::Parked(vec![call], until));
                        self.parked.fetch_add(1, Ordering::Relaxed);
                    }
                    Route::Remote(to) => {
                        drop(slots);
                        if call.hops() > 0 {
                            self.counters.forwarded.fetch_add(1, Ordering::Relaxed);
                        }
                        inner.forward(&identity, &to, call);
                    }
                    Route::NoHost => {
                        drop(slots);
                        inner.await_host(identity, call);
                    }
                }
            }
        }
    }

    /// Routes parked identities anew: after a membership change, those this member now owns
    /// (they activate with their queue as it is); at any time, those parked past their instant
    /// (their messages go where this member's view sends them).
    fn unpark(&self, inner: &Arc<Inner>, view_changed: bool) {
        if self.parked.load(Ordering::Relaxed) == 0 {
            return;
        }
        let now = crate::virtual_actors::now();
        let mut activate = Vec::new();
        let mut expired = Vec::new();
        {
            let mut slots = self.slots();
            let ownership = inner.ownership();
            let parked: Vec<Arc<str>> = slots
                .iter()
                .filter(|(_, slot)| matches!(slot, Slot::Parked(..)))
                .map(|(identity, _)| Arc::clone(identity))
                .collect();
            for identity in parked {
                let ours = view_changed
                    && ownership.route(K::KIND, &identity, inner.placement.as_ref())
                        == Route::Local;
                let Some(Slot::Parked(queue, until)) = slots.get_mut(&identity) else {
                    continue;
                };
                if ours {
                    let queue = std::mem::take(queue);
                    slots.insert(Arc::clone(&identity), Slot::Activating(queue));
                    activate.push(identity);
                } else if *until <= now {
                    let queue = std::mem::take(queue);
                    slots.remove(&identity);
                    expired.push((identity, queue));
                } else {
                    continue;
                }
                self.parked.fetch_sub(1, Ordering::Relaxed);
            }
        }
        for identity in activate {
            let host = self.this();
            let inner = Arc::clone(inner);
            tokio::spawn(async move { host.activate(inner, identity).await });
        }
        for (identity, queue) in expired {
            for call in queue {
                self.dispatch_once(inner, Arc::clone(&identity), call, false);
            }
        }
    }

    /// Acquires the identity's lease (claiming it in the store if this member does not hold
    /// it yet), runs the activation hook, and delivers what waited.
    async fn activate(self: Arc<Self>, inner: Arc<Inner>, identity: Arc<str>) {
        let generation = inner.view_generation.load(Ordering::Acquire);
        let key = Self::lease_key(&inner, &identity);
        let acquired = self.leases().acquire(&key, &identity);
        let lease = match acquired {
            Acquired::Held(scope, epoch) => (scope, epoch),
            // The claim under way starts (or hands on) this activation when it ends.
            Acquired::Waiting => return,
            Acquired::Claim => {
                let scope = key.name();
                match self.claim(&inner, &identity, &scope).await {
                    Ok(Claimed::Granted(epoch)) => {
                        let waiting = self.leases().granted(&key, Arc::clone(&scope), epoch);
                        for waiter in waiting {
                            let (host, inner) = (Arc::clone(&self), Arc::clone(&inner));
                            let lease = (Arc::clone(&scope), epoch);
                            run_or_spawn(async move {
                                host.start(inner, waiter, lease, generation).await;
                            });
                        }
                        (scope, epoch)
                    }
                    Ok(Claimed::HeldBy(holder)) => {
                        let waiting = self.leases().not_granted(&key);
                        for identity in std::iter::once(identity).chain(waiting) {
                            self.hand_to(&inner, &identity, &holder);
                        }
                        return;
                    }
                    Err(error) => {
                        let waiting = self.leases().not_granted(&key);
                        for identity in std::iter::once(identity).chain(waiting) {
                            self.abandon(&identity, error.clone());
                        }
                        return;
                    }
                }
            }
        };
        self.start(inner, identity, lease, generation).await;
    }

    /// Runs the activation hook under the lease `(scope, epoch)` (counted for this activation
    /// already) and delivers what waited; `generation` is the view the activation began in.
    async fn start(
        self: Arc<Self>,
        inner: Arc<Inner>,
        identity: Arc<str>,
        lease: (Arc<str>, Epoch),
        generation: u64,
    ) {
        let activation = Activation::new(
            K::KIND,
            Arc::clone(&inner.owner_key),
            Arc::clone(&identity),
            lease,
            Arc::clone(&inner.store),
        );
        // Polled in this task (a task of its own cost a spawn and a wake-up per activation);
        // a panicking hook is caught here, not a dead runtime.
        let built = rally_actor::CatchPanic::new(K::activate(activation)).await;
        let actor = match built {
            Ok(Ok(actor)) => inner
                .system
                .spawn(actor)
                .map_err(|e| GrainError::ActivationFailed(e.to_string())),
            Ok(Err(e)) => Err(GrainError::ActivationFailed(e.to_string())),
            Err(panic) => Err(GrainError::ActivationFailed(format!(
                "the activation hook panicked: {panic}"
            ))),
        };
        let actor = match actor {
            Ok(actor) => actor,
            Err(error) => {
                self.leave_lease(&inner, &Self::lease_key(&inner, &identity))
                    .await;
                return self.abandon(&identity, error);
            }
        };
        self.counters.activations.fetch_add(1, Ordering::Relaxed);
        self.counters.active.fetch_add(1, Ordering::Relaxed);
        {
            let mut slots = self.slots();
            let queue = match slots.insert(
                Arc::clone(&identity),
                Slot::Active(ActiveSlot {
                    actor: actor.clone(),
                    last_used: crate::virtual_actors::now(),
                }),
            ) {
                Some(Slot::Activating(queue)) => queue,
                _ => Vec::new(),
            };
            // In the order they came; enqueueing does not wait.
            for call in queue {
                call.deliver(&actor);
            }
        }
        if inner.is_stopped() {
            self.deactivate_later(&inner, identity, Reason::Stopping);
            return;
        }
        // A membership change taken in while it activated, which the sweep after it did not
        // see (it moves only what is active), may have given the identity to another member.
        if inner.view_generation.load(Ordering::Acquire) != generation
            && inner.placement.moves_on_change()
            && inner
                .ownership()
                .route(K::KIND, &identity, inner.placement.as_ref())
                != Route::Local
        {
            self.deactivate_later(&inner, identity, Reason::Moved);
            return;
        }
        self.enforce_cap(&inner);
    }

    /// Claims the lease `scope` for an activation of `identity`: the epoch this member was
    /// granted, or the serving member that holds the scope.
    async fn claim(
        &self,
        inner: &Arc<Inner>,
        identity: &Arc<str>,
        scope: &str,
    ) -> Result<Claimed, GrainError> {
        let store_error = |e: rally_state::StoreError| GrainError::Store(e.to_string());
        let mut claim = inner
            .store
            .claim(K::KIND, scope, &inner.owner_key)
            .await
            .map_err(store_error)?;
        let mut attempts = 0;
        let handover_wait = crate::virtual_actors::now() + 2 * inner.config.deactivation_timeout;
        let mut poll = HANDOVER_POLL;
        let mut gone_poll = HANDOVER_POLL;
        loop {
            let (holder, held_epoch) = match claim {
                Claim::Granted(epoch) => return Ok(Claimed::Granted(epoch)),
                Claim::Held { owner, epoch } => (owner, epoch),
                other => return Err(GrainError::Store(format!("unexpected claim {other:?}"))),
            };
            if attempts == CLAIM_ATTEMPTS {
                return Err(GrainError::Store(format!(
                    "the claim did not settle in {CLAIM_ATTEMPTS} attempts"
                )));
            }
            let now = crate::virtual_actors::now();
            let (decision, still_ours) = {
                let mut ownership = inner.ownership();
                let decision = ownership.holder(&holder, now);
                let route = ownership.route(K::KIND, identity, inner.placement.as_ref());
                (decision, route == Route::Local)
            };
            let retry_at = match decision {
                // The previous owner still serves it: with a placement that moves identities,
                // it is about to hand the scope over (it sees the change a moment later, and
                // releases the lease once its last activation in the scope has ended). Wait
                // for that rather than send it messages that would then overtake, or trail,
                // those it hands over; past the wait, it keeps the scope.
                Holder::Forward(_)
                    if still_ours
                        && inner.placement.moves_on_change()
                        && now + poll < handover_wait =>
                {
                    let at = now + poll;
                    poll = (poll * 2).min(HANDOVER_POLL_MAX);
                    at
                }
                Holder::Forward(to) => return Ok(Claimed::HeldBy(to)),
                // Seen down or gone: it may not have stopped yet, so its lease is taken over
                // only at `at`. But a member that left gracefully releases its leases as it
                // stops, often a moment after the others saw it gone (while it hands over
                // what reached it, to this member among others): ask the store again soon,
                // then less and less often, rather than wait the whole margin for a lease
                // already released.
                Holder::WaitUntil(at) => {
                    let next = (now + gone_poll).min(at);
                    gone_poll = (gone_poll * 2).min(GONE_POLL_MAX);
                    if next == at {
                        attempts += 1;
                    }
                    next
                }
                // Gone long enough that it has stopped; or this member's own hold, left by a
                // lease whose release did not reach the store.
                Holder::TakeOver | Holder::Local => {
                    attempts += 1;
                    claim = inner
                        .store
                        .take_over(K::KIND, scope, &inner.owner_key, held_epoch)
                        .await
                        .map_err(store_error)?;
                    continue;
                }
            };
            tokio::time::sleep_until(retry_at.into()).await;
            if inner.is_stopped() {
                return Err(GrainError::Stopped);
            }
            claim = inner
                .store
                .claim(K::KIND, scope, &inner.owner_key)
                .await
                .map_err(store_error)?;
        }
    }

    /// Sends what waited for an activation to the member that holds the identity.
    fn hand_to(&self, inner: &Arc<Inner>, identity: &Arc<str>, to: &MemberId) {
        let queue = match self.slots().remove(identity) {
            Some(Slot::Activating(queue)) => queue,
            Some(other) => {
                // Not ours to take (cannot happen: only the activation task leaves Activating).
                self.slots().insert(Arc::clone(identity), other);
                return;
            }
            None => Vec::new(),
        };
        for call in queue {
            self.counters.forwarded.fetch_add(1, Ordering::Relaxed);
            inner.forward(identity, to, call);
        }
    }

    /// Fails what waited for an activation that did not happen; the identity may activate
    /// again with the next message.
    fn abandon(&self, identity: &Arc<str>, error: GrainError) {
        self.counters.failed.fetch_add(1, Ordering::Relaxed);
        let queue = match self.slots().remove(identity) {
            Some(Slot::Activating(queue)) => queue,
            _ => Vec::new(),
        };
        for call in queue {
            call.fail(error.clone());
        }
    }

    fn deactivate_later(&self, inner: &Arc<Inner>, identity: Arc<str>, reason: Reason) {
        let host = self.this();
        let inner = Arc::clone(inner);
        tokio::spawn(async move { host.deactivate(inner, identity, reason).await });
    }

    /// Lets the messages already handed over finish, stops the actor (its `stopped` hook
    /// runs), releases the identity, then routes what arrived meanwhile anew.
    async fn deactivate(self: Arc<Self>, inner: Arc<Inner>, identity: Arc<str>, reason: Reason) {
        let _permit = if reason == Reason::Moved {
            Some(Arc::clone(&inner.moves).acquire_owned().await)
        } else {
            None
        };
        let active = {
            let mut slots = self.slots();
            match slots.get(&identity) {
                Some(Slot::Active(active)) if reason != Reason::Idle || idle(active, &inner) => {}
                _ => return, // already going, or used again since the sweep looked
            }
            match slots.insert(Arc::clone(&identity), Slot::Deactivating(Vec::new())) {
                Some(Slot::Active(active)) => active,
                _ => unreachable!("checked above under the same lock"),
            }
        };
        let deadline = tokio::time::Instant::now() + inner.config.deactivation_timeout;
        while !active.is_idle() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(IDLE_POLL).await;
        }
        let (sink, stopped) = StopWaiter::new(inner.system.next_id());
        active.actor.watch_with(sink);
        active.actor.stop();
        let _ = tokio::time::timeout_at(deadline, stopped).await;
        if let Route::Remote(next) = inner.route_now(K::KIND, &identity) {
            self.hand_over(&inner, &identity, &next).await;
        }
        self.leave_lease(&inner, &Self::lease_key(&inner, &identity))
            .await;
        self.counters.active.fetch_sub(1, Ordering::Relaxed);
        self.counters.deactivations.fetch_add(1, Ordering::Relaxed);
        if reason == Reason::Moved {
            self.counters.moves.fetch_add(1, Ordering::Relaxed);
        }
        let queue = match self.slots().remove(&identity) {
            Some(Slot::Deactivating(queue)) => queue,
            _ => Vec::new(),
        };
        for call in queue {
            if inner.is_stopped() {
                inner.pass_on(&identity, call);
            } else {
                self.dispatch(&inner, Arc::clone(&identity), call);
            }
        }
    }

    /// Hands what reached this member during a deactivation to `next`, the identity's next
    /// owner, while this member still holds the identity: in the order it came, marked to go
    /// before what reached `next` directly, then the end of the handover, whose answer says
    /// all of it is queued there. Only then is the identity released, so `next` cannot
    /// activate before it has them. Per sender, what reached the previous owner was sent
    /// before what reached the next one (a sender's view moves from one to the other once).
    async fn hand_over(&self, inner: &Arc<Inner>, identity: &Arc<str>, next: &MemberId) {
        let handed = self.hand_queued(inner, identity, next);
        if handed == 0 {
            return;
        }
        let (done, answered) = oneshot::channel();
        let wait = inner.config.deactivation_timeout;
        inner.transport.send(
            next,
            GrainRequest::handover_done(K::KIND, identity, wait),
            Box::new(move |result| {
                let _ = done.send(result);
            }),
        );
        // Unanswered (`next` is gone or slow): released anyway; what was handed over is
        // then `next`'s to route (or its senders' to retry).
        let _ = tokio::time::timeout(wait, answered).await;
        // What came while the end of the handover was on its way.
        self.hand_queued(inner, identity, next);
    }

    /// Forwards the calls queued on a deactivating identity to `next`, marked handed over.
    fn hand_queued(&self, inner: &Arc<Inner>, identity: &Arc<str>, next: &MemberId) -> usize {
        let queue = match self.slots().get_mut(identity) {
            Some(Slot::Deactivating(queue)) => std::mem::take(queue),
            _ => Vec::new(),
        };
        let handed = queue.len();
        for call in queue {
            self.counters.forwarded.fetch_add(1, Ordering::Relaxed);
            inner.forward_as(identity, next, call, Handover::Call);
        }
        handed
    }

    /// Over the cap: deactivate the least recently used idle activations, a batch at a time
    /// so the scan is paid once per many activations.
    fn enforce_cap(&self, inner: &Arc<Inner>) {
        let cap = inner.config.max_active;
        let active = self.counters.active.load(Ordering::Relaxed);
        if active <= cap {
            return;
        }
        let batch = (active - cap).max(cap / 32).max(1);
        let mut idle: Vec<(Instant, Arc<str>)> = self
            .slots()
            .iter()
            .filter_map(|(id, slot)| match slot {
                Slot::Active(a) if a.is_idle() => Some((a.last_used, Arc::clone(id))),
                _ => None,
            })
            .collect();
        if idle.len() > batch {
            idle.select_nth_unstable_by_key(batch, |(used, _)| *used);
            idle.truncate(batch);
        }
        for (_, identity) in idle {
            self.deactivate_later(inner, identity, Reason::OverCap);
        }
    }
}

fn idle<K: VirtualActor>(active: &ActiveSlot<K>, inner: &Inner) -> bool {
    active.is_idle()
        && crate::virtual_actors::now().saturating_duration_since(active.last_used)
            >= inner.config.idle_timeout
}

impl<K: VirtualActor> KindHost for Host<K> {
    fn receive(&self, inner: &Arc<Inner>, request: GrainRequest, reply: WireReply) {
        let envelope = Envelope {
            reply,
            hops: request.hops,
            deadline: request.deadline(),
            handed_over: request.handover == Handover::Call,
        };
        match self
            .table
            .decode(&request.manifest, &request.payload, envelope)
        {
            Ok(call) => self.dispatch(inner, request.identity, call),
            Err((error, envelope)) => (envelope.reply)(Err(error)),
        }
    }

    fn sweep(&self, inner: &Arc<Inner>, now: Instant, moved: bool) {
        let mut idle_ones = Vec::new();
        let mut moving = Vec::new();
        {
            let slots = self.slots();
            let ownership = inner.ownership();
            for (identity, slot) in slots.iter() {
                let Slot::Active(active) = slot else { continue };
                if moved
                    && inner.placement.moves_on_change()
                    && ownership.route(K::KIND, identity, inner.placement.as_ref()) != Route::Local
                {
                    moving.push(Arc::clone(identity));
                } else if active.is_idle()
                    && now.duration_since(active.last_used) >= inner.config.idle_timeout
                {
                    idle_ones.push(Arc::clone(identity));
                }
            }
        }
        for identity in idle_ones {
            self.deactivate_later(inner, identity, Reason::Idle);
        }
        // A scope is released, and its next owner may claim it, once its last activation
        // here has ended: started scope by scope (the moves' permits go to the waiting tasks in
        // the order they first wait, which tokio does not promise to be the order spawned),
        // so the first scopes tend to reach their next owner while the last are still moving.
        moving.sort_by_cached_key(|identity| inner.placement.scope(K::KIND, identity));
        for identity in moving {
            self.deactivate_later(inner, identity, Reason::Moved);
        }
    }

    fn deactivate_all(&self, inner: &Arc<Inner>) {
        let mut waiting = Vec::new();
        let identities: Vec<Arc<str>> = {
            let mut slots = self.slots();
            // Calls still waiting for an activation go to whoever hosts the identity now:
            // this member hosts nothing more.
            for (identity, slot) in slots.iter_mut() {
                if let Slot::Activating(queue) | Slot::Parked(queue, _) = slot {
                    waiting.extend(queue.drain(..).map(|call| (Arc::clone(identity), call)));
                }
            }
            slots.retain(|_, slot| !matches!(slot, Slot::Parked(..)));
            self.parked.store(0, Ordering::Relaxed);
            slots
                .iter()
                .filter(|(_, slot)| matches!(slot, Slot::Active(_)))
                .map(|(id, _)| Arc::clone(id))
                .collect()
        };
        for (identity, call) in waiting {
            inner.pass_on(&identity, call);
        }
        for identity in identities {
            self.deactivate_later(inner, identity, Reason::Stopping);
        }
    }

    fn stats(&self) -> KindStats {
        let c = &self.counters;
        KindStats {
            kind: K::KIND,
            active: c.active.load(Ordering::Relaxed),
            leases: self.leases().held(),
            activations: c.activations.load(Ordering::Relaxed),
            deactivations: c.deactivations.load(Ordering::Relaxed),
            failed_activations: c.failed.load(Ordering::Relaxed),
            moves: c.moves.load(Ordering::Relaxed),
            forwarded: c.forwarded.load(Ordering::Relaxed),
        }
    }

    fn slot_count(&self) -> usize {
        self.slots().len()
    }

    fn unpark(&self, inner: &Arc<Inner>, view_changed: bool) {
        Host::unpark(self, inner, view_changed);
    }

    fn count_forwarded(&self) {
        self.counters.forwarded.fetch_add(1, Ordering::Relaxed);
    }

    fn as_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
}

/// Resolves when the watched actor has stopped (its `stopped` hook has run).
struct StopWaiter {
    id: ActorId,
    done: Mutex<Option<oneshot::Sender<()>>>,
}

impl StopWaiter {
    fn new(id: ActorId) -> (Arc<Self>, oneshot::Receiver<()>) {
        let (done, wait) = oneshot::channel();
        (
            Arc::new(Self {
                id,
                done: Mutex::new(Some(done)),
            }),
            wait,
        )
    }
}

impl TerminationSink for StopWaiter {
    fn watcher(&self) -> ActorId {
        self.id
    }

    fn notify(&self, _: Terminated) {
        if let Some(done) = self
            .done
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = done.send(());
        }
    }
}

/// Polls `future` once on this thread and spawns what is left of it as a task only if it has
/// to wait. An activation whose claim and hook complete at once (a store that runs a lone
/// claim on its caller's thread, an in-memory one; a hook that does not wait) then costs no
/// task of its own. As a task it was queued behind the current one, and the runtime's other
/// worker, woken to take it, ran the activation and the first message's handling on another
/// thread, a cross-thread wake-up on the path of the first message.
fn run_or_spawn(future: impl Future<Output = ()> + Send + 'static) {
    let mut future = Box::pin(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    // Pending: the spawned task polls it again at once, and that poll registers its waker.
    if future.as_mut().poll(&mut cx).is_pending() {
        tokio::spawn(future);
    }
}

#[cfg(test)]
mod relay_tests {
    use rally_actor::{Actor, ActorResult, Context, Handler, Message};
    use rally_remote::{Incarnation, RemoteMessage};
    use serde::{Deserialize, Serialize};

    use super::*;
    use crate::ClusterConfig;
    use crate::MemberEvent;
    use crate::virtual_actors::GrainNetwork;
    use crate::virtual_actors::placement::Hashed;

    struct Echo;
    impl Actor for Echo {}
    impl VirtualActor for Echo {
        const KIND: &'static str = "echo";
        async fn activate(_: Activation) -> ActorResult<Self> {
            Ok(Echo)
        }
        fn messages(table: &mut GrainMessages<Self>) {
            table.add::<Ping>();
        }
    }

    #[derive(Serialize, Deserialize)]
    struct Ping;
    impl Message for Ping {
        type Reply = ();
    }
    impl RemoteMessage for Ping {
        const MANIFEST: &'static str = "test.echo.Ping";
    }
    impl Handler<Ping> for Echo {
        async fn handle(&mut self, _: Ping, _: &mut Context<Self>) -> ActorResult<()> {
            Ok(())
        }
    }

    /// A slot stays 48 bytes, so an entry of the host's table (the identity and the slot)
    /// stays 64: most of what the table holds per activation (see `slot_table`).
    #[test]
    fn a_slot_table_entry_stays_64_bytes() {
        assert!(std::mem::size_of::<Slot<Echo>>() <= 48);
        assert!(std::mem::size_of::<Option<(Arc<str>, Slot<Echo>)>>() <= 64);
    }

    /// An ask of `Ping` for `identity` of `echo` that took one hop already (from a client).
    fn relayed_ping(identity: &str) -> GrainRequest {
        GrainRequest {
            kind: "echo".into(),
            identity: identity.into(),
            manifest: Ping::MANIFEST.into(),
            payload: postcard::to_allocvec(&Ping).unwrap(),
            hops: 1,
            wait_ms: Some(60_000),
            handover: Handover::No,
        }
    }

    fn member(port: u16) -> MemberId {
        MemberId::new(
            format!("rally://relay@mem:{port}").parse().unwrap(),
            Incarnation(1),
            u64::from(port),
        )
        .with_kinds(["echo"])
    }

    /// A member hosting `echo` on `network`, seeing `members` up.
    fn runtime(local: &MemberId, members: &[&MemberId], network: &GrainNetwork) -> Arc<Inner> {
        let config = VirtualActorsConfig::default();
        let mut ownership = Ownership::new(
            local.clone(),
            &ClusterConfig::default(),
            config.deactivation_timeout,
        );
        for m in members {
            ownership.apply(&MemberEvent::Up((*m).clone()), crate::virtual_actors::now());
        }
        let host: Arc<dyn KindHost> = Host::<Echo>::new();
        let inner = Arc::new(Inner::new(
            local.clone(),
            ActorSystem::new("relay"),
            Arc::new(rally_state::MemoryStore::new()),
            Arc::new(Hashed),
            config,
            ownership,
            HashMap::from([(Echo::KIND, host)]),
            Transport::Memory(network.clone()),
        ));
        inner.attach();
        inner
    }

    /// An ask B passed on for another member, refused by its owner A (A's runtime stopped
    /// while B still sees A up), waits at B for a view change; a view change starts routing
    /// it again (taking it out of the waiting list) just as B stops. B's `drained` (what
    /// `shutdown` waits on) must not resolve until that ask has its answer back through B.
    /// (Before: the relayed ask was not counted once it waited, so `drained` resolved while
    /// the ask was out of the list and not yet answered; a node leaving then took the
    /// answer's way back with it.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_relayed_ask_waiting_for_a_view_change_keeps_a_stopping_member_from_draining() {
        let network = GrainNetwork::new();
        let (a, b) = (member(1), member(2));
        let hosts = [a.clone(), b.clone()];
        let identity = (0..)
            .map(|i| format!("relay-{i}"))
            .find(|id| Hashed.place("echo", id, &hosts, &hosts[0]) == Some(&a))
            .unwrap();
        // A's runtime is gone (the network answers `Stopped` for it); B still sees A up.
        drop(runtime(&a, &[&a, &b], &network));
        let inner_b = runtime(&b, &[&a, &b], &network);
        assert_eq!(
            inner_b.ownership().route("echo", &identity, &Hashed),
            Route::Remote(a.clone())
        );

        // An ask that took one hop already (from a client to B).
        let request = relayed_ping(&identity);
        let (answer_to, answer) = oneshot::channel();
        inner_b.receive(
            request,
            Box::new(move |result| {
                let _ = answer_to.send(result);
            }),
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        while inner_b.waiting().is_empty() {
            assert!(
                Instant::now() < deadline,
                "the refused ask never waited at B"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(
            inner_b.relaying.load(Ordering::Acquire),
            1,
            "a relayed ask waiting for a view change is still being relayed"
        );

        // A view change takes the waiting ask out of the list to route it again (what
        // `resume_waiting(true)` does before running it, outside the lock)...
        let taken = std::mem::take(&mut *inner_b.waiting());
        assert_eq!(taken.len(), 1);
        // ...while B stops and waits to be drained.
        inner_b.stop();
        assert!(
            tokio::time::timeout(Duration::ZERO, inner_b.drained())
                .await
                .is_err(),
            "B drained while an ask it passed on was unanswered"
        );
        for waiting in taken {
            (waiting.resume)(&inner_b, true);
        }
        // B stopped: the ask is answered `Stopped` through B (its sender routes it anew).
        assert!(matches!(answer.await, Ok(Err(GrainError::Stopped))));
        tokio::time::timeout(Duration::from_secs(60), inner_b.drained())
            .await
            .expect("B drains once the ask is answered");
    }

    /// A member that stopped hosting keeps answering for `QUIET_AFTER_STOP` after it stopped
    /// and after each request it refused: `drained` (what `shutdown` waits on before the node
    /// may close its connections) resolves only once requests stopped coming. Before, it
    /// resolved as soon as nothing was active, and a request sent just before its sender saw
    /// the member leave reached a node that had closed its connections: `OutcomeUnknown`.
    #[tokio::test(start_paused = true)]
    async fn a_stopped_member_drains_only_once_requests_stopped_coming() {
        let network = GrainNetwork::new();
        let a = member(1);
        let inner = runtime(&a, &[&a], &network);
        let pending = |inner: &Arc<Inner>| {
            let mut drained = std::pin::pin!(inner.drained());
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            drained.as_mut().poll(&mut cx).is_pending()
        };
        inner.stop();
        assert!(pending(&inner), "just stopped");
        tokio::time::advance(QUIET_AFTER_STOP - Duration::from_millis(1)).await;
        assert!(pending(&inner), "quiet for less than QUIET_AFTER_STOP");
        // A late request: refused (`Stopped`, so its sender routes it anew), and the quiet
        // starts again.
        let (answer_to, answer) = oneshot::channel();
        inner.receive(
            relayed_ping("late"),
            Box::new(move |result| {
                let _ = answer_to.send(result);
            }),
        );
        assert!(matches!(answer.await, Ok(Err(GrainError::Stopped))));
        tokio::time::advance(QUIET_AFTER_STOP - Duration::from_millis(1)).await;
        assert!(
            pending(&inner),
            "a request came in less than QUIET_AFTER_STOP ago"
        );
        tokio::time::advance(Duration::from_millis(2)).await;
        assert!(!pending(&inner), "quiet for QUIET_AFTER_STOP: drained");
    }
}
