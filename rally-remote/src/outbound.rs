//! Outbound lanes and their writers: natural batching with no timer and no threshold.
//!
//! Senders encode their frame straight into the lane's shared buffer (under a short lock) and
//! wake the writer only when the buffer was empty. The writer yields once (so the tasks already
//! runnable add their frames), then swaps the whole buffer for its spare one and writes it with
//! one call. Under light load each message goes out at once; under
//! heavy load everything that queued during one write goes out in the next, so batches grow by
//! themselves. Steady state allocates nothing: the two buffers are reused.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::BytesMut;
use rally_actor::ReplyError;
use rally_wire::{
    FastHashMap, FrameKind, Lane, MessageHeader, OutboundTable, ReplyHeader, ReplyStatus,
    SystemMessage, begin_frame, finish_frame,
};
use serde::Serialize;
use tokio::io::AsyncWriteExt;
use tokio::sync::Notify;

use crate::codec;
use crate::transport::BoxStream;

/// Initial size of each lane buffer; it grows to the largest batch and stays there.
const INITIAL_BUFFER: usize = 64 * 1024;
/// A buffer that grew past this (a large message went through) is replaced by a fresh one after
/// the write, so one 10 MB message does not pin 10 MB per lane forever.
const SHRINK_ABOVE: usize = 4 * 1024 * 1024;

/// Why a frame was not queued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PushError {
    /// The lane's bounded buffer is full.
    #[error("the outbound lane is full")]
    Full,
    /// The encoded message exceeds the maximum frame size.
    #[error("the message encodes to {size} bytes, more than the maximum of {max}")]
    TooLarge {
        /// Encoded size.
        size: usize,
        /// The configured maximum.
        max: u32,
    },
    /// The message failed to encode.
    #[error("the message failed to encode: {0}")]
    Encode(String),
    /// The association is closed.
    #[error("the association is closed")]
    Closed,
}

/// A recipient as the sender knows it: a process-unique number for the remote actor, and its
/// name on the wire.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecipientKey<'a> {
    pub(crate) id: u64,
    pub(crate) name: &'a str,
}

/// Shortcuts to the compression tables' ids.
#[derive(Debug, Default)]
struct KnownIds {
    recipients: FastHashMap<u64, u32>,
    manifests: FastHashMap<usize, u32>,
}

/// Counters of one lane.
#[derive(Debug, Default)]
pub(crate) struct LaneStats {
    pub(crate) messages: AtomicU64,
    pub(crate) writes: AtomicU64,
    pub(crate) bytes: AtomicU64,
    pub(crate) dropped: AtomicU64,
}

/// One outbound lane to one peer.
pub(crate) struct OutboundLane {
    pub(crate) lane: Lane,
    state: Mutex<LaneState>,
    wakeup: Notify,
    max_frame: u32,
    capacity: usize,
    pub(crate) stats: LaneStats,
}

struct LaneState {
    buf: BytesMut,
    recipients: OutboundTable,
    /// Ids already resolved, by the ref's number and by the manifest's address.
    known: KnownIds,
    manifests: OutboundTable,
    /// Messages in `buf` (to count them as dead letters if the connection drops them).
    queued: u64,
    /// Frames of any kind in `buf` (the writer's sign of company).
    frames: u32,
    /// The buffer's frames use tables a connection has already seen.
    in_use: bool,
    closed: bool,
}

impl OutboundLane {
    pub(crate) fn new(lane: Lane, max_frame: u32, capacity: usize) -> Self {
        Self {
            lane,
            state: Mutex::new(LaneState {
                buf: BytesMut::with_capacity(INITIAL_BUFFER),
                recipients: OutboundTable::default(),
                known: KnownIds::default(),
                manifests: OutboundTable::default(),
                queued: 0,
                frames: 0,
                in_use: false,
                closed: false,
            }),
            wakeup: Notify::new(),
            max_frame,
            capacity,
            stats: LaneStats::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, LaneState> {
        self.state
            .lock()
            .expect("lane lock is never poisoned: encoding under it does not panic")
    }

    /// Appends frames with `write` under the lock, then wakes the writer if it may be idle.
    fn push(
        &self,
        count_as_message: bool,
        write: impl FnOnce(&mut LaneState) -> Result<(), PushError>,
    ) -> Result<(), PushError> {
        let was_empty = {
            let mut state = self.lock();
            if state.closed {
                return Err(PushError::Closed);
            }
            if state.buf.len() >= self.capacity {
                self.stats.dropped.fetch_add(1, Ordering::Relaxed);
                return Err(PushError::Full);
            }
            let was_empty = state.buf.is_empty();
            write(&mut state)?;
            state.frames = state.frames.saturating_add(1);
            if count_as_message {
                state.queued += 1;
            }
            was_empty
        };
        if count_as_message {
            self.stats.messages.fetch_add(1, Ordering::Relaxed);
        }
        if was_empty {
            self.wakeup.notify_one();
        }
        Ok(())
    }

    /// Queues a message frame for `recipient`, encoding the payload with `encode`.
    pub(crate) fn push_message(
        &self,
        recipient: RecipientKey<'_>,
        manifest: &'static str,
        request_id: u64,
        encode: impl FnOnce(&mut BytesMut) -> Result<(), postcard::Error>,
    ) -> Result<(), PushError> {
        let max = self.max_frame;
        self.push(true, |state| {
            let LaneState {
                buf,
                recipients,
                manifests,
                known,
                ..
            } = state;
            // The common case resolves by the ref's number and the manifest's address, without
            // hashing strings; the name tables decide the ids the first time.
            let recipient_id = match known.recipients.get(&recipient.id) {
                Some(&id) => id,
                None => {
                    let (id, new) = recipients.lookup_or_insert(recipient.name);
                    if new {
                        rally_wire::encode_define_recipient(buf, id, recipient.name);
                    }
                    known.recipients.insert(recipient.id, id);
                    id
                }
            };
            let manifest_key = manifest.as_ptr() as usize;
            let manifest_id = match known.manifests.get(&manifest_key) {
                Some(&id) => id,
                None => {
                    let (id, new) = manifests.lookup_or_insert(manifest);
                    if new {
                        rally_wire::encode_define_manifest(buf, id, manifest);
                    }
                    known.manifests.insert(manifest_key, id);
                    id
                }
            };
            let frame_start = buf.len();
            let mark = begin_frame(buf, FrameKind::Message);
            rally_wire::write_message_header(
                buf,
                &MessageHeader {
                    recipient: recipient_id,
                    manifest: manifest_id,
                    request_id,
                },
            );
            if let Err(error) = encode(buf) {
                // Nothing partial is ever left in the buffer.
                buf.truncate(frame_start);
                return Err(PushError::Encode(error.to_string()));
            }
            finish_frame(buf, mark, max)
                .map(drop)
                .map_err(|e| PushError::TooLarge { size: e.size, max })
        })
    }

    /// Queues a reply frame.
    pub(crate) fn push_reply<R: Serialize>(
        &self,
        request_id: u64,
        reply: Result<&R, ReplyStatus>,
    ) -> Result<(), PushError> {
        let max = self.max_frame;
        self.push(false, |state| {
            let buf = &mut state.buf;
            let frame_start = buf.len();
            let mark = begin_frame(buf, FrameKind::Reply);
            match reply {
                Ok(value) => {
                    rally_wire::write_reply_header(
                        buf,
                        &ReplyHeader {
                            request_id,
                            status: ReplyStatus::Ok,
                        },
                    );
                    if let Err(error) = codec::encode_into(value, buf) {
                        // Replace the half-written frame by an error reply, so the asker hears.
                        buf.truncate(frame_start);
                        let mark = begin_frame(buf, FrameKind::Reply);
                        rally_wire::write_reply_header(
                            buf,
                            &ReplyHeader {
                                request_id,
                                status: ReplyStatus::EncodeFailed,
                            },
                        );
                        finish_frame(buf, mark, max)
                            .map_err(|e| PushError::TooLarge { size: e.size, max })?;
                        return Err(PushError::Encode(error.to_string()));
                    }
                }
                Err(status) => {
                    rally_wire::write_reply_header(buf, &ReplyHeader { request_id, status })
                }
            }
            finish_frame(buf, mark, max)
                .map(drop)
                .map_err(|e| PushError::TooLarge { size: e.size, max })
        })
    }

    /// Queues a system message.
    pub(crate) fn push_system(&self, msg: &SystemMessage) -> Result<(), PushError> {
        self.push(false, |state| {
            rally_wire::encode_system(&mut state.buf, msg);
            Ok(())
        })
    }

    /// Queues a heartbeat.
    pub(crate) fn push_heartbeat(&self, sequence: u64) -> Result<(), PushError> {
        self.push(false, |state| {
            rally_wire::encode_heartbeat(&mut state.buf, sequence);
            Ok(())
        })
    }

    /// Queues a leave notice.
    pub(crate) fn push_leave(&self) -> Result<(), PushError> {
        self.push(false, |state| {
            rally_wire::encode_leave(&mut state.buf);
            Ok(())
        })
    }

    /// Stops taking frames; the writer flushes what is queued, then ends.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.wakeup.notify_one();
    }

    /// Whether every queued byte has been written (or dropped).
    pub(crate) fn is_drained(&self) -> bool {
        self.lock().buf.is_empty()
    }

    /// A connection is gone: frames already encoded for it reference its compression tables,
    /// so they are dropped (at-most-once) and the tables start again. Returns how many
    /// messages were dropped.
    pub(crate) fn reset_after_disconnect(&self) -> u64 {
        let mut state = self.lock();
        if !state.in_use {
            return 0;
        }
        let dropped = state.queued;
        state.buf.clear();
        state.queued = 0;
        state.frames = 0;
        state.recipients = OutboundTable::default();
        state.known = KnownIds::default();
        state.manifests = OutboundTable::default();
        state.in_use = false;
        self.stats.dropped.fetch_add(dropped, Ordering::Relaxed);
        dropped
    }

    /// Writes everything queued to `stream` until the lane closes or the stream fails.
    ///
    /// # Errors
    ///
    /// The stream's I/O error.
    pub(crate) async fn write_to(&self, stream: &mut BoxStream) -> std::io::Result<()> {
        let mut spare = BytesMut::with_capacity(INITIAL_BUFFER);
        // Whether the last write carried more than one frame: only then is company likely.
        let mut batching = false;
        loop {
            let wakeup = self.wakeup.notified();
            let (closed, frames) = {
                let mut state = self.lock();
                state.in_use = true;
                std::mem::swap(&mut state.buf, &mut spare);
                state.queued = 0;
                (state.closed, std::mem::take(&mut state.frames))
            };
            if spare.is_empty() {
                if closed {
                    stream.flush().await?;
                    return Ok(());
                }
                wakeup.await;
                // While frames come in company, let the tasks that are already runnable
                // (typically the actors that woke us, and their peers) queue theirs first: the
                // wake-up put this task in front of them. One yield, no timer. A yield also
                // hands this task to the run queue, where another worker may steal it (a
                // cross-core wake-up), so when frames come alone (a paced sender, a quiet
                // link) the frame leaves at once instead.
                if batching {
                    tokio::task::yield_now().await;
                }
                continue;
            }
            batching = frames > 1;
            stream.write_all(&spare).await?;
            // A buffered stream may accept every byte yet hold some back: TLS takes the
            // plaintext and returns before its records are on the socket when the socket would
            // block. This connection is write-only, so nothing else would push them out; flush
            // (a no-op on plain TCP) before waiting for the next batch.
            stream.flush().await?;
            self.stats.writes.fetch_add(1, Ordering::Relaxed);
            self.stats
                .bytes
                .fetch_add(spare.len() as u64, Ordering::Relaxed);
            if spare.capacity() > SHRINK_ABOVE {
                spare = BytesMut::with_capacity(INITIAL_BUFFER);
            } else {
                spare.clear();
            }
        }
    }
}

/// Where the reply to one inbound request goes: the lane back to the requesting node.
pub(crate) struct ReplyRoute {
    pub(crate) lane: Arc<OutboundLane>,
    pub(crate) request_id: u64,
}

impl ReplyRoute {
    /// Encodes and queues the reply (or the reason there is none).
    pub(crate) fn send<R: Serialize>(self, result: Result<R, ReplyError>) {
        let outcome = match &result {
            Ok(value) => self.lane.push_reply(self.request_id, Ok(value)),
            Err(error) => self
                .lane
                .push_reply::<()>(self.request_id, Err(status_of(error))),
        };
        if let Err(error) = outcome {
            tracing::debug!(%error, request = self.request_id, "a reply could not be queued");
        }
    }
}

fn status_of(error: &ReplyError) -> ReplyStatus {
    match error {
        ReplyError::Stopped => ReplyStatus::RecipientGone,
        ReplyError::Failed(_) => ReplyStatus::HandlerFailed,
        _ => ReplyStatus::EncodeFailed,
    }
}

/// The reconnection backoff: 100 ms doubling up to `max`.
pub(crate) fn backoff(attempt: u32, max: Duration) -> Duration {
    let base = Duration::from_millis(100).saturating_mul(1 << attempt.min(16));
    base.min(max)
}
