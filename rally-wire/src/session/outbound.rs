//! The sending half of a data-phase connection: frames encoded into one buffer with the
//! connection's compression tables, each push all-or-nothing.

use bytes::BytesMut;

use crate::envelope::{
    MessageHeader, ReplyHeader, ReplyStatus, SystemMessage, encode_define_manifest,
    encode_define_recipient, encode_heartbeat, encode_leave, encode_system, write_message_header,
    write_reply_header,
};
use crate::frame::{FrameKind, begin_frame, finish_frame, split_frame};
use crate::grain::{GrainFlags, GrainHeader, write_grain_request};
use crate::tables::OutboundTable;
use rustc_hash::FxHashMap;

/// Why a message was not queued. Nothing of it is left in the buffer or the tables.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// The encoded message exceeds the maximum frame size (the smaller of this node's and the
    /// peer's, once the peer's is known).
    #[error("the message encodes to {size} bytes, more than the maximum of {max}")]
    TooLarge {
        /// Encoded size (kind + body).
        size: usize,
        /// The maximum in force.
        max: u32,
    },
    /// The payload's encoder failed (or panicked).
    #[error("the message failed to encode: {0}")]
    Encode(String),
}

/// A recipient as the sender knows it: a process-unique number (a cheap key) and its name on
/// the wire.
#[derive(Debug, Clone, Copy)]
pub struct RecipientKey<'a> {
    /// A number unique to this name in the process (the ref's id).
    pub id: u64,
    /// The name the peer exposes the actor under.
    pub name: &'a str,
}

/// A manifest as the sender knows it: a cheap key (the address of a `&'static str`) and the
/// manifest itself.
#[derive(Debug, Clone, Copy)]
pub struct ManifestKey<'a> {
    /// A number unique to this manifest in the process.
    pub id: usize,
    /// The manifest on the wire.
    pub name: &'a str,
}

/// Writes a reply's value into the buffer; an error is the encoder's complaint.
pub type EncodeReply<'a> = &'a mut dyn FnMut(&mut BytesMut) -> Result<(), String>;

/// How a reply was queued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyQueued {
    /// The reply went in as given.
    AsGiven,
    /// The reply could not be encoded; an error reply (`EncodeFailed`) went in its place, so
    /// the asker hears at once.
    Replaced(EncodeError),
}

/// What [`OutboundEncoder::take`] handed over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Batch {
    /// Frames of any kind in the batch.
    pub frames: u32,
    /// User messages in the batch.
    pub messages: u64,
}

/// Encodes the data phase of one lane into one buffer; the writer takes the whole buffer at
/// once ([`take`](Self::take)), so batches form by themselves.
///
/// Every message gets a sequence number; [`handed`](Self::handed) is the highest one handed
/// to the transport, which tells a caller whether a lost request may have reached the peer.
///
/// # Example
///
/// ```
/// use bytes::BytesMut;
/// use rally_wire::{InboundDecoder, InboundFrame, ManifestKey, OutboundEncoder, RecipientKey};
///
/// let mut encoder = OutboundEncoder::new(1 << 20);
/// let to = RecipientKey { id: 1, name: "echo" };
/// let manifest = ManifestKey { id: 1, name: "example.Ping" };
/// encoder.push_message(to, manifest, 0, None, |buf| { buf.extend_from_slice(b"hi"); Ok(()) }).unwrap();
/// let mut wire = BytesMut::new();
/// encoder.take(&mut wire);
///
/// let mut decoder = InboundDecoder::new(1 << 20, std::time::Duration::from_secs(10));
/// let mut seen = Vec::new();
/// decoder.decode(&wire, std::time::Instant::now(), |frame| {
///     if let InboundFrame::Message { recipient, manifest, payload, .. } = frame {
///         seen.push((recipient.to_owned(), manifest.to_owned(), payload.to_vec()));
///     }
/// }).unwrap();
/// assert_eq!(seen, [("echo".to_owned(), "example.Ping".to_owned(), b"hi".to_vec())]);
/// ```
#[derive(Debug)]
pub struct OutboundEncoder {
    buf: BytesMut,
    recipients: OutboundTable,
    manifests: OutboundTable,
    known_recipients: FxHashMap<u64, u32>,
    known_manifests: FxHashMap<usize, u32>,
    local_max: u32,
    peer_max: u32,
    messages: u64,
    frames: u32,
    sequence: u64,
    handed: u64,
    in_use: bool,
}

impl OutboundEncoder {
    /// An empty encoder for frames of at most `max_frame` bytes.
    pub fn new(max_frame: u32) -> Self {
        Self {
            buf: BytesMut::with_capacity(64 * 1024),
            recipients: OutboundTable::default(),
            manifests: OutboundTable::default(),
            known_recipients: FxHashMap::default(),
            known_manifests: FxHashMap::default(),
            local_max: max_frame,
            peer_max: u32::MAX,
            messages: 0,
            frames: 0,
            sequence: 0,
            handed: 0,
            in_use: false,
        }
    }

    /// The largest frame that may be queued now.
    pub fn max_frame(&self) -> u32 {
        self.local_max.min(self.peer_max)
    }

    /// Bytes queued.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The highest message sequence number handed to the transport so far.
    pub fn handed(&self) -> u64 {
        self.handed
    }

    /// Queues a message for `recipient`, its payload written by `encode`; returns its sequence
    /// number. Definitions of a new recipient or manifest go first. With `context` (which
    /// writes a block with [`write_context`](crate::write_context)) the frame is a
    /// `MessageInContext`; without, an ordinary `Message`, not a byte longer.
    ///
    /// # Errors
    ///
    /// [`EncodeError`]; then the buffer and the tables are exactly as before the call.
    pub fn push_message(
        &mut self,
        recipient: RecipientKey<'_>,
        manifest: ManifestKey<'_>,
        request_id: u64,
        context: Option<&dyn Fn(&mut BytesMut)>,
        encode: impl FnOnce(&mut BytesMut) -> Result<(), String>,
    ) -> Result<u64, EncodeError> {
        let start = self.buf.len();
        let max = self.max_frame();
        let (recipient_id, new_recipient) = match self.known_recipients.get(&recipient.id) {
            Some(&id) => (id, None),
            None => {
                let (id, new) = self.recipients.lookup_or_insert(recipient.name);
                if new {
                    encode_define_recipient(&mut self.buf, id, recipient.name);
                }
                self.known_recipients.insert(recipient.id, id);
                (id, Some(new))
            }
        };
        let (manifest_id, new_manifest) = self.define_manifest(manifest);
        let mark = match context {
            None => begin_frame(&mut self.buf, FrameKind::Message),
            Some(write) => {
                let mark = begin_frame(&mut self.buf, FrameKind::MessageInContext);
                write(&mut self.buf);
                mark
            }
        };
        write_message_header(
            &mut self.buf,
            &MessageHeader {
                recipient: recipient_id,
                manifest: manifest_id,
                request_id,
            },
        );
        let written = encode(&mut self.buf)
            .map_err(EncodeError::Encode)
            .and_then(|()| {
                finish_frame(&mut self.buf, mark, max)
                    .map_err(|e| EncodeError::TooLarge { size: e.size, max })
            });
        if let Err(error) = written {
            // All or nothing: the definitions written for this message go too, and the tables
            // forget what they learnt, so the next push defines them again.
            self.buf.truncate(start);
            if let Some(new) = new_recipient {
                self.known_recipients.remove(&recipient.id);
                if new {
                    self.recipients.forget_newest(recipient.name);
                }
            }
            self.forget_manifest(manifest, new_manifest);
            return Err(error);
        }
        self.frames = self.frames.saturating_add(1);
        self.messages += 1;
        self.sequence += 1;
        Ok(self.sequence)
    }

    /// Queues a grain request for `identity` of `kind`, its message (`manifest`, `None` for an
    /// end-of-handover marker) written by `encode`; returns its sequence number. The kind and
    /// the manifest share the manifest table; their definitions go first when new. `context`
    /// as for [`push_message`](Self::push_message).
    ///
    /// # Errors
    ///
    /// [`EncodeError`]; then the buffer and the tables are exactly as before the call.
    #[allow(clippy::too_many_arguments)]
    pub fn push_grain_request(
        &mut self,
        kind: ManifestKey<'_>,
        manifest: Option<ManifestKey<'_>>,
        identity: &str,
        request_id: u64,
        hops: u8,
        wait_ms: u64,
        flags: GrainFlags,
        context: Option<&dyn Fn(&mut BytesMut)>,
        encode: impl FnOnce(&mut BytesMut) -> Result<(), String>,
    ) -> Result<u64, EncodeError> {
        let start = self.buf.len();
        let max = self.max_frame();
        let (kind_id, new_kind) = self.define_manifest(kind);
        let (manifest_id, new_manifest) = match manifest {
            Some(manifest) => self.define_manifest(manifest),
            None => (0, None),
        };
        let mark = match context {
            None => begin_frame(&mut self.buf, FrameKind::GrainRequest),
            Some(write) => {
                let mark = begin_frame(&mut self.buf, FrameKind::GrainRequestInContext);
                write(&mut self.buf);
                mark
            }
        };
        let header = GrainHeader {
            request_id,
            kind: kind_id,
            manifest: manifest_id,
            hops,
            wait_ms,
            flags,
        };
        write_grain_request(&mut self.buf, &header, identity);
        let written = encode(&mut self.buf)
            .map_err(EncodeError::Encode)
            .and_then(|()| {
                finish_frame(&mut self.buf, mark, max)
                    .map_err(|e| EncodeError::TooLarge { size: e.size, max })
            });
        if let Err(error) = written {
            // All or nothing, as for a message.
            self.buf.truncate(start);
            if let Some(manifest) = manifest {
                self.forget_manifest(manifest, new_manifest);
            }
            self.forget_manifest(kind, new_kind);
            return Err(error);
        }
        self.frames = self.frames.saturating_add(1);
        self.messages += 1;
        self.sequence += 1;
        Ok(self.sequence)
    }

    /// The id of `manifest` on this connection, its definition queued first when new. The
    /// second part says whether this call learnt it (`Some(new)`: undo with
    /// [`forget_manifest`](Self::forget_manifest) if the push fails).
    fn define_manifest(&mut self, manifest: ManifestKey<'_>) -> (u32, Option<bool>) {
        match self.known_manifests.get(&manifest.id) {
            Some(&id) => (id, None),
            None => {
                let (id, new) = self.manifests.lookup_or_insert(manifest.name);
                if new {
                    encode_define_manifest(&mut self.buf, id, manifest.name);
                }
                self.known_manifests.insert(manifest.id, id);
                (id, Some(new))
            }
        }
    }

    /// Undoes what [`define_manifest`](Self::define_manifest) learnt (its definition is gone
    /// with the truncated buffer).
    fn forget_manifest(&mut self, manifest: ManifestKey<'_>, learnt: Option<bool>) {
        if let Some(new) = learnt {
            self.known_manifests.remove(&manifest.id);
            if new {
                self.manifests.forget_newest(manifest.name);
            }
        }
    }

    /// Queues a reply to request `request_id` with a status that is not `Ok` and a short text
    /// saying why (a call filter's reason for `Rejected`), cut to 512 bytes (the smallest frame maximum a peer may set is 1 KiB).
    pub fn push_status_reply(&mut self, request_id: u64, status: ReplyStatus, text: &str) {
        let mark = begin_frame(&mut self.buf, FrameKind::Reply);
        write_reply_header(&mut self.buf, &ReplyHeader { request_id, status });
        let mut end = text.len().min(512);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        self.buf.extend_from_slice(&text.as_bytes()[..end]);
        let max = self.max_frame();
        finish_frame(&mut self.buf, mark, max)
            .expect("a status reply is at most 512 bytes and a header, below any maximum");
        self.frames = self.frames.saturating_add(1);
    }

    /// Queues the reply to request `request_id`: a value written by `encode`, or a status. A
    /// value that fails to encode (or is too large) is replaced by an `EncodeFailed` reply, so
    /// the asker always hears.
    pub fn push_reply(
        &mut self,
        request_id: u64,
        reply: Result<EncodeReply<'_>, ReplyStatus>,
    ) -> ReplyQueued {
        let start = self.buf.len();
        let max = self.max_frame();
        let mark = begin_frame(&mut self.buf, FrameKind::Reply);
        let outcome = match reply {
            Ok(encode) => {
                write_reply_header(
                    &mut self.buf,
                    &ReplyHeader {
                        request_id,
                        status: ReplyStatus::Ok,
                    },
                );
                encode(&mut self.buf)
                    .map_err(EncodeError::Encode)
                    .and_then(|()| {
                        finish_frame(&mut self.buf, mark, max)
                            .map(drop)
                            .map_err(|e| EncodeError::TooLarge { size: e.size, max })
                    })
                    .err()
            }
            Err(status) => {
                write_reply_header(&mut self.buf, &ReplyHeader { request_id, status });
                finish_frame(&mut self.buf, mark, max)
                    .expect("a status reply is a few bytes, far below any maximum");
                None
            }
        };
        self.frames = self.frames.saturating_add(1);
        match outcome {
            None => ReplyQueued::AsGiven,
            Some(error) => {
                self.buf.truncate(start);
                let mark = begin_frame(&mut self.buf, FrameKind::Reply);
                write_reply_header(
                    &mut self.buf,
                    &ReplyHeader {
                        request_id,
                        status: ReplyStatus::EncodeFailed,
                    },
                );
                finish_frame(&mut self.buf, mark, max)
                    .expect("a status reply is a few bytes, far below any maximum");
                ReplyQueued::Replaced(error)
            }
        }
    }

    /// Queues a system message (watch, unwatch, terminated, stop).
    pub fn push_system(&mut self, msg: &SystemMessage) {
        encode_system(&mut self.buf, msg);
        self.frames = self.frames.saturating_add(1);
    }

    /// Queues a heartbeat.
    pub fn push_heartbeat(&mut self, sequence: u64) {
        encode_heartbeat(&mut self.buf, sequence);
        self.frames = self.frames.saturating_add(1);
    }

    /// Queues a leave notice.
    pub fn push_leave(&mut self) {
        encode_leave(&mut self.buf);
        self.frames = self.frames.saturating_add(1);
    }

    /// Hands everything queued to the transport: swaps the buffer with `spare` (which must be
    /// empty) and marks the tables as seen by the connection.
    pub fn take(&mut self, spare: &mut BytesMut) -> Batch {
        debug_assert!(
            spare.is_empty(),
            "the spare buffer is written out before reuse"
        );
        std::mem::swap(&mut self.buf, spare);
        self.in_use = true;
        self.handed = self.sequence;
        Batch {
            frames: std::mem::take(&mut self.frames),
            messages: std::mem::take(&mut self.messages),
        }
    }

    /// The connection is gone. Frames already encoded for it use its tables, so if it had seen
    /// any, they are dropped (at-most-once) and the tables start again. Returns the number of
    /// messages dropped.
    pub fn reset_after_disconnect(&mut self) -> u64 {
        if !self.in_use {
            return 0;
        }
        self.discard()
    }

    /// Drops everything queued and starts the tables again (the peer's incarnation changed:
    /// nothing queued for the old one may reach the new one). Returns the messages dropped.
    pub fn discard(&mut self) -> u64 {
        let dropped = self.messages;
        self.buf.clear();
        self.messages = 0;
        self.frames = 0;
        self.recipients = OutboundTable::default();
        self.manifests = OutboundTable::default();
        self.known_recipients.clear();
        self.known_manifests.clear();
        self.in_use = false;
        dropped
    }

    /// The peer takes frames of at most `max` bytes (learnt in the handshake). Queued messages
    /// above it are dropped here rather than sent to be refused there; returns how many.
    pub fn set_peer_max(&mut self, max: u32) -> u64 {
        if max >= self.peer_max {
            self.peer_max = max;
            return 0;
        }
        self.peer_max = max;
        let limit = self.max_frame();
        let mut kept = BytesMut::with_capacity(self.buf.len());
        let mut dropped = 0;
        let mut rest = &self.buf[..];
        while let Ok(Some((kind, body, used))) = split_frame(rest, u32::MAX) {
            if kind == FrameKind::Message && body.len() + 1 > limit as usize {
                dropped += 1;
            } else {
                kept.extend_from_slice(&rest[..used]);
            }
            rest = &rest[used..];
        }
        self.messages -= dropped;
        self.buf = kept;
        dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn to(name: &str) -> RecipientKey<'_> {
        RecipientKey { id: 7, name }
    }

    const M: ManifestKey<'static> = ManifestKey { id: 1, name: "m" };

    #[test]
    fn a_message_without_a_context_is_the_frame_it_always_was_and_one_with_carries_it_first() {
        let mut encoder = OutboundEncoder::new(1 << 20);
        encoder
            .push_message(to("a"), M, 0, None, |_| Ok(()))
            .unwrap();
        let mut defined = BytesMut::new();
        encoder.take(&mut defined);
        // Steady state: a 5-byte frame header, 3 header bytes, the payload.
        encoder
            .push_message(to("a"), M, 0, None, |buf| {
                buf.extend_from_slice(b"hi");
                Ok(())
            })
            .unwrap();
        let mut plain = BytesMut::new();
        encoder.take(&mut plain);
        assert_eq!(plain.len(), 5 + 3 + 2);
        assert_eq!(frames(&plain)[0].0, FrameKind::Message);
        let write = |out: &mut BytesMut| {
            crate::write_context(out, None, [("tenant", "acme")].into_iter());
        };
        encoder
            .push_message(to("a"), M, 0, Some(&write), |buf| {
                buf.extend_from_slice(b"hi");
                Ok(())
            })
            .unwrap();
        let mut traced = BytesMut::new();
        encoder.take(&mut traced);
        let (kind, body) = frames(&traced).remove(0);
        assert_eq!(kind, FrameKind::MessageInContext);
        let (context, rest) = crate::ContextView::split(&body).unwrap();
        assert_eq!(context.entries().collect::<Vec<_>>(), [("tenant", "acme")]);
        assert_eq!(&rest[3..], b"hi");
    }

    #[test]
    fn a_refused_first_message_leaves_no_definitions_behind() {
        let mut encoder = OutboundEncoder::new(64);
        let refused = encoder.push_message(to("a"), M, 0, None, |buf| {
            buf.extend_from_slice(&[0; 100]);
            Ok(())
        });
        assert!(matches!(refused, Err(EncodeError::TooLarge { .. })));
        assert!(encoder.is_empty());
        let failed = encoder.push_message(to("a"), M, 0, None, |_| Err("no".into()));
        assert_eq!(failed, Err(EncodeError::Encode("no".into())));
        assert!(encoder.is_empty());
        // The next message defines both names again, with the first ids.
        assert_eq!(encoder.push_message(to("a"), M, 0, None, |_| Ok(())), Ok(1));
        let mut wire = BytesMut::new();
        encoder.take(&mut wire);
        let kinds: Vec<FrameKind> = frames(&wire).into_iter().map(|(k, _)| k).collect();
        assert_eq!(
            kinds,
            [
                FrameKind::DefineRecipient,
                FrameKind::DefineManifest,
                FrameKind::Message
            ]
        );
    }

    #[test]
    fn a_reply_that_fails_to_encode_becomes_an_error_reply() {
        let mut encoder = OutboundEncoder::new(1024);
        let queued = encoder.push_reply(
            5,
            Ok(&mut |buf: &mut BytesMut| {
                buf.extend_from_slice(b"partial");
                Err("refuses".to_owned())
            }),
        );
        assert_eq!(
            queued,
            ReplyQueued::Replaced(EncodeError::Encode("refuses".into()))
        );
        let mut wire = BytesMut::new();
        encoder.take(&mut wire);
        let (kind, body) = frames(&wire).remove(0);
        assert_eq!(kind, FrameKind::Reply);
        let (header, payload) = crate::decode_reply(&body).unwrap();
        assert_eq!(
            (header.request_id, header.status, payload),
            (5, ReplyStatus::EncodeFailed, &[][..])
        );
    }

    #[test]
    fn a_smaller_peer_maximum_drops_queued_messages_above_it() {
        let mut encoder = OutboundEncoder::new(1 << 20);
        encoder
            .push_message(to("a"), M, 0, None, |b| {
                b.extend_from_slice(&[1; 10]);
                Ok(())
            })
            .unwrap();
        encoder
            .push_message(to("a"), M, 0, None, |b| {
                b.extend_from_slice(&[1; 5000]);
                Ok(())
            })
            .unwrap();
        assert_eq!(encoder.set_peer_max(1024), 1);
        assert_eq!(encoder.max_frame(), 1024);
        let mut wire = BytesMut::new();
        assert_eq!(encoder.take(&mut wire).messages, 1);
        assert_eq!(frames(&wire).len(), 3);
        let refused = encoder.push_message(to("a"), M, 0, None, |b| {
            b.extend_from_slice(&[1; 5000]);
            Ok(())
        });
        assert!(matches!(
            refused,
            Err(EncodeError::TooLarge { max: 1024, .. })
        ));
    }

    #[test]
    fn sequence_numbers_tell_what_was_handed_over() {
        let mut encoder = OutboundEncoder::new(1024);
        let first = encoder
            .push_message(to("a"), M, 1, None, |_| Ok(()))
            .unwrap();
        let mut wire = BytesMut::new();
        encoder.take(&mut wire);
        let second = encoder
            .push_message(to("a"), M, 2, None, |_| Ok(()))
            .unwrap();
        assert!(first <= encoder.handed());
        assert!(second > encoder.handed());
        assert_eq!(encoder.reset_after_disconnect(), 1);
        assert!(encoder.is_empty());
    }

    fn frames(mut wire: &[u8]) -> Vec<(FrameKind, Vec<u8>)> {
        let mut out = Vec::new();
        while let Some((kind, body, used)) = split_frame(wire, u32::MAX).unwrap() {
            out.push((kind, body.to_vec()));
            wire = &wire[used..];
        }
        out
    }
}
