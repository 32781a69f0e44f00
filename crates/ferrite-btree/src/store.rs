//! The store: a [`Tree`] made durable and shared.
//!
//! Owns the page file, the double-write file and the WAL, and keeps the
//! promise of [`ferrite_core::KvStore`]:
//! - a write is logged (one WAL record per batch) and applied under the
//!   exclusive lock, then committed outside it, so concurrent writers share
//!   syncs (group commit) while readers proceed under the shared lock;
//! - `SyncMode::Always` returns after the record is durable; `Batched(d)`
//!   syncs from a background thread every `d`; `Never` only at `sync`,
//!   `flush` and close;
//! - when dirty pages pass the pool's high-water mark, or the WAL passes
//!   [`BTreeOptions::checkpoint_wal_bytes`], a checkpoint installs the tree
//!   (see `checkpoint`) and resets the WAL; a batch in flight is re-logged
//!   into the new epoch, so it stays all-or-nothing;
//! - any failed device write or sync poisons the store: every later call
//!   returns [`Error::Poisoned`]; reopening recovers from disk.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::Duration;

use ferrite_core::{
    check_key, check_value, BatchOp, CacheCounts, DeviceCounts, EngineKind, Error, KeyRange,
    KvStore, OpCounts, Options, Result, ScanVisitor, Stats, StoreIdentity, SyncMode, WriteBatch,
};
use ferrite_io::{AlignedBuf, BlockDevice, DirectFile, DirectFileOptions};
use ferrite_wal::Wal;
use parking_lot::{Mutex, RwLock};

use crate::buffer_pool::BufferPool;
use crate::checkpoint;
use crate::meta::Meta;
use crate::page::{self, KIND_LEAF};
use crate::tree::{max_key_len, Shape, Tree};

/// On-disk format version recorded in the store identity.
pub const FORMAT_VERSION: u32 = 1;

/// Options specific to the B+tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BTreeOptions {
    /// Page size in bytes: a power of two from 1 KiB to 16 KiB.
    pub page_size: usize,
    /// Checkpoint when the WAL grows past this many bytes (bounds recovery time).
    pub checkpoint_wal_bytes: u64,
}

impl Default for BTreeOptions {
    fn default() -> Self {
        Self {
            page_size: 4096,
            checkpoint_wal_bytes: 64 << 20,
        }
    }
}

/// The three devices a store lives on.
pub struct Devices {
    pub pages: Arc<dyn BlockDevice>,
    pub dwb: Arc<dyn BlockDevice>,
    pub wal: Arc<dyn BlockDevice>,
}

struct State {
    shape: Shape,
    epoch: u64,
}

#[derive(Default)]
struct Counters {
    gets: AtomicU64,
    puts: AtomicU64,
    deletes: AtomicU64,
    scans: AtomicU64,
    batches: AtomicU64,
    user_written: AtomicU64,
    user_read: AtomicU64,
    checkpoints: AtomicU64,
}

struct Shared {
    tree: Tree,
    state: RwLock<State>,
    devices: Devices,
    wal: Wal,
    opts: BTreeOptions,
    sync: SyncMode,
    poisoned: Mutex<Option<String>>,
    /// Set with `poisoned`, so the check on every call needs no lock.
    is_poisoned: AtomicBool,
    counters: Counters,
    stop: AtomicBool,
}

/// The B+tree engine.
pub struct BTreeStore {
    shared: Arc<Shared>,
    ticker: Option<std::thread::JoinHandle<()>>,
}

fn open_file(dir: &Path, name: &str, direct: bool) -> Result<Arc<dyn BlockDevice>> {
    let opts = DirectFileOptions {
        direct,
        ..DirectFileOptions::default()
    };
    Ok(Arc::new(DirectFile::open_with(dir.join(name), opts)?))
}

impl BTreeStore {
    /// Opens or creates the store in directory `dir`.
    pub fn open(dir: &Path, options: &Options, bt: BTreeOptions) -> Result<Self> {
        options.validate()?;
        StoreIdentity::establish(dir, EngineKind::Btree, FORMAT_VERSION, options)?;
        let devices = Devices {
            pages: open_file(dir, "pages", options.direct_io)?,
            dwb: open_file(dir, "dwb", options.direct_io)?,
            wal: open_file(dir, "wal", options.direct_io)?,
        };
        Self::open_on(devices, options, bt)
    }

    /// Opens or creates a store on the given devices (for tests on
    /// fault-injecting or latency devices).
    pub fn open_on(devices: Devices, options: &Options, bt: BTreeOptions) -> Result<Self> {
        options.validate()?;
        let ps = bt.page_size;
        if !ps.is_power_of_two() || !(1024..=16384).contains(&ps) {
            return Err(Error::InvalidOptions(format!(
                "page size {ps} is not a power of two in 1 KiB..16 KiB"
            )));
        }
        if devices.pages.block_size() > ps {
            return Err(Error::InvalidOptions(format!(
                "page size {ps} is smaller than the device block size {}",
                devices.pages.block_size()
            )));
        }
        let pool = BufferPool::new(devices.pages.clone(), ps, options.cache_bytes);
        let tree = Tree {
            pool,
            page_size: ps,
        };
        // The newest valid meta page, then any newer checkpoint left in the
        // double-write file.
        let mut meta: Option<Meta> = None;
        for slot in 0..2u64 {
            if devices.pages.len() >= (slot + 1) * ps as u64 {
                let mut b = AlignedBuf::zeroed(ps);
                devices.pages.read_at(&mut b, slot * ps as u64)?;
                if let Some(m) = Meta::decode(&b) {
                    if meta.is_none_or(|x| m.epoch > x.epoch) {
                        meta = Some(m);
                    }
                }
            }
        }
        if let Some(m) = checkpoint::recover(
            devices.pages.as_ref(),
            devices.dwb.as_ref(),
            meta.as_ref(),
            ps,
        )? {
            meta = Some(m);
        }
        if let Some(m) = &meta {
            if m.page_size as usize != ps {
                return Err(Error::InvalidOptions(format!(
                    "the store was created with {} B pages, not {ps}",
                    m.page_size
                )));
            }
        }
        let fresh = meta.is_none();
        let (shape, epoch) = match meta {
            Some(m) => (
                Shape {
                    root: m.root,
                    height: m.height,
                    page_count: m.page_count,
                    free: Vec::new(),
                },
                m.epoch,
            ),
            None => {
                let p = tree.pool.create(2)?;
                page::init(&mut p.write(), 2, KIND_LEAF, 0);
                (
                    Shape {
                        root: 2,
                        height: 0,
                        page_count: 3,
                        free: Vec::new(),
                    },
                    0,
                )
            }
        };
        let mut replayed = Vec::new();
        let wal = Wal::open(devices.wal.clone(), epoch, &mut |payload| {
            replayed.push(WriteBatch::decode(payload)?);
            Ok(())
        })?;
        let shared = Arc::new(Shared {
            tree,
            state: RwLock::new(State { shape, epoch }),
            devices,
            wal,
            opts: bt,
            sync: options.sync,
            poisoned: Mutex::new(None),
            is_poisoned: AtomicBool::new(false),
            counters: Counters::default(),
            stop: AtomicBool::new(false),
        });
        {
            let mut st = shared.state.write();
            for batch in &replayed {
                shared.apply(&mut st, batch, None)?;
            }
            if fresh || !replayed.is_empty() {
                shared.checkpoint(&mut st, None)?;
            }
        }
        let ticker = match options.sync {
            SyncMode::Batched(every) => {
                let s = shared.clone();
                Some(
                    std::thread::Builder::new()
                        .name("btree-group-sync".into())
                        .spawn(move || s.sync_loop(every))
                        .map_err(|e| {
                            Error::InvalidOptions(format!("cannot start the sync thread: {e}"))
                        })?,
                )
            }
            _ => None,
        };
        Ok(Self { shared, ticker })
    }

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
        s.checkpoint(&mut st, None)?;
        s.counters.puts.fetch_add(n, Relaxed);
        Ok(n)
    }
}

impl Shared {
    fn check_poison(&self) -> Result<()> {
        if !self.is_poisoned.load(Acquire) {
            return Ok(());
        }
        match &*self.poisoned.lock() {
            Some(cause) => Err(Error::Poisoned {
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    fn poison(&self, e: &Error) {
        let mut p = self.poisoned.lock();
        if p.is_none() {
            log::error!("btree store poisoned: {e}");
            *p = Some(e.to_string());
            self.is_poisoned.store(true, Release);
        }
    }

    /// Pages one operation may dirty in the worst case (a split at every
    /// level plus a new root), with room to spare.
    fn headroom(&self, st: &State) -> usize {
        4 * (st.shape.height as usize + 2) + 8
    }

    fn needs_checkpoint(&self, st: &State) -> bool {
        let pool = &self.tree.pool;
        pool.dirty_count() + self.headroom(st) >= pool.capacity()
            || self.wal.len() >= self.opts.checkpoint_wal_bytes
    }

    /// Applies a logged batch; `logged` is its WAL payload, re-logged if a
    /// checkpoint happens halfway through.
    fn apply(&self, st: &mut State, batch: &WriteBatch, logged: Option<&[u8]>) -> Result<()> {
        for op in batch.ops() {
            if self.needs_checkpoint(st) {
                self.checkpoint(st, logged)?;
            }
            match op {
                BatchOp::Put { key, value } => self.tree.put(&mut st.shape, key, value)?,
                BatchOp::Delete { key } => {
                    self.tree.delete(&mut st.shape, key)?;
                }
            }
        }
        Ok(())
    }

    /// Installs the in-memory tree as a new checkpoint and resets the WAL.
    fn checkpoint(&self, st: &mut State, inflight: Option<&[u8]>) -> Result<()> {
        let dirty = self.tree.pool.dirty_pages();
        let meta = Meta {
            page_size: self.tree.page_size as u32,
            epoch: st.epoch + 1,
            root: st.shape.root,
            height: st.shape.height,
            page_count: st.shape.page_count,
        };
        let result = checkpoint::install(
            self.devices.pages.as_ref(),
            self.devices.dwb.as_ref(),
            &dirty,
            &meta,
        )
        .and_then(|_| {
            self.tree.pool.mark_all_clean();
            st.epoch = meta.epoch;
            self.wal.reset(meta.epoch)
        })
        .and_then(|_| match inflight {
            Some(payload) => {
                let lsn = self.wal.append(payload)?;
                self.wal.commit(lsn, true)
            }
            None => Ok(()),
        });
        if let Err(e) = &result {
            self.poison(e);
        }
        self.counters.checkpoints.fetch_add(1, Relaxed);
        result
    }

    fn write(&self, batch: &WriteBatch) -> Result<()> {
        self.check_poison()?;
        let mut payload = Vec::with_capacity(batch.encoded_len());
        batch.encode(&mut payload);
        let lsn = {
            let mut st = self.state.write();
            let lsn = self.wal.append(&payload);
            let lsn = match lsn {
                Ok(l) => l,
                Err(e) => {
                    self.poison(&e);
                    return Err(e);
                }
            };
            if let Err(e) = self.apply(&mut st, batch, Some(&payload)) {
                // The tree may be half-changed in memory: only recovery
                // from disk can restore a consistent state.
                self.poison(&e);
                return Err(e);
            }
            lsn
        };
        self.counters
            .user_written
            .fetch_add(batch.payload_bytes() as u64, Relaxed);
        let r = match self.sync {
            SyncMode::Always => self.wal.commit(lsn, true),
            _ => self.wal.write_if_over(1 << 20),
        };
        if let Err(e) = &r {
            self.poison(e);
        }
        r
    }

    fn sync_loop(&self, every: Duration) {
        while !self.stop.load(Acquire) {
            std::thread::sleep(every);
            if self.poisoned.lock().is_none() {
                if let Err(e) = self.wal.sync() {
                    self.poison(&e);
                }
            }
        }
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
        s.counters.gets.fetch_add(1, Relaxed);
        let st = s.state.read();
        let v = s.tree.get(&st.shape, key)?;
        if let Some(v) = &v {
            s.counters
                .user_read
                .fetch_add((key.len() + v.len()) as u64, Relaxed);
        }
        Ok(v)
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.shared.check_key_len(key)?;
        check_value(value)?;
        self.shared.counters.puts.fetch_add(1, Relaxed);
        let mut b = WriteBatch::new();
        b.put(key, value)?;
        self.shared.write(&b)
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        self.shared.check_key_len(key)?;
        self.shared.counters.deletes.fetch_add(1, Relaxed);
        let mut b = WriteBatch::new();
        b.delete(key)?;
        self.shared.write(&b)
    }

    fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        let s = &self.shared;
        s.check_poison()?;
        s.counters.scans.fetch_add(1, Relaxed);
        let st = s.state.read();
        let bytes = s.tree.scan(&st.shape, range, visit)?;
        s.counters.user_read.fetch_add(bytes, Relaxed);
        Ok(())
    }

    fn write_batch(&self, batch: &WriteBatch) -> Result<()> {
        for op in batch.ops() {
            self.shared.check_key_len(op.key())?;
        }
        self.shared.counters.batches.fetch_add(1, Relaxed);
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
        let s = &self.shared;
        let c = &s.counters;
        let pool = &s.tree.pool;
        let dev = DeviceCounts::from(s.devices.pages.io_stats())
            + DeviceCounts::from(s.devices.wal.io_stats())
            + DeviceCounts::from(s.devices.dwb.io_stats());
        let st = s.state.read();
        Stats {
            ops: OpCounts {
                gets: c.gets.load(Relaxed),
                puts: c.puts.load(Relaxed),
                deletes: c.deletes.load(Relaxed),
                scans: c.scans.load(Relaxed),
                batches: c.batches.load(Relaxed),
            },
            user_bytes_written: c.user_written.load(Relaxed),
            user_bytes_read: c.user_read.load(Relaxed),
            device: dev,
            cache: CacheCounts {
                hits: pool.counters.hits.load(Relaxed),
                misses: pool.counters.misses.load(Relaxed),
                evictions: pool.counters.evictions.load(Relaxed),
            },
            memory_bytes: pool.memory_bytes(),
            extra: {
                let mut extra = vec![
                    ("height".into(), f64::from(st.shape.height + 1)),
                    ("pool_frames".into(), pool.capacity() as f64),
                    ("pages".into(), st.shape.page_count as f64),
                    ("dirty_pages".into(), pool.dirty_count() as f64),
                    ("checkpoints".into(), c.checkpoints.load(Relaxed) as f64),
                    ("wal_bytes".into(), s.wal.len() as f64),
                ];
                // Pages per level (0 = leaves), found by walking the inner
                // pages only; skipped if a page cannot be read.
                if let Ok(levels) = s.tree.level_pages(&st.shape) {
                    for (i, n) in levels.iter().enumerate() {
                        extra.push((format!("pages_level_{i}"), *n as f64));
                    }
                }
                extra
            },
        }
    }

    /// Builds the tree bottom-up at 90% fill; the store must be empty.
    fn bulk_load(&self, sorted: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>) -> Result<u64> {
        self.bulk_load_with_fill(sorted, 0.9)
    }

    fn verify(&self) -> Result<()> {
        let s = &self.shared;
        s.check_poison()?;
        let st = s.state.read();
        s.tree.verify(&st.shape).map(|_| ())
    }
}

impl Drop for BTreeStore {
    fn drop(&mut self) {
        self.shared.stop.store(true, Release);
        if let Some(t) = self.ticker.take() {
            let _ = t.join();
        }
        if self.shared.poisoned.lock().is_none() {
            // Close cleanly: the log is durable and recovery has nothing to replay.
            let mut st = self.shared.state.write();
            if let Err(e) = self.shared.checkpoint(&mut st, None) {
                log::warn!("checkpoint on close failed: {e}");
            }
        }
    }
}
