//! Range-conscious split (paper §5.3): where to cut an overfull leaf, as a
//! pure function of its entries.
//!
//! Before cutting, the leaf is collected with normal GC and the hidden
//! parts of partly overwritten entries are trimmed away (the split copies
//! every entry anyway), so the entries are disjoint. Preferred cut points
//! are the left bounds of the segments of the union of the leaf's ranges:
//! no entry crosses them, so the split divides no range; among them the one that best balances entry
//! counts wins. If the union is a single segment, the cut is one of the
//! two medians of all range boundaries that is neither the smallest nor
//! the largest (the smaller if both qualify); ranges crossing it are
//! divided. A side that still overflows is cut again, which always
//! terminates because every cut strictly shrinks a side's span.

use crate::entry::Entry;
use crate::gc;
use crate::range::BlockRange;
use crate::value::RangeValue;

/// A leaf-to-be: its anchor (lowest block of its space) and its entries.
#[derive(Debug, Clone)]
pub struct Piece<V> {
    pub anchor: u64,
    pub entries: Vec<Entry<V>>,
}

/// The outcome of [`settle`].
#[derive(Debug, Clone)]
pub struct Settled<V> {
    /// One or more pieces in key order; the first keeps the input's anchor.
    pub pieces: Vec<Piece<V>>,
    /// Cuts made.
    pub cuts: usize,
    /// Cuts that divided at least one range.
    pub dividing_cuts: usize,
}

/// A cut point `p` (left side `< p`, right side `>= p`) and whether it
/// divides a range. `None` if the entries cannot be cut (fewer than two
/// distinct boundaries inside their span).
pub fn choose_cut<V: RangeValue>(entries: &[Entry<V>]) -> Option<(u64, bool)> {
    let mut sorted: Vec<BlockRange> = entries.iter().map(|e| e.range).collect();
    sorted.sort_unstable_by_key(|r| r.l());
    // Segments of the union (overlap only: adjacent ranges are a valid cut),
    // with the number of entries that start in each.
    let mut segs: Vec<(u64, u64, usize)> = Vec::new();
    for r in &sorted {
        match segs.last_mut() {
            Some(s) if r.l() <= s.1 => {
                s.1 = s.1.max(r.r());
                s.2 += 1;
            }
            _ => segs.push((r.l(), r.r(), 1)),
        }
    }
    let n = sorted.len();
    let mut left = 0usize;
    let mut best: Option<(usize, u64)> = None;
    for w in segs.windows(2) {
        left += w[0].2;
        let imbalance = left.abs_diff(n - left);
        if best.is_none_or(|(b, _)| imbalance < b) {
            best = Some((imbalance, w[1].0));
        }
    }
    if let Some((_, p)) = best {
        return Some((p, false));
    }
    // One segment: the median boundaries.
    let mut bounds: Vec<u64> = Vec::with_capacity(2 * sorted.len());
    for r in &sorted {
        bounds.push(r.l());
        if let Some(after) = r.r().checked_add(1) {
            bounds.push(after);
        }
    }
    bounds.sort_unstable();
    bounds.dedup();
    if bounds.len() < 3 {
        return None;
    }
    let m = bounds.len();
    let (lo, hi) = (bounds[0], bounds[m - 1]);
    let p = [bounds[(m - 1) / 2], bounds[m / 2]]
        .into_iter()
        .find(|&p| p != lo && p != hi)?;
    let divides = entries.iter().any(|e| e.range.l() < p && p <= e.range.r());
    Some((p, divides))
}

/// Collects `entries` (oldest first) of a leaf anchored at `anchor` with
/// normal GC and, if they still do not fit, trims hidden parts and cuts
/// until every piece holds at most `cap` entries. Pieces of collected,
/// trimmed entries need no further collection, so cutting again is cheap.
pub fn settle<V: RangeValue>(
    mut entries: Vec<Entry<V>>,
    anchor: u64,
    cap: usize,
    sc: &mut gc::Scratch,
) -> Settled<V> {
    let mut out = Settled {
        pieces: Vec::new(),
        cuts: 0,
        dividing_cuts: 0,
    };
    gc::normal_with(&mut entries, sc);
    if entries.len() > cap {
        // The leaf is reorganised anyway: drop the hidden parts of partly
        // overwritten entries so cut points between runs appear.
        gc::trim_hidden(&mut entries, sc);
    }
    cut_into(entries, anchor, cap, &mut out);
    out
}

fn cut_into<V: RangeValue>(entries: Vec<Entry<V>>, anchor: u64, cap: usize, out: &mut Settled<V>) {
    if entries.len() <= cap {
        out.pieces.push(Piece { anchor, entries });
        return;
    }
    let Some((p, divides)) = choose_cut(&entries) else {
        // Unreachable after normal GC (two surviving entries always leave
        // three distinct boundaries); keep the data rather than lose it.
        out.pieces.push(Piece { anchor, entries });
        return;
    };
    out.cuts += 1;
    out.dividing_cuts += usize::from(divides);
    let mut left = Vec::with_capacity(entries.len());
    let mut right = Vec::with_capacity(entries.len());
    for e in &entries {
        let (l, r) = (e.range.l(), e.range.r());
        if r < p {
            left.push(*e);
        } else if l >= p {
            right.push(*e);
        } else {
            left.push(e.part(BlockRange::ordered(l, p - 1)));
            right.push(e.part(BlockRange::ordered(p, r)));
        }
    }
    cut_into(left, anchor, cap, out);
    cut_into(right, p, cap, out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::PhysicalRun;

    fn e(l: u64, h: u64) -> Entry<PhysicalRun> {
        Entry::new(
            BlockRange::new(l, h).unwrap(),
            PhysicalRun::new(0, l).unwrap(),
        )
    }

    #[test]
    fn prefers_a_cut_that_divides_nothing() {
        // Fig. 11: candidates 3, 7, 12; 7 balances three and three.
        let v = vec![e(1, 2), e(3, 6), e(4, 5), e(7, 9), e(8, 10), e(12, 13)];
        assert_eq!(choose_cut(&v), Some((7, false)));
    }

    #[test]
    fn falls_back_to_a_median_boundary() {
        let v = vec![e(1, 10), e(2, 3), e(5, 8)];
        // Boundaries 1 2 4 5 9 11: medians 4 and 5; 4 is taken.
        assert_eq!(choose_cut(&v), Some((4, true)));
    }

    #[test]
    fn settle_bounds_every_piece() {
        // Nested ranges, the hard case for a median cut, with runs that
        // do not continue one another (so trimming cannot join them).
        let v: Vec<_> = (0..20)
            .map(|i| {
                Entry::new(
                    BlockRange::new(i, 100 - i).unwrap(),
                    PhysicalRun::new(0, i * 1000).unwrap(),
                )
            })
            .collect();
        let s = settle(v.clone(), 0, 8, &mut gc::Scratch::default());
        assert!(s.pieces.len() >= 2);
        assert!(s.pieces.iter().all(|p| p.entries.len() <= 8));
        for w in s.pieces.windows(2) {
            assert!(w[0].anchor < w[1].anchor);
            assert!(w[0].entries.iter().all(|e| e.range.r() < w[1].anchor));
        }
        assert_eq!(s.pieces[0].anchor, 0);
    }
}
