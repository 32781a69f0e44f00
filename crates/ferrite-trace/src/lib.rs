//! # ferrite-trace: block I/O traces as streams of block requests
//!
//! Parsers for the block traces ferrite replays (CloudPhysics' vSCSI
//! trace, Tectonic's chunk trace, fio's iolog v2), each turned into one
//! stream of [`BlockRequest`]s in 4 KiB blocks (rounding rule in
//! [`request`]); times are microseconds from the trace's first request.
//! [`range_op`] turns such a stream into the operations a block map (RASK)
//! sees: writes become puts of fresh physical runs, reads gets, trims
//! deletes, optionally through RASK's I/O compaction window.
//! [`map_ops`] records such operations as a running volume issues them
//! and reads the recording back; [`RecordingMap`] is the volume's block
//! map that writes that recording.
//!
//! Used by `ferrite rask load`, `ferrite trace` and the benchmark
//! harness. A malformed line is a [`TraceError`] naming the file and line,
//! never a panic.

mod cloudphysics;
mod error;
mod fio_iolog;
pub mod map_ops;
pub mod range_op;
mod recording_map;
pub mod request;
mod tectonic;

use std::path::Path;

pub use cloudphysics::parse_cloudphysics;
pub use error::{Result, TraceError};
pub use fio_iolog::{parse_fio_iolog, write_fio_iolog};
pub use range_op::{compact_writes, ops_from_trace, RangeOp, RunAllocator};
pub use recording_map::RecordingMap;
pub use request::{BlockOp, BlockRequest, TraceSummary, BLOCK_BYTES};
pub use tectonic::{parse_tectonic, TECTONIC_CHUNK_BLOCKS};

/// Reads a trace file as text.
fn read_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| TraceError::Data {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// Trace formats by the names the tools accept.
pub const FORMATS: [&str; 3] = ["cloudphysics", "tectonic", "fio"];

/// Parses `path` as the trace format called `format` (one of [`FORMATS`]).
pub fn parse_named(format: &str, path: &Path) -> Result<Vec<BlockRequest>> {
    check_format(format)?;
    parse_as(format, &read_text(path)?, path)
}

/// Parses `text`, the contents of a trace in the format called `format`;
/// errors name the source `<input>`.
pub fn parse_str(format: &str, text: &str) -> Result<Vec<BlockRequest>> {
    check_format(format)?;
    parse_as(format, text, Path::new("<input>"))
}

fn check_format(format: &str) -> Result<()> {
    if FORMATS.contains(&format) {
        return Ok(());
    }
    Err(TraceError::UnknownFormat {
        format: format.to_string(),
        known: FORMATS.join(", "),
    })
}

fn parse_as(format: &str, text: &str, path: &Path) -> Result<Vec<BlockRequest>> {
    match format {
        "cloudphysics" => cloudphysics::parse_text(text, path),
        "tectonic" => tectonic::parse_text(text, path),
        _ => fio_iolog::parse_text(text, path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
