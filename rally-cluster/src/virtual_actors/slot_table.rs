//! The virtual-actor core's map from identity to slot, packed for members that hold a million
//! activations.
//!
//! A hash map keeps its entries in its buckets, and its buckets are between 1.14 and 2.29 per
//! entry (it doubles when seven eighths are used): with the former host's 64-byte entries,
//! 500,000 activations sat in 1,048,576 buckets of 64 bytes plus a control byte, about 136
//! bytes per activation. Here the entries live in small fixed chunks, filled in order and
//! reused when freed, and the hash table holds only a 4-byte index per bucket: an entry (120
//! bytes with the core's slot: the identity, the life, whether it is busy and since when it is
//! idle, its queue) plus 6 to 12 bytes of index per activation, and an entry never moves once
//! stored.

use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;

use hashbrown::HashTable;

/// Entries per chunk: 16 entries (1 KiB when they were 64 bytes, about 2 KiB with the core's
/// slots), a block size the allocator packs densely. (Chunks of 1,024 entries, 64 KiB, cost about 20 bytes more per activation
/// in the resident set under mimalloc, which places blocks that large in 512 KiB pages.)
const CHUNK: usize = 16;

/// One stored entry: the identity and its value; `None` when free.
type Entry<V> = Option<(Arc<str>, V)>;

/// A map from identity to `V` (a subset of `HashMap<Arc<str>, V>`'s methods).
pub(crate) struct SlotTable<V> {
    /// Positions in `chunks`, hashed by the identity stored there.
    index: HashTable<u32>,
    chunks: Vec<Box<[Entry<V>]>>,
    /// Positions below `end` that are free, reused before `end` moves on.
    free: Vec<u32>,
    /// Positions from `end` on have never been used.
    end: u32,
    /// Random keys, as a `HashMap`'s: identities come from callers, so their hashes must not
    /// be predictable.
    hasher: RandomState,
}

impl<V> SlotTable<V> {
    /// An empty table; it allocates nothing until the first insert.
    pub(crate) fn new() -> Self {
        Self {
            index: HashTable::new(),
            chunks: Vec::new(),
            free: Vec::new(),
            end: 0,
            hasher: RandomState::new(),
        }
    }

    /// The entries stored.
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    /// The value stored for `identity`.
    pub(crate) fn get(&self, identity: &str) -> Option<&V> {
        let at = self.position(self.hasher.hash_one(identity), identity)?;
        entry(&self.chunks, at).as_ref().map(|(_, value)| value)
    }

    /// The value stored for `identity`, to change it in place.
    pub(crate) fn get_mut(&mut self, identity: &str) -> Option<&mut V> {
        let at = self.position(self.hasher.hash_one(identity), identity)?;
        entry_mut(&mut self.chunks, at)
            .as_mut()
            .map(|(_, value)| value)
    }

    /// Stores `value` for `identity` and returns the value it replaces (the stored identity
    /// is kept then, as `HashMap::insert` keeps its key).
    pub(crate) fn insert(&mut self, identity: Arc<str>, value: V) -> Option<V> {
        // Hashed once, for the lookup and the new index entry.
        let hash = self.hasher.hash_one(&*identity);
        if let Some(at) = self.position(hash, &identity) {
            let (_, old) = entry_mut(&mut self.chunks, at)
                .as_mut()
                .expect("the index holds only positions that are in use");
            return Some(std::mem::replace(old, value));
        }
        let at = self.vacant();
        *entry_mut(&mut self.chunks, at) = Some((identity, value));
        let Self {
            index,
            chunks,
            hasher,
            ..
        } = self;
        index.insert_unique(hash, at, |&at| hasher.hash_one(key(chunks, at)));
        None
    }

    /// Takes out the value stored for `identity`.
    pub(crate) fn remove(&mut self, identity: &str) -> Option<V> {
        let hash = self.hasher.hash_one(identity);
        let chunks = &self.chunks;
        let (at, _) = self
            .index
            .find_entry(hash, |&at| key(chunks, at) == identity)
            .ok()?
            .remove();
        Some(self.release(at))
    }

    /// Every stored identity with its value, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &V)> {
        self.chunks
            .iter()
            .flat_map(|chunk| chunk.iter())
            .filter_map(|entry| entry.as_ref().map(|(identity, value)| (identity, value)))
    }

    /// The stored entries at position `from` and after, in the order of their positions, each
    /// with its position. An entry keeps its position while it is stored, so a listing that
    /// goes on from the position after the last it saw meets every entry stored throughout
    /// exactly once (entries stored or removed meanwhile may or may not be met).
    pub(crate) fn iter_from(&self, from: u32) -> impl Iterator<Item = (u32, &Arc<str>, &V)> {
        let from = from as usize;
        self.chunks
            .iter()
            .enumerate()
            .skip(from / CHUNK)
            .flat_map(|(c, chunk)| {
                chunk
                    .iter()
                    .enumerate()
                    .map(move |(i, entry)| (c * CHUNK + i, entry))
            })
            .skip_while(move |(at, _)| *at < from)
            .filter_map(|(at, entry)| {
                let at = u32::try_from(at).expect("positions are u32 (see `vacant`)");
                entry
                    .as_ref()
                    .map(|(identity, value)| (at, identity, value))
            })
    }

    /// Every stored identity with its value, to change in place.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (&Arc<str>, &mut V)> {
        self.chunks
            .iter_mut()
            .flat_map(|chunk| chunk.iter_mut())
            .filter_map(|entry| entry.as_mut().map(|(identity, value)| (&*identity, value)))
    }

    /// Where `identity`, whose hash is `hash`, is stored.
    fn position(&self, hash: u64, identity: &str) -> Option<u32> {
        self.index
            .find(hash, |&at| key(&self.chunks, at) == identity)
            .copied()
    }

    /// A free position: a freed one if any, else the next never used (adding a chunk when
    /// the last is full).
    fn vacant(&mut self) -> u32 {
        if let Some(at) = self.free.pop() {
            return at;
        }
        let at = self.end;
        if at as usize == self.chunks.len() * CHUNK {
            self.chunks.push((0..CHUNK).map(|_| None).collect());
        }
        self.end = at
            .checked_add(1)
            .expect("fewer than 2^32 activations of one kind on one member");
        at
    }

    /// Frees position `at` (already out of the index) and returns its value. The last entry
    /// out frees every chunk, so a member whose activations all ended holds none of them.
    fn release(&mut self, at: u32) -> V {
        let (_, value) = entry_mut(&mut self.chunks, at)
            .take()
            .expect("the index holds only positions that are in use");
        if self.index.is_empty() {
            self.index = HashTable::new();
            self.chunks = Vec::new();
            self.free = Vec::new();
            self.end = 0;
        } else {
            self.free.push(at);
        }
        value
    }
}

impl<V> Default for SlotTable<V> {
    fn default() -> Self {
        Self::new()
    }
}

fn entry<V>(chunks: &[Box<[Entry<V>]>], at: u32) -> &Entry<V> {
    let at = at as usize;
    &chunks[at / CHUNK][at % CHUNK]
}

fn entry_mut<V>(chunks: &mut [Box<[Entry<V>]>], at: u32) -> &mut Entry<V> {
    let at = at as usize;
    &mut chunks[at / CHUNK][at % CHUNK]
}

/// The identity stored at `at`, a position the index holds.
fn key<V>(chunks: &[Box<[Entry<V>]>], at: u32) -> &str {
    let (identity, _) = entry(chunks, at)
        .as_ref()
        .expect("the index holds only positions that are in use");
    identity
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_listing_in_pages_meets_what_stayed_stored_exactly_once() {
        let mut table = SlotTable::new();
        for i in 0..40 {
            table.insert(Arc::from(format!("id-{i}")), i);
        }
        let mut seen = Vec::new();
        let mut from = 0;
        let mut page = 0;
        loop {
            let entries: Vec<_> = table
                .iter_from(from)
                .take(7)
                .map(|(at, id, _)| (at, id.to_string()))
                .collect();
            let Some((last, _)) = entries.last() else {
                break;
            };
            from = last + 1;
            seen.extend(entries.into_iter().map(|(_, id)| id));
            // Between pages, some entries go and others come (reusing freed positions).
            if page == 1 {
                table.remove("id-30");
                table.insert(Arc::from("new-a"), 100);
            }
            page += 1;
        }
        for i in (0..40).filter(|i| *i != 30) {
            let id = format!("id-{i}");
            assert_eq!(seen.iter().filter(|s| **s == id).count(), 1, "{id}");
        }
        assert!(seen.len() <= 41);
    }

    #[test]
    fn stores_finds_replaces_and_removes() {
        let mut table = SlotTable::new();
        assert_eq!(table.insert(Arc::from("a"), 1), None);
        assert_eq!(table.insert(Arc::from("b"), 2), None);
        assert_eq!(table.insert(Arc::from("a"), 3), Some(1));
        assert_eq!(table.get("a"), Some(&3));
        *table.get_mut("b").unwrap() += 10;
        assert_eq!(table.get("b"), Some(&12));
        assert_eq!(table.len(), 2);
        assert_eq!(table.remove("a"), Some(3));
        assert_eq!(table.remove("a"), None);
        assert_eq!(table.get("a"), None);
        assert_eq!(table.len(), 1);
    }

    #[test]
    fn a_freed_position_is_reused_and_the_last_removal_frees_every_chunk() {
        let mut table = SlotTable::new();
        for i in 0..3 * CHUNK {
            table.insert(Arc::from(i.to_string()), i);
        }
        assert_eq!(table.chunks.len(), 3);
        table.remove("7");
        table.insert(Arc::from("again"), 0);
        assert_eq!(
            table.end as usize,
            3 * CHUNK,
            "the freed position was taken"
        );
        let others: Vec<Arc<str>> = table
            .iter()
            .map(|(identity, _)| Arc::clone(identity))
            .filter(|identity| &**identity != "again")
            .collect();
        for identity in others {
            table.remove(&identity);
        }
        assert_eq!(table.len(), 1);
        assert_eq!(table.iter().count(), 1);
        table.remove("again");
        assert!(table.chunks.is_empty() && table.free.is_empty() && table.end == 0);
    }

    /// What the host's entries cost: the chunks hold them at their size, the index 4 bytes
    /// and a control byte per bucket.
    #[test]
    fn an_entry_is_its_own_size_plus_a_small_index_bucket() {
        let mut table = SlotTable::new();
        for i in 0..100_000u32 {
            table.insert(Arc::from(i.to_string()), [0u64; 6]);
        }
        // 131,072 index buckets at most for 100,000 entries (a hash table at 7/8 doubles).
        assert!(table.index.capacity() < 131_072);
        assert_eq!(table.chunks.len(), 100_000usize.div_ceil(CHUNK));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u8, u32),
        Remove(u8),
        Bump(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (any::<u8>(), any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
            3 => any::<u8>().prop_map(Op::Remove),
            2 => any::<u8>().prop_map(Op::Bump),
        ]
    }

    proptest! {
        /// Any sequence of operations leaves the table holding what a `HashMap` holds.
        #[test]
        fn behaves_as_a_hash_map(ops in proptest::collection::vec(op(), 0..400)) {
            let mut table = SlotTable::new();
            let mut model: HashMap<Arc<str>, u32> = HashMap::new();
            for op in ops {
                match op {
                    Op::Insert(k, v) => {
                        let k: Arc<str> = Arc::from(k.to_string());
                        prop_assert_eq!(table.insert(Arc::clone(&k), v), model.insert(k, v));
                    }
                    Op::Remove(k) => {
                        let k = k.to_string();
                        prop_assert_eq!(table.remove(&k), model.remove(k.as_str()));
                    }
                    Op::Bump(k) => {
                        let k = k.to_string();
                        if let Some(v) = table.get_mut(&k) {
                            *v = v.wrapping_add(1);
                        }
                        if let Some(v) = model.get_mut(k.as_str()) {
                            *v = v.wrapping_add(1);
                        }
                    }
                }
                prop_assert_eq!(table.len(), model.len());
            }
            let mut stored: Vec<(String, u32)> =
                table.iter().map(|(k, v)| (k.to_string(), *v)).collect();
            let mut expected: Vec<(String, u32)> =
                model.iter().map(|(k, v)| (k.to_string(), *v)).collect();
            stored.sort();
            expected.sort();
            prop_assert_eq!(stored, expected);
            for (k, v) in &model {
                prop_assert_eq!(table.get(k), Some(v));
            }
        }
    }
}
