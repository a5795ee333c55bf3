//! Inbound connections: handshake, then decode frames from large reads and deliver straight
//! into mailboxes.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::{Buf, BytesMut};
use rally_wire::{
    FrameKind, InboundTable, PeerInfo, ReplyStatus, ServerHandshake, SystemMessage, split_frame,
};
use tokio::io::AsyncReadExt;

use crate::association::Association;
use crate::connection;
use crate::node::NodeInner;
use crate::outbound::ReplyRoute;
use crate::registry::{Exposed, InboundError};
use crate::transport::{BoxStream, Incoming};

/// Entries a peer may define per connection table: far above any real use, and a bound on the
/// memory a peer can make us hold.
const MAX_TABLE_ENTRIES: u32 = 65_536;
/// Frames decoded from one read after which the reader yields its thread.
const YIELD_AFTER_FRAMES: usize = 256;
/// Bytes to have free before each read: reads are large so one syscall brings many frames.
const READ_CHUNK: usize = 64 * 1024;

/// Why an inbound connection was closed.
#[derive(Debug, thiserror::Error)]
enum InboundFailure {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("handshake: {0}")]
    Connect(#[from] connection::ConnectError),
    #[error("frame: {0}")]
    Frame(#[from] rally_wire::FrameError),
    #[error("protocol: {0}")]
    Protocol(String),
    #[error("no complete frame within {0:?} after a partial one")]
    Stalled(std::time::Duration),
}

/// Serves one inbound connection until it closes or misbehaves.
pub(crate) async fn serve(node: Arc<NodeInner>, incoming: Incoming, remote: String) {
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
    let quarantined = node.quarantine_set();
    handshake.set_refused(move |peer| {
        quarantined
            .lock()
            .expect("quarantine lock is never poisoned")
            .contains(&(peer.address.clone(), peer.incarnation))
    });
    let accepted = connection::server(
        &mut stream,
        handshake,
        node.config.max_frame_bytes,
        node.config.handshake_timeout,
    )
    .await;
    let (peer, buf) = match accepted {
        Ok(accepted) => accepted,
        Err(error) => {
            node.counters
                .handshake_failures
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%remote, %error, "inbound handshake failed; connection closed");
            return;
        }
    };
    let association = node.association(&peer.peer.address);
    node.observe(&association, &peer.peer);
    let mut connection = Connection {
        node: node.clone(),
        association,
        peer: peer.clone(),
        recipients: InboundTable::new(MAX_TABLE_ENTRIES),
        manifests: InboundTable::new(MAX_TABLE_ENTRIES),
    };
    // The stream stays open until the failure is counted: a peer that sees the close can rely
    // on the node's figures already showing why.
    if let Err(error) = connection.run(&mut stream, buf).await {
        match &error {
            InboundFailure::Frame(_) | InboundFailure::Protocol(_) => {
                node.counters
                    .protocol_errors
                    .fetch_add(1, Ordering::Relaxed);
                node.quarantine(&peer.peer, &error.to_string());
            }
            _ => {}
        }
        tracing::warn!(%remote, peer = %peer.peer.address, %error, "inbound connection closed");
    }
    drop(stream);
}

struct Connection {
    node: Arc<NodeInner>,
    association: Arc<Association>,
    peer: PeerInfo,
    recipients: InboundTable<Option<Arc<dyn Exposed>>>,
    manifests: InboundTable<String>,
}

impl Connection {
    async fn run(
        &mut self,
        stream: &mut BoxStream,
        mut buf: BytesMut,
    ) -> Result<(), InboundFailure> {
        let max = self.node.config.max_frame_bytes;
        let stall = self.node.config.partial_frame_timeout;
        loop {
            let mut consumed = 0;
            let mut frames = 0usize;
            while let Some((kind, body, used)) = split_frame(&buf[consumed..], max)? {
                self.on_frame(kind, body)?;
                consumed += used;
                frames += 1;
            }
            buf.advance(consumed);
            // tokio's cooperative budget counts reads, not the work done per read: after a
            // large batch, give the thread to others (heartbeats, actors) before reading more.
            if frames >= YIELD_AFTER_FRAMES {
                tokio::task::yield_now().await;
            }
            // Room for the rest of a large frame in one step (its length was checked against
            // the maximum by `split_frame`), else for one more large read.
            let announced = buf.get(..4).map_or(0, |p| {
                u32::from_le_bytes(p.try_into().expect("4 bytes")) as usize + 4
            });
            let wanted = announced.saturating_sub(buf.len()).max(READ_CHUNK / 4);
            if buf.capacity() - buf.len() < wanted {
                buf.reserve(wanted.max(READ_CHUNK));
            }
            let read = if buf.is_empty() {
                stream.read_buf(&mut buf).await?
            } else {
                tokio::time::timeout(stall, stream.read_buf(&mut buf))
                    .await
                    .map_err(|_| InboundFailure::Stalled(stall))??
            };
            if read == 0 {
                return Ok(());
            }
            let counters = &self.node.counters;
            counters.reads.fetch_add(1, Ordering::Relaxed);
            counters.bytes_in.fetch_add(read as u64, Ordering::Relaxed);
        }
    }

    fn on_frame(&mut self, kind: FrameKind, body: &[u8]) -> Result<(), InboundFailure> {
        self.node.counters.frames_in.fetch_add(1, Ordering::Relaxed);
        let bad =
            |e: rally_wire::DecodeError| InboundFailure::Protocol(format!("{kind:?} frame: {e}"));
        match kind {
            FrameKind::Message => {
                let (header, payload) = rally_wire::decode_message(body).map_err(bad)?;
                let target = self.recipients.resolve(header.recipient).ok_or_else(|| {
                    InboundFailure::Protocol(format!(
                        "recipient id {} used before it was defined",
                        header.recipient
                    ))
                })?;
                let manifest = self.manifests.resolve(header.manifest).ok_or_else(|| {
                    InboundFailure::Protocol(format!(
                        "manifest id {} used before it was defined",
                        header.manifest
                    ))
                })?;
                let route = (header.request_id != 0).then(|| ReplyRoute {
                    lane: self.association.reply_lane(self.peer.lane).clone(),
                    request_id: header.request_id,
                });
                let counters = &self.node.counters;
                let Some(target) = target else {
                    counters.unknown_recipient.fetch_add(1, Ordering::Relaxed);
                    if let Some(route) = route {
                        let _ = route
                            .lane
                            .push_reply::<()>(route.request_id, Err(ReplyStatus::UnknownRecipient));
                    }
                    return Ok(());
                };
                // A message this node cannot decode or deliver is dropped and counted; the
                // connection lives on (it is the sender's bug, not a protocol violation).
                if let Err(error) = target.deliver(manifest, payload, route) {
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
                    tracing::debug!(peer = %self.peer.peer.address, %error, "inbound message dropped");
                    if header.request_id != 0 {
                        let lane = self.association.reply_lane(self.peer.lane);
                        let _ = lane.push_reply::<()>(header.request_id, Err(status));
                    }
                }
            }
            FrameKind::Reply => {
                let (header, payload) = rally_wire::decode_reply(body).map_err(bad)?;
                self.association
                    .complete(header.request_id, header.status, payload);
            }
            FrameKind::DefineRecipient => {
                let (id, name) = rally_wire::decode_define_recipient(body).map_err(bad)?;
                let target = self.node.exposed(name);
                self.recipients
                    .define(id, target)
                    .map_err(|e| InboundFailure::Protocol(e.to_string()))?;
            }
            FrameKind::DefineManifest => {
                let (id, manifest) = rally_wire::decode_define_manifest(body).map_err(bad)?;
                self.manifests
                    .define(id, manifest.to_owned())
                    .map_err(|e| InboundFailure::Protocol(e.to_string()))?;
            }
            FrameKind::Heartbeat => {
                rally_wire::decode_heartbeat(body).map_err(bad)?;
                self.association.heartbeat(Instant::now());
            }
            FrameKind::System => self.on_system(rally_wire::decode_system(body).map_err(bad)?),
            FrameKind::Leave => self.node.declare_down(&self.association, "the peer left"),
            other => {
                return Err(InboundFailure::Protocol(format!(
                    "{other:?} frame after the handshake"
                )));
            }
        }
        Ok(())
    }

    fn on_system(&mut self, msg: SystemMessage) {
        let control = self.association.control().clone();
        match msg {
            SystemMessage::Watch { watchee, watcher } => {
                let Some(target) = self.node.exposed(&watchee) else {
                    let _ = control.push_system(&SystemMessage::Terminated { actor: watchee });
                    return;
                };
                let id = self.node.system.next_id();
                self.association
                    .remote_watchers
                    .lock()
                    .expect("watcher lock is never poisoned")
                    .insert((watchee.clone(), watcher), id);
                target.watch(Arc::new(RemoteWatcher {
                    id,
                    watchee,
                    lane: control,
                }));
            }
            SystemMessage::Unwatch { watchee, watcher } => {
                let removed = self
                    .association
                    .remote_watchers
                    .lock()
                    .expect("watcher lock is never poisoned")
                    .remove(&(watchee.clone(), watcher));
                if let (Some(id), Some(target)) = (removed, self.node.exposed(&watchee)) {
                    target.unwatch(id);
                }
            }
            SystemMessage::Stop { actor } => match self.node.exposed(&actor) {
                Some(target) => target.stop(),
                None => {
                    tracing::debug!(peer = %self.peer.peer.address, %actor, "stop for an unknown actor")
                }
            },
            SystemMessage::Terminated { actor } => {
                let node = &self.node;
                let remote = self.association.remote.clone();
                self.association
                    .terminated(&actor, |name| node.remote_identity(&remote, name));
            }
        }
    }
}

/// Watches a local actor on behalf of an actor on the peer node.
struct RemoteWatcher {
    id: rally_actor::ActorId,
    watchee: String,
    lane: Arc<crate::outbound::OutboundLane>,
}

impl rally_actor::TerminationSink for RemoteWatcher {
    fn watcher(&self) -> rally_actor::ActorId {
        self.id
    }

    fn notify(&self, _terminated: rally_actor::Terminated) {
        let _ = self.lane.push_system(&SystemMessage::Terminated {
            actor: self.watchee.clone(),
        });
    }
}
