//! The frames of the data phase: messages, replies, table definitions, heartbeats, system
//! messages, leave.

use bytes::{BufMut, BytesMut};

use crate::codec::{DecodeError, Reader, put_str, put_varint};
use crate::frame::{FrameKind, begin_frame};

/// Longest recipient name.
pub const MAX_RECIPIENT_LEN: usize = 1024;
/// Longest manifest.
pub const MAX_MANIFEST_LEN: usize = 256;

/// The header of a message frame; the payload follows it.
///
/// # Example
///
/// A steady-state message is 5 frame bytes + 3 header bytes + the payload:
///
/// ```
/// use bytes::BytesMut;
/// use rally_wire::{FrameKind, MessageHeader, begin_frame, decode_message, finish_frame, write_message_header};
///
/// let mut out = BytesMut::new();
/// let mark = begin_frame(&mut out, FrameKind::Message);
/// write_message_header(&mut out, &MessageHeader { recipient: 3, manifest: 2, request_id: 0 });
/// out.extend_from_slice(b"hi");
/// finish_frame(&mut out, mark, 1 << 20).unwrap();
/// assert_eq!(out.len(), 5 + 3 + 2);
/// let (header, payload) = decode_message(&out[5..]).unwrap();
/// assert_eq!((header.recipient, payload), (3, &b"hi"[..]));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageHeader {
    /// The recipient's id in this connection's table.
    pub recipient: u32,
    /// The manifest's id in this connection's table.
    pub manifest: u32,
    /// Non-zero when the sender wants a reply, which will carry this id.
    pub request_id: u64,
}

/// Appends a message header (between `begin_frame` and `finish_frame`).
pub fn write_message_header(out: &mut BytesMut, header: &MessageHeader) {
    put_varint(out, u64::from(header.recipient));
    put_varint(out, u64::from(header.manifest));
    put_varint(out, header.request_id);
}

/// Splits a message body into its header and payload.
///
/// # Errors
///
/// [`DecodeError`] for a truncated or out-of-range header.
pub fn decode_message(body: &[u8]) -> Result<(MessageHeader, &[u8]), DecodeError> {
    let mut reader = Reader::new(body);
    let recipient = reader.varint_u32("recipient")?;
    let manifest = reader.varint_u32("manifest")?;
    let request_id = reader.varint()?;
    Ok((
        MessageHeader {
            recipient,
            manifest,
            request_id,
        },
        reader.rest(),
    ))
}

/// How a request was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ReplyStatus {
    /// The payload is the reply.
    Ok = 0,
    /// The recipient stopped before replying.
    RecipientGone = 1,
    /// No actor is exposed under the recipient's name.
    UnknownRecipient = 2,
    /// The request's payload did not decode.
    DecodeFailed = 3,
    /// The handler failed.
    HandlerFailed = 4,
    /// The reply did not encode.
    EncodeFailed = 5,
    /// The manifest is not registered for the recipient.
    UnknownManifest = 6,
    /// A call filter of the recipient rejected the message; its reason is the payload.
    Rejected = 7,
}

impl ReplyStatus {
    fn from_u8(byte: u8) -> Option<Self> {
        Some(match byte {
            0 => Self::Ok,
            1 => Self::RecipientGone,
            2 => Self::UnknownRecipient,
            3 => Self::DecodeFailed,
            4 => Self::HandlerFailed,
            5 => Self::EncodeFailed,
            6 => Self::UnknownManifest,
            7 => Self::Rejected,
            _ => return None,
        })
    }
}

/// The header of a reply frame; the payload follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyHeader {
    /// The request being answered.
    pub request_id: u64,
    /// How.
    pub status: ReplyStatus,
}

/// Appends a reply header.
pub fn write_reply_header(out: &mut BytesMut, header: &ReplyHeader) {
    put_varint(out, header.request_id);
    out.put_u8(header.status as u8);
}

/// Splits a reply body into its header and payload.
///
/// # Errors
///
/// [`DecodeError`] for a truncated header or unknown status.
pub fn decode_reply(body: &[u8]) -> Result<(ReplyHeader, &[u8]), DecodeError> {
    let mut reader = Reader::new(body);
    let request_id = reader.varint()?;
    let byte = reader.u8()?;
    let status = ReplyStatus::from_u8(byte).ok_or(DecodeError::UnknownValue {
        field: "reply status",
        value: byte,
    })?;
    Ok((ReplyHeader { request_id, status }, reader.rest()))
}

fn whole_frame(out: &mut BytesMut, kind: FrameKind, body: impl FnOnce(&mut BytesMut)) {
    let mark = begin_frame(out, kind);
    body(out);
    // Definition, heartbeat and system frames are bounded by their string limits, far below
    // any allowed maximum frame size.
    crate::frame::finish_frame(out, mark, u32::MAX)
        .expect("a small control frame is below u32::MAX");
}

/// Appends a whole DefineRecipient frame.
pub fn encode_define_recipient(out: &mut BytesMut, id: u32, name: &str) {
    whole_frame(out, FrameKind::DefineRecipient, |out| {
        put_varint(out, u64::from(id));
        put_str(out, name);
    });
}

/// Reads a DefineRecipient body.
///
/// # Errors
///
/// [`DecodeError`] for a malformed body or a name over [`MAX_RECIPIENT_LEN`].
pub fn decode_define_recipient(body: &[u8]) -> Result<(u32, &str), DecodeError> {
    let mut reader = Reader::new(body);
    let id = reader.varint_u32("recipient id")?;
    let name = reader.str("recipient", MAX_RECIPIENT_LEN)?;
    reader.finish()?;
    Ok((id, name))
}

/// Appends a whole DefineManifest frame.
pub fn encode_define_manifest(out: &mut BytesMut, id: u32, manifest: &str) {
    whole_frame(out, FrameKind::DefineManifest, |out| {
        put_varint(out, u64::from(id));
        put_str(out, manifest);
    });
}

/// Reads a DefineManifest body.
///
/// # Errors
///
/// [`DecodeError`] for a malformed body or a manifest over [`MAX_MANIFEST_LEN`].
pub fn decode_define_manifest(body: &[u8]) -> Result<(u32, &str), DecodeError> {
    let mut reader = Reader::new(body);
    let id = reader.varint_u32("manifest id")?;
    let manifest = reader.str("manifest", MAX_MANIFEST_LEN)?;
    reader.finish()?;
    Ok((id, manifest))
}

/// Appends a whole Heartbeat frame.
pub fn encode_heartbeat(out: &mut BytesMut, sequence: u64) {
    whole_frame(out, FrameKind::Heartbeat, |out| put_varint(out, sequence));
}

/// Reads a Heartbeat body: its sequence number.
///
/// # Errors
///
/// [`DecodeError`] for a malformed body.
pub fn decode_heartbeat(body: &[u8]) -> Result<u64, DecodeError> {
    let mut reader = Reader::new(body);
    let sequence = reader.varint()?;
    reader.finish()?;
    Ok(sequence)
}

/// Appends a whole Leave frame.
pub fn encode_leave(out: &mut BytesMut) {
    whole_frame(out, FrameKind::Leave, |_| {});
}

/// Death-watch traffic between nodes (actors named as on the wire).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SystemMessage {
    /// `watcher` (on the sender) watches `watchee` (on the receiver).
    Watch {
        /// The watched actor's name on the receiving node.
        watchee: String,
        /// The watcher's key on the sending node.
        watcher: String,
    },
    /// Stops a watch.
    Unwatch {
        /// The watched actor's name on the receiving node.
        watchee: String,
        /// The watcher's key on the sending node.
        watcher: String,
    },
    /// `actor` (on the sender) has stopped.
    Terminated {
        /// The stopped actor's name on the sending node.
        actor: String,
    },
    /// Stop `actor` (on the receiver), as `ActorRef::stop` does locally.
    Stop {
        /// The actor's name on the receiving node.
        actor: String,
    },
    /// A message the receiver of this notice sent was not delivered: no actor is exposed as
    /// `recipient` on the node that sends the notice. The receiver counts a dead letter.
    Undelivered {
        /// The name the message was sent to.
        recipient: String,
        /// The message's manifest.
        manifest: String,
    },
}

/// Appends a whole System frame.
pub fn encode_system(out: &mut BytesMut, msg: &SystemMessage) {
    whole_frame(out, FrameKind::System, |out| match msg {
        SystemMessage::Watch { watchee, watcher } => {
            out.put_u8(1);
            put_str(out, watchee);
            put_str(out, watcher);
        }
        SystemMessage::Unwatch { watchee, watcher } => {
            out.put_u8(2);
            put_str(out, watchee);
            put_str(out, watcher);
        }
        SystemMessage::Terminated { actor } => {
            out.put_u8(3);
            put_str(out, actor);
        }
        SystemMessage::Stop { actor } => {
            out.put_u8(4);
            put_str(out, actor);
        }
        SystemMessage::Undelivered {
            recipient,
            manifest,
        } => {
            out.put_u8(5);
            put_str(out, recipient);
            put_str(out, manifest);
        }
    });
}

/// Reads a System body.
///
/// # Errors
///
/// [`DecodeError`] for a malformed body or an unknown tag.
pub fn decode_system(body: &[u8]) -> Result<SystemMessage, DecodeError> {
    let mut reader = Reader::new(body);
    let msg = match reader.u8()? {
        1 => SystemMessage::Watch {
            watchee: reader.str("watchee", MAX_RECIPIENT_LEN)?.to_owned(),
            watcher: reader.str("watcher", MAX_RECIPIENT_LEN)?.to_owned(),
        },
        2 => SystemMessage::Unwatch {
            watchee: reader.str("watchee", MAX_RECIPIENT_LEN)?.to_owned(),
            watcher: reader.str("watcher", MAX_RECIPIENT_LEN)?.to_owned(),
        },
        3 => SystemMessage::Terminated {
            actor: reader.str("actor", MAX_RECIPIENT_LEN)?.to_owned(),
        },
        4 => SystemMessage::Stop {
            actor: reader.str("actor", MAX_RECIPIENT_LEN)?.to_owned(),
        },
        5 => SystemMessage::Undelivered {
            recipient: reader.str("recipient", MAX_RECIPIENT_LEN)?.to_owned(),
            manifest: reader.str("manifest", MAX_MANIFEST_LEN)?.to_owned(),
        },
        value => {
            return Err(DecodeError::UnknownValue {
                field: "system message tag",
                value,
            });
        }
    };
    reader.finish()?;
    Ok(msg)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::frame::{finish_frame, split_frame};

    fn body(out: &BytesMut) -> &[u8] {
        split_frame(out, u32::MAX).unwrap().unwrap().1
    }

    #[test]
    fn steady_state_message_header_is_three_bytes() {
        let mut out = BytesMut::new();
        let mark = begin_frame(&mut out, FrameKind::Message);
        write_message_header(
            &mut out,
            &MessageHeader {
                recipient: 3,
                manifest: 2,
                request_id: 0,
            },
        );
        finish_frame(&mut out, mark, 1024).unwrap();
        assert_eq!(out.len(), 5 + 3);
    }

    proptest! {
        #[test]
        fn messages_round_trip(recipient: u32, manifest: u32, request_id: u64, payload: Vec<u8>) {
            let mut out = BytesMut::new();
            let header = MessageHeader { recipient, manifest, request_id };
            let mark = begin_frame(&mut out, FrameKind::Message);
            write_message_header(&mut out, &header);
            out.extend_from_slice(&payload);
            finish_frame(&mut out, mark, u32::MAX).unwrap();
            let (decoded, rest) = decode_message(body(&out)).unwrap();
            prop_assert_eq!(decoded, header);
            prop_assert_eq!(rest, &payload[..]);
        }

        #[test]
        fn replies_round_trip(request_id: u64, status in 0u8..7, payload: Vec<u8>) {
            let header = ReplyHeader { request_id, status: ReplyStatus::from_u8(status).unwrap() };
            let mut out = BytesMut::new();
            let mark = begin_frame(&mut out, FrameKind::Reply);
            write_reply_header(&mut out, &header);
            out.extend_from_slice(&payload);
            finish_frame(&mut out, mark, u32::MAX).unwrap();
            let (decoded, rest) = decode_reply(body(&out)).unwrap();
            prop_assert_eq!(decoded, header);
            prop_assert_eq!(rest, &payload[..]);
        }

        #[test]
        fn definitions_round_trip(id: u32, name in "[a-z0-9./-]{0,64}") {
            let mut out = BytesMut::new();
            encode_define_recipient(&mut out, id, &name);
            prop_assert_eq!(decode_define_recipient(body(&out)).unwrap(), (id, name.as_str()));
            let mut out = BytesMut::new();
            encode_define_manifest(&mut out, id, &name);
            prop_assert_eq!(decode_define_manifest(body(&out)).unwrap(), (id, name.as_str()));
        }

        #[test]
        fn heartbeats_and_system_messages_round_trip(sequence: u64, a in "[a-z]{0,16}", b in "[a-z]{0,16}", tag in 0u8..5) {
            let mut out = BytesMut::new();
            encode_heartbeat(&mut out, sequence);
            prop_assert_eq!(decode_heartbeat(body(&out)).unwrap(), sequence);
            let msg = match tag {
                0 => SystemMessage::Watch { watchee: a, watcher: b },
                1 => SystemMessage::Unwatch { watchee: a, watcher: b },
                2 => SystemMessage::Terminated { actor: a },
                3 => SystemMessage::Stop { actor: a },
                _ => SystemMessage::Undelivered { recipient: a, manifest: b },
            };
            let mut out = BytesMut::new();
            encode_system(&mut out, &msg);
            prop_assert_eq!(decode_system(body(&out)).unwrap(), msg);
        }

        #[test]
        fn decoders_never_panic(bytes: Vec<u8>) {
            let _ = decode_message(&bytes);
            let _ = decode_reply(&bytes);
            let _ = decode_define_recipient(&bytes);
            let _ = decode_define_manifest(&bytes);
            let _ = decode_heartbeat(&bytes);
            let _ = decode_system(&bytes);
        }
    }
}
