//! The default payload codec: postcard (compact, varint-based, serde), written straight into
//! the lane's buffer so that encoding allocates nothing. The virtual-actor runtime encodes and
//! decodes with the same two functions.

use bytes::{BufMut, BytesMut};
use serde::Serialize;

/// A postcard output flavour that appends to a `BytesMut`.
struct ToBytesMut<'a>(&'a mut BytesMut);

impl postcard::ser_flavors::Flavor for ToBytesMut<'_> {
    type Output = ();

    fn try_push(&mut self, data: u8) -> postcard::Result<()> {
        self.0.put_u8(data);
        Ok(())
    }

    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        self.0.extend_from_slice(data);
        Ok(())
    }

    fn finalize(self) -> postcard::Result<Self::Output> {
        Ok(())
    }
}

/// Appends the encoding of `value` (postcard) to `out`.
///
/// # Errors
///
/// The value's `Serialize` failed.
///
/// # Example
///
/// ```
/// use bytes::BytesMut;
/// use rally::remote::codec::{decode, encode_into};
///
/// let mut out = BytesMut::new();
/// encode_into(&("hit", 7u32), &mut out).unwrap();
/// let back: (String, u32) = decode(&out).unwrap();
/// assert_eq!(back, ("hit".to_owned(), 7));
/// ```
pub fn encode_into<T: Serialize + ?Sized>(
    value: &T,
    out: &mut BytesMut,
) -> Result<(), postcard::Error> {
    postcard::serialize_with_flavor(value, ToBytesMut(out))
}

/// Reads a value encoded by [`encode_into`].
///
/// # Errors
///
/// The bytes are not a valid encoding of `T`.
///
/// # Example
///
/// See [`encode_into`].
pub fn decode<'a, T: serde::Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, postcard::Error> {
    postcard::from_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_what_postcard_would_write() {
        let mut out = BytesMut::from(&b"head"[..]);
        encode_into(&("hit", 7u32), &mut out).unwrap();
        assert_eq!(&out[..4], b"head");
        assert_eq!(
            &out[4..],
            postcard::to_allocvec(&("hit", 7u32)).unwrap().as_slice()
        );
    }
}
