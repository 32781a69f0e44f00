//! An interval tree (the `iset` crate: a red-black tree augmented with
//! subtree bounds) used as range-aware indexes are in temporal databases:
//! every written range is kept with a sequence number, deletes insert
//! tombstones, and a read takes the newest range per block. Covered ranges
//! are never removed (paper §3.4), which is what this baseline shows.
//! Intervals are half-open inside `iset`; block `u64::MAX` is not usable.

use iset::IntervalMap;

use ferrite_rask::{BlockRange, PhysicalRun, RangeValue, Segment, UnfoundList};

use super::segments::newest_wins;
use super::SerialIndex;

#[derive(Default)]
pub struct IntervalTree {
    /// [l, r + 1) -> (seq, value bits)
    map: IntervalMap<u64, (u64, u64)>,
    seq: u64,
    unfound: UnfoundList,
    found: Vec<(BlockRange, Option<PhysicalRun>)>,
    hits: Vec<(u64, BlockRange, u64)>,
}

impl IntervalTree {
    fn write(&mut self, r: BlockRange, bits: u64) {
        self.seq += 1;
        // Rewriting exactly the same interval replaces it.
        self.map
            .insert(r.l()..r.r().saturating_add(1), (self.seq, bits));
    }
}

impl SerialIndex for IntervalTree {
    fn put(&mut self, r: BlockRange, v: PhysicalRun) {
        self.write(r, v.to_bits());
    }

    fn delete(&mut self, r: BlockRange) {
        self.write(r, PhysicalRun::TOMBSTONE.to_bits());
    }

    fn get(&mut self, r: BlockRange, out: &mut Vec<Segment<PhysicalRun>>) {
        self.hits.clear();
        for (iv, &(seq, bits)) in self.map.iter(r.l()..r.r().saturating_add(1)) {
            if let Ok(range) = BlockRange::new(iv.start, iv.end - 1) {
                self.hits.push((seq, range, bits));
            }
        }
        newest_wins(out, r, &mut self.hits, &mut self.unfound, &mut self.found);
    }
}
