//! One task per outbound lane: connect, handshake, write until the connection fails, reconnect
//! with backoff.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use rally_actor::{ActorSystem, DeadLetterReason};
use rally_wire::{NodeAddress, Observed};

use crate::association::Association;
use crate::connection;
use crate::node::NodeInner;

/// Records `count` messages lost on the way to `remote` as dead letters.
pub(super) fn record_lost(
    system: &ActorSystem,
    remote: &NodeAddress,
    count: u64,
    what: &'static str,
) {
    if count == 0 {
        return;
    }
    let path: Arc<str> = remote.to_string().into();
    let dead = system.dead_letters();
    for _ in 0..count {
        dead.record(&path, what, DeadLetterReason::Unreachable);
    }
}

/// Why connecting to `remote` cannot succeed until someone changes a configuration or restarts a
/// process, if that is the case: another secret, version or address, a quarantined
/// incarnation, or a TLS certificate the other side does not trust.
fn permanent_failure(remote: &NodeAddress, error: &connection::ConnectError) -> Option<String> {
    use rally_wire::{HandshakeError, RejectReason};
    match error {
        connection::ConnectError::Handshake(HandshakeError::Rejected(
            RejectReason::Quarantined,
        )) => Some(format!(
            "{remote} declared this node's incarnation down (quarantined); this node must restart to be admitted there"
        )),
        connection::ConnectError::Handshake(handshake) if handshake.is_permanent() => {
            Some(format!("cannot connect to {remote}: {handshake}"))
        }
        connection::ConnectError::Io(io) => {
            let tls = io.get_ref()?.downcast_ref::<rustls::Error>()?;
            if let rustls::Error::InvalidMessage(_) = tls {
                // What a plain-TCP node answers a ClientHello with is its own preface.
                return Some(format!(
                    "cannot connect to {remote}: its answer is not TLS ({tls}): it listens in plain TCP? configure TLS on both nodes or on neither"
                ));
            }
            Some(format!(
                "cannot connect to {remote}: TLS: {tls} (are both certificates signed by a CA the other side trusts?)"
            ))
        }
        _ => None,
    }
}

/// Owns one outbound lane's connection: connect, handshake, write until it fails, reconnect
/// with backoff. Ends when the lane is closed and flushed, or the node is gone.
pub(super) async fn run(node: Weak<NodeInner>, association: Arc<Association>, index: usize) {
    let lane = association.lanes[index].clone();
    let mut attempt = 0u32;
    loop {
        let Some(inner) = node.upgrade() else { return };
        if *inner.shutdown.borrow() {
            return;
        }
        let remote = &association.remote;
        let config = inner.handshake_config();
        let (timeout, max_backoff) = (
            inner.config.handshake_timeout,
            inner.config.max_reconnect_backoff,
        );
        let transport = inner.transport.clone();
        let system = inner.system.clone();
        let mut shutdown = inner.shutdown.clone();
        let node_for_observe = inner.clone();
        drop(inner);
        let outcome = async {
            let mut stream = transport.connect(&remote.host, remote.port).await?;
            let peer =
                connection::client(&mut stream, config, remote.clone(), lane.lane, timeout).await?;
            Ok::<_, connection::ConnectError>((stream, peer))
        }
        .await;
        match outcome {
            Ok((stream, peer)) => {
                let (observed, generation) = node_for_observe.observe(&association, &peer.peer);
                let attached = match observed {
                    Observed::Quarantined => {
                        let reason = format!(
                            "node {remote} incarnation {} was declared down; it must restart to be admitted",
                            peer.peer.incarnation
                        );
                        if association.refuse(reason.clone()) {
                            tracing::warn!(peer = %remote, "{reason}");
                        }
                        None
                    }
                    _ => lane.attach(generation, peer.max_frame_len),
                };
                drop(node_for_observe);
                if let Some(dropped) = attached {
                    record_lost(&system, remote, dropped, "(larger than the peer's maximum)");
                    attempt = 0;
                    let written = tokio::select! {
                        written = lane.write_to(stream) => written,
                        _ = shutdown.changed() => return,
                    };
                    match written {
                        Ok(true) => return,
                        Ok(false) => {
                            tracing::debug!(peer = %remote, lane = ?lane.lane, "the peer's incarnation changed; reconnecting");
                        }
                        Err(failed) => {
                            record_lost(&system, remote, failed.lost, "(in a write that failed)");
                            tracing::debug!(peer = %remote, lane = ?lane.lane, error = %failed.error, "connection lost");
                        }
                    }
                }
            }
            Err(error) => {
                if let Some(reason) = permanent_failure(remote, &error) {
                    node_for_observe
                        .counters
                        .handshake_failures
                        .fetch_add(1, Ordering::Relaxed);
                    if association.refuse(reason.clone()) {
                        tracing::warn!(peer = %remote, "{reason} (logged once)");
                    }
                } else {
                    tracing::debug!(peer = %remote, lane = ?lane.lane, %error, "connect failed");
                }
                drop(node_for_observe);
            }
        }
        let dropped = lane.reset_after_disconnect();
        record_lost(&system, remote, dropped, "(queued for a lost connection)");
        lane.set_backing_off(true);
        tokio::select! {
            () = tokio::time::sleep(backoff(attempt, max_backoff)) => attempt += 1,
            // The peer connected here: it listens now, whatever failed before.
            () = association.connect_now.notified() => attempt = 0,
            _ = shutdown.changed() => return,
        }
        lane.set_backing_off(false);
    }
}

/// The reconnection backoff: 100 ms doubling up to `max`.
fn backoff(attempt: u32, max: Duration) -> Duration {
    let base = Duration::from_millis(100).saturating_mul(1 << attempt.min(16));
    base.min(max)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::backoff;

    #[test]
    fn the_backoff_doubles_from_100_ms_up_to_its_bound() {
        let max = Duration::from_secs(5);
        let waits: Vec<u128> = (0..8).map(|a| backoff(a, max).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        assert_eq!(
            backoff(u32::MAX, max),
            max,
            "no overflow however long it retries"
        );
    }
}
