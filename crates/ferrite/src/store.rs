//! [`Store`]: the handle an application holds, over any engine.
//!
//! Every method takes `&self` and the handle is `Send + Sync`: share it
//! between threads in an `Arc`. Writes are atomic one by one, batches as a
//! whole; reads see every write completed before they started. A store is
//! closed by [`Store::close`], which reports what failed; dropping it
//! closes it too, on a best-effort basis (a failure is only logged).

use std::ops::{Range, RangeBounds};
use std::path::Path;
use std::sync::Arc;

use ferrite_core::engine::Instrumented;
use ferrite_core::{
    EngineKind, Error, KeyRange, KvStore, OwnedKeyRange, Result, ScanVisitor, Stats, WriteBatch,
};

use crate::catalog::{Catalog, RESERVED};
use crate::config::{Config, ConfigBuilder};
use crate::iter::Iter;
use crate::reclaimer::{Engine, Reclaimer};
use crate::registry;
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
///
/// The store's own methods read and write its default key space; named
/// keyspaces ([`Store::keyspace`]) share its log, cache and memory
/// budget. Once a store has a named keyspace, the default key space's
/// keys must sort below `0xFF 0xFF` ([`ferrite_core::Error::ReservedKey`]
/// otherwise); its scans, iterators and range deletes stop there.
pub struct Store {
    /// First, so dropping a store stops its background removal of
    /// dropped keyspaces before the engine closes.
    pub(crate) reclaimer: Reclaimer,
    pub(crate) inner: Engine,
    pub(crate) catalog: Arc<Catalog>,
    config: Box<Config>,
}

impl Store {
    /// Wraps an opened engine: reads its keyspace catalog and resumes
    /// removing the keys of keyspaces dropped before it closed.
    pub(crate) fn new(inner: Box<dyn Instrumented>, config: Config) -> Result<Self> {
        let loaded = crate::catalog::Catalog::load(&*inner)?;
        let store = Self {
            reclaimer: Reclaimer::new(),
            inner: Arc::new(inner),
            catalog: Arc::new(loaded.catalog),
            config: Box::new(config),
        };
        for id in loaded.dropped {
            store
                .reclaimer
                .push(&store.inner, &store.catalog, store.engine(), id);
        }
        Ok(store)
    }

    /// Runs a write of default-space `key`: keys from `0xFF 0xFF` up are
    /// refused once the store has named keyspaces, and written with the
    /// catalog's gate held before, so no first keyspace is made over them.
    fn write_default<R>(&self, key: &[u8], write: impl FnOnce() -> Result<R>) -> Result<R> {
        if key < RESERVED {
            return write();
        }
        let _gate = self.catalog.hold();
        if self.catalog.is_active() {
            return Err(Error::ReservedKey {
                key: key.escape_ascii().to_string(),
            });
        }
        write()
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
        let key = key.as_ref();
        if key >= RESERVED && self.catalog.is_active() {
            return Err(Error::ReservedKey {
                key: key.escape_ascii().to_string(),
            });
        }
        self.inner.get(key)
    }

    /// The values of `keys`, in their order (`None` where a key is
    /// absent), each read as [`Store::get`] reads it. For bindings that
    /// pay per call (a language runtime's lock, a round trip), one call
    /// for many keys; the first error stops the lookups.
    pub fn get_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<Option<Vec<u8>>>> {
        keys.iter().map(|k| self.get(k)).collect()
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        Ok(self.get(key)?.is_some())
    }

    /// Sets `key` to `value`.
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        let key = key.as_ref();
        self.write_default(key, || self.inner.put(key, value.as_ref()))
    }

    /// Removes `key` (removing an absent key is not an error).
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        let key = key.as_ref();
        self.write_default(key, || self.inner.delete(key))
    }

    /// Removes every key in `range` (`start..end`: start included, end
    /// not), atomically. The LSM-tree writes one range tombstone, which
    /// reads and compactions apply; the B+trees rewrite each leaf the
    /// range covers once (a leaf wholly inside is emptied in one step,
    /// not key by key); ZKV deletes the keys it finds, as one logged
    /// batch. Errors
    /// besides the common ones: [`ferrite_core::Error::EmptyRange`] when
    /// `end <= start`.
    /// A store with named keyspaces cuts the range at `0xFF 0xFF`.
    pub fn delete_range<K: AsRef<[u8]>>(&self, range: Range<K>) -> Result<()> {
        let (start, end) = (range.start.as_ref(), range.end.as_ref());
        if end <= RESERVED {
            return self.inner.delete_range(start, end);
        }
        let _gate = self.catalog.hold();
        match self.catalog.default_region().delete_range(start, end)? {
            Some((s, e)) => self.inner.delete_range(&s, &e),
            None => Ok(()),
        }
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
        let key = key.as_ref();
        self.write_default(key, || self.inner.compare_and_swap(key, expected, new))
    }

    /// Applies every operation of `batch` atomically, in order: after a
    /// crash, all of it or none of it is there. The batch may write in
    /// named keyspaces too ([`crate::KeyspaceBatch`]); a write into one
    /// dropped since is [`Error::KeyspaceDropped`], and nothing of the
    /// batch is written.
    pub fn write(&self, batch: &WriteBatch) -> Result<()> {
        let (batch, _gate) = self.catalog.admit(batch)?;
        self.inner.write_batch(&batch)
    }

    /// Loads strictly ascending pairs into an empty store, faster than
    /// writing them (the B+trees build their pages bottom-up; the LSM
    /// writes its bottom level's tables directly). Errors besides the
    /// common ones: [`ferrite_core::Error::NotAscending`], and
    /// `InvalidOptions` from the B+tree and the LSM when the store holds
    /// data.
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
            Ok(s) => Iter::new(self.catalog.default_region().view(Arc::from(s)), range),
            Err(e) => Iter::failed(Arc::new(Nothing), e),
        }
    }

    /// Visits `range` ascending with a callback, without a snapshot or
    /// copies: the cheapest read of a range. Return
    /// `ControlFlow::Break(())` to stop.
    pub fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        if !self.catalog.is_active() {
            return self.inner.scan(range, visit);
        }
        self.catalog
            .default_region()
            .scan_with(range, visit, |r, v| self.inner.scan(r, v))
    }

    /// As [`Store::scan`], descending.
    pub fn scan_rev(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        if !self.catalog.is_active() {
            return self.inner.scan_rev(range, visit);
        }
        self.catalog
            .default_region()
            .scan_with(range, visit, |r, v| self.inner.scan_rev(r, v))
    }

    /// A read view of the store as it is now (see [`Snapshot`] for what
    /// each engine pays to keep it): of its default key space, and of
    /// every keyspace through [`Snapshot::keyspace`], all at one instant.
    pub fn snapshot(&self) -> Result<Snapshot> {
        Ok(Snapshot::new(
            Arc::from(self.inner.snapshot()?),
            self.catalog.default_region(),
        ))
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
        let inner = self.into_engine()?;
        let inner: Box<dyn KvStore> = inner;
        inner.close()
    }

    /// The engine, once the reclaimer (its only other holder) stopped.
    fn into_engine(self) -> Result<Box<dyn Instrumented>> {
        let Store {
            reclaimer, inner, ..
        } = self;
        drop(reclaimer);
        Arc::try_unwrap(inner).map_err(|_| Error::Resource {
            what: "sole use of the engine".into(),
            reason: "a background task still holds it".into(),
        })
    }

    /// The engine under the store, for code generic over stores: its
    /// whole key space, the keyspace catalog and named keyspaces' keys
    /// included (`docs/format/keyspaces.md`).
    pub fn as_kv(&self) -> &dyn KvStore {
        &**self.inner
    }

    /// The store with the hooks benchmarks use.
    #[cfg(feature = "bench-internals")]
    pub fn into_instrumented(self) -> Result<Box<dyn Instrumented>> {
        self.into_engine()
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
pub(crate) struct Nothing;

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

impl Config {
    /// Opens the store in directory `path` (creating it if the options
    /// allow). Errors: what the engine's open returns ([`Error::WrongFormat`]
    /// for a directory of another engine or a newer format,
    /// [`Error::NotAStore`] with `create_if_missing` off,
    /// [`Error::AlreadyExists`] with `error_if_exists`, [`Error::Corruption`]
    /// for a damaged store, [`Error::Device`] for I/O).
    pub fn open(&self, path: impl AsRef<Path>) -> Result<Store> {
        let store = registry::open(path.as_ref(), self)?;
        Store::new(store, self.clone())
    }
}

impl ConfigBuilder {
    /// Builds the configuration and opens the store in `path`.
    pub fn open(self, path: impl AsRef<Path>) -> Result<Store> {
        self.build()?.open(path)
    }
}
