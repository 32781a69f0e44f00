//! The [`KvStore`] trait: the one API every ferrite engine implements.
//!
//! The trait is object safe, so tools hold a `Box<dyn KvStore>` and never
//! name an engine type; generic conveniences live in [`KvStoreExt`].
//!
//! Contract for every implementation:
//! - keys and values are checked against [`crate::MAX_KEY_LEN`] and
//!   [`crate::MAX_VALUE_LEN`] before anything changes; a bad key is an
//!   error, never a truncation or a panic;
//! - a call that returns `Ok` is visible to every later call on any thread;
//!   it is durable according to the store's [`crate::SyncMode`];
//! - `write_batch` is atomic: after a crash either all of it or none of it
//!   is present;
//! - `scan` visits keys in ascending byte order (`scan_rev` descending),
//!   each at most once, and sees every write that completed before it
//!   started;
//! - `delete_range` and `compare_and_swap` are atomic like a batch, and
//!   a compare-and-swap's comparison and write see no other write between
//!   them;
//! - a [`StoreSnapshot`] sees exactly the writes completed before it was
//!   taken, whatever is written, flushed, compacted or checkpointed
//!   after; what it keeps alive to do so is bounded by the engine, past
//!   which it answers [`crate::Error::SnapshotTooOld`];
//! - `close` stops background work, makes every completed write durable
//!   and reports what failed; dropping a store does the same on a
//!   best-effort basis;
//! - after a failed sync the store returns [`crate::Error::Poisoned`] from
//!   every call rather than silently continuing;
//! - a full device is an error for which [`crate::Error::is_no_space`]
//!   holds (the device's own error, `Poisoned` caused by it, or
//!   [`crate::Error::StoreFull`] from a store that refuses a write before
//!   changing anything), and it loses no acknowledged write.

use std::ops::{ControlFlow, RangeBounds};

use crate::batch::WriteBatch;
use crate::error::Result;
use crate::range::KeyRange;
use crate::stats::Stats;

/// Receives scanned pairs; return `ControlFlow::Break(())` to stop early.
pub type ScanVisitor<'v> = dyn FnMut(&[u8], &[u8]) -> ControlFlow<()> + 'v;

/// A read-only view of a store at one instant.
pub trait StoreSnapshot: Send + Sync {
    /// The value `key` had when the snapshot was taken.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;

    /// As [`KvStore::scan`], over the snapshot.
    fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()>;

    /// As [`KvStore::scan_rev`], over the snapshot.
    fn scan_rev(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()>;

    /// The store's [`CommitView::write_sequence`] when the snapshot was
    /// taken (read atomically with the state it shows), where the engine
    /// keeps one.
    fn write_sequence(&self) -> Option<u64> {
        None
    }
}

/// The store as a conditional write sees it ([`KvStore::write_batch_if`]):
/// every write that completed before is applied, and no other write
/// applies until the check and the batch are done.
pub trait CommitView {
    /// The value `key` holds now.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;

    /// Visits the pairs of `range` now, ascending.
    fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()>;

    /// A number every applied write moves, read with writes held off: it
    /// equals a snapshot's [`StoreSnapshot::write_sequence`] only if no
    /// write has applied since that snapshot was taken (so nothing it
    /// read can have changed). `None` where the engine keeps none.
    fn write_sequence(&self) -> Option<u64> {
        None
    }
}

/// The check of a conditional write: reads what it needs through the
/// view and says whether the batch applies.
pub type WriteCheck<'a> = dyn FnMut(&dyn CommitView) -> Result<bool> + 'a;

/// A durable, ordered key-value store.
pub trait KvStore: Send + Sync {
    /// The value stored under `key`, if any.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;

    /// Inserts or replaces the value of `key`.
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()>;

    /// Removes `key`; removing an absent key is not an error.
    fn delete(&self, key: &[u8]) -> Result<()>;

    /// Removes every key `k` with `start <= k < end`, atomically. The
    /// default logs it as one batch operation, which engines apply their
    /// own way (range tombstones, whole pages).
    fn delete_range(&self, start: &[u8], end: &[u8]) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete_range(start, end)?;
        self.write_batch(&b)
    }

    /// Sets `key` to `new` (`None` deletes it) if its value is `expected`
    /// (`None`: absent), and says whether it did; the comparison and the
    /// write are atomic against every other write. The building block of
    /// read-modify-write (increments, appends, set-if-absent). The default
    /// is a one-operation [`KvStore::write_batch_if`] whose check reads
    /// the key, so it is counted as a batch.
    fn compare_and_swap(
        &self,
        key: &[u8],
        expected: Option<&[u8]>,
        new: Option<&[u8]>,
    ) -> Result<bool> {
        let mut b = WriteBatch::new();
        match new {
            Some(v) => b.put(key, v)?,
            None => b.delete(key)?,
        };
        self.write_batch_if(&b, &mut |now| Ok(now.get(key)?.as_deref() == expected))
    }

    /// Visits every pair in `range` in ascending key order with a callback
    /// (a callback rather than an iterator, so engines can hold latches or
    /// pins across the visit without self-referential iterator types).
    /// The slices are valid only during the call.
    fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()>;

    /// As [`KvStore::scan`], in descending key order.
    fn scan_rev(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()>;

    /// Applies every operation of `batch` atomically, in order.
    fn write_batch(&self, batch: &WriteBatch) -> Result<()>;

    /// Applies `batch` as [`KvStore::write_batch`] does if `check`, run
    /// against the state the batch would apply to, says so; returns
    /// whether it did. No other write comes between the check and the
    /// batch, so a check that re-reads what a caller read earlier makes
    /// the batch a serializable transaction. An empty batch is never
    /// checked. Stores that cannot hold writes off for a check (benchmark
    /// peers) answer [`crate::Error::Unsupported`].
    fn write_batch_if(&self, batch: &WriteBatch, check: &mut WriteCheck<'_>) -> Result<bool> {
        let _ = (batch, check);
        Err(crate::Error::Unsupported {
            store: "this store",
            operation: "conditional batches",
        })
    }

    /// A view that sees exactly the writes completed before this call.
    fn snapshot(&self) -> Result<Box<dyn StoreSnapshot>>;

    /// Writes in-memory state (dirty pages, memtables) to the device, so
    /// that recovery has less log to replay. Implies nothing about fsync.
    fn flush(&self) -> Result<()>;

    /// Makes every completed write durable.
    fn sync(&self) -> Result<()>;

    /// Counters since the store was opened.
    fn stats(&self) -> Stats;

    /// Loads strictly ascending pairs into the store and returns how many.
    /// The default writes them in batches of 1000; engines with a faster
    /// path for sorted input (building pages bottom-up) override it, and
    /// may require the store to be empty.
    fn bulk_load(&self, sorted: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>) -> Result<u64> {
        let mut batch = WriteBatch::new();
        let mut prev: Option<Vec<u8>> = None;
        let mut n = 0u64;
        for (k, v) in sorted {
            if prev.as_ref().is_some_and(|p| *p >= k) {
                return Err(crate::Error::NotAscending { index: n });
            }
            batch.put(&k, &v)?;
            prev = Some(k);
            n += 1;
            if batch.len() >= 1000 {
                self.write_batch(&batch)?;
                batch.clear();
            }
        }
        if !batch.is_empty() {
            self.write_batch(&batch)?;
        }
        Ok(n)
    }

    /// Fills `dir`, which holds a store of this engine made with the same
    /// options and never written (opened and closed), with a consistent
    /// copy of this store as of now, taken from its own files while reads
    /// and writes go on; `Ok(None)` when the engine has no such copy and
    /// the caller copies pairs from a snapshot instead (the default). The
    /// copy is durable when this returns.
    fn copy_files(&self, dir: &std::path::Path) -> Result<Option<FileCopy>> {
        let _ = dir;
        Ok(None)
    }

    /// Checks the store's on-disk and in-memory invariants (order, fences,
    /// checksums, structure) and reports the first violation as
    /// [`crate::Error::Corruption`]. Slow; for tests and `ferrite inspect`.
    fn verify(&self) -> Result<()>;

    /// Stops background work, writes what is in memory out (a checkpoint
    /// or a flush, as the engine closes), syncs, and reports the first
    /// failure. After an error the store is closed all the same; reopening
    /// recovers from what is durable.
    fn close(self: Box<Self>) -> Result<()>;
}

/// What an engine's copy of its own files moved ([`KvStore::copy_files`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FileCopy {
    /// Bytes the copy shares with the store's files: blocks the file
    /// system cloned, written by neither until one of them changes.
    pub shared_bytes: u64,
    /// Bytes of the store's files copied as they are (by the kernel, or
    /// through memory where it cannot).
    pub copied_bytes: u64,
    /// Bytes written anew: what was only in memory (memtables) and the
    /// copy's own metadata.
    pub written_bytes: u64,
}

/// What a benchmark needs of a store beyond its API (the harness drives
/// stores through it; the user API does not show it).
pub trait Instrumented: KvStore {
    /// Waits until the background work earlier writes started (flushes,
    /// compactions) has finished, so a measurement starts from a settled
    /// store. The default has nothing to wait for.
    fn settle(&self) -> Result<()> {
        Ok(())
    }
}

/// Generic helpers over any [`KvStore`], including `dyn KvStore`.
pub trait KvStoreExt: KvStore {
    /// Scans with any Rust range of byte slices.
    fn scan_range<'a, R: RangeBounds<&'a [u8]>>(
        &self,
        range: R,
        visit: &mut ScanVisitor<'_>,
    ) -> Result<()> {
        self.scan(KeyRange::from_bounds(range), visit)
    }

    /// Collects up to `limit` pairs of `range`, in descending key order.
    fn scan_rev_collect(
        &self,
        range: KeyRange<'_>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        collect(limit, |visit| self.scan_rev(range, visit))
    }

    /// Collects up to `limit` pairs of `range`.
    fn scan_collect(&self, range: KeyRange<'_>, limit: usize) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        collect(limit, |visit| self.scan(range, visit))
    }
}

/// The first `limit` pairs a scan visits, copied.
fn collect(
    limit: usize,
    scan: impl FnOnce(&mut ScanVisitor<'_>) -> Result<()>,
) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut out = Vec::new();
    if limit == 0 {
        return Ok(out);
    }
    scan(&mut |k, v| {
        out.push((k.to_vec(), v.to_vec()));
        if out.len() >= limit {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })?;
    Ok(out)
}

impl<T: KvStore + ?Sized> KvStoreExt for T {}
