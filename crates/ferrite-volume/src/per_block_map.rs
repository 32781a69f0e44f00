//! The baseline block map: a `BTreeMap` from each logical block to its
//! physical block, made durable with a redo log of the same range records
//! RASK logs. It is what a team would write first; the volume runs on it
//! so RASK's memory and speed are measured against it in one benchmark.
//!
//! It keeps no snapshot: a checkpoint is a sync, and a reopen replays the
//! whole log (say so wherever its recovery time is reported).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use ferrite_core::WalRecovery;
use ferrite_io::{BlockDevice, DirectFile, DirectFileOptions};
use ferrite_rask::{BlockRange, PhysicalRun, Segment};
use ferrite_wal::Wal;
use parking_lot::RwLock;

use crate::block_map::{BlockMap, MapKind};
use crate::error::{Result, VolumeError};

const OP_MAP: u8 = 1;
const OP_UNMAP: u8 = 2;

pub struct PerBlockMap {
    blocks: RwLock<BTreeMap<u64, u64>>,
    wal: Wal,
    recovery_seconds: f64,
    abandoned: AtomicBool,
}

impl PerBlockMap {
    pub fn open(dir: &Path, direct_io: bool) -> Result<Self> {
        let started = Instant::now();
        std::fs::create_dir_all(dir).map_err(|source| VolumeError::Io {
            what: format!("creating {}", dir.display()),
            source,
        })?;
        let opts = DirectFileOptions {
            direct: direct_io,
            ..DirectFileOptions::default()
        };
        let dev: Arc<dyn BlockDevice> = Arc::new(DirectFile::open_with(dir.join("log"), opts)?);
        let mut blocks = BTreeMap::new();
        let (wal, _) = Wal::open_with(dev, 0, WalRecovery::default(), &mut |p| {
            apply(&mut blocks, p)
                .map_err(|reason| ferrite_core::Error::corruption("per-block map log", reason))
        })?;
        Ok(Self {
            blocks: RwLock::new(blocks),
            wal,
            recovery_seconds: started.elapsed().as_secs_f64(),
            abandoned: AtomicBool::new(false),
        })
    }

    fn log(&self, op: u8, range: BlockRange, run: u64) -> Result<()> {
        self.check()?;
        let mut rec = [0u8; 25];
        rec[0] = op;
        rec[1..9].copy_from_slice(&range.l().to_le_bytes());
        rec[9..17].copy_from_slice(&range.r().to_le_bytes());
        rec[17..25].copy_from_slice(&run.to_le_bytes());
        self.wal.append(&rec)?;
        Ok(())
    }
}

fn apply(blocks: &mut BTreeMap<u64, u64>, p: &[u8]) -> std::result::Result<(), String> {
    if p.len() != 25 {
        return Err(format!("record of {} bytes, want 25", p.len()));
    }
    let u = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&p[at..at + 8]);
        u64::from_le_bytes(b)
    };
    let range = BlockRange::new(u(1), u(9)).map_err(|e| e.to_string())?;
    match p[0] {
        OP_MAP => set(blocks, range, Some(PhysicalRun::from_bits(u(17)))),
        OP_UNMAP => set(blocks, range, None),
        op => return Err(format!("unknown op {op}")),
    }
    Ok(())
}

fn set(blocks: &mut BTreeMap<u64, u64>, range: BlockRange, run: Option<PhysicalRun>) {
    let mut b = range.l();
    loop {
        match run {
            Some(run) => {
                blocks.insert(b, run.offset(b - range.l()).to_bits());
            }
            None => {
                blocks.remove(&b);
            }
        }
        if b == range.r() {
            break;
        }
        b += 1;
    }
}

impl BlockMap for PerBlockMap {
    fn kind(&self) -> MapKind {
        MapKind::PerBlock
    }

    fn lookup(&self, range: BlockRange, out: &mut Vec<Segment<PhysicalRun>>) {
        let blocks = self.blocks.read();
        // Next block not yet answered for (u128: the range may end at u64::MAX).
        let mut pos = range.l() as u128;
        let mut open: Option<(u64, u64, PhysicalRun)> = None; // (l, r, run at l)
        let piece = |l: u128, r: u128, value| Segment {
            range: BlockRange::new(l as u64, r as u64).unwrap_or(BlockRange::block(l as u64)),
            value,
        };
        for (&b, &bits) in blocks.range(range.l()..=range.r()) {
            let run = PhysicalRun::from_bits(bits);
            if let Some((l, r, first)) = open {
                if r + 1 == b && first.offset(b - l) == run {
                    open = Some((l, b, first));
                    pos = b as u128 + 1;
                    continue;
                }
                out.push(piece(l as u128, r as u128, Some(first)));
            }
            if (b as u128) > pos {
                out.push(piece(pos, b as u128 - 1, None));
            }
            open = Some((b, b, run));
            pos = b as u128 + 1;
        }
        if let Some((l, r, first)) = open {
            out.push(piece(l as u128, r as u128, Some(first)));
        }
        if pos <= range.r() as u128 {
            out.push(piece(pos, range.r() as u128, None));
        }
    }

    fn map(&self, range: BlockRange, run: PhysicalRun) -> Result<()> {
        let mut blocks = self.blocks.write();
        self.log(OP_MAP, range, run.to_bits())?;
        set(&mut blocks, range, Some(run));
        Ok(())
    }

    fn unmap(&self, range: BlockRange) -> Result<()> {
        let mut blocks = self.blocks.write();
        self.log(OP_UNMAP, range, 0)?;
        set(&mut blocks, range, None);
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        self.check()?;
        Ok(self.wal.sync()?)
    }

    fn log_position(&self) -> u64 {
        self.wal.position()
    }

    fn sync_to(&self, position: u64) -> Result<()> {
        self.check()?;
        Ok(self.wal.sync_prefix(position)?)
    }

    fn checkpoint(&self) -> Result<()> {
        self.sync()
    }

    fn log_bytes(&self) -> u64 {
        self.wal.len()
    }

    fn for_each(&self, f: &mut dyn FnMut(BlockRange, PhysicalRun)) {
        let blocks = self.blocks.read();
        for (&b, &bits) in blocks.iter() {
            f(BlockRange::block(b), PhysicalRun::from_bits(bits));
        }
    }

    fn entries(&self) -> u64 {
        self.blocks.read().len() as u64
    }

    fn abandon(&self) {
        self.abandoned.store(true, Ordering::SeqCst);
    }

    fn recovery_seconds(&self) -> f64 {
        self.recovery_seconds
    }
}

impl PerBlockMap {
    fn check(&self) -> Result<()> {
        if self.abandoned.load(Ordering::SeqCst) {
            return Err(VolumeError::Poisoned(
                "the map was abandoned after a failure".into(),
            ));
        }
        Ok(())
    }
}

impl Drop for PerBlockMap {
    fn drop(&mut self) {
        if self.abandoned.load(Ordering::SeqCst) {
            return;
        }
        if let Err(e) = self.wal.seal() {
            log::warn!("closing sync of the per-block map's log failed: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(l: u64, h: u64) -> BlockRange {
        BlockRange::new(l, h).unwrap()
    }

    #[test]
    fn lookup_tiles_the_range_and_joins_contiguous_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let m = PerBlockMap::open(dir.path(), false).unwrap();
        let run = |b| PhysicalRun::new(0, b).unwrap();
        m.map(r(10, 19), run(100)).unwrap();
        m.map(r(15, 15), run(500)).unwrap();
        let mut out = Vec::new();
        m.lookup(r(5, 25), &mut out);
        let got: Vec<_> = out
            .iter()
            .map(|s| (s.range.l(), s.range.r(), s.value.map(|v| v.block())))
            .collect();
        assert_eq!(
            got,
            vec![
                (5, 9, None),
                (10, 14, Some(100)),
                (15, 15, Some(500)),
                (16, 19, Some(106)),
                (20, 25, None)
            ]
        );
        out.clear();
        m.lookup(r(0, 3), &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].value, None);
        m.unmap(r(12, 17)).unwrap();
        m.sync().unwrap();
        drop(m);
        let m = PerBlockMap::open(dir.path(), false).unwrap();
        assert_eq!(m.entries(), 4);
        out.clear();
        m.lookup(r(10, 19), &mut out);
        let got: Vec<_> = out
            .iter()
            .map(|s| (s.range.l(), s.range.r(), s.value.map(|v| v.block())))
            .collect();
        assert_eq!(
            got,
            vec![(10, 11, Some(100)), (12, 17, None), (18, 19, Some(108))]
        );
    }
}
