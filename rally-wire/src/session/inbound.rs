//! The receiving half of a data-phase connection: frames decoded from large reads, names
//! resolved through the connection's tables, and a bound on how long one frame may take.

use std::time::{Duration, Instant};

use crate::codec::DecodeError;
use crate::context::ContextView;
use crate::envelope::{
    ReplyStatus, SystemMessage, decode_define_manifest, decode_define_recipient, decode_heartbeat,
    decode_message, decode_reply, decode_system,
};
use crate::frame::{FrameError, FrameKind, split_frame};
use crate::grain::{GrainFlags, decode_grain_request};
use crate::tables::{InboundTable, TableError};

/// Entries a peer may define per table on one connection: far above any real use, and a bound
/// on the memory a peer can make a node hold.
pub const MAX_TABLE_ENTRIES: u32 = 65_536;

/// A data-phase frame, decoded, with its names resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InboundFrame<'a> {
    /// A user message.
    Message {
        /// The recipient's id on this connection (stable while the connection lives).
        recipient_id: u32,
        /// The recipient's name.
        recipient: &'a str,
        /// The payload's manifest.
        manifest: &'a str,
        /// Non-zero when a reply is wanted.
        request_id: u64,
        /// The request context it carries, if any.
        context: Option<ContextView<'a>>,
        /// The encoded payload.
        payload: &'a [u8],
    },
    /// A reply to one of this node's requests.
    Reply {
        /// The request answered.
        request_id: u64,
        /// Its status.
        status: ReplyStatus,
        /// The encoded reply when the status is `Ok`.
        payload: &'a [u8],
    },
    /// A request for a virtual actor.
    GrainRequest {
        /// Non-zero when the sender wants the outcome.
        request_id: u64,
        /// The kind.
        kind: &'a str,
        /// The message's manifest; `None` for an end-of-handover marker.
        manifest: Option<&'a str>,
        /// The identity.
        identity: &'a str,
        /// Members it has been passed between.
        hops: u8,
        /// Milliseconds its sender still waits (0 for a tell).
        wait_ms: u64,
        /// Its flags.
        flags: GrainFlags,
        /// The request context it carries, if any.
        context: Option<ContextView<'a>>,
        /// The encoded message.
        payload: &'a [u8],
    },
    /// A heartbeat.
    Heartbeat(u64),
    /// A system message.
    System(SystemMessage),
    /// The peer leaves.
    Leave,
}

/// Why the connection must close: the peer broke the protocol, or stalled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InboundError {
    /// A frame was malformed (too large, empty, unknown kind).
    #[error("frame: {0}")]
    Frame(#[from] FrameError),
    /// A frame's body did not decode.
    #[error("{kind:?} frame: {error}")]
    Decode {
        /// The frame's kind.
        kind: FrameKind,
        /// What was wrong.
        error: DecodeError,
    },
    /// An id was used before its definition.
    #[error("{what} id {id} used before it was defined")]
    Undefined {
        /// "recipient" or "manifest".
        what: &'static str,
        /// The id.
        id: u32,
    },
    /// A definition was refused.
    #[error("definition: {0}")]
    Table(#[from] TableError),
    /// A handshake frame in the data phase.
    #[error("{0:?} frame after the handshake")]
    Unexpected(FrameKind),
    /// A frame was not complete within the bound after its first byte arrived.
    #[error("a frame was not complete within {0:?} of its first byte")]
    Stalled(Duration),
}

/// Decodes one connection's data phase. Time is passed in: [`deadline`](Self::deadline) says
/// when the frame under way must be complete, whatever the pace of the reads that bring it.
///
/// # Example
///
/// ```
/// use std::time::{Duration, Instant};
/// use rally_wire::{InboundDecoder, InboundError};
///
/// let mut decoder = InboundDecoder::new(1 << 20, Duration::from_secs(10));
/// let start = Instant::now();
/// // Half a heartbeat frame: nothing decoded, a deadline is set.
/// assert_eq!(decoder.decode(&[9, 0, 0, 0, 0x20], start, |_| {}).unwrap(), 0);
/// assert_eq!(decoder.deadline(), Some(start + Duration::from_secs(10)));
/// assert_eq!(decoder.check(start + Duration::from_secs(11)), Err(InboundError::Stalled(Duration::from_secs(10))));
/// ```
#[derive(Debug)]
pub struct InboundDecoder {
    recipients: InboundTable<String>,
    manifests: InboundTable<String>,
    max_frame: u32,
    frame_timeout: Duration,
    partial_since: Option<Instant>,
}

impl InboundDecoder {
    /// A decoder for frames of at most `max_frame` bytes, each of which must be complete within
    /// `frame_timeout` of its first byte.
    pub fn new(max_frame: u32, frame_timeout: Duration) -> Self {
        Self {
            recipients: InboundTable::new(MAX_TABLE_ENTRIES),
            manifests: InboundTable::new(MAX_TABLE_ENTRIES),
            max_frame,
            frame_timeout,
            partial_since: None,
        }
    }

    /// Decodes every complete frame at the start of `buf`, handing each to `on` (definitions
    /// are kept, not handed on); returns the bytes consumed. `now` is when `buf` was last read
    /// into.
    ///
    /// # Errors
    ///
    /// [`InboundError`]: the connection must close. Frames before the bad one were handed on.
    pub fn decode(
        &mut self,
        buf: &[u8],
        now: Instant,
        on: impl FnMut(InboundFrame<'_>),
    ) -> Result<usize, InboundError> {
        self.decode_at_most(buf, now, usize::MAX, on)
            .map(|(consumed, _)| consumed)
    }

    /// [`decode`](Self::decode), stopping after `max_frames` frames (definitions count):
    /// returns the bytes consumed and the frames decoded. A caller that got `max_frames` back
    /// calls again for the rest of `buf` (a reader that hands its actors a bounded slice of a
    /// large read at a time).
    ///
    /// # Errors
    ///
    /// As [`decode`](Self::decode).
    ///
    /// # Example
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use bytes::BytesMut;
    /// use rally_wire::{InboundDecoder, OutboundEncoder};
    ///
    /// let mut encoder = OutboundEncoder::new(1 << 16);
    /// for n in 1..=3 {
    ///     encoder.push_heartbeat(n);
    /// }
    /// let mut wire = BytesMut::new();
    /// encoder.take(&mut wire);
    /// let mut decoder = InboundDecoder::new(1 << 16, Duration::from_secs(10));
    /// let now = Instant::now();
    /// let (used, frames) = decoder.decode_at_most(&wire, now, 2, |_| {}).unwrap();
    /// assert_eq!(frames, 2);
    /// let (rest, frames) = decoder.decode_at_most(&wire[used..], now, 2, |_| {}).unwrap();
    /// assert_eq!((used + rest, frames), (wire.len(), 1));
    /// ```
    pub fn decode_at_most(
        &mut self,
        buf: &[u8],
        now: Instant,
        max_frames: usize,
        mut on: impl FnMut(InboundFrame<'_>),
    ) -> Result<(usize, usize), InboundError> {
        let mut consumed = 0;
        let mut frames = 0;
        while frames < max_frames {
            let Some((kind, body, used)) = split_frame(&buf[consumed..], self.max_frame)? else {
                break;
            };
            self.on_frame(kind, body, &mut on)?;
            consumed += used;
            frames += 1;
        }
        // Whether a frame is under way: bytes are left that do not make a whole frame (when
        // the count stopped the loop, the rest is decoded by the next call, not timed).
        let partial = consumed < buf.len()
            && (frames < max_frames || split_frame(&buf[consumed..], self.max_frame)?.is_none());
        self.partial_since = match (partial, consumed > 0) {
            (false, _) => None,
            // A frame completed and the next one has begun in the same read.
            (true, true) => Some(now),
            (true, false) => Some(self.partial_since.unwrap_or(now)),
        };
        Ok((consumed, frames))
    }

    /// When the frame under way must be complete, if one is under way.
    pub fn deadline(&self) -> Option<Instant> {
        Some(self.partial_since? + self.frame_timeout)
    }

    /// Whether the frame under way has overrun its bound at `now`.
    ///
    /// # Errors
    ///
    /// [`InboundError::Stalled`].
    pub fn check(&self, now: Instant) -> Result<(), InboundError> {
        match self.deadline() {
            Some(deadline) if now >= deadline => Err(InboundError::Stalled(self.frame_timeout)),
            _ => Ok(()),
        }
    }

    fn on_frame(
        &mut self,
        kind: FrameKind,
        body: &[u8],
        on: &mut impl FnMut(InboundFrame<'_>),
    ) -> Result<(), InboundError> {
        let bad = |error| InboundError::Decode { kind, error };
        // A frame in a request context is the ordinary frame after a context block.
        let (kind, context, body) = match kind {
            FrameKind::MessageInContext | FrameKind::GrainRequestInContext => {
                let (context, rest) = ContextView::split(body).map_err(bad)?;
                let plain = if kind == FrameKind::MessageInContext {
                    FrameKind::Message
                } else {
                    FrameKind::GrainRequest
                };
                (plain, Some(context), rest)
            }
            other => (other, None, body),
        };
        match kind {
            FrameKind::Message => {
                let (header, payload) = decode_message(body).map_err(bad)?;
                let recipient =
                    self.recipients
                        .resolve(header.recipient)
                        .ok_or(InboundError::Undefined {
                            what: "recipient",
                            id: header.recipient,
                        })?;
                let manifest =
                    self.manifests
                        .resolve(header.manifest)
                        .ok_or(InboundError::Undefined {
                            what: "manifest",
                            id: header.manifest,
                        })?;
                on(InboundFrame::Message {
                    recipient_id: header.recipient,
                    recipient,
                    manifest,
                    request_id: header.request_id,
                    context,
                    payload,
                });
            }
            FrameKind::GrainRequest => {
                let (header, identity, payload) = decode_grain_request(body).map_err(bad)?;
                let undefined = |id| InboundError::Undefined {
                    what: "manifest",
                    id,
                };
                let kind = self
                    .manifests
                    .resolve(header.kind)
                    .ok_or(undefined(header.kind))?;
                let manifest = match header.manifest {
                    0 => None,
                    id => Some(self.manifests.resolve(id).ok_or(undefined(id))?.as_str()),
                };
                on(InboundFrame::GrainRequest {
                    request_id: header.request_id,
                    kind,
                    manifest,
                    identity,
                    hops: header.hops,
                    wait_ms: header.wait_ms,
                    flags: header.flags,
                    context,
                    payload,
                });
            }
            FrameKind::Reply => {
                let (header, payload) = decode_reply(body).map_err(bad)?;
                on(InboundFrame::Reply {
                    request_id: header.request_id,
                    status: header.status,
                    payload,
                });
            }
            FrameKind::DefineRecipient => {
                let (id, name) = decode_define_recipient(body).map_err(bad)?;
                self.recipients.define(id, name.to_owned())?;
            }
            FrameKind::DefineManifest => {
                let (id, manifest) = decode_define_manifest(body).map_err(bad)?;
                self.manifests.define(id, manifest.to_owned())?;
            }
            FrameKind::Heartbeat => on(InboundFrame::Heartbeat(
                decode_heartbeat(body).map_err(bad)?,
            )),
            FrameKind::System => on(InboundFrame::System(decode_system(body).map_err(bad)?)),
            FrameKind::Leave => on(InboundFrame::Leave),
            other => return Err(InboundError::Unexpected(other)),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn a_frame_dripped_byte_by_byte_is_bounded_from_its_first_byte() {
        let mut decoder = InboundDecoder::new(1024, 10 * SECOND);
        let start = Instant::now();
        let frame = [9u8, 0, 0, 0, 0x20, 1, 2, 3, 4, 5, 6, 7, 8];
        let mut buf = Vec::new();
        for (i, byte) in frame[..8].iter().enumerate() {
            buf.push(*byte);
            let now = start + 4 * SECOND * i as u32;
            assert_eq!(decoder.decode(&buf, now, |_| {}).unwrap(), 0);
            if i >= 3 {
                assert!(decoder.check(now).is_err(), "byte {i} at {:?}", now - start);
            }
        }
        assert_eq!(decoder.deadline(), Some(start + 10 * SECOND));
    }

    #[test]
    fn each_completed_frame_restarts_the_bound_for_the_next() {
        let mut decoder = InboundDecoder::new(1024, 10 * SECOND);
        let start = Instant::now();
        let mut heartbeat = bytes::BytesMut::new();
        crate::encode_heartbeat(&mut heartbeat, 1);
        let mut buf = heartbeat.to_vec();
        buf.extend_from_slice(&heartbeat[..3]);
        let mut beats = 0;
        let used = decoder
            .decode(&buf, start + 5 * SECOND, |_| beats += 1)
            .unwrap();
        assert_eq!((used, beats), (heartbeat.len(), 1));
        assert_eq!(decoder.deadline(), Some(start + 15 * SECOND));
        assert_eq!(decoder.decode(&buf[used..], start, |_| {}).unwrap(), 0);
        assert_eq!(decoder.deadline(), Some(start + 15 * SECOND));
        assert_eq!(decoder.decode(&[], start, |_| {}).unwrap(), 0);
        assert_eq!(decoder.deadline(), None);
    }

    #[test]
    fn bad_frames_say_why() {
        let mut decoder = InboundDecoder::new(1024, SECOND);
        let now = Instant::now();
        let mut buf = bytes::BytesMut::new();
        let mark = crate::begin_frame(&mut buf, FrameKind::Message);
        let header = crate::MessageHeader {
            recipient: 3,
            manifest: 1,
            request_id: 0,
        };
        crate::write_message_header(&mut buf, &header);
        crate::finish_frame(&mut buf, mark, 1024).unwrap();
        assert_eq!(
            decoder.decode(&buf, now, |_| {}),
            Err(InboundError::Undefined {
                what: "recipient",
                id: 3
            })
        );
        assert_eq!(
            decoder.decode(&[1, 0, 0, 0, FrameKind::Hello as u8], now, |_| {}),
            Err(InboundError::Unexpected(FrameKind::Hello))
        );
        assert!(matches!(
            decoder.decode(&[0xff, 0xff, 0, 0], now, |_| {}),
            Err(InboundError::Frame(FrameError::TooLarge { .. }))
        ));
    }
}
