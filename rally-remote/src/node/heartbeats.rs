//! The heartbeat task: a heartbeat on every association's control lane each period, and the
//! failure detectors checked at the same beat.

use std::sync::{Arc, Weak};

use tokio::sync::watch;

use crate::association::Association;
use crate::events::DownReason;
use crate::node::NodeInner;

/// Sends heartbeats on every association's control lane and checks the failure detectors.
pub(super) async fn run(node: Weak<NodeInner>, mut shutdown: watch::Receiver<bool>) {
    let period = match node.upgrade() {
        Some(inner) => inner.config.heartbeat_interval,
        None => return,
    };
    let mut ticks = tokio::time::interval(period);
    let mut sequence = 0u64;
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = shutdown.changed() => return,
        }
        let Some(inner) = node.upgrade() else { return };
        sequence += 1;
        let associations: Vec<Arc<Association>> =
            inner.lock_associations().values().cloned().collect();
        let now = crate::now();
        let down_after = inner.config.quarantine_unreachable_after;
        for association in associations {
            let _ = association.control().push_heartbeat(sequence);
            // Asks that gave up free their slots here at the latest (also on each new ask).
            association.sweep_requests();
            let unreachable_for = association.check_reachability(now);
            if let (Some(unreachable_for), Some(down_after)) = (unreachable_for, down_after)
                && unreachable_for >= down_after
            {
                inner.declare_down(&association, DownReason::Unreachable);
            }
        }
    }
}
