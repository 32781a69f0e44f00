//! I/O compaction (paper §3.1–§3.2) as a write-side helper: a window of
//! recently written blocks, as a block store's segment cache holds them
//! before writing them to backend storage.
//!
//! Writes enter the window; when it would hold more than `window` distinct
//! blocks, its contents leave as *consecutive writes* (CWs): every maximal
//! run of consecutive cached blocks, in ascending order, however the
//! writes that made it arrived. Each CW is then stored as one contiguous
//! run (one compression unit aligned to it) and indexed by one entry.
//! A block rewritten inside the window is emitted once, with its latest data.

use crate::range::BlockRange;

/// A run of consecutive blocks leaving the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactedWrite {
    pub range: BlockRange,
    /// How many writes contributed blocks to it.
    pub writes: u32,
}

/// The compaction window.
#[derive(Debug, Clone)]
pub struct SegmentCache {
    window: u64,
    /// Disjoint, non-adjacent runs in ascending order, with contributors.
    runs: Vec<(BlockRange, u32)>,
    blocks: u64,
    writes_in: u64,
    writes_out: u64,
}

impl SegmentCache {
    /// A window of `window` blocks (the paper's segment cache: 128).
    pub fn new(window: u64) -> Self {
        Self {
            window: window.max(1),
            runs: Vec::new(),
            blocks: 0,
            writes_in: 0,
            writes_out: 0,
        }
    }

    /// Adds a write; returns the CWs it pushed out of the window (empty
    /// while the window has room).
    pub fn write(&mut self, range: BlockRange) -> Vec<CompactedWrite> {
        self.writes_in += 1;
        let mut out = Vec::new();
        if self.blocks + range.len() > self.window && !self.runs.is_empty() {
            out = self.flush();
        }
        self.insert(range);
        if self.blocks >= self.window {
            out.extend(self.flush());
        }
        out
    }

    /// Empties the window.
    pub fn flush(&mut self) -> Vec<CompactedWrite> {
        self.blocks = 0;
        self.writes_out += self.runs.len() as u64;
        self.runs
            .drain(..)
            .map(|(range, writes)| CompactedWrite { range, writes })
            .collect()
    }

    /// Writes in and CWs out so far.
    pub fn counts(&self) -> (u64, u64) {
        (self.writes_in, self.writes_out)
    }

    fn insert(&mut self, r: BlockRange) {
        let first = self
            .runs
            .partition_point(|(s, _)| s.r().saturating_add(1) < r.l());
        let mut last = first;
        while last < self.runs.len() && self.runs[last].0.l() <= r.r().saturating_add(1) {
            last += 1;
        }
        let (mut l, mut h, mut writes) = (r.l(), r.r(), 1u32);
        for (s, w) in &self.runs[first..last] {
            l = l.min(s.l());
            h = h.max(s.r());
            writes = writes.saturating_add(*w);
            self.blocks -= s.len();
        }
        let joined = BlockRange::ordered(l, h);
        self.blocks += joined.len();
        self.runs
            .splice(first..last, std::iter::once((joined, writes)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(l: u64, h: u64) -> BlockRange {
        BlockRange::new(l, h).unwrap()
    }

    #[test]
    fn reorders_and_joins_consecutive_writes() {
        // The paper's example: [1, 4], [11, 12], [5, 6], [7, 8].
        let mut c = SegmentCache::new(128);
        for w in [r(1, 4), r(11, 12), r(5, 6), r(7, 8)] {
            assert!(c.write(w).is_empty());
        }
        let out = c.flush();
        assert_eq!(
            out,
            vec![
                CompactedWrite {
                    range: r(1, 8),
                    writes: 3
                },
                CompactedWrite {
                    range: r(11, 12),
                    writes: 1
                }
            ]
        );
        assert_eq!(c.counts(), (4, 2));
    }

    #[test]
    fn a_full_window_flushes_and_rewrites_count_once() {
        let mut c = SegmentCache::new(8);
        assert!(c.write(r(0, 3)).is_empty());
        assert!(c.write(r(2, 5)).is_empty()); // 6 distinct blocks
        let out = c.write(r(100, 103)); // would make 10: flush first
        assert_eq!(
            out,
            vec![CompactedWrite {
                range: r(0, 5),
                writes: 2
            }]
        );
        let out = c.write(r(104, 107)); // reaches 8: flushed at once
        assert_eq!(
            out,
            vec![CompactedWrite {
                range: r(100, 107),
                writes: 2
            }]
        );
    }
}
