//! [`Iter`]: a double-ended iterator over a key range of a snapshot,
//! with seeks.
//!
//! Engines scan with callbacks (so they can hold latches and pins while
//! the caller looks at a pair); an iterator reads its range in chunks of
//! such scans, each starting just past the last key it fetched. The
//! chunks read one snapshot, so together they show one state of the
//! store however long the iteration lasts.
//!
//! Invariants:
//! - `lo..hi` is exactly what neither end has fetched yet: the front
//!   buffer holds keys below it, the back buffer keys above it, so the
//!   two ends never yield a key twice and meet without a gap;
//! - once the window is empty, each end drains the other's buffer from
//!   its far side;
//! - a seek refetches from where the other end has got to (`front_at`,
//!   `back_at`), so pairs one end took from the other's buffer come back
//!   when a seek moves in front of them;
//! - after an error the iterator yields it once and then ends.

use std::collections::VecDeque;
use std::iter::FusedIterator;
use std::ops::{Bound, ControlFlow};
use std::sync::Arc;

use ferrite_core::{Error, KeyRange, OwnedKeyRange, Result, StoreSnapshot};

/// A key and its value.
pub type KvPair = (Vec<u8>, Vec<u8>);

/// Pairs in the first chunk; each later chunk of the same end doubles,
/// up to `MAX_CHUNK`, so a short iteration reads little and a long one
/// seeks rarely.
const FIRST_CHUNK: usize = 16;
const MAX_CHUNK: usize = 4096;

/// Pairs of a key range in ascending order (or descending, from the
/// back), as they were when the iterator's snapshot was taken.
pub struct Iter {
    snap: Arc<dyn StoreSnapshot>,
    /// The iterator's range; seeks stay inside it.
    range: OwnedKeyRange,
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    /// Where each end has got to: past the last key it yielded, or where
    /// it was last sought.
    front_at: Bound<Vec<u8>>,
    back_at: Bound<Vec<u8>>,
    /// Ascending.
    front: VecDeque<KvPair>,
    /// Descending.
    back: VecDeque<KvPair>,
    front_chunk: usize,
    back_chunk: usize,
    /// Nothing is left between `lo` and `hi`.
    drained: bool,
    error: Option<Error>,
}

impl Iter {
    pub(crate) fn new(snap: Arc<dyn StoreSnapshot>, range: OwnedKeyRange) -> Self {
        Self {
            snap,
            lo: range.start.clone(),
            hi: range.end.clone(),
            front_at: range.start.clone(),
            back_at: range.end.clone(),
            range,
            front: VecDeque::new(),
            back: VecDeque::new(),
            front_chunk: FIRST_CHUNK,
            back_chunk: FIRST_CHUNK,
            drained: false,
            error: None,
        }
    }

    /// An iterator that yields `e` and ends (the snapshot could not be taken).
    pub(crate) fn failed(snap: Arc<dyn StoreSnapshot>, e: Error) -> Self {
        let mut it = Self::new(snap, OwnedKeyRange::all());
        it.drained = true;
        it.error = Some(e);
        it
    }

    /// Moves the front to the first key at or after `key` (within the
    /// iterator's range); the back stays where it is.
    pub fn seek(&mut self, key: impl AsRef<[u8]>) {
        let key = key.as_ref();
        self.front_at = if self.range.as_range().after_start(key) {
            Bound::Included(key.to_vec())
        } else {
            self.range.start.clone()
        };
        self.refill_window();
        self.front_chunk = FIRST_CHUNK;
    }

    /// Moves the back to the last key at or before `key` (within the
    /// iterator's range); the front stays where it is.
    pub fn seek_for_prev(&mut self, key: impl AsRef<[u8]>) {
        let key = key.as_ref();
        self.back_at = if self.range.as_range().before_end(key) {
            Bound::Included(key.to_vec())
        } else {
            self.range.end.clone()
        };
        self.refill_window();
        self.back_chunk = FIRST_CHUNK;
    }

    /// Makes the window everything between the two ends' positions.
    fn refill_window(&mut self) {
        self.lo = self.front_at.clone();
        self.hi = self.back_at.clone();
        self.front.clear();
        self.back.clear();
        self.drained = false;
    }

    /// Reads the next chunk of the window from its low (`rev`: high) end.
    fn fetch(&mut self, rev: bool) -> Result<()> {
        if self.drained {
            return Ok(());
        }
        let want = if rev {
            self.back_chunk
        } else {
            self.front_chunk
        };
        let window = KeyRange {
            start: self.lo.as_ref().map(Vec::as_slice),
            end: self.hi.as_ref().map(Vec::as_slice),
        };
        if window.is_empty() {
            self.drained = true;
            return Ok(());
        }
        let mut got: Vec<KvPair> = Vec::with_capacity(want.min(256));
        let mut visit = |k: &[u8], v: &[u8]| {
            got.push((k.to_vec(), v.to_vec()));
            if got.len() >= want {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        };
        if rev {
            self.snap.scan_rev(window, &mut visit)?;
        } else {
            self.snap.scan(window, &mut visit)?;
        }
        if got.len() < want {
            self.drained = true;
        } else if let Some((last, _)) = got.last() {
            if rev {
                self.hi = Bound::Excluded(last.clone());
            } else {
                self.lo = Bound::Excluded(last.clone());
            }
        }
        if rev {
            self.back_chunk = (want * 2).min(MAX_CHUNK);
            self.back.extend(got);
        } else {
            self.front_chunk = (want * 2).min(MAX_CHUNK);
            self.front.extend(got);
        }
        Ok(())
    }

    fn fail(&mut self, e: Error) -> Option<Result<KvPair>> {
        self.drained = true;
        self.front.clear();
        self.back.clear();
        Some(Err(e))
    }
}

impl Iterator for Iter {
    type Item = Result<KvPair>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.error.take() {
            return self.fail(e);
        }
        if self.front.is_empty() {
            if let Err(e) = self.fetch(false) {
                return self.fail(e);
            }
        }
        let pair = self.front.pop_front().or_else(|| self.back.pop_back())?;
        self.front_at = Bound::Excluded(pair.0.clone());
        Some(Ok(pair))
    }
}

impl DoubleEndedIterator for Iter {
    fn next_back(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.error.take() {
            return self.fail(e);
        }
        if self.back.is_empty() {
            if let Err(e) = self.fetch(true) {
                return self.fail(e);
            }
        }
        let pair = self.back.pop_front().or_else(|| self.front.pop_back())?;
        self.back_at = Bound::Excluded(pair.0.clone());
        Some(Ok(pair))
    }
}

impl FusedIterator for Iter {}

impl std::fmt::Debug for Iter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Iter")
            .field("range", &self.range)
            .field("buffered", &(self.front.len() + self.back.len()))
            .field("drained", &self.drained)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    /// A snapshot of a map, scanning exactly as engines do.
    struct MapSnapshot(BTreeMap<Vec<u8>, Vec<u8>>);

    impl StoreSnapshot for MapSnapshot {
        fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
            Ok(self.0.get(key).cloned())
        }

        fn scan(
            &self,
            range: KeyRange<'_>,
            visit: &mut ferrite_core::ScanVisitor<'_>,
        ) -> Result<()> {
            for (k, v) in self.0.range::<[u8], _>(range) {
                if visit(k, v).is_break() {
                    break;
                }
            }
            Ok(())
        }

        fn scan_rev(
            &self,
            range: KeyRange<'_>,
            visit: &mut ferrite_core::ScanVisitor<'_>,
        ) -> Result<()> {
            for (k, v) in self.0.range::<[u8], _>(range).rev() {
                if visit(k, v).is_break() {
                    break;
                }
            }
            Ok(())
        }
    }

    #[derive(Debug, Clone)]
    enum Step {
        Next,
        Back,
        Seek(u16),
        SeekForPrev(u16),
    }

    fn key(i: u16) -> Vec<u8> {
        i.to_be_bytes().to_vec()
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => Just(Step::Next),
            4 => Just(Step::Back),
            1 => (0u16..600).prop_map(Step::Seek),
            1 => (0u16..600).prop_map(Step::SeekForPrev),
        ]
    }

    proptest! {
        /// Against a cursor pair over the map's range: every step yields
        /// what the two ends of a sorted list would.
        #[test]
        fn both_ends_and_seeks_match_a_sorted_list(
            keys in prop::collection::btree_set(0u16..600, 0..400),
            a in 0u16..600,
            b in 0u16..600,
            steps in prop::collection::vec(step(), 0..300),
        ) {
            let map: BTreeMap<Vec<u8>, Vec<u8>> =
                keys.iter().map(|&i| (key(i), vec![i as u8])).collect();
            let (lo, hi) = (a.min(b), a.max(b));
            let in_range: Vec<u16> = keys.iter().copied().filter(|&k| k >= lo && k < hi).collect();
            let mut it = Iter::new(
                Arc::new(MapSnapshot(map)),
                OwnedKeyRange::new(key(lo)..key(hi)),
            );
            // The model: positions of the next front and back items.
            let (mut f, mut bk) = (0usize, in_range.len());
            for s in steps {
                match s {
                    Step::Next => {
                        let want = (f < bk).then(|| in_range[f]);
                        if want.is_some() { f += 1; }
                        let got = it.next().map(|r| r.unwrap().0);
                        prop_assert_eq!(got, want.map(key));
                    }
                    Step::Back => {
                        let want = (f < bk).then(|| in_range[bk - 1]);
                        if want.is_some() { bk -= 1; }
                        let got = it.next_back().map(|r| r.unwrap().0);
                        prop_assert_eq!(got, want.map(key));
                    }
                    Step::Seek(t) => {
                        it.seek(key(t));
                        f = in_range.partition_point(|&k| k < t);
                    }
                    Step::SeekForPrev(t) => {
                        it.seek_for_prev(key(t));
                        bk = in_range.partition_point(|&k| k <= t);
                    }
                }
            }
        }
    }

    #[test]
    fn an_error_is_yielded_once_then_the_iterator_ends() {
        let snap = Arc::new(MapSnapshot(BTreeMap::new()));
        let mut it = Iter::failed(snap, Error::EmptyKey);
        assert!(matches!(it.next(), Some(Err(Error::EmptyKey))));
        assert!(it.next().is_none());
        assert!(it.next_back().is_none());
    }
}
