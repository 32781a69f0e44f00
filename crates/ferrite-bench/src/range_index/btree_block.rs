//! The point index a team writes first: one `BTreeMap` entry per block.

use std::collections::BTreeMap;

use ferrite_rask::{BlockRange, PhysicalRun, Segment};

use super::segments::{emit, gap};
use super::SerialIndex;

#[derive(Default)]
pub struct BTreeBlock {
    map: BTreeMap<u64, u64>,
}

impl SerialIndex for BTreeBlock {
    fn put(&mut self, r: BlockRange, v: PhysicalRun) {
        for b in r.l()..=r.r() {
            self.map.insert(b, v.offset(b - r.l()).to_bits());
        }
    }

    fn delete(&mut self, r: BlockRange) {
        for b in r.l()..=r.r() {
            self.map.remove(&b);
        }
    }

    fn get(&mut self, r: BlockRange, out: &mut Vec<Segment<PhysicalRun>>) {
        let mut at = r.l();
        for (&b, &v) in self.map.range(r.l()..=r.r()) {
            if b > at {
                gap(out, at, b - 1);
            }
            emit(out, BlockRange::block(b), Some(PhysicalRun::from_bits(v)));
            at = b + 1;
        }
        if at <= r.r() {
            gap(out, at, r.r());
        }
    }
}
