//! [`Snapshot`]: a read view of a store at one instant, shared by the
//! iterators made from it.

use std::ops::RangeBounds;
use std::sync::Arc;

use ferrite_core::{KeyRange, OwnedKeyRange, Result, ScanVisitor, StoreSnapshot};

use crate::iter::Iter;
use crate::region::Region;

/// What a store held when the snapshot was taken: it sees exactly the
/// writes completed before [`crate::Store::snapshot`], whatever is
/// written, flushed, compacted or checkpointed after. Cheap to clone (the
/// clones share one view).
///
/// What it costs depends on the engine: the B+trees (and ZKV) keep the
/// old version of each key written while it lives, in memory, bounded by
/// the cache budget (at least 16 MiB), past which reads answer
/// [`ferrite_core::Error::SnapshotTooOld`]; the LSM-tree keeps the
/// memtables and tables it reads (replaced tables hold their disk space
/// until it goes). `Stats::snapshots` and `Stats::snapshot_bytes` show it.
///
/// A snapshot taken by [`crate::Store::snapshot`] reads the default key
/// space; [`Snapshot::keyspace`] reads a named one at the same instant.
#[derive(Clone)]
pub struct Snapshot {
    /// The engine's whole key space.
    raw: Arc<dyn StoreSnapshot>,
    /// `raw` as this snapshot's key space sees it.
    inner: Arc<dyn StoreSnapshot>,
}

impl Snapshot {
    pub(crate) fn new(raw: Arc<dyn StoreSnapshot>, region: Region) -> Self {
        Self {
            inner: region.view(raw.clone()),
            raw,
        }
    }

    /// The same instant, seen in `region`.
    pub(crate) fn in_region(&self, region: Region) -> Self {
        Self::new(self.raw.clone(), region)
    }

    /// The value `key` had.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        self.inner.get(key.as_ref())
    }

    /// Whether `key` was present.
    pub fn contains_key(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        Ok(self.get(key)?.is_some())
    }

    /// Every pair, ascending (`.rev()` for descending).
    pub fn iter(&self) -> Iter {
        self.iter_over(OwnedKeyRange::all())
    }

    pub(crate) fn iter_over(&self, range: OwnedKeyRange) -> Iter {
        Iter::new(self.inner.clone(), range)
    }

    /// The pairs in `range` (`a..b`, `a..=b`, `a..`, `..b`).
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Iter {
        Iter::new(self.inner.clone(), OwnedKeyRange::new(range))
    }

    /// The pairs whose key starts with `prefix`.
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Iter {
        Iter::new(self.inner.clone(), OwnedKeyRange::prefix(prefix.as_ref()))
    }

    /// Visits `range` ascending with a callback, the cheapest way to read
    /// a range once (no copies of the pairs).
    pub fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.inner.scan(range, visit)
    }

    /// As [`Snapshot::scan`], descending.
    pub fn scan_rev(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.inner.scan_rev(range, visit)
    }
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Snapshot")
    }
}
