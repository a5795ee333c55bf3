//! Outbound lanes and their writers: batching that comes from the protocol, with no timer and
//! no threshold.
//!
//! Senders encode their frame straight into the lane's shared buffer (under a short lock). The
//! frame that opens a batch (finds the buffer empty) decides who writes it; every later frame
//! joins that batch and wakes nobody:
//!
//! - **A read's consequences leave together.** Actors woken by an inbound read (see `gate`)
//!   hold the read until they have handled what it brought them (or their run ends first); a
//!   batch one of them opens waits for that read, and
//!   the thread that drops its last hold (the last of those actors to finish, on whatever core
//!   it ran) writes the batch itself, with one non-blocking call. So the replies and sends one
//!   read caused go out in one write however many idle cores ran them, and nobody wakes the
//!   writer task. Batches do not shrink as they go round a closed loop: a write is read whole
//!   (or in slices of a bounded size) and its consequences leave whole.
//! - **A lone frame from outside the runtime writes itself.** A sender on a thread outside the
//!   runtime (an application's thread, a benchmark's pacer) would have to wake the writer
//!   task across threads, a futex call and a context switch per message at low load. While
//!   frames come alone (the last write carried one frame) and the writer task is parked, such
//!   a sender writes its frame itself, as a bare socket program would.
//! - **Anything else wakes the writer task once per batch** (a task that is not an actor, a
//!   timer, an actor woken by a local message): a pending wake-up absorbs later pushes. The
//!   writer yields once when company is likely, then swaps the whole buffer for its spare one
//!   and writes it with one call; what queues during a write goes out in the next.
//!
//! Whatever a sender's write cannot finish (the socket is full, TLS still holds records, the
//! write failed) goes to the writer task, which is woken for it; frames queued meanwhile wait
//! for it, in order. Steady state allocates nothing: the buffers are reused.

mod gate;
mod wake;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

#[cfg(loom)]
use loom::sync::{Mutex, MutexGuard};
#[cfg(not(loom))]
use std::sync::{Mutex, MutexGuard};

use bytes::{Buf, BytesMut};
use rally_actor::{ReplyError, RequestContext};
use rally_wire::{
    EncodeError, ManifestKey, OutboundEncoder, RecipientKey, ReplyQueued, ReplyStatus,
    SystemMessage,
};
use serde::Serialize;

pub(crate) use self::gate::ReadHold;
use self::wake::Wakeup;

use crate::codec;
use crate::transport::BoxStream;

/// The connection's write side, shared by the writer task and the senders that write their
/// frame themselves (see the module docs).
type Socket = BoxStream;

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
pub(crate) fn guarded_encode<E: std::fmt::Display>(
    encode: impl FnOnce(&mut BytesMut) -> Result<(), E>,
    buf: &mut BytesMut,
) -> Result<(), String> {
    match rally_actor::catch_panic(|| encode(buf)) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(error)) => Err(error.to_string()),
        Err(panic) => Err(format!("its Serialize panicked: {panic}")),
    }
}

/// Counters of one lane kept outside its lock (messages and replies are counted under it).
#[derive(Debug, Default)]
pub(crate) struct LaneStats {
    /// Socket writes that wrote bytes, by the writer task or by senders.
    pub(crate) writes: AtomicU64,
    /// Of those, written by a sender on its own thread (a released batch, a lone frame).
    pub(crate) sender_writes: AtomicU64,
    /// Wake-ups given to the writer task while it waited (or was about to).
    pub(crate) wakeups: AtomicU64,
    pub(crate) bytes: AtomicU64,
    pub(crate) dropped: AtomicU64,
}

/// One outbound lane to one peer: the sans-I/O encoder behind a short lock, and the writer's
/// wake-up.
pub(crate) struct OutboundLane {
    pub(crate) lane: rally_wire::Lane,
    state: Mutex<LaneState>,
    /// The current connection's write side, while the writer task writes to one. Locked only
    /// by whoever holds the right to write (`LaneState::writing`), so never contended.
    socket: Mutex<Option<Socket>>,
    wakeup: Wakeup,
    capacity: usize,
    pub(crate) stats: LaneStats,
    /// Replies this lane owes: requests from the peer handed to local actors whose reply has
    /// not been queued yet (one [`Owed`] in each [`ReplyRoute`]).
    owed: AtomicU64,
    /// Whether replies to more than one request sent on this lane are awaited. The request
    /// table counts them under its own lock; this is written only when the answer changes, so
    /// askers on several cores do not pass a counter's cache line between them per request.
    awaited_many: AtomicBool,
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
    /// Who may write to the connection now.
    writing: Writing,
    /// Whether the last write carried a single frame: frames come alone, so a sender writes
    /// its own (the writer task's yield would only add a cross-thread hop).
    lone: bool,
    /// The buffer a sender writes its frame from (taken while it writes, then given back).
    direct: BytesMut,
    /// What a sender's write left for the writer task: bytes not yet accepted by the socket
    /// (written before anything queued after them), or accepted but not flushed.
    leftover: BytesMut,
    /// Messages among the leftover bytes (lost if the connection goes).
    leftover_messages: u64,
    unflushed: bool,
    /// A sender's write failed: the writer task reports it and reconnects.
    broken: Option<WriteFailed>,
    /// The writer task holds bytes taken from the lane that are not yet all on the socket:
    /// from handing over a batch (or the close) until it looks again, or its connection ends.
    writer_holds: bool,
    /// The lane has no connection and waits before its next attempt to make one: what is
    /// queued stays until that attempt, if the peer is back by then.
    backing_off: bool,
    /// The read the queued batch waits for (a [`ReadHold`]'s id): a run that read woke
    /// opened the batch, and the read's release writes it. `None`: the writer task or a
    /// sender answers for what is queued.
    gate: Option<usize>,
}

/// Who may write to the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Writing {
    /// The writer task: it is writing, or will look at the lane before it waits.
    Task,
    /// Nobody: the writer task found nothing to write and waits for a wake-up.
    Parked,
    /// A sender writes its frame itself; the writer task stays parked until it is done.
    Sender,
}

/// What the writer found when it looked at the lane.
#[derive(Debug)]
pub(crate) enum Next {
    /// Frames to write: they are in the spare buffer now.
    Batch(rally_wire::Batch),
    /// Nothing queued: wait for a wake-up.
    Idle,
    /// Nothing queued and the lane is closed: flush and end.
    Closed,
    /// The peer's life this connection reaches has ended: reconnect.
    Detached,
    /// A sender's write to the connection failed: reconnect.
    Broken(WriteFailed),
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
                writing: Writing::Task,
                lone: true,
                direct: BytesMut::new(),
                leftover: BytesMut::new(),
                leftover_messages: 0,
                unflushed: false,
                broken: None,
                writer_holds: false,
                backing_off: false,
                gate: None,
            }),
            socket: Mutex::new(None),
            wakeup: Wakeup::default(),
            capacity,
            stats: LaneStats::default(),
            owed: AtomicU64::new(0),
            awaited_many: AtomicBool::new(false),
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
    /// any). Whoever opens a batch (the buffer goes from empty to not empty) decides who
    /// answers for it, and that depends on the buffer alone, never on `write`'s outcome, so no
    /// error path can skip it:
    ///
    /// - a run woken by an inbound read (see `gate`): the batch waits for that read's release,
    ///   which writes it from the releasing thread; nobody is woken;
    /// - a thread outside the runtime, while frames come alone and the writer task waits: it
    ///   writes its frame itself;
    /// - anyone else: the writer task is woken (unless a sender is writing: it looks when done).
    ///
    /// A frame that finds a batch open joins it: the batch's gate, the woken writer task or
    /// the sender writing already answers for it.
    fn push<T>(
        self: &Arc<Self>,
        generation: Option<u64>,
        write: impl FnOnce(&mut LaneState) -> T,
    ) -> Result<T, PushError> {
        self.push_for(CurrentRead, generation, write)
    }

    /// [`push`](Self::push), asking `read` which read (if any) woke the code that pushes:
    /// only when the frame opens a batch, as a frame joining one needs no answer.
    fn push_for<T>(
        self: &Arc<Self>,
        read: impl ReadOf,
        generation: Option<u64>,
        write: impl FnOnce(&mut LaneState) -> T,
    ) -> Result<T, PushError> {
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
        if !was_empty || state.encoder.is_empty() {
            return Ok(out);
        }
        let gated = read.with(|read| {
            // The read that woke this run (or its reader) writes the batch once its work
            // has run. The read is alive: the caller's run or scope holds it. (Linked under
            // this lock: a release takes the read's list without a lock, then each lane's.)
            read.map(|read| {
                state.gate = Some(read.id());
                read.link(self);
            })
        });
        if gated.is_some() {
            return Ok(out);
        }
        if state.lone
            && state.writing == Writing::Parked
            // A task on the runtime leaves the write to the writer task, which batches
            // what the tasks running beside it queue (a sender writing at once would make
            // one write per frame of a burst). A thread outside the runtime would have to
            // wake the writer across threads: it writes instead.
            && !on_runtime()
            && state.can_write_direct()
        {
            self.write_batch(state);
            return Ok(out);
        }
        let parked = state.writing == Writing::Parked;
        let sender = state.writing == Writing::Sender;
        drop(state);
        // A sender writing looks at the lane when done, and wakes the writer task then.
        if !sender {
            self.wake_writer(parked);
        }
        Ok(out)
    }

    /// The batch gated on the read `id` may go: the read's work has run. If the writer task
    /// waits, this thread writes it; if the writer task is busy, or a sender is writing, they
    /// look at the lane when done.
    pub(crate) fn release(&self, id: usize) {
        let mut state = self.lock();
        if state.gate != Some(id) {
            return;
        }
        state.gate = None;
        if state.encoder.is_empty() || state.writing != Writing::Parked {
            return;
        }
        if state.can_write_direct() {
            self.write_batch(state);
        } else {
            drop(state);
            self.wake_writer(true);
        }
    }

    /// Takes the queued batch for this thread to write (the writer task waits): the right to
    /// write is this thread's until [`write_direct`](Self::write_direct) gives it back.
    fn write_batch(&self, mut state: MutexGuard<'_, LaneState>) {
        state.writing = Writing::Sender;
        let mut direct = std::mem::take(&mut state.direct);
        let batch = state.encoder.take(&mut direct);
        state.lone = batch.frames <= 1;
        drop(state);
        self.write_direct(direct, batch);
    }

    /// Wakes the writer task; `parked`: it waits (or is about to), so this is a wake-up that
    /// costs a task switch, and is counted.
    fn wake_writer(&self, parked: bool) {
        if parked {
            self.stats.wakeups.fetch_add(1, Ordering::Relaxed);
        }
        self.wakeup.wake();
    }

    /// A sender's own write of `buf` (the batch it took while the writer task was parked):
    /// one non-blocking attempt; whatever it cannot finish goes to the writer task.
    fn write_direct(&self, mut buf: BytesMut, batch: rally_wire::Batch) {
        let outcome = {
            let mut socket = lock_socket(&self.socket);
            match socket.as_mut() {
                Some(socket) => try_write(socket, &buf),
                None => Direct::Partial(0),
            }
        };
        let mut state = self.lock();
        let mut wake = false;
        let written = match &outcome {
            Direct::Done | Direct::Unflushed => buf.len(),
            Direct::Partial(n) => *n,
            Direct::Failed(_) => 0,
        };
        if written > 0 {
            self.stats.writes.fetch_add(1, Ordering::Relaxed);
            self.stats.sender_writes.fetch_add(1, Ordering::Relaxed);
            self.stats
                .bytes
                .fetch_add(written as u64, Ordering::Relaxed);
        }
        if state.writing != Writing::Sender {
            // The connection went while this sender wrote (the writer task left it): what
            // is unwritten belonged to it and is lost, as a batch in a failed write is.
            if written < buf.len() {
                self.stats
                    .dropped
                    .fetch_add(batch.messages, Ordering::Relaxed);
            }
        } else {
            state.writing = Writing::Parked;
            match outcome {
                Direct::Done => {}
                Direct::Unflushed => {
                    state.unflushed = true;
                    wake = true;
                }
                Direct::Partial(n) => {
                    buf.advance(n);
                    state.leftover.extend_from_slice(&buf);
                    state.leftover_messages += batch.messages;
                    wake = true;
                }
                Direct::Failed(error) => {
                    state.broken = Some(WriteFailed {
                        error,
                        lost: batch.messages,
                    });
                    wake = true;
                }
            }
            // Frames queued during the write found the lane busy: the writer task takes them,
            // unless they wait for a read's release (which writes them).
            wake |= !state.encoder.is_empty() && state.gate.is_none();
        }
        buf.clear();
        if buf.capacity() <= SHRINK_ABOVE {
            state.direct = buf;
        }
        drop(state);
        if wake {
            self.wake_writer(true);
        }
    }

    /// Queues a message frame for `recipient` of the peer's life `generation`, encoding the
    /// payload with `encode`; returns its sequence number on this lane.
    pub(crate) fn push_message(
        self: &Arc<Self>,
        generation: u64,
        recipient: RecipientKey<'_>,
        manifest: &'static str,
        request_id: u64,
        context: Option<&RequestContext>,
        encode: impl FnOnce(&mut BytesMut) -> Result<(), postcard::Error>,
    ) -> Result<u64, PushError> {
        let manifest = ManifestKey {
            id: manifest.as_ptr() as usize,
            name: manifest,
        };
        let sequence = self.push(Some(generation), |state| {
            let write_context = context.map(crate::context::writer);
            let sequence = state.encoder.push_message(
                recipient,
                manifest,
                request_id,
                write_context.as_ref().map(|w| w as &dyn Fn(&mut BytesMut)),
                |buf| guarded_encode(encode, buf),
            )?;
            state.messages += 1;
            Ok::<_, EncodeError>(sequence)
        })??;
        Ok(sequence)
    }

    /// Queues a grain request frame for the peer's life `generation` (see
    /// [`OutboundEncoder::push_grain_request`]); returns its sequence number on this lane.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn push_grain_request(
        self: &Arc<Self>,
        generation: u64,
        kind: &'static str,
        manifest: Option<&'static str>,
        identity: &str,
        request_id: u64,
        hops: u8,
        wait_ms: u64,
        flags: rally_wire::GrainFlags,
        context: Option<&RequestContext>,
        encode: impl FnOnce(&mut BytesMut) -> Result<(), String>,
    ) -> Result<u64, PushError> {
        let key = |name: &'static str| ManifestKey {
            id: name.as_ptr() as usize,
            name,
        };
        let sequence = self.push(Some(generation), |state| {
            let write_context = context.map(crate::context::writer);
            let sequence = state.encoder.push_grain_request(
                key(kind),
                manifest.map(key),
                identity,
                request_id,
                hops,
                wait_ms,
                flags,
                write_context.as_ref().map(|w| w as &dyn Fn(&mut BytesMut)),
                encode,
            )?;
            state.messages += 1;
            Ok::<_, EncodeError>(sequence)
        })??;
        Ok(sequence)
    }

    /// Queues a reply frame whose payload `encode` writes; one that cannot be encoded, or is
    /// too large, goes as an `EncodeFailed` status (the asker hears).
    pub(crate) fn push_encoded_reply(
        self: &Arc<Self>,
        generation: u64,
        request_id: u64,
        encode: rally_wire::EncodeReply<'_>,
    ) -> Result<ReplyQueued, PushError> {
        self.push(Some(generation), |state| {
            state.replies += 1;
            state.encoder.push_reply(request_id, Ok(encode))
        })
    }

    /// Queues a reply frame for the peer's life `generation`. A reply that cannot be encoded
    /// goes as an `EncodeFailed` status, so the asker hears; that case returns the reason.
    pub(crate) fn push_reply<R: Serialize>(
        self: &Arc<Self>,
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
        self: &Arc<Self>,
        generation: u64,
        msg: &SystemMessage,
    ) -> Result<(), PushError> {
        self.push(Some(generation), |state| state.encoder.push_system(msg))
    }

    /// Queues a heartbeat (for whichever life the connection reaches).
    pub(crate) fn push_heartbeat(self: &Arc<Self>, sequence: u64) -> Result<(), PushError> {
        self.push(None, |state| state.encoder.push_heartbeat(sequence))
    }

    /// Queues a leave notice.
    pub(crate) fn push_leave(self: &Arc<Self>) -> Result<(), PushError> {
        self.push(None, |state| state.encoder.push_leave())
    }

    /// Stops taking frames; the writer flushes what is queued, then ends.
    pub(crate) fn close(&self) {
        let parked = {
            let mut state = self.lock();
            state.closed = true;
            state.writing == Writing::Parked
        };
        self.wake_writer(parked);
    }

    /// Whether a leave has nothing more to wait for here: every queued byte has been written
    /// (or dropped: none queued, none left by a sender, and none in the writer task's hands,
    /// a batch it is still writing or the close it is still flushing), or the lane has no
    /// connection and waits before trying again (the peer could not be reached at the last
    /// attempt, so what is queued has nowhere to go now).
    pub(crate) fn is_settled(&self) -> bool {
        let state = self.lock();
        state.backing_off
            || (state.encoder.is_empty()
                && state.leftover.is_empty()
                && state.writing != Writing::Sender
                && !state.writer_holds)
    }

    /// The lane's connection attempt failed (or its connection ended) and it waits before
    /// the next one (`true`), or that wait is over (`false`).
    pub(crate) fn set_backing_off(&self, backing_off: bool) {
        self.lock().backing_off = backing_off;
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

    /// The request table's count of replies awaited on this lane, `waiting`, as the writer
    /// reads it: whether more than one is. Stores only a change.
    pub(crate) fn set_awaited(&self, waiting: usize) {
        let many = waiting > 1;
        if self.awaited_many.load(Ordering::Relaxed) != many {
            self.awaited_many.store(many, Ordering::Relaxed);
        }
    }

    /// The peer's life `generation` begins: everything queued for an earlier one is dropped,
    /// and a connection to an earlier one is left (the writer sees it at its next wake-up).
    /// Returns the messages dropped.
    pub(crate) fn begin_generation(&self, generation: u64) -> u64 {
        let (dropped, parked) = {
            let mut state = self.lock();
            if state.generation >= generation {
                return 0;
            }
            state.generation = generation;
            (
                state.encoder.discard() + state.discard_leftover(),
                state.writing == Writing::Parked,
            )
        };
        self.stats.dropped.fetch_add(dropped, Ordering::Relaxed);
        self.wake_writer(parked);
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
            state.encoder.reset_after_disconnect() + state.discard_leftover()
        };
        self.stats.dropped.fetch_add(dropped, Ordering::Relaxed);
        dropped
    }

    /// Writes everything queued to `stream` until the lane closes, the stream fails, or the
    /// peer's life the connection reaches ends (then `Ok(false)`: reconnect). Senders may write
    /// to `stream` themselves while this task is parked (see the module docs); it is theirs no
    /// more once this returns or is dropped.
    ///
    /// # Errors
    ///
    /// The stream's I/O error, with the number of messages in the failed batch.
    pub(crate) async fn write_to(&self, stream: BoxStream) -> Result<bool, WriteFailed> {
        let _attached = Attached::new(self, stream);
        let mut spare = BytesMut::with_capacity(INITIAL_BUFFER);
        // Whether the last write carried more than one frame: only then is company likely.
        let mut batching = false;
        loop {
            let batch = match self.next_batch(&mut spare) {
                Next::Batch(batch) => batch,
                Next::Detached => return Ok(false),
                Next::Broken(failed) => return Err(failed),
                Next::Closed => {
                    self.flush()
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
                    //
                    // Company is likely when the last write carried several frames, when
                    // this lane still owes replies besides the one that woke us (requests
                    // handed to many actors, one reply each, as virtual actors give), or when
                    // replies to more than one request sent on it are awaited (many askers,
                    // each sending again when answered). Otherwise each frame's wake-up puts
                    // the writer ahead of the tasks about to queue theirs, and one-frame
                    // writes keep themselves going.
                    if batching
                        || self.owed.load(Ordering::Relaxed) > 0
                        || self.awaited_many.load(Ordering::Relaxed)
                    {
                        tokio::task::yield_now().await;
                    }
                    continue;
                }
            };
            let failed = |error| WriteFailed {
                error,
                lost: batch.messages,
            };
            if batch.frames > 0 {
                batching = batch.frames > 1;
            }
            self.write_all(&spare).await.map_err(failed)?;
            // A buffered stream may accept every byte yet hold some back: TLS takes the
            // plaintext and returns before its records are on the socket when the socket would
            // block. This connection is write-only, so nothing else would push them out; flush
            // (a no-op on plain TCP) before waiting for the next batch.
            self.flush().await.map_err(failed)?;
            if !spare.is_empty() {
                self.stats.writes.fetch_add(1, Ordering::Relaxed);
                self.stats
                    .bytes
                    .fetch_add(spare.len() as u64, Ordering::Relaxed);
            }
            if spare.capacity() > SHRINK_ABOVE {
                spare = BytesMut::with_capacity(INITIAL_BUFFER);
            } else {
                spare.clear();
            }
        }
    }

    /// Writes all of `bytes` to the attached socket (the writer task holds the right to write).
    async fn write_all(&self, mut bytes: &[u8]) -> std::io::Result<()> {
        while !bytes.is_empty() {
            let n = std::future::poll_fn(|cx| {
                let mut socket = lock_socket(&self.socket);
                let socket = socket
                    .as_mut()
                    .expect("attached while the writer task writes");
                socket.as_mut().poll_write(cx, bytes)
            })
            .await?;
            if n == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            bytes = &bytes[n..];
        }
        Ok(())
    }

    /// Flushes the attached socket.
    async fn flush(&self) -> std::io::Result<()> {
        std::future::poll_fn(|cx| {
            let mut socket = lock_socket(&self.socket);
            let socket = socket
                .as_mut()
                .expect("attached while the writer task writes");
            socket.as_mut().poll_flush(cx)
        })
        .await
    }

    /// The writer's step: takes everything queued into `spare` (which must be empty), or says
    /// why there is nothing to write. A wake-up given after an `Idle` answer is never lost:
    /// every push that leaves the buffer non-empty after it was empty either writes it itself
    /// (and wakes the writer for whatever it could not finish, or for frames queued meanwhile)
    /// or wakes the writer.
    pub(crate) fn next_batch(&self, spare: &mut BytesMut) -> Next {
        let mut state = self.lock();
        // Looking again means the last batch is written.
        state.writer_holds = false;
        if let Some(failed) = state.broken.take() {
            state.writing = Writing::Task;
            return Next::Broken(failed);
        }
        if state.attached != state.generation {
            state.writing = Writing::Task;
            return Next::Detached;
        }
        if state.writing == Writing::Sender {
            // The sender wakes the writer when it is done, if anything is left.
            return Next::Idle;
        }
        if !state.leftover.is_empty() || state.unflushed {
            // A sender's unfinished write goes first: its bytes precede everything queued.
            std::mem::swap(&mut state.leftover, spare);
            state.unflushed = false;
            state.writing = Writing::Task;
            state.writer_holds = true;
            return Next::Batch(rally_wire::Batch {
                frames: 0,
                messages: std::mem::take(&mut state.leftover_messages),
            });
        }
        if state.gate.is_some() && !state.closed {
            // The batch waits for a read's release, which writes it.
            state.writing = Writing::Parked;
            return Next::Idle;
        }
        state.gate = None;
        let batch = state.encoder.take(spare);
        match (spare.is_empty(), state.closed) {
            (false, _) => {
                state.writing = Writing::Task;
                state.writer_holds = true;
                state.lone = batch.frames <= 1;
                Next::Batch(batch)
            }
            (true, true) => {
                // Drained once the flush is done and the connection let go.
                state.writing = Writing::Task;
                state.writer_holds = true;
                Next::Closed
            }
            (true, false) => {
                state.writing = Writing::Parked;
                Next::Idle
            }
        }
    }
}

impl LaneState {
    /// Drops what a sender's write left unwritten (it was encoded for a connection that is
    /// gone), and the gate of what is queued (dropped with it); returns the messages in it.
    fn discard_leftover(&mut self) -> u64 {
        self.leftover.clear();
        self.unflushed = false;
        self.gate = None;
        std::mem::take(&mut self.leftover_messages)
    }

    /// Whether a thread other than the writer task may write the queued batch now (the
    /// writer task must be waiting as well): a connection to the current life is attached,
    /// and nothing written before (a sender's unfinished write, a failure) must go first.
    fn can_write_direct(&self) -> bool {
        self.attached == self.generation
            && !self.closed
            && self.leftover.is_empty()
            && !self.unflushed
            && self.broken.is_none()
    }
}

/// Which inbound read, if any, woke the code that pushes (asked only when its frame opens a
/// batch).
trait ReadOf {
    fn with<R>(self, f: impl FnOnce(Option<&ReadHold>) -> R) -> R;
}

/// The read whose delivery scope or actor run is in progress on this thread.
struct CurrentRead;

impl ReadOf for CurrentRead {
    fn with<R>(self, f: impl FnOnce(Option<&ReadHold>) -> R) -> R {
        rally_actor::hold::with_current(|hold| f(hold.and_then(|h| h.downcast_ref::<ReadHold>())))
    }
}

/// A read named outright (the loom models, which have no runtime).
impl ReadOf for Option<&ReadHold> {
    fn with<R>(self, f: impl FnOnce(Option<&ReadHold>) -> R) -> R {
        f(self)
    }
}

/// Whether this thread is one of a tokio runtime's (a worker, or inside `block_on`).
fn on_runtime() -> bool {
    tokio::runtime::Handle::try_current().is_ok()
}

/// The socket lock; poison-tolerant (nothing that can panic runs under it but the stream's
/// own code).
fn lock_socket(socket: &Mutex<Option<Socket>>) -> MutexGuard<'_, Option<Socket>> {
    socket
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What a sender's own write achieved.
enum Direct {
    /// Every byte is on the socket.
    Done,
    /// Every byte was accepted, but the stream holds some back (TLS records) until a flush.
    Unflushed,
    /// The socket took this many bytes and would block.
    Partial(usize),
    /// The write failed.
    Failed(std::io::Error),
}

/// One non-blocking attempt to write all of `bytes` and flush, with a waker that does
/// nothing: the caller holds the right to write, so no task waits on this socket's readiness.
fn try_write(socket: &mut Socket, bytes: &[u8]) -> Direct {
    use std::task::{Context, Poll, Waker};
    let mut cx = Context::from_waker(Waker::noop());
    let mut written = 0;
    while written < bytes.len() {
        match socket.as_mut().poll_write(&mut cx, &bytes[written..]) {
            Poll::Ready(Ok(0)) => return Direct::Failed(std::io::ErrorKind::WriteZero.into()),
            Poll::Ready(Ok(n)) => written += n,
            Poll::Ready(Err(error)) => return Direct::Failed(error),
            Poll::Pending => return Direct::Partial(written),
        }
    }
    match socket.as_mut().poll_flush(&mut cx) {
        Poll::Ready(Ok(())) => Direct::Done,
        Poll::Ready(Err(error)) => Direct::Failed(error),
        Poll::Pending => Direct::Unflushed,
    }
}

/// The writer task's hold on a connection: puts the stream where senders can write to it, and
/// takes it away again when the task stops writing to it (returns, fails or is cancelled).
struct Attached<'a> {
    lane: &'a OutboundLane,
}

impl<'a> Attached<'a> {
    fn new(lane: &'a OutboundLane, stream: BoxStream) -> Self {
        *lock_socket(&lane.socket) = Some(stream);
        Self { lane }
    }
}

impl Drop for Attached<'_> {
    fn drop(&mut self) {
        // No sender may start a write from now on; one already writing finishes on the old
        // stream before it is dropped (it holds the socket lock). What the writer task held
        // is written or, with the connection, lost (counted by whoever reports the failure).
        {
            let mut state = self.lane.lock();
            state.writing = Writing::Task;
            state.writer_holds = false;
        }
        drop(lock_socket(&self.lane.socket).take());
    }
}

/// Where the reply to one inbound request goes: the lane back to the requesting node, for the
/// life of it that asked. The lane counts it as owed from its making until it is sent or
/// dropped.
pub(crate) struct ReplyRoute {
    owed: Owed,
    pub(crate) generation: u64,
    pub(crate) request_id: u64,
}

impl ReplyRoute {
    /// The way back for request `request_id` of the peer's life `generation`, owed by `lane`.
    pub(crate) fn new(lane: Arc<OutboundLane>, generation: u64, request_id: u64) -> Self {
        Self {
            owed: Owed::new(lane),
            generation,
            request_id,
        }
    }

    /// The lane the reply goes on.
    pub(crate) fn lane(&self) -> &Arc<OutboundLane> {
        &self.owed.lane
    }

    /// Encodes and queues the reply (or the reason there is none). The route is owed no more
    /// when this returns (it is dropped), before the writer this reply woke on this thread
    /// runs: that writer looks at the other replies owed.
    pub(crate) fn send<R: Serialize>(self, result: Result<R, ReplyError>) {
        if let Err(ReplyError::Rejected(why)) = &result {
            // The filter's reason travels with the status.
            let pushed = self.lane().push(Some(self.generation), |state| {
                state.replies += 1;
                state
                    .encoder
                    .push_status_reply(self.request_id, ReplyStatus::Rejected, why);
            });
            if let Err(error) = pushed {
                tracing::debug!(%error, request = self.request_id, "a reply could not be queued");
            }
            return;
        }
        let outcome = match &result {
            Ok(value) => self
                .lane()
                .push_reply(self.generation, self.request_id, Ok(value)),
            Err(error) => self.lane().push_reply::<()>(
                self.generation,
                self.request_id,
                Err(status_of(error)),
            ),
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

/// One reply a lane owes, counted by the lane while this lives (the writer reads the count to
/// know whether company is coming).
struct Owed {
    lane: Arc<OutboundLane>,
}

impl Owed {
    fn new(lane: Arc<OutboundLane>) -> Self {
        lane.owed.fetch_add(1, Ordering::Relaxed);
        Self { lane }
    }
}

impl Drop for Owed {
    fn drop(&mut self) {
        self.lane.owed.fetch_sub(1, Ordering::Relaxed);
    }
}

fn status_of(error: &ReplyError) -> ReplyStatus {
    match error {
        ReplyError::Stopped => ReplyStatus::RecipientGone,
        ReplyError::Failed(_) => ReplyStatus::HandlerFailed,
        _ => ReplyStatus::EncodeFailed,
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::time::{Duration, Instant};

    use tokio::io::AsyncReadExt;

    use super::*;

    /// A `Serialize` that panics is a refusal with the panic's text and place, caught quietly
    /// as a handler's panic is (before, the process's panic hook printed it and the text had
    /// no place).
    #[test]
    fn a_panicking_serialize_is_a_refusal_with_its_text_and_place() {
        let mut buf = BytesMut::new();
        let refused =
            guarded_encode(|_| -> Result<(), String> { panic!("boom") }, &mut buf).unwrap_err();
        assert!(
            refused.starts_with("its Serialize panicked: boom (at "),
            "{refused}"
        );
        let failed = guarded_encode(|_| Err(postcard::Error::SerializeBufferFull), &mut buf);
        assert_eq!(
            failed,
            Err(postcard::Error::SerializeBufferFull.to_string())
        );
        assert_eq!(guarded_encode(|_| Ok::<(), String>(()), &mut buf), Ok(()));
    }

    fn heartbeat_len() -> usize {
        let mut encoder = OutboundEncoder::new(1 << 16);
        encoder.push_heartbeat(1);
        let mut buf = BytesMut::new();
        encoder.take(&mut buf);
        buf.len()
    }

    /// A batch the writer task is still writing is not settled. `leave` stops the node's
    /// connections once every lane is settled: before, a large reply taken by the writer but
    /// not yet all on the socket counted as drained, was cut off mid-frame, and its asker
    /// failed it as `OutcomeUnknown` (remote_messaging's leave test, about 1 run in 75).
    #[tokio::test(flavor = "current_thread")]
    async fn a_batch_still_being_written_is_not_drained() {
        let (ours, mut theirs) = tokio::io::duplex(64);
        let lane = Arc::new(OutboundLane::new(
            rally_wire::Lane::Ordinary(0),
            1 << 16,
            1 << 20,
        ));
        assert_eq!(lane.attach(1, 1 << 16), Some(0));
        let to = rally_wire::RecipientKey { id: 1, name: "a" };
        lane.push_message(1, to, "m", 0, None, |buf| {
            buf.extend_from_slice(&[7; 4096]);
            Ok(())
        })
        .unwrap();
        lane.close();
        assert!(!lane.is_settled(), "queued");
        let writer = tokio::spawn({
            let lane = lane.clone();
            async move { lane.write_to(Box::pin(ours)).await }
        });
        // The writer takes the frame and writes what the pipe holds, then waits for room.
        let mut first = [0u8; 64];
        theirs.read_exact(&mut first).await.unwrap();
        assert!(!lane.is_settled(), "the frame is still being written");
        let mut rest = Vec::new();
        theirs.read_to_end(&mut rest).await.unwrap(); // the writer lets go of the stream
        assert!(rest.len() > 4096 - 64);
        assert!(writer.await.unwrap().unwrap(), "the lane closed, flushed");
        assert!(lane.is_settled());
    }

    /// A lane without a connection, waiting before its next attempt, is settled with a frame
    /// queued: a leave does not wait for a peer that could not be reached. Once it tries again
    /// the frame counts again.
    #[test]
    fn a_lane_backing_off_is_settled_with_a_frame_queued() {
        let lane = Arc::new(OutboundLane::new(
            rally_wire::Lane::Control,
            1 << 16,
            1 << 20,
        ));
        lane.push_leave().unwrap();
        assert!(!lane.is_settled(), "queued, and the lane is connecting");
        lane.set_backing_off(true);
        assert!(
            lane.is_settled(),
            "nobody to write it to until the next attempt"
        );
        lane.set_backing_off(false);
        assert!(!lane.is_settled(), "trying again: the frame may still go");
    }

    /// A sender's write cut short by a full socket leaves the rest to the writer task; a frame
    /// pushed after that, once the socket has room again, must not be written by its sender
    /// ahead of that rest (it would land inside the earlier frame).
    #[tokio::test(flavor = "current_thread")]
    async fn a_frame_never_overtakes_what_a_cut_short_write_left() {
        let len = heartbeat_len();
        let room = len + len / 2;
        let (ours, mut theirs) = tokio::io::duplex(room);
        let lane = Arc::new(OutboundLane::new(
            rally_wire::Lane::Ordinary(0),
            1 << 16,
            1 << 20,
        ));
        assert_eq!(lane.attach(1, 1 << 16), Some(0));
        let writer = tokio::spawn({
            let lane = lane.clone();
            async move { lane.write_to(Box::pin(ours)).await }
        });
        // Let the writer find the lane empty and park: frames come alone from now on.
        tokio::task::yield_now().await;
        // Senders on a thread outside the runtime write their own frames.
        let push = |n| {
            let lane = lane.clone();
            std::thread::spawn(move || lane.push_heartbeat(n).unwrap())
                .join()
                .unwrap();
        };
        push(1); // written by its sender, whole
        push(2); // written by its sender, cut short
        let mut wire = vec![0; room];
        theirs.read_exact(&mut wire).await.unwrap(); // the socket has room again
        push(3);
        let deadline = Instant::now() + Duration::from_secs(5);
        while wire.len() < 3 * len {
            let mut more = [0; 256];
            let n = tokio::time::timeout_at(deadline.into(), theirs.read(&mut more))
                .await
                .expect("all three frames arrive")
                .unwrap();
            wire.extend_from_slice(&more[..n]);
        }
        let mut frames = Vec::new();
        let mut decoder = rally_wire::InboundDecoder::new(1 << 16, Duration::from_secs(60));
        decoder
            .decode(&wire, Instant::now(), |frame| {
                frames.push(format!("{frame:?}"))
            })
            .expect("the frames arrive whole");
        let expected: Vec<String> = (1..=3)
            .map(|n| format!("{:?}", rally_wire::InboundFrame::Heartbeat(n)))
            .collect();
        assert_eq!(frames, expected);
        let writes = lane.stats.writes.load(Ordering::Relaxed);
        assert!(
            writes >= 3,
            "the senders wrote, then the writer task: {writes} writes"
        );
        lane.close();
        assert!(matches!(writer.await.unwrap(), Ok(true)));
    }

    /// A stream for the senders' own writes: it records what it takes, fails every write if
    /// told to, and holds the first flush back (as TLS does when the socket is full).
    struct Fake {
        wire: Arc<std::sync::Mutex<Vec<u8>>>,
        fail: bool,
        flushes: Arc<AtomicU64>,
    }

    impl tokio::io::AsyncWrite for Fake {
        fn poll_write(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            bytes: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            if self.fail {
                return std::task::Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into()));
            }
            self.wire.lock().unwrap().extend_from_slice(bytes);
            std::task::Poll::Ready(Ok(bytes.len()))
        }

        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            if self.flushes.fetch_add(1, Ordering::Relaxed) == 0 {
                cx.waker().wake_by_ref();
                return std::task::Poll::Pending;
            }
            std::task::Poll::Ready(Ok(()))
        }

        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    impl tokio::io::AsyncRead for Fake {
        fn poll_read(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            _: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Pending
        }
    }

    /// A lane whose writer task writes to `fake`, parked (frames come alone); and a way to push
    /// a heartbeat from a thread outside the runtime.
    async fn parked_lane(
        fake: Fake,
    ) -> (
        Arc<OutboundLane>,
        tokio::task::JoinHandle<Result<bool, WriteFailed>>,
    ) {
        let lane = Arc::new(OutboundLane::new(
            rally_wire::Lane::Ordinary(0),
            1 << 16,
            1 << 20,
        ));
        assert_eq!(lane.attach(1, 1 << 16), Some(0));
        let writer = tokio::spawn({
            let lane = lane.clone();
            async move { lane.write_to(Box::pin(fake)).await }
        });
        tokio::task::yield_now().await;
        (lane, writer)
    }

    fn push_from_outside(lane: &Arc<OutboundLane>, n: u64) {
        let lane = lane.clone();
        std::thread::spawn(move || lane.push_heartbeat(n).unwrap())
            .join()
            .unwrap();
    }

    /// A sender's write that the stream accepts but does not flush (TLS holding records) is
    /// flushed by the writer task, which the sender wakes for it.
    #[tokio::test(flavor = "current_thread")]
    async fn what_a_senders_write_leaves_unflushed_the_writer_flushes() {
        let wire = Arc::new(std::sync::Mutex::new(Vec::new()));
        let flushes = Arc::new(AtomicU64::new(0));
        let (lane, writer) = parked_lane(Fake {
            wire: wire.clone(),
            fail: false,
            flushes: flushes.clone(),
        })
        .await;
        push_from_outside(&lane, 1);
        assert_eq!(
            wire.lock().unwrap().len(),
            heartbeat_len(),
            "the sender wrote it"
        );
        assert_eq!(
            flushes.load(Ordering::Relaxed),
            1,
            "its flush was held back"
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        while flushes.load(Ordering::Relaxed) < 2 {
            assert!(Instant::now() < deadline, "the writer task never flushed");
            tokio::task::yield_now().await;
        }
        lane.close();
        assert!(matches!(writer.await.unwrap(), Ok(true)));
    }

    /// A sender's write that fails ends the connection through the writer task, which
    /// reports the failure and the message lost (then its owner reconnects).
    #[tokio::test(flavor = "current_thread")]
    async fn a_senders_failed_write_ends_the_connection_with_its_loss_counted() {
        let (lane, writer) = parked_lane(Fake {
            wire: Arc::default(),
            fail: true,
            flushes: Arc::default(),
        })
        .await;
        let before = lane.stats.writes.load(Ordering::Relaxed);
        let sender = lane.clone();
        std::thread::spawn(move || {
            let to = rally_wire::RecipientKey { id: 1, name: "a" };
            sender.push_message(1, to, "m", 0, None, |buf| {
                buf.extend_from_slice(&[7; 8]);
                Ok(())
            })
        })
        .join()
        .unwrap()
        .unwrap();
        let failed = tokio::time::timeout(Duration::from_secs(5), writer)
            .await
            .expect("the writer task ends")
            .unwrap()
            .expect_err("the failure is reported");
        assert_eq!(failed.error.kind(), std::io::ErrorKind::BrokenPipe);
        assert_eq!(failed.lost, 1, "the message in the failed write");
        assert_eq!(
            lane.stats.writes.load(Ordering::Relaxed),
            before,
            "nothing was written"
        );
        assert!(lane.is_settled());
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! The lane's wake protocol under every interleaving loom finds: senders (one whose push
    //! fails after writing, as a reply that fails to encode does) racing the writer going to
    //! sleep, and senders writing their own frame to the socket while the writer is parked
    //! (one of those writes cut short by a full socket); every frame queued is written, none
    //! twice, each sender's in order.

    use std::time::Instant;

    use loom::thread;

    use super::*;

    /// The model's socket: keeps what is written in `wire`; a write takes at most `room`
    /// bytes more, then would block, once (the next write finds room again, as a socket that
    /// drained meanwhile does). Only the holder of the lane's socket lock touches it.
    struct Sink {
        wire: Arc<std::sync::Mutex<Vec<u8>>>,
        room: usize,
    }

    impl tokio::io::AsyncWrite for Sink {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            bytes: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            let n = bytes.len().min(self.room);
            if n == 0 && !bytes.is_empty() {
                self.room = usize::MAX;
                return std::task::Poll::Pending;
            }
            self.room -= n;
            self.wire.lock().unwrap().extend_from_slice(&bytes[..n]);
            std::task::Poll::Ready(Ok(n))
        }

        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    impl tokio::io::AsyncRead for Sink {
        fn poll_read(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            _: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Pending
        }
    }

    type Wire = Arc<std::sync::Mutex<Vec<u8>>>;

    fn heartbeat_len() -> usize {
        let mut encoder = OutboundEncoder::new(1 << 16);
        encoder.push_heartbeat(1);
        let mut buf = BytesMut::new();
        encoder.take(&mut buf);
        buf.len()
    }

    fn lane(room: usize) -> (Arc<OutboundLane>, Wire) {
        let lane = OutboundLane::new(rally_wire::Lane::Ordinary(0), 1 << 16, 1 << 20);
        assert_eq!(lane.attach(1, 1 << 16), Some(0));
        let wire = Wire::default();
        *lock_socket(&lane.socket) = Some(Box::pin(Sink {
            wire: wire.clone(),
            room,
        }));
        (Arc::new(lane), wire)
    }

    /// Runs the writer until the lane is closed and drained (the writer task's loop, writing
    /// through the socket lock as it does); returns the frames on the wire, decoded.
    fn write_all(lane: &OutboundLane, wire: &Wire) -> Vec<String> {
        let mut spare = BytesMut::new();
        loop {
            match lane.next_batch(&mut spare) {
                Next::Batch(_) => {
                    let mut socket = lock_socket(&lane.socket);
                    let socket = socket.as_mut().expect("the model's socket stays");
                    let mut rest = &spare[..];
                    while !rest.is_empty() {
                        match try_write(socket, rest) {
                            Direct::Done => break,
                            Direct::Partial(n) => rest = &rest[n..],
                            Direct::Unflushed | Direct::Failed(_) => {
                                panic!("the model's socket neither holds back nor fails")
                            }
                        }
                    }
                    spare.clear();
                }
                Next::Idle => lane.wakeup.wait_blocking(),
                Next::Closed => break,
                Next::Detached | Next::Broken(_) => panic!("the connection did not change"),
            }
        }
        let wire = wire.lock().unwrap().clone();
        let mut decoder =
            rally_wire::InboundDecoder::new(1 << 16, std::time::Duration::from_secs(60));
        let mut frames = Vec::new();
        let used = decoder
            .decode(&wire, Instant::now(), |frame| {
                frames.push(format!("{frame:?}"))
            })
            .expect("what the lane writes decodes");
        assert_eq!(used, wire.len(), "no partial frame is left on the wire");
        frames
    }

    #[test]
    fn a_sender_writing_its_own_frame_loses_and_repeats_nothing() {
        loom::model(|| {
            // Room for one heartbeat and half the next: a sender's write is cut short inside
            // a frame, and the socket has room again for the frame after it.
            let len = heartbeat_len();
            let (lane, wire) = lane(len + len / 2);
            let first = {
                let lane = lane.clone();
                thread::spawn(move || {
                    lane.push_heartbeat(1).unwrap();
                    lane.push_heartbeat(2).unwrap();
                    lane.push_heartbeat(3).unwrap();
                })
            };
            let second = {
                let lane = lane.clone();
                thread::spawn(move || lane.push_heartbeat(4).unwrap())
            };
            let writer = {
                let lane = lane.clone();
                thread::spawn(move || write_all(&lane, &wire))
            };
            first.join().unwrap();
            second.join().unwrap();
            lane.close();
            let frames = writer.join().unwrap();
            assert_eq!(frames.len(), 4, "{frames:?}");
            let at = |n: u64| {
                frames
                    .iter()
                    .position(|f| *f == format!("{:?}", rally_wire::InboundFrame::Heartbeat(n)))
                    .unwrap_or_else(|| panic!("heartbeat {n} is written: {frames:?}"))
            };
            assert!(
                at(1) < at(2) && at(2) < at(3),
                "one sender's order: {frames:?}"
            );
            at(4);
        });
    }

    #[test]
    fn no_wake_up_is_lost_on_any_path() {
        loom::model(|| {
            let (lane, wire) = lane(usize::MAX);
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
                thread::spawn(move || write_all(&lane, &wire))
            };
            heartbeat.join().unwrap();
            failed_reply.join().unwrap();
            lane.close();
            assert_eq!(writer.join().unwrap().len(), 2);
        });
    }

    #[test]
    fn a_refused_message_wakes_nobody_and_strands_nothing() {
        loom::model(|| {
            let (lane, wire) = lane(usize::MAX);
            let refused = {
                let lane = lane.clone();
                thread::spawn(move || {
                    let pushed = lane.push_message(
                        1,
                        rally_wire::RecipientKey { id: 1, name: "a" },
                        "m",
                        0,
                        None,
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
                thread::spawn(move || write_all(&lane, &wire))
            };
            refused.join().unwrap();
            lane.close();
            assert_eq!(
                writer.join().unwrap().len(),
                1,
                "only the heartbeat is written"
            );
        });
    }

    /// A batch gated on a read: two runs of the read push (one also after a refused push,
    /// which queues nothing), while a thread outside the runtime pushes on its own and the
    /// writer task waits. Whoever drops the read's last clone writes the gated batch; no frame
    /// is stranded or written twice, and each sender's order holds.
    #[test]
    fn a_gated_batch_is_written_once_by_its_release() {
        loom::model(|| {
            let (lane, wire) = lane(usize::MAX);
            let wire_seen = wire.clone();
            let read = Arc::new(ReadHold::default());
            let first = {
                let (lane, read) = (lane.clone(), read.clone());
                thread::spawn(move || {
                    lane.push_for(Some(&*read), None, |s| s.encoder.push_heartbeat(1))
                        .unwrap();
                    let refused = lane.push_for(Some(&*read), Some(1), |s| {
                        s.encoder.push_message(
                            rally_wire::RecipientKey { id: 1, name: "a" },
                            ManifestKey { id: 1, name: "m" },
                            0,
                            None,
                            |buf| {
                                buf.extend_from_slice(&[0; 8]);
                                Err("cannot encode".to_owned())
                            },
                        )
                    });
                    assert!(matches!(refused, Ok(Err(_))));
                    lane.push_for(Some(&*read), None, |s| s.encoder.push_heartbeat(2))
                        .unwrap();
                    drop(read);
                })
            };
            let second = {
                let lane = lane.clone();
                thread::spawn(move || {
                    lane.push_for(Some(&*read), None, |s| s.encoder.push_heartbeat(3))
                        .unwrap();
                    drop(read);
                })
            };
            let outside = {
                let lane = lane.clone();
                thread::spawn(move || lane.push_heartbeat(4).unwrap())
            };
            let writer = {
                let lane = lane.clone();
                thread::spawn(move || write_all(&lane, &wire))
            };
            first.join().unwrap();
            second.join().unwrap();
            outside.join().unwrap();
            // Everything goes out without a close (which writes whatever is queued).
            until_written(&wire_seen, 4 * heartbeat_len());
            lane.close();
            let frames = writer.join().unwrap();
            assert_eq!(frames.len(), 4, "{frames:?}");
            let at = |n: u64| {
                frames
                    .iter()
                    .position(|f| *f == format!("{:?}", rally_wire::InboundFrame::Heartbeat(n)))
                    .unwrap_or_else(|| panic!("heartbeat {n} is written: {frames:?}"))
            };
            assert!(at(1) < at(2), "one run's order: {frames:?}");
            at(3);
            at(4);
        });
    }

    /// A gated batch whose read is released while the writer task is busy with the batch
    /// before (or before the lane is closed) is written by the writer task: the release
    /// leaves it, and the writer task does not wait for a release that came already.
    #[test]
    fn a_release_while_the_writer_task_writes_strands_nothing() {
        loom::model(|| {
            let (lane, wire) = lane(usize::MAX);
            let wire_seen = wire.clone();
            // The writer task has a batch of its own to write.
            lane.push_for(None, None, |s| s.encoder.push_heartbeat(1))
                .unwrap();
            let read = Arc::new(ReadHold::default());
            let run = {
                let lane = lane.clone();
                thread::spawn(move || {
                    lane.push_for(Some(&*read), None, |s| s.encoder.push_heartbeat(2))
                        .unwrap();
                    drop(read);
                })
            };
            let writer = {
                let lane = lane.clone();
                thread::spawn(move || write_all(&lane, &wire))
            };
            run.join().unwrap();
            until_written(&wire_seen, 2 * heartbeat_len());
            lane.close();
            assert_eq!(writer.join().unwrap().len(), 2);
        });
    }

    /// Waits (yielding to the model's other threads) until `bytes` are on the wire: a frame
    /// stranded in the lane makes the model fail.
    fn until_written(wire: &Wire, bytes: usize) {
        while wire.lock().unwrap().len() < bytes {
            thread::yield_now();
        }
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
