//! Reads: the runs the map answers, gathered from the data log in one
//! batch under the reuse gate's read side (so no segment is rewritten
//! under them); unmapped blocks read as zeroes, unaligned requests
//! through a bounce buffer.

use ferrite_io::{AlignedBuf, ReadReq};
use ferrite_rask::{BlockRange, PhysicalRun, Segment};

use super::{block_span, check_request, Inner, BS};
use crate::error::Result;

impl Inner {
    pub(super) fn read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        check_request(&self.sb, offset, out.len() as u64)?;
        let Some(span) = block_span(offset, out.len() as u64) else {
            return Ok(());
        };
        let aligned = offset.is_multiple_of(BS)
            && (out.len() as u64).is_multiple_of(BS)
            && (out.as_ptr() as usize).is_multiple_of(ferrite_io::BUF_ALIGN);
        if aligned {
            return self.read_blocks(span, out);
        }
        let mut tmp = AlignedBuf::zeroed((span.len() * BS) as usize);
        self.read_blocks(span, &mut tmp)?;
        let skip = (offset - span.l() * BS) as usize;
        out.copy_from_slice(&tmp[skip..skip + out.len()]);
        Ok(())
    }

    /// Fills `out` (aligned, `span.len()` blocks) with the blocks of `span`.
    pub(crate) fn read_blocks(&self, span: BlockRange, out: &mut [u8]) -> Result<()> {
        let _gate = self.reuse_gate.read();
        let mut segs: Vec<Segment<PhysicalRun>> = Vec::new();
        self.map.lookup(span, &mut segs);
        let mut reqs = Vec::with_capacity(segs.len());
        let mut rest = out;
        for s in &segs {
            let (piece, tail) =
                std::mem::take(&mut rest).split_at_mut((s.range.len() * BS) as usize);
            rest = tail;
            match s.value {
                Some(run) => reqs.push(ReadReq::new(run.block() * BS, piece)),
                None => piece.fill(0),
            }
        }
        if !reqs.is_empty() {
            self.data.read_batch(&mut reqs)?;
        }
        Ok(())
    }
}
