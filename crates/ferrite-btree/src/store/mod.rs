//! The store: a [`Tree`] made durable and shared.
//!
//! Owns the page file, the double-write file, the WAL and the carry-over
//! slots, and keeps the promise of [`ferrite_core::KvStore`]:
//! - a write is logged (one WAL record per batch) and applied under the
//!   exclusive lock, then committed outside it, so concurrent writers share
//!   syncs (group commit);
//! - in the plain tree, lookups take no lock: they descend by page latches
//!   and validate against the tree's structure version, which every
//!   multi-page change and every batch of several writes moves (see
//!   `structure_version`); after a few overlapped attempts a lookup waits
//!   for the writer under the shared lock. A scan reads its first 64 KiB
//!   of pairs the same way, and its visitor sees them only once they are
//!   validated; a longer scan goes on under the shared lock if nothing
//!   changed since (else it starts again under it), so every scan sees one
//!   tree. With the insert buffer or SHORTCUT on (whose records and
//!   companion change beside the pages), lookups and scans take the
//!   shared lock;
//! - `SyncMode::Always` returns after the record is durable; `Batched(d)`
//!   syncs from a background thread every `d`; `Never` only at `sync`,
//!   `flush` and close;
//! - when the spill file nears its capacity (see `buffer_pool`), or the WAL
//!   passes [`BTreeOptions::checkpoint_wal_bytes`], a checkpoint installs the tree
//!   (see `checkpoint`) and resets the WAL; a batch in flight and the
//!   insert buffer's records are carried over (see `carry_over`), so a
//!   batch stays all-or-nothing and no buffered write is lost;
//! - with the insert buffer on (TurboIndex), a write whose leaf is not in
//!   the pool is buffered instead of loading the leaf (the write-miss
//!   hook, `insert_buffer::hook`); lookups and scans consult the buffer first;
//! - any failed device write or sync poisons the store: every later call
//!   returns [`Error::Poisoned`]; reopening recovers from disk.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | [`BTreeStore`], its shared state, lookups, scans, `KvStore` |
//! | `open.rs` | the store's devices, sizing the budget, recovery |
//! | `write.rs` | the write path: WAL append, apply, group commit, poisoning |
//! | `checkpoint.rs` | installing the tree as a checkpoint, what it carries over, giving freed pages back |
//! | `compactor.rs` | rebuilding an idle, mostly emptied tree smaller (policy: `compaction`) |
//! | `shortcut_worker.rs` | SHORTCUT's background rebuilds and re-layouts |
//! | `stats.rs` | the engine's counters as [`Stats`] |
//! | `hit_path.rs` | the in-cache lookup's cost, part by part (harness only) |

mod checkpoint;
mod compactor;
#[cfg(feature = "bench-internals")]
mod hit_path;
mod open;
mod read;
mod shortcut_worker;
mod snapshot;
mod stats;
mod write;

#[cfg(feature = "bench-internals")]
pub use hit_path::HitPath;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;

use ferrite_core::engine::{
    check_key, check_value, ApiCounters, Instrumented, PeriodicSync, Poison, SnapshotChain,
    WriteGroup,
};
use ferrite_core::{
    Error, KeyRange, KvStore, Result, ScanVisitor, Stats, StoreSnapshot, SyncMode, WriteBatch,
    WriteCheck,
};
use ferrite_wal::Wal;
use parking_lot::{Mutex, RwLock};

use crate::insert_buffer::hook::{Accesses, Turbo};
use crate::options::BTreeOptions;
use crate::page;
use crate::shape::Shape;
use crate::shortcut::{Shortcut, ShortcutReport};
use crate::tree::{max_key_len, Collected, LevelFill, Tree};

pub use open::Devices;
pub use stats::{BTreeStats, FileCounts, InsertBufferStats};

/// On-disk format version recorded in the store identity. Format 2 adds
/// fence keys to every tree page; a format-1 directory is refused with
/// [`Error::WrongFormat`] rather than read without them. Format 3 writes
/// version-3 meta pages (they record whether a checkpoint carried records
/// over). Format 4 gives pages head slots (see `page`); format-2 and
/// format-3 stores are read and upgraded, their plain pages taking heads
/// as splits rebuild them. Format 5 writes WAL records that claim how far
/// the log was synced (`docs/format/wal.md`), which a format-4 build would
/// read as the log's end; older logs are read as they are. Format 6 logs
/// range deletes (tag 3 of `docs/format/write-batch.md`), which older
/// builds refuse. Format 7 may store an overflow value lz4-compressed
/// (`overflow`), which an older build would return as it is stored.
/// Format 8 writes double-write files that name spilled images in the
/// spill file (`checkpoint`), which an older build would ignore after a
/// crash mid-checkpoint and replay its log over torn pages.
pub const FORMAT_VERSION: u32 = 8;
/// The oldest format this engine reads.
pub const OLDEST_READABLE_FORMAT: u32 = 2;

struct State {
    shape: Shape,
    epoch: u64,
    /// Batches applied since the store opened (bulk loads count one): a
    /// transaction whose snapshot saw the same count read nothing a write
    /// has changed since.
    applied: u64,
    /// The insert buffer's state (TurboIndex; inert in the plain tree).
    turbo: Turbo,
    /// While recovery replays: the batches after the one being applied,
    /// encoded. A checkpoint taken halfway through recovery resets the WAL
    /// that holds them, so it carries them over too; otherwise a crash
    /// before recovery's closing checkpoint would lose them.
    unreplayed: VecDeque<Vec<u8>>,
}

/// Bytes of pairs a scan reads with no lock before it takes the tree's
/// lock for the rest (its visitor sees nothing until the read is
/// validated, so this bounds what it holds). About one leaf: the chunk is
/// read whole however few pairs the visitor wants, so a larger one made a
/// short scan (YCSB E's) copy hundreds of pairs it never showed.
const SCAN_CHUNK: usize = 4 << 10;

/// Shows `got`'s pairs to `visit` until it stops: the bytes shown, and
/// whether it stopped.
fn visit_collected(got: &Collected, visit: &mut ScanVisitor<'_>) -> (u64, bool) {
    let mut bytes = 0u64;
    for i in 0..got.len() {
        let Some((k, v)) = got.get(i) else { break };
        bytes += (k.len() + v.len()) as u64;
        if visit(k, v).is_break() {
            return (bytes, true);
        }
    }
    (bytes, false)
}

#[derive(Default)]
struct Counters {
    api: ApiCounters,
    checkpoints: AtomicU64,
    /// Pages checkpoints installed, and those of them copied to the
    /// double-write file (the others were named in the spill file).
    checkpoint_pages: AtomicU64,
    double_written_pages: AtomicU64,
    /// Delete operations applied (range deletes count one): what wakes
    /// the compactor.
    deleted: AtomicU64,
    compactions: AtomicU64,
    access: Accesses,
}

struct Shared {
    tree: Tree,
    /// SHORTCUT's companion, if on (the tree reports its splits to it).
    shortcut: Option<Arc<Shortcut>>,
    state: RwLock<State>,
    devices: Devices,
    wal: Wal,
    opts: BTreeOptions,
    sync: SyncMode,
    /// Writers grouped behind one leader (`Options::write_group`), or
    /// `None` for each writer on its own.
    group: Option<WriteGroup>,
    poisoned: Poison,
    counters: Counters,
    stop: AtomicBool,
    /// Bytes of WAL written at a time when writes do not sync.
    wal_buffer: usize,
    /// Pages per checkpoint chunk.
    chunk_pages: usize,
    /// Working buffers charged to the budget besides the caches.
    reserve: u64,
    /// Old versions kept for live snapshots (the tree updates in place).
    snapshots: Arc<SnapshotChain>,
    /// Per level, how full the last `verify` found the pages (empty
    /// until one runs): reported in the stats, since a walk of every page
    /// is too costly to repeat for each.
    fill: Mutex<Vec<LevelFill>>,
}

/// The B+tree engine.
pub struct BTreeStore {
    shared: Arc<Shared>,
    /// Syncs the WAL every interval under `SyncMode::Batched`.
    ticker: Option<PeriodicSync>,
    rebuilder: Option<std::thread::JoinHandle<()>>,
    compactor: Option<std::thread::JoinHandle<()>>,
}

impl BTreeStore {
    /// Loads sorted, distinct pairs into an empty store, building leaves
    /// left to right at `fill` (0.5..=1.0 of each page) and the inner
    /// levels above them with large sequential writes, then checkpoints.
    /// Returns the number of pairs loaded.
    pub fn bulk_load_with_fill(
        &self,
        pairs: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>,
        fill: f64,
    ) -> Result<u64> {
        let s = &self.shared;
        s.check_poison()?;
        let mut st = s.state.write();
        st.applied += 1;
        let empty = st.shape.height == 0 && {
            let p = s.tree.pool.fetch(st.shape.root)?;
            let b = p.read();
            page::count(&b) == 0
        };
        if !empty {
            return Err(Error::InvalidOptions(
                "bulk loading needs an empty store".into(),
            ));
        }
        let max_key = max_key_len(s.tree.page_size);
        let n = crate::bulk_load::load(&s.tree, &mut st.shape, pairs, fill, max_key)?;
        *s.tree.level_counts.lock() = None;
        s.checkpoint(&mut st, None)?;
        if let Some(sc) = &s.shortcut {
            sc.stash.take();
            sc.rebuild_locked(&s.tree, &st.shape)?;
        }
        s.counters.api.count_puts(n);
        Ok(n)
    }

    /// SHORTCUT's counters and companion statistics, if it is on.
    pub fn shortcut_report(&self) -> Option<ShortcutReport> {
        self.shared.shortcut.as_ref().map(|sc| sc.report(true))
    }

    /// Zeroes SHORTCUT's runtime counters (not its companion), so a
    /// measurement phase starts from zero.
    pub fn reset_shortcut_counters(&self) {
        if let Some(sc) = &self.shared.shortcut {
            sc.reset_counters();
        }
    }

    /// Rebuilds SHORTCUT's companion and physically re-lays out every
    /// level the policy picks, now, holding the tree's write lock.
    pub fn relayout_shortcut(&self) -> Result<()> {
        let s = &self.shared;
        s.check_poison()?;
        let mut st = s.state.write();
        let Some(sc) = &s.shortcut else {
            return Ok(());
        };
        sc.rebuild_locked(&s.tree, &st.shape)?;
        if sc.levels_to_relocate().is_empty() {
            return Ok(());
        }
        s.relayout_locked(&mut st, sc).inspect_err(|e| s.poison(e))
    }

    /// Rebuilds SHORTCUT's companion now, holding the tree's write lock.
    pub fn rebuild_shortcut(&self) -> Result<()> {
        let s = &self.shared;
        s.check_poison()?;
        let st = s.state.write();
        match &s.shortcut {
            Some(sc) => sc.rebuild_locked(&s.tree, &st.shape),
            None => Ok(()),
        }
    }
}

impl Shared {
    fn check_poison(&self) -> Result<()> {
        self.poisoned.check()
    }

    fn poison(&self, e: &Error) {
        if self.poisoned.set(e) {
            log::error!("btree store poisoned: {e}");
        }
    }

    /// Whether lookups run without the tree's lock (see
    /// `structure_version`): in the plain tree. The insert buffer's records
    /// and SHORTCUT's companion change beside the pages, so with either on
    /// lookups take the lock.
    fn lock_free_lookups(&self) -> bool {
        self.shortcut.is_none() && self.opts.insert_buffer.is_none()
    }

    /// Counts a lookup answered from the leaf (resident or read).
    fn count_lookup(&self, resident: bool, key: &[u8], value: Option<&[u8]>) {
        self.counters.access.count_read(resident);
        self.counters.api.count_get(key, value);
    }

    fn check_key_len(&self, key: &[u8]) -> Result<()> {
        check_key(key)?;
        let max = max_key_len(self.tree.page_size);
        if key.len() > max {
            return Err(Error::KeyTooLarge {
                len: key.len(),
                max,
            });
        }
        Ok(())
    }
}

impl KvStore for BTreeStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.shared.get(key)
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.shared.check_key_len(key)?;
        check_value(value)?;
        self.shared.counters.api.count_puts(1);
        let mut b = WriteBatch::new();
        b.put(key, value)?;
        self.shared.write(&b)
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        self.shared.check_key_len(key)?;
        self.shared.counters.api.count_delete();
        let mut b = WriteBatch::new();
        b.delete(key)?;
        self.shared.write(&b)
    }

    fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.shared.scan(range, visit)
    }

    fn scan_rev(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.shared.scan_rev(range, visit)
    }

    fn write_batch(&self, batch: &WriteBatch) -> Result<()> {
        for op in batch.ops() {
            for k in op.keys() {
                self.shared.check_key_len(k)?;
            }
        }
        self.shared.counters.api.count_batch();
        self.shared.write(batch)
    }

    fn write_batch_if(&self, batch: &WriteBatch, check: &mut WriteCheck<'_>) -> Result<bool> {
        if batch.is_empty() {
            return Ok(true);
        }
        let s = &self.shared;
        for op in batch.ops() {
            for k in op.keys() {
                s.check_key_len(k)?;
            }
        }
        s.counters.api.count_batch();
        s.write_if(batch, &mut |st| check(&read::LockedView { shared: s, st }))
    }

    fn delete_range(&self, start: &[u8], end: &[u8]) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete_range(start, end)?;
        self.write_batch(&b)
    }

    fn snapshot(&self) -> Result<Box<dyn StoreSnapshot>> {
        self.shared.check_poison()?;
        Ok(Box::new(snapshot::BTreeSnapshot::take(&self.shared)))
    }

    fn flush(&self) -> Result<()> {
        let s = &self.shared;
        s.check_poison()?;
        let mut st = s.state.write();
        s.checkpoint(&mut st, None)
    }

    fn sync(&self) -> Result<()> {
        let s = &self.shared;
        s.check_poison()?;
        s.wal.sync().inspect_err(|e| s.poison(e))
    }

    fn stats(&self) -> Stats {
        self.shared.stats()
    }

    fn close(self: Box<Self>) -> Result<()> {
        (*self).close()
    }

    fn bulk_load(&self, sorted: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>) -> Result<u64> {
        self.bulk_load_with_fill(sorted, 0.9)
    }

    fn verify(&self) -> Result<()> {
        let s = &self.shared;
        s.check_poison()?;
        let st = s.state.read();
        let report = s.tree.verify(&st.shape)?;
        *s.fill.lock() = report.levels;
        if let Some(ib) = st.turbo.buffer() {
            ib.check()
                .map_err(|m| Error::corruption("insert buffer", m))?;
            // Every buffered record sits under the leaf its key maps to.
            let mut wrong = None;
            ib.for_each(&mut |page, (key, _)| {
                if wrong.is_none() {
                    match s.tree.leaf_for(&st.shape, key) {
                        Ok(leaf) if leaf == page => {}
                        Ok(leaf) => {
                            wrong = Some(Error::corruption(
                                "insert buffer",
                                format!("a record buffered for page {page} maps to leaf {leaf}"),
                            ))
                        }
                        Err(e) => wrong = Some(e),
                    }
                }
            });
            if let Some(e) = wrong {
                return Err(e);
            }
        }
        Ok(())
    }
}

impl Instrumented for BTreeStore {}

impl BTreeStore {
    /// Stops the background threads and checkpoints, so the log is empty
    /// and recovery has nothing to replay; reports what failed. The
    /// store is closed after it either way.
    pub fn close(mut self) -> Result<()> {
        self.shut_down()
    }

    fn shut_down(&mut self) -> Result<()> {
        if self.shared.stop.swap(true, AcqRel) {
            return Ok(());
        }
        drop(self.ticker.take());
        if let Some(sc) = &self.shared.shortcut {
            sc.poke_stop();
        }
        if let Some(t) = self.rebuilder.take() {
            t.join()
                .map_err(|_| Error::corruption("shortcut worker", "the rebuild thread panicked"))?;
        }
        if let Some(t) = self.compactor.take() {
            t.thread().unpark();
            t.join()
                .map_err(|_| Error::corruption("compactor", "the compaction thread panicked"))?;
        }
        self.shared.check_poison()?;
        let mut st = self.shared.state.write();
        self.shared.checkpoint(&mut st, None)
    }
}

impl Drop for BTreeStore {
    fn drop(&mut self) {
        if let Err(e) = self.shut_down() {
            if !self.shared.poisoned.is_set() {
                log::warn!("btree: closing failed: {e}");
            }
        }
    }
}
