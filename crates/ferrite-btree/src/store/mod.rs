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
//! | `checkpoint.rs` | installing the tree as a checkpoint, what it carries over |
//! | `shortcut_worker.rs` | SHORTCUT's background rebuilds and re-layouts |
//! | `stats.rs` | the engine's counters as [`Stats`] |

mod checkpoint;
mod open;
mod shortcut_worker;
mod stats;
mod write;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;

use ferrite_core::{
    check_key, check_value, ApiCounters, Error, KeyRange, KvStore, PeriodicSync, Poison, Result,
    ScanVisitor, Stats, SyncMode, WriteBatch,
};
use ferrite_wal::Wal;
use parking_lot::{Mutex, RwLock};

use crate::insert_buffer::hook::{Accesses, Turbo};
use crate::options::BTreeOptions;
use crate::page;
use crate::shortcut::{Shortcut, ShortcutReport};
use crate::tree::{max_key_len, Collected, LevelFill, Shape, Tree};

pub use open::Devices;

/// On-disk format version recorded in the store identity. Format 2 adds
/// fence keys to every tree page; a format-1 directory is refused with
/// [`Error::WrongFormat`] rather than read without them. Format 3 writes
/// version-3 meta pages (they record whether a checkpoint carried records
/// over). Format 4 gives pages head slots (see `page`); format-2 and
/// format-3 stores are read and upgraded, their plain pages taking heads
/// as splits rebuild them. Format 5 writes WAL records that claim how far
/// the log was synced (`docs/format/wal.md`), which a format-4 build would
/// read as the log's end; older logs are read as they are.
pub const FORMAT_VERSION: u32 = 5;
/// The oldest format this engine reads.
pub const OLDEST_READABLE_FORMAT: u32 = 2;

struct State {
    shape: Shape,
    epoch: u64,
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
/// validated, so this bounds what it holds).
const SCAN_CHUNK: usize = 64 << 10;

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
    poisoned: Poison,
    counters: Counters,
    stop: AtomicBool,
    /// Bytes of WAL written at a time when writes do not sync.
    wal_buffer: usize,
    /// Pages per checkpoint chunk.
    chunk_pages: usize,
    /// Working buffers charged to the budget besides the caches.
    reserve: u64,
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
        let s = &self.shared;
        s.check_poison()?;
        s.check_key_len(key)?;
        if s.lock_free_lookups() {
            let lookup = || {
                let leaf = s.tree.leaf_for_published(key)?;
                s.tree.get_in(leaf, key)
            };
            // Overlapped by changes on every attempt: wait for the writer
            // under the tree's lock instead.
            let (v, resident) = match s.tree.version.optimistic(lookup) {
                Some(r) => r?,
                None => {
                    let _st = s.state.read();
                    lookup()?
                }
            };
            s.count_lookup(resident, key, v.as_deref());
            return Ok(v);
        }
        let st = s.state.read();
        let leaf = match &s.shortcut {
            Some(sc) => sc.leaf_for(&s.tree, &st.shape, key)?,
            None => s.tree.leaf_for(&st.shape, key)?,
        };
        let buffered = st.turbo.buffer().and_then(|ib| ib.lookup(leaf, key));
        let v = match buffered {
            Some(b) => {
                s.counters.access.buffer_reads.fetch_add(1, Relaxed);
                b.map(<[u8]>::to_vec)
            }
            None => {
                let (v, resident) = s.tree.get_in(leaf, key)?;
                s.count_lookup(resident, key, v.as_deref());
                return Ok(v);
            }
        };
        s.counters.api.count_get(key, v.as_deref());
        Ok(v)
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
        let s = &self.shared;
        s.check_poison()?;
        s.counters.api.count_scan();
        let mut got = Collected::default();
        let mut prefix_at = None;
        if s.lock_free_lookups() {
            // A short scan is read whole with no lock and validated before
            // the visitor sees any of it, so it shows one tree, as a scan
            // under the lock does.
            let read = || s.tree.collect_published(range, SCAN_CHUNK, &mut got);
            match s.tree.version.optimistic_at(read) {
                Some((Ok(true), _)) => {
                    let bytes = visit_collected(&got, visit).0;
                    s.counters.api.add_read(bytes);
                    return Ok(());
                }
                Some((Ok(false), v)) => prefix_at = Some(v),
                Some((Err(e), _)) => return Err(e),
                None => {}
            }
        }
        let st = s.state.read();
        if prefix_at.is_some_and(|v| s.tree.version.validate(v)) {
            // A long scan: nothing changed since its first chunk was read,
            // so that chunk and the rest, read under the lock, are one tree.
            let (mut bytes, stopped) = visit_collected(&got, visit);
            let last = got.len().checked_sub(1).and_then(|i| got.get(i));
            if let (false, Some((last, _))) = (stopped, last) {
                let rest = KeyRange {
                    start: std::ops::Bound::Excluded(last),
                    end: range.end,
                };
                bytes += s.tree.scan(&st.shape, rest, visit)?;
            }
            s.counters.api.add_read(bytes);
            return Ok(());
        }
        let bytes = match st.turbo.records() {
            Some(ib) => s
                .tree
                .scan_with(&st.shape, range, &|leaf| ib.sorted(leaf), visit)?,
            _ => s.tree.scan(&st.shape, range, visit)?,
        };
        s.counters.api.add_read(bytes);
        Ok(())
    }

    fn write_batch(&self, batch: &WriteBatch) -> Result<()> {
        for op in batch.ops() {
            self.shared.check_key_len(op.key())?;
        }
        self.shared.counters.api.count_batch();
        self.shared.write(batch)
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

impl Drop for BTreeStore {
    fn drop(&mut self) {
        self.shared.stop.store(true, Release);
        drop(self.ticker.take());
        if let Some(sc) = &self.shared.shortcut {
            sc.poke_stop();
        }
        if let Some(t) = self.rebuilder.take() {
            let _ = t.join();
        }
        if !self.shared.poisoned.is_set() {
            // Close cleanly: the log is durable and recovery has nothing to replay.
            let mut st = self.shared.state.write();
            if let Err(e) = self.shared.checkpoint(&mut st, None) {
                log::warn!("checkpoint on close failed: {e}");
            }
        }
    }
}
