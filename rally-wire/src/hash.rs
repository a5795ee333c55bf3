//! A fast, non-cryptographic hasher for the small keys of the hot path (ids, short names).
//!
//! The standard library's SipHash resists collision attacks that these tables do not face:
//! their keys come from this node (request ids, recipient and manifest names it sends) or are
//! bounded per connection. A multiply-rotate hash (the `FxHash` scheme) is several times
//! faster on them.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// The multiply-rotate hasher.
///
/// # Example
///
/// ```
/// use rally_wire::FastHashMap;
///
/// let mut map: FastHashMap<u64, &str> = FastHashMap::default();
/// map.insert(7, "seven");
/// assert_eq!(map.get(&7), Some(&"seven"));
/// ```
#[derive(Debug, Default, Clone, Copy)]
pub struct FastHasher(u64);

/// From the golden ratio: odd, with well-spread bits.
const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FastHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.add(u64::from_le_bytes(
                chunk.try_into().expect("chunks_exact yields 8 bytes"),
            ));
        }
        let mut tail = [0u8; 8];
        let rest = chunks.remainder();
        tail[..rest.len()].copy_from_slice(rest);
        self.add(u64::from_le_bytes(tail) ^ rest.len() as u64);
    }

    fn write_u64(&mut self, value: u64) {
        self.add(value);
    }

    fn write_u32(&mut self, value: u32) {
        self.add(u64::from(value));
    }

    fn write_usize(&mut self, value: usize) {
        self.add(value as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// A `HashMap` with [`FastHasher`].
pub type FastHashMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

#[cfg(test)]
mod tests {
    use std::hash::{BuildHasher, BuildHasherDefault};

    use super::*;

    #[test]
    fn sequential_ids_spread_over_the_high_bits() {
        let build = BuildHasherDefault::<FastHasher>::default();
        let tops: std::collections::HashSet<u64> =
            (0..1024u64).map(|i| build.hash_one(i) >> 57).collect();
        assert!(
            tops.len() > 100,
            "only {} distinct top-7-bit values",
            tops.len()
        );
    }

    #[test]
    fn strings_that_differ_in_length_differ() {
        let build = BuildHasherDefault::<FastHasher>::default();
        assert_ne!(build.hash_one("echo-1"), build.hash_one("echo-1\\0"));
        assert_ne!(build.hash_one(""), build.hash_one("\\0"));
    }
}
