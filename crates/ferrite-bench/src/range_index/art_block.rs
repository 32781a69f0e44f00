//! A per-block adaptive radix tree: one 8-byte key per block, looked up
//! block by block (the ART is ferrite-rask's, the same one RASK uses for
//! its inner nodes, so the comparison isolates range-as-a-key).

use ferrite_rask::art::Art;
use ferrite_rask::{BlockRange, PhysicalRun, Segment};

use super::segments::emit;
use super::SerialIndex;

#[derive(Default)]
pub struct ArtBlock {
    art: Art<u64>,
}

impl SerialIndex for ArtBlock {
    fn put(&mut self, r: BlockRange, v: PhysicalRun) {
        for b in r.l()..=r.r() {
            self.art.insert(b, v.offset(b - r.l()).to_bits());
        }
    }

    fn delete(&mut self, r: BlockRange) {
        for b in r.l()..=r.r() {
            self.art.remove(b);
        }
    }

    fn get(&mut self, r: BlockRange, out: &mut Vec<Segment<PhysicalRun>>) {
        for b in r.l()..=r.r() {
            let v = self.art.get(b).map(PhysicalRun::from_bits);
            emit(out, BlockRange::block(b), v);
        }
    }
}
