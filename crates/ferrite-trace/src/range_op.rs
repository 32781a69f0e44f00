//! A block request stream as the operations a block map sees: writes
//! become puts of fresh physical runs (every write lands somewhere new, as
//! in a log-structured block store), reads gets, trims deletes; and the
//! same stream after RASK's I/O compaction window, which merges nearby
//! writes into one range before they reach the map.

use ferrite_rask::{BlockRange, PhysicalRun, RangeValue, SegmentCache};

use crate::request::{BlockOp, BlockRequest};

/// One operation of a replay.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RangeOp {
    Put(BlockRange, PhysicalRun),
    Delete(BlockRange),
    Get(BlockRange),
}

/// Hands out consecutive physical runs in data file 0, as a log-structured
/// store's head does (wrapping at the run encoding's limit).
#[derive(Default)]
pub struct RunAllocator {
    next: u64,
}

impl RunAllocator {
    /// The next `len` blocks of the data file.
    pub fn run(&mut self, len: u64) -> PhysicalRun {
        if self.next + len >= PhysicalRun::BLOCK_SPACE {
            self.next = 0;
        }
        let v = PhysicalRun::new(0, self.next).unwrap_or(PhysicalRun::TOMBSTONE);
        self.next += len;
        v
    }
}

/// Writes become puts of fresh runs, reads gets, trims deletes.
pub fn ops_from_trace(reqs: &[BlockRequest]) -> Vec<RangeOp> {
    let mut alloc = RunAllocator::default();
    reqs.iter()
        .filter_map(|q| {
            let r = BlockRange::with_len(q.start, q.blocks).ok()?;
            Some(match q.op {
                BlockOp::Write => RangeOp::Put(r, alloc.run(r.len())),
                BlockOp::Read => RangeOp::Get(r),
                BlockOp::Trim => RangeOp::Delete(r),
            })
        })
        .collect()
}

/// The stream after I/O compaction: writes pass through a segment cache of
/// `window` blocks and reach the index as consecutive writes, each stored
/// as one fresh run; reads and deletes keep their place.
pub fn compact_writes(ops: &[RangeOp], window: u64) -> Vec<RangeOp> {
    let mut cache = SegmentCache::new(window);
    let mut alloc = RunAllocator::default();
    let mut out = Vec::with_capacity(ops.len());
    let mut emit = |out: &mut Vec<RangeOp>, cws: Vec<ferrite_rask::CompactedWrite>| {
        for cw in cws {
            out.push(RangeOp::Put(cw.range, alloc.run(cw.range.len())));
        }
    };
    for op in ops {
        match *op {
            RangeOp::Put(r, _) => {
                let cws = cache.write(r);
                emit(&mut out, cws);
            }
            RangeOp::Delete(_) => {
                let cws = cache.flush();
                emit(&mut out, cws);
                out.push(*op);
            }
            RangeOp::Get(_) => out.push(*op),
        }
    }
    let cws = cache.flush();
    emit(&mut out, cws);
    out
}
