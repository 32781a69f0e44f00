//! The `rangemap` crate's `RangeInclusiveMap`: an eager, non-overlapping
//! range map that coalesces adjacent equal values. A stored value is the
//! run of the write that produced it plus that write's first block, so a
//! piece left after an overwrite still knows its offset into the run (and
//! pieces of one write stay equal, so they coalesce back).

use rangemap::RangeInclusiveMap;

use ferrite_rask::{BlockRange, PhysicalRun, Segment};

use super::segments::{emit, gap};
use super::SerialIndex;

#[derive(Default)]
pub struct RangeMapIndex {
    /// range -> (first block of the write, run bits)
    map: RangeInclusiveMap<u64, (u64, u64)>,
}

impl SerialIndex for RangeMapIndex {
    fn put(&mut self, r: BlockRange, v: PhysicalRun) {
        self.map.insert(r.l()..=r.r(), (r.l(), v.to_bits()));
    }

    fn delete(&mut self, r: BlockRange) {
        self.map.remove(r.l()..=r.r());
    }

    fn get(&mut self, r: BlockRange, out: &mut Vec<Segment<PhysicalRun>>) {
        let mut at = Some(r.l());
        for (range, &(origin, bits)) in self.map.overlapping(&(r.l()..=r.r())) {
            let l = (*range.start()).max(r.l());
            let h = (*range.end()).min(r.r());
            let Ok(hit) = BlockRange::new(l, h) else {
                continue;
            };
            if let Some(a) = at.filter(|&a| l > a) {
                gap(out, a, l - 1);
            }
            emit(
                out,
                hit,
                Some(PhysicalRun::from_bits(bits).offset(l - origin)),
            );
            at = h.checked_add(1);
        }
        if let Some(a) = at.filter(|&a| a <= r.r()) {
            gap(out, a, r.r());
        }
    }
}
