//! A recorded stream of block-map operations: what a running volume asked
//! of its map (`ferrite volume serve --record-map-ops FILE`), replayed by
//! `ferrite repro rask --ops FILE` through RASK and its baselines, so the
//! index is judged on the stream a real client produced.
//!
//! Format: the 8-byte magic `FRMAPOPS`, a `u32` version (1), then records
//! until the end, each a tag byte and little-endian fields:
//! - `0` put: `start: u64`, `blocks: u64`, `run: u64` (a `PhysicalRun`'s
//!   packed bits);
//! - `1` delete: `start: u64`, `blocks: u64`;
//! - `2` get: `start: u64`, `blocks: u64`.
//!
//! A recording cut short by a crash ends in a partial record, which the
//! reader drops (and reports); anything else that is not a record (an
//! unknown tag, an empty or overflowing range, a run no map accepts) is a
//! typed error naming its offset. The reader never panics.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use ferrite_rask::{BlockRange, PhysicalRun, RangeValue};

use crate::error::{Result, TraceError};
use crate::range_op::RangeOp;

const MAGIC: &[u8; 8] = b"FRMAPOPS";
const VERSION: u32 = 1;
const HEADER: usize = 12;
const TAG_PUT: u8 = 0;
const TAG_DELETE: u8 = 1;
const TAG_GET: u8 = 2;

/// Appends one operation's record to `out`.
pub fn encode(op: &RangeOp, out: &mut Vec<u8>) {
    let (tag, r, run) = match *op {
        RangeOp::Put(r, run) => (TAG_PUT, r, Some(run)),
        RangeOp::Delete(r) => (TAG_DELETE, r, None),
        RangeOp::Get(r) => (TAG_GET, r, None),
    };
    out.push(tag);
    out.extend_from_slice(&r.l().to_le_bytes());
    out.extend_from_slice(&r.len().to_le_bytes());
    if let Some(run) = run {
        out.extend_from_slice(&run.to_bits().to_le_bytes());
    }
}

/// The file header.
pub fn header() -> Vec<u8> {
    let mut h = MAGIC.to_vec();
    h.extend_from_slice(&VERSION.to_le_bytes());
    h
}

/// What a recording holds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Recording {
    pub ops: Vec<RangeOp>,
    /// Bytes of a partial last record (a recorder killed mid-write).
    pub torn_tail: usize,
}

/// Decodes a whole recording; `source` names it in errors.
pub fn decode(bytes: &[u8], source: &Path) -> Result<Recording> {
    let err = |at: usize, reason: String| TraceError::Data {
        path: source.to_path_buf(),
        reason: format!("map-ops record at byte {at}: {reason}"),
    };
    if bytes.len() < HEADER || &bytes[..8] != MAGIC {
        return Err(err(
            0,
            "not a map-ops recording (no FRMAPOPS header)".into(),
        ));
    }
    let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    if version != VERSION {
        return Err(err(
            8,
            format!("version {version}, this reader knows {VERSION}"),
        ));
    }
    let u64_at = |at: usize| -> Option<u64> {
        let b: [u8; 8] = bytes.get(at..at + 8)?.try_into().ok()?;
        Some(u64::from_le_bytes(b))
    };
    let mut rec = Recording::default();
    let mut at = HEADER;
    while at < bytes.len() {
        let tag = bytes[at];
        let len = match tag {
            TAG_PUT => 25,
            TAG_DELETE | TAG_GET => 17,
            t => return Err(err(at, format!("unknown tag {t}"))),
        };
        if at + len > bytes.len() {
            rec.torn_tail = bytes.len() - at;
            break;
        }
        let (start, blocks) = (u64_at(at + 1), u64_at(at + 9));
        let (Some(start), Some(blocks)) = (start, blocks) else {
            return Err(err(at, "short record".into()));
        };
        let range = BlockRange::with_len(start, blocks)
            .map_err(|e| err(at, format!("range {start}+{blocks}: {e}")))?;
        rec.ops.push(match tag {
            TAG_PUT => {
                let run = PhysicalRun::from_bits(u64_at(at + 17).unwrap_or(u64::MAX));
                if let Some(reason) = run.check(range) {
                    return Err(err(at, format!("run {run:?}: {reason}")));
                }
                RangeOp::Put(range, run)
            }
            TAG_DELETE => RangeOp::Delete(range),
            _ => RangeOp::Get(range),
        });
        at += len;
    }
    Ok(rec)
}

/// Reads the recording at `path`.
pub fn read(path: &Path) -> Result<Recording> {
    let bytes = std::fs::read(path).map_err(|e| TraceError::Data {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    decode(&bytes, path)
}

/// Appends operations to a recording file as they happen (buffered; the
/// buffer reaches the file when it fills and when the recorder is
/// dropped).
pub struct Recorder {
    path: PathBuf,
    out: BufWriter<std::fs::File>,
    scratch: Vec<u8>,
}

impl Recorder {
    /// Creates (or truncates) the recording at `path`.
    pub fn create(path: &Path) -> std::io::Result<Self> {
        let mut out = BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
        out.write_all(&header())?;
        Ok(Self {
            path: path.to_path_buf(),
            out,
            scratch: Vec::with_capacity(32),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn record(&mut self, op: &RangeOp) -> std::io::Result<()> {
        self.scratch.clear();
        encode(op, &mut self.scratch);
        self.out.write_all(&self.scratch)
    }

    /// Pushes the buffered records to the file.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn op() -> impl Strategy<Value = RangeOp> {
        (
            0u64..1 << 40,
            1u64..1 << 20,
            0u8..3,
            0u16..100,
            0u64..1 << 40,
        )
            .prop_map(|(start, len, tag, file, block)| {
                let r = BlockRange::with_len(start, len).unwrap();
                match tag {
                    0 => RangeOp::Put(r, PhysicalRun::new(file, block).unwrap()),
                    1 => RangeOp::Delete(r),
                    _ => RangeOp::Get(r),
                }
            })
    }

    proptest! {
        #[test]
        fn a_recording_reads_back_as_written_and_a_cut_drops_only_the_tail(
            ops in proptest::collection::vec(op(), 0..200),
            cut in 0usize..26,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("ops");
            let mut r = Recorder::create(&path).unwrap();
            for o in &ops {
                r.record(o).unwrap();
            }
            drop(r);
            let back = read(&path).unwrap();
            prop_assert_eq!(&back.ops, &ops);
            prop_assert_eq!(back.torn_tail, 0);
            let bytes = std::fs::read(&path).unwrap();
            std::fs::remove_file(&path).unwrap();
            if let Some(last) = ops.last() {
                let mut one = Vec::new();
                encode(last, &mut one);
                let cut = cut % one.len();
                if cut > 0 {
                    let torn = decode(&bytes[..bytes.len() - one.len() + cut], &path).unwrap();
                    prop_assert_eq!(&torn.ops[..], &ops[..ops.len() - 1]);
                    prop_assert_eq!(torn.torn_tail, cut);
                }
            }
        }

        #[test]
        fn garbage_is_an_error_or_a_recording_never_a_panic(
            body in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let mut bytes = header();
            bytes.extend_from_slice(&body);
            let _ = decode(&bytes, Path::new("<garbage>"));
            let _ = decode(&body, Path::new("<garbage>"));
        }
    }

    #[test]
    fn bad_records_name_their_offset() {
        let p = Path::new("<t>");
        assert!(decode(b"FRMAPOPX\x01\0\0\0", p).is_err());
        assert!(decode(b"FRMAPOPS\x02\0\0\0", p).is_err());
        let mut b = header();
        b.push(7);
        let e = decode(&b, p).unwrap_err().to_string();
        assert!(e.contains("byte 12") && e.contains("unknown tag 7"), "{e}");
        let mut b = header();
        b.push(TAG_GET);
        b.extend_from_slice(&5u64.to_le_bytes());
        b.extend_from_slice(&0u64.to_le_bytes());
        assert!(decode(&b, p).is_err(), "an empty range is refused");
        let mut b = header();
        b.push(TAG_PUT);
        b.extend_from_slice(&5u64.to_le_bytes());
        b.extend_from_slice(&1u64.to_le_bytes());
        b.extend_from_slice(&u64::MAX.to_le_bytes());
        assert!(decode(&b, p).is_err(), "the tombstone is no run to put");
    }
}
