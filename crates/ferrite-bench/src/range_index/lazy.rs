//! The Lazy adaptation of a point B-tree to range keys (paper §3.4):
//! ranges keyed by left bound and a sequence number; a write removes only
//! the ranges it fully covers; a read gathers every intersecting range and
//! takes the newest per block.

use std::collections::BTreeMap;

use ferrite_rask::{BlockRange, PhysicalRun, RangeValue, Segment, UnfoundList};

use super::segments::tile;
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
        self.hits.sort_unstable_by_key(|h| std::cmp::Reverse(h.0));
        self.unfound.reset(r);
        self.found.clear();
        for &(_, range, bits) in &self.hits {
            let v = PhysicalRun::from_bits(bits);
            let found = &mut self.found;
            self.unfound.ablate(range, |hit| {
                let value = (!v.is_tombstone()).then(|| v.divide(range, hit));
                found.push((hit, value));
            });
            if self.unfound.is_empty() {
                break;
            }
        }
        tile(out, r, &mut self.found);
    }
}
