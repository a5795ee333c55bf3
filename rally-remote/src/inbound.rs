//! Inbound connections: handshake, then decode frames from large reads (with `rally-wire`'s
//! sans-I/O [`InboundDecoder`]) and deliver straight into mailboxes.
//!
//! The handshake asks the whole node (quarantine, associations, logging); the read loop after
//! it reaches the node only through [`ReadContext`], the few things reading needs, so it can
//! be driven in a test without a node.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Instant;

use bytes::{Buf, BytesMut};
use rally_actor::ActorId;
use rally_wire::{
    InboundDecoder, InboundFrame, Incarnation, NodeAddress, Observed, PeerInfo, ReplyStatus,
    ServerHandshake, SystemMessage,
};
use tokio::io::AsyncReadExt;
use tokio::sync::OwnedSemaphorePermit;

use crate::association::Association;
use crate::connection;
use crate::events::DownReason;
use crate::grain::{GrainReplyTo, GrainRequest, GrainService};
use crate::node::{Counters, NodeInner};
use crate::outbound::{ReadHold, ReplyRoute};
use crate::registry::{DeliverError, Exposed};
use crate::transport::{BoxStream, Incoming};

/// Frames of one read delivered under one hold: a large read is handed to its actors in
/// slices, so the first slice's actors run (and their sends leave) while the next is decoded,
/// and a batch the peer wrote large does not stay one batch for ever. A read of at least this
/// many frames also makes the reader yield its thread before it reads again.
const SLICE_FRAMES: usize = 256;
/// Bytes to have free before each read: reads are large so one syscall brings many frames.
const READ_CHUNK: usize = 64 * 1024;

/// What the read side of a connection needs from its node, and nothing more.
pub(crate) trait ReadContext: Send + Sync + 'static {
    /// Where arrivals and drops are counted.
    fn counters(&self) -> &Counters;
    /// The version of the exposed names: it changes on every expose and unexpose.
    fn exposed_version(&self) -> u64;
    /// The actor exposed as `name`.
    fn exposed(&self, name: &str) -> Option<Arc<dyn Exposed>>;
    /// A fresh id, for a watch on behalf of an actor on the peer.
    fn next_id(&self) -> ActorId;
    /// A stable id and path for the remote actor `name` on `node`.
    fn remote_identity(&self, node: &NodeAddress, name: &str) -> (ActorId, Arc<str>);
    /// The peer sent its leave notice on this association.
    fn peer_left(self: &Arc<Self>, association: &Arc<Association>);
    /// The version of what serves grain requests: it changes when another is installed.
    fn grains_version(&self) -> u64;
    /// What serves grain requests now (weakly: a connection keeps no service alive), with the
    /// version it was read at.
    fn grain_service(&self) -> (u64, Option<Weak<dyn GrainService>>);
    /// Keeps a grain tell that found no service, to hand it to the one installed next;
    /// `false` when this node does not (then a service may have been installed meanwhile).
    fn hold_grain_tell(&self, from: &rally_wire::UniqueAddress, request: &GrainRequest<'_>)
    -> bool;
    /// The peer `node` did not deliver a message this node sent to `recipient` there (its
    /// manifest `manifest`): nobody is exposed under that name.
    fn undelivered(&self, node: &NodeAddress, recipient: &str, manifest: &str);
}

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
    // It listens now: lanes backing off from a previous failure connect again at once.
    association.connect_now.notify_waiters();
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
        grains: None,
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

struct Connection<C> {
    node: Arc<C>,
    association: Arc<Association>,
    decoder: InboundDecoder,
    incarnation: Incarnation,
    generation: u64,
    targets: Vec<CachedTarget>,
    /// What serves grain requests, as resolved under a version of the node's grain service.
    grains: Option<(u64, Option<Weak<dyn GrainService>>)>,
    /// The authenticated sender, handed to every message delivered from this connection
    /// (`RemoteContext::remote_origin`).
    origin: rally_actor::Origin,
    peer: PeerInfo,
}

impl<C: ReadContext> Connection<C> {
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
                                &mut self.grains,
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
            let counters = self.node.counters();
            counters.reads.fetch_add(1, Ordering::Relaxed);
            counters.bytes_in.fetch_add(read as u64, Ordering::Relaxed);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_frame(
        node: &Arc<C>,
        association: &Arc<Association>,
        targets: &mut Vec<CachedTarget>,
        grains: &mut Option<(u64, Option<Weak<dyn GrainService>>)>,
        incarnation: Incarnation,
        generation: u64,
        peer: &PeerInfo,
        origin: &rally_actor::Origin,
        frame: InboundFrame<'_>,
        now: Instant,
    ) -> Result<(), InboundFailure> {
        let counters = node.counters();
        counters.frames_in.fetch_add(1, Ordering::Relaxed);
        match frame {
            InboundFrame::Message {
                recipient_id,
                recipient,
                manifest,
                request_id,
                context,
                payload,
            } => {
                let route = (request_id != 0).then(|| {
                    ReplyRoute::new(
                        association.reply_lane(peer.lane).clone(),
                        generation,
                        request_id,
                    )
                });
                let Some(target) = resolve(&**node, targets, recipient_id, recipient) else {
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
                let context = context.as_ref().map(crate::context::read);
                if let Err(error) = target.deliver(manifest, payload, route, origin, context) {
                    let status = match &error {
                        DeliverError::UnknownManifest(_) => {
                            counters.unknown_manifest.fetch_add(1, Ordering::Relaxed);
                            ReplyStatus::UnknownManifest
                        }
                        DeliverError::Decode { .. } => {
                            counters.decode_failed.fetch_add(1, Ordering::Relaxed);
                            ReplyStatus::DecodeFailed
                        }
                        DeliverError::Undelivered(_) => {
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
            InboundFrame::GrainRequest {
                request_id,
                kind,
                manifest,
                identity,
                hops,
                wait_ms,
                flags,
                context,
                payload,
            } => {
                let context = context.as_ref().map(crate::context::read);
                let request = GrainRequest {
                    kind,
                    manifest,
                    identity,
                    hops,
                    wait: (wait_ms > 0).then(|| std::time::Duration::from_millis(wait_ms)),
                    flags,
                    context: context.as_ref(),
                    payload,
                };
                let version = node.grains_version();
                if !matches!(grains, Some((seen, _)) if *seen == version) {
                    *grains = Some(node.grain_service());
                }
                let service = |grains: &Option<(u64, Option<Weak<dyn GrainService>>)>| {
                    grains
                        .as_ref()
                        .and_then(|(_, service)| service.as_ref())
                        .and_then(Weak::upgrade)
                };
                let mut found = service(grains);
                // A tell that comes before the node's virtual-actor runtime starts is kept for
                // it, if the node holds them; if it stopped holding meanwhile, the runtime
                // has just been installed.
                if found.is_none() && request_id == 0 {
                    if node.hold_grain_tell(&peer.peer, &request) {
                        return Ok(());
                    }
                    *grains = Some(node.grain_service());
                    found = service(grains);
                }
                match found {
                    Some(service) => service.request(
                        &peer.peer,
                        request,
                        (request_id != 0).then(|| {
                            GrainReplyTo::new(ReplyRoute::new(
                                association.reply_lane(peer.lane).clone(),
                                generation,
                                request_id,
                            ))
                        }),
                    ),
                    None => {
                        counters.unknown_recipient.fetch_add(1, Ordering::Relaxed);
                        if request_id != 0 {
                            let lane = association.reply_lane(peer.lane);
                            let _ = lane.push_reply::<()>(
                                generation,
                                request_id,
                                Err(ReplyStatus::UnknownRecipient),
                            );
                        }
                    }
                }
            }
            InboundFrame::Reply {
                request_id,
                status,
                payload,
            } => association.complete(request_id, status, payload),
            InboundFrame::Heartbeat(_) => association.heartbeat(incarnation, now),
            InboundFrame::System(msg) => on_system(&**node, association, generation, peer, msg),
            InboundFrame::Leave => node.peer_left(association),
        }
        Ok(())
    }
}

/// The exposed actor behind `recipient_id` on this connection, resolving `name` again whenever
/// the node's exposed names changed since the last time (a name exposed late is found, a name
/// reused reaches its new actor).
fn resolve<'t>(
    node: &impl ReadContext,
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
    node: &impl ReadContext,
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
            let id = node.next_id();
            association
                .remote_watchers
                .lock()
                .insert((watchee.clone(), watcher), id);
            target.watch(Arc::new(RemoteWatcher {
                id,
                watchee,
                generation,
                lane: control,
            }));
        }
        SystemMessage::Unwatch { watchee, watcher } => {
            let removed = association
                .remote_watchers
                .lock()
                .remove(&(watchee.clone(), watcher));
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

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use bytes::BytesMut;
    use rally_actor::ActorId;
    use rally_wire::{
        FrameKind, InboundDecoder, Incarnation, Lane, MessageHeader, NodeAddress, PeerInfo,
        PhiAccrualConfig, UniqueAddress, begin_frame, encode_define_manifest,
        encode_define_recipient, encode_leave, finish_frame, write_message_header,
    };
    use tokio::io::AsyncWriteExt;

    use super::{Connection, ReadContext};
    use crate::association::Association;
    use crate::node::Counters;
    use crate::registry::Exposed;
    use crate::transport::BoxStream;

    /// A node with nothing exposed that counts leave notices.
    #[derive(Default)]
    struct Bare {
        counters: Counters,
        left: AtomicUsize,
    }

    impl ReadContext for Bare {
        fn counters(&self) -> &Counters {
            &self.counters
        }

        fn exposed_version(&self) -> u64 {
            0
        }

        fn exposed(&self, _name: &str) -> Option<Arc<dyn Exposed>> {
            None
        }

        fn next_id(&self) -> ActorId {
            unreachable!("the test sends no watch")
        }

        fn remote_identity(&self, _node: &NodeAddress, _name: &str) -> (ActorId, Arc<str>) {
            unreachable!("the test ends no generation")
        }

        fn peer_left(self: &Arc<Self>, _association: &Arc<Association>) {
            self.left.fetch_add(1, Ordering::Relaxed);
        }

        fn grains_version(&self) -> u64 {
            0
        }

        fn grain_service(&self) -> (u64, Option<std::sync::Weak<dyn crate::grain::GrainService>>) {
            (0, None)
        }

        fn hold_grain_tell(
            &self,
            _from: &UniqueAddress,
            _request: &crate::grain::GrainRequest<'_>,
        ) -> bool {
            false
        }

        fn undelivered(&self, _node: &NodeAddress, _recipient: &str, _manifest: &str) {
            unreachable!("the test's peer exposes nothing it could be told of")
        }
    }

    #[tokio::test]
    async fn a_message_to_no_one_is_counted_and_a_leave_notice_reaches_the_node() {
        let peer = UniqueAddress {
            address: "rally://peer@127.0.0.1:1".parse().unwrap(),
            incarnation: Incarnation(7),
        };
        let association = Arc::new(Association::new(
            peer.address.clone(),
            1,
            1 << 20,
            1 << 20,
            PhiAccrualConfig::default(),
            tokio::sync::broadcast::channel(4).0,
        ));
        let (_, generation, _) = association.observe(peer.incarnation, |_| unreachable!());
        let node = Arc::new(Bare::default());
        let mut connection = Connection {
            node: node.clone(),
            association,
            decoder: InboundDecoder::new(1 << 20, Duration::from_secs(5)),
            incarnation: peer.incarnation,
            generation,
            targets: Vec::new(),
            grains: None,
            origin: Arc::new(peer.clone()),
            peer: PeerInfo {
                peer,
                lane: Lane::Ordinary(0),
                max_frame_len: 1 << 20,
            },
        };
        let (mut sender, reader) = tokio::io::duplex(1 << 16);
        let mut out = BytesMut::new();
        encode_define_recipient(&mut out, 1, "nobody");
        encode_define_manifest(&mut out, 1, "test.Nothing");
        let mark = begin_frame(&mut out, FrameKind::Message);
        let header = MessageHeader {
            recipient: 1,
            manifest: 1,
            request_id: 0,
        };
        write_message_header(&mut out, &header);
        finish_frame(&mut out, mark, 1 << 20).unwrap();
        encode_leave(&mut out);
        sender.write_all(&out).await.unwrap();
        drop(sender);
        let mut stream: BoxStream = Box::pin(reader);
        connection.run(&mut stream, BytesMut::new()).await.unwrap();
        assert_eq!(node.counters.unknown_recipient.load(Ordering::Relaxed), 1);
        assert_eq!(node.counters.frames_in.load(Ordering::Relaxed), 2);
        assert_eq!(node.left.load(Ordering::Relaxed), 1);
    }
}
