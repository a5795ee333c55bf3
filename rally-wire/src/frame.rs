//! Framing: a 6-byte preface per connection, then length-prefixed frames.
//!
//! ```text
//! preface: "RALY" version:u16be
//! frame:   length:u32le  kind:u8  body[length-1]
//! ```

use bytes::{BufMut, BytesMut};

/// The first four bytes of every connection.
pub const MAGIC: [u8; 4] = *b"RALY";
/// The protocol version this crate speaks.
/// Version 2 added the frame maximum to Hello and Challenge; version 3 the cluster name to
/// Hello (and to the MACs) and `Reject{WrongCluster}`; version 4 the `Undelivered` system
/// message (a version 3 node would take it for a protocol violation) and the grain request
/// frame; version 5 the frames in a request context (`MessageInContext`,
/// `GrainRequestInContext`), the `Rejected` reply status and grain outcome.
pub const VERSION: u16 = 5;
/// Bytes in the preface.
pub const PREFACE_LEN: usize = 6;
/// Bytes before a frame's body: the length and the kind.
pub const FRAME_HEADER_LEN: usize = 5;

/// Appends the connection preface.
pub fn encode_preface(out: &mut BytesMut) {
    out.put_slice(&MAGIC);
    out.put_u16(VERSION);
}

/// Why a preface was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PrefaceError {
    /// Not Rally (an HTTP request, a TLS ClientHello, noise).
    #[error("not a Rally connection: the first bytes are {found:02x?}")]
    WrongMagic {
        /// The four bytes found.
        found: [u8; 4],
    },
    /// A TLS record (a ClientHello, or the alert a TLS server answers plain bytes with): one
    /// side is configured for TLS and the other for plain TCP.
    #[error(
        "the peer speaks TLS and this node plain TCP: configure TLS on both nodes or on neither"
    )]
    Tls,
    /// A Rally peer speaking another version.
    #[error("protocol version {found} is not supported (this node speaks {supported})")]
    UnsupportedVersion {
        /// The peer's version.
        found: u16,
        /// Ours.
        supported: u16,
    },
}

/// Checks a connection's first six bytes.
///
/// # Errors
///
/// [`PrefaceError`] for anything but this version's magic and version.
///
/// # Example
///
/// ```
/// use rally_wire::{PrefaceError, check_preface};
///
/// assert!(check_preface(b"RALY\x00\x05").is_ok());
/// assert!(matches!(check_preface(b"GET / "), Err(PrefaceError::WrongMagic { .. })));
/// assert_eq!(check_preface(&[0x16, 0x03, 0x01, 0x00, 0xa5, 0x01]), Err(PrefaceError::Tls));
/// ```
pub fn check_preface(bytes: &[u8; PREFACE_LEN]) -> Result<(), PrefaceError> {
    if is_tls_record(bytes) {
        return Err(PrefaceError::Tls);
    }
    let found: [u8; 4] = bytes[..4]
        .try_into()
        .expect("a 6-byte preface has 4 magic bytes");
    if found != MAGIC {
        return Err(PrefaceError::WrongMagic { found });
    }
    let version = u16::from_be_bytes([bytes[4], bytes[5]]);
    if version != VERSION {
        return Err(PrefaceError::UnsupportedVersion {
            found: version,
            supported: VERSION,
        });
    }
    Ok(())
}

/// Whether `bytes` begin like a TLS record: a handshake (a ClientHello) or an alert, record
/// version 3.1–3.4 (TLS 1.0–1.3). A Rally handshake frame never begins so: read as a frame
/// header, those bytes give a length of at least 66,326, far above
/// [`HANDSHAKE_MAX_FRAME`](crate::HANDSHAKE_MAX_FRAME).
///
/// # Example
///
/// ```
/// use rally_wire::is_tls_record;
///
/// assert!(is_tls_record(&[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x32])); // a fatal alert
/// assert!(!is_tls_record(b"RALY\x00\x05"));
/// ```
pub fn is_tls_record(bytes: &[u8]) -> bool {
    matches!(bytes, [0x15 | 0x16, 0x03, 0x01..=0x04, ..])
}

/// What a frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FrameKind {
    /// Client's first handshake frame.
    Hello = 1,
    /// Server's challenge and proof.
    Challenge = 2,
    /// Client's proof.
    Proof = 3,
    /// Server accepts.
    Accept = 4,
    /// Server refuses, with a reason.
    Reject = 5,
    /// A user message.
    Message = 0x10,
    /// A reply to a request.
    Reply = 0x11,
    /// Binds a recipient id to a name on this connection.
    DefineRecipient = 0x12,
    /// Binds a manifest id to a manifest on this connection.
    DefineManifest = 0x13,
    /// A request for a virtual actor (see [`GrainHeader`](crate::GrainHeader)).
    GrainRequest = 0x14,
    /// A user message with a request context (see [`ContextView`](crate::ContextView)) before
    /// its header.
    MessageInContext = 0x15,
    /// A grain request with a request context before its header.
    GrainRequestInContext = 0x16,
    /// Liveness for the failure detector.
    Heartbeat = 0x20,
    /// Watch, unwatch, terminated.
    System = 0x21,
    /// The sending node leaves.
    Leave = 0x22,
}

impl FrameKind {
    /// The kind for a byte, if any.
    pub fn from_u8(byte: u8) -> Option<Self> {
        Some(match byte {
            1 => Self::Hello,
            2 => Self::Challenge,
            3 => Self::Proof,
            4 => Self::Accept,
            5 => Self::Reject,
            0x10 => Self::Message,
            0x11 => Self::Reply,
            0x12 => Self::DefineRecipient,
            0x13 => Self::DefineManifest,
            0x14 => Self::GrainRequest,
            0x15 => Self::MessageInContext,
            0x16 => Self::GrainRequestInContext,
            0x20 => Self::Heartbeat,
            0x21 => Self::System,
            0x22 => Self::Leave,
            _ => return None,
        })
    }
}

/// Why a frame is malformed. Any of these closes the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The length prefix exceeds the maximum (checked before anything is buffered for it).
    #[error("frame of {len} bytes exceeds the maximum of {max}")]
    TooLarge {
        /// The announced length.
        len: u32,
        /// The maximum.
        max: u32,
    },
    /// A zero length (no kind byte).
    #[error("empty frame")]
    Empty,
    /// An unknown kind byte.
    #[error("unknown frame kind {0:#04x}")]
    UnknownKind(u8),
}

/// A complete frame found by [`split_frame`]: its kind, its body, and the bytes it took.
pub type SplitFrame<'a> = (FrameKind, &'a [u8], usize);

/// Splits the first complete frame off `buf`.
///
/// Returns `Ok(None)` while more bytes are needed, else the kind, the body and how many bytes
/// the frame took. The length is checked against `max_frame_len` as soon as its four bytes are
/// visible, so a huge length prefix is refused before anything is buffered for it.
///
/// # Errors
///
/// [`FrameError`] for an oversized, empty or unknown frame.
///
/// # Example
///
/// ```
/// use rally_wire::{FrameError, FrameKind, split_frame};
///
/// let frame = [2, 0, 0, 0, 0x20, 7];
/// let (kind, body, used) = split_frame(&frame, 1024).unwrap().unwrap();
/// assert_eq!((kind, body, used), (FrameKind::Heartbeat, &[7u8][..], 6));
/// assert_eq!(split_frame(&[0xff, 0xff, 0xff, 0xff], 1024), Err(FrameError::TooLarge { len: u32::MAX, max: 1024 }));
/// ```
pub fn split_frame(buf: &[u8], max_frame_len: u32) -> Result<Option<SplitFrame<'_>>, FrameError> {
    let Some(prefix) = buf.get(..4) else {
        return Ok(None);
    };
    let len = u32::from_le_bytes(prefix.try_into().expect("4 bytes"));
    if len > max_frame_len {
        return Err(FrameError::TooLarge {
            len,
            max: max_frame_len,
        });
    }
    if len == 0 {
        return Err(FrameError::Empty);
    }
    let total = 4 + len as usize;
    if buf.len() < total {
        return Ok(None);
    }
    let kind = FrameKind::from_u8(buf[4]).ok_or(FrameError::UnknownKind(buf[4]))?;
    Ok(Some((kind, &buf[FRAME_HEADER_LEN..total], total)))
}

/// Where a frame being written starts; see [`begin_frame`].
#[derive(Debug)]
pub struct FrameMark(usize);

/// The frame being written exceeds the maximum; it was removed from the buffer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("frame of {size} bytes exceeds the maximum of {max}")]
pub struct FrameTooLargeError {
    /// The frame's length (kind + body).
    pub size: usize,
    /// The maximum.
    pub max: u32,
}

/// Starts a frame: reserves the header; append the body, then call [`finish_frame`].
pub fn begin_frame(out: &mut BytesMut, kind: FrameKind) -> FrameMark {
    let mark = FrameMark(out.len());
    out.put_u32_le(0);
    out.put_u8(kind as u8);
    mark
}

/// Writes the length of the frame started at `mark`.
///
/// # Errors
///
/// [`FrameTooLargeError`] when the frame exceeds `max_frame_len`; `out` is then truncated back
/// to the mark, so nothing partial is left.
pub fn finish_frame(
    out: &mut BytesMut,
    mark: FrameMark,
    max_frame_len: u32,
) -> Result<usize, FrameTooLargeError> {
    let len = out.len() - mark.0 - 4;
    if len > max_frame_len as usize {
        out.truncate(mark.0);
        return Err(FrameTooLargeError {
            size: len,
            max: max_frame_len,
        });
    }
    out[mark.0..mark.0 + 4].copy_from_slice(&(len as u32).to_le_bytes());
    Ok(len + 4)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn frames_round_trip_and_wait_for_more() {
        let mut out = BytesMut::new();
        let mark = begin_frame(&mut out, FrameKind::System);
        out.put_slice(b"abc");
        assert_eq!(finish_frame(&mut out, mark, 100), Ok(8));
        assert_eq!(split_frame(&out[..7], 100), Ok(None));
        assert_eq!(
            split_frame(&out, 100),
            Ok(Some((FrameKind::System, &b"abc"[..], 8)))
        );
    }

    #[test]
    fn oversized_frames_are_removed_on_write() {
        let mut out = BytesMut::from(&b"keep"[..]);
        let mark = begin_frame(&mut out, FrameKind::Message);
        out.put_slice(&[0; 64]);
        assert_eq!(
            finish_frame(&mut out, mark, 10),
            Err(FrameTooLargeError { size: 65, max: 10 })
        );
        assert_eq!(&out[..], b"keep");
    }

    #[test]
    fn bad_prefaces_and_frames_say_why() {
        assert_eq!(
            check_preface(b"\x16\x03\x01\x02\x00\x01"),
            Err(PrefaceError::Tls)
        );
        assert!(matches!(
            check_preface(b"GET / "),
            Err(PrefaceError::WrongMagic { .. })
        ));
        assert_eq!(
            check_preface(b"RALY\x00\x02"),
            Err(PrefaceError::UnsupportedVersion {
                found: 2,
                supported: VERSION
            })
        );
        assert_eq!(split_frame(&[0, 0, 0, 0], 10), Err(FrameError::Empty));
        assert_eq!(
            split_frame(&[1, 0, 0, 0, 0x99], 10),
            Err(FrameError::UnknownKind(0x99))
        );
        // A 4 GiB prefix is refused from its four bytes alone.
        assert!(matches!(
            split_frame(&[0xff, 0xff, 0xff, 0xff], 1 << 20),
            Err(FrameError::TooLarge { .. })
        ));
    }

    proptest! {
        #[test]
        fn split_frame_never_panics_or_overreads(bytes: Vec<u8>, max in 1u32..4096) {
            if let Ok(Some((_, body, used))) = split_frame(&bytes, max) {
                prop_assert!(used <= bytes.len());
                prop_assert!(body.len() < used);
            }
        }
    }
}
