//! Phase 1: greedy piecewise linear segmentation with an error bound.
//!
//! Points are `(keys[i], i)` for ascending (non-decreasing) `keys`. A
//! segment starts at its first point and grows while some line through
//! that point stays within ±ε of every point added: the feasible slopes
//! form a cone that shrinks with each point, and the segment ends at the
//! first point that would empty it (the shrinking-cone method). The result
//! is a partition of `0..keys.len()` into ranges, each covered by one line
//! within ε; this pass only decides where segments begin and end, the
//! lines themselves are refitted in `refinement`.
//!
//! Equal keys at different positions (possible when byte keys share their
//! first eight bytes) are kept in one segment only while they are within
//! ε of its first point; no line can separate them, so a model predicts
//! one of them.

use std::ops::Range;

/// Splits `0..keys.len()` into segments that one line each covers within
/// `eps` positions. `keys` must be non-decreasing; `eps` must be ≥ 0.
pub fn segment(keys: &[u64], eps: f64) -> Vec<Range<usize>> {
    let eps = eps.max(0.0);
    let mut out = Vec::new();
    let mut start = 0;
    while start < keys.len() {
        let end = cone_end(keys, start, eps);
        out.push(start..end);
        start = end;
    }
    out
}

/// The end (exclusive) of the longest segment starting at `start`.
fn cone_end(keys: &[u64], start: usize, eps: f64) -> usize {
    let Some(&x0) = keys.get(start) else {
        return start;
    };
    let mut lo = f64::NEG_INFINITY;
    let mut hi = f64::INFINITY;
    for (j, &x) in keys.iter().enumerate().skip(start + 1) {
        let dy = (j - start) as f64;
        if x == x0 {
            if dy > eps {
                return j;
            }
            continue;
        }
        // Keys are non-decreasing, so x > x0 here.
        let dx = (x - x0) as f64;
        let (l, h) = ((dy - eps) / dx, (dy + eps) / dx);
        let (nlo, nhi) = (lo.max(l), hi.min(h));
        if nlo > nhi {
            return j;
        }
        lo = nlo;
        hi = nhi;
    }
    keys.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_line_is_one_segment() {
        let keys: Vec<u64> = (0..1000).map(|i| 100 + 7 * i).collect();
        assert_eq!(segment(&keys, 0.5), vec![0..1000]);
    }

    #[test]
    fn a_kink_starts_a_new_segment() {
        let mut keys: Vec<u64> = (0..100).map(|i| 10 * i).collect();
        keys.extend((0..100).map(|i| 1000 + 1000 * i));
        let segs = segment(&keys, 1.0);
        assert!(segs.len() >= 2 && segs.len() <= 3, "{segs:?}");
        assert_eq!(segs[0].start, 0);
    }

    #[test]
    fn empty_and_single() {
        assert!(segment(&[], 1.0).is_empty());
        assert_eq!(segment(&[5], 1.0), vec![0..1]);
    }

    #[test]
    fn duplicates_beyond_eps_split() {
        let keys = [7u64, 7, 7, 7, 7];
        let segs = segment(&keys, 1.0);
        assert!(segs.iter().all(|r| r.len() <= 2), "{segs:?}");
    }

    /// Checks that each segment really admits a line within eps through
    /// its first point: the cone at the end must be non-empty.
    fn feasible(keys: &[u64], r: &Range<usize>, eps: f64) -> bool {
        let x0 = keys[r.start];
        let (mut lo, mut hi) = (f64::NEG_INFINITY, f64::INFINITY);
        for j in r.clone().skip(1) {
            let dy = (j - r.start) as f64;
            if keys[j] == x0 {
                if dy > eps {
                    return false;
                }
                continue;
            }
            let dx = (keys[j] - x0) as f64;
            lo = lo.max((dy - eps) / dx);
            hi = hi.min((dy + eps) / dx);
        }
        lo <= hi
    }

    proptest! {
        #[test]
        fn segments_partition_and_respect_eps(
            mut keys in proptest::collection::vec(0u64..1_000_000, 1..400),
            eps in 0.0f64..8.0,
        ) {
            keys.sort_unstable();
            let segs = segment(&keys, eps);
            prop_assert_eq!(segs.first().map(|r| r.start), Some(0));
            prop_assert_eq!(segs.last().map(|r| r.end), Some(keys.len()));
            for w in segs.windows(2) {
                prop_assert_eq!(w[0].end, w[1].start);
            }
            for r in &segs {
                prop_assert!(!r.is_empty());
                prop_assert!(feasible(&keys, r, eps), "segment {:?} infeasible", r);
            }
        }
    }
}
