//! The virtual-actor frames: a request for one identity of a kind, and what became of it.
//!
//! A grain request is a frame of its own (not a message to an actor that carries another
//! encoding inside): the kind and the message's manifest go through the connection's manifest
//! table, the identity is a string, and the message is encoded once, straight into the frame.
//! Its answer is an ordinary [`Reply`](crate::FrameKind::Reply) frame whose payload starts
//! with a [`GrainOutcome`] byte, which tells apart a request handled (with its reply, or with an
//! error), one refused before any activation saw it, and one whose outcome is unknown.

use bytes::{BufMut, BytesMut};

use crate::codec::{DecodeError, Reader, put_str, put_varint};

/// The longest identity a grain request may carry, in bytes.
pub const MAX_IDENTITY_LEN: usize = 256;

/// The fixed part of a grain request frame (the kind and the manifest as ids of the
/// connection's manifest table); the identity and the payload follow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrainHeader {
    /// Non-zero when the sender wants the outcome (an ask); 0 for a tell.
    pub request_id: u64,
    /// The kind's id in the manifest table.
    pub kind: u32,
    /// The message's manifest id, or 0 for an end-of-handover marker (no message).
    pub manifest: u32,
    /// Members the request has been passed between so far.
    pub hops: u8,
    /// Milliseconds the sender still waits for the outcome (0 for a tell).
    pub wait_ms: u64,
    /// [`GrainFlags`].
    pub flags: GrainFlags,
}

/// Bits of a grain request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GrainFlags(pub u8);

impl GrainFlags {
    /// The identity's previous owner passes on a request that reached it during a move: it
    /// goes before the requests that reached the receiver directly.
    pub const HANDED_OVER: u8 = 1;
    /// Every request of the identity handed over so far was sent before this one (requests
    /// between two members arrive in order); it carries no message.
    pub const HANDOVER_DONE: u8 = 2;

    /// Whether `bit` is set.
    pub fn has(self, bit: u8) -> bool {
        self.0 & bit != 0
    }
}

/// Appends a grain request's header and identity (between `begin_frame` and `finish_frame`);
/// the payload follows.
///
/// # Example
///
/// ```
/// use bytes::BytesMut;
/// use rally_wire::{FrameKind, GrainFlags, GrainHeader, begin_frame, decode_grain_request, finish_frame, write_grain_request};
///
/// let mut out = BytesMut::new();
/// let mark = begin_frame(&mut out, FrameKind::GrainRequest);
/// let header = GrainHeader { request_id: 7, kind: 1, manifest: 2, hops: 0, wait_ms: 5000, flags: GrainFlags::default() };
/// write_grain_request(&mut out, &header, "user-42");
/// out.extend_from_slice(b"ping");
/// finish_frame(&mut out, mark, 1 << 20).unwrap();
/// let (back, identity, payload) = decode_grain_request(&out[5..]).unwrap();
/// assert_eq!((back, identity, payload), (header, "user-42", &b"ping"[..]));
/// ```
pub fn write_grain_request(out: &mut BytesMut, header: &GrainHeader, identity: &str) {
    put_varint(out, header.request_id);
    put_varint(out, u64::from(header.kind));
    put_varint(out, u64::from(header.manifest));
    out.put_u8(header.hops);
    put_varint(out, header.wait_ms);
    out.put_u8(header.flags.0);
    put_str(out, identity);
}

/// Splits a grain request body into its header, identity and payload.
///
/// # Errors
///
/// [`DecodeError`] for a truncated header, an identity over [`MAX_IDENTITY_LEN`], a kind id 0,
/// or a missing manifest on a request that is not an end-of-handover marker.
pub fn decode_grain_request(body: &[u8]) -> Result<(GrainHeader, &str, &[u8]), DecodeError> {
    let mut reader = Reader::new(body);
    let request_id = reader.varint()?;
    let kind = reader.varint_u32("grain kind")?;
    let manifest = reader.varint_u32("grain manifest")?;
    let hops = reader.u8()?;
    let wait_ms = reader.varint()?;
    let flags = GrainFlags(reader.u8()?);
    let identity = reader.str("identity", MAX_IDENTITY_LEN)?;
    if kind == 0 {
        return Err(DecodeError::UnknownValue {
            field: "grain kind",
            value: 0,
        });
    }
    if manifest == 0 && !flags.has(GrainFlags::HANDOVER_DONE) {
        return Err(DecodeError::UnknownValue {
            field: "grain manifest",
            value: 0,
        });
    }
    Ok((
        GrainHeader {
            request_id,
            kind,
            manifest,
            hops,
            wait_ms,
            flags,
        },
        identity,
        reader.rest(),
    ))
}

/// What became of a grain request: the first byte of its reply's payload. Codes fall in three
/// ranges so that a code added later is still understood by its range: 0–15 handled, 16–63
/// refused before any activation saw it (not handled: safe to send again), 64–255 unknown.
///
/// # Example
///
/// ```
/// use rally_wire::{GrainOutcome, Handled};
///
/// assert_eq!(GrainOutcome::OK.handled(), Handled::Yes);
/// assert_eq!(GrainOutcome::REPLY_LOST.handled(), Handled::Yes);
/// assert_eq!(GrainOutcome::STOPPED.handled(), Handled::No);
/// assert_eq!(GrainOutcome(40).handled(), Handled::No); // a refusal this version does not know
/// assert_eq!(GrainOutcome::UNKNOWN.handled(), Handled::Unknown);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GrainOutcome(pub u8);

/// Whether a request was handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Handled {
    /// An activation handled it.
    Yes,
    /// No activation saw it.
    No,
    /// It may or may not have been handled.
    Unknown,
}

impl GrainOutcome {
    /// Handled; the rest of the payload is the reply.
    pub const OK: Self = Self(0);
    /// Handled; the handler failed (returned an error or panicked): the rest is its text.
    pub const FAILED: Self = Self(1);
    /// Handled; its reply could not be encoded or sent: the rest is why.
    pub const REPLY_LOST: Self = Self(2);
    /// Not handled: the member's virtual-actor runtime has stopped (it is leaving or was
    /// downed). The sender routes it anew.
    pub const STOPPED: Self = Self(16);
    /// Not handled: the member could not take it (its runtime is not started).
    pub const UNREACHABLE: Self = Self(17);
    /// Not handled: no serving member hosts the kind.
    pub const NO_HOST: Self = Self(18);
    /// Not handled: the member declares the kind but does not host it; the rest names it.
    pub const NOT_HOSTED: Self = Self(19);
    /// Not handled: the message's manifest is not registered for the kind.
    pub const UNKNOWN_MESSAGE: Self = Self(20);
    /// Not handled: the message could not be decoded; the rest is why.
    pub const UNDECODABLE: Self = Self(21);
    /// Not handled: the activation hook failed; the rest is why.
    pub const ACTIVATION_FAILED: Self = Self(22);
    /// Not handled: the state store failed; the rest is why.
    pub const STORE: Self = Self(23);
    /// Not handled: passed on too many times; the rest is the count.
    pub const TOO_MANY_HOPS: Self = Self(24);
    /// Not handled: the sender's placement settings for the kind differ from the cluster's.
    pub const SETTINGS_MISMATCH: Self = Self(25);
    /// Not handled: its deadline passed before an activation took it.
    pub const EXPIRED: Self = Self(26);
    /// Not handled: the identity is empty or too long.
    pub const INVALID_IDENTITY: Self = Self(27);
    /// Not handled: too many requests wait for the identity.
    pub const OVERLOADED: Self = Self(28);
    /// Not handled: the activation it was handed to had stopped before it took it.
    pub const ENDED: Self = Self(29);
    /// Not handled: a call filter of the kind rejected it; the rest is its reason.
    pub const REJECTED: Self = Self(30);
    /// Unknown: a member that passed it on lost track of it; the rest is why.
    pub const UNKNOWN: Self = Self(64);

    /// Whether the request was handled, by the code's range.
    pub fn handled(self) -> Handled {
        match self.0 {
            0..=15 => Handled::Yes,
            16..=63 => Handled::No,
            _ => Handled::Unknown,
        }
    }
}

/// Appends a grain reply's payload: the outcome, then `body` (the encoded reply, or a text).
pub fn write_grain_outcome(out: &mut BytesMut, outcome: GrainOutcome, body: &[u8]) {
    out.put_u8(outcome.0);
    out.extend_from_slice(body);
}

/// Splits a grain reply's payload into its outcome and the rest.
///
/// # Errors
///
/// [`DecodeError`] for an empty payload.
pub fn decode_grain_outcome(payload: &[u8]) -> Result<(GrainOutcome, &[u8]), DecodeError> {
    let mut reader = Reader::new(payload);
    let outcome = GrainOutcome(reader.u8()?);
    Ok((outcome, reader.rest()))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Any header, identity and payload read back as written.
        #[test]
        fn grain_requests_round_trip(
            request_id in any::<u64>(),
            kind in 1u32..=65_536,
            manifest in 1u32..=65_536,
            hops in any::<u8>(),
            wait_ms in any::<u64>(),
            flags in 0u8..4,
            identity in "[a-z0-9-]{1,256}",
            payload in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let header = GrainHeader { request_id, kind, manifest, hops, wait_ms, flags: GrainFlags(flags) };
            let mut out = BytesMut::new();
            write_grain_request(&mut out, &header, &identity);
            out.extend_from_slice(&payload);
            let (back, id, rest) = decode_grain_request(&out).unwrap();
            prop_assert_eq!(back, header);
            prop_assert_eq!(id, identity.as_str());
            prop_assert_eq!(rest, &payload[..]);
        }

        /// No input makes the decoder panic.
        #[test]
        fn any_bytes_decode_or_fail_cleanly(body in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode_grain_request(&body);
            let _ = decode_grain_outcome(&body);
        }
    }

    #[test]
    fn a_request_without_a_manifest_is_only_an_end_of_handover() {
        let mut out = BytesMut::new();
        let header = GrainHeader {
            request_id: 1,
            kind: 1,
            manifest: 0,
            hops: 1,
            wait_ms: 10,
            flags: GrainFlags::default(),
        };
        write_grain_request(&mut out, &header, "x");
        assert!(decode_grain_request(&out).is_err());
        let mut out = BytesMut::new();
        let done = GrainHeader {
            flags: GrainFlags(GrainFlags::HANDOVER_DONE),
            ..header
        };
        write_grain_request(&mut out, &done, "x");
        assert_eq!(decode_grain_request(&out).unwrap().0, done);
        let too_long = "x".repeat(MAX_IDENTITY_LEN + 1);
        let mut out = BytesMut::new();
        write_grain_request(&mut out, &header, &too_long);
        assert!(decode_grain_request(&out).is_err());
    }
}
