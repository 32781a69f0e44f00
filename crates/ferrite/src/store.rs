//! [`Store`]: the handle an application holds, over any engine.
//!
//! Every method takes `&self` and the handle is `Send + Sync`: share it
//! between threads in an `Arc`. Writes are atomic one by one, batches as a
//! whole; reads see every write completed before they started. A store is
//! closed by [`Store::close`], which reports what failed; dropping it
//! closes it too, on a best-effort basis (a failure is only logged).

use std::ops::{Range, RangeBounds};
use std::sync::Arc;

use ferrite_core::engine::Instrumented;
use ferrite_core::{
    EngineKind, KeyRange, KvStore, OwnedKeyRange, Result, ScanVisitor, Stats, WriteBatch,
};

use crate::config::Config;
use crate::iter::Iter;
use crate::snapshot::Snapshot;

/// An open store of any engine.
///
/// Errors every operation may return: [`ferrite_core::Error::Device`]
/// (I/O failed; the store is then poisoned, and every later call returns
/// [`ferrite_core::Error::Poisoned`] until it is reopened, which recovers
/// every acknowledged write), [`ferrite_core::Error::Corruption`] (a
/// checksum or structure check failed on bytes read back). Operations
/// taking keys and values add [`ferrite_core::Error::EmptyKey`],
/// [`ferrite_core::Error::KeyTooLarge`] and
/// [`ferrite_core::Error::ValueTooLarge`]; writes on a full device
/// return an error for which [`ferrite_core::Error::is_no_space`] holds.
pub struct Store {
    inner: Box<dyn Instrumented>,
    /// Boxed: a store handle stays two pointers wide.
    config: Box<Config>,
}

impl Store {
    pub(crate) fn new(inner: Box<dyn Instrumented>, config: Config) -> Self {
        Self {
            inner,
            config: Box::new(config),
        }
    }

    /// The engine the store runs.
    pub fn engine(&self) -> EngineKind {
        self.config.engine()
    }

    /// The configuration the store was opened with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        self.inner.get(key.as_ref())
    }

    /// The values of `keys`, in their order (`None` where a key is
    /// absent), each read as [`Store::get`] reads it. For bindings that
    /// pay per call (a language runtime's lock, a round trip), one call
    /// for many keys; the first error stops the lookups.
    pub fn get_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<Option<Vec<u8>>>> {
        keys.iter().map(|k| self.inner.get(k.as_ref())).collect()
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        Ok(self.get(key)?.is_some())
    }

    /// Sets `key` to `value`.
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        self.inner.put(key.as_ref(), value.as_ref())
    }

    /// Removes `key` (removing an absent key is not an error).
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        self.inner.delete(key.as_ref())
    }

    /// Removes every key in `range` (`start..end`: start included, end
    /// not), atomically. The LSM-tree writes one range tombstone, which
    /// reads and compactions apply; the B+trees rewrite each leaf the
    /// range covers once (a leaf wholly inside is emptied in one step,
    /// not key by key); ZKV deletes the keys it finds, as one logged
    /// batch. Errors
    /// besides the common ones: [`ferrite_core::Error::EmptyRange`] when
    /// `end <= start`.
    pub fn delete_range<K: AsRef<[u8]>>(&self, range: Range<K>) -> Result<()> {
        self.inner
            .delete_range(range.start.as_ref(), range.end.as_ref())
    }

    /// Sets `key` to `new` (`None` deletes it) if its value is now
    /// `expected` (`None`: absent); says whether it did. The comparison
    /// and the write are one atomic step against every other write, so
    /// read-modify-write loops (counters, appends, set-if-absent) built on
    /// it lose no update.
    pub fn compare_and_swap(
        &self,
        key: impl AsRef<[u8]>,
        expected: Option<&[u8]>,
        new: Option<&[u8]>,
    ) -> Result<bool> {
        self.inner.compare_and_swap(key.as_ref(), expected, new)
    }

    /// Applies every operation of `batch` atomically, in order: after a
    /// crash, all of it or none of it is there.
    pub fn write(&self, batch: &WriteBatch) -> Result<()> {
        self.inner.write_batch(batch)
    }

    /// Loads strictly ascending pairs into an empty store, faster than
    /// writing them (the B+trees build their pages bottom-up). Errors
    /// besides the common ones: [`ferrite_core::Error::NotAscending`].
    pub fn bulk_load(&self, sorted: impl IntoIterator<Item = (Vec<u8>, Vec<u8>)>) -> Result<u64> {
        self.inner.bulk_load(&mut sorted.into_iter())
    }

    /// Every pair, ascending (`.rev()` for descending), as of now: the
    /// iterator reads a snapshot it takes, so writes made while it runs do
    /// not show.
    pub fn iter(&self) -> Iter {
        self.iter_over(OwnedKeyRange::all())
    }

    /// The pairs in `range` (`a..b`, `a..=b`, `a..`, `..b`), as of now.
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Iter {
        self.iter_over(OwnedKeyRange::new(range))
    }

    /// The pairs whose key starts with `prefix`, as of now.
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Iter {
        self.iter_over(OwnedKeyRange::prefix(prefix.as_ref()))
    }

    fn iter_over(&self, range: OwnedKeyRange) -> Iter {
        match self.inner.snapshot() {
            Ok(s) => Iter::new(Arc::from(s), range),
            Err(e) => Iter::failed(Arc::new(Nothing), e),
        }
    }

    /// Visits `range` ascending with a callback, without a snapshot or
    /// copies: the cheapest read of a range. Return
    /// `ControlFlow::Break(())` to stop.
    pub fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.inner.scan(range, visit)
    }

    /// As [`Store::scan`], descending.
    pub fn scan_rev(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.inner.scan_rev(range, visit)
    }

    /// A read view of the store as it is now (see [`Snapshot`] for what
    /// each engine pays to keep it).
    pub fn snapshot(&self) -> Result<Snapshot> {
        Ok(Snapshot::new(Arc::from(self.inner.snapshot()?)))
    }

    /// Writes what is in memory (dirty pages, memtables) to the device,
    /// so recovery has less log to replay.
    pub fn flush(&self) -> Result<()> {
        self.inner.flush()
    }

    /// Makes every completed write durable, whatever the sync mode.
    pub fn sync(&self) -> Result<()> {
        self.inner.sync()
    }

    /// Counters since the store was opened; the engine's own through
    /// [`Stats::engine`].
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }

    /// Checks every on-disk and in-memory invariant (order, checksums,
    /// structure); slow.
    pub fn verify(&self) -> Result<()> {
        self.inner.verify()
    }

    /// Stops background work, writes what is in memory out, syncs, and
    /// reports the first failure. After an error the store is closed all
    /// the same; reopening recovers from what is durable.
    pub fn close(self) -> Result<()> {
        let inner: Box<dyn KvStore> = self.inner;
        inner.close()
    }

    /// The store as the engine trait, for code generic over stores.
    pub fn as_kv(&self) -> &dyn KvStore {
        &*self.inner
    }

    /// The store with the hooks benchmarks use.
    #[cfg(feature = "bench-internals")]
    pub fn into_instrumented(self) -> Box<dyn Instrumented> {
        self.inner
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("engine", &self.engine())
            .finish()
    }
}

/// The snapshot an iterator holds when none could be taken (it yields
/// the error and never reads).
struct Nothing;

impl ferrite_core::StoreSnapshot for Nothing {
    fn get(&self, _: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(None)
    }

    fn scan(&self, _: KeyRange<'_>, _: &mut ScanVisitor<'_>) -> Result<()> {
        Ok(())
    }

    fn scan_rev(&self, _: KeyRange<'_>, _: &mut ScanVisitor<'_>) -> Result<()> {
        Ok(())
    }
}
