//! The L0 index (SwiftKV §3.2's lightweight in-memory index over a
//! partition's L0): which L0 tables may hold a key, found by one binary
//! search instead of testing every table's range.
//!
//! L0 tables overlap. The index cuts the key space at every table's
//! smallest key and just past every table's largest (`largest ++ [0]`, the
//! least key above it), so no table's range begins or ends inside a piece;
//! each piece lists, newest first, the tables covering it. It is built
//! with the version that owns it and never changes.
//!
//! A flush cuts its output into several disjoint tables ([`runs`] groups
//! them back): L0 is a stack of sorted runs, and what bounds reads and
//! triggers compaction is how many runs it holds, not how many tables.

use std::collections::BTreeMap;
use std::ops::Bound;

/// Piece `i` is `cuts[i] <= key < cuts[i + 1]` (the last one is open);
/// keys below `cuts[0]` are in no table.
#[derive(Debug, Clone, Default)]
pub struct L0Index {
    cuts: Vec<Vec<u8>>,
    /// Per piece, positions in L0 (newest first) of the tables covering it.
    covering: Vec<Vec<u32>>,
}

impl L0Index {
    /// Indexes L0 tables given newest first as `(smallest, largest)`.
    pub fn build<'a>(ranges: impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone) -> Self {
        let mut cuts: Vec<Vec<u8>> = Vec::new();
        for (lo, hi) in ranges.clone() {
            cuts.push(lo.to_vec());
            cuts.push(past(hi));
        }
        cuts.sort_unstable();
        cuts.dedup();
        // A table covers the pieces from its smallest key's cut up to the
        // cut past its largest: linear in what the index holds, since a
        // flush's pieces make L0 hold many tables, not a few.
        let mut covering: Vec<Vec<u32>> = vec![Vec::new(); cuts.len()];
        let at = |k: &[u8]| cuts.partition_point(|c| c.as_slice() < k);
        for (i, (lo, hi)) in ranges.enumerate() {
            let (from, to) = (at(lo), at(&past(hi)));
            for piece in covering.iter_mut().take(to).skip(from) {
                piece.push(i as u32);
            }
        }
        Self { cuts, covering }
    }

    /// Positions in L0 (newest first) of the tables whose range holds `key`.
    pub fn candidates(&self, key: &[u8]) -> &[u32] {
        let i = self.cuts.partition_point(|c| c.as_slice() <= key);
        match i.checked_sub(1).and_then(|i| self.covering.get(i)) {
            Some(c) => c,
            None => &[],
        }
    }
}

/// L0's tables, given newest first as `(smallest, largest)`, grouped into
/// sorted runs, newest run first: each run is consecutive in age and its
/// tables are pairwise disjoint (a flush's pieces, or older tables that
/// meet none of them), so a run reads as one level and every table of a
/// run is newer than every table of the runs after it. Positions within
/// a run are in key order.
pub fn runs<'a>(ranges: impl Iterator<Item = (&'a [u8], &'a [u8])>) -> Vec<Vec<usize>> {
    /// A run in key order: smallest key → (largest key, position in L0).
    type Run<'a> = BTreeMap<&'a [u8], (&'a [u8], usize)>;
    // A run's tables are disjoint, so of those starting at or below `hi`
    // the last ends highest: only it can reach down to `lo`.
    let meets = |run: &Run<'a>, lo: &[u8], hi: &[u8]| {
        run.range::<[u8], _>((Bound::Unbounded, Bound::Included(hi)))
            .next_back()
            .is_some_and(|(_, &(b, _))| lo <= b)
    };
    let mut runs: Vec<Run<'a>> = Vec::new();
    for (i, (lo, hi)) in ranges.enumerate() {
        match runs.last_mut() {
            Some(run) if !meets(run, lo, hi) => {
                run.insert(lo, (hi, i));
            }
            _ => runs.push(BTreeMap::from([(lo, (hi, i))])),
        }
    }
    runs.into_iter()
        .map(|run| run.into_values().map(|(_, i)| i).collect())
        .collect()
}

/// The least key above `k`.
fn past(k: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(k.len() + 1);
    v.extend_from_slice(k);
    v.push(0);
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(0u8..4, 0..4)
    }

    proptest! {
        /// The index names exactly the tables a scan of every range would,
        /// in the same (newest first) order.
        #[test]
        fn candidates_are_the_tables_whose_range_holds_the_key(
            tables in proptest::collection::vec((key(), key()), 0..12),
            probes in proptest::collection::vec(key(), 0..40),
        ) {
            let ranges: Vec<(Vec<u8>, Vec<u8>)> = tables
                .into_iter()
                .map(|(a, b)| if a <= b { (a, b) } else { (b, a) })
                .collect();
            let idx = L0Index::build(ranges.iter().map(|(a, b)| (a.as_slice(), b.as_slice())));
            let ends = ranges.iter().flat_map(|(a, b)| [a.clone(), b.clone(), past(b)]);
            for k in probes.into_iter().chain(ends) {
                let want: Vec<u32> = ranges
                    .iter()
                    .enumerate()
                    .filter(|(_, (a, b))| a.as_slice() <= k.as_slice() && k.as_slice() <= b.as_slice())
                    .map(|(i, _)| i as u32)
                    .collect();
                prop_assert_eq!(idx.candidates(&k), want.as_slice(), "key {:?}", k);
            }
        }

        /// Runs cover L0 once, in age order, each of disjoint tables in key
        /// order, and each older run's first table meets the run before.
        #[test]
        fn runs_are_disjoint_stacked_in_age_and_as_few_as_a_greedy_stack_allows(
            tables in proptest::collection::vec((key(), key()), 0..16),
        ) {
            let ranges: Vec<(Vec<u8>, Vec<u8>)> = tables
                .into_iter()
                .map(|(a, b)| if a <= b { (a, b) } else { (b, a) })
                .collect();
            let got = runs(ranges.iter().map(|(a, b)| (a.as_slice(), b.as_slice())));
            let mut seen: Vec<usize> = got.iter().flatten().copied().collect();
            let ages: Vec<usize> = got.iter().map(|r| *r.iter().min().unwrap()).collect();
            seen.sort_unstable();
            prop_assert_eq!(seen, (0..ranges.len()).collect::<Vec<_>>());
            prop_assert!(ages.windows(2).all(|w| w[0] < w[1]));
            for (n, run) in got.iter().enumerate() {
                for w in run.windows(2) {
                    prop_assert!(ranges[w[0]].1 < ranges[w[1]].0, "run {} not disjoint", n);
                }
                if n > 0 {
                    // Its newest table opened it: it met the run before.
                    let first = *run.iter().min().unwrap();
                    let (lo, hi) = &ranges[first];
                    prop_assert!(got[n - 1].iter().any(|&j| ranges[j].0 <= *hi && *lo <= ranges[j].1));
                }
            }
        }
    }

    #[test]
    fn a_flushs_pieces_are_one_run_and_an_overlap_starts_the_next() {
        // Newest first: pieces of one flush, then an older table meeting
        // one of them, then one that meets nothing of its run.
        let ranges: Vec<(&[u8], &[u8])> = vec![
            (b"m", b"p"),
            (b"a", b"c"),
            (b"x", b"z"),
            (b"b", b"n"),
            (b"q", b"r"),
            (b"c", b"d"),
        ];
        assert_eq!(
            runs(ranges.iter().copied()),
            vec![vec![1, 0, 2], vec![3, 4], vec![5]]
        );
        assert!(runs(std::iter::empty()).is_empty());
    }

    #[test]
    fn disjoint_tables_give_one_candidate() {
        let ranges: Vec<(&[u8], &[u8])> = vec![(b"m", b"p"), (b"a", b"c"), (b"x", b"z")];
        let idx = L0Index::build(ranges.iter().copied());
        assert_eq!(idx.candidates(b"b"), &[1]);
        assert_eq!(idx.candidates(b"c"), &[1]);
        assert_eq!(idx.candidates(b"d"), &[] as &[u32]);
        assert_eq!(idx.candidates(b"p"), &[0]);
        assert_eq!(idx.candidates(b"zz"), &[] as &[u32]);
    }
}
