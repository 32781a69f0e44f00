//! The Lazy adaptation of a point B-tree to range keys (paper §3.4):
//! ranges keyed by left bound and a sequence number; a write removes only
//! the ranges it fully covers; a read gathers every intersecting range and
//! takes the newest per block.

use std::collections::BTreeMap;

use ferrite_rask::{BlockRange, PhysicalRun, RangeValue, Segment, UnfoundList};

use super::segments::newest_wins;
use super::SerialIndex;

#[derive(Default)]
pub struct LazyBTree {
    /// (left, seq) -> (right, value bits); tombstones mark deletes.
    map: BTreeMap<(u64, u64), (u64, u64)>,
    seq: u64,
    /// Longest range stored, so a read knows how far left to look.
    max_len: u64,
    unfound: UnfoundList,
    found: Vec<(BlockRange, Option<PhysicalRun>)>,
    hits: Vec<(u64, BlockRange, u64)>,
}

impl LazyBTree {
    fn write(&mut self, r: BlockRange, bits: u64) {
        let covered: Vec<(u64, u64)> = self
            .map
            .range((r.l(), 0)..=(r.r(), u64::MAX))
            .filter(|(_, (right, _))| *right <= r.r())
            .map(|(k, _)| *k)
            .collect();
        for k in covered {
            self.map.remove(&k);
        }
        self.seq += 1;
        self.max_len = self.max_len.max(r.len());
        self.map.insert((r.l(), self.seq), (r.r(), bits));
    }
}

impl SerialIndex for LazyBTree {
    fn put(&mut self, r: BlockRange, v: PhysicalRun) {
        self.write(r, v.to_bits());
    }

    fn delete(&mut self, r: BlockRange) {
        self.write(r, PhysicalRun::TOMBSTONE.to_bits());
    }

    fn get(&mut self, r: BlockRange, out: &mut Vec<Segment<PhysicalRun>>) {
        let from = r.l().saturating_sub(self.max_len.saturating_sub(1));
        self.hits.clear();
        for (&(l, seq), &(right, bits)) in self.map.range((from, 0)..=(r.r(), u64::MAX)) {
            if right >= r.l() {
                self.hits
                    .push((seq, BlockRange::new(l, right).unwrap_or(r), bits));
            }
        }
        newest_wins(out, r, &mut self.hits, &mut self.unfound, &mut self.found);
    }
}
