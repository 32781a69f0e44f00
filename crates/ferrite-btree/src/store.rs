//! The store: a [`Tree`] made durable and shared.
//!
//! Owns the page file, the double-write file, the WAL and the carry-over
//! slots, and keeps the promise of [`ferrite_core::KvStore`]:
//! - a write is logged (one WAL record per batch) and applied under the
//!   exclusive lock, then committed outside it, so concurrent writers share
//!   syncs (group commit) while readers proceed under the shared lock;
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
//!   hook, `apply_op`); lookups and scans consult the buffer first;
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
use crate::carry_over;
use crate::checkpoint;
use crate::insert_buffer::{InsertBuffer, InsertBufferOptions, LoadReason, Offer};
use crate::meta::Meta;
use crate::page::{self, PageId, KIND_LEAF};
use crate::tree::{max_key_len, Shape, Tree};

/// On-disk format version recorded in the store identity.
pub const FORMAT_VERSION: u32 = 1;

/// Options specific to the B+tree.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BTreeOptions {
    /// Page size in bytes: a power of two from 1 KiB to 16 KiB.
    pub page_size: usize,
    /// Checkpoint when the WAL grows past this many bytes (bounds recovery time).
    pub checkpoint_wal_bytes: u64,
    /// The TurboIndex insert buffer, or `None` for the plain B+tree. Its
    /// share of `Options::cache_bytes` is taken out of the buffer pool's.
    pub insert_buffer: Option<InsertBufferOptions>,
}

impl Default for BTreeOptions {
    fn default() -> Self {
        Self {
            page_size: 4096,
            checkpoint_wal_bytes: 64 << 20,
            insert_buffer: None,
        }
    }
}

impl BTreeOptions {
    /// The TurboIndex configuration: the default insert buffer on.
    pub fn turbo() -> Self {
        Self {
            insert_buffer: Some(InsertBufferOptions::default()),
            ..Self::default()
        }
    }
}

/// The devices a store lives on.
pub struct Devices {
    pub pages: Arc<dyn BlockDevice>,
    pub dwb: Arc<dyn BlockDevice>,
    pub wal: Arc<dyn BlockDevice>,
    /// Scratch space for dirty pages evicted between checkpoints (never
    /// synced, never read by recovery; see `buffer_pool`).
    pub spill: Arc<dyn BlockDevice>,
    /// The two carry-over slots (see `carry_over`): the insert buffer's
    /// records and a batch in flight, replayed on top of a checkpoint.
    pub carry: [Arc<dyn BlockDevice>; 2],
}

struct State {
    shape: Shape,
    epoch: u64,
    ib: Option<InsertBuffer>,
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
    /// Writes whose leaf was in the pool / was not.
    write_hits: AtomicU64,
    write_misses: AtomicU64,
    /// Lookups whose leaf was in the pool / was not / answered by the
    /// insert buffer without reaching the pool.
    read_hits: AtomicU64,
    read_misses: AtomicU64,
    buffer_reads: AtomicU64,
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
    /// Bytes of WAL written at a time when writes do not sync.
    wal_buffer: usize,
    /// Pages per checkpoint chunk.
    chunk_pages: usize,
    /// Working buffers charged to the budget besides the caches.
    reserve: u64,
}

/// Working memory outside the caches, for a budget of `cache_bytes` with
/// `ps`-byte pages: the WAL's pending bytes and the image written from
/// them, and one checkpoint chunk. Taken out of the budget before the pool
/// is sized, so the engine as a whole stays within it.
fn working_memory(cache_bytes: u64, ps: usize) -> (usize, usize, u64) {
    let wal_buffer = ((cache_bytes / 128) as usize).clamp(64 << 10, 1 << 20);
    let frames = cache_bytes as usize / (ps + crate::buffer_pool::FRAME_OVERHEAD);
    let chunk_pages = checkpoint::chunk_pages(frames);
    let reserve = (2 * wal_buffer + chunk_pages * ps) as u64;
    (wal_buffer, chunk_pages, reserve)
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
    /// With the insert buffer on, the directory is a TurboIndex store.
    pub fn open(dir: &Path, options: &Options, bt: BTreeOptions) -> Result<Self> {
        options.validate()?;
        let kind = if bt.insert_buffer.is_some() {
            EngineKind::TurboIndex
        } else {
            EngineKind::Btree
        };
        StoreIdentity::establish(dir, kind, FORMAT_VERSION, options)?;
        let devices = Devices {
            pages: open_file(dir, "pages", options.direct_io)?,
            dwb: open_file(dir, "dwb", options.direct_io)?,
            wal: open_file(dir, "wal", options.direct_io)?,
            spill: open_file(dir, "spill", options.direct_io)?,
            carry: [
                open_file(dir, "carry-0", options.direct_io)?,
                open_file(dir, "carry-1", options.direct_io)?,
            ],
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
        let (wal_buffer, chunk_pages, reserve) = working_memory(options.cache_bytes, ps);
        // Below about 600 KiB the buffers' minimum sizes would eat most of
        // the budget; there the caches keep three quarters of it and the
        // engine's reported memory exceeds the budget.
        let cache_bytes = options.cache_bytes - reserve.min(options.cache_bytes / 4);
        let pool_budget = match &bt.insert_buffer {
            Some(ib) => {
                ib.validate().map_err(Error::InvalidOptions)?;
                (cache_bytes as f64 * (1.0 - ib.share)) as u64
            }
            None => cache_bytes,
        };
        let pool = BufferPool::new(
            devices.pages.clone(),
            devices.spill.clone(),
            ps,
            pool_budget,
        );
        let ib = bt.insert_buffer.map(|o| {
            let budget = cache_bytes.saturating_sub(pool.memory_bytes()) as usize;
            InsertBuffer::new(&o, budget, pool.capacity(), ps)
        });
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
            chunk_pages,
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
        if !fresh {
            let slot = &devices.carry[(epoch % 2) as usize];
            replayed.extend(carry_over::read(slot.as_ref(), epoch)?);
        }
        let wal = Wal::open(devices.wal.clone(), epoch, &mut |payload| {
            replayed.push(WriteBatch::decode(payload)?);
            Ok(())
        })?;
        let shared = Arc::new(Shared {
            tree,
            state: RwLock::new(State { shape, epoch, ib }),
            devices,
            wal,
            opts: bt,
            sync: options.sync,
            poisoned: Mutex::new(None),
            is_poisoned: AtomicBool::new(false),
            counters: Counters::default(),
            stop: AtomicBool::new(false),
            wal_buffer,
            chunk_pages,
            reserve,
        });
        {
            let mut st = shared.state.write();
            for batch in &replayed {
                // Carried as in flight, so a checkpoint halfway through
                // replaying it keeps it all or nothing.
                let mut payload = Vec::with_capacity(batch.encoded_len());
                batch.encode(&mut payload);
                shared.apply(&mut st, batch, Some(&payload))?;
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

    /// A checkpoint is due when the spill file nears its capacity (then
    /// dirty frames could no longer be evicted) or the WAL its size bound.
    fn needs_checkpoint(&self, st: &State) -> bool {
        let pool = &self.tree.pool;
        pool.spilled() + self.headroom(st) >= pool.spill_capacity()
            || self.wal.len() >= self.opts.checkpoint_wal_bytes
    }

    /// Applies a logged batch; `logged` is its WAL payload, carried over if
    /// a checkpoint happens halfway through.
    fn apply(&self, st: &mut State, batch: &WriteBatch, logged: Option<&[u8]>) -> Result<()> {
        for op in batch.ops() {
            match op {
                BatchOp::Put { key, value } => self.apply_op(st, key, Some(value), logged)?,
                BatchOp::Delete { key } => self.apply_op(st, key, None, logged)?,
            }
        }
        Ok(())
    }

    /// Makes room for one operation's dirty pages.
    fn make_room(&self, st: &mut State, logged: Option<&[u8]>) -> Result<()> {
        if self.needs_checkpoint(st) {
            self.checkpoint(st, logged)?;
        }
        Ok(())
    }

    /// A put (`Some`) or delete (`None`) applied to the tree directly.
    fn write_tree(&self, st: &mut State, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        match value {
            Some(v) => self.tree.put(&mut st.shape, key, v),
            None => self.tree.delete(&mut st.shape, key).map(drop),
        }
    }

    /// One write, through the write-miss hook: with the insert buffer on, a
    /// write whose leaf is not resident is buffered instead of loading it.
    fn apply_op(
        &self,
        st: &mut State,
        key: &[u8],
        value: Option<&[u8]>,
        logged: Option<&[u8]>,
    ) -> Result<()> {
        self.make_room(st, logged)?;
        let mut path = Vec::with_capacity(8);
        let leaf = self.tree.find_leaf(&st.shape, key, &mut path)?;
        let resident = self.tree.pool.is_resident(leaf);
        let c = &self.counters;
        if resident {
            c.write_hits.fetch_add(1, Relaxed);
        } else {
            c.write_misses.fetch_add(1, Relaxed);
        }
        let inline_max = self.tree.inline_max();
        let Some(ib) = st.ib.as_mut() else {
            return match value {
                Some(v) => self.tree.put_at(&mut st.shape, &path, leaf, key, v),
                None => self.tree.delete(&mut st.shape, key).map(drop),
            };
        };
        if resident && !ib.has(leaf) {
            ib.note_hit(leaf);
            return match value {
                Some(v) => self.tree.put_at(&mut st.shape, &path, leaf, key, v),
                None => self.tree.delete(&mut st.shape, key).map(drop),
            };
        }
        if resident || !InsertBuffer::fits(key, value, inline_max) {
            // The leaf is in the pool with records a reader left buffered,
            // or the record is too large to buffer: the page's records go
            // first, then this write.
            self.apply_buffered(st, leaf, logged)?;
            return self.write_tree(st, key, value);
        }
        ib.replay_hits();
        if ib.needs_room(leaf) || ib.over_budget() {
            self.relieve(st, logged, Some(leaf))?;
        }
        let Some(ib) = st.ib.as_mut() else {
            return Ok(());
        };
        match ib.offer(leaf, key, value) {
            Offer::Kept => self.relieve(st, logged, None),
            Offer::Load(LoadReason::Hot) => self.apply_buffered(st, leaf, logged),
            Offer::Load(LoadReason::Full) => {
                // Many writes but no reuse inside the locality: apply them
                // and let the page go, as under memory pressure.
                self.apply_buffered(st, leaf, logged)?;
                self.tree.pool.evict(leaf)
            }
            Offer::NoRoom => {
                if ib.has(leaf) {
                    self.apply_buffered(st, leaf, logged)?;
                }
                self.write_tree(st, key, value)
            }
        }
    }

    /// Applies `page`'s buffered records (postponed inserts), loading the
    /// page. The records leave the buffer only once all are applied, so a
    /// checkpoint in between snapshots them.
    fn apply_buffered(&self, st: &mut State, page: PageId, logged: Option<&[u8]>) -> Result<()> {
        let records: Vec<(Vec<u8>, Option<Vec<u8>>)> = match &st.ib {
            Some(ib) => ib
                .sorted(page)
                .into_iter()
                .map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec)))
                .collect(),
            None => return Ok(()),
        };
        for (k, v) in &records {
            self.make_room(st, logged)?;
            self.write_tree(st, k, v.as_deref())?;
        }
        if let Some(ib) = st.ib.as_mut() {
            ib.take(page);
        }
        Ok(())
    }

    /// Keeps the insert buffer within its budget, and with `slot_for`
    /// makes a stack node free for that page: drops cold record-less
    /// nodes, then applies the coldest pages' records in page-id order.
    fn relieve(
        &self,
        st: &mut State,
        logged: Option<&[u8]>,
        slot_for: Option<PageId>,
    ) -> Result<()> {
        for _round in 0..4 {
            let batch = match st.ib.as_mut() {
                Some(ib) => {
                    let full = slot_for.is_some_and(|p| ib.needs_room(p));
                    if !full && !ib.over_budget() {
                        return Ok(());
                    }
                    ib.prune(full);
                    let full = slot_for.is_some_and(|p| ib.needs_room(p));
                    if !full && !ib.over_budget() {
                        return Ok(());
                    }
                    ib.coldest_batch(ib.budget() / 16)
                }
                None => return Ok(()),
            };
            if batch.is_empty() {
                return Ok(());
            }
            for page in batch {
                self.apply_buffered(st, page, logged)?;
                // An H page was loaded only to take its records: it leaves
                // at once rather than displace a page in use. An L page
                // stays, as after a postponed insert.
                let hot = st.ib.as_ref().is_some_and(|ib| ib.is_hot(page));
                if !hot {
                    self.tree.pool.evict(page)?;
                }
            }
        }
        Ok(())
    }

    /// Writes what checkpoint `epoch` carries over — the insert buffer's
    /// records, then the batch in flight — to its slot.
    fn carry_over(&self, st: &State, epoch: u64, inflight: Option<&[u8]>) -> Result<()> {
        let buffered = match &st.ib {
            Some(ib) if !ib.is_empty() => Some(Self::buffered_batch(ib)?),
            _ => None,
        };
        let mut parts: Vec<&[u8]> = Vec::new();
        if let Some(b) = &buffered {
            parts.push(b);
        }
        if let Some(p) = inflight {
            parts.push(p);
        }
        if parts.is_empty() {
            return Ok(());
        }
        let slot = &self.devices.carry[(epoch % 2) as usize];
        carry_over::write(slot.as_ref(), epoch, &parts)
    }

    /// The insert buffer's records as one encoded batch.
    fn buffered_batch(ib: &InsertBuffer) -> Result<Vec<u8>> {
        let mut batch = WriteBatch::new();
        let mut failed = None;
        ib.for_each(&mut |_, (k, v)| {
            let r = match v {
                Some(v) => batch.put(k, v).map(drop),
                None => batch.delete(k).map(drop),
            };
            if let Err(e) = r {
                failed.get_or_insert(e);
            }
        });
        if let Some(e) = failed {
            return Err(e);
        }
        let mut out = Vec::with_capacity(batch.encoded_len());
        batch.encode(&mut out);
        Ok(out)
    }

    /// Installs the in-memory tree as a new checkpoint and resets the WAL.
    fn checkpoint(&self, st: &mut State, inflight: Option<&[u8]>) -> Result<()> {
        let pool = &self.tree.pool;
        let ids = pool.checkpoint_ids();
        let meta = Meta {
            page_size: self.tree.page_size as u32,
            epoch: st.epoch + 1,
            root: st.shape.root,
            height: st.shape.height,
            page_count: st.shape.page_count,
        };
        let result = self
            .carry_over(st, meta.epoch, inflight)
            .and_then(|_| {
                checkpoint::install(
                    self.devices.pages.as_ref(),
                    self.devices.dwb.as_ref(),
                    &ids,
                    &mut |id, buf| pool.copy_page(id, buf),
                    &meta,
                    self.chunk_pages,
                )
            })
            .and_then(|_| {
                pool.checkpoint_done()?;
                st.epoch = meta.epoch;
                self.wal.reset(meta.epoch)
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
            _ => self.wal.write_if_over(self.wal_buffer),
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
        let leaf = s.tree.leaf_for(&st.shape, key)?;
        let buffered = st.ib.as_ref().and_then(|ib| ib.lookup(leaf, key));
        let v = match buffered {
            Some(b) => {
                s.counters.buffer_reads.fetch_add(1, Relaxed);
                b.map(<[u8]>::to_vec)
            }
            None => {
                if s.tree.pool.is_resident(leaf) {
                    s.counters.read_hits.fetch_add(1, Relaxed);
                } else {
                    s.counters.read_misses.fetch_add(1, Relaxed);
                }
                s.tree.get_in(leaf, key)?
            }
        };
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
        let bytes = match &st.ib {
            Some(ib) if !ib.is_empty() => {
                s.tree
                    .scan_with(&st.shape, range, &|leaf| ib.sorted(leaf), visit)?
            }
            _ => s.tree.scan(&st.shape, range, visit)?,
        };
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
            + DeviceCounts::from(s.devices.dwb.io_stats())
            + DeviceCounts::from(s.devices.spill.io_stats())
            + DeviceCounts::from(s.devices.carry[0].io_stats())
            + DeviceCounts::from(s.devices.carry[1].io_stats());
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
            memory_bytes: pool.memory_bytes()
                + s.reserve
                + st.ib.as_ref().map_or(0, |ib| ib.memory_bytes() as u64),
            extra: {
                let mut extra = vec![
                    ("height".into(), f64::from(st.shape.height + 1)),
                    ("pool_frames".into(), pool.capacity() as f64),
                    ("pages".into(), st.shape.page_count as f64),
                    ("dirty_pages".into(), pool.dirty_count() as f64),
                    ("spilled_pages".into(), pool.spilled() as f64),
                    ("working_bytes".into(), s.reserve as f64),
                    ("spills".into(), pool.counters.spills.load(Relaxed) as f64),
                    ("checkpoints".into(), c.checkpoints.load(Relaxed) as f64),
                    ("wal_bytes".into(), s.wal.len() as f64),
                    ("write_hits".into(), c.write_hits.load(Relaxed) as f64),
                    ("write_misses".into(), c.write_misses.load(Relaxed) as f64),
                    ("read_hits".into(), c.read_hits.load(Relaxed) as f64),
                    ("read_misses".into(), c.read_misses.load(Relaxed) as f64),
                    ("buffer_reads".into(), c.buffer_reads.load(Relaxed) as f64),
                ];
                if let Some(ib) = &st.ib {
                    let k = ib.counters;
                    let d = ib.detector();
                    extra.extend([
                        ("ib_refused_writes".into(), k.refused as f64),
                        ("ib_bytes".into(), ib.memory_bytes() as f64),
                        ("ib_budget_bytes".into(), ib.budget() as f64),
                        ("ib_records".into(), ib.records() as f64),
                        ("ib_pages".into(), ib.pages() as f64),
                        ("ib_stack_nodes".into(), d.len() as f64),
                        ("ib_l_nodes".into(), d.l_count() as f64),
                        ("ib_promotions".into(), d.counters.promotions as f64),
                        ("ib_buffered_writes".into(), k.buffered as f64),
                        ("ib_hot_loads".into(), k.promoted_loads as f64),
                        ("ib_full_loads".into(), k.full_loads as f64),
                        ("ib_pressure_loads".into(), k.pressure_loads as f64),
                        ("ib_applied_records".into(), k.applied_records as f64),
                    ]);
                }
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
        s.tree.verify(&st.shape)?;
        if let Some(ib) = &st.ib {
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
