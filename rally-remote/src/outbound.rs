//! Outbound lanes and their writers: natural batching with no timer and no threshold.
//!
//! Senders encode their frame straight into the lane's shared buffer (under a short lock) and
//! wake the writer only when the buffer was empty. The writer yields once (so the tasks already
//! runnable add their frames), then swaps the whole buffer for its spare one and writes it with
//! one call. Under light load each message goes out at once; under
//! heavy load everything that queued during one write goes out in the next, so batches grow by
//! themselves. Steady state allocates nothing: the two buffers are reused.

mod wake;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[cfg(loom)]
use loom::sync::{Mutex, MutexGuard};
#[cfg(not(loom))]
use std::sync::{Mutex, MutexGuard};

use bytes::BytesMut;
use rally_actor::ReplyError;
use rally_wire::{
    EncodeError, ManifestKey, OutboundEncoder, RecipientKey, ReplyQueued, ReplyStatus,
    SystemMessage,
};
use serde::Serialize;
use tokio::io::AsyncWriteExt;

use self::wake::Wakeup;

use crate::codec;
use crate::transport::BoxStream;

/// A buffer that grew past this (a large message went through) is replaced by a fresh one after
/// the write, so one 10 MB message does not pin 10 MB per lane forever.
const SHRINK_ABOVE: usize = 4 * 1024 * 1024;
/// Initial size of the writer's spare buffer.
const INITIAL_BUFFER: usize = 64 * 1024;

/// Why a frame was not queued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PushError {
    /// The lane's bounded buffer is full.
    #[error("the outbound lane is full")]
    Full,
    /// The encoded message exceeds the maximum frame size (this node's or, once known, the
    /// peer's, whichever is smaller).
    #[error("the message encodes to {size} bytes, more than the maximum of {max}")]
    TooLarge {
        /// Encoded size.
        size: usize,
        /// The maximum in force.
        max: u32,
    },
    /// The message failed to encode (its `Serialize` returned an error or panicked).
    #[error("the message failed to encode: {0}")]
    Encode(String),
    /// The association is closed.
    #[error("the association is closed")]
    Closed,
    /// The peer's life the message was meant for has ended (declared down, or restarted as a
    /// new incarnation): nothing meant for it may reach another.
    #[error("the node's incarnation this ref was resolved against is down")]
    PeerDown,
}

impl From<EncodeError> for PushError {
    fn from(error: EncodeError) -> Self {
        match error {
            EncodeError::TooLarge { size, max } => Self::TooLarge { size, max },
            EncodeError::Encode(why) => Self::Encode(why),
            other => Self::Encode(other.to_string()),
        }
    }
}

/// Runs a user's `Serialize` so that an error or a panic becomes a refusal: nothing unwinds
/// through the lane, and no lock is poisoned.
pub(crate) fn guarded_encode(
    encode: impl FnOnce(&mut BytesMut) -> Result<(), postcard::Error>,
    buf: &mut BytesMut,
) -> Result<(), String> {
    match std::panic::catch_unwind(AssertUnwindSafe(|| encode(buf))) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(error)) => Err(error.to_string()),
        Err(panic) => Err(format!(
            "its Serialize panicked: {}",
            rally_actor_panic_message(&panic)
        )),
    }
}

fn rally_actor_panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "(a non-string panic payload)".to_owned()
    }
}

/// Counters of one lane kept outside its lock (messages and replies are counted under it).
#[derive(Debug, Default)]
pub(crate) struct LaneStats {
    pub(crate) writes: AtomicU64,
    pub(crate) bytes: AtomicU64,
    pub(crate) dropped: AtomicU64,
}

/// One outbound lane to one peer: the sans-I/O encoder behind a short lock, and the writer's
/// wake-up.
pub(crate) struct OutboundLane {
    pub(crate) lane: rally_wire::Lane,
    state: Mutex<LaneState>,
    wakeup: Wakeup,
    capacity: usize,
    pub(crate) stats: LaneStats,
}

struct LaneState {
    encoder: OutboundEncoder,
    /// Messages and replies queued since start (counted under the lock the push holds anyway,
    /// rather than with an atomic every sender would contend on).
    messages: u64,
    replies: u64,
    /// The peer's life the queued frames are for.
    generation: u64,
    /// The peer's life the current connection reaches (0: none).
    attached: u64,
    closed: bool,
}

/// What the writer found when it looked at the lane.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// Frames to write: they are in the spare buffer now.
    Batch(rally_wire::Batch),
    /// Nothing queued: wait for a wake-up.
    Idle,
    /// Nothing queued and the lane is closed: flush and end.
    Closed,
    /// The peer's life this connection reaches has ended: reconnect.
    Detached,
}

/// A write failed; `lost` messages were in the batch.
#[derive(Debug)]
pub(crate) struct WriteFailed {
    pub(crate) error: std::io::Error,
    pub(crate) lost: u64,
}

impl OutboundLane {
    pub(crate) fn new(lane: rally_wire::Lane, max_frame: u32, capacity: usize) -> Self {
        Self {
            lane,
            state: Mutex::new(LaneState {
                encoder: OutboundEncoder::new(max_frame),
                messages: 0,
                replies: 0,
                generation: 1,
                attached: 0,
                closed: false,
            }),
            wakeup: Wakeup::default(),
            capacity,
            stats: LaneStats::default(),
        }
    }

    /// The lock; poison-tolerant, though no user code runs under it (user `Serialize` is
    /// caught by [`guarded_encode`]).
    fn lock(&self) -> MutexGuard<'_, LaneState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `write` on the encoder under the lock, for the peer's life `generation` (`None`:
    /// any), then wakes the writer if the buffer went from empty to not empty. The wake-up
    /// depends on the buffer alone, never on `write`'s outcome: no error path can skip it.
    fn push<T>(
        &self,
        generation: Option<u64>,
        write: impl FnOnce(&mut LaneState) -> T,
    ) -> Result<T, PushError> {
        let (out, wake) = {
            let mut state = self.lock();
            if state.closed {
                return Err(PushError::Closed);
            }
            if generation.is_some_and(|g| g != state.generation) {
                return Err(PushError::PeerDown);
            }
            if state.encoder.len() >= self.capacity {
                self.stats.dropped.fetch_add(1, Ordering::Relaxed);
                return Err(PushError::Full);
            }
            let was_empty = state.encoder.is_empty();
            let out = write(&mut state);
            (out, was_empty && !state.encoder.is_empty())
        };
        if wake {
            self.wakeup.wake();
        }
        Ok(out)
    }

    /// Queues a message frame for `recipient` of the peer's life `generation`, encoding the
    /// payload with `encode`; returns its sequence number on this lane.
    pub(crate) fn push_message(
        &self,
        generation: u64,
        recipient: RecipientKey<'_>,
        manifest: &'static str,
        request_id: u64,
        encode: impl FnOnce(&mut BytesMut) -> Result<(), postcard::Error>,
    ) -> Result<u64, PushError> {
        let manifest = ManifestKey {
            id: manifest.as_ptr() as usize,
            name: manifest,
        };
        let sequence = self.push(Some(generation), |state| {
            let sequence = state
                .encoder
                .push_message(recipient, manifest, request_id, |buf| {
                    guarded_encode(encode, buf)
                })?;
            state.messages += 1;
            Ok::<_, EncodeError>(sequence)
        })??;
        Ok(sequence)
    }

    /// Queues a reply frame for the peer's life `generation`. A reply that cannot be encoded
    /// goes as an `EncodeFailed` status, so the asker hears; that case returns the reason.
    pub(crate) fn push_reply<R: Serialize>(
        &self,
        generation: u64,
        request_id: u64,
        reply: Result<&R, ReplyStatus>,
    ) -> Result<ReplyQueued, PushError> {
        self.push(Some(generation), |state| {
            state.replies += 1;
            match reply {
                Ok(value) => state.encoder.push_reply(
                    request_id,
                    Ok(&mut |buf: &mut BytesMut| {
                        guarded_encode(|buf| codec::encode_into(value, buf), buf)
                    }),
                ),
                Err(status) => state.encoder.push_reply(request_id, Err(status)),
            }
        })
    }

    /// Queues a system message for the peer's life `generation`.
    pub(crate) fn push_system(
        &self,
        generation: u64,
        msg: &SystemMessage,
    ) -> Result<(), PushError> {
        self.push(Some(generation), |state| state.encoder.push_system(msg))
    }

    /// Queues a heartbeat (for whichever life the connection reaches).
    pub(crate) fn push_heartbeat(&self, sequence: u64) -> Result<(), PushError> {
        self.push(None, |state| state.encoder.push_heartbeat(sequence))
    }

    /// Queues a leave notice.
    pub(crate) fn push_leave(&self) -> Result<(), PushError> {
        self.push(None, |state| state.encoder.push_leave())
    }

    /// Stops taking frames; the writer flushes what is queued, then ends.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.wakeup.wake();
    }

    /// Whether every queued byte has been written (or dropped).
    pub(crate) fn is_drained(&self) -> bool {
        self.lock().encoder.is_empty()
    }

    /// Messages and replies queued since start.
    pub(crate) fn counts(&self) -> (u64, u64) {
        let state = self.lock();
        (state.messages, state.replies)
    }

    /// The highest message sequence handed to the transport.
    pub(crate) fn handed(&self) -> u64 {
        self.lock().encoder.handed()
    }

    /// The peer's life `generation` begins: everything queued for an earlier one is dropped,
    /// and a connection to an earlier one is left (the writer sees it at its next wake-up).
    /// Returns the messages dropped.
    pub(crate) fn begin_generation(&self, generation: u64) -> u64 {
        let dropped = {
            let mut state = self.lock();
            if state.generation >= generation {
                return 0;
            }
            state.generation = generation;
            state.encoder.discard()
        };
        self.stats.dropped.fetch_add(dropped, Ordering::Relaxed);
        self.wakeup.wake();
        dropped
    }

    /// A connection to the peer's life `generation` is ready, and the peer takes frames of at
    /// most `peer_max` bytes. Returns the messages dropped for exceeding it, or `None` if the
    /// generation is no longer current (the caller drops the connection).
    pub(crate) fn attach(&self, generation: u64, peer_max: u32) -> Option<u64> {
        let mut state = self.lock();
        if state.generation != generation {
            return None;
        }
        state.attached = generation;
        let dropped = state.encoder.set_peer_max(peer_max);
        self.stats.dropped.fetch_add(dropped, Ordering::Relaxed);
        Some(dropped)
    }

    /// A connection is gone: frames already encoded for it reference its compression tables,
    /// so they are dropped (at-most-once) and the tables start again. Returns how many
    /// messages were dropped.
    pub(crate) fn reset_after_disconnect(&self) -> u64 {
        let dropped = {
            let mut state = self.lock();
            state.attached = 0;
            state.encoder.reset_after_disconnect()
        };
        self.stats.dropped.fetch_add(dropped, Ordering::Relaxed);
        dropped
    }

    /// Writes everything queued to `stream` until the lane closes, the stream fails, or the
    /// peer's life the connection reaches ends (then `Ok(false)`: reconnect).
    ///
    /// # Errors
    ///
    /// The stream's I/O error, with the number of messages in the failed batch.
    pub(crate) async fn write_to(&self, stream: &mut BoxStream) -> Result<bool, WriteFailed> {
        let mut spare = BytesMut::with_capacity(INITIAL_BUFFER);
        // Whether the last write carried more than one frame: only then is company likely.
        let mut batching = false;
        loop {
            let batch = match self.next_batch(&mut spare) {
                Next::Batch(batch) => batch,
                Next::Detached => return Ok(false),
                Next::Closed => {
                    stream
                        .flush()
                        .await
                        .map_err(|error| WriteFailed { error, lost: 0 })?;
                    return Ok(true);
                }
                Next::Idle => {
                    self.wakeup.wait().await;
                    // While frames come in company, let the tasks that are already runnable
                    // (typically the actors that woke us, and their peers) queue theirs first:
                    // the wake-up put this task in front of them. One yield, no timer. A yield
                    // also hands this task to the run queue, where another worker may steal it
                    // (a cross-core wake-up), so when frames come alone (a paced sender, a
                    // quiet link) the frame leaves at once instead.
                    if batching {
                        tokio::task::yield_now().await;
                    }
                    continue;
                }
            };
            let failed = |error| WriteFailed {
                error,
                lost: batch.messages,
            };
            batching = batch.frames > 1;
            stream.write_all(&spare).await.map_err(failed)?;
            // A buffered stream may accept every byte yet hold some back: TLS takes the
            // plaintext and returns before its records are on the socket when the socket would
            // block. This connection is write-only, so nothing else would push them out; flush
            // (a no-op on plain TCP) before waiting for the next batch.
            stream.flush().await.map_err(failed)?;
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

    /// The writer's step: takes everything queued into `spare` (which must be empty), or says
    /// why there is nothing to write. A wake-up given after an `Idle` answer is never lost:
    /// every push that leaves the buffer non-empty after it was empty wakes the writer.
    pub(crate) fn next_batch(&self, spare: &mut BytesMut) -> Next {
        let mut state = self.lock();
        if state.attached != state.generation {
            return Next::Detached;
        }
        let batch = state.encoder.take(spare);
        match (spare.is_empty(), state.closed) {
            (false, _) => Next::Batch(batch),
            (true, true) => Next::Closed,
            (true, false) => Next::Idle,
        }
    }
}

/// Where the reply to one inbound request goes: the lane back to the requesting node, for the
/// life of it that asked.
pub(crate) struct ReplyRoute {
    pub(crate) lane: Arc<OutboundLane>,
    pub(crate) generation: u64,
    pub(crate) request_id: u64,
}

impl ReplyRoute {
    /// Encodes and queues the reply (or the reason there is none).
    pub(crate) fn send<R: Serialize>(self, result: Result<R, ReplyError>) {
        let outcome = match &result {
            Ok(value) => self
                .lane
                .push_reply(self.generation, self.request_id, Ok(value)),
            Err(error) => {
                self.lane
                    .push_reply::<()>(self.generation, self.request_id, Err(status_of(error)))
            }
        };
        match outcome {
            Ok(ReplyQueued::AsGiven) => {}
            Ok(ReplyQueued::Replaced(error)) => {
                tracing::warn!(%error, request = self.request_id, "a reply could not be encoded; the asker gets an error");
            }
            Err(error) => {
                tracing::debug!(%error, request = self.request_id, "a reply could not be queued");
            }
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

#[cfg(all(test, loom))]
mod loom_tests {
    //! The lane's wake protocol under every interleaving loom finds: senders (one whose push
    //! fails after writing, as a reply that fails to encode does) racing the writer going to
    //! sleep; every frame queued is written, none twice.

    use loom::thread;

    use super::*;

    fn lane() -> Arc<OutboundLane> {
        let lane = OutboundLane::new(rally_wire::Lane::Ordinary(0), 1 << 16, 1 << 20);
        assert_eq!(lane.attach(1, 1 << 16), Some(0));
        Arc::new(lane)
    }

    /// Runs the writer until the lane is closed and drained; returns the frames written.
    fn write_all(lane: &OutboundLane) -> usize {
        let mut spare = BytesMut::new();
        let mut frames = 0;
        loop {
            match lane.next_batch(&mut spare) {
                Next::Batch(batch) => {
                    frames += batch.frames as usize;
                    spare.clear();
                }
                Next::Idle => lane.wakeup.wait_blocking(),
                Next::Closed => return frames,
                Next::Detached => panic!("the generation did not change"),
            }
        }
    }

    #[test]
    fn no_wake_up_is_lost_on_any_path() {
        loom::model(|| {
            let lane = lane();
            let heartbeat = {
                let lane = lane.clone();
                thread::spawn(move || lane.push_heartbeat(1).unwrap())
            };
            let failed_reply = {
                let lane = lane.clone();
                thread::spawn(move || {
                    // Encoding fails after writing part of the value: an error reply goes in
                    // its place, and the writer must still be woken for it.
                    let queued = lane.push_reply(1, 9, Ok(&Unencodable)).unwrap();
                    assert!(matches!(queued, ReplyQueued::Replaced(_)));
                })
            };
            let writer = {
                let lane = lane.clone();
                thread::spawn(move || write_all(&lane))
            };
            heartbeat.join().unwrap();
            failed_reply.join().unwrap();
            lane.close();
            assert_eq!(writer.join().unwrap(), 2);
        });
    }

    #[test]
    fn a_refused_message_wakes_nobody_and_strands_nothing() {
        loom::model(|| {
            let lane = lane();
            let refused = {
                let lane = lane.clone();
                thread::spawn(move || {
                    let pushed = lane.push_message(
                        1,
                        rally_wire::RecipientKey { id: 1, name: "a" },
                        "m",
                        0,
                        |buf| {
                            buf.extend_from_slice(&[0; 8]);
                            Err(postcard::Error::SerializeBufferFull)
                        },
                    );
                    assert!(matches!(pushed, Err(PushError::Encode(_))));
                    lane.push_heartbeat(2).unwrap();
                })
            };
            let writer = {
                let lane = lane.clone();
                thread::spawn(move || write_all(&lane))
            };
            refused.join().unwrap();
            lane.close();
            assert_eq!(writer.join().unwrap(), 1, "only the heartbeat is written");
        });
    }

    struct Unencodable;
    impl Serialize for Unencodable {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            use serde::ser::SerializeTuple;
            let mut tuple = s.serialize_tuple(2)?;
            tuple.serialize_element(&7u8)?;
            Err(serde::ser::Error::custom("cannot encode the rest"))
        }
    }
}
