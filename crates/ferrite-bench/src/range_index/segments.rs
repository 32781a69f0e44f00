//! Building a lookup's answer: segments in ascending order, gaps joined.

use ferrite_rask::{BlockRange, PhysicalRun, RangeValue, Segment};

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
