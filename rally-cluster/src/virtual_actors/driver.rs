//! The driver of one kind's core on tokio: takes inputs to the core under its lock, then does
//! the effects the core asked for outside it (activation hooks, deliveries to lives, stops,
//! sends to other members, store operations), and runs the core's timers. No decision is made
//! here: every one is the core's (`core.rs`).

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use rally_actor::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use rally_actor::{
    ActorRef, CallFilter, DeadLetterReason, EntryFilters, Handler, Props, RequestContext,
};
use rally_remote::{
    GrainAnswer, GrainAsk, GrainFlags, GrainOutcome, GrainRequest, GrainSend, Handled,
    RemoteMessage, UniqueAddress,
};
use rally_state::Fence;
use tokio::sync::{Notify, oneshot};

use super::call::{BoxCall, Completion, Done, Held, TypedCall, typed_answer};
use super::core::{CorePage, Effect, KindCore, LifeId, StoreAnswer, StoreRequest, Types};
use super::error::AskError;
use super::kind::{Activation, GrainMessages, Incoming, LifeState, VirtualActor};
use super::outcome::Refusal;
use super::ownership::Route;
use super::runtime::{KindStats, Shared};
use super::transport::{InboundReply, Peer};
use crate::member::MemberEvent;

/// The driver's types, for the core.
pub(crate) struct Live<K>(PhantomData<fn() -> K>);

impl<K: VirtualActor> Types for Live<K> {
    type Call = BoxCall<K>;
    type Actor = ActorRef<K>;
}

/// An instant so far ahead that it stands for "never" (an ask with an unbounded timeout).
pub(crate) const FAR: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// One kind on this member: its core, and how its effects are done.
pub(crate) struct KindDriver<K: VirtualActor> {
    me: Weak<Self>,
    core: Mutex<KindCore<Live<K>>>,
    shared: Arc<Shared>,
    messages: GrainMessages<K>,
    hosting: bool,
    /// Wakes the timer task when the earliest timer moved earlier.
    timer: Arc<Notify>,
    /// Wakes those waiting for the kind to be drained.
    drained: Notify,
    /// Asks passed on for another member whose answers have not come back through here.
    relays: AtomicUsize,
    /// Member events taken in: a sender's cached route is good while this holds.
    generation: AtomicU64,
    /// Tells refused so far (dead letters): the first is logged as a warning, the rest at
    /// debug level, so that a loop of tells to a kind nobody hosts does not flood the log.
    dead_tells: AtomicU64,
    /// The kind's call filters (`VirtualActorsBuilder::call_filter`), looked up once here
    /// rather than at every activation.
    filters: Vec<Arc<dyn CallFilter>>,
}

impl<K: VirtualActor> KindDriver<K> {
    /// A driver for `core`, its timer task started.
    pub(crate) fn start(core: KindCore<Live<K>>, shared: Arc<Shared>, hosting: bool) -> Arc<Self> {
        let filters = shared
            .kind_filters
            .get(K::KIND)
            .cloned()
            .unwrap_or_default();
        let driver = Arc::new_cyclic(|me| Self {
            me: me.clone(),
            core: Mutex::new(core),
            shared,
            filters,
            messages: GrainMessages::of(),
            hosting,
            timer: Arc::new(Notify::new()),
            drained: Notify::new(),
            relays: AtomicUsize::new(0),
            generation: AtomicU64::new(0),
            dead_tells: AtomicU64::new(0),
        });
        spawn_timer(Arc::downgrade(&driver));
        driver
    }

    /// The call filters a send to this kind from code outside any actor passes: the system's.
    pub(crate) fn entry_filters(&self) -> &EntryFilters {
        self.shared.system.entry_filters()
    }

    /// Decisions are plain data updates: a poisoned lock is still consistent.
    fn core(&self) -> MutexGuard<'_, KindCore<Live<K>>> {
        self.core.lock()
    }

    /// Gives the core one input, then does what it asked for, outside its lock.
    fn input(&self, f: impl FnOnce(&mut KindCore<Live<K>>, Instant)) {
        let mut effects = Vec::new();
        let (moved, drained) = {
            let mut core = self.core();
            let now = super::now();
            f(&mut core, now);
            core.take_effects(&mut effects);
            (core.timer_moved(), core.is_drained(now))
        };
        if moved {
            self.timer.notify_one();
        }
        for effect in effects {
            self.effect(effect);
        }
        if drained && self.relays.load(Ordering::Acquire) == 0 {
            self.drained.notify_waiters();
        }
    }

    /// A call from a sender on this member (or passed on to this kind's core).
    pub(crate) fn request(&self, identity: Arc<str>, call: BoxCall<K>) {
        self.input(|core, now| core.request(identity, call, now));
    }

    /// A member event.
    pub(crate) fn member_event(&self, event: &MemberEvent) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.input(|core, now| core.member_event(event, now));
    }

    /// This member stops hosting.
    pub(crate) fn stop(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.input(|core, now| core.stop(now));
    }

    /// Whether this member hosts the kind (else it only sends to it).
    pub(crate) fn hosting(&self) -> bool {
        self.hosting
    }

    /// Whether this member's runtime has stopped.
    pub(crate) fn is_stopped(&self) -> bool {
        self.core().is_stopped()
    }

    /// Whether this member stopped hosting the kind and nothing is left of it here.
    pub(crate) fn is_drained(&self) -> bool {
        self.relays.load(Ordering::Acquire) == 0 && self.core().is_drained(super::now())
    }

    /// Resolves once [`is_drained`](Self::is_drained).
    pub(crate) async fn drained(&self) {
        loop {
            let notified = self.drained.notified();
            if self.is_drained() {
                return;
            }
            // The quiet period ends on a timer, which is an input: it notifies.
            notified.await;
        }
    }

    pub(crate) fn stats(&self) -> KindStats {
        self.core().stats()
    }

    /// A page of the kind's active identities here (a query: no effect).
    pub(crate) fn active(&self, from: u32, limit: usize) -> CorePage {
        self.core().active(from, limit, super::now())
    }

    /// A request from another member.
    pub(crate) fn receive(
        &self,
        from: &UniqueAddress,
        request: GrainRequest<'_>,
        reply: Option<InboundReply>,
    ) {
        if request.flags.has(GrainFlags::HANDOVER_DONE) {
            // The calls handed over before it arrived first and are queued: arrival is the
            // answer.
            if let Some(reply) = reply {
                reply.send(GrainOutcome::OK, |_| Ok(()));
            }
            return;
        }
        let Some(manifest) = request.manifest else {
            if let Some(reply) = reply {
                let (outcome, text) =
                    Refusal::Undecodable("a request without a message".into()).to_wire();
                reply.send_text(outcome, &text);
            }
            return;
        };
        let now = super::now();
        let incoming = Incoming {
            reply,
            hops: request.hops,
            deadline: request.wait.map(|wait| now + wait),
            handed_over: request.flags.has(GrainFlags::HANDED_OVER),
            context: request.context.cloned(),
        };
        match self.messages.decode(manifest, request.payload, incoming) {
            Ok(call) => {
                let identity = Arc::from(request.identity);
                let sender = (&from.address, from.incarnation);
                self.input(|core, now| core.received(identity, call, sender, now));
            }
            Err((refusal, incoming)) => {
                if let Some(reply) = incoming.reply {
                    let (outcome, text) = refusal.to_wire();
                    reply.send_text(outcome, &text);
                }
            }
        }
    }

    /// Sends `msg` to `identity` and waits at most `timeout` for the reply. `route` is the
    /// sender's cache of where the last direct ask went (see [`direct_peer`](Self::direct_peer)).
    pub(crate) async fn ask<M>(
        &self,
        identity: &Arc<str>,
        msg: M,
        timeout: Duration,
        route: &Mutex<Option<(u64, Peer)>>,
        context: Option<RequestContext>,
    ) -> Result<M::Reply, AskError>
    where
        M: RemoteMessage,
        K: Handler<M>,
    {
        if timeout.is_zero() {
            return Err(AskError::InvalidTimeout);
        }
        let start = tokio::time::Instant::now();
        // Any timeout works: one past what an instant can hold waits "forever".
        let until = start.checked_add(timeout).unwrap_or(start + FAR);
        if let Some(peer) = self.direct_peer(identity, route) {
            return self
                .ask_direct(&peer, identity, msg, until, timeout, context)
                .await;
        }
        let (call, (answer, held)) = TypedCall::ask(K::KIND, msg, until.into_std());
        let call = call.in_context(context);
        self.request(Arc::clone(identity), Box::new(call));
        self.answer(answer, &held, identity, until, timeout).await
    }

    /// A tell that was refused (it has nobody to answer): counted in the actor system's dead
    /// letters, under the recipient `grain:<kind>`, and logged (a warning for the first of
    /// this kind on this member).
    fn dead_letter(&self, manifest: &'static str, refusal: &Refusal) {
        let recipient: Arc<str> = Arc::from(format!("grain:{}", K::KIND));
        self.shared.system.dead_letters().record(
            &recipient,
            manifest,
            DeadLetterReason::Unreachable,
        );
        if self.dead_tells.fetch_add(1, Ordering::Relaxed) == 0 {
            tracing::warn!(kind = K::KIND, message = manifest, %refusal, "a tell to a virtual actor was not delivered (a dead letter; later ones of this kind are logged at debug level)");
        } else {
            tracing::debug!(kind = K::KIND, message = manifest, %refusal, "a tell to a virtual actor was not delivered (a dead letter)");
        }
    }

    /// A tell from a sender on this member.
    pub(crate) fn tell<M>(&self, identity: &Arc<str>, msg: M, context: Option<RequestContext>)
    where
        M: RemoteMessage,
        K: Handler<M>,
    {
        self.request(
            Arc::clone(identity),
            Box::new(TypedCall::tell(K::KIND, msg).in_context(context)),
        );
    }

    /// The member an ask for `identity` goes to straight from its asker (one hop, the answer
    /// straight back to the asker's task): the owner by this member's view, kept in `route`
    /// with the view it was found by, while no member event came since. `None` when this
    /// member hosts the kind (its own core decides) or no other member owns the identity.
    fn direct_peer(&self, identity: &str, route: &Mutex<Option<(u64, Peer)>>) -> Option<Peer> {
        if self.hosting {
            return None;
        }
        let generation = self.generation.load(Ordering::Acquire);
        if let Some((seen, peer)) = &*route.lock()
            && *seen == generation
        {
            return Some(peer.clone());
        }
        let to = {
            let core = self.core();
            if core.is_stopped() {
                return None;
            }
            match core.route(identity) {
                Route::Remote(to) => to,
                Route::Local | Route::NoHost => return None,
            }
        };
        let peer = self.shared.transport.peer(&self.shared.local, &to);
        *route.lock() = Some((generation, peer.clone()));
        Some(peer)
    }

    /// An ask sent by this task to `peer`, its answer decoded where it arrives and awaited here.
    /// One that `peer` refused in a way that says no activation received it goes to this
    /// member's core to be sent again, within the same deadline.
    async fn ask_direct<M>(
        &self,
        peer: &Peer,
        identity: &Arc<str>,
        msg: M,
        until: tokio::time::Instant,
        timeout: Duration,
        context: Option<RequestContext>,
    ) -> Result<M::Reply, AskError>
    where
        M: RemoteMessage,
        K: Handler<M>,
    {
        let (to, answer) = oneshot::channel();
        let request = GrainSend {
            kind: K::KIND,
            manifest: Some(M::MANIFEST),
            identity,
            hops: 1,
            wait: Some(until.saturating_duration_since(tokio::time::Instant::now())),
            flags: GrainFlags::default(),
            context: context.as_ref(),
        };
        peer.ask(
            &request,
            Box::new(DirectAsk::<M> {
                msg,
                to,
                kind: K::KIND,
            }),
        );
        let (msg, refusal) = match tokio::time::timeout_at(until, answer).await {
            Err(_) => return Err(AskError::Timeout(timeout)),
            Ok(Err(_)) => {
                return Err(AskError::OutcomeUnknown(
                    "the answer was dropped on its way".into(),
                ));
            }
            Ok(Ok(Direct::Done(result))) => return result,
            Ok(Ok(Direct::Again(msg, refusal))) => (msg, refusal),
        };
        if matches!(refusal, Refusal::Unreachable(_)) {
            self.shared.transport.forget(peer.member());
        }
        let (call, (answer, held)) = TypedCall::ask(K::KIND, msg, until.into_std());
        let mut call = call.in_context(context);
        // It took the hop the refusal takes back.
        call.hops = 1;
        let from = peer.member().clone();
        let identity = Arc::clone(identity);
        let ident = Arc::clone(&identity);
        self.input(move |core, now| core.refused(ident, Box::new(call), &from, refusal, now));
        self.answer(answer, &held, &identity, until, timeout).await
    }

    /// Waits for a call's answer until `until`. A call still held on this member then was not
    /// handled: it is dropped, and the error says so.
    async fn answer<R>(
        &self,
        answer: oneshot::Receiver<Result<R, AskError>>,
        held: &Held,
        identity: &str,
        until: tokio::time::Instant,
        timeout: Duration,
    ) -> Result<R, AskError> {
        match tokio::time::timeout_at(until, answer).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(AskError::OutcomeUnknown(
                "the answer was dropped on its way".into(),
            )),
            Err(_) if held.abandon() => {
                let no_host = self.core().route(identity) == Route::NoHost;
                Err(if no_host {
                    AskError::NoHost(K::KIND.to_owned())
                } else {
                    AskError::Expired(format!("it waited on this member for {timeout:?}"))
                })
            }
            Err(_) => Err(AskError::Timeout(timeout)),
        }
    }

    /// Does one effect.
    fn effect(&self, effect: Effect<Live<K>>) {
        match effect {
            Effect::Activate {
                identity,
                life,
                scope,
                epoch,
            } => self.activate(
                identity,
                life,
                scope,
                Fence {
                    epoch,
                    life: life.0,
                },
            ),
            Effect::Deliver {
                identity,
                life,
                actor,
                call,
            } => {
                if !call.leave() {
                    // Its caller on this member gave up while it waited: dropped.
                    return self.input(|core, now| core.completed(&identity, life, now));
                }
                let done = Done::new(self.completion(), Arc::clone(&identity), life);
                if let Err(call) = call.deliver(&actor, done) {
                    self.input(|core, now| core.undelivered(&identity, life, call, now));
                }
            }
            Effect::Stop { actor, .. } => actor.stop(),
            Effect::Forward {
                identity,
                to,
                mut call,
                handover,
            } => {
                if !call.leave() {
                    return;
                }
                call.set_handed_over(handover);
                self.forward(identity, &to, call);
            }
            Effect::HandoverDone {
                identity,
                to,
                round,
            } => {
                let peer = self.shared.transport.peer(&self.shared.local, &to);
                let request = GrainSend {
                    kind: K::KIND,
                    manifest: None,
                    identity: &identity,
                    hops: 1,
                    wait: Some(self.shared.config.deactivation_timeout),
                    flags: GrainFlags(GrainFlags::HANDOVER_DONE),
                    context: None,
                };
                peer.ask(
                    &request,
                    Box::new(HandoverAsk {
                        driver: self.me.clone(),
                        identity: Arc::clone(&identity),
                        round,
                    }),
                );
            }
            Effect::Refuse { call, refusal } => {
                if call.deadline().is_none() {
                    self.dead_letter(call.manifest(), &refusal);
                }
                call.refuse(refusal);
            }
            Effect::Store { op, request } => {
                let store = Arc::clone(&self.shared.store);
                let owner = Arc::clone(&self.shared.owner_key);
                let driver = self.me.clone();
                run_or_spawn(async move {
                    let answer = match request {
                        StoreRequest::Claim { scope } => {
                            StoreAnswer::Claim(store.claim(K::KIND, &scope, &owner).await)
                        }
                        StoreRequest::TakeOver { scope, from } => {
                            StoreAnswer::Claim(store.take_over(K::KIND, &scope, &owner, from).await)
                        }
                        StoreRequest::Release { scope, epoch } => {
                            StoreAnswer::Done(store.release(K::KIND, &scope, epoch).await)
                        }
                        StoreRequest::Fence {
                            scope,
                            epoch,
                            life,
                            identity,
                        } => StoreAnswer::Done(
                            store
                                .fence(
                                    K::KIND,
                                    &scope,
                                    Fence {
                                        epoch,
                                        life: life.0,
                                    },
                                    &identity,
                                )
                                .await,
                        ),
                    };
                    if let Some(driver) = driver.upgrade() {
                        driver.input(|core, now| core.stored(op, answer, now));
                    }
                });
            }
        }
    }

    /// Sends `call` to `to`: an ask's answer comes back here (to be sent again if it was not
    /// handled, else to its caller), a tell's does not.
    fn forward(&self, identity: Arc<str>, to: &crate::member::MemberId, call: BoxCall<K>) {
        let peer = self.shared.transport.peer(&self.shared.local, to);
        let mut flags = GrainFlags::default();
        if call.handed_over() {
            flags.0 |= GrainFlags::HANDED_OVER;
        }
        let request = GrainSend {
            kind: K::KIND,
            manifest: Some(call.manifest()),
            identity: &identity,
            hops: call.hops(),
            wait: call
                .deadline()
                .map(|deadline| deadline.saturating_duration_since(super::now())),
            flags,
            context: None,
        };
        // The context is cloned (a reference count) only when there is one: the request
        // borrows it while the call moves into the ask.
        let context = call.context().cloned();
        let request = GrainSend {
            context: context.as_ref(),
            ..request
        };
        if call.deadline().is_none() {
            if let Err(why) = peer.tell(&request, |buf| call.encode(buf)) {
                tracing::debug!(kind = K::KIND, %identity, %why, "a tell was not sent");
            }
            return;
        }
        // An ask that reached this member from another (it took a hop already) is answered
        // through it: a leaving member waits for it (see `drained`).
        let relay = (call.hops() > 1).then(|| Relay::new(self.me.clone(), &self.relays));
        let forwarded = Forwarded {
            driver: self.me.clone(),
            identity: Arc::clone(&identity),
            to: to.clone(),
            call: Some(call),
            relay,
        };
        peer.ask(&request, Box::new(forwarded));
    }

    fn completion(&self) -> Weak<dyn Completion> {
        let me: Weak<dyn Completion> = self.me.clone();
        me
    }

    /// Runs the activation hook of `life` and spawns its actor, then tells the core; the life
    /// is watched from then on, and over once its actor stopped and its saves are done.
    fn activate(&self, identity: Arc<str>, life: LifeId, scope: Arc<str>, fence: Fence) {
        let state = Arc::new(LifeState::new(
            self.shared.system.next_id(),
            self.completion(),
            Arc::clone(&identity),
            life,
        ));
        let activation = Activation::new(
            K::KIND,
            Arc::clone(&self.shared.owner_key),
            Arc::clone(&identity),
            scope,
            fence,
            Arc::clone(&self.shared.store),
            Arc::clone(&state),
        );
        let driver = self.me.clone();
        let system = self.shared.system.clone();
        // Cloned only for a kind that has filters (an empty Vec allocates nothing).
        let filters = self.filters.clone();
        run_or_spawn(async move {
            // Polled here (a task of its own cost a spawn and a wake-up per activation); a
            // panicking hook is caught, not a dead runtime.
            let built = rally_actor::CatchPanic::new(K::activate(activation)).await;
            // Whatever stops the actor (a deactivation, a failure past the restart limit, its
            // own stop), the core hears once it stopped and its saves are done: the watcher is
            // fixed at spawn (a watch afterwards cost each life a message, a wake-up and a
            // watcher table), and the hold keeps that after the core hears it started.
            let started = state.hold();
            let result = match built {
                Ok(Ok(actor)) => {
                    let props = filters.into_iter().fold(
                        Props::new(actor)
                            .watched_by(Arc::clone(&state) as _)
                            .as_grain(K::KIND, Arc::clone(&identity)),
                        Props::call_filter,
                    );
                    system.spawn(props).map_err(|e| e.to_string())
                }
                Ok(Err(e)) => Err(e.to_string()),
                Err(panic) => Err(format!("the activation hook panicked: {panic}")),
            };
            let Some(driver) = driver.upgrade() else {
                if let Ok(actor) = result {
                    actor.stop();
                }
                return;
            };
            match result {
                Ok(actor) => {
                    driver.input(|core, now| core.activated(&identity, life, Ok(actor), now));
                    drop(started);
                }
                Err(why) => {
                    // A handle the hook leaked can never save.
                    state.refuse_saves();
                    drop(started);
                    driver.input(|core, now| core.activated(&identity, life, Err(why), now));
                }
            }
        });
    }
}

impl<K: VirtualActor> Completion for KindDriver<K> {
    fn completed(&self, identity: &Arc<str>, life: LifeId) {
        self.input(|core, now| core.completed(identity, life, now));
    }

    fn ended(&self, identity: &Arc<str>, life: LifeId) {
        self.input(|core, now| core.ended(identity, life, now));
    }
}

/// Runs a kind's timers: sleeps until the core's earliest, or until woken because an earlier
/// one was armed.
fn spawn_timer<K: VirtualActor>(driver: Weak<KindDriver<K>>) {
    let Some(timer) = driver.upgrade().map(|d| Arc::clone(&d.timer)) else {
        return;
    };
    tokio::spawn(async move {
        loop {
            let notified = timer.notified();
            let Some(strong) = driver.upgrade() else {
                return;
            };
            let next = strong.core().poll_timeout();
            drop(strong);
            let far = tokio::time::Instant::now() + FAR;
            let at = next.map_or(far, tokio::time::Instant::from_std);
            tokio::select! {
                () = tokio::time::sleep_until(at) => {}
                () = notified => continue,
            }
            let Some(strong) = driver.upgrade() else {
                return;
            };
            strong.input(|core, now| core.handle_timeout(now));
        }
    });
}

/// One ask passed on for another member, counted until its answer has come back through this
/// member (or its wait ended).
struct Relay<K: VirtualActor>(Weak<KindDriver<K>>);

impl<K: VirtualActor> Relay<K> {
    fn new(driver: Weak<KindDriver<K>>, relays: &AtomicUsize) -> Self {
        relays.fetch_add(1, Ordering::AcqRel);
        Self(driver)
    }
}

impl<K: VirtualActor> Drop for Relay<K> {
    fn drop(&mut self) {
        if let Some(driver) = self.0.upgrade()
            && driver.relays.fetch_sub(1, Ordering::AcqRel) == 1
            && driver.is_drained()
        {
            driver.drained.notify_waiters();
        }
    }
}

/// A call this member sent to another member; its answer comes back here.
struct Forwarded<K: VirtualActor> {
    driver: Weak<KindDriver<K>>,
    identity: Arc<str>,
    to: crate::member::MemberId,
    call: Option<BoxCall<K>>,
    relay: Option<Relay<K>>,
}

impl<K: VirtualActor> GrainAsk for Forwarded<K> {
    fn encode(&self, buf: &mut BytesMut) -> Result<(), String> {
        self.call.as_ref().map_or(Ok(()), |call| call.encode(buf))
    }

    fn answer(mut self: Box<Self>, answer: GrainAnswer<'_>) {
        let Some(call) = self.call.take() else {
            return;
        };
        let refusal = match answer {
            GrainAnswer::Replied { outcome, body } if outcome.handled() == Handled::No => {
                Some(Refusal::from_wire(outcome, body))
            }
            GrainAnswer::NotSent(why) => Some(Refusal::Unreachable(why.to_owned())),
            _ => None,
        };
        match (refusal, self.driver.upgrade()) {
            // Not handled: the core decides whether it goes again.
            (Some(refusal), Some(driver)) => {
                if matches!(refusal, Refusal::Unreachable(_)) {
                    driver.shared.transport.forget(&self.to);
                }
                call.back();
                let (identity, to) = (Arc::clone(&self.identity), self.to.clone());
                driver.input(move |core, now| core.refused(identity, call, &to, refusal, now));
            }
            _ => call.answer(answer),
        }
        drop(self.relay.take());
    }

    fn is_abandoned(&self) -> bool {
        self.call
            .as_ref()
            .and_then(|call| call.deadline())
            .is_some_and(|deadline| super::now() >= deadline)
    }
}

/// The end of a handover; its answer (any) confirms it.
struct HandoverAsk<K: VirtualActor> {
    driver: Weak<KindDriver<K>>,
    identity: Arc<str>,
    round: u64,
}

impl<K: VirtualActor> GrainAsk for HandoverAsk<K> {
    fn encode(&self, _: &mut BytesMut) -> Result<(), String> {
        Ok(())
    }

    fn answer(self: Box<Self>, _: GrainAnswer<'_>) {
        if let Some(driver) = self.driver.upgrade() {
            let (identity, round) = (self.identity, self.round);
            driver.input(|core, now| core.handover_acked(&identity, round, now));
        }
    }
}

/// What a direct ask's task hears: the result, or its message back to be sent again.
enum Direct<M: RemoteMessage> {
    Done(Result<M::Reply, AskError>),
    Again(M, Refusal),
}

/// An ask sent straight from its asker's task; its answer is decoded where it arrives.
struct DirectAsk<M: RemoteMessage> {
    msg: M,
    to: oneshot::Sender<Direct<M>>,
    kind: &'static str,
}

impl<M: RemoteMessage> GrainAsk for DirectAsk<M> {
    fn encode(&self, buf: &mut BytesMut) -> Result<(), String> {
        rally_remote::codec::encode_into(&self.msg, buf)
            .map_err(|e| format!("encoding {}: {e}", M::MANIFEST))
    }

    fn answer(self: Box<Self>, answer: GrainAnswer<'_>) {
        let DirectAsk { msg, to, kind } = *self;
        let again = match answer {
            GrainAnswer::Replied { outcome, body } if outcome.handled() == Handled::No => {
                let refusal = Refusal::from_wire(outcome, body);
                refusal.resend().then_some(refusal)
            }
            GrainAnswer::NotSent(why) => Some(Refusal::Unreachable(why.to_owned())),
            _ => None,
        };
        let _ = to.send(match again {
            Some(refusal) => Direct::Again(msg, refusal),
            None => Direct::Done(typed_answer::<M>(answer, kind)),
        });
    }

    fn is_abandoned(&self) -> bool {
        self.to.is_closed()
    }
}

/// Polls `future` once on this thread and spawns what is left of it as a task only if it has
/// to wait. An activation whose hook completes at once (and a store that answers on its
/// caller's thread) then costs no task of its own, and the first message's handling no
/// cross-thread wake-up.
fn run_or_spawn(future: impl Future<Output = ()> + Send + 'static) {
    let mut future = Box::pin(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    // Pending: the spawned task polls it again at once, and that poll registers its waker.
    if future.as_mut().poll(&mut cx).is_pending() {
        tokio::spawn(future);
    }
}
