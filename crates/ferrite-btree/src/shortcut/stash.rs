//! The stash queue: structural changes since the companion was built.
//!
//! Every split is logged here (level, the split node, the new node) as it
//! happens, under the tree's write lock, and nothing else is done on the
//! foreground path. When a level has gained enough new nodes relative to
//! its size at the last re-layout ([`due`], a pure policy), the companion
//! is rebuilt. A rebuild takes the queue's contents at its start; changes
//! made while it runs stay for the next one.

use parking_lot::Mutex;

use crate::page::PageId;

/// One structural change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StashEntry {
    pub level: u8,
    pub split: PageId,
    pub new: PageId,
}

/// Whether the companion needs rebuilding: some level's new nodes reached
/// `threshold` × its nodes at the last layout, or the tree grew a level.
/// `new_per_level[l]` and `nodes_at_layout[l]` are indexed by level
/// (0 = leaves).
pub fn due(new_per_level: &[u64], nodes_at_layout: &[u64], threshold: f64) -> bool {
    if new_per_level.len() > nodes_at_layout.len() {
        return new_per_level
            .get(nodes_at_layout.len()..)
            .is_some_and(|extra| extra.iter().any(|&n| n > 0));
    }
    new_per_level
        .iter()
        .zip(nodes_at_layout)
        .any(|(&new, &nodes)| new > 0 && new as f64 >= threshold * nodes.max(1) as f64)
}

/// The queue.
#[derive(Debug, Default)]
pub struct Stash {
    inner: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    log: Vec<StashEntry>,
    /// New nodes per level among `log`, kept as entries arrive.
    per_level: Vec<u64>,
}

impl Stash {
    pub fn record(&self, level: u8, split: PageId, new: PageId) {
        let mut e = self.inner.lock();
        e.log.push(StashEntry { level, split, new });
        let l = usize::from(level);
        if e.per_level.len() <= l {
            e.per_level.resize(l + 1, 0);
        }
        e.per_level[l] += 1;
    }

    /// Entries waiting.
    pub fn len(&self) -> usize {
        self.inner.lock().log.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// New nodes per level among the waiting entries (a root split counts
    /// as a new node on the level above the old root).
    pub fn new_per_level(&self) -> Vec<u64> {
        self.inner.lock().per_level.clone()
    }

    /// Takes the entries recorded so far; later ones go to the next batch.
    pub fn take(&self) -> Vec<StashEntry> {
        let mut e = self.inner.lock();
        e.per_level.clear();
        std::mem::take(&mut e.log)
    }

    pub fn memory_bytes(&self) -> usize {
        let e = self.inner.lock();
        e.log.capacity() * std::mem::size_of::<StashEntry>() + e.per_level.capacity() * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_at_the_threshold() {
        assert!(!due(&[], &[1000, 10, 1], 0.05));
        assert!(!due(&[49], &[1000, 10, 1], 0.05));
        assert!(due(&[50], &[1000, 10, 1], 0.05));
        assert!(due(&[0, 1], &[1000, 10, 1], 0.05));
        // A new level is always due.
        assert!(due(&[0, 0, 0, 1], &[1000, 10, 1], 0.05));
        assert!(!due(&[0, 0, 0, 0], &[1000, 10, 1], 0.05));
    }

    #[test]
    fn take_leaves_later_entries() {
        let s = Stash::default();
        s.record(0, 5, 9);
        s.record(1, 3, 10);
        assert_eq!(s.new_per_level(), vec![1, 1]);
        let first = s.take();
        assert_eq!(first.len(), 2);
        s.record(0, 6, 11);
        assert_eq!(
            s.take(),
            vec![StashEntry {
                level: 0,
                split: 6,
                new: 11
            }]
        );
        assert!(s.is_empty());
    }
}
