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
    Reserved,
    Waiting(PendingReply),
    Early(Result<Vec<u8>, ReplyError>),
}

/// This node's view of one peer node.
pub(crate) struct Association {
    pub(crate) remote: NodeAddress,
    /// `[control, ordinary.., large]`.
    pub(crate) lanes: Vec<Arc<OutboundLane>>,
    incarnation: Mutex<Option<Incarnation>>,
    pending: Mutex<FastHashMap<u64, Slot>>,
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
            pending: Mutex::new(FastHashMap::default()),
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

    /// Reserves a request id before its frame is queued.
    pub(crate) fn reserve_request(&self) -> u64 {
        let id = self.next_request.fetch_add(1, Ordering::Relaxed);
        self.lock_pending().insert(id, Slot::Reserved);
        id
    }

    /// Attaches the reply destination to a reserved request.
    pub(crate) fn fill_request(&self, id: u64, pending: PendingReply) {
        let early = {
            let mut slots = self.lock_pending();
            match slots.get_mut(&id) {
                Some(slot) if matches!(slot, Slot::Reserved) => {
                    *slot = Slot::Waiting(pending);
                    return;
                }
                Some(Slot::Early(_)) => match slots.remove(&id) {
                    Some(Slot::Early(reply)) => Some(reply),
                    _ => unreachable!("the slot was Early under the same lock"),
                },
                // The association went down meanwhile and failed every request.
                _ => Some(Err(ReplyError::Undeliverable(format!(
                    "node {} is unreachable",
                    self.remote
                )))),
            }
        };
        if let Some(reply) = early {
            pending.complete(reply.as_deref().map_err(Clone::clone));
        }
    }

    /// Forgets a reserved request whose frame was not queued.
    pub(crate) fn cancel_request(&self, id: u64) {
        self.lock_pending().remove(&id);
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
        let slot = {
            let mut slots = self.lock_pending();
            match slots.get(&id) {
                Some(Slot::Reserved) => {
                    slots.insert(id, Slot::Early(result.map(<[u8]>::to_vec)));
                    return;
                }
                Some(_) => slots.remove(&id),
                None => None,
            }
        };
        match slot {
            Some(Slot::Waiting(pending)) => pending.complete(result),
            _ => tracing::debug!(request = id, "a reply for an unknown or abandoned request"),
        }
    }

    fn lock_pending(&self) -> std::sync::MutexGuard<'_, FastHashMap<u64, Slot>> {
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
        let slots: Vec<Slot> = self.lock_pending().drain().map(|(_, slot)| slot).collect();
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
        self.lock_pending().len()
    }
}
