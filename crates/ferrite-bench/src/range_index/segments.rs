//! Building a lookup's answer: segments in ascending order, gaps joined.

use ferrite_rask::{BlockRange, PhysicalRun, RangeValue, Segment, UnfoundList};

/// Appends `range -> value` to `out`, joining it to the last segment when
/// both are gaps or the value continues the last run.
pub fn emit(out: &mut Vec<Segment<PhysicalRun>>, range: BlockRange, value: Option<PhysicalRun>) {
    if let Some(last) = out.last_mut() {
        if last.range.r().checked_add(1) == Some(range.l()) {
            let joined = match (last.value, value) {
                (None, None) => true,
                (Some(a), Some(b)) => PhysicalRun::merge(last.range, &a, range, &b).is_some(),
                _ => false,
            };
            if joined {
                last.range = BlockRange::new(last.range.l(), range.r()).unwrap_or(last.range);
                return;
            }
        }
    }
    out.push(Segment { range, value });
}

/// Emits `[from, to]` as a gap if non-empty.
pub fn gap(out: &mut Vec<Segment<PhysicalRun>>, from: u64, to: u64) {
    if let Ok(r) = BlockRange::new(from, to) {
        emit(out, r, None);
    }
}

/// Emits a list of found pieces (any order) and the gaps between them,
/// tiling `target`.
pub fn tile(
    out: &mut Vec<Segment<PhysicalRun>>,
    target: BlockRange,
    found: &mut [(BlockRange, Option<PhysicalRun>)],
) {
    found.sort_unstable_by_key(|(r, _)| r.l());
    let mut at = Some(target.l());
    for (r, v) in found.iter() {
        if let Some(a) = at.filter(|&a| r.l() > a) {
            gap(out, a, r.l() - 1);
        }
        emit(out, *r, *v);
        at = r.r().checked_add(1);
    }
    if let Some(a) = at.filter(|&a| a <= target.r()) {
        gap(out, a, target.r());
    }
}

/// Resolves overlapping stored ranges newest first: `hits` are
/// `(sequence number, range, value bits)` of every range intersecting
/// `target` (any order); each block takes the value of the newest range
/// holding it, tombstones and unheld blocks become gaps. `unfound` and
/// `found` are the caller's reusable buffers.
pub fn newest_wins(
    out: &mut Vec<Segment<PhysicalRun>>,
    target: BlockRange,
    hits: &mut [(u64, BlockRange, u64)],
    unfound: &mut UnfoundList,
    found: &mut Vec<(BlockRange, Option<PhysicalRun>)>,
) {
    hits.sort_unstable_by_key(|h| std::cmp::Reverse(h.0));
    unfound.reset(target);
    found.clear();
    for &(_, range, bits) in hits.iter() {
        let v = PhysicalRun::from_bits(bits);
        unfound.ablate(range, |hit| {
            let value = (!v.is_tombstone()).then(|| v.divide(range, hit));
            found.push((hit, value));
        });
        if unfound.is_empty() {
            break;
        }
    }
    tile(out, target, found);
}
