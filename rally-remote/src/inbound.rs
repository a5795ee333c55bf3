//! Inbound connections: handshake, then decode frames from large reads (with `rally-wire`'s
//! sans-I/O [`InboundDecoder`]) and deliver straight into mailboxes.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::{Buf, BytesMut};
use rally_wire::{
    InboundDecoder, InboundFrame, Incarnation, Observed, PeerInfo, ReplyStatus, ServerHandshake,
    SystemMessage,
};
use tokio::io::AsyncReadExt;
use tokio::sync::OwnedSemaphorePermit;

use crate::association::{Association, lock};
use crate::connection;
use crate::events::DownReason;
use crate::node::NodeInner;
use crate::outbound::{ReadHold, ReplyRoute};
use crate::registry::{Exposed, InboundError};
use crate::transport::{BoxStream, Incoming};

/// Frames of one read delivered under one hold: a large read is handed to its actors in
/// slices, so the first slice's actors run (and their sends leave) while the next is decoded,
/// and a batch the peer wrote large does not stay one batch for ever. A read of at least this
/// many frames also makes the reader yield its thread before it reads again.
const SLICE_FRAMES: usize = 256;
/// Bytes to have free before each read: reads are large so one syscall brings many frames.
const READ_CHUNK: usize = 64 * 1024;

/// Why an inbound connection was closed.
#[derive(Debug, thiserror::Error)]
enum InboundFailure {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("protocol: {0}")]
    Protocol(#[from] rally_wire::InboundError),
    #[error("the peer's incarnation was declared down here; it must restart to be admitted")]
    NotAdmitted,
}

/// Serves one inbound connection until it closes or misbehaves. `permit` is a slot among the
/// connections not yet authenticated; it is given back once the handshake is done.
pub(crate) async fn serve(
    node: Arc<NodeInner>,
    incoming: Incoming,
    remote: String,
    permit: OwnedSemaphorePermit,
) {
    let deadline = node.config.handshake_timeout;
    let mut stream = match tokio::time::timeout(deadline, incoming).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => {
            node.counters
                .handshake_failures
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%remote, %error, "inbound connection setup failed (TLS?); closed");
            return;
        }
        Err(_) => {
            node.counters
                .handshake_failures
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%remote, "inbound connection setup timed out; closed");
            return;
        }
    };
    let mut handshake = ServerHandshake::new(node.handshake_config(), rand::random());
    let weak = Arc::downgrade(&node);
    handshake.set_refused(move |peer| {
        weak.upgrade()
            .is_some_and(|node| node.is_quarantined(&peer.address, peer.incarnation))
    });
    let accepted = connection::server(&mut stream, handshake, node.config.handshake_timeout).await;
    drop(permit);
    let (peer, buf) = match accepted {
        Ok(accepted) => accepted,
        Err(error) => {
            node.counters
                .handshake_failures
                .fetch_add(1, Ordering::Relaxed);
            node.report_handshake_failure(&remote, &error);
            return;
        }
    };
    let association = node.association(&peer.peer.address);
    let (observed, generation) = node.observe(&association, &peer.peer);
    if observed == Observed::Quarantined {
        tracing::debug!(%remote, peer = %peer.peer.address, "a quarantined incarnation connected; closed");
        return;
    }
    // Counted while open, so a leave notice on the control lane waits for what this
    // connection still carries (see `NodeInner::peer_left`).
    let _open = association.inbound_opened(peer.lane);
    let mut connection = Connection {
        node: node.clone(),
        association,
        decoder: InboundDecoder::new(
            node.config.max_frame_bytes,
            node.config.partial_frame_timeout,
        ),
        incarnation: peer.peer.incarnation,
        generation,
        targets: Vec::new(),
        origin: Arc::new(peer.peer.clone()),
        peer: peer.clone(),
    };
    // The stream stays open until the failure is counted: a peer that sees the close can rely
    // on the node's figures already showing why.
    if let Err(error) = connection.run(&mut stream, buf).await {
        if let InboundFailure::Protocol(_) = &error {
            node.counters
                .protocol_errors
                .fetch_add(1, Ordering::Relaxed);
            node.quarantine(&peer.peer, DownReason::ProtocolViolation(error.to_string()));
        }
        tracing::warn!(%remote, peer = %peer.peer.address, %error, "inbound connection closed");
    }
    drop(stream);
}

/// A recipient resolved on this connection, with the version of the exposed names it was
/// resolved under: a later expose or unexpose makes it resolve again.
type CachedTarget = Option<(u64, Option<Arc<dyn Exposed>>)>;

struct Connection {
    node: Arc<NodeInner>,
    association: Arc<Association>,
    decoder: InboundDecoder,
    incarnation: Incarnation,
    generation: u64,
    targets: Vec<CachedTarget>,
    /// The authenticated sender, handed to every message delivered from this connection
    /// (`RemoteContext::remote_origin`).
    origin: rally_actor::Origin,
    peer: PeerInfo,
}

impl Connection {
    async fn run(
        &mut self,
        stream: &mut BoxStream,
        mut buf: BytesMut,
    ) -> Result<(), InboundFailure> {
        let mut now = crate::now();
        loop {
            // Traffic of a life declared down is never delivered, however long the connection
            // stayed open (a paused peer that wakes up).
            if !self.association.admits(self.incarnation) {
                return Err(InboundFailure::NotAdmitted);
            }
            // The read's deliveries, a slice at a time: each slice's deliveries wake their
            // actors once, when it is delivered, and hold what those actors send until they
            // have all run; then it leaves in one write (see `outbound::gate`).
            let mut delivered = 0;
            while !buf.is_empty() {
                let mut failure = None;
                let read = rally_actor::hold::Hold::new(ReadHold::default());
                let (consumed, frames) = rally_actor::hold::scope(read, || {
                    self.decoder
                        .decode_at_most(&buf, now, SLICE_FRAMES, |frame| {
                            if let Err(error) = Self::on_frame(
                                &self.node,
                                &self.association,
                                &mut self.targets,
                                self.incarnation,
                                self.generation,
                                &self.peer,
                                &self.origin,
                                frame,
                                now,
                            ) {
                                failure.get_or_insert(error);
                            }
                        })
                })?;
                if let Some(failure) = failure {
                    return Err(failure);
                }
                buf.advance(consumed);
                delivered += frames;
                if frames < SLICE_FRAMES {
                    break; // no whole frame is left
                }
            }
            // tokio's cooperative budget counts reads, not the work done per read: after a
            // large batch, give the thread to others (heartbeats, actors) before reading more.
            if delivered >= SLICE_FRAMES {
                tokio::task::yield_now().await;
            }
            // Room for the rest of a large frame in one step (its length was checked against
            // the maximum by the decoder), else for one more large read.
            let announced = buf.get(..4).map_or(0, |p| {
                u32::from_le_bytes(p.try_into().expect("4 bytes")) as usize + 4
            });
            let wanted = announced.saturating_sub(buf.len()).max(READ_CHUNK / 4);
            if buf.capacity() - buf.len() < wanted {
                buf.reserve(wanted.max(READ_CHUNK));
            }
            let read = match self.decoder.deadline() {
                None => stream.read_buf(&mut buf).await?,
                Some(deadline) => {
                    match tokio::time::timeout_at(deadline.into(), stream.read_buf(&mut buf)).await
                    {
                        Ok(read) => read?,
                        Err(_) => {
                            self.decoder.check(crate::now())?;
                            continue;
                        }
                    }
                }
            };
            if read == 0 {
                return Ok(());
            }
            now = crate::now();
            let counters = &self.node.counters;
            counters.reads.fetch_add(1, Ordering::Relaxed);
            counters.bytes_in.fetch_add(read as u64, Ordering::Relaxed);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_frame(
        node: &Arc<NodeInner>,
        association: &Arc<Association>,
        targets: &mut Vec<CachedTarget>,
        incarnation: Incarnation,
        generation: u64,
        peer: &PeerInfo,
        origin: &rally_actor::Origin,
        frame: InboundFrame<'_>,
        now: Instant,
    ) -> Result<(), InboundFailure> {
        let counters = &node.counters;
        counters.frames_in.fetch_add(1, Ordering::Relaxed);
        match frame {
            InboundFrame::Message {
                recipient_id,
                recipient,
                manifest,
                request_id,
                payload,
            } => {
                let route = (request_id != 0).then(|| {
                    ReplyRoute::new(
                        association.reply_lane(peer.lane).clone(),
                        generation,
                        request_id,
                    )
                });
                let Some(target) = resolve(node, targets, recipient_id, recipient) else {
                    // Nobody is exposed under that name: the sender hears it at once, as a
                    // dead letter (and an asker as the reply's error), not at a timeout.
                    counters.unknown_recipient.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(peer = %peer.peer.address, %recipient, "a message for a name nobody exposed");
                    let _ = association.control().push_system(
                        generation,
                        &SystemMessage::Undelivered {
                            recipient: recipient.to_owned(),
                            manifest: manifest.to_owned(),
                        },
                    );
                    if let Some(route) = route {
                        let _ = route.lane().push_reply::<()>(
                            generation,
                            route.request_id,
                            Err(ReplyStatus::UnknownRecipient),
                        );
                    }
                    return Ok(());
                };
                // A message this node cannot decode or deliver is dropped and counted; the
                // connection lives on (it is the sender's bug, not a protocol violation).
                if let Err(error) = target.deliver(manifest, payload, route, origin) {
                    let status = match &error {
                        InboundError::UnknownManifest(_) => {
                            counters.unknown_manifest.fetch_add(1, Ordering::Relaxed);
                            ReplyStatus::UnknownManifest
                        }
                        InboundError::Decode { .. } => {
                            counters.decode_failed.fetch_add(1, Ordering::Relaxed);
                            ReplyStatus::DecodeFailed
                        }
                        InboundError::Undelivered(_) => {
                            counters.undelivered.fetch_add(1, Ordering::Relaxed);
                            ReplyStatus::RecipientGone
                        }
                    };
                    tracing::debug!(peer = %peer.peer.address, %error, "inbound message dropped");
                    if request_id != 0 {
                        let lane = association.reply_lane(peer.lane);
                        let _ = lane.push_reply::<()>(generation, request_id, Err(status));
                    }
                }
            }
            InboundFrame::Reply {
                request_id,
                status,
                payload,
            } => association.complete(request_id, status, payload),
            InboundFrame::Heartbeat(_) => association.heartbeat(incarnation, now),
            InboundFrame::System(msg) => on_system(node, association, generation, peer, msg),
            InboundFrame::Leave => node.peer_left(association),
        }
        Ok(())
    }
}

/// The exposed actor behind `recipient_id` on this connection, resolving `name` again whenever
/// the node's exposed names changed since the last time (a name exposed late is found, a name
/// reused reaches its new actor).
fn resolve<'t>(
    node: &NodeInner,
    targets: &'t mut Vec<CachedTarget>,
    recipient_id: u32,
    name: &str,
) -> Option<&'t Arc<dyn Exposed>> {
    let index = recipient_id as usize;
    if targets.len() <= index {
        targets.resize_with(index + 1, || None);
    }
    let version = node.exposed_version();
    let slot = &mut targets[index];
    if !matches!(slot, Some((cached, _)) if *cached == version) {
        *slot = Some((version, node.exposed(name)));
    }
    slot.as_ref().and_then(|(_, target)| target.as_ref())
}

fn on_system(
    node: &Arc<NodeInner>,
    association: &Arc<Association>,
    generation: u64,
    peer: &PeerInfo,
    msg: SystemMessage,
) {
    let control = association.control().clone();
    match msg {
        SystemMessage::Watch { watchee, watcher } => {
            let Some(target) = node.exposed(&watchee) else {
                let _ =
                    control.push_system(generation, &SystemMessage::Terminated { actor: watchee });
                return;
            };
            let id = node.system.next_id();
            lock(&association.remote_watchers).insert((watchee.clone(), watcher), id);
            target.watch(Arc::new(RemoteWatcher {
                id,
                watchee,
                generation,
                lane: control,
            }));
        }
        SystemMessage::Unwatch { watchee, watcher } => {
            let removed = lock(&association.remote_watchers).remove(&(watchee.clone(), watcher));
            if let (Some(id), Some(target)) = (removed, node.exposed(&watchee)) {
                target.unwatch(id);
            }
        }
        SystemMessage::Stop { actor } => match node.exposed(&actor) {
            Some(target) => target.stop(),
            None => {
                tracing::debug!(peer = %peer.peer.address, %actor, "stop for an unknown actor")
            }
        },
        SystemMessage::Terminated { actor } => {
            let remote = association.remote.clone();
            association.terminated(&actor, |name| node.remote_identity(&remote, name));
        }
        SystemMessage::Undelivered {
            recipient,
            manifest,
        } => node.undelivered(&association.remote, &recipient, &manifest),
    }
}

/// Watches a local actor on behalf of an actor on the peer node.
struct RemoteWatcher {
    id: rally_actor::ActorId,
    watchee: String,
    generation: u64,
    lane: Arc<crate::outbound::OutboundLane>,
}

impl rally_actor::TerminationSink for RemoteWatcher {
    fn watcher(&self) -> rally_actor::ActorId {
        self.id
    }

    fn notify(&self, _terminated: rally_actor::Terminated) {
        let _ = self.lane.push_system(
            self.generation,
            &SystemMessage::Terminated {
                actor: self.watchee.clone(),
            },
        );
    }
}
