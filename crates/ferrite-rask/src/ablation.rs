//! Ablation-based search (paper §5.1): a leaf's log is read newest first
//! and each entry "ablates" the still-unfound parts of the target range.
//!
//! The Unfound List is an ordered list of disjoint subranges; finding the
//! first subrange an entry touches is a binary search, and the touched
//! subranges are contiguous, so each entry costs O(log u + touched). The
//! list never holds more than one subrange per processed entry plus one.

use crate::entry::{Entry, Segment};
use crate::range::BlockRange;
use crate::value::RangeValue;

/// The unfound parts of a target range, ordered and disjoint.
#[derive(Debug, Default, Clone)]
pub struct UnfoundList {
    parts: Vec<BlockRange>,
}

impl UnfoundList {
    #[inline]
    pub fn reset(&mut self, target: BlockRange) {
        self.parts.clear();
        self.parts.push(target);
    }

    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    pub fn parts(&self) -> &[BlockRange] {
        &self.parts
    }

    /// Removes everything `r` covers, calling `found` with each removed
    /// piece (in ascending order).
    #[inline]
    pub fn ablate(&mut self, r: BlockRange, mut found: impl FnMut(BlockRange)) {
        let first = self.parts.partition_point(|u| u.r() < r.l());
        let mut last = first;
        while last < self.parts.len() && self.parts[last].l() <= r.r() {
            last += 1;
        }
        if first == last {
            return;
        }
        let head = self.parts[first];
        let tail = self.parts[last - 1];
        for u in &self.parts[first..last] {
            if let Some(hit) = u.intersect(&r) {
                found(hit);
            }
        }
        let left = (head.l() < r.l()).then(|| BlockRange::ordered(head.l(), r.l() - 1));
        let right = (tail.r() > r.r()).then(|| BlockRange::ordered(r.r() + 1, tail.r()));
        // Replace parts[first..last] with the 0–2 remnants, in place.
        let mut w = first;
        for k in [left, right].into_iter().flatten() {
            if w < last {
                self.parts[w] = k;
            } else {
                self.parts.insert(w, k);
            }
            w += 1;
        }
        if w < last {
            self.parts.drain(w..last);
        }
    }
}

/// Appends to `out` the latest value of every block of `target` that
/// `newest_first` (a log's entries, newest first; entries not overlapping
/// `target` may be left out) hold, as segments in ascending order; blocks
/// no entry holds, or whose newest entry is a tombstone, become gaps
/// (adjacent gaps are not joined here; see [`coalesce_gaps`]).
#[inline]
pub fn search<V: RangeValue>(
    newest_first: impl IntoIterator<Item = Entry<V>>,
    target: BlockRange,
    unfound: &mut UnfoundList,
    out: &mut Vec<Segment<V>>,
) {
    let mut entries = newest_first.into_iter();
    // Most lookups end at the first overlapping entry, which covers the
    // whole target: answer those without building the Unfound List.
    let first = loop {
        match entries.next() {
            Some(e) if e.range.overlaps(&target) => break e,
            Some(_) => continue,
            None => {
                out.push(Segment {
                    range: target,
                    value: None,
                });
                return;
            }
        }
    };
    if first.range.covers(&target) {
        let value = (!first.value.is_tombstone()).then(|| first.part(target).value);
        out.push(Segment {
            range: target,
            value,
        });
        return;
    }
    unfound.reset(target);
    let start = out.len();
    for e in std::iter::once(first).chain(entries) {
        if !e.range.overlaps(&target) {
            continue;
        }
        unfound.ablate(e.range, |hit| {
            let value = (!e.value.is_tombstone()).then(|| e.part(hit).value);
            out.push(Segment { range: hit, value });
        });
        if unfound.is_empty() {
            break;
        }
    }
    for gap in unfound.parts() {
        out.push(Segment {
            range: *gap,
            value: None,
        });
    }
    if out.len() - start > 1 {
        out[start..].sort_unstable_by_key(|s| s.range.l());
    }
}

/// Joins adjacent gaps from `start` on, so a gap's shape does not depend on
/// how entries happened to be laid out.
pub fn coalesce_gaps<V: Copy>(out: &mut Vec<Segment<V>>, start: usize) {
    if out.len() < start + 2 {
        return;
    }
    // Most answers are one segment, or have no two gaps in a row.
    let adjacent_gaps = |a: &Segment<V>, b: &Segment<V>| {
        a.value.is_none() && b.value.is_none() && a.range.r() + 1 == b.range.l()
    };
    let Some(first) = out[start..]
        .windows(2)
        .position(|p| adjacent_gaps(&p[0], &p[1]))
    else {
        return;
    };
    let mut w = start + first + 1;
    for i in start + first + 1..out.len() {
        let (prev, cur) = (out[w - 1], out[i]);
        if adjacent_gaps(&prev, &cur) {
            out[w - 1].range = BlockRange::ordered(prev.range.l(), cur.range.r());
            continue;
        }
        out[w] = cur;
        w += 1;
    }
    out.truncate(w);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::PhysicalRun;

    fn r(l: u64, h: u64) -> BlockRange {
        BlockRange::new(l, h).unwrap()
    }

    fn e(l: u64, h: u64, block: u64) -> Entry<PhysicalRun> {
        Entry::new(r(l, h), PhysicalRun::new(0, block).unwrap())
    }

    /// (first, last, physical block or gap) of each segment.
    fn shape(out: &[Segment<PhysicalRun>]) -> Vec<(u64, u64, Option<u64>)> {
        out.iter()
            .map(|s| (s.range.l(), s.range.r(), s.value.map(|v| v.block())))
            .collect()
    }

    #[test]
    fn the_papers_example() {
        // Fig. 9: searching [3, 15]; newer entries win.
        let entries = [e(1, 6, 100), e(6, 13, 200), e(9, 10, 300)];
        let mut out = Vec::new();
        search(
            entries.into_iter().rev(),
            r(3, 15),
            &mut UnfoundList::default(),
            &mut out,
        );
        let got = shape(&out);
        assert_eq!(
            got,
            vec![
                (3, 5, Some(102)),
                (6, 8, Some(200)),
                (9, 10, Some(300)),
                (11, 13, Some(205)),
                (14, 15, None)
            ]
        );
    }

    #[test]
    fn tombstones_become_gaps() {
        let entries = [
            e(0, 9, 0),
            Entry::new(r(2, 3), PhysicalRun::TOMBSTONE),
            e(3, 3, 50),
        ];
        let mut out = Vec::new();
        search(
            entries.into_iter().rev(),
            r(0, 9),
            &mut UnfoundList::default(),
            &mut out,
        );
        let got = shape(&out);
        assert_eq!(
            got,
            vec![
                (0, 1, Some(0)),
                (2, 2, None),
                (3, 3, Some(50)),
                (4, 9, Some(4))
            ]
        );
    }

    #[test]
    fn adjacent_gaps_join_and_nothing_else_moves() {
        let seg = |l, h, v: Option<u64>| Segment {
            range: r(l, h),
            value: v.map(|b| PhysicalRun::new(0, b).unwrap()),
        };
        // Before `start`: adjacent gaps that belong to another answer.
        let mut out = vec![
            seg(0, 1, None),
            seg(2, 3, None),
            seg(10, 11, None),
            seg(12, 14, None),
            seg(15, 15, Some(7)),
            seg(16, 17, None),
            seg(19, 20, None),
            seg(21, 22, None),
            seg(23, 23, None),
        ];
        coalesce_gaps(&mut out, 2);
        assert_eq!(
            shape(&out),
            vec![
                (0, 1, None),
                (2, 3, None),
                (10, 14, None),
                (15, 15, Some(7)),
                (16, 17, None),
                (19, 23, None)
            ]
        );
        let mut one = vec![seg(5, 9, None)];
        coalesce_gaps(&mut one, 0);
        assert_eq!(shape(&one), vec![(5, 9, None)]);
    }

    #[test]
    fn unfound_list_splits_and_drains() {
        let mut u = UnfoundList::default();
        u.reset(r(0, 100));
        let mut hits = Vec::new();
        u.ablate(r(10, 20), |h| hits.push(h));
        u.ablate(r(50, 60), |h| hits.push(h));
        assert_eq!(u.parts(), &[r(0, 9), r(21, 49), r(61, 100)]);
        u.ablate(r(5, 70), |h| hits.push(h));
        assert_eq!(u.parts(), &[r(0, 4), r(71, 100)]);
        assert_eq!(hits[2..], [r(5, 9), r(21, 49), r(61, 70)]);
        u.ablate(r(0, 200), |_| {});
        assert!(u.is_empty());
    }
}
