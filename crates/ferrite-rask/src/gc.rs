//! Two-stage garbage collection of a log-structured leaf (paper §5.2).
//!
//! Both stages are pure functions over a leaf's entries (oldest first) and
//! keep the survivors' relative order, which is what gives newer entries
//! precedence. Invariant after either stage: every block's newest entry is
//! unchanged, so lookups answer the same before and after.
//!
//! - *Lightweight*: one backward pass with the LT map (left bound → largest
//!   right bound seen among newer entries); an entry is dropped if a newer
//!   one with the same left bound reaches at least as far. O(n).
//! - *Normal*: one backward pass keeping the NonOverlap list (the union of
//!   newer ranges, disjoint and ordered); an entry inside one of its
//!   segments is covered by newer data and dropped. Tombstones are removed
//!   here: their ranges go to the deleted list, older entries are trimmed by
//!   it (a trimmed entry may become several, values divided), and then the
//!   tombstone has nothing left to hide.

use crate::entry::{Entry, EntryBuf};
use crate::range::BlockRange;
use crate::value::RangeValue;

/// Reusable buffers for the collectors. Entry buffers live on the stack
/// ([`EntryBuf`]), so a collection of a leaf of up to 16 entries allocates
/// nothing.
#[derive(Debug, Default)]
pub struct Scratch {
    lt_keys: Vec<u64>,
    lt_vals: Vec<u64>,
    /// The collection that last wrote each LT-map slot: a slot stamped
    /// with an older one is empty, so the map is never cleared.
    lt_stamp: Vec<u32>,
    lt_now: u32,
    keep: Vec<bool>,
    pub(crate) cover: NonOverlap,
    dead: NonOverlap,
    order: Vec<(u64, usize)>,
    pub(crate) pieces: Vec<BlockRange>,
    /// Sorted (left, right) bounds for choosing a split's cut.
    pub spans: Vec<(u64, u64)>,
    /// First and last visible block of each entry [`trim_hidden`] kept.
    pub(crate) extents: Vec<(u64, u64)>,
    /// Per boundary between visible parts: written ranges on both sides
    /// (and its difference array).
    pub(crate) spread: Vec<u32>,
    pub(crate) diff: Vec<i32>,
    pub(crate) plan: CutPlan,
}

/// Working space of the fallback cut's choice of boundaries.
#[derive(Debug, Default)]
pub struct CutPlan {
    pub(crate) cost: Vec<u64>,
    pub(crate) from: Vec<usize>,
    pub(crate) bounds: Vec<usize>,
}

/// Lightweight GC; returns how many entries it removed.
#[cfg(test)]
pub fn lightweight<V: RangeValue>(entries: &mut EntryBuf<V>) -> usize {
    lightweight_with(entries, &mut Scratch::default())
}

/// [`lightweight`] with caller-provided buffers.
pub fn lightweight_with<V: RangeValue>(entries: &mut EntryBuf<V>, sc: &mut Scratch) -> usize {
    let n = entries.len();
    let size = (2 * n.max(4)).next_power_of_two();
    let mask = size - 1;
    if sc.lt_keys.len() < size {
        sc.lt_keys.resize(size, 0);
        sc.lt_vals.resize(size, 0);
        sc.lt_stamp.resize(size, 0);
    }
    sc.lt_now = sc.lt_now.wrapping_add(1);
    if sc.lt_now == 0 {
        // Stamps wrapped: empty every slot once.
        sc.lt_stamp.fill(0);
        sc.lt_now = 1;
    }
    let now = sc.lt_now;
    sc.keep.clear();
    sc.keep.resize(n, true);
    for (i, e) in entries.iter().enumerate().rev() {
        let key = e.range.l();
        // Open addressing with linear probing: the O(1) LT map.
        let mut slot = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize & mask;
        while sc.lt_stamp[slot] == now && sc.lt_keys[slot] != key {
            slot = (slot + 1) & mask;
        }
        if sc.lt_stamp[slot] != now {
            sc.lt_stamp[slot] = now;
            sc.lt_keys[slot] = key;
            sc.lt_vals[slot] = e.range.r();
        } else if e.range.r() <= sc.lt_vals[slot] {
            sc.keep[i] = false;
        } else {
            sc.lt_vals[slot] = e.range.r();
        }
    }
    retain_kept(entries, &sc.keep);
    n - entries.len()
}

/// Normal GC; returns how many entries it removed (trimmed pieces count as
/// added, so the result can be negative if a tombstone punched holes).
#[cfg(test)]
pub fn normal<V: RangeValue>(entries: &mut EntryBuf<V>) -> isize {
    normal_with(entries, &mut Scratch::default())
}

/// [`normal`] with caller-provided buffers.
pub fn normal_with<V: RangeValue>(entries: &mut EntryBuf<V>, sc: &mut Scratch) -> isize {
    if disjoint_in(entries, &mut sc.order) {
        // Nothing covers anything and nothing is deleted (a growing leaf).
        return 0;
    }
    collect_overlapping(entries, sc)
}

/// Normal GC of entries known not to be [`disjoint_values`].
pub fn collect_overlapping<V: RangeValue>(entries: &mut EntryBuf<V>, sc: &mut Scratch) -> isize {
    let before = entries.len() as isize;
    let cover = &mut sc.cover;
    let dead = &mut sc.dead;
    cover.segs.clear();
    dead.segs.clear();
    if !entries.iter().any(|e| e.value.is_tombstone()) {
        // Without tombstones nothing is trimmed: an entry stays whole or
        // goes, so the survivors are filtered in place.
        let n = entries.len();
        sc.keep.clear();
        sc.keep.resize(n, true);
        for (i, e) in entries.iter().enumerate().rev() {
            sc.keep[i] = cover.add(e.range) != Held::All;
        }
        retain_kept(entries, &sc.keep);
        return before - entries.len() as isize;
    }
    let mut kept_rev = EntryBuf::<V>::new();
    for e in entries.iter().rev() {
        let held = cover.add(e.range);
        if held == Held::All {
            continue;
        }
        if e.value.is_tombstone() {
            dead.add(e.range);
            continue;
        }
        if held == Held::Nothing || dead.segs.is_empty() {
            kept_rev.push(*e);
            continue;
        }
        // Newer tombstones hide parts of this entry: keep only the rest.
        dead.subtract_into(e.range, &mut sc.pieces);
        for piece in sc.pieces.iter().rev() {
            kept_rev.push(e.part(*piece));
        }
    }
    entries.clear();
    entries.extend(kept_rev.iter().rev().copied());
    before - entries.len() as isize
}

/// Cuts every entry down to the parts no newer entry covers and drops
/// tombstones, so the entries become disjoint; leaves them ascending by
/// left bound with continuous neighbours joined. With disjoint entries
/// every boundary between two of them is a cut point that divides no
/// visible run. `sc.extents` receives, for every entry that still shows
/// data, its first and last visible block.
pub fn trim_hidden<V: RangeValue>(entries: &mut EntryBuf<V>, sc: &mut Scratch) {
    sc.extents.clear();
    if disjoint_in(entries, &mut sc.order) {
        sc.extents
            .extend(entries.iter().map(|e| (e.range.l(), e.range.r())));
    } else {
        sc.cover.segs.clear();
        let mut visible = EntryBuf::<V>::new();
        for e in entries.iter().rev() {
            let held = sc.cover.held(e.range);
            if held == Held::All {
                continue;
            }
            if e.value.is_tombstone() {
                sc.cover.add(e.range);
                continue;
            }
            if held == Held::Nothing {
                visible.push(*e);
                sc.extents.push((e.range.l(), e.range.r()));
            } else {
                sc.cover.subtract_into(e.range, &mut sc.pieces);
                visible.extend(sc.pieces.iter().map(|piece| e.part(*piece)));
                if let (Some(first), Some(last)) = (sc.pieces.first(), sc.pieces.last()) {
                    sc.extents.push((first.l(), last.r()));
                }
            }
            sc.cover.add(e.range);
        }
        *entries = visible;
    }
    // Disjoint now, so the log order no longer carries meaning.
    entries.sort_unstable_by_key(|e| e.range.l());
    join_sorted(entries);
}

/// Keeps the entries whose flag in `keep` (one per entry, in order) is set.
fn retain_kept<V: RangeValue>(entries: &mut EntryBuf<V>, keep: &[bool]) {
    let mut flags = keep.iter();
    entries.retain(|_| flags.next().copied().unwrap_or(true));
}

/// True if no two entries overlap and none is a tombstone: then there is
/// nothing for either collector to do.
pub fn disjoint_values<V: RangeValue>(entries: &[Entry<V>], sc: &mut Scratch) -> bool {
    disjoint_in(entries, &mut sc.order)
}

/// [`disjoint_values`], with `order` as sorting space for long logs.
fn disjoint_in<V: RangeValue>(entries: &[Entry<V>], order: &mut Vec<(u64, usize)>) -> bool {
    if entries.iter().any(|e| e.value.is_tombstone()) {
        return false;
    }
    // A sequential writer's leaf is already ascending: no sort needed.
    if entries.windows(2).all(|w| w[0].range.r() < w[1].range.l()) {
        return true;
    }
    if entries.len() <= 32 {
        // A full leaf usually overlaps somewhere: comparing pairs stops
        // at the first overlap, where sorting would always pay in full.
        return entries
            .iter()
            .enumerate()
            .all(|(i, a)| entries[..i].iter().all(|b| !a.range.overlaps(&b.range)));
    }
    order.clear();
    order.extend(entries.iter().enumerate().map(|(i, e)| (e.range.l(), i)));
    order.sort_unstable();
    order
        .windows(2)
        .all(|w| entries[w[0].1].range.r() < entries[w[1].1].range.l())
}

/// Joins entries that are adjacent in block space and continuous in value
/// (`RangeValue::merge`) into one. The entries must be disjoint and
/// ascending. A sequential writer's runs thus collapse into one entry per
/// run instead of one per write (beyond the paper, which joins only at
/// leaf merges).
fn join_sorted<V: RangeValue>(entries: &mut EntryBuf<V>) {
    let mut w = 0usize;
    for i in 0..entries.len() {
        let e = entries[i];
        if w > 0 {
            let prev = entries[w - 1];
            if prev.range.r().checked_add(1) == Some(e.range.l()) {
                if let Some(v) = V::merge(prev.range, &prev.value, e.range, &e.value) {
                    entries[w - 1] =
                        Entry::new(BlockRange::ordered(prev.range.l(), e.range.r()), v);
                    continue;
                }
            }
        }
        entries[w] = e;
        w += 1;
    }
    entries.truncate(w);
}

/// How much of a range a [`NonOverlap`] held when the range was added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    Nothing,
    Part,
    All,
}

/// The union of a set of ranges as disjoint, ordered segments; adjacent
/// segments are joined (`[1, 3]` and `[4, 6]` cover `[1, 6]`).
#[derive(Debug, Default, Clone)]
pub struct NonOverlap {
    segs: Vec<BlockRange>,
}

impl NonOverlap {
    #[cfg(test)]
    pub fn segments(&self) -> &[BlockRange] {
        &self.segs
    }

    /// The first segment for which `before` is false (`before` holds for a
    /// prefix). A leaf's union has a few dozen segments at most: a forward
    /// scan with early exit beats a binary search's dependent loads there.
    fn first(&self, before: impl Fn(&BlockRange) -> bool) -> usize {
        if self.segs.len() <= 32 {
            self.segs
                .iter()
                .position(|s| !before(s))
                .unwrap_or(self.segs.len())
        } else {
            self.segs.partition_point(before)
        }
    }

    /// How much of `r` the union holds.
    pub fn held(&self, r: BlockRange) -> Held {
        let mut i = self.first(|s| s.r() < r.l());
        let mut held = Held::Nothing;
        while let Some(s) = self.segs.get(i) {
            if s.l() > r.r() {
                break;
            }
            if s.covers(&r) {
                return Held::All;
            }
            held = Held::Part;
            i += 1;
        }
        held
    }

    /// Adds `r` to the union, reporting how much of it the union held
    /// before (one search serves the query and the insertion).
    pub fn add(&mut self, r: BlockRange) -> Held {
        // Segments touching or adjacent to r.
        let first = self.first(|s| s.r().saturating_add(1) < r.l());
        let mut last = first;
        let mut held = Held::Nothing;
        while let Some(s) = self.segs.get(last) {
            if s.l() > r.r().saturating_add(1) {
                break;
            }
            if s.covers(&r) {
                return Held::All;
            }
            if s.overlaps(&r) {
                held = Held::Part;
            }
            last += 1;
        }
        if first == last {
            self.segs.insert(first, r);
            return held;
        }
        let l = r.l().min(self.segs[first].l());
        let h = r.r().max(self.segs[last - 1].r());
        self.segs[first] = BlockRange::ordered(l, h);
        self.segs.drain(first + 1..last);
        held
    }

    /// The parts of `r` outside every segment, ascending.
    #[cfg(test)]
    pub fn subtract(&self, r: BlockRange) -> Vec<BlockRange> {
        let mut out = Vec::new();
        self.subtract_into(r, &mut out);
        out
    }

    /// [`NonOverlap::subtract`] into a caller's buffer (cleared first).
    pub fn subtract_into(&self, r: BlockRange, out: &mut Vec<BlockRange>) {
        out.clear();
        let mut at = r.l();
        let mut i = self.first(|s| s.r() < r.l());
        while let Some(s) = self.segs.get(i) {
            if s.l() > r.r() {
                break;
            }
            if s.l() > at {
                out.push(BlockRange::ordered(at, s.l() - 1));
            }
            if s.r() >= r.r() {
                return;
            }
            at = s.r() + 1;
            i += 1;
        }
        out.push(BlockRange::ordered(at, r.r()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::PhysicalRun;
    use smallvec::smallvec;

    fn r(l: u64, h: u64) -> BlockRange {
        BlockRange::new(l, h).unwrap()
    }

    fn e(l: u64, h: u64) -> Entry<PhysicalRun> {
        Entry::new(r(l, h), PhysicalRun::new(0, l * 10).unwrap())
    }

    fn ranges(v: &[Entry<PhysicalRun>]) -> Vec<(u64, u64)> {
        v.iter().map(|e| (e.range.l(), e.range.r())).collect()
    }

    #[test]
    fn lightweight_drops_same_left_bound_covers() {
        // Fig. 10(b): [4, 7] is covered by the newer [4, 9].
        let mut v: EntryBuf<PhysicalRun> = smallvec![e(4, 7), e(1, 2), e(4, 9), e(9, 10), e(4, 5)];
        assert_eq!(lightweight(&mut v), 1);
        assert_eq!(ranges(&v), vec![(1, 2), (4, 9), (9, 10), (4, 5)]);
    }

    #[test]
    fn a_reused_lt_map_forgets_earlier_collections_even_when_stamps_wrap() {
        let mut sc = Scratch::default();
        // Left bounds the next collection shares, with reaches that would
        // wrongly hide its entries if they were remembered.
        let mut first: EntryBuf<PhysicalRun> = smallvec![e(4, 100), e(1, 50), e(9, 90)];
        assert_eq!(lightweight_with(&mut first, &mut sc), 0);
        for now in [7, u32::MAX] {
            sc.lt_now = now;
            let mut v: EntryBuf<PhysicalRun> = smallvec![e(4, 7), e(1, 2), e(9, 10), e(4, 5)];
            let mut fresh = v.clone();
            assert_eq!(lightweight_with(&mut v, &mut sc), 0, "stamp {now}");
            assert_eq!(lightweight(&mut fresh), 0);
            assert_eq!(ranges(&v), ranges(&fresh));
            let mut w: EntryBuf<PhysicalRun> = smallvec![e(4, 7), e(4, 9)];
            assert_eq!(lightweight_with(&mut w, &mut sc), 1, "stamp {now}");
        }
    }

    #[test]
    fn normal_drops_ranges_covered_by_a_union() {
        // Fig. 10(a): [5, 7] is covered by [4, 9] ∪ [9, 10]; [1, 6] by
        // [1, 3] ∪ [4, 10].
        let mut v: EntryBuf<PhysicalRun> = smallvec![e(1, 6), e(5, 7), e(4, 9), e(9, 10), e(1, 3)];
        assert_eq!(normal(&mut v), 2);
        assert_eq!(ranges(&v), vec![(4, 9), (9, 10), (1, 3)]);
    }

    #[test]
    fn normal_trims_by_tombstones_and_drops_them() {
        let t = Entry::new(r(3, 4), PhysicalRun::TOMBSTONE);
        let mut v: EntryBuf<PhysicalRun> = smallvec![e(0, 9), t, e(4, 4)];
        normal(&mut v);
        assert_eq!(ranges(&v), vec![(0, 2), (5, 9), (4, 4)]);
        assert_eq!(v[1].value.block(), 5);
    }

    #[test]
    fn trimming_joins_continuous_runs_of_a_sequential_writer() {
        // Three writes of one sequential stream, stored contiguously, an
        // unrelated write in between, and a newer write over the middle of
        // the first run (which splits it; only continuous pieces rejoin).
        let run =
            |l: u64, h: u64, block: u64| Entry::new(r(l, h), PhysicalRun::new(1, block).unwrap());
        let mut v: EntryBuf<PhysicalRun> = smallvec![
            run(0, 3, 100),
            run(50, 51, 7),
            run(4, 7, 104),
            run(8, 9, 108),
        ];
        trim_hidden(&mut v, &mut Scratch::default());
        assert_eq!(ranges(&v), vec![(0, 9), (50, 51)]);
        assert_eq!(v[0].value.block(), 100);
        let mut v: EntryBuf<PhysicalRun> =
            smallvec![run(0, 3, 100), run(2, 2, 900), run(4, 7, 104)];
        trim_hidden(&mut v, &mut Scratch::default());
        // Ascending now: disjoint entries' log order carries no meaning.
        assert_eq!(ranges(&v), vec![(0, 1), (2, 2), (3, 7)]);
        assert_eq!(v[2].value.block(), 103);
    }

    #[test]
    fn trim_hidden_leaves_disjoint_visible_parts() {
        // [0, 9] under a newer [3, 5]; [4, 12] newest over both.
        let mut v: EntryBuf<PhysicalRun> = smallvec![e(0, 9), e(3, 5), e(4, 12)];
        trim_hidden(&mut v, &mut Scratch::default());
        assert_eq!(ranges(&v), vec![(0, 2), (3, 3), (4, 12)]);
        assert_eq!(v[0].value.block(), 0);
        assert_eq!(v[1].value.block(), 30);
    }

    #[test]
    fn nonoverlap_joins_adjacent_and_subtracts() {
        let mut n = NonOverlap::default();
        n.add(r(10, 20));
        n.add(r(30, 40));
        n.add(r(21, 25));
        assert_eq!(n.segments(), &[r(10, 25), r(30, 40)]);
        assert_eq!(n.held(r(12, 25)), Held::All);
        assert_eq!(n.held(r(24, 30)), Held::Part);
        assert_eq!(n.held(r(26, 29)), Held::Nothing);
        assert_eq!(n.subtract(r(0, 50)), vec![r(0, 9), r(26, 29), r(41, 50)]);
        assert_eq!(n.subtract(r(12, 14)), vec![]);
        n.add(r(0, u64::MAX));
        assert_eq!(n.segments(), &[r(0, u64::MAX)]);
    }
}
