//! Range-conscious split (paper §5.3): where to cut an overfull leaf, as a
//! pure function of its entries.
//!
//! The leaf is first collected with normal GC. The preferred cut points
//! are the left bounds of the segments of the union of the surviving
//! ranges (the NonOverlap candidates): no entry crosses them, so the cut
//! divides no range, and each side keeps its entries in log order, overlaps
//! included. Among them the one that best balances entry counts wins; a
//! side still over the limit is cut again. Unlike the paper, a candidate
//! whose smaller side would hold less than a quarter of the entries is
//! refused: such cuts leave near-empty leaves behind (7% more leaves on the
//! synthetic stream) for little gain in undivided ranges.
//!
//! A leaf filled from left to right, as a sequential stream or a volume
//! written in order fills it, is split differently: when its two newest
//! entries each start past every entry older than them, the newest alone
//! starts the new leaf and the old one keeps the rest ([`settle_append`]).
//! A balanced cut would leave the old leaf half full for good, since such
//! a stream does not come back to it; B-trees split the rightmost leaf of
//! an ascending insert stream the same way.
//!
//! When no candidate qualifies (typically the union is one segment) the
//! paper falls back to a median cut, and the ranges crossing it are
//! divided and stored in both leaves. Here the fallback first trims every
//! entry to its visible parts, which makes the entries disjoint and
//! ascending, so a cut between two of them never stores one range twice.
//! A written range is still divided when its visible data lies on both
//! sides of the cut (a newer write punched a hole in it, and the cut falls
//! in the hole): its pieces then land in two leaves. Among the cuts into
//! the fewest pieces the limit allows, the fallback takes the one that
//! divides the fewest written ranges, then the most balanced, with no
//! piece under half an equal share. A cut that only passes through the
//! hidden part of a range (its visible data all on one side) is counted
//! apart, as straddling: the range as written spans the cut, but it is
//! stored in one leaf. Every piece holds at most the limit, so no leaf
//! overflows however its ranges nest.

use smallvec::SmallVec;

use crate::entry::{Entry, EntryBuf};
use crate::gc;
use crate::value::RangeValue;

/// A leaf-to-be: its anchor (lowest block of its space) and where its
/// entries sit in [`Settled::entries`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub anchor: u64,
    start: usize,
    end: usize,
}

/// The outcome of [`settle`].
#[derive(Debug, Clone)]
pub struct Settled<V> {
    /// Every piece's entries, piece after piece.
    entries: EntryBuf<V>,
    /// One or more pieces in key order; the first keeps the input's anchor.
    pub pieces: SmallVec<[Piece; 4]>,
    /// Cuts made.
    pub cuts: usize,
    /// Cuts that left the visible data of a written range in two pieces.
    pub dividing_cuts: usize,
    /// Cuts that fell inside a range as written still holding visible
    /// data, whether or not its visible data lies on both sides.
    pub straddling_cuts: usize,
}

impl<V: RangeValue> Settled<V> {
    /// The entries of piece `i`, in log order.
    pub fn piece(&self, i: usize) -> &[Entry<V>] {
        let p = self.pieces[i];
        &self.entries[p.start..p.end]
    }

    fn push_where(&mut self, anchor: u64, entries: &[Entry<V>], keep: impl Fn(&Entry<V>) -> bool) {
        let start = self.entries.len();
        for e in entries.iter().filter(|e| keep(e)) {
            self.entries.push(*e);
        }
        self.pieces.push(Piece {
            anchor,
            start,
            end: self.entries.len(),
        });
    }

    fn push(&mut self, anchor: u64, entries: &[Entry<V>]) {
        let start = self.entries.len();
        self.entries.extend_from_slice(entries);
        self.pieces.push(Piece {
            anchor,
            start,
            end: self.entries.len(),
        });
    }
}

/// The best NonOverlap cut of `entries`: the segment start `p` of the
/// union of their ranges that best balances the entries below `p` against
/// those from `p` on, if the smaller side holds at least a quarter.
/// Returns `p` and how many entries lie below it.
pub fn choose_cut<V: RangeValue>(
    entries: &[Entry<V>],
    order: &mut Vec<(u64, u64)>,
) -> Option<(u64, usize)> {
    order.clear();
    order.extend(entries.iter().map(|e| (e.range.l(), e.range.r())));
    if !order.is_sorted() {
        order.sort_unstable();
    }
    let n = order.len();
    let mut reach = order.first()?.1;
    let mut best: Option<(usize, u64, usize)> = None;
    for (i, &(l, r)) in order.iter().enumerate().skip(1) {
        if l > reach {
            // `l` starts a new segment; the `i` entries before it end below it.
            let imbalance = i.abs_diff(n - i);
            if best.is_none_or(|(b, _, _)| imbalance < b) {
                best = Some((imbalance, l, i));
            }
        }
        reach = reach.max(r);
    }
    let (imbalance, p, below) = best?;
    // Smaller side = (n - imbalance) / 2 >= n / 4.
    (2 * (n - imbalance) >= n).then_some((p, below))
}

impl<V> Settled<V> {
    /// No pieces yet. Callers keep one on their stack and [`settle`] into
    /// it: at about a kilobyte inline, moving it out of a return costs
    /// as much as cutting a small leaf.
    pub fn new() -> Self {
        Self {
            entries: EntryBuf::new(),
            pieces: SmallVec::new(),
            cuts: 0,
            dividing_cuts: 0,
            straddling_cuts: 0,
        }
    }

    /// Back to no pieces, keeping the buffers.
    fn clear(&mut self) {
        self.entries.clear();
        self.pieces.clear();
        self.cuts = 0;
        self.dividing_cuts = 0;
        self.straddling_cuts = 0;
    }
}

impl<V> Default for Settled<V> {
    fn default() -> Self {
        Self::new()
    }
}

/// If the two newest of `entries` (oldest first, collected, of the leaf
/// anchored at `anchor`) each start past every older entry, and the older
/// ones fit a leaf of `capacity`, cuts off the newest as a piece of its
/// own, fills `out` and returns true; otherwise leaves `out` alone and
/// returns false. (A collection can leave more entries than the leaf held:
/// a delete inside a range splits it in two.)
pub fn settle_append<V: RangeValue>(
    entries: &[Entry<V>],
    anchor: u64,
    capacity: usize,
    out: &mut Settled<V>,
) -> bool {
    let n = entries.len();
    if n < 3 || n - 1 > capacity {
        return false;
    }
    let (newest, second) = (entries[n - 1].range, entries[n - 2].range);
    let reach = entries[..n - 2]
        .iter()
        .map(|e| e.range.r())
        .max()
        .unwrap_or(0);
    if second.l() <= reach || newest.l() <= reach.max(second.r()) {
        return false;
    }
    out.clear();
    out.push(anchor, &entries[..n - 1]);
    out.push(newest.l(), &entries[n - 1..]);
    out.cuts = 1;
    true
}

/// Cuts `entries` (oldest first, already collected with normal GC, of the
/// leaf anchored at `anchor`) into pieces of at most `limit` entries each,
/// replacing what `out` held.
pub fn settle<V: RangeValue>(
    entries: &[Entry<V>],
    anchor: u64,
    limit: usize,
    sc: &mut gc::Scratch,
    out: &mut Settled<V>,
) {
    out.clear();
    cut_into(entries, anchor, limit.max(1), out, sc);
}

fn cut_into<V: RangeValue>(
    entries: &[Entry<V>],
    anchor: u64,
    limit: usize,
    out: &mut Settled<V>,
    sc: &mut gc::Scratch,
) {
    if entries.len() <= limit {
        out.push(anchor, entries);
        return;
    }
    if let Some((p, below)) = choose_cut(entries, &mut sc.spans) {
        out.cuts += 1;
        // No entry crosses `p`: each lies wholly on one side. A sequential
        // writer's entries are ascending, and the sides are slices.
        if entries.is_sorted_by_key(|e| e.range.l()) {
            let (left, right) = entries.split_at(below);
            cut_into(left, anchor, limit, out, sc);
            cut_into(right, p, limit, out, sc);
        } else if below <= limit && entries.len() - below <= limit {
            // Both sides are final pieces: filter straight into them.
            out.push_where(anchor, entries, |e| e.range.r() < p);
            out.push_where(p, entries, |e| e.range.l() >= p);
        } else {
            let (left, right): (EntryBuf<V>, EntryBuf<V>) =
                entries.iter().copied().partition(|e| e.range.r() < p);
            cut_into(&left, anchor, limit, out, sc);
            cut_into(&right, p, limit, out, sc);
        }
        return;
    }
    cut_visible(entries, anchor, limit, out, sc);
}

/// The fallback when no NonOverlap candidate qualifies: `entries` trimmed
/// to their visible parts (disjoint, ascending), cut at boundaries between
/// those parts into the fewest pieces `limit` allows. Among the ways to do
/// so it takes the one that splits the visible data of the fewest written
/// ranges between two leaves, then the most balanced; no piece holds less
/// than half an equal share, so the cut leaves no near-empty leaf.
fn cut_visible<V: RangeValue>(
    entries: &[Entry<V>],
    anchor: u64,
    limit: usize,
    out: &mut Settled<V>,
    sc: &mut gc::Scratch,
) {
    let mut visible = EntryBuf::from_slice(entries);
    gc::trim_hidden(&mut visible, sc);
    let m = visible.len();
    let shares = m.div_ceil(limit).max(1);
    if shares == 1 {
        out.push(anchor, &visible);
        return;
    }
    spread(&visible, sc);
    let bounds = choose_bounds(&sc.spread, m, shares, limit, &mut sc.plan);
    let mut start = 0;
    for &b in bounds.iter().chain(std::iter::once(&m)) {
        let a = if start == 0 {
            anchor
        } else {
            visible[start].range.l()
        };
        if start > 0 {
            out.cuts += 1;
            if sc.spread[start] > 0 {
                out.dividing_cuts += 1;
            }
            if entries.iter().any(|x| x.range.l() < a && a <= x.range.r()) {
                out.straddling_cuts += 1;
            }
        }
        out.push(a, &visible[start..b]);
        start = b;
    }
}

/// Fills `sc.spread` with, for each boundary `j` in `1..m` between the
/// `m` visible parts `j - 1` and `j`, how many written ranges still show
/// data on both sides of it (from `sc.extents`, which [`gc::trim_hidden`]
/// filled): the ranges a cut there would leave in two leaves.
fn spread<V: RangeValue>(visible: &[Entry<V>], sc: &mut gc::Scratch) {
    let m = visible.len();
    sc.diff.clear();
    sc.diff.resize(m + 1, 0);
    let part_of = |b: u64| visible.partition_point(|p| p.range.r() < b);
    for &(first, last) in &sc.extents {
        let (i, k) = (part_of(first), part_of(last));
        if k > i {
            sc.diff[i + 1] += 1;
            sc.diff[k + 1] -= 1;
        }
    }
    sc.spread.clear();
    let mut run = 0i32;
    for d in &sc.diff[..m] {
        run += d;
        sc.spread.push(run.max(0) as u32);
    }
}

/// The inner boundaries (ascending, in `1..m`) that cut `m` parts into
/// `shares` groups of at most `limit` and at least half an equal share
/// each, fewest dividing boundaries first (`spread[j] > 0`), then least
/// imbalance. Equal shares always qualify, so there is an answer.
fn choose_bounds<'a>(
    spread: &[u32],
    m: usize,
    shares: usize,
    limit: usize,
    plan: &'a mut gc::CutPlan,
) -> &'a [usize] {
    let lo = (m / (2 * shares)).max(1);
    let imbalance = |size: usize| (size * shares).abs_diff(m) as u64;
    // Any number of dividing cuts outweighs the worst total imbalance.
    let weight = (m * shares * shares) as u64 + 1;
    let cut = |t: usize| if spread[t] > 0 { weight } else { 0 };
    plan.bounds.clear();
    if shares == 2 {
        // The common case, one cut: scan the boundaries that qualify.
        let best = (m.saturating_sub(limit).max(lo)..=limit.min(m - lo))
            .min_by_key(|&t| cut(t) + imbalance(t) + imbalance(m - t));
        plan.bounds.push(best.unwrap_or(m / 2));
        return &plan.bounds;
    }
    let width = m + 1;
    plan.cost.clear();
    plan.cost.resize((shares + 1) * width, u64::MAX);
    plan.from.clear();
    plan.from.resize((shares + 1) * width, 0);
    plan.cost[0] = 0;
    for g in 1..=shares {
        // Group `g` ends at `i`, leaving room for the groups after it.
        let ends = (g * lo).max(m.saturating_sub((shares - g) * limit))
            ..=(g * limit).min(m - (shares - g) * lo);
        for i in ends {
            for size in lo..=limit.min(i) {
                let t = i - size;
                let before = plan.cost[(g - 1) * width + t];
                if before == u64::MAX || (t == 0) != (g == 1) {
                    continue;
                }
                let c = before + if t > 0 { cut(t) } else { 0 } + imbalance(size);
                if c < plan.cost[g * width + i] {
                    plan.cost[g * width + i] = c;
                    plan.from[g * width + i] = t;
                }
            }
        }
    }
    let mut i = m;
    for g in (2..=shares).rev() {
        i = plan.from[g * width + i];
        plan.bounds.push(i);
    }
    plan.bounds.reverse();
    &plan.bounds
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::range::BlockRange;
    use crate::value::PhysicalRun;
    use proptest::prelude::*;

    fn e(l: u64, h: u64) -> Entry<PhysicalRun> {
        Entry::new(
            BlockRange::new(l, h).unwrap(),
            PhysicalRun::new(0, l * 1000 + h).unwrap(),
        )
    }

    #[test]
    fn prefers_a_cut_that_divides_nothing() {
        // Fig. 11: candidates 3, 7, 12; 7 balances three and three.
        let v = [e(1, 2), e(3, 6), e(4, 5), e(7, 9), e(8, 10), e(12, 13)];
        assert_eq!(choose_cut(&v, &mut Vec::new()), Some((7, 3)));
        let mut s = Settled::new();
        settle(&v, 0, 4, &mut gc::Scratch::default(), &mut s);
        assert_eq!((s.cuts, s.dividing_cuts), (1, 0));
        assert_eq!(
            s.pieces.iter().map(|p| p.anchor).collect::<Vec<_>>(),
            [0, 7]
        );
        // Log order and overlaps survive on each side.
        assert_eq!(s.piece(0), &v[..3]);
        assert_eq!(s.piece(1), &v[3..]);
    }

    #[test]
    fn an_unsorted_leaf_keeps_log_order_on_both_sides() {
        // A random writer's log: the sides are gathered by filtering, and
        // the same `Settled` is reused across calls.
        let v = [e(8, 10), e(1, 2), e(12, 13), e(4, 5), e(3, 6), e(7, 9)];
        let mut s = Settled::new();
        settle(&[e(0, 40)], 0, 4, &mut gc::Scratch::default(), &mut s);
        settle(&v, 0, 4, &mut gc::Scratch::default(), &mut s);
        assert_eq!((s.cuts, s.dividing_cuts), (1, 0));
        assert_eq!(
            s.pieces.iter().map(|p| p.anchor).collect::<Vec<_>>(),
            [0, 7]
        );
        assert_eq!(s.piece(0), &[v[1], v[3], v[4]]);
        assert_eq!(s.piece(1), &[v[0], v[2], v[5]]);
    }

    #[test]
    fn a_leaf_filled_left_to_right_keeps_all_but_its_newest_entry() {
        let v: EntryBuf<PhysicalRun> = (0..9).map(|i| e(10 * i, 10 * i + 5)).collect();
        let mut s = Settled::new();
        assert!(settle_append(&v, 0, 8, &mut s));
        assert_eq!((s.cuts, s.dividing_cuts), (1, 0));
        assert_eq!(
            s.pieces.iter().map(|p| p.anchor).collect::<Vec<_>>(),
            [0, 80]
        );
        assert_eq!(s.piece(0), &v[..8]);
        assert_eq!(s.piece(1), &v[8..]);
        // One write back into the leaf, or a newest entry that does not
        // clear the one before it, is not a left-to-right fill.
        let mut back = v.clone();
        back.swap(7, 8);
        assert!(!settle_append(&back, 0, 8, &mut s));
        let mut touching = v.clone();
        touching[8] = e(73, 90);
        assert!(!settle_append(&touching, 0, 8, &mut s));
        let mut over = v.clone();
        over[7] = e(0, 75);
        assert!(!settle_append(&over, 0, 8, &mut s));
        assert!(!settle_append(&v[..2], 0, 8, &mut s));
        // Nor when the older entries would overflow the leaf.
        assert!(!settle_append(&v, 0, 7, &mut s));
    }

    #[test]
    fn refuses_a_candidate_that_leaves_a_side_nearly_empty() {
        // Segments [1, 1] and [3, 20]: the only candidate, 3, would leave
        // one entry of six on the left. The fallback trims [3, 20] around
        // the newer ranges and cuts the seven visible pieces in two.
        let v = [e(1, 1), e(3, 20), e(4, 5), e(6, 7), e(8, 9), e(10, 11)];
        assert_eq!(choose_cut(&v, &mut Vec::new()), None);
        let mut s = Settled::new();
        settle(&v, 0, 4, &mut gc::Scratch::default(), &mut s);
        assert_eq!(
            s.pieces.iter().map(|p| p.anchor).collect::<Vec<_>>(),
            [0, 6]
        );
        assert_eq!((s.cuts, s.dividing_cuts), (1, 1));
    }

    #[test]
    fn the_fallback_cuts_where_no_range_shows_data_on_both_sides() {
        // One segment, so no NonOverlap candidate. Newer writes hide the
        // left half of [0, 99] entirely and punch three holes in its right
        // half; its visible data starts at 50. Equal shares would cut at
        // 60, leaving its data in both leaves; 50 leaves it on the right.
        let mut v = vec![e(0, 99)];
        v.extend((0..5).map(|i| e(10 * i, 10 * i + 9)));
        v.extend([e(60, 64), e(70, 74), e(80, 84)]);
        let mut s = Settled::new();
        settle(&v, 0, 8, &mut gc::Scratch::default(), &mut s);
        assert_eq!(
            s.pieces.iter().map(|p| p.anchor).collect::<Vec<_>>(),
            [0, 50]
        );
        // The cut falls inside [0, 99] as written, but divides none of the
        // visible data: [0, 99] is stored in the right leaf alone.
        assert_eq!((s.cuts, s.dividing_cuts, s.straddling_cuts), (1, 0, 1));
        assert!(s.piece(0).iter().all(|x| x.range.r() < 50));
        assert_eq!(
            s.piece(1)
                .iter()
                .filter(|x| x.value == v[0].value.divide(v[0].range, x.range))
                .count(),
            4
        );
    }

    #[test]
    fn nested_ranges_are_trimmed_and_cut_into_equal_shares() {
        // One segment: no NonOverlap candidate. Each newer range nests in
        // the older ones, so trimming leaves 2 * 20 - 1 visible pieces.
        let v: EntryBuf<PhysicalRun> = (0..20).map(|i| e(i, 100 - i)).collect();
        let mut s = Settled::new();
        settle(&v, 0, 8, &mut gc::Scratch::default(), &mut s);
        assert_eq!(s.pieces.len(), 5);
        assert!(s.pieces.iter().all(|p| p.end - p.start <= 8));
        assert!(s.dividing_cuts > 0 && s.dividing_cuts == s.cuts);
        assert_eq!(s.pieces[0].anchor, 0);
    }

    /// The newest value of block `b` among `entries` (oldest first).
    fn newest(entries: &[Entry<PhysicalRun>], b: u64) -> Option<u64> {
        let e = entries.iter().rev().find(|e| e.range.contains(b))?;
        (!e.value.is_tombstone()).then(|| e.value.divide(e.range, BlockRange::block(b)).block())
    }

    /// The cost [`choose_bounds`] minimises, for `bounds` (inner cuts) of
    /// `m` parts into `bounds.len() + 1` groups; `None` if a group's size
    /// is out of bounds.
    fn plan_cost(spread: &[u32], m: usize, limit: usize, bounds: &[usize]) -> Option<u64> {
        let shares = bounds.len() + 1;
        let lo = (m / (2 * shares)).max(1);
        let weight = (m * shares * shares) as u64 + 1;
        let mut cost = 0;
        let mut start = 0;
        for &b in bounds.iter().chain(std::iter::once(&m)) {
            let size = b.checked_sub(start)?;
            if size < lo || size > limit {
                return None;
            }
            cost += (size * shares).abs_diff(m) as u64;
            if start > 0 && spread[start] > 0 {
                cost += weight;
            }
            start = b;
        }
        Some(cost)
    }

    proptest! {
        /// The fallback's choice of boundaries is the cheapest: compared
        /// with every way to cut `m` parts into the same number of groups.
        #[test]
        fn choose_bounds_finds_the_cheapest_cuts(
            spread in proptest::collection::vec(0u32..2, 2..26),
            limit in 2usize..12,
        ) {
            let m = spread.len();
            let shares = m.div_ceil(limit);
            prop_assume!((2..=4).contains(&shares));
            let mut plan = gc::CutPlan::default();
            let got = choose_bounds(&spread, m, shares, limit, &mut plan).to_vec();
            prop_assert_eq!(got.len(), shares - 1);
            let cost = plan_cost(&spread, m, limit, &got);
            prop_assert!(cost.is_some(), "{:?}", got);
            let mut best = u64::MAX;
            let mut bounds = vec![0; shares - 1];
            // Every increasing choice of shares - 1 boundaries in 1..m.
            fn each(k: usize, from: usize, m: usize, b: &mut Vec<usize>, f: &mut dyn FnMut(&[usize])) {
                if k == b.len() {
                    f(b);
                    return;
                }
                for t in from..m {
                    b[k] = t;
                    each(k + 1, t + 1, m, b, f);
                }
            }
            each(0, 1, m, &mut bounds, &mut |b| {
                if let Some(c) = plan_cost(&spread, m, limit, b) {
                    best = best.min(c);
                }
            });
            prop_assert_eq!(cost, Some(best));
        }

        /// Settling keeps every block's newest value, tiles the leaf's
        /// space with increasing anchors, and bounds every piece.
        #[test]
        fn settle_keeps_every_block(
            ops in proptest::collection::vec((0u64..60, 0u64..12, any::<bool>()), 1..40),
            limit in 2usize..12,
        ) {
            let v: EntryBuf<PhysicalRun> = ops
                .iter()
                .enumerate()
                .map(|(i, &(l, len, tomb))| {
                    let r = BlockRange::new(l, l + len).unwrap();
                    let val = if tomb && i % 3 == 0 {
                        PhysicalRun::TOMBSTONE
                    } else {
                        PhysicalRun::new(1, 10_000 * i as u64).unwrap()
                    };
                    Entry::new(r, val)
                })
                .collect();
            let mut collected = v.clone();
            let mut sc = gc::Scratch::default();
            gc::normal_with(&mut collected, &mut sc);
            let mut s = Settled::new();
            settle(&collected, 0, limit, &mut sc, &mut s);
            prop_assert_eq!(s.pieces[0].anchor, 0);
            for (i, p) in s.pieces.iter().enumerate() {
                prop_assert!(p.end - p.start <= limit);
                let upper = s.pieces.get(i + 1).map_or(u64::MAX, |n| n.anchor - 1);
                prop_assert!(p.anchor <= upper);
                for x in s.piece(i) {
                    prop_assert!(x.range.l() >= p.anchor && x.range.r() <= upper);
                    prop_assert!(!x.value.is_tombstone());
                }
            }
            for b in 0..80 {
                let i = s.pieces.iter().rposition(|p| p.anchor <= b).unwrap();
                prop_assert_eq!(newest(s.piece(i), b), newest(&v, b), "block {}", b);
            }
            // A cut divides when one written range (of those settled) is
            // the newest on blocks both below and above it.
            let owner = |b: u64| {
                collected
                    .iter()
                    .rposition(|x| x.range.contains(b))
                    .filter(|&i| !collected[i].value.is_tombstone())
            };
            let dividing = s.pieces[1..]
                .iter()
                .filter(|p| {
                    (0..collected.len()).any(|i| {
                        (0..p.anchor).any(|b| owner(b) == Some(i))
                            && (p.anchor..80).any(|b| owner(b) == Some(i))
                    })
                })
                .count();
            prop_assert_eq!(s.dividing_cuts, dividing);
            prop_assert!(s.straddling_cuts >= s.dividing_cuts);
        }
    }
}
