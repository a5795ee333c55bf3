//! Per-connection compression tables: names and manifests become small ids, defined on the
//! connection before their first use, so a steady-state header is a few bytes.

use rustc_hash::FxHashMap;

/// The sender's side: assigns ids on first use.
///
/// # Example
///
/// ```
/// use rally_wire::OutboundTable;
///
/// let mut table = OutboundTable::default();
/// assert_eq!(table.lookup_or_insert("echo"), (1, true));
/// assert_eq!(table.lookup_or_insert("echo"), (1, false));
/// assert_eq!(table.lookup_or_insert("other"), (2, true));
/// ```
#[derive(Debug, Default, Clone)]
pub struct OutboundTable {
    ids: FxHashMap<String, u32>,
}

impl OutboundTable {
    /// The id of `key`, and whether it is new (then the caller sends a definition first).
    /// Allocates only for a new key.
    pub fn lookup_or_insert(&mut self, key: &str) -> (u32, bool) {
        if let Some(&id) = self.ids.get(key) {
            return (id, false);
        }
        let id = self.ids.len() as u32 + 1;
        self.ids.insert(key.to_owned(), id);
        (id, true)
    }

    /// Takes back the newest key (its definition never left): ids stay dense.
    ///
    /// # Example
    ///
    /// ```
    /// use rally_wire::OutboundTable;
    ///
    /// let mut table = OutboundTable::default();
    /// table.lookup_or_insert("a");
    /// table.lookup_or_insert("b");
    /// table.forget_newest("b");
    /// assert_eq!(table.lookup_or_insert("c"), (2, true));
    /// ```
    pub fn forget_newest(&mut self, key: &str) {
        let newest = self.ids.len() as u32;
        if self.ids.get(key) == Some(&newest) {
            self.ids.remove(key);
        }
    }

    /// Number of keys defined.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether no key is defined.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// Why a definition was refused (each closes the connection: the peer broke the protocol).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TableError {
    /// Id 0, or above the table's maximum.
    #[error("id {id} is out of range 1..={max}")]
    IdOutOfRange {
        /// The id.
        id: u32,
        /// The maximum.
        max: u32,
    },
    /// The id is already defined.
    #[error("id {id} is defined twice")]
    Redefined {
        /// The id.
        id: u32,
    },
}

/// The receiver's side: ids as the peer defined them, resolved to whatever the receiver keeps
/// (a name, or the local target itself). Ids are dense (1..=max), so memory is bounded by `max`.
///
/// # Example
///
/// ```
/// use rally_wire::{InboundTable, TableError};
///
/// let mut table = InboundTable::new(16);
/// table.define(1, "echo".to_owned()).unwrap();
/// assert_eq!(table.resolve(1).map(String::as_str), Some("echo"));
/// assert_eq!(table.define(1, "again".to_owned()), Err(TableError::Redefined { id: 1 }));
/// assert!(table.resolve(2).is_none());
/// ```
#[derive(Debug, Clone)]
pub struct InboundTable<T> {
    entries: Vec<Option<T>>,
    max: u32,
}

impl<T> InboundTable<T> {
    /// An empty table accepting ids `1..=max`.
    pub fn new(max: u32) -> Self {
        Self {
            entries: Vec::new(),
            max,
        }
    }

    /// Defines `id`.
    ///
    /// # Errors
    ///
    /// [`TableError`] for an id out of range or defined twice.
    pub fn define(&mut self, id: u32, value: T) -> Result<(), TableError> {
        if id == 0 || id > self.max {
            return Err(TableError::IdOutOfRange { id, max: self.max });
        }
        let index = id as usize - 1;
        if self.entries.len() <= index {
            self.entries.resize_with(index + 1, || None);
        }
        let slot = &mut self.entries[index];
        if slot.is_some() {
            return Err(TableError::Redefined { id });
        }
        *slot = Some(value);
        Ok(())
    }

    /// What `id` was defined as.
    pub fn resolve(&self, id: u32) -> Option<&T> {
        self.entries.get((id as usize).checked_sub(1)?)?.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_ids_are_refused_without_allocating() {
        let mut table = InboundTable::<u8>::new(8);
        assert_eq!(
            table.define(0, 1),
            Err(TableError::IdOutOfRange { id: 0, max: 8 })
        );
        assert_eq!(
            table.define(u32::MAX, 1),
            Err(TableError::IdOutOfRange {
                id: u32::MAX,
                max: 8
            })
        );
        assert!(table.entries.is_empty());
    }
}
