//! [`Keyspace`]: a named, ordered key space inside a store, sharing its
//! write-ahead log, cache and memory budget (RocksDB's column families,
//! fjall's partitions, LMDB's named databases, redb's tables).
//!
//! A keyspace is a region of the engine's one key space (see
//! `region.rs`, and `catalog.rs` for the catalog that names them), so
//! everything the engine promises holds across keyspaces for free: a
//! [`WriteBatch`] that writes several ([`KeyspaceBatch`]) is one atomic
//! batch, a [`crate::Transaction`] reads and writes any of them
//! ([`crate::Transaction::keyspace`]) and commits all or nothing, and a
//! [`crate::Snapshot`] shows them all at one instant.
//!
//! Dropping a keyspace ([`Store::drop_keyspace`]) is one small batch
//! whatever it holds; its keys are then removed in the background
//! (`reclaimer.rs`), and a handle kept past the drop answers
//! [`Error::KeyspaceDropped`].
//!
//! Invariants: a handle's operations touch only its region's engine
//! keys; every write through it holds the catalog's gate shared and
//! checks the keyspace is live first.

use std::ops::{Range, RangeBounds};
use std::sync::Arc;

use ferrite_core::{Error, KeyRange, OwnedKeyRange, Result, ScanVisitor, WriteBatch};

use crate::catalog::Entry;
use crate::iter::Iter;
use crate::region::Region;
use crate::snapshot::Snapshot;
use crate::store::Store;

/// A named keyspace of a store, borrowed from it: made by
/// [`Store::keyspace`]. Its methods are the store's, over its own keys
/// (at most [`Keyspace::max_key_len`] bytes, the store's limit less the
/// 7-byte prefix that places them).
#[derive(Clone)]
pub struct Keyspace<'s> {
    store: &'s Store,
    entry: Arc<Entry>,
}

/// A keyspace held apart from a borrow of its store (as a language
/// binding keeps one); [`Store::attach`] borrows it again.
#[derive(Clone, Debug)]
pub struct DetachedKeyspace {
    entry: Arc<Entry>,
}

impl DetachedKeyspace {
    /// The keyspace's name.
    pub fn name(&self) -> &str {
        &self.entry.name
    }
}

impl Snapshot {
    /// The same instant of the store, seen in `keyspace` (a keyspace of
    /// the store the snapshot was taken of; one created after the
    /// snapshot reads as empty).
    pub fn keyspace(&self, keyspace: &Keyspace<'_>) -> Snapshot {
        self.in_region(keyspace.region().clone())
    }
}

impl Store {
    /// The keyspace `name`, created if the store has none of that name
    /// (durably, before this returns). Errors besides the common ones:
    /// [`Error::InvalidKeyspaceName`] (empty, or over 255 bytes);
    /// [`Error::ReservedKey`] when this would be the store's first
    /// keyspace and its default key space already holds keys from
    /// `0xFF 0xFF` up, where keyspaces live.
    pub fn keyspace(&self, name: &str) -> Result<Keyspace<'_>> {
        let entry = self.catalog.open(self.as_kv(), name)?;
        Ok(Keyspace { store: self, entry })
    }

    /// The keyspace `name` if it exists (creating nothing).
    pub fn existing_keyspace(&self, name: &str) -> Option<Keyspace<'_>> {
        let entry = self.catalog.find(name)?;
        Some(Keyspace { store: self, entry })
    }

    /// The names of the store's keyspaces, ascending (the default key
    /// space, which has none, not among them).
    pub fn keyspaces(&self) -> Vec<String> {
        self.catalog.names()
    }

    /// Drops keyspace `name` and everything in it; says whether there was
    /// one. Quick whatever it holds: one small batch makes the drop
    /// durable, and its keys are removed in the background afterwards
    /// (resumed at the next open if the store closes first). Handles to
    /// it then answer [`Error::KeyspaceDropped`]; a keyspace created
    /// later under the same name starts empty.
    pub fn drop_keyspace(&self, name: &str) -> Result<bool> {
        let Some(id) = self.catalog.drop_keyspace(self.as_kv(), name)? else {
            return Ok(false);
        };
        self.reclaimer
            .push(&self.inner, &self.catalog, self.engine(), id);
        Ok(true)
    }

    /// Dropped keyspaces whose keys are still being removed.
    pub fn dropped_keyspaces_pending(&self) -> usize {
        self.reclaimer.pending()
    }

    /// Keys of dropped keyspaces removed since the store opened (engines
    /// that remove them key by key; the LSM-tree drops a keyspace's keys
    /// with one range tombstone and counts none).
    pub fn dropped_keys_removed(&self) -> u64 {
        self.reclaimer.keys_removed()
    }

    /// Waits until the keys of every dropped keyspace are removed (or the
    /// removal stopped on an error, which is logged; it resumes at the
    /// next open).
    pub fn wait_for_dropped_keyspaces(&self) {
        self.reclaimer.wait();
    }

    /// Borrows a detached keyspace of this store again. Errors:
    /// [`Error::KeyspaceDropped`] when it was dropped since.
    pub fn attach(&self, keyspace: &DetachedKeyspace) -> Result<Keyspace<'_>> {
        match self.catalog.find(&keyspace.entry.name) {
            Some(e) if Arc::ptr_eq(&e, &keyspace.entry) => Ok(Keyspace {
                store: self,
                entry: e,
            }),
            _ => Err(Error::KeyspaceDropped(keyspace.entry.name.clone())),
        }
    }
}

impl<'s> Keyspace<'s> {
    /// The keyspace's name.
    pub fn name(&self) -> &str {
        &self.entry.name
    }

    /// The longest key the keyspace holds.
    pub fn max_key_len(&self) -> usize {
        self.entry.region.max_key_len()
    }

    /// The keyspace apart from the borrow of its store.
    pub fn detach(&self) -> DetachedKeyspace {
        DetachedKeyspace {
            entry: self.entry.clone(),
        }
    }

    pub(crate) fn region(&self) -> &Region {
        &self.entry.region
    }

    pub(crate) fn entry(&self) -> &Arc<Entry> {
        &self.entry
    }

    /// The store the keyspace is in.
    pub fn store(&self) -> &'s Store {
        self.store
    }

    fn live(&self) -> Result<()> {
        if self.entry.is_dropped() {
            return Err(Error::KeyspaceDropped(self.entry.name.clone()));
        }
        Ok(())
    }

    /// Runs a write with drops held off, once the keyspace is known live.
    fn write<R>(&self, f: impl FnOnce() -> Result<R>) -> Result<R> {
        let _gate = self.store.catalog.enter(&self.entry)?;
        f()
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        self.live()?;
        self.store.as_kv().get(&self.region().key(key.as_ref())?)
    }

    /// The values of `keys`, in their order.
    pub fn get_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<Option<Vec<u8>>>> {
        keys.iter().map(|k| self.get(k)).collect()
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        Ok(self.get(key)?.is_some())
    }

    /// Sets `key` to `value`.
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        let key = self.region().key(key.as_ref())?;
        self.write(|| self.store.as_kv().put(&key, value.as_ref()))
    }

    /// Removes `key`.
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        let key = self.region().key(key.as_ref())?;
        self.write(|| self.store.as_kv().delete(&key))
    }

    /// Removes every key of the keyspace in `start..end`, atomically (as
    /// [`Store::delete_range`]).
    pub fn delete_range<K: AsRef<[u8]>>(&self, range: Range<K>) -> Result<()> {
        let cut = self
            .region()
            .delete_range(range.start.as_ref(), range.end.as_ref())?;
        match cut {
            Some((s, e)) => self.write(|| self.store.as_kv().delete_range(&s, &e)),
            None => Ok(()),
        }
    }

    /// As [`Store::compare_and_swap`], in the keyspace.
    pub fn compare_and_swap(
        &self,
        key: impl AsRef<[u8]>,
        expected: Option<&[u8]>,
        new: Option<&[u8]>,
    ) -> Result<bool> {
        let key = self.region().key(key.as_ref())?;
        self.write(|| self.store.as_kv().compare_and_swap(&key, expected, new))
    }

    /// Every pair of the keyspace, ascending, as of now.
    pub fn iter(&self) -> Iter {
        self.iter_over(OwnedKeyRange::all())
    }

    /// The pairs in `range`, as of now.
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Iter {
        self.iter_over(OwnedKeyRange::new(range))
    }

    /// The pairs whose key starts with `prefix`, as of now.
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Iter {
        self.iter_over(OwnedKeyRange::prefix(prefix.as_ref()))
    }

    fn iter_over(&self, range: OwnedKeyRange) -> Iter {
        match self.snapshot() {
            Ok(s) => s.iter_over(range),
            Err(e) => Iter::failed(Arc::new(crate::store::Nothing), e),
        }
    }

    /// Visits `range` of the keyspace ascending with a callback.
    pub fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.live()?;
        let kv = self.store.as_kv();
        self.region().scan_with(range, visit, |r, v| kv.scan(r, v))
    }

    /// As [`Keyspace::scan`], descending.
    pub fn scan_rev(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.live()?;
        let kv = self.store.as_kv();
        self.region()
            .scan_with(range, visit, |r, v| kv.scan_rev(r, v))
    }

    /// A read view of the keyspace as it is now (a store's snapshot seen
    /// through [`Snapshot::keyspace`]).
    pub fn snapshot(&self) -> Result<Snapshot> {
        self.live()?;
        Ok(Snapshot::new(
            Arc::from(self.store.as_kv().snapshot()?),
            self.region().clone(),
        ))
    }
}

impl std::fmt::Debug for Keyspace<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyspace")
            .field("name", &self.entry.name)
            .finish()
    }
}

/// Writes into named keyspaces as part of one [`WriteBatch`], applied
/// by [`Store::write`] all or nothing with the rest of the batch.
///
/// ```
/// use ferrite::{Config, EngineKind, KeyspaceBatch, WriteBatch};
/// # let dir = tempfile::tempdir().unwrap();
/// let store = Config::builder(EngineKind::Lsm).open(dir.path().join("db"))?;
/// let users = store.keyspace("users")?;
/// let emails = store.keyspace("emails")?;
/// let mut batch = WriteBatch::new();
/// batch.put_in(&users, b"u1", b"ada")?;
/// batch.put_in(&emails, b"ada@example.org", b"u1")?;
/// store.write(&batch)?;
/// assert_eq!(emails.get("ada@example.org")?, Some(b"u1".to_vec()));
/// # Ok::<(), ferrite::Error>(())
/// ```
///
/// The batch names a keyspace by the id it has in its store: write it to
/// that store.
pub trait KeyspaceBatch {
    /// Adds a put of `key` in `keyspace`.
    fn put_in(&mut self, keyspace: &Keyspace<'_>, key: &[u8], value: &[u8]) -> Result<&mut Self>;
    /// Adds a delete of `key` in `keyspace`.
    fn delete_in(&mut self, keyspace: &Keyspace<'_>, key: &[u8]) -> Result<&mut Self>;
    /// Adds a delete of `start..end` in `keyspace`.
    fn delete_range_in(
        &mut self,
        keyspace: &Keyspace<'_>,
        start: &[u8],
        end: &[u8],
    ) -> Result<&mut Self>;
}

impl KeyspaceBatch for WriteBatch {
    fn put_in(&mut self, keyspace: &Keyspace<'_>, key: &[u8], value: &[u8]) -> Result<&mut Self> {
        keyspace.live()?;
        self.put(&keyspace.region().key(key)?, value)
    }

    fn delete_in(&mut self, keyspace: &Keyspace<'_>, key: &[u8]) -> Result<&mut Self> {
        keyspace.live()?;
        self.delete(&keyspace.region().key(key)?)
    }

    fn delete_range_in(
        &mut self,
        keyspace: &Keyspace<'_>,
        start: &[u8],
        end: &[u8],
    ) -> Result<&mut Self> {
        keyspace.live()?;
        match keyspace.region().delete_range(start, end)? {
            Some((s, e)) => self.delete_range(&s, &e),
            None => Ok(self),
        }
    }
}
