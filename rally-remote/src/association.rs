//! This node's view of one peer node: its lanes, which life of it is current, the requests
//! waiting for its replies, and the watches of its actors. The decisions are `rally-wire`'s
//! sans-I/O [`Liveness`] and [`RequestTable`]; this module holds them behind locks and carries
//! out their consequences (lanes reset, asks failed, watchers told).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rally_actor::{ReplyError, Terminated, TerminationReason, TerminationSink};
use rally_wire::{
    Incarnation, Lane, Liveness, NodeAddress, Observed, Outcome, PhiAccrualConfig, ReplyStatus,
    RequestTable, UniqueAddress,
};
use tokio::sync::broadcast;

use crate::events::{DownReason, PeerEvent};

use crate::outbound::OutboundLane;
use crate::registry::PendingReply;
use rally_actor::sync::Mutex;

/// The peer's lives and whether it can be reached at all.
struct PeerState {
    liveness: Liveness,
    /// Set while connecting fails for a reason retrying cannot fix (another secret, another
    /// version, a quarantined incarnation): sends fail at once with it instead of timing out.
    refused: Option<String>,
    /// Since when the failure detector has suspected the current incarnation, if it does.
    unreachable_since: Option<Instant>,
}

/// The error of a request that gets no reply for `reason`, given what is known of its outcome.
fn failure(reason: &str, outcome: Outcome) -> ReplyError {
    match outcome {
        Outcome::NeverSent => ReplyError::Undeliverable(format!("{reason} (never sent)")),
        Outcome::Unknown => ReplyError::OutcomeUnknown(format!(
            "{reason} (the request had left; it may have been handled)"
        )),
    }
}

/// This node's view of one peer node.
pub(crate) struct Association {
    pub(crate) remote: NodeAddress,
    /// `[control, ordinary.., large]`.
    pub(crate) lanes: Vec<Arc<OutboundLane>>,
    peer: Mutex<PeerState>,
    /// Mirrors `peer.refused.is_some()`, so a send checks it without the lock.
    refused_flag: std::sync::atomic::AtomicBool,
    /// Requests queued for a generation below this one have been failed (the peer's life
    /// they were for ended); set before the requests are failed, read after a registration.
    ended_below: std::sync::atomic::AtomicU64,
    requests: Mutex<RequestTable<PendingReply>>,
    /// Request ids are handed out here, without the table's lock.
    next_request: std::sync::atomic::AtomicU64,
    watches: Mutex<HashMap<String, Vec<Arc<dyn TerminationSink>>>>,
    /// Watchers on this node registered on behalf of the peer: (watchee, watcher) -> sink id.
    pub(crate) remote_watchers: Mutex<HashMap<(String, String), rally_actor::ActorId>>,
    /// Where [`PeerEvent`]s go; sent under the peer lock, so one peer's events keep the order
    /// of the changes they report.
    events: broadcast::Sender<PeerEvent>,
    /// Connections from the peer on its data lanes (every lane but control) that are open.
    inbound_data: std::sync::atomic::AtomicUsize,
    /// Woken whenever one of those connections ends.
    inbound_ended: tokio::sync::Notify,
    /// Wakes this peer's outbound lanes from their reconnection backoff: the peer just
    /// connected to this node, so it is up and listening now (a process restarted at its
    /// address, say). Without it, a lane still backing off from the previous life's failures
    /// would stay silent for seconds, and the membership would take the new life for
    /// unreachable.
    pub(crate) connect_now: tokio::sync::Notify,
}

/// Counts a connection from the peer on a data lane while it is open (see
/// [`Association::data_connections_ended`]).
pub(crate) struct InboundData(Arc<Association>);

impl Drop for InboundData {
    fn drop(&mut self) {
        self.0
            .inbound_data
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        self.0.inbound_ended.notify_waiters();
    }
}

/// What a generation's end left to do outside the locks.
pub(crate) struct Ended {
    /// Messages dropped from the lanes.
    pub(crate) dropped: u64,
}

impl Association {
    pub(crate) fn new(
        remote: NodeAddress,
        ordinary: u8,
        max_frame: u32,
        lane_bytes: usize,
        detector: PhiAccrualConfig,
        events: broadcast::Sender<PeerEvent>,
    ) -> Self {
        let mut lanes = vec![Arc::new(OutboundLane::new(
            Lane::Control,
            max_frame,
            lane_bytes,
        ))];
        for i in 0..ordinary.max(1) {
            lanes.push(Arc::new(OutboundLane::new(
                Lane::Ordinary(i),
                max_frame,
                lane_bytes,
            )));
        }
        lanes.push(Arc::new(OutboundLane::new(
            Lane::Large,
            max_frame,
            lane_bytes.max(max_frame as usize * 2),
        )));
        Self {
            remote,
            lanes,
            peer: Mutex::new(PeerState {
                liveness: Liveness::new(detector),
                refused: None,
                unreachable_since: None,
            }),
            refused_flag: std::sync::atomic::AtomicBool::new(false),
            ended_below: std::sync::atomic::AtomicU64::new(0),
            requests: Mutex::new(RequestTable::default()),
            next_request: std::sync::atomic::AtomicU64::new(1),
            connect_now: tokio::sync::Notify::new(),
            watches: Mutex::new(HashMap::new()),
            remote_watchers: Mutex::new(HashMap::new()),
            events,
            inbound_data: std::sync::atomic::AtomicUsize::new(0),
            inbound_ended: tokio::sync::Notify::new(),
        }
    }

    /// Counts a connection from the peer on `lane` while the returned guard lives; `None` for
    /// the control lane.
    pub(crate) fn inbound_opened(self: &Arc<Self>, lane: Lane) -> Option<InboundData> {
        (lane != Lane::Control).then(|| {
            self.inbound_data
                .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            InboundData(Arc::clone(self))
        })
    }

    /// Waits until every connection from the peer on a data lane has ended, or `deadline`.
    /// A leaving peer closes its data lanes once they are flushed, so what it queued before
    /// its leave notice (replies above all) has been read once they have ended.
    pub(crate) async fn data_connections_ended(&self, deadline: Instant) {
        loop {
            let ended = self.inbound_ended.notified();
            if self.inbound_data.load(std::sync::atomic::Ordering::Acquire) == 0 {
                return;
            }
            if tokio::time::timeout_at(deadline.into(), ended)
                .await
                .is_err()
            {
                return;
            }
        }
    }

    /// The peer's unique address for `incarnation`.
    fn unique(&self, incarnation: Incarnation) -> UniqueAddress {
        UniqueAddress {
            address: self.remote.clone(),
            incarnation,
        }
    }

    /// Publishes `event` (nobody listening is fine).
    fn publish(&self, event: PeerEvent) {
        let _ = self.events.send(event);
    }

    pub(crate) fn control(&self) -> &Arc<OutboundLane> {
        &self.lanes[0]
    }

    /// The lane index for messages to `recipient`: recipient-hashed over the ordinary lanes (so
    /// per-pair order holds), or the large lane.
    pub(crate) fn lane_for(&self, recipient: &str, large: bool) -> usize {
        let ordinary = self.lanes.len() - 2;
        if large {
            return self.lanes.len() - 1;
        }
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        recipient.hash(&mut hasher);
        1 + (hasher.finish() as usize % ordinary)
    }

    /// The lane a reply to a request that arrived on `lane` goes back on.
    pub(crate) fn reply_lane(&self, lane: Lane) -> &Arc<OutboundLane> {
        let ordinary = self.lanes.len() - 2;
        match lane {
            Lane::Control => &self.lanes[0],
            Lane::Ordinary(i) => &self.lanes[1 + usize::from(i) % ordinary],
            Lane::Large => &self.lanes[self.lanes.len() - 1],
        }
    }

    /// The current generation (what a ref resolved now belongs to).
    pub(crate) fn generation(&self) -> u64 {
        self.peer.lock().liveness.generation()
    }

    /// Why sends to this peer fail at once, if they do.
    pub(crate) fn refused(&self) -> Option<String> {
        self.peer.lock().refused.clone()
    }

    /// Like [`refused`](Self::refused), checking a flag first (the send path).
    #[inline]
    pub(crate) fn refused_fast(&self) -> Option<String> {
        if self.refused_flag.load(std::sync::atomic::Ordering::Acquire) {
            self.refused()
        } else {
            None
        }
    }

    /// Connecting failed for a reason retrying cannot fix. Returns `true` the first time (the
    /// caller logs it once); every request waiting fails with the reason.
    pub(crate) fn refuse(&self, reason: String) -> bool {
        let first = {
            let mut peer = self.peer.lock();
            let first = peer.refused.is_none();
            peer.refused = Some(reason.clone());
            self.refused_flag
                .store(true, std::sync::atomic::Ordering::Release);
            if first {
                self.publish(PeerEvent::Refused {
                    address: self.remote.clone(),
                    reason: reason.clone(),
                });
            }
            first
        };
        if first {
            self.fail_requests(&reason);
        }
        first
    }

    /// Whether `incarnation` is refused here (declared down earlier).
    pub(crate) fn is_quarantined(&self, incarnation: Incarnation) -> bool {
        self.peer.lock().liveness.is_quarantined(incarnation)
    }

    /// Whether traffic from `incarnation` belongs to the current generation.
    pub(crate) fn admits(&self, incarnation: Incarnation) -> bool {
        self.peer.lock().liveness.admits(incarnation)
    }

    /// A handshake showed the peer's incarnation. Returns what it means, and the generation
    /// now current. A restart ends the old generation here (lanes, requests, watchers).
    pub(crate) fn observe(
        &self,
        incarnation: Incarnation,
        id_for: impl Fn(&str) -> (rally_actor::ActorId, Arc<str>),
    ) -> (Observed, u64, Option<Ended>) {
        let (observed, generation) = {
            let mut peer = self.peer.lock();
            let previous = peer.liveness.incarnation();
            let observed = peer.liveness.observe(incarnation, crate::now());
            if observed != Observed::Quarantined {
                peer.refused = None;
                self.refused_flag
                    .store(false, std::sync::atomic::Ordering::Release);
            }
            match observed {
                Observed::First => self.publish(PeerEvent::Connected(self.unique(incarnation))),
                Observed::Restarted { .. } => {
                    peer.unreachable_since = None;
                    if let Some(old) = previous {
                        self.publish(PeerEvent::Down {
                            peer: self.unique(old),
                            reason: DownReason::Restarted,
                        });
                    }
                    self.publish(PeerEvent::Connected(self.unique(incarnation)));
                }
                Observed::Same | Observed::Quarantined => {}
            }
            (observed, peer.liveness.generation())
        };
        let ended = match observed {
            Observed::Restarted { generation } => {
                Some(self.end_generation(generation, &DownReason::Restarted.to_string(), id_for))
            }
            _ => None,
        };
        (observed, generation, ended)
    }

    /// A heartbeat from `incarnation` arrived.
    pub(crate) fn heartbeat(&self, incarnation: Incarnation, now: Instant) {
        self.peer.lock().liveness.heartbeat(incarnation, now);
    }

    /// Asks the failure detector about the peer at `now`, publishing `Unreachable` when it
    /// starts to suspect the peer and `Reachable` when it stops. Returns how long the peer has
    /// been suspected, if it is.
    pub(crate) fn check_reachability(&self, now: Instant) -> Option<Duration> {
        let mut peer = self.peer.lock();
        let suspect = peer.liveness.suspect(now);
        let incarnation = peer.liveness.incarnation();
        match (suspect, peer.unreachable_since, incarnation) {
            (true, None, Some(incarnation)) => {
                peer.unreachable_since = Some(now);
                self.publish(PeerEvent::Unreachable(self.unique(incarnation)));
                Some(Duration::ZERO)
            }
            (true, Some(since), _) => Some(now.saturating_duration_since(since)),
            (false, Some(_), Some(incarnation)) => {
                peer.unreachable_since = None;
                self.publish(PeerEvent::Reachable(self.unique(incarnation)));
                None
            }
            _ => None,
        }
    }

    /// Declares the current life of the peer down (unreachable, left, broke the protocol): its
    /// incarnation is quarantined for good, every watcher of its actors gets `Terminated`, every
    /// waiting request fails, queued frames are dropped. `None` if there was no life to end.
    pub(crate) fn declare_down(
        &self,
        reason: DownReason,
        id_for: impl Fn(&str) -> (rally_actor::ActorId, Arc<str>),
    ) -> Option<Ended> {
        let generation = {
            let mut peer = self.peer.lock();
            let incarnation = peer.liveness.incarnation()?;
            if !peer.liveness.declare_down() {
                return None;
            }
            peer.unreachable_since = None;
            self.publish(PeerEvent::Down {
                peer: self.unique(incarnation),
                reason: reason.clone(),
            });
            peer.liveness.generation()
        };
        tracing::warn!(peer = %self.remote, %reason, "peer declared down; its incarnation is quarantined");
        Some(self.end_generation(generation, &reason.to_string(), id_for))
    }

    fn end_generation(
        &self,
        generation: u64,
        reason: &str,
        id_for: impl Fn(&str) -> (rally_actor::ActorId, Arc<str>),
    ) -> Ended {
        // Lanes first, so what a failed request's outcome is judged by can no longer move.
        let dropped = self
            .lanes
            .iter()
            .map(|lane| lane.begin_generation(generation))
            .sum();
        self.ended_below
            .fetch_max(generation, std::sync::atomic::Ordering::Release);
        self.fail_requests(&format!("node {} is down: {reason}", self.remote));
        let watches: Vec<(String, Vec<Arc<dyn TerminationSink>>)> =
            self.watches.lock().drain().collect();
        for (name, watchers) in watches {
            let (id, path) = id_for(&name);
            for watcher in watchers {
                watcher.notify(Terminated::new(
                    id,
                    path.clone(),
                    TerminationReason::NodeDown,
                ));
            }
        }
        self.remote_watchers.lock().clear();
        Ended { dropped }
    }

    fn fail_requests(&self, reason: &str) {
        let handed: Vec<u64> = self.lanes.iter().map(|lane| lane.handed()).collect();
        let failed = {
            let mut requests = self.requests.lock();
            let failed = requests.fail_all(|lane| handed.get(lane).copied().unwrap_or(0));
            self.show_awaited(&requests);
            failed
        };
        for (pending, outcome) in failed {
            pending.failed(failure(reason, outcome));
        }
    }

    /// A fresh request id.
    pub(crate) fn next_request_id(&self) -> u64 {
        self.next_request
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// Registers where the reply to request `id` goes, once its frame is queued on `lane` as
    /// message `sequence` for the peer's life `generation`. A reply that overtook this
    /// registration is delivered at once.
    ///
    /// A refusal or the end of that life may have failed the waiting requests between the
    /// frame's queuing and this registration: both mark themselves before they take the
    /// table's lock, and this looks after releasing it, so one of the two always fails the
    /// request (it never waits for its timeout).
    pub(crate) fn register_request(
        &self,
        id: u64,
        pending: PendingReply,
        lane: usize,
        sequence: u64,
        generation: u64,
    ) {
        let early = {
            let mut requests = self.requests.lock();
            let early = requests.register(id, pending, lane, sequence);
            self.show_awaited_on(&requests, lane);
            early
        };
        if let Some((pending, status, payload)) = early {
            pending.replied(status, &payload);
            return;
        }
        let reason = if let Some(refused) = self.refused_fast() {
            refused
        } else if generation < self.ended_below.load(std::sync::atomic::Ordering::Acquire) {
            format!("node {} is down", self.remote)
        } else {
            return;
        };
        let handed = self.lanes.get(lane).map_or(0, |lane| lane.handed());
        let cancelled = {
            let mut requests = self.requests.lock();
            let cancelled = requests.cancel(id);
            self.show_awaited_on(&requests, lane);
            cancelled
        };
        let Some((pending, _)) = cancelled else {
            return; // failed or answered meanwhile
        };
        let outcome = if sequence <= handed {
            Outcome::Unknown
        } else {
            Outcome::NeverSent
        };
        pending.failed(failure(&reason, outcome));
    }

    /// A reply frame arrived.
    pub(crate) fn complete(&self, id: u64, status: ReplyStatus, payload: &[u8]) {
        let issued = self.next_request.load(std::sync::atomic::Ordering::Relaxed);
        let waiting = {
            let mut requests = self.requests.lock();
            requests.issued(issued);
            let waiting = requests.complete(id, status, payload);
            if let Some((_, lane)) = &waiting {
                self.show_awaited_on(&requests, *lane);
            }
            waiting
        };
        match waiting {
            Some((pending, _)) => pending.replied(status, payload),
            None => tracing::trace!(request = id, "a reply for an unknown or abandoned request"),
        }
    }

    /// Frees the slots of asks that gave up. Returns how many.
    pub(crate) fn sweep_requests(&self) -> usize {
        let mut requests = self.requests.lock();
        let swept = requests.sweep();
        self.show_awaited(&requests);
        swept
    }

    /// Tells `lane`'s writer how many replies are awaited on it (under the table's lock, so
    /// two callers never store in the wrong order).
    fn show_awaited_on(&self, requests: &RequestTable<PendingReply>, lane: usize) {
        if let Some(outbound) = self.lanes.get(lane) {
            outbound.set_awaited(requests.waiting_on(lane));
        }
    }

    /// [`show_awaited_on`](Self::show_awaited_on) for every lane.
    fn show_awaited(&self, requests: &RequestTable<PendingReply>) {
        for lane in 0..self.lanes.len() {
            self.show_awaited_on(requests, lane);
        }
    }

    /// Registers a local watcher of the remote actor `name`.
    pub(crate) fn add_watch(&self, name: &str, watcher: Arc<dyn TerminationSink>) {
        let mut watches = self.watches.lock();
        let list = watches.entry(name.to_owned()).or_default();
        if !list.iter().any(|w| w.watcher() == watcher.watcher()) {
            list.push(watcher);
        }
    }

    pub(crate) fn remove_watch(&self, name: &str, watcher: rally_actor::ActorId) {
        if let Some(list) = self.watches.lock().get_mut(name) {
            list.retain(|w| w.watcher() != watcher);
        }
    }

    /// The remote actor `name` stopped: tell and forget its watchers.
    pub(crate) fn terminated(
        &self,
        name: &str,
        id_for: impl Fn(&str) -> (rally_actor::ActorId, Arc<str>),
    ) {
        let watchers = self.watches.lock().remove(name);
        if let Some(watchers) = watchers {
            let (id, path) = id_for(name);
            for watcher in watchers {
                // The wire does not say why the remote actor stopped.
                watcher.notify(Terminated::new(
                    id,
                    path.clone(),
                    TerminationReason::Unknown,
                ));
            }
        }
    }

    /// Requests waiting for replies (after freeing those whose asker gave up).
    pub(crate) fn pending_requests(&self) -> usize {
        let mut requests = self.requests.lock();
        requests.sweep();
        self.show_awaited(&requests);
        requests.waiting()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use rally_actor::{Actor, ActorResult, Context, Envelope, Handler, Message, ReplyTo};

    use super::*;

    struct Nobody;
    impl Actor for Nobody {}
    struct Ask;
    impl Message for Ask {
        type Reply = u8;
    }
    impl Handler<Ask> for Nobody {
        async fn handle(&mut self, _: Ask, _: &mut Context<Self>) -> ActorResult<u8> {
            Ok(0)
        }
    }

    fn complete(reply: rally_actor::ErasedReply, payload: Result<&[u8], ReplyError>) {
        reply.send(payload.map(|bytes| Box::new(bytes[0]) as Box<dyn std::any::Any + Send>));
    }

    /// A pending request whose reply lands in the returned channel.
    fn pending() -> (PendingReply, mpsc::Receiver<Result<u8, ReplyError>>) {
        let (tx, rx) = mpsc::channel();
        let envelope: Envelope<Nobody> =
            Envelope::new(Ask, ReplyTo::callback(move |r| tx.send(r).unwrap()));
        (
            PendingReply::Actor {
                complete,
                reply: envelope.into_reply(),
            },
            rx,
        )
    }

    fn association() -> Association {
        let remote: NodeAddress = "rally://t@h:1".parse().unwrap();
        Association::new(
            remote,
            1,
            1 << 20,
            1 << 20,
            PhiAccrualConfig::default(),
            broadcast::channel(16).0,
        )
    }

    /// Any id and the name as path: these tests have no watchers to tell.
    fn no_id(name: &str) -> (rally_actor::ActorId, Arc<str>) {
        thread_local! {
            static ID: rally_actor::ActorId = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap()
                .block_on(async { rally_actor::ActorSystem::new("t").next_id() });
        }
        (ID.with(|id| *id), name.into())
    }

    #[test]
    fn replies_reach_their_request_in_either_order() {
        let assoc = association();
        let (first, first_rx) = pending();
        let a = assoc.next_request_id();
        assoc.register_request(a, first, 1, 1, 1);
        assoc.complete(a, ReplyStatus::Ok, &[7]);
        assert_eq!(first_rx.try_recv().unwrap(), Ok(7));

        let (second, second_rx) = pending();
        let b = assoc.next_request_id();
        assoc.complete(b, ReplyStatus::Ok, &[9]); // overtakes the registration
        assert!(second_rx.try_recv().is_err());
        assoc.register_request(b, second, 1, 2, 1);
        assert_eq!(second_rx.try_recv().unwrap(), Ok(9));
        assert_eq!(assoc.pending_requests(), 0);
    }

    #[test]
    fn going_down_fails_waiting_requests_as_never_sent_or_unknown() {
        let assoc = association();
        assert_eq!(assoc.observe(Incarnation(1), no_id).0, Observed::First);
        let (waiting, waiting_rx) = pending();
        let id = assoc.next_request_id();
        assoc.register_request(id, waiting, 1, 1, 1);
        assert!(assoc.declare_down(DownReason::Left, no_id).is_some());
        // Sequence 1 was never handed to a transport: it never left.
        assert!(matches!(
            waiting_rx.try_recv().unwrap(),
            Err(ReplyError::Undeliverable(_))
        ));
        assert_eq!(assoc.generation(), 2);
        assert!(assoc.is_quarantined(Incarnation(1)));
        assert!(assoc.declare_down(DownReason::Left, no_id).is_none());
    }

    /// Every change of a peer's state is published once, in order, with the incarnation it
    /// is about (time passed in; the detector is quick so the test stays short).
    #[test]
    fn peer_events_follow_the_peer_through_its_lives() {
        let (events, mut rx) = broadcast::channel(16);
        let mut quick = PhiAccrualConfig::default();
        quick.acceptable_heartbeat_pause = Duration::from_millis(600);
        quick.first_heartbeat_estimate = Duration::from_millis(100);
        quick.min_std_deviation = Duration::from_millis(50);
        let remote: NodeAddress = "rally://t@h:1".parse().unwrap();
        let assoc = Association::new(remote.clone(), 1, 1 << 20, 1 << 20, quick, events);
        let unique = |n| UniqueAddress {
            address: remote.clone(),
            incarnation: Incarnation(n),
        };
        let mut next = || rx.try_recv().ok();

        assert!(assoc.refuse("the peer belongs to another cluster".into()));
        assert_eq!(
            next(),
            Some(PeerEvent::Refused {
                address: remote.clone(),
                reason: "the peer belongs to another cluster".into()
            })
        );
        assert!(!assoc.refuse("the peer belongs to another cluster".into()));
        assert_eq!(next(), None, "a refusal is published once");

        assoc.observe(Incarnation(1), no_id);
        assert_eq!(next(), Some(PeerEvent::Connected(unique(1))));
        assoc.observe(Incarnation(1), no_id); // another lane of the same life
        assert_eq!(next(), None);

        let mut now = Instant::now();
        for _ in 0..10 {
            now += Duration::from_millis(100);
            assoc.heartbeat(Incarnation(1), now);
            assert_eq!(assoc.check_reachability(now), None);
        }
        assert_eq!(next(), None);
        // Silence: unreachable once, then for longer and longer, without repeating the event.
        let silent = now + Duration::from_secs(3);
        assert_eq!(assoc.check_reachability(silent), Some(Duration::ZERO));
        assert_eq!(next(), Some(PeerEvent::Unreachable(unique(1))));
        assert_eq!(
            assoc.check_reachability(silent + Duration::from_secs(1)),
            Some(Duration::from_secs(1))
        );
        assert_eq!(next(), None);
        // Heartbeats again: reachable.
        let back = silent + Duration::from_secs(2);
        assoc.heartbeat(Incarnation(1), back);
        assert_eq!(assoc.check_reachability(back), None);
        assert_eq!(next(), Some(PeerEvent::Reachable(unique(1))));

        // A restart: the old life is down, the new one connected.
        assoc.observe(Incarnation(2), no_id);
        assert_eq!(
            next(),
            Some(PeerEvent::Down {
                peer: unique(1),
                reason: DownReason::Restarted
            })
        );
        assert_eq!(next(), Some(PeerEvent::Connected(unique(2))));
        assert!(
            assoc
                .declare_down(DownReason::Requested("downed".into()), no_id)
                .is_some()
        );
        assert_eq!(
            next(),
            Some(PeerEvent::Down {
                peer: unique(2),
                reason: DownReason::Requested("downed".into())
            })
        );
        assert!(assoc.declare_down(DownReason::Left, no_id).is_none());
        assert_eq!(next(), None, "nothing left to declare down");
    }

    #[test]
    fn a_permanent_refusal_fails_requests_at_once_and_is_reported_once() {
        let assoc = association();
        let (waiting, rx) = pending();
        let id = assoc.next_request_id();
        assoc.register_request(id, waiting, 1, 1, 1);
        assert!(assoc.refuse("secrets differ".into()));
        assert!(!assoc.refuse("secrets differ".into()));
        assert!(
            matches!(rx.try_recv().unwrap(), Err(ReplyError::Undeliverable(why)) if why.contains("secrets differ"))
        );
        assert_eq!(assoc.refused().as_deref(), Some("secrets differ"));
        assoc.observe(Incarnation(5), no_id);
        assert_eq!(assoc.refused(), None);
    }

    /// The frame is queued, then the refusal or the peer's death fails the waiting requests,
    /// then the request registers: it fails at once, not at its timeout. (Before the fix it
    /// waited: CI saw a wrong-secret `ask` end in `Timeout(10s)`.)
    #[test]
    fn a_request_registered_after_a_refusal_or_a_death_fails_at_once() {
        let assoc = association();
        assert!(assoc.refuse("secrets differ".into()));
        let (late, rx) = pending();
        let id = assoc.next_request_id();
        assoc.register_request(id, late, 1, 1, 1);
        assert!(
            matches!(rx.try_recv().unwrap(), Err(ReplyError::Undeliverable(why)) if why.contains("secrets differ"))
        );
        assert_eq!(assoc.pending_requests(), 0);

        let assoc = association();
        assert_eq!(assoc.observe(Incarnation(1), no_id).0, Observed::First);
        assert!(assoc.declare_down(DownReason::Left, no_id).is_some());
        let (late, rx) = pending();
        let id = assoc.next_request_id();
        assoc.register_request(id, late, 1, 1, 1);
        assert!(
            matches!(rx.try_recv().unwrap(), Err(ReplyError::Undeliverable(why)) if why.contains("is down"))
        );
        // A request of the new life waits for its reply as usual.
        let (current, rx) = pending();
        let id = assoc.next_request_id();
        assoc.register_request(id, current, 1, 2, assoc.generation());
        assert!(rx.try_recv().is_err());
        assert_eq!(assoc.pending_requests(), 1);
    }
}
