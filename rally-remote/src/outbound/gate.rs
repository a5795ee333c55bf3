//! Read holds: what gates a lane's batch until the actors one read woke have run.
//!
//! Each read of an inbound connection delivers its messages inside a delivery scope
//! (`rally_actor::hold::scope`) with a fresh [`ReadHold`]. Every actor those deliveries wake
//! keeps a clone until it has handled the messages it took with it (or its run ends first).
//! A frame pushed by such a run (or by the reader itself)
//! that opens a lane's batch gates the batch on the read: the lane is linked here, and when the
//! last clone is dropped (every woken actor has run, and the reader is done with the read), the
//! drop releases each linked lane, and the thread that dropped it writes the batch. So the
//! replies and sends one read caused leave in one write, however many cores ran the actors.

use std::sync::Arc;

use rally_actor::sync::Mutex;

use super::OutboundLane;

/// One inbound read's hold (see the module docs). Its address, stable for its life, is the
/// gate's name in the lanes it gates.
#[derive(Default)]
pub(crate) struct ReadHold {
    /// Lanes whose open batch waits for this read. (A lane may appear more than once: it is
    /// released once per entry, and only the entry that matches its gate writes.)
    lanes: Mutex<Vec<Arc<OutboundLane>>>,
}

impl ReadHold {
    /// The name a gated batch keeps: this hold's address.
    pub(crate) fn id(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }

    /// `lane`'s open batch is gated on this read: release it when the read's work has run.
    pub(crate) fn link(&self, lane: &Arc<OutboundLane>) {
        let mut lanes = self.lanes.lock();
        if !lanes.last().is_some_and(|last| Arc::ptr_eq(last, lane)) {
            lanes.push(lane.clone());
        }
    }
}

impl Drop for ReadHold {
    fn drop(&mut self) {
        let id = self.id();
        let lanes = std::mem::take(self.lanes.get_mut());
        for lane in lanes {
            lane.release(id);
        }
    }
}

impl std::fmt::Debug for ReadHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadHold").finish_non_exhaustive()
    }
}
