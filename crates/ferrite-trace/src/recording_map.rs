//! A block map that records what is asked of it: every lookup, map and
//! unmap goes to the map underneath and, as a [`crate::map_ops`]
//! record, to a recording file (`ferrite volume serve --record-map-ops`),
//! so the stream a real client made can be replayed through RASK and its
//! baselines (`ferrite repro rask --ops`).
//!
//! Records are appended after the call they describe returns, under their
//! own lock: concurrent calls may be recorded in a slightly different
//! order than the map saw them, which a replay (one thread, an index
//! built from empty) does not depend on. A recording that fails (a full
//! disk) stops with a logged error; the volume goes on, since its data
//! never depended on the recording.

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use ferrite_rask::{BlockRange, PhysicalRun, Segment};
use ferrite_volume::{BlockMap, MapKind, Result, VolumeError};

use crate::map_ops::Recorder;
use crate::RangeOp;

pub struct RecordingMap {
    inner: Box<dyn BlockMap>,
    /// `None` once recording failed.
    recorder: Mutex<Option<Recorder>>,
}

impl RecordingMap {
    /// `inner`, recorded into a new file at `path`.
    pub fn new(inner: Box<dyn BlockMap>, path: &Path) -> Result<Self> {
        let recorder = Recorder::create(path).map_err(|source| VolumeError::Io {
            what: format!("creating the map-ops recording {}", path.display()),
            source,
        })?;
        Ok(Self {
            inner,
            recorder: Mutex::new(Some(recorder)),
        })
    }

    /// The recorder; a panic elsewhere while it was held leaves a
    /// recording that may miss a record, which a replay tolerates.
    fn recorder(&self) -> MutexGuard<'_, Option<Recorder>> {
        self.recorder.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn record(&self, op: RangeOp) {
        let mut slot = self.recorder();
        if let Some(r) = slot.as_mut() {
            if let Err(e) = r.record(&op) {
                log::error!("map-ops recording {} stopped: {e}", r.path().display());
                *slot = None;
            }
        }
    }

    fn flush_recording(&self) {
        let mut slot = self.recorder();
        if let Some(r) = slot.as_mut() {
            if let Err(e) = r.flush() {
                log::error!("map-ops recording {} stopped: {e}", r.path().display());
                *slot = None;
            }
        }
    }
}

impl BlockMap for RecordingMap {
    fn kind(&self) -> MapKind {
        self.inner.kind()
    }

    fn lookup(&self, range: BlockRange, out: &mut Vec<Segment<PhysicalRun>>) {
        self.inner.lookup(range, out);
        self.record(RangeOp::Get(range));
    }

    fn map(&self, range: BlockRange, run: PhysicalRun) -> Result<()> {
        self.inner.map(range, run)?;
        self.record(RangeOp::Put(range, run));
        Ok(())
    }

    fn unmap(&self, range: BlockRange) -> Result<()> {
        self.inner.unmap(range)?;
        self.record(RangeOp::Delete(range));
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        self.inner.sync()?;
        self.flush_recording();
        Ok(())
    }

    fn log_position(&self) -> u64 {
        self.inner.log_position()
    }

    fn sync_to(&self, position: u64) -> Result<()> {
        self.inner.sync_to(position)?;
        // The recording is as complete as the last flush the client saw.
        self.flush_recording();
        Ok(())
    }

    fn checkpoint(&self) -> Result<()> {
        self.inner.checkpoint()
    }

    fn log_bytes(&self) -> u64 {
        self.inner.log_bytes()
    }

    fn for_each(&self, f: &mut dyn FnMut(BlockRange, PhysicalRun)) {
        self.inner.for_each(f)
    }

    fn entries(&self) -> u64 {
        self.inner.entries()
    }

    fn abandon(&self) {
        self.inner.abandon()
    }

    fn settle(&self) {
        self.inner.settle()
    }

    fn recovery_seconds(&self) -> f64 {
        self.inner.recovery_seconds()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_volume::RaskMap;

    #[test]
    fn every_call_is_recorded_in_order_after_it_succeeds() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ops");
        let inner = Box::new(RaskMap::open(&dir.path().join("map"), false).unwrap());
        let map = RecordingMap::new(inner, &file).unwrap();
        let r = |l, n| BlockRange::with_len(l, n).unwrap();
        let run = PhysicalRun::new(0, 100).unwrap();
        map.map(r(10, 8), run).unwrap();
        let mut segs = Vec::new();
        map.lookup(r(12, 2), &mut segs);
        assert_eq!(segs.len(), 1);
        map.unmap(r(10, 4)).unwrap();
        // A sync pushes the records so far to the file.
        map.sync().unwrap();
        let want = vec![
            RangeOp::Put(r(10, 8), run),
            RangeOp::Get(r(12, 2)),
            RangeOp::Delete(r(10, 4)),
        ];
        let synced = crate::map_ops::read(&file).unwrap();
        assert_eq!(synced.ops, want);
        map.lookup(r(0, 64), &mut segs);
        drop(map);
        let all = crate::map_ops::read(&file).unwrap();
        assert_eq!(all.ops.len(), 4);
        assert_eq!(all.ops[3], RangeOp::Get(r(0, 64)));
        assert_eq!(all.torn_tail, 0);
    }
}
