//! Primitive encodings: LEB128 varints and length-prefixed strings, and a bounds-checked reader.

use bytes::{BufMut, BytesMut};

/// Why bytes did not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The input ended inside a value.
    #[error("truncated: needed {needed} more bytes")]
    Truncated {
        /// Bytes missing.
        needed: usize,
    },
    /// A varint ran past 10 bytes or 64 bits.
    #[error("varint overflows 64 bits")]
    VarintOverflow,
    /// A value does not fit its field (e.g. an id above `u32::MAX`).
    #[error("value {value} out of range for {field}")]
    OutOfRange {
        /// The field.
        field: &'static str,
        /// The value found.
        value: u64,
    },
    /// A string is not UTF-8.
    #[error("string is not UTF-8")]
    InvalidUtf8,
    /// A string is longer than its limit.
    #[error("{field} is {len} bytes, limit {max}")]
    TooLong {
        /// The field.
        field: &'static str,
        /// Its length.
        len: u64,
        /// The limit.
        max: usize,
    },
    /// An unknown tag or enum value.
    #[error("unknown {field} value {value}")]
    UnknownValue {
        /// The field.
        field: &'static str,
        /// The value found.
        value: u8,
    },
    /// Bytes left over after a complete value.
    #[error("{0} trailing bytes")]
    Trailing(usize),
}

/// The most bytes a `u64` takes as a varint (7 bits a byte).
const MAX_VARINT_LEN: usize = 10;

/// Appends `value` as an unsigned LEB128 varint.
pub fn put_varint(out: &mut BytesMut, mut value: u64) {
    // Built on the stack and appended with one copy: `put_u8` per byte would be one call to
    // the buffer's copy routine per byte.
    let mut bytes = [0u8; MAX_VARINT_LEN];
    let mut len = 0;
    while value >= 0x80 {
        bytes[len] = (value as u8) | 0x80;
        value >>= 7;
        len += 1;
    }
    bytes[len] = value as u8;
    out.put_slice(&bytes[..=len]);
}

/// Appends a varint length then the UTF-8 bytes.
pub fn put_str(out: &mut BytesMut, s: &str) {
    put_varint(out, s.len() as u64);
    out.put_slice(s.as_bytes());
}

/// A cursor over untrusted bytes: every read is bounds-checked, nothing is allocated from a
/// length before that length is checked against what remains.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    /// Reads from `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes }
    }

    /// What is left.
    pub fn rest(&self) -> &'a [u8] {
        self.bytes
    }

    /// Fails unless everything was read.
    pub fn finish(&self) -> Result<(), DecodeError> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::Trailing(self.bytes.len()))
        }
    }

    /// One byte.
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        let (&first, rest) = self
            .bytes
            .split_first()
            .ok_or(DecodeError::Truncated { needed: 1 })?;
        self.bytes = rest;
        Ok(first)
    }

    /// `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.bytes.len() < n {
            return Err(DecodeError::Truncated {
                needed: n - self.bytes.len(),
            });
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    /// A fixed-size array.
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let bytes = self.bytes(N)?;
        Ok(bytes.try_into().expect("bytes(N) returns exactly N bytes"))
    }

    /// An unsigned LEB128 varint.
    pub fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut value = 0u64;
        for i in 0..10 {
            let byte = self.u8()?;
            let part = u64::from(byte & 0x7f);
            if i == 9 && byte > 1 {
                return Err(DecodeError::VarintOverflow);
            }
            value |= part << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(DecodeError::VarintOverflow)
    }

    /// A varint that must fit a `u32`.
    pub fn varint_u32(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        let value = self.varint()?;
        u32::try_from(value).map_err(|_| DecodeError::OutOfRange { field, value })
    }

    /// A length-prefixed UTF-8 string of at most `max` bytes.
    pub fn str(&mut self, field: &'static str, max: usize) -> Result<&'a str, DecodeError> {
        let len = self.varint()?;
        if len > max as u64 {
            return Err(DecodeError::TooLong { field, len, max });
        }
        let bytes = self.bytes(len as usize)?;
        std::str::from_utf8(bytes).map_err(|_| DecodeError::InvalidUtf8)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn varints_round_trip(value: u64) {
            let mut out = BytesMut::new();
            put_varint(&mut out, value);
            let mut reader = Reader::new(&out);
            prop_assert_eq!(reader.varint().unwrap(), value);
            prop_assert!(reader.finish().is_ok());
        }

        #[test]
        fn reader_never_panics(bytes: Vec<u8>) {
            let mut reader = Reader::new(&bytes);
            let _ = reader.varint();
            let _ = reader.str("s", 16);
            let _ = reader.array::<4>();
        }
    }

    #[test]
    fn overlong_and_truncated_varints_are_errors() {
        assert_eq!(
            Reader::new(&[0xff; 11]).varint(),
            Err(DecodeError::VarintOverflow)
        );
        assert_eq!(
            Reader::new(&[0x80]).varint(),
            Err(DecodeError::Truncated { needed: 1 })
        );
    }

    #[test]
    fn long_strings_are_refused_before_reading() {
        let mut out = BytesMut::new();
        put_varint(&mut out, 1 << 40);
        assert!(matches!(
            Reader::new(&out).str("path", 1024),
            Err(DecodeError::TooLong { .. })
        ));
    }
}
