//! Where the live elements of a collection begin and end, remembered in
//! memory so that popping from a large collection does not read the
//! deletes of the pops before it.
//!
//! An ordered store keeps a deleted record's trace until it is
//! compacted away (an LSM-tree's tombstone), and a scan pays for every
//! trace it passes: popping the lowest member of a sorted set again and
//! again would make each pop scan every earlier pop's trace. A hint names
//! a point no live element lies beyond — below a sorted set's `low` mark,
//! above its `high` mark — so a scan from the end starts at the mark. A
//! set's `cursor` is where `SPOP` of a large set resumes.
//!
//! The background passes over the expiry index and the dead-collection
//! records resume where the last one stopped ([`Resume`]) for the same
//! reason: what they processed is deleted, and its traces lie behind.
//!
//! Invariants: a `low` mark is never above a live score-index key of its
//! collection, nor a `high` mark below one: a mark is raised (or, for
//! `high`, lowered) only by the commit of the transaction that deleted
//! what it passes, and any write of a score-index key beyond a mark drops
//! the mark at once (dropping is always safe). A `cursor` is only a
//! starting point and needs no such care. Hints live in memory and start
//! empty after a restart; a full table forgets them all.

use std::collections::HashMap;

use parking_lot::Mutex;

/// Collections hinted at most.
const MAX_HINTS: usize = 1 << 16;

/// A collection: (slot, version).
pub type CollId = (u8, u64);

#[derive(Default, Clone)]
struct Hint {
    low: Option<Vec<u8>>,
    high: Option<Vec<u8>>,
    cursor: Option<Vec<u8>>,
}

/// Which mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// No live score-index key lies below it.
    Low,
    /// No live score-index key lies above it.
    High,
}

/// Whether a score-index key written at `key` lies past `mark` (below a
/// low mark, above a high one), so the mark no longer holds.
pub fn passes(which: Mark, key: &[u8], mark: &[u8]) -> bool {
    match which {
        Mark::Low => key < mark,
        Mark::High => key > mark,
    }
}

#[derive(Default)]
pub struct Hints {
    map: Mutex<HashMap<CollId, Hint>>,
}

impl Hints {
    /// A sorted set's mark, if known.
    pub fn mark(&self, id: CollId, which: Mark) -> Option<Vec<u8>> {
        let map = self.map.lock();
        let h = map.get(&id)?;
        match which {
            Mark::Low => h.low.clone(),
            Mark::High => h.high.clone(),
        }
    }

    /// Sets a mark (at a commit that deleted everything it passes).
    pub fn set_mark(&self, id: CollId, which: Mark, key: Vec<u8>) {
        let mut map = self.map.lock();
        if map.len() >= MAX_HINTS && !map.contains_key(&id) {
            map.clear();
        }
        let h = map.entry(id).or_default();
        match which {
            Mark::Low => h.low = Some(key),
            Mark::High => h.high = Some(key),
        }
    }

    /// A score-index key `key` is written: the marks it passes are
    /// dropped.
    pub fn written(&self, id: CollId, key: &[u8]) {
        let mut map = self.map.lock();
        if let Some(h) = map.get_mut(&id) {
            if h.low.as_deref().is_some_and(|l| passes(Mark::Low, key, l)) {
                h.low = None;
            }
            if h.high
                .as_deref()
                .is_some_and(|hi| passes(Mark::High, key, hi))
            {
                h.high = None;
            }
        }
    }

    /// Drops a mark (a transaction wrote past it after moving it).
    pub fn drop_mark(&self, id: CollId, which: Mark) {
        if let Some(h) = self.map.lock().get_mut(&id) {
            match which {
                Mark::Low => h.low = None,
                Mark::High => h.high = None,
            }
        }
    }

    /// Forgets every hint (the collections are about to change by writes
    /// that do not keep them).
    pub fn clear(&self) {
        self.map.lock().clear();
    }

    /// Where `SPOP` of a large set resumes.
    pub fn cursor(&self, id: CollId) -> Option<Vec<u8>> {
        self.map.lock().get(&id).and_then(|h| h.cursor.clone())
    }

    pub fn set_cursor(&self, id: CollId, position: Vec<u8>) {
        let mut map = self.map.lock();
        if map.len() >= MAX_HINTS && !map.contains_key(&id) {
            map.clear();
        }
        map.entry(id).or_default().cursor = Some(position);
    }
}

/// Where a background pass over records it deletes as it goes resumes.
#[derive(Default)]
pub struct Resume {
    at: Mutex<Option<Vec<u8>>>,
}

impl Resume {
    pub fn get(&self) -> Option<Vec<u8>> {
        self.at.lock().clone()
    }

    pub fn set(&self, key: Option<Vec<u8>>) {
        *self.at.lock() = key;
    }

    /// Moves the point back to `key` if `key` sorts before it: a record
    /// written behind the pass (an expiry time already past) is found by
    /// the next one.
    pub fn lower_to(&self, key: &[u8]) {
        let mut at = self.at.lock();
        if at.as_deref().is_some_and(|r| key < r) {
            *at = Some(key.to_vec());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_beyond_a_mark_drops_it() {
        let h = Hints::default();
        h.set_mark((0, 1), Mark::Low, b"m".to_vec());
        h.set_mark((0, 1), Mark::High, b"t".to_vec());
        h.written((0, 1), b"p");
        assert_eq!(h.mark((0, 1), Mark::Low), Some(b"m".to_vec()));
        assert_eq!(h.mark((0, 1), Mark::High), Some(b"t".to_vec()));
        h.written((0, 1), b"a");
        assert_eq!(h.mark((0, 1), Mark::Low), None);
        h.written((0, 1), b"z");
        assert_eq!(h.mark((0, 1), Mark::High), None);
        assert_eq!(h.mark((0, 2), Mark::Low), None);
    }
}
