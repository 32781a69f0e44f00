//! fio's iolog version 2: a `fio version 2 iolog` header, then lines
//! `FILE add|open|close` or `FILE read|write|sync|trim|wait OFFSET LENGTH`.
//! Reads, writes and trims become requests (in order, one microsecond
//! apart, since iolog v2 carries no times); other actions are skipped. Requests
//! to different files share one block address space.
//!
//! The writer turns any trace into such a log, so fio (`--read_iolog`)
//! replays it against a real device or NBD export: every request keeps
//! its offset, length and order; times are not kept.

use std::io::Write;
use std::path::Path;

use crate::error::{Result, TraceError};
use crate::request::{BlockOp, BlockRequest, BLOCK_BYTES};

pub fn parse_fio_iolog(path: &Path) -> Result<Vec<BlockRequest>> {
    parse_text(&crate::read_text(path)?, path)
}

pub(super) fn parse_text(text: &str, path: &Path) -> Result<Vec<BlockRequest>> {
    let mut lines = text.lines().enumerate();
    let header_ok = lines
        .next()
        .is_some_and(|(_, l)| l.trim() == "fio version 2 iolog");
    if !header_ok {
        return Err(TraceError::Data {
            path: path.to_path_buf(),
            reason: "missing the `fio version 2 iolog` header".into(),
        });
    }
    let mut out = Vec::new();
    for (i, line) in lines {
        let bad = |reason: &str| TraceError::at_line(path, i + 1, reason);
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            [] => {}
            [_, "add" | "open" | "close"] => {}
            [_, action, offset, len] => {
                let op = match *action {
                    "read" => BlockOp::Read,
                    "write" => BlockOp::Write,
                    "trim" => BlockOp::Trim,
                    "sync" | "datasync" | "wait" => continue,
                    other => return Err(bad(&format!("unknown action {other:?}"))),
                };
                let offset: u64 = offset.parse().map_err(|_| bad("offset is not a number"))?;
                let len: u64 = len.parse().map_err(|_| bad("length is not a number"))?;
                if offset.checked_add(len).is_none() {
                    return Err(bad("the request ends past 2^64 bytes"));
                }
                if let Some(r) = BlockRequest::from_bytes(out.len() as u64, op, offset, len) {
                    out.push(r);
                }
            }
            _ => return Err(bad("expected FILE ACTION [OFFSET LENGTH]")),
        }
    }
    Ok(out)
}

/// Writes `reqs` as an iolog v2 on one file named `file` (fio's `nbd`
/// engine calls its one file `nbd`), offsets and lengths in bytes.
/// Returns the number of requests written.
pub fn write_fio_iolog(w: impl Write, file: &str, reqs: &[BlockRequest]) -> std::io::Result<u64> {
    let mut w = std::io::BufWriter::new(w);
    writeln!(w, "fio version 2 iolog\n{file} add\n{file} open")?;
    for r in reqs {
        let (offset, len) = (r.start * BLOCK_BYTES, r.blocks * BLOCK_BYTES);
        writeln!(w, "{file} {} {offset} {len}", r.op.name())?;
    }
    writeln!(w, "{file} close")?;
    w.flush()?;
    Ok(reqs.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_log_parses_back_to_the_same_requests() {
        let reqs = [
            BlockRequest::from_bytes(0, BlockOp::Write, 0, 8192).unwrap(),
            BlockRequest::from_bytes(1, BlockOp::Read, 4096, 100).unwrap(),
            BlockRequest::from_bytes(2, BlockOp::Trim, 1 << 40, 1 << 20).unwrap(),
        ];
        let mut text = Vec::new();
        assert_eq!(write_fio_iolog(&mut text, "nbd", &reqs).unwrap(), 3);
        let text = String::from_utf8(text).unwrap();
        assert!(text.starts_with("fio version 2 iolog\nnbd add\nnbd open\n"));
        assert!(text.ends_with("nbd close\n"));
        let back = parse_text(&text, Path::new("t")).unwrap();
        assert_eq!(back, reqs);
    }

    #[test]
    fn parses_reads_writes_and_trims() {
        let t = "fio version 2 iolog\n/dev/x add\n/dev/x open\n/dev/x write 0 8192\n/dev/x read 4096 4096\n/dev/x sync 0 0\n/dev/x trim 0 4096\n/dev/x close\n";
        let r = parse_text(t, Path::new("t")).unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!((r[0].op, r[0].start, r[0].blocks), (BlockOp::Write, 0, 2));
        assert_eq!((r[1].op, r[1].start, r[1].blocks), (BlockOp::Read, 1, 1));
        assert_eq!((r[2].op, r[2].start, r[2].blocks), (BlockOp::Trim, 0, 1));
        assert!(parse_text("not a log\n", Path::new("t")).is_err());
        assert!(parse_text(
            "fio version 2 iolog\n/dev/x frobnicate 1 2\n",
            Path::new("t")
        )
        .is_err());
    }
}
