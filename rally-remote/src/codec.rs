//! The default payload codec: postcard (compact, varint-based, serde), written straight into
//! the lane's buffer so that encoding allocates nothing.

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

/// Appends the postcard encoding of `value` to `out`.
pub(crate) fn encode_into<T: Serialize + ?Sized>(
    value: &T,
    out: &mut BytesMut,
) -> Result<(), postcard::Error> {
    postcard::serialize_with_flavor(value, ToBytesMut(out))
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
