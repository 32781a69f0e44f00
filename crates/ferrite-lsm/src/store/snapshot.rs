//! Snapshots of the LSM-tree: a sequence number and the `SuperVersion`
//! current when it was read. Every source keeps each write's sequence
//! number, and tables only ever hold writes older than any memtable's, so
//! reading that `SuperVersion` at that number sees exactly the writes
//! completed before the snapshot, whatever is written, flushed or
//! compacted after.
//!
//! Invariants:
//! - the sequence number is read before the `SuperVersion`, so every
//!   write it covers is in one of that version's sources (a memtable
//!   rotated in between is still in its immutable list or a table);
//! - a snapshot pins its memtables in memory and its tables on the
//!   device: a table a compaction replaced keeps its extent until the last
//!   snapshot reading it goes (`Table`'s drop frees it). That is the cost,
//!   reported as `snapshot_bytes`; a snapshot never becomes too old.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use ferrite_core::{KeyRange, Result, ScanVisitor, StoreSnapshot};
use parking_lot::Mutex;

use super::read::View;
use super::{Inner, SuperVersion};

/// A read view of the tree at one sequence number.
pub(super) struct LsmSnapshot {
    inner: Arc<Inner>,
    sv: Arc<SuperVersion>,
    seq: u64,
}

impl LsmSnapshot {
    pub(super) fn take(inner: &Arc<Inner>) -> Self {
        let (sv, seq) = inner.current_view();
        inner.snapshots.register(&sv);
        Self {
            inner: inner.clone(),
            sv,
            seq,
        }
    }

    /// The state it reads and its sequence number.
    pub(super) fn pinned(&self) -> (&SuperVersion, u64) {
        (&self.sv, self.seq)
    }

    fn view(&self) -> View<'_> {
        View {
            sv: &self.sv,
            seq: self.seq,
        }
    }
}

impl Drop for LsmSnapshot {
    fn drop(&mut self) {
        self.inner.snapshots.release();
    }
}

impl StoreSnapshot for LsmSnapshot {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        ferrite_core::engine::check_key(key)?;
        self.inner.check()?;
        self.inner.get_at(&self.view(), key)
    }

    fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.inner.check()?;
        self.inner
            .scan_at(&self.view(), range, false, visit)
            .map(drop)
    }

    /// The last sequence number it shows: every batch moves it.
    fn write_sequence(&self) -> Option<u64> {
        Some(self.seq)
    }

    fn scan_rev(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.inner.check()?;
        self.inner
            .scan_at(&self.view(), range, true, visit)
            .map(drop)
    }
}

/// The `SuperVersion`s live snapshots read (each once, however many
/// snapshots read it), for counting what they pin, and how many
/// snapshots live.
#[derive(Default)]
pub(super) struct Pinned {
    held: Mutex<Vec<Weak<SuperVersion>>>,
    live: AtomicU64,
}

/// Live snapshots and the bytes they keep that the current state does not.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct PinnedCounts {
    pub snapshots: u64,
    pub bytes: u64,
}

impl Pinned {
    /// Counts a new snapshot of `sv`. The list holds distinct versions
    /// only: snapshots taken while one version is current (all of them,
    /// between two flushes) share its entry, so the list stays as short
    /// as the versions pinned, whatever the rate of snapshots.
    fn register(&self, sv: &Arc<SuperVersion>) {
        self.live.fetch_add(1, Ordering::Relaxed);
        let mut held = self.held.lock();
        if held
            .iter()
            .any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(sv)))
        {
            return;
        }
        held.retain(|w| w.strong_count() > 0);
        held.push(Arc::downgrade(sv));
    }

    fn release(&self) {
        self.live.fetch_sub(1, Ordering::Relaxed);
    }

    /// Counts live snapshots and the table and memtable bytes they hold
    /// beyond `current`'s, each table or memtable once.
    pub(super) fn measure(&self, current: &SuperVersion) -> PinnedCounts {
        let live: Vec<Arc<SuperVersion>> = {
            let mut held = self.held.lock();
            held.retain(|w| w.strong_count() > 0);
            held.iter().filter_map(Weak::upgrade).collect()
        };
        let mut seen_tables: HashSet<u64> =
            current.version.tables().map(|(_, _, t)| t.id).collect();
        let mut seen_mems: HashSet<u64> = current.memtables().map(|m| m.id()).collect();
        let mut bytes = 0u64;
        for sv in &live {
            for (_, _, t) in sv.version.tables() {
                if seen_tables.insert(t.id) {
                    bytes += t.bytes();
                }
            }
            for m in sv.memtables() {
                if seen_mems.insert(m.id()) {
                    bytes += m.bytes() as u64;
                }
            }
        }
        PinnedCounts {
            snapshots: self.live.load(Ordering::Relaxed),
            bytes,
        }
    }
}
