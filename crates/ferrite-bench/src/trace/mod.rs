//! Block I/O traces, turned into one stream of block requests.
//!
//! Every parser yields [`BlockRequest`]s in 4 KiB blocks. Rounding rule: a
//! request for the byte range `[offset, offset + len)` covers every 4 KiB
//! block it touches, from `floor(offset / 4096)` to
//! `ceil((offset + len) / 4096) - 1`; a zero-length request is dropped.
//! Times are microseconds from the trace's first request.

mod cloudphysics;
mod fio_iolog;
mod tectonic;

pub use cloudphysics::parse_cloudphysics;
pub use fio_iolog::parse_fio_iolog;
pub use tectonic::{parse_tectonic, TECTONIC_CHUNK_BLOCKS};

/// Reads a trace file as text.
pub(crate) fn read_text(path: &std::path::Path) -> crate::error::Result<String> {
    std::fs::read_to_string(path).map_err(|e| crate::error::BenchError::Data {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// Trace formats by the names the tools accept.
pub const FORMATS: [&str; 3] = ["cloudphysics", "tectonic", "fio"];

/// Parses `path` as the trace format called `format` (one of [`FORMATS`]).
pub fn parse_named(
    format: &str,
    path: &std::path::Path,
) -> crate::error::Result<Vec<BlockRequest>> {
    check_format(format)?;
    parse_as(format, &read_text(path)?, path)
}

/// Parses `text`, the contents of a trace in the format called `format`;
/// errors name the source `<input>`.
pub fn parse_str(format: &str, text: &str) -> crate::error::Result<Vec<BlockRequest>> {
    check_format(format)?;
    parse_as(format, text, std::path::Path::new("<input>"))
}

fn check_format(format: &str) -> crate::error::Result<()> {
    if FORMATS.contains(&format) {
        return Ok(());
    }
    Err(crate::error::BenchError::Config(format!(
        "unknown trace format {format:?}: expected one of {}",
        FORMATS.join(", ")
    )))
}

fn parse_as(
    format: &str,
    text: &str,
    path: &std::path::Path,
) -> crate::error::Result<Vec<BlockRequest>> {
    match format {
        "cloudphysics" => cloudphysics::parse_text(text, path),
        "tectonic" => tectonic::parse_text(text, path),
        _ => fio_iolog::parse_text(text, path),
    }
}

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
    use proptest::prelude::*;

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

    #[test]
    fn formats_are_chosen_by_name() {
        let fio = "fio version 2 iolog\n/dev/x write 0 4096\n";
        assert_eq!(parse_str("fio", fio).unwrap().len(), 1);
        assert!(parse_str("cloudphysics", fio).is_err());
        let e = parse_str("blktrace", fio).unwrap_err().to_string();
        assert!(e.contains("cloudphysics, tectonic, fio"), "{e}");
    }

    /// Lines shaped like each format's, with numbers anywhere in `u64` and
    /// the odd broken field.
    fn field() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<u64>().prop_map(|n| n.to_string()),
            (0u64..1 << 24).prop_map(|n| n.to_string()),
            Just(String::new()),
            "[a-z0-9]{1,3}",
        ]
    }

    fn text(
        ops: &'static [&'static str],
        shape: fn(Vec<String>, &str) -> String,
    ) -> impl Strategy<Value = String> {
        proptest::collection::vec(
            (
                proptest::collection::vec(field(), 6),
                proptest::sample::select(ops),
            ),
            0..8,
        )
        .prop_map(move |lines| {
            lines
                .into_iter()
                .map(|(f, op)| shape(f, op))
                .collect::<Vec<_>>()
                .join("\n")
        })
    }

    fn well_formed(reqs: &[BlockRequest]) -> bool {
        reqs.iter()
            .all(|r| r.blocks >= 1 && r.start.checked_add(r.blocks).is_some())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn parsers_never_panic_and_yield_addressable_requests(
            cp in text(&["2a", "28", "99"], |f, op| format!("1,{},{op},{},{}", f[0], f[1], f[2])),
            tc in text(&["getChunkData.x", "putChunk.y", "drop"], |f, op| {
                format!("{},{},0,{},{},u,ns,{op},{},h,0", f[0], f[1], f[2], f[3], f[4])
            }),
            fio in text(&["read", "write", "trim", "sync", "seek"], |f, op| {
                format!("/dev/x {op} {} {}", f[0], f[1])
            }),
        ) {
            let p = std::path::Path::new("t");
            if let Ok(r) = cloudphysics::parse_text(&cp, p) {
                prop_assert!(well_formed(&r));
            }
            if let Ok(r) = tectonic::parse_text(&tc, p) {
                prop_assert!(well_formed(&r));
            }
            if let Ok(r) = fio_iolog::parse_text(&format!("fio version 2 iolog\n{fio}"), p) {
                prop_assert!(well_formed(&r));
            }
        }
    }
}
