//! The batch array: pairs evicted from the merged filter on their way into
//! the Z+-tree, inserted cooperatively by whichever writers arrive.
//!
//! Batches are sorted by first key and disjoint (they come from distinct
//! merged-filter nodes). A writer claims the next batch with an atomic
//! cursor and inserts it; the array stays readable by lookups and scans
//! until every batch is in the tree and the array is retired, so a pair is
//! always in the filter, the array or the tree.
//!
//! Each batch is marked inserted by its inserter while it still holds the
//! tree's write lock, so whoever holds that lock sees exactly which
//! batches the tree holds. A checkpoint records the others as buffered
//! pairs instead of inserting them: inserting writes leaf pages, and a
//! checkpoint must be able to run (it frees reclaimed zones) when no zone
//! is left for them.

use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::merged_filter::{after_start, before_end};
use crate::pair::{Pair, Val};

#[derive(Debug, Default)]
pub struct BatchArray {
    batches: Vec<Vec<Pair>>,
    /// Per batch: in the tree (set under the tree's write lock).
    inserted: Vec<AtomicBool>,
    next: AtomicUsize,
    done: AtomicUsize,
}

impl BatchArray {
    pub fn new(batches: Vec<Vec<Pair>>) -> Self {
        Self {
            inserted: batches.iter().map(|_| AtomicBool::new(false)).collect(),
            batches,
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
        }
    }

    /// Claims the next batch to insert.
    pub fn claim(&self) -> Option<(usize, &[Pair])> {
        let i = self.next.fetch_add(1, Ordering::AcqRel);
        self.batches.get(i).map(|b| (i, b.as_slice()))
    }

    /// Batch `i` is in the tree; called under the tree's write lock.
    pub fn mark_inserted(&self, i: usize) {
        if let Some(f) = self.inserted.get(i) {
            f.store(true, Ordering::Release);
        }
    }

    pub fn finish_one(&self) {
        self.done.fetch_add(1, Ordering::AcqRel);
    }

    /// Every batch is in the tree.
    pub fn finished(&self) -> bool {
        self.done.load(Ordering::Acquire) >= self.batches.len()
    }

    /// Every batch claimed so far is finished (unclaimed ones may remain).
    pub fn settled(&self) -> bool {
        let claimed = self.next.load(Ordering::Acquire).min(self.batches.len());
        self.done.load(Ordering::Acquire) >= claimed
    }

    /// The pairs of the batches not yet in the tree, sorted. Exact only
    /// under the tree's lock (see [`BatchArray::mark_inserted`]).
    pub fn not_inserted(&self) -> impl Iterator<Item = &Pair> {
        self.batches
            .iter()
            .zip(&self.inserted)
            .filter(|(_, f)| !f.load(Ordering::Acquire))
            .flat_map(|(b, _)| b)
    }

    pub fn get(&self, key: &[u8]) -> Option<Val> {
        let i = self
            .batches
            .partition_point(|b| b.first().is_some_and(|p| p.key() <= key));
        let b = self.batches.get(i.checked_sub(1)?)?;
        let j = b.binary_search_by(|p| p.key().cmp(key)).ok()?;
        Some(b[j].val.clone())
    }

    /// Up to `limit` pairs within the bounds, sorted (batches are sorted
    /// and disjoint, so this starts at the first batch that can hold them).
    pub fn range(&self, start: Bound<&[u8]>, end: Bound<&[u8]>, limit: usize) -> Vec<Pair> {
        let first = self
            .batches
            .partition_point(|b| b.last().is_none_or(|p| !after_start(p.key(), start)));
        let mut out = Vec::new();
        for b in &self.batches[first..] {
            let from = b.partition_point(|p| !after_start(p.key(), start));
            for p in &b[from..] {
                if !before_end(p.key(), end) || out.len() >= limit {
                    return out;
                }
                out.push(p.clone());
            }
        }
        out
    }

    /// Up to `limit` pairs of `start..end` from the top down, in
    /// descending key order.
    pub fn range_rev(&self, start: Bound<&[u8]>, end: Bound<&[u8]>, limit: usize) -> Vec<Pair> {
        let last = self
            .batches
            .partition_point(|b| b.first().is_some_and(|p| before_end(p.key(), end)));
        let mut out = Vec::new();
        for b in self.batches[..last].iter().rev() {
            let to = b.partition_point(|p| before_end(p.key(), end));
            for p in b[..to].iter().rev() {
                if !after_start(p.key(), start) || out.len() >= limit {
                    return out;
                }
                out.push(p.clone());
            }
        }
        out
    }

    pub fn mem_bytes(&self) -> usize {
        self.batches.iter().flatten().map(Pair::mem_bytes).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pair::Bytes;

    #[test]
    fn lookups_and_claims() {
        let p = |k: u8| Pair::new(&[k], Val::Put(Bytes::new(&[k])));
        let a = BatchArray::new(vec![vec![p(1), p(3)], vec![p(5), p(9)]]);
        assert_eq!(a.get(&[3]), Some(Val::Put(Bytes::new(&[3]))));
        assert_eq!(a.get(&[4]), None);
        assert_eq!(a.get(&[0]), None);
        assert_eq!(a.get(&[9]), Some(Val::Put(Bytes::new(&[9]))));
        let r = a.range(Bound::Included(&[2][..]), Bound::Excluded(&[9][..]), 10);
        assert_eq!(r.len(), 2);
        assert_eq!(
            a.range(Bound::Excluded(&[3][..]), Bound::Unbounded, 10)
                .len(),
            2
        );
        assert_eq!(a.range(Bound::Unbounded, Bound::Unbounded, 3).len(), 3);
        assert_eq!(a.not_inserted().count(), 4);
        assert!(a.settled());
        assert!(a.claim().is_some());
        assert!(!a.settled());
        a.mark_inserted(0);
        a.finish_one();
        assert!(a.settled() && !a.finished());
        let left: Vec<&[u8]> = a.not_inserted().map(Pair::key).collect();
        assert_eq!(left, [&[5u8][..], &[9u8][..]]);
        assert!(a.claim().is_some() && a.claim().is_none());
        assert!(!a.finished() && !a.settled());
        a.mark_inserted(1);
        a.finish_one();
        assert!(a.finished() && a.settled());
        assert_eq!(a.not_inserted().count(), 0);
    }
}
