//! The volume's block map on RASK: a [`DurableRask`] over `PhysicalRun`s.
//!
//! RASK's own background sync and checkpoint are off: the volume decides
//! when the map's log reaches the device, always after the data log's
//! sync (see [`crate::BlockMap`]), and checkpoints only then.

use std::path::Path;

use ferrite_core::{Options, SyncMode};
use ferrite_rask::{BlockRange, DurableOptions, DurableRask, PhysicalRun, Segment};

use crate::block_map::{BlockMap, MapKind};
use crate::error::Result;

pub struct RaskMap {
    inner: DurableRask<PhysicalRun>,
}

impl RaskMap {
    pub fn open(dir: &Path, direct_io: bool) -> Result<Self> {
        let store = Options::default()
            .sync(SyncMode::Never)
            .direct_io(direct_io);
        let opts = DurableOptions {
            store,
            checkpoint_log_bytes: u64::MAX,
            log_write_threshold: usize::MAX,
            ..DurableOptions::default()
        };
        Ok(Self {
            inner: DurableRask::open(dir, opts)?,
        })
    }

    /// The index itself (for its statistics).
    pub fn durable(&self) -> &DurableRask<PhysicalRun> {
        &self.inner
    }
}

impl BlockMap for RaskMap {
    fn kind(&self) -> MapKind {
        MapKind::Rask
    }

    fn lookup(&self, range: BlockRange, out: &mut Vec<Segment<PhysicalRun>>) {
        self.inner.index().get_into(range, out);
    }

    fn map(&self, range: BlockRange, run: PhysicalRun) -> Result<()> {
        Ok(self.inner.put(range, run)?)
    }

    fn unmap(&self, range: BlockRange) -> Result<()> {
        Ok(self.inner.delete(range)?)
    }

    fn sync(&self) -> Result<()> {
        Ok(self.inner.sync()?)
    }

    fn log_position(&self) -> u64 {
        self.inner.log_position()
    }

    fn sync_to(&self, position: u64) -> Result<()> {
        Ok(self.inner.sync_to(position)?)
    }

    fn checkpoint(&self) -> Result<()> {
        Ok(self.inner.snapshot()?)
    }

    fn log_bytes(&self) -> u64 {
        self.inner.log_bytes()
    }

    fn for_each(&self, f: &mut dyn FnMut(BlockRange, PhysicalRun)) {
        self.inner.index().for_each_mapped(f);
    }

    fn entries(&self) -> u64 {
        self.inner.stats().entries
    }

    fn settle(&self) {
        self.inner.index().reclaim();
    }

    fn abandon(&self) {
        self.inner.abandon();
    }

    fn recovery_seconds(&self) -> f64 {
        self.inner.recovery().seconds
    }
}
