//! A per-block adaptive radix tree: the `congee` crate's ART-OLC with one
//! 8-byte key per block, looked up block by block.
//!
//! Congee synchronises itself (optimistic lock coupling), so it is shared
//! without the mutex the serial baselines sit behind; a range is written
//! block by block, each block atomically.

use congee::epoch::Guard;
use congee::U64Congee;
use ferrite_rask::{BlockRange, PhysicalRun, Segment};

use super::segments::emit;
use super::RangeIndex;

#[derive(Default)]
pub struct ArtBlock {
    tree: U64Congee<usize>,
}

fn pin() -> Guard {
    congee::epoch::pin()
}

impl RangeIndex for ArtBlock {
    fn put(&self, r: BlockRange, v: PhysicalRun) {
        let guard = pin();
        for b in r.l()..=r.r() {
            // The default allocator reports no failure (it aborts on OOM);
            // a refused insert would surface in verification as a missing
            // block.
            let _ = self
                .tree
                .insert(b, v.offset(b - r.l()).to_bits() as usize, &guard);
        }
    }

    fn delete(&self, r: BlockRange) {
        let guard = pin();
        for b in r.l()..=r.r() {
            self.tree.remove(b, &guard);
        }
    }

    fn get(&self, r: BlockRange, out: &mut Vec<Segment<PhysicalRun>>) {
        let guard = pin();
        for b in r.l()..=r.r() {
            let v = self
                .tree
                .get(b, &guard)
                .map(|bits| PhysicalRun::from_bits(bits as u64));
            emit(out, BlockRange::block(b), v);
        }
    }

    fn settle(&self) {
        // Nodes replaced as the tree grew are freed through the epoch.
        for _ in 0..4 {
            pin().flush();
        }
    }
}
