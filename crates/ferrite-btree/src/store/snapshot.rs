//! Snapshots of the B+tree. The tree updates pages in place, so a
//! snapshot is the current state corrected by the old versions the write
//! path captures for it (`ferrite_core::engine::SnapshotChain`): a write
//! records the value it replaces while a snapshot is live, a range delete
//! every pair it removes.
//!
//! Cost: while a snapshot is live, each write reads its key's current
//! value once (under the write lock, so mostly from the pool), and the
//! replaced values stay in memory until the oldest snapshot needing them
//! goes. Bound: the store's cache budget (at least 16 MiB) of such bytes;
//! past it every live snapshot answers `Error::SnapshotTooOld`.

use std::sync::Arc;

use ferrite_core::engine::{ChainSnapshot, CurrentState};
use ferrite_core::{KeyRange, Result, ScanVisitor, StoreSnapshot};

use super::Shared;

/// The store's current state, as a snapshot reads it.
pub(super) struct Current(Arc<Shared>);

impl CurrentState for Current {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.0.get(key)
    }

    fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.0.scan(range, visit)
    }

    fn scan_rev(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.0.scan_rev(range, visit)
    }
}

/// A read view of the tree as it was when taken.
pub(super) struct BTreeSnapshot {
    chain: ChainSnapshot<Current>,
    /// The batches applied when it was taken.
    applied: u64,
}

impl BTreeSnapshot {
    /// Registers a snapshot between two writes (under the tree's lock).
    pub(super) fn take(shared: &Arc<Shared>) -> Self {
        let st = shared.state.read();
        let pin = shared.snapshots.take();
        Self {
            chain: ChainSnapshot::new(Current(shared.clone()), shared.snapshots.clone(), pin),
            applied: st.applied,
        }
    }
}

impl StoreSnapshot for BTreeSnapshot {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.chain.get(key)
    }

    fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.chain.scan_dir(range, false, visit)
    }

    fn scan_rev(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.chain.scan_dir(range, true, visit)
    }

    fn write_sequence(&self) -> Option<u64> {
        Some(self.applied)
    }
}
