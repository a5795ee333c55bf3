//! The listener's loop: each accepted connection gets its own task (`inbound::serve`), within
//! the bound on connections not yet authenticated.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::inbound;
use crate::node::NodeInner;
use crate::transport::Listener;

/// Accepts on `listener` until the node shuts down or is dropped.
pub(super) fn spawn(mut listener: Box<dyn Listener>, inner: &Arc<NodeInner>) {
    let weak = Arc::downgrade(inner);
    let mut stop = inner.shutdown.clone();
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                _ = stop.changed() => return,
            };
            let Some(node) = weak.upgrade() else { return };
            match accepted {
                Ok((stream, peer)) => match node.unauthenticated.clone().try_acquire_owned() {
                    Ok(permit) => {
                        tokio::spawn(inbound::serve(node, stream, peer, permit));
                    }
                    Err(_) => {
                        // Too many connections are still in their handshake: refuse this
                        // one at once, so memory before authentication stays bounded.
                        node.counters
                            .connections_refused
                            .fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(%peer, "too many unauthenticated connections; refused");
                        drop(stream);
                    }
                },
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    });
}
