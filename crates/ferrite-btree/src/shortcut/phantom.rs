//! The phantom mapping: node ordinal within a level → page id.
//!
//! A level's nodes, in key order, are numbered 0, 1, 2, … (their
//! *ordinals*, what the level's model predicts). Where a level is laid out
//! contiguously in the page file — a bulk-loaded tree writes each level as
//! one run of consecutive page ids in key order — the page of ordinal `i`
//! is `first + i`, computed, not stored. The map keeps one [`Run`] per
//! maximal stretch of ordinals whose pages are consecutive, so its memory
//! is proportional to the discontinuities of the layout (a split's new
//! node lives at the end of the file and costs up to two runs), never to
//! the number of nodes. It plays the part of the file system's extent map
//! under the paper's per-level files: a prediction becomes a location by
//! a search over runs and one addition.
//!
//! Invariant: runs are sorted by `first_ordinal`, cover `0..len` without
//! gaps, and no two adjacent runs could be merged.

use crate::page::PageId;

/// Consecutive ordinals stored at consecutive page ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    pub first_ordinal: u64,
    pub first_page: PageId,
    pub len: u64,
}

/// Bytes one run takes.
pub const RUN_BYTES: usize = std::mem::size_of::<Run>();

/// One level's ordinal → page map.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PhantomMap {
    runs: Vec<Run>,
    len: u64,
}

impl PhantomMap {
    /// The map of a level whose nodes, in key order, are at `pages`.
    pub fn from_pages(pages: &[PageId]) -> Self {
        let mut runs: Vec<Run> = Vec::new();
        for (i, &p) in pages.iter().enumerate() {
            match runs.last_mut() {
                Some(r) if r.first_page.checked_add(r.len) == Some(p) => r.len += 1,
                _ => runs.push(Run {
                    first_ordinal: i as u64,
                    first_page: p,
                    len: 1,
                }),
            }
        }
        runs.shrink_to_fit();
        Self {
            runs,
            len: pages.len() as u64,
        }
    }

    /// The page of `ordinal`, if the level has that many nodes.
    pub fn locate(&self, ordinal: u64) -> Option<PageId> {
        if ordinal >= self.len {
            return None;
        }
        let i = self
            .runs
            .partition_point(|r| r.first_ordinal <= ordinal)
            .checked_sub(1)?;
        let r = self.runs.get(i)?;
        Some(r.first_page + (ordinal - r.first_ordinal))
    }

    /// Nodes in the level.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Places where the next ordinal is not at the next page.
    pub fn discontinuities(&self) -> usize {
        self.runs.len().saturating_sub(1)
    }

    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.runs.capacity() * RUN_BYTES
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_contiguous_level_is_one_run() {
        let pages: Vec<PageId> = (100..10_100).collect();
        let m = PhantomMap::from_pages(&pages);
        assert_eq!(m.discontinuities(), 0);
        assert_eq!(m.locate(0), Some(100));
        assert_eq!(m.locate(9_999), Some(10_099));
        assert_eq!(m.locate(10_000), None);
        assert!(m.memory_bytes() < 100);
    }

    #[test]
    fn a_split_costs_two_runs() {
        // Node 5's right half went to page 9000, at the end of the file.
        let mut pages: Vec<PageId> = (10..20).collect();
        pages.insert(6, 9000);
        let m = PhantomMap::from_pages(&pages);
        assert_eq!(m.discontinuities(), 2);
        assert_eq!(m.locate(5), Some(15));
        assert_eq!(m.locate(6), Some(9000));
        assert_eq!(m.locate(7), Some(16));
    }

    proptest! {
        #[test]
        fn locate_inverts_the_layout(pages in proptest::collection::vec(2u64..1000, 0..200)) {
            let m = PhantomMap::from_pages(&pages);
            prop_assert_eq!(m.len(), pages.len() as u64);
            for (i, &p) in pages.iter().enumerate() {
                prop_assert_eq!(m.locate(i as u64), Some(p));
            }
            prop_assert!(m.discontinuities() < pages.len().max(1));
        }
    }
}
