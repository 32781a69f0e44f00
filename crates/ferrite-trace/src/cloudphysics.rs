//! The CloudPhysics vSCSI trace (CSV: `version,time,op,size,lbn`): op `2a`
//! (SCSI WRITE(10)) or `28` (READ(10)), size in bytes, lbn in 512-byte
//! sectors. The time column is read as seconds: the shared copy's times
//! span exactly 7,200 units over a trace described as two hours long, which
//! only fits seconds (its README says microseconds).

use std::path::Path;

use crate::error::{Result, TraceError};
use crate::request::{BlockOp, BlockRequest};

pub fn parse_cloudphysics(path: &Path) -> Result<Vec<BlockRequest>> {
    parse_text(&crate::read_text(path)?, path)
}

pub(super) fn parse_text(text: &str, path: &Path) -> Result<Vec<BlockRequest>> {
    let mut out = Vec::new();
    let mut first_time = None;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || (i == 0 && line.starts_with("version")) {
            continue;
        }
        let bad = |reason: &str| TraceError::at_line(path, i + 1, reason);
        let f: Vec<&str> = line.split(',').collect();
        let [_, time, op, size, lbn] = f.as_slice() else {
            return Err(bad("expected 5 comma-separated fields"));
        };
        let time: u64 = time.parse().map_err(|_| bad("time is not a number"))?;
        let size: u64 = size.parse().map_err(|_| bad("size is not a number"))?;
        let lbn: u64 = lbn.parse().map_err(|_| bad("lbn is not a number"))?;
        let op = match *op {
            "2a" | "2A" => BlockOp::Write,
            "28" => BlockOp::Read,
            other => return Err(bad(&format!("unknown SCSI opcode {other:?}"))),
        };
        let t0 = *first_time.get_or_insert(time);
        let offset = lbn.checked_mul(512).ok_or_else(|| bad("lbn overflows"))?;
        if offset.checked_add(size).is_none() {
            return Err(bad("the request ends past 2^64 bytes"));
        }
        let time_us = time.saturating_sub(t0).saturating_mul(1_000_000);
        if let Some(r) = BlockRequest::from_bytes(time_us, op, offset, size) {
            out.push(r);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::TraceSummary;

    #[test]
    fn parses_lines_and_rejects_garbage() {
        let t = "version,time,op,size,lbn\n1,100,2a,512,8\n1,150,28,8192,16\n";
        let r = parse_text(t, Path::new("t")).unwrap();
        assert_eq!(
            r[0],
            BlockRequest {
                time_us: 0,
                op: BlockOp::Write,
                start: 1,
                blocks: 1
            }
        );
        assert_eq!(
            r[1],
            BlockRequest {
                time_us: 50_000_000,
                op: BlockOp::Read,
                start: 2,
                blocks: 2
            }
        );
        assert!(parse_text("1,2,99,1,1\n", Path::new("t")).is_err());
        assert!(parse_text("1,2,28\n", Path::new("t")).is_err());
    }

    #[test]
    fn reads_the_shared_trace_exactly() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/data/traces/cloudphysics.csv");
        if !path.exists() {
            eprintln!("skipping: {} is absent", path.display());
            return;
        }
        let reqs = parse_cloudphysics(&path).unwrap();
        let s = TraceSummary::of(&reqs);
        assert_eq!((s.writes, s.reads), (66_898, 46_974));
        let span = reqs.iter().map(|r| r.time_us).max().unwrap();
        assert_eq!(span, 7_200_000_000, "two hours");
    }
}
