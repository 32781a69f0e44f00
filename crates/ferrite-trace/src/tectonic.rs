//! Tectonic chunk-request samples (CacheLib's block_chunk replay format):
//! `op_time,block_id,block_id_size,io_size,io_offset,user_name,
//! user_namespace,op_name,op_count,host_name,rs_shard_id`.
//!
//! `op_name` starting with `getChunkData` is a read and `putChunk` a write
//! of bytes `[io_offset, io_offset + io_size)` of chunk `block_id`; a row
//! with `op_count` k stands for k identical requests. Chunks are numbered in
//! order of first appearance and chunk `c` is placed at block
//! `c * TECTONIC_CHUNK_BLOCKS`, a 16 MiB slot (chunks hold at most 8 MiB of
//! data plus a small tail; the largest request end in the shared sample is
//! 8,455,047 bytes). Times are seconds in the trace, microseconds here.

use std::collections::HashMap;
use std::path::Path;

use crate::error::{Result, TraceError};
use crate::request::{BlockOp, BlockRequest};

/// Blocks reserved per chunk (16 MiB of 4 KiB blocks).
pub const TECTONIC_CHUNK_BLOCKS: u64 = 4096;

/// Most requests one row may stand for: the shared sample's largest
/// `op_count` is far below it, and a row past it is taken as corrupt
/// rather than expanded into memory.
pub const MAX_OP_COUNT: u64 = 1 << 16;

pub fn parse_tectonic(path: &Path) -> Result<Vec<BlockRequest>> {
    parse_text(&crate::read_text(path)?, path)
}

pub(super) fn parse_text(text: &str, path: &Path) -> Result<Vec<BlockRequest>> {
    let mut chunks: HashMap<String, u64> = HashMap::new();
    let mut out = Vec::new();
    let mut first_time = None;
    let slot_bytes = TECTONIC_CHUNK_BLOCKS * crate::request::BLOCK_BYTES;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || (i == 0 && line.starts_with("op_time")) {
            continue;
        }
        let bad = |reason: &str| TraceError::at_line(path, i + 1, reason);
        let f: Vec<&str> = line.split(',').collect();
        if f.len() != 11 {
            return Err(bad("expected 11 comma-separated fields"));
        }
        let num = |s: &str, what: &str| {
            s.parse::<u64>()
                .map_err(|_| bad(&format!("{what} is not a number")))
        };
        let time = num(f[0], "op_time")?;
        let size = num(f[3], "io_size")?;
        let offset = num(f[4], "io_offset")?;
        let count = num(f[8], "op_count")?;
        let op = if f[7].starts_with("getChunkData") {
            BlockOp::Read
        } else if f[7].starts_with("putChunk") {
            BlockOp::Write
        } else {
            return Err(bad(&format!("unknown op_name {:?}", f[7])));
        };
        if count > MAX_OP_COUNT {
            return Err(bad(&format!("op_count {count} exceeds {MAX_OP_COUNT}")));
        }
        if offset.checked_add(size).is_none_or(|end| end > slot_bytes) {
            return Err(bad("request reaches past the 16 MiB chunk slot"));
        }
        let next = chunks.len() as u64;
        let chunk = *chunks.entry(f[1].to_string()).or_insert(next);
        let t0 = *first_time.get_or_insert(time);
        let base = chunk
            .checked_mul(slot_bytes)
            .ok_or_else(|| bad("too many chunks for a 64-bit address space"))?;
        if let Some(r) = BlockRequest::from_bytes(
            time.saturating_sub(t0).saturating_mul(1_000_000),
            op,
            base + offset,
            size,
        ) {
            for _ in 0..count {
                out.push(r);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::TraceSummary;

    #[test]
    fn chunks_get_their_own_slots() {
        let t = "op_time,block_id,block_id_size,io_size,io_offset,user_name,user_namespace,op_name,op_count,host_name,rs_shard_id\n\
                 10,aa,2,4096,0,u,n,putChunk.X,1,h,0\n\
                 11,bb,2,100,5000,u,n,getChunkData.Y,2,h,0\n\
                 12,aa,2,8192,4096,u,n,getChunkData.Y,1,h,0\n";
        let r = parse_text(t, Path::new("t")).unwrap();
        assert_eq!(r.len(), 4);
        assert_eq!((r[0].op, r[0].start, r[0].blocks), (BlockOp::Write, 0, 1));
        assert_eq!(
            (r[1].start, r[1].blocks, r[1].time_us),
            (TECTONIC_CHUNK_BLOCKS + 1, 1, 1_000_000)
        );
        assert_eq!(r[1], r[2]);
        assert_eq!((r[3].start, r[3].blocks), (1, 2));
    }

    #[test]
    fn reads_the_shared_trace_exactly() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/data/traces/tectonic_chunks_1.csv");
        if !path.exists() {
            eprintln!("skipping: {} is absent", path.display());
            return;
        }
        let reqs = parse_tectonic(&path).unwrap();
        let s = TraceSummary::of(&reqs);
        // 599 getChunkData rows and 400 putChunk rows; op_count expands
        // rows into repeated requests.
        let text = std::fs::read_to_string(&path).unwrap();
        let (mut reads, mut writes) = (0u64, 0u64);
        for l in text.lines().skip(1) {
            let f: Vec<&str> = l.split(',').collect();
            let n: u64 = f[8].parse().unwrap();
            if f[3] == "0" {
                continue;
            }
            if f[7].starts_with("get") {
                reads += n
            } else {
                writes += n
            }
        }
        assert_eq!((s.reads, s.writes), (reads, writes));
        assert!(s.reads >= 599 && s.writes >= 400);
    }
}
