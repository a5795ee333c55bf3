//! Rally's wire protocol, with no I/O and no clock.
//!
//! Everything here works on byte slices and `BytesMut` buffers and takes time as an argument,
//! in the manner of `quinn-proto`: framing, the envelope frames of the data phase, the
//! per-connection compression tables, the authenticated handshake state machines and the
//! phi-accrual failure detector. `rally-remote` drives it over sockets; tests and fuzzers drive
//! it directly. The byte layout is specified in `docs/wire-protocol.md`.
//!
//! # Example
//!
//! ```
//! use bytes::BytesMut;
//! use rally_wire::{FrameKind, encode_heartbeat, decode_heartbeat, split_frame};
//!
//! let mut out = BytesMut::new();
//! encode_heartbeat(&mut out, 42);
//! let (kind, body, used) = split_frame(&out, 1024).unwrap().unwrap();
//! assert_eq!((kind, decode_heartbeat(body).unwrap(), used), (FrameKind::Heartbeat, 42, out.len()));
//! ```
//!
//! # Modules
//!
//! - ids: [`NodeAddress`], [`Incarnation`], [`UniqueAddress`], [`Lane`]
//! - framing: [`split_frame`], [`begin_frame`]/[`finish_frame`], the preface
//! - envelope frames: messages, replies, definitions, heartbeats, system messages
//! - grain frames: requests for virtual actors ([`GrainHeader`]) and their outcomes
//!   ([`GrainOutcome`])
//! - tables: [`OutboundTable`], [`InboundTable`]
//! - handshake: [`ClientHandshake`], [`ServerHandshake`]
//! - failure detection: [`PhiAccrualDetector`]
//! - the data phase as a session: [`OutboundEncoder`], [`InboundDecoder`], [`RequestTable`],
//!   [`Liveness`]

#![doc(test(attr(deny(warnings), allow(dead_code, unused_variables))))]

mod codec;
mod context;
mod envelope;
mod failure_detector;
mod frame;
mod grain;
mod handshake;
mod ids;
mod session;
mod tables;

pub use codec::{DecodeError, Reader, put_str, put_varint};
pub use context::{
    ContextView, MAX_CONTEXT_BYTES, MAX_CONTEXT_ENTRIES, MAX_CONTEXT_KEY_LEN, WireTrace,
    write_context,
};
pub use envelope::{
    MAX_MANIFEST_LEN, MAX_RECIPIENT_LEN, MessageHeader, ReplyHeader, ReplyStatus, SystemMessage,
    decode_define_manifest, decode_define_recipient, decode_heartbeat, decode_message,
    decode_reply, decode_system, encode_define_manifest, encode_define_recipient, encode_heartbeat,
    encode_leave, encode_system, write_message_header, write_reply_header,
};
pub use failure_detector::{InvalidPhiAccrualConfig, PhiAccrualConfig, PhiAccrualDetector};
pub use frame::{
    FRAME_HEADER_LEN, FrameError, FrameKind, FrameMark, FrameTooLargeError, MAGIC, PREFACE_LEN,
    PrefaceError, SplitFrame, VERSION, begin_frame, check_preface, encode_preface, finish_frame,
    is_tls_record, split_frame,
};
pub use grain::{
    GrainFlags, GrainHeader, GrainOutcome, Handled, MAX_IDENTITY_LEN, decode_grain_outcome,
    decode_grain_request, write_grain_outcome, write_grain_request,
};
pub use handshake::{
    ClientHandshake, HANDSHAKE_MAX_FRAME, HandshakeConfig, HandshakeError, HandshakeEvent,
    PeerInfo, RejectReason, ServerHandshake,
};
pub use ids::{
    AddressParseError, Incarnation, Lane, MAX_ORDINARY_LANES, NodeAddress, UniqueAddress,
};
pub use session::{
    Batch, EncodeError, EncodeReply, InboundDecoder, InboundError, InboundFrame, Liveness,
    MAX_EARLY_REPLIES, MAX_TABLE_ENTRIES, ManifestKey, Observed, OutboundEncoder, Outcome,
    RecipientKey, ReplyQueued, RequestTable, Waiting,
};
pub use tables::{InboundTable, OutboundTable, TableError};
