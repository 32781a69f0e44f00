//! One block request, in 4 KiB blocks, and the counts of a stream of them.
//!
//! Rounding rule: a request for the byte range `[offset, offset + len)`
//! covers every 4 KiB block it touches, from `floor(offset / 4096)` to
//! `ceil((offset + len) / 4096) - 1`; a zero-length request is dropped.

/// Bytes per block in every trace stream.
pub const BLOCK_BYTES: u64 = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BlockOp {
    Read,
    Write,
    /// The blocks' data is discarded (a trim / discard / unmap).
    Trim,
}

impl BlockOp {
    /// The operation's name as fio's iolog spells it.
    pub fn name(self) -> &'static str {
        match self {
            BlockOp::Read => "read",
            BlockOp::Write => "write",
            BlockOp::Trim => "trim",
        }
    }
}

/// One request: `blocks` consecutive 4 KiB blocks from `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct BlockRequest {
    pub time_us: u64,
    pub op: BlockOp,
    pub start: u64,
    pub blocks: u64,
}

impl BlockRequest {
    /// The request covering bytes `[offset, offset + len)`, or `None` for
    /// len 0 or a range that ends past 2^64 bytes (parsers report that one
    /// as an error first).
    pub fn from_bytes(time_us: u64, op: BlockOp, offset: u64, len: u64) -> Option<Self> {
        if len == 0 {
            return None;
        }
        let start = offset / BLOCK_BYTES;
        let end = offset.checked_add(len)?.div_ceil(BLOCK_BYTES);
        Some(Self {
            time_us,
            op,
            start,
            blocks: end - start,
        })
    }

    /// Last block covered (inclusive).
    pub fn last(&self) -> u64 {
        self.start + self.blocks - 1
    }
}

/// Counts of a parsed trace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TraceSummary {
    pub reads: u64,
    pub writes: u64,
    pub read_blocks: u64,
    pub write_blocks: u64,
    pub trims: u64,
    pub trim_blocks: u64,
}

impl TraceSummary {
    pub fn of(reqs: &[BlockRequest]) -> Self {
        let mut s = Self::default();
        for r in reqs {
            match r.op {
                BlockOp::Read => {
                    s.reads += 1;
                    s.read_blocks += r.blocks;
                }
                BlockOp::Write => {
                    s.writes += 1;
                    s.write_blocks += r.blocks;
                }
                BlockOp::Trim => {
                    s.trims += 1;
                    s.trim_blocks += r.blocks;
                }
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_covers_every_touched_block() {
        let r = |o, l| BlockRequest::from_bytes(0, BlockOp::Read, o, l);
        assert_eq!(r(0, 4096).map(|x| (x.start, x.blocks)), Some((0, 1)));
        assert_eq!(r(512, 512).map(|x| (x.start, x.blocks)), Some((0, 1)));
        assert_eq!(r(4000, 200).map(|x| (x.start, x.blocks)), Some((0, 2)));
        assert_eq!(r(8192, 8193).map(|x| (x.start, x.blocks)), Some((2, 3)));
        assert_eq!(r(100, 0), None);
        assert_eq!(r(u64::MAX, 1), None);
    }
}
