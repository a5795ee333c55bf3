//! The request context a message or grain request may carry: a W3C trace parent and a few
//! string entries. A message without one is an ordinary frame and carries no byte of it; one
//! with a context is a frame of the `…InContext` kinds, whose body starts with the block:
//!
//! ```text
//! body:  block_len:varint  block[block_len]  the ordinary body (header, payload)
//! block: flags:u8  [trace_id:16 span_id:8 trace_flags:u8 when flags bit 0]
//!        count:varint  (key:str value:str)*count
//! ```

use bytes::{BufMut, BytesMut};

use crate::codec::{DecodeError, Reader, put_str, put_varint};

/// Most entries a context carries.
pub const MAX_CONTEXT_ENTRIES: usize = 32;
/// Most bytes a context's keys and values take together.
pub const MAX_CONTEXT_BYTES: usize = 2048;
/// Longest key, in bytes.
pub const MAX_CONTEXT_KEY_LEN: usize = 64;

const HAS_TRACE: u8 = 1;

/// A W3C trace parent as it travels: the trace, the parent span, the trace flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WireTrace {
    /// The trace's id.
    pub trace_id: [u8; 16],
    /// The parent span's id.
    pub span_id: [u8; 8],
    /// The trace flags.
    pub flags: u8,
}

/// Appends a context block (length-prefixed) for the trace and entries given.
///
/// # Example
///
/// ```
/// use bytes::BytesMut;
/// use rally_wire::{ContextView, WireTrace, write_context};
///
/// let trace = WireTrace { trace_id: [1; 16], span_id: [2; 8], flags: 1 };
/// let mut out = BytesMut::new();
/// write_context(&mut out, Some(&trace), [("tenant", "acme")].into_iter());
/// out.extend_from_slice(b"rest");
/// let (view, rest) = ContextView::split(&out).unwrap();
/// assert_eq!(view.trace(), Some(trace));
/// assert_eq!(view.entries().collect::<Vec<_>>(), [("tenant", "acme")]);
/// assert_eq!(rest, b"rest");
/// ```
pub fn write_context<'a>(
    out: &mut BytesMut,
    trace: Option<&WireTrace>,
    entries: impl ExactSizeIterator<Item = (&'a str, &'a str)> + Clone,
) {
    let count = entries.len();
    let strings: usize = entries
        .clone()
        .map(|(k, v)| varint_len(k.len()) + k.len() + varint_len(v.len()) + v.len())
        .sum();
    let len = 1 + trace.map_or(0, |_| 25) + varint_len(count) + strings;
    put_varint(out, len as u64);
    match trace {
        Some(trace) => {
            out.put_u8(HAS_TRACE);
            out.put_slice(&trace.trace_id);
            out.put_slice(&trace.span_id);
            out.put_u8(trace.flags);
        }
        None => out.put_u8(0),
    }
    put_varint(out, count as u64);
    for (key, value) in entries {
        put_str(out, key);
        put_str(out, value);
    }
}

fn varint_len(value: usize) -> usize {
    let bits = usize::BITS - value.leading_zeros();
    (bits.max(1) as usize).div_ceil(7)
}

/// A decoded context block, borrowing the frame; its entries were checked against the bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextView<'a> {
    trace: Option<WireTrace>,
    count: usize,
    entries: &'a [u8],
}

impl<'a> ContextView<'a> {
    /// Splits a length-prefixed context block off the front of `body`; returns it and the rest.
    ///
    /// # Errors
    ///
    /// [`DecodeError`] for a truncated or malformed block, unknown flags, or one over
    /// [`MAX_CONTEXT_ENTRIES`], [`MAX_CONTEXT_BYTES`] or [`MAX_CONTEXT_KEY_LEN`].
    pub fn split(body: &'a [u8]) -> Result<(Self, &'a [u8]), DecodeError> {
        let mut outer = Reader::new(body);
        let len = outer.varint()?;
        let len = usize::try_from(len).map_err(|_| DecodeError::OutOfRange {
            field: "context length",
            value: len,
        })?;
        let block = outer.bytes(len)?;
        let rest = outer.rest();
        let mut reader = Reader::new(block);
        let flags = reader.u8()?;
        if flags & !HAS_TRACE != 0 {
            return Err(DecodeError::UnknownValue {
                field: "context flags",
                value: flags,
            });
        }
        let trace = if flags & HAS_TRACE != 0 {
            Some(WireTrace {
                trace_id: reader.array()?,
                span_id: reader.array()?,
                flags: reader.u8()?,
            })
        } else {
            None
        };
        let count = reader.varint()?;
        if count > MAX_CONTEXT_ENTRIES as u64 {
            return Err(DecodeError::TooLong {
                field: "context entries",
                len: count,
                max: MAX_CONTEXT_ENTRIES,
            });
        }
        let entries = reader.rest();
        let mut check = Reader::new(entries);
        let mut size = 0;
        for _ in 0..count {
            let key = check.str("context key", MAX_CONTEXT_KEY_LEN)?;
            let value = check.str("context value", MAX_CONTEXT_BYTES)?;
            size += key.len() + value.len();
            if key.is_empty() || size > MAX_CONTEXT_BYTES {
                return Err(DecodeError::TooLong {
                    field: "context",
                    len: size as u64,
                    max: MAX_CONTEXT_BYTES,
                });
            }
        }
        check.finish()?;
        Ok((
            Self {
                trace,
                count: count as usize,
                entries,
            },
            rest,
        ))
    }

    /// The trace parent, if the sender set one.
    pub fn trace(&self) -> Option<WireTrace> {
        self.trace
    }

    /// The entries, in the order they were written.
    pub fn entries(&self) -> impl ExactSizeIterator<Item = (&'a str, &'a str)> + use<'a> {
        let mut reader = Reader::new(self.entries);
        (0..self.count).map(move |_| {
            // Checked by `split`.
            let key = reader.str("context key", MAX_CONTEXT_KEY_LEN).unwrap_or("");
            let value = reader.str("context value", MAX_CONTEXT_BYTES).unwrap_or("");
            (key, value)
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn a_context_reads_back_what_was_written(
            traced in any::<bool>(),
            ids in any::<([u8; 16], [u8; 8], u8)>(),
            entries in proptest::collection::vec(("[a-z]{1,10}", ".{0,20}"), 0..MAX_CONTEXT_ENTRIES),
        ) {
            let trace = traced.then_some(WireTrace { trace_id: ids.0, span_id: ids.1, flags: ids.2 });
            let pairs: Vec<(&str, &str)> = entries.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let mut out = BytesMut::new();
            write_context(&mut out, trace.as_ref(), pairs.iter().copied());
            out.extend_from_slice(b"tail");
            let (view, rest) = ContextView::split(&out).unwrap();
            prop_assert_eq!(view.trace(), trace);
            prop_assert_eq!(view.entries().collect::<Vec<_>>(), pairs);
            prop_assert_eq!(rest, b"tail");
        }

        #[test]
        fn split_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = ContextView::split(&bytes);
        }
    }

    #[test]
    fn a_context_over_the_bounds_is_refused() {
        let long = "x".repeat(MAX_CONTEXT_BYTES);
        let mut out = BytesMut::new();
        write_context(&mut out, None, [("k", long.as_str())].into_iter());
        assert!(matches!(
            ContextView::split(&out),
            Err(DecodeError::TooLong { .. })
        ));
        let key = "k".repeat(MAX_CONTEXT_KEY_LEN + 1);
        let mut out = BytesMut::new();
        write_context(&mut out, None, [(key.as_str(), "v")].into_iter());
        assert!(ContextView::split(&out).is_err());
        let keys: Vec<String> = (0..=MAX_CONTEXT_ENTRIES).map(|i| format!("k{i}")).collect();
        let mut out = BytesMut::new();
        write_context(&mut out, None, keys.iter().map(|k| (k.as_str(), "")));
        assert!(ContextView::split(&out).is_err());
        // Unknown flags, and a block longer than the body.
        assert!(ContextView::split(&[2, 2, 0]).is_err());
        assert!(ContextView::split(&[9, 0, 0]).is_err());
    }
}
