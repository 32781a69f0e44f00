//! Snapshots of ZKV. The merged filter, the delta buffers and the leaves
//! replace a key's value in place, so a snapshot is the current state
//! corrected by the old versions the write path captures for it
//! (`ferrite_core::engine::SnapshotChain`), under the lock writes apply
//! under (the merged filter's; the tree's for the baselines): a write
//! records the value it replaces while a snapshot is live, a range delete
//! every pair it removes.
//!
//! Cost: while a snapshot is live, each write reads its key's current
//! value once (filter, batch array, leaf), and the replaced values stay in
//! memory until the oldest snapshot needing them goes. Bound: the store's
//! cache budget (at least 16 MiB) of such bytes; past it every live
//! snapshot answers `Error::SnapshotTooOld`. Reclamation and checkpoints
//! need nothing from snapshots: they read through the current state.

use std::sync::Arc;

use ferrite_core::engine::{ChainSnapshot, CurrentState};
use ferrite_core::{KeyRange, Result, ScanVisitor, StoreSnapshot};

use super::Inner;

/// The store's current state, as a snapshot reads it.
pub(super) struct Current(Arc<Inner>);

impl CurrentState for Current {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.0.check()?;
        self.0.get(key)
    }

    fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.0.check()?;
        self.0.scan(range, visit).map(drop)
    }

    fn scan_rev(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.0.check()?;
        self.0.scan_rev(range, visit).map(drop)
    }
}

/// A read view of the store as it was when taken.
pub(super) struct ZkvSnapshot(ChainSnapshot<Current>);

impl ZkvSnapshot {
    /// Registers a snapshot between two writes: under the lock writes
    /// apply under.
    pub(super) fn take(inner: &Arc<Inner>) -> Self {
        let pin = if inner.opts.buffers_writes() {
            let _mf = inner.mf.lock();
            inner.snapshots.take()
        } else {
            let _tree = inner.tree.write();
            inner.snapshots.take()
        };
        Self(ChainSnapshot::new(
            Current(inner.clone()),
            inner.snapshots.clone(),
            pin,
        ))
    }
}

impl StoreSnapshot for ZkvSnapshot {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.0.get(key)
    }

    fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.0.scan_dir(range, false, visit)
    }

    fn scan_rev(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.0.scan_dir(range, true, visit)
    }
}
