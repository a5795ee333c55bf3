//! Everything this node keeps about one peer: outbound lanes, pending requests, remote watches,
//! the failure detector and the peer's incarnation.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rally_actor::{ReplyError, Terminated, TerminationSink};
use rally_wire::{
    FastHashMap, Incarnation, Lane, NodeAddress, PhiAccrualConfig, PhiAccrualDetector, ReplyStatus,
};

use crate::outbound::OutboundLane;
use crate::registry::PendingReply;

/// A request slot: reserved before the frame is queued, so a reply that races ahead of the
/// bookkeeping is kept rather than lost.
enum Slot {
    Waiting(PendingReply),
    Early(Result<Vec<u8>, ReplyError>),
}

/// Requests waiting for their reply, and replies that arrived before their request was
/// registered.
#[derive(Default)]
struct PendingTable {
    slots: FastHashMap<u64, Slot>,
    early: usize,
}

/// Early replies kept at most: legitimately a handful at a time; the bound stops a peer that
/// answers requests never made from growing the table.
const MAX_EARLY_REPLIES: usize = 1024;

/// This node's view of one peer node.
pub(crate) struct Association {
    pub(crate) remote: NodeAddress,
    /// `[control, ordinary.., large]`.
    pub(crate) lanes: Vec<Arc<OutboundLane>>,
    incarnation: Mutex<Option<Incarnation>>,
    pending: Mutex<PendingTable>,
    next_request: AtomicU64,
    watches: Mutex<HashMap<String, Vec<Arc<dyn TerminationSink>>>>,
    detector: Mutex<PhiAccrualDetector>,
    detector_config: PhiAccrualConfig,
    heard: AtomicBool,
    down: AtomicBool,
    /// Watchers on this node registered on behalf of the peer: (watchee, watcher) -> sink id.
    pub(crate) remote_watchers: Mutex<HashMap<(String, String), rally_actor::ActorId>>,
}

impl Association {
    pub(crate) fn new(
        remote: NodeAddress,
        ordinary: u8,
        max_frame: u32,
        lane_bytes: usize,
        detector: PhiAccrualConfig,
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
            incarnation: Mutex::new(None),
            pending: Mutex::new(PendingTable::default()),
            next_request: AtomicU64::new(1),
            watches: Mutex::new(HashMap::new()),
            detector: Mutex::new(PhiAccrualDetector::new(detector.clone())),
            detector_config: detector,
            heard: AtomicBool::new(false),
            down: AtomicBool::new(false),
            remote_watchers: Mutex::new(HashMap::new()),
        }
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

    pub(crate) fn is_down(&self) -> bool {
        self.down.load(Ordering::Acquire)
    }

    /// A fresh request id (the frame is queued before the request is registered).
    pub(crate) fn next_request_id(&self) -> u64 {
        self.next_request.fetch_add(1, Ordering::Relaxed)
    }

    /// Registers where the reply to request `id` goes, once its frame is queued. A reply that
    /// overtook this registration is delivered at once.
    pub(crate) fn register_request(&self, id: u64, pending: PendingReply) {
        let early = {
            let mut table = self.lock_pending();
            match table.slots.remove(&id) {
                Some(Slot::Early(reply)) => {
                    table.early -= 1;
                    reply
                }
                _ if self.is_down() => Err(ReplyError::Undeliverable(format!(
                    "node {} is unreachable",
                    self.remote
                ))),
                _ => {
                    table.slots.insert(id, Slot::Waiting(pending));
                    return;
                }
            }
        };
        pending.complete(early.as_deref().map_err(Clone::clone));
    }

    /// A reply frame arrived.
    pub(crate) fn complete(&self, id: u64, status: ReplyStatus, payload: &[u8]) {
        let result = match status {
            ReplyStatus::Ok => Ok(payload),
            ReplyStatus::RecipientGone => Err(ReplyError::Stopped),
            ReplyStatus::HandlerFailed => {
                Err(ReplyError::Failed("the remote handler failed".to_owned()))
            }
            other => Err(ReplyError::Undeliverable(format!(
                "the remote node answered {other:?}"
            ))),
        };
        let waiting = {
            let mut table = self.lock_pending();
            match table.slots.remove(&id) {
                Some(Slot::Waiting(pending)) => Some(pending),
                Some(early @ Slot::Early(_)) => {
                    // A second reply for one request: keep the first.
                    table.slots.insert(id, early);
                    None
                }
                None if table.early < MAX_EARLY_REPLIES => {
                    // The reply overtook the registration of its request (the frame left
                    // before the caller got the lock back): keep it for `register_request`.
                    table.early += 1;
                    table
                        .slots
                        .insert(id, Slot::Early(result.map(<[u8]>::to_vec)));
                    return;
                }
                None => None,
            }
        };
        match waiting {
            Some(pending) => pending.complete(result),
            None => tracing::debug!(request = id, "a reply for an unknown or abandoned request"),
        }
    }

    fn lock_pending(&self) -> std::sync::MutexGuard<'_, PendingTable> {
        self.pending
            .lock()
            .expect("pending lock is never poisoned: no user code runs under it")
    }

    /// Registers a local watcher of the remote actor `name`; `false` if the node is down (the
    /// caller then notifies at once).
    pub(crate) fn add_watch(&self, name: &str, watcher: Arc<dyn TerminationSink>) -> bool {
        if self.is_down() {
            return false;
        }
        let mut watches = self
            .watches
            .lock()
            .expect("watch lock is never poisoned: no user code runs under it");
        let list = watches.entry(name.to_owned()).or_default();
        if !list.iter().any(|w| w.watcher() == watcher.watcher()) {
            list.push(watcher);
        }
        true
    }

    pub(crate) fn remove_watch(&self, name: &str, watcher: rally_actor::ActorId) {
        let mut watches = self
            .watches
            .lock()
            .expect("watch lock is never poisoned: no user code runs under it");
        if let Some(list) = watches.get_mut(name) {
            list.retain(|w| w.watcher() != watcher);
        }
    }

    /// The remote actor `name` stopped: tell and forget its watchers.
    pub(crate) fn terminated(
        &self,
        name: &str,
        id_for: impl Fn(&str) -> (rally_actor::ActorId, Arc<str>),
    ) {
        let watchers = self
            .watches
            .lock()
            .expect("watch lock is never poisoned: no user code runs under it")
            .remove(name);
        if let Some(watchers) = watchers {
            let (id, path) = id_for(name);
            for watcher in watchers {
                watcher.notify(Terminated {
                    id,
                    path: path.clone(),
                });
            }
        }
    }

    /// A heartbeat arrived from the peer.
    pub(crate) fn heartbeat(&self, now: Instant) {
        self.detector
            .lock()
            .expect("detector lock is never poisoned")
            .heartbeat(now);
        self.heard.store(true, Ordering::Release);
        self.down.store(false, Ordering::Release);
    }

    /// Whether the detector now suspects the peer (only after it has been heard from).
    pub(crate) fn suspect(&self, now: Instant) -> bool {
        self.heard.load(Ordering::Acquire)
            && !self.is_down()
            && !self
                .detector
                .lock()
                .expect("detector lock is never poisoned")
                .is_available(now)
    }

    /// Declares the peer down (unreachable, restarted, or left): every watcher of its actors
    /// gets `Terminated`, every pending request fails. Returns `false` if it already was.
    pub(crate) fn declare_down(
        &self,
        reason: &str,
        id_for: impl Fn(&str) -> (rally_actor::ActorId, Arc<str>),
    ) -> bool {
        if self.down.swap(true, Ordering::AcqRel) {
            return false;
        }
        tracing::warn!(peer = %self.remote, reason, "peer declared down");
        self.heard.store(false, Ordering::Release);
        *self
            .detector
            .lock()
            .expect("detector lock is never poisoned") =
            PhiAccrualDetector::new(self.detector_config.clone());
        let watches: Vec<(String, Vec<Arc<dyn TerminationSink>>)> = self
            .watches
            .lock()
            .expect("watch lock is never poisoned: no user code runs under it")
            .drain()
            .collect();
        for (name, watchers) in watches {
            let (id, path) = id_for(&name);
            for watcher in watchers {
                watcher.notify(Terminated {
                    id,
                    path: path.clone(),
                });
            }
        }
        let slots: Vec<Slot> = {
            let mut table = self.lock_pending();
            table.early = 0;
            table.slots.drain().map(|(_, slot)| slot).collect()
        };
        for slot in slots {
            if let Slot::Waiting(pending) = slot {
                pending.complete(Err(ReplyError::Undeliverable(format!(
                    "node {} is down: {reason}",
                    self.remote
                ))));
            }
        }
        true
    }

    /// Records the peer's incarnation; a different one than before means it restarted.
    /// Returns `true` when it is a restart.
    pub(crate) fn observe_incarnation(&self, incarnation: Incarnation) -> bool {
        let mut known = self
            .incarnation
            .lock()
            .expect("incarnation lock is never poisoned");
        let restarted = known.is_some_and(|old| old != incarnation);
        *known = Some(incarnation);
        restarted
    }

    /// The peer came back (new incarnation after a restart, or heard again).
    pub(crate) fn revive(&self) {
        self.down.store(false, Ordering::Release);
    }

    /// Number of requests waiting for replies.
    pub(crate) fn pending_requests(&self) -> usize {
        let table = self.lock_pending();
        table.slots.len() - table.early
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

    fn decode(bytes: &[u8]) -> Result<Box<dyn std::any::Any + Send>, postcard::Error> {
        Ok(Box::new(bytes[0]))
    }

    /// A pending request whose reply lands in the returned channel.
    fn pending() -> (PendingReply, mpsc::Receiver<Result<u8, ReplyError>>) {
        let (tx, rx) = mpsc::channel();
        let envelope: Envelope<Nobody> =
            Envelope::new(Ask, ReplyTo::callback(move |r| tx.send(r).unwrap()));
        (
            PendingReply {
                decode,
                reply: envelope.into_reply(),
            },
            rx,
        )
    }

    fn association() -> Association {
        let remote: NodeAddress = "rally://t@h:1".parse().unwrap();
        Association::new(remote, 1, 1 << 20, 1 << 20, PhiAccrualConfig::default())
    }

    #[test]
    fn replies_reach_their_request_in_either_order() {
        let assoc = association();
        let (first, first_rx) = pending();
        let a = assoc.next_request_id();
        assoc.register_request(a, first);
        assoc.complete(a, ReplyStatus::Ok, &[7]);
        assert_eq!(first_rx.try_recv().unwrap(), Ok(7));

        let (second, second_rx) = pending();
        let b = assoc.next_request_id();
        assoc.complete(b, ReplyStatus::Ok, &[9]); // overtakes the registration
        assert!(second_rx.try_recv().is_err());
        assoc.register_request(b, second);
        assert_eq!(second_rx.try_recv().unwrap(), Ok(9));
        assert_eq!(assoc.pending_requests(), 0);
    }

    #[test]
    fn replies_to_requests_never_made_are_bounded() {
        let assoc = association();
        for id in 1_000..1_000 + 2 * MAX_EARLY_REPLIES as u64 {
            assoc.complete(id, ReplyStatus::Ok, &[1]);
        }
        assert_eq!(assoc.lock_pending().slots.len(), MAX_EARLY_REPLIES);
    }

    #[test]
    fn going_down_fails_waiting_and_later_requests() {
        let assoc = association();
        let (waiting, waiting_rx) = pending();
        let id = assoc.next_request_id();
        assoc.register_request(id, waiting);
        assert!(assoc.declare_down("test", |name| (rally_actor_id(), name.into())));
        assert!(matches!(
            waiting_rx.try_recv().unwrap(),
            Err(ReplyError::Undeliverable(_))
        ));
        let (late, late_rx) = pending();
        assoc.register_request(assoc.next_request_id(), late);
        assert!(matches!(
            late_rx.try_recv().unwrap(),
            Err(ReplyError::Undeliverable(_))
        ));
    }

    fn rally_actor_id() -> rally_actor::ActorId {
        // Any id: the test has no watchers to tell.
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(async { rally_actor::ActorSystem::new("t").next_id() })
    }
}
