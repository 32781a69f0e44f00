//! [`LsmStore`]: the LSM-tree engine (SwiftKV) and the `KvStore` contract.
//!
//! Invariants:
//! - writes are sequenced under one writer lock: WAL append, memtable
//!   insert, then the visible sequence number moves; a write is durable per
//!   the sync mode before its call returns, and under `Batched(d)` a
//!   background thread syncs the live WAL every `d` so writes become
//!   durable within `d` even when no later write comes;
//! - memtable `m` logs to WAL device `m % WAL_DEVICES` with epoch `m`; a
//!   device is reset for a new memtable only after the memtable that used
//!   it before is in a table listed by a durable manifest (with
//!   partitions, after every partition's flush buffer has written it out:
//!   `partition_buffer`);
//! - the manifest is written before a new version is installed, and a
//!   table's extent is freed only after a durable manifest dropped it;
//! - readers take the current [`SuperVersion`] (memtable, immutable
//!   memtables, version) as one `Arc`, so a scan sees one consistent state;
//! - after any failed write or sync, foreground or background, every call
//!   returns `Error::Poisoned`.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | [`LsmStore`], its shared state, `KvStore` |
//! | `devices.rs` | the files a store lives on |
//! | `open.rs` | recovery (manifest, tables, WAL replay) |
//! | `write.rs` | the write path: sequencing, WAL, memtable rotation, stalls |
//! | `read.rs` | lookups and scans through memtables, flush buffers and levels; verify |
//! | `publish.rs` | writing tables and installing versions: manifest first, then the swap |
//! | `copy.rs` | copying a live store from its files (online checkpoints) |
//! | `bulk.rs` | bulk loading an empty store: sorted pairs as bottom-level tables |
//! | `flush.rs` | the flush thread: memtables (or partitions' flush buffers) to L0 |
//! | `compaction_job.rs` | the compaction thread: leveled jobs, load-aware output indexes |
//! | `snapshot.rs` | snapshots: a sequence number and the state it reads |
//! | `stats.rs` | the engine's counters and the shape of its levels |

mod bulk;
mod compaction_job;
mod copy;
mod devices;
mod flush;
mod open;
mod publish;
mod read;
mod snapshot;
mod stats;
mod write;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ferrite_core::engine::{
    check_key, check_value, ApiCounters, Instrumented, PeriodicSync, Poison,
};
use ferrite_core::{
    Error, FileCopy, KeyRange, KvStore, Result, ScanVisitor, Stats, StoreSnapshot, SyncMode,
    WriteBatch, WriteCheck,
};
use ferrite_wal::Wal;
use parking_lot::{Condvar, Mutex, RwLock};

use crate::block_cache::BlockCache;
use crate::build_policy::LevelHistory;
use crate::manifest::{Manifest, ManifestState};
use crate::memtable::Memtable;
use crate::options::LsmOptions;
use crate::partition_buffer::PartitionBuffers;
use crate::range_del::RangeDels;
use crate::table::Table;
use crate::table_space::TableSpace;
use crate::version::Version;

pub use devices::Devices;
pub use stats::{LevelReport, LsmReport, LsmStats};

/// On-disk format version of an LSM store directory. Format 2 writes WAL
/// records that claim how far the log was synced (`docs/format/wal.md`),
/// which a format-1 build would read as the log's end. Format 3 writes
/// tables of version 2 (learned indexes with block-boundary thresholds),
/// which earlier builds refuse. Format 4 logs range deletes in the WAL,
/// keeps them in the manifest (`MNF3`) and writes tables of version 3
/// (which record their newest sequence number); earlier builds would
/// drop the deletes. Format 5 writes tables of version 4, whose data
/// blocks may be compressed (`table/packing.rs`), which earlier builds
/// refuse. Stores of formats 1 to 4 are read and upgraded.
pub const FORMAT_VERSION: u32 = 5;
/// The oldest format this engine reads.
pub const OLDEST_READABLE_FORMAT: u32 = 1;
/// WAL devices, used in turn by successive memtables.
pub const WAL_DEVICES: usize = 4;

/// What readers see: one consistent state.
struct SuperVersion {
    mem: Arc<Memtable>,
    /// Newest first.
    imms: Vec<Arc<Memtable>>,
    /// Flushed memtables whose entries of some partitions wait for a
    /// table (partitioned stores only).
    buffers: Arc<PartitionBuffers>,
    version: Arc<Version>,
}

impl SuperVersion {
    /// The range deletes a read at `seq` honours: the version's and those
    /// still in memtables (buffered memtables' moved to the version when
    /// they were flushed). `None` when there are none, the usual case.
    fn range_dels(&self, seq: u64) -> Option<RangeDels> {
        let in_mem = std::iter::once(&self.mem).chain(&self.imms);
        if self.version.range_dels.is_empty() && in_mem.clone().all(|m| !m.has_range_dels()) {
            return None;
        }
        let mut sets = vec![self.version.range_fragments().clone()];
        let mut loose = Vec::new();
        for (base, newest) in in_mem.filter_map(|m| m.range_fragments()) {
            sets.push(base);
            loose.push(newest);
        }
        Some(RangeDels::of_sets(sets, loose, seq))
    }

    /// Every memtable the state reads: live, immutable, buffered.
    fn memtables(&self) -> impl Iterator<Item = Arc<Memtable>> + '_ {
        std::iter::once(self.mem.clone())
            .chain(self.imms.iter().cloned())
            .chain(self.buffers.memtables())
    }
}

struct Writer {
    mem: Arc<Memtable>,
    wal: Arc<Wal>,
    next_seq: u64,
    last_sync: Instant,
    /// The WAL of each device's last memtable, so a reset waits for
    /// stragglers still committing to it.
    wal_slots: [Option<Arc<Wal>>; WAL_DEVICES],
}

struct Meta {
    state: ManifestState,
    /// Per level, the key its last compaction ended at.
    cursors: Vec<Option<Vec<u8>>>,
    /// Per level, lookups and lifetimes of its tables (load-aware builds).
    history: Vec<LevelHistory>,
    /// Smoothed fitting cost, nanoseconds per entry.
    train_ns_per_entry: f64,
}

#[derive(Default)]
struct Counters {
    api: ApiCounters,
    flushes: AtomicU64,
    /// L0 tables written by flushes (of memtables or flush buffers).
    l0_flushed: AtomicU64,
    compactions: AtomicU64,
    /// Slices of compactions installed before their job ended (each frees
    /// the inputs the merge had passed).
    partial_installs: AtomicU64,
    moves: AtomicU64,
    compaction_read: AtomicU64,
    compaction_written: AtomicU64,
    stalls: AtomicU64,
    stall_micros: AtomicU64,
    max_stall_micros: AtomicU64,
    slowdowns: AtomicU64,
    training_micros: AtomicU64,
    partition_drops: AtomicU64,
    /// WAL devices emptied once their memtable was in both manifests.
    retired_logs: AtomicU64,
    /// Load-aware decisions for compaction outputs.
    learned_builds: AtomicU64,
    sparse_builds: AtomicU64,
    /// Tables whose fitted model lost to the sparse index on size.
    sparse_fallbacks: AtomicU64,
}

struct Inner {
    opts: LsmOptions,
    sync: SyncMode,
    /// Writers grouped behind one leader (`Options::write_group`), or
    /// `None` for each writer on its own.
    group: Option<ferrite_core::engine::WriteGroup>,
    devices: Devices,
    space: Arc<TableSpace>,
    cache: Arc<BlockCache>,
    manifest: Manifest,
    writer: Mutex<Writer>,
    /// Writers waiting for room (memtable slots, L0) wait here.
    room: Condvar,
    current: RwLock<Arc<SuperVersion>>,
    visible: AtomicU64,
    meta: Mutex<Meta>,
    /// Held by the compaction running (the background's or a caller's).
    compacting: Mutex<()>,
    /// Background threads sleep here; `shutdown` wakes them for good.
    bg: Mutex<bool>,
    bg_wake: Condvar,
    poisoned: Poison,
    counters: Counters,
    /// Set by `flush_locked` for the flush thread: write every partition's
    /// buffer out.
    drain: AtomicBool,
    /// The lower of the log numbers the two manifest copies on disk name
    /// (0 until two have been written since open): a WAL of a memtable
    /// below it holds nothing either copy could replay, so it can go.
    log_floor: AtomicU64,
    /// What live snapshots read.
    snapshots: snapshot::Pinned,
}

/// The LSM-tree engine (SwiftKV's base).
pub struct LsmStore {
    inner: Arc<Inner>,
    threads: Vec<JoinHandle<()>>,
    /// Syncs the live WAL every interval under `SyncMode::Batched`.
    ticker: Option<PeriodicSync>,
}

impl LsmStore {
    /// Waits until no compaction is due (for benchmarks that measure a
    /// settled tree, and for tests).
    pub fn wait_for_compactions(&self) -> Result<()> {
        loop {
            self.inner.check()?;
            let sv = self.inner.current.read().clone();
            if sv.imms.is_empty() && self.inner.due_compaction(&sv.version).is_none() {
                return Ok(());
            }
            self.inner.wake();
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Compacts every partition's L0 into L1 now (what RocksDB's
    /// `CompactRange` does for L0), then waits for the compactions that
    /// causes below. Memtables are not flushed first: call
    /// [`KvStore::flush`] before for everything to leave memory.
    pub fn compact_l0(&self) -> Result<()> {
        // A background compaction of the same L0 may win the install; the
        // loop then finds less to do.
        for _ in 0..16 {
            self.inner.check()?;
            let v = self.inner.current.read().version.clone();
            let busy: Vec<usize> = (0..v.parts.len())
                .filter(|&p| v.levels(p).first().is_some_and(|l0| !l0.is_empty()))
                .collect();
            if busy.is_empty() {
                break;
            }
            drop(v);
            for p in busy {
                let v = self.inner.current.read().version.clone();
                self.inner
                    .compact(v, p, 0, None)
                    .inspect_err(|e| self.inner.poison(e))?;
            }
        }
        self.wait_for_compactions()
    }

    /// Deletes every key of partition `part` at once, without tombstones
    /// (SwiftKV's per-partition range deletion): the memtables are flushed
    /// first, so every write so far is in tables, then the partition's
    /// tables leave the version in one manifest write. Writers wait
    /// meanwhile; a compaction of the partition in flight is discarded.
    pub fn drop_partition(&self, part: usize) -> Result<()> {
        let inner = &self.inner;
        if part >= inner.opts.partitions {
            return Err(Error::InvalidOptions(format!(
                "partition {part} does not exist (the store has {})",
                inner.opts.partitions
            )));
        }
        let mut w = inner.writer.lock();
        inner.flush_locked(&mut w)?;
        let mut meta = inner.meta.lock();
        let cur = inner.current.read().clone();
        let removed: Vec<Arc<Table>> = cur.version.levels(part).iter().flatten().cloned().collect();
        let ids: Vec<u64> = removed.iter().map(|t| t.id).collect();
        inner.publish(&mut meta, cur.version.edit(&ids, &[]), None)?;
        for t in &removed {
            t.mark_obsolete();
        }
        inner
            .counters
            .partition_drops
            .fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

impl Inner {
    fn check(&self) -> Result<()> {
        self.poisoned.check()
    }

    fn poison(&self, e: &Error) {
        self.poisoned.set(e);
        self.room.notify_all();
        self.wake();
    }

    fn wake(&self) {
        let _g = self.bg.lock();
        self.bg_wake.notify_all();
    }

    fn shutting_down(&self) -> bool {
        *self.bg.lock()
    }
}

impl KvStore for LsmStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        check_key(key)?;
        self.inner.check()?;
        let v = self.inner.get(key)?;
        self.inner.counters.api.count_get(key, v.as_deref());
        Ok(v)
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        check_key(key)?;
        check_value(value)?;
        let mut b = WriteBatch::new();
        b.put(key, value)?;
        self.inner.write(&b)?;
        self.inner.counters.api.count_puts(1);
        Ok(())
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        check_key(key)?;
        let mut b = WriteBatch::new();
        b.delete(key)?;
        self.inner.write(&b)?;
        self.inner.counters.api.count_delete();
        Ok(())
    }

    fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.inner.scan_counted(range, false, visit)
    }

    fn scan_rev(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.inner.scan_counted(range, true, visit)
    }

    fn write_batch(&self, batch: &WriteBatch) -> Result<()> {
        self.inner.write(batch)?;
        self.inner.counters.api.count_batch();
        Ok(())
    }

    fn write_batch_if(&self, batch: &WriteBatch, check: &mut WriteCheck<'_>) -> Result<bool> {
        let done = self.inner.write_if(batch, check)?;
        if done {
            self.inner.counters.api.count_batch();
        }
        Ok(done)
    }

    /// Writes the pairs as tables straight into the bottom level; needs an
    /// empty store (`bulk.rs`).
    fn bulk_load(&self, sorted: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>) -> Result<u64> {
        self.inner.bulk_load(sorted)
    }

    fn snapshot(&self) -> Result<Box<dyn StoreSnapshot>> {
        self.inner.check()?;
        Ok(Box::new(snapshot::LsmSnapshot::take(&self.inner)))
    }

    /// Copies the live tables' extents and writes the memtables as
    /// tables (`copy.rs`).
    fn copy_files(&self, dir: &std::path::Path) -> Result<Option<FileCopy>> {
        self.inner.check()?;
        let snap = snapshot::LsmSnapshot::take(&self.inner);
        // Read after the snapshot: above every table it pins.
        let next_id = self.inner.meta.lock().state.next_table;
        let (sv, seq) = snap.pinned();
        self.inner.copy_into(sv, seq, next_id, dir).map(Some)
    }

    fn close(self: Box<Self>) -> Result<()> {
        (*self).close()
    }

    fn flush(&self) -> Result<()> {
        let mut w = self.inner.writer.lock();
        self.inner.flush_locked(&mut w)
    }

    fn sync(&self) -> Result<()> {
        self.inner.check()?;
        let wal = self.inner.writer.lock().wal.clone();
        wal.sync().inspect_err(|e| self.inner.poison(e))
    }

    fn stats(&self) -> Stats {
        self.collect_stats()
    }

    fn verify(&self) -> Result<()> {
        self.inner.check()?;
        self.inner.verify()
    }
}

impl Instrumented for LsmStore {
    /// Flushes, then waits until no compaction is due.
    fn settle(&self) -> Result<()> {
        self.flush()?;
        self.wait_for_compactions()
    }
}

impl Inner {
    /// A scan in either direction, counted.
    fn scan_counted(
        &self,
        range: KeyRange<'_>,
        rev: bool,
        visit: &mut ScanVisitor<'_>,
    ) -> Result<()> {
        self.check()?;
        let read = self.scan(range, rev, visit)?;
        self.counters.api.count_scan();
        self.counters.api.add_read(read);
        Ok(())
    }
}

impl LsmStore {
    /// Flushes the memtables to tables, merges L0 into L1 where it would
    /// leave shadowed versions at rest ([`crate::compaction::l0_due_at_close`]),
    /// stops the background threads and seals the WAL (so recovery replays
    /// nothing), reporting what failed.
    pub fn close(mut self) -> Result<()> {
        let flushed = KvStore::flush(&self)
            .and_then(|()| self.inner.compact_l0_for_close())
            .and_then(|()| self.inner.retire_flushed_logs());
        let stopped = self.shut_down();
        flushed.and(stopped)
    }

    fn shut_down(&mut self) -> Result<()> {
        drop(self.ticker.take());
        *self.inner.bg.lock() = true;
        self.inner.bg_wake.notify_all();
        self.inner.room.notify_all();
        let mut panicked = false;
        for t in self.threads.drain(..) {
            panicked |= t.join().is_err();
        }
        if panicked {
            return Err(Error::corruption("lsm", "a background thread panicked"));
        }
        self.inner.check()?;
        // Sealed, so damage to any of the log is told from a torn tail.
        let wal = self.inner.writer.lock().wal.clone();
        wal.seal().inspect_err(|e| self.inner.poison(e))
    }
}

impl Drop for LsmStore {
    fn drop(&mut self) {
        if self.threads.is_empty() && self.ticker.is_none() {
            return;
        }
        if let Err(e) = self.shut_down() {
            if !self.inner.poisoned.is_set() {
                log::error!("closing sync of the WAL failed: {e}");
            }
        }
    }
}
