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
//!   hook, `apply_op`); lookups and scans consult the buffer first;
//! - any failed device write or sync poisons the store: every later call
//!   returns [`Error::Poisoned`]; reopening recovers from disk.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::Duration;

use ferrite_core::{
    check_key, check_value, ApiCounters, BatchOp, CacheCounts, DeviceCounts, EngineKind, Error,
    KeyRange, KvStore, Options, PeriodicSync, Poison, Result, ScanVisitor, Stats, StoreIdentity,
    SyncMode, WriteBatch,
};
use ferrite_io::{AlignedBuf, BlockDevice, DirectFile, DirectFileOptions, MemDevice};
use ferrite_wal::Wal;
use parking_lot::{Mutex, RwLock};

use crate::buffer_pool::BufferPool;
use crate::carry_over;
use crate::checkpoint;
use crate::free_space;
use crate::insert_buffer::gate::{self, GateState, Window};
use crate::insert_buffer::{BufferCounters, InsertBuffer, InsertBufferOptions, LoadReason, Offer};
use crate::meta::{Carried, Meta};
use crate::page::{self, PageId, KIND_LEAF};
use crate::shortcut::relayout::{self, LevelMove};
use crate::shortcut::{Progress, Shortcut, ShortcutOptions, ShortcutReport, Variant};
use crate::tree::{max_key_len, Collected, LevelFill, Shape, Tree};

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
    /// SHORTCUT's one-shot traversal, or `None` for dependent descents.
    /// Its companion is reported beside the pool, not taken out of it, so
    /// every variant runs with the same pool.
    pub shortcut: Option<ShortcutOptions>,
}

impl Default for BTreeOptions {
    fn default() -> Self {
        Self {
            page_size: 4096,
            checkpoint_wal_bytes: 64 << 20,
            insert_buffer: None,
            shortcut: None,
        }
    }
}

impl BTreeOptions {
    /// The SHORTCUT configuration with options `o`.
    pub fn shortcut(o: ShortcutOptions) -> Self {
        Self {
            shortcut: Some(o),
            ..Self::default()
        }
    }

    /// The TurboIndex configuration: the default insert buffer on.
    pub fn turbo() -> Self {
        Self {
            insert_buffer: Some(InsertBufferOptions::default()),
            ..Self::default()
        }
    }
}

/// The devices a store lives on.
#[derive(Clone)]
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
    /// Pages whose reuse score reached the threshold, waiting to be loaded
    /// together (their records stay buffered until then).
    hot: Vec<PageId>,
    /// The adaptive insert buffer's gate (unused without one).
    gate: GateWindow,
    /// While recovery replays: the batches after the one being applied,
    /// encoded. A checkpoint taken halfway through recovery resets the WAL
    /// that holds them, so it carries them over too; otherwise a crash
    /// before recovery's closing checkpoint would lose them.
    unreplayed: VecDeque<Vec<u8>>,
}

/// Where the gate's current window started, and what it learned.
#[derive(Debug, Clone, Copy)]
struct GateWindow {
    /// Operations (lookups and writes) at the window's start.
    ops: u64,
    start: Window,
    /// Share of write misses that saved a read, last measured while on.
    saving_share: f64,
    /// The buffer's counters, kept while it is off.
    parked: BufferCounters,
    switches: u64,
}

impl Default for GateWindow {
    fn default() -> Self {
        Self {
            ops: 0,
            start: Window::default(),
            saving_share: 0.5,
            parked: BufferCounters::default(),
            switches: 0,
        }
    }
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

/// Hot pages loaded in one batch of overlapping reads, and pages of a
/// memory-pressure batch read at a time: enough to overlap reads, few
/// enough that the frames they take come back before displacing pages in
/// use.
const LOAD_BATCH: usize = 8;

#[derive(Default)]
struct Counters {
    api: ApiCounters,
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
    /// The insert buffer's byte budget, kept to rebuild it when the gate
    /// turns it back on.
    ib_budget: usize,
}

/// Working memory outside the caches, for a budget of `cache_bytes` with
/// `ps`-byte pages: the WAL's pending bytes and the image written from
/// them, and one checkpoint chunk. Taken out of the budget before the pool
/// is sized, so the engine as a whole stays within it.
fn working_memory(cache_bytes: u64, ps: usize) -> (usize, usize, u64) {
    // 64 KiB holds a typical batch's record whole; the buffer grows past
    // its size by the record that crosses it, which the reserve's second
    // buffer covers.
    let mut wal_buffer = ((cache_bytes / 128) as usize).clamp(64 << 10, 1 << 20);
    let frames = cache_bytes as usize / (ps + crate::buffer_pool::frame_overhead(ps));
    let mut chunk_pages = checkpoint::chunk_pages(frames);
    let reserve = |wal: usize, chunk: usize| (2 * wal + chunk * ps) as u64;
    // Small budgets get smaller checkpoint chunks (more, smaller writes)
    // and then a smaller WAL buffer (more, smaller log writes) rather than
    // a reserve that crowds out the caches.
    while reserve(wal_buffer, chunk_pages) > cache_bytes / 4 {
        if chunk_pages > 1 {
            chunk_pages /= 2;
        } else if wal_buffer > 4 << 10 {
            wal_buffer /= 2;
        } else {
            break;
        }
    }
    (wal_buffer, chunk_pages, reserve(wal_buffer, chunk_pages))
}

/// The fewest frames a pool may have: a split pins up to three pages and
/// each lookup running at the same time one more (with more threads than
/// that, an operation finding every frame pinned fails with an error).
const MIN_FRAMES: usize = 8;

/// The B+tree engine.
pub struct BTreeStore {
    shared: Arc<Shared>,
    /// Syncs the WAL every interval under `SyncMode::Batched`.
    ticker: Option<PeriodicSync>,
    rebuilder: Option<std::thread::JoinHandle<()>>,
}

fn open_file(dir: &Path, name: &str, direct: bool, block: usize) -> Result<Arc<dyn BlockDevice>> {
    let opts = DirectFileOptions {
        direct,
        block_size: block,
        ..DirectFileOptions::default()
    };
    Ok(Arc::new(DirectFile::open_with(dir.join(name), opts)?))
}

impl Devices {
    /// The store's files in `dir`, with O_DIRECT if `direct`. Page-sized
    /// files use blocks of the page size (at most 4 KiB), so pages smaller
    /// than 4 KiB work where the disk's logical block is smaller too.
    pub fn open_dir(dir: &Path, direct: bool, page_size: usize) -> Result<Self> {
        let pb = page_size.min(4096);
        Ok(Self {
            pages: open_file(dir, "pages", direct, pb)?,
            dwb: open_file(dir, "dwb", direct, pb)?,
            wal: open_file(dir, "wal", direct, 4096)?,
            spill: open_file(dir, "spill", direct, pb)?,
            carry: [
                open_file(dir, "carry-0", direct, 4096)?,
                open_file(dir, "carry-1", direct, 4096)?,
            ],
        })
    }

    /// Devices in memory, for a store that lives as long as they do
    /// (block sizes as [`Devices::open_dir`] gives the files).
    pub fn in_memory(page_size: usize) -> Result<Self> {
        let dev = |block: usize| -> Result<Arc<dyn BlockDevice>> {
            Ok(Arc::new(MemDevice::with_block_size(block)?))
        };
        let pb = page_size.min(4096);
        Ok(Self {
            pages: dev(pb)?,
            dwb: dev(pb)?,
            wal: dev(4096)?,
            spill: dev(pb)?,
            carry: [dev(4096)?, dev(4096)?],
        })
    }
}

impl BTreeStore {
    /// Opens or creates the store in directory `dir`.
    /// With the insert buffer on, the directory is a TurboIndex store.
    pub fn open(dir: &Path, options: &Options, bt: BTreeOptions) -> Result<Self> {
        options.validate()?;
        let kind = match (&bt.insert_buffer, &bt.shortcut) {
            (Some(_), Some(_)) => {
                return Err(Error::InvalidOptions(
                    "the insert buffer and SHORTCUT cannot both be on".into(),
                ))
            }
            (Some(_), None) => EngineKind::TurboIndex,
            (None, Some(_)) => EngineKind::Shortcut,
            (None, None) => EngineKind::Btree,
        };
        StoreIdentity::establish(dir, kind, OLDEST_READABLE_FORMAT..=FORMAT_VERSION, options)?;
        let devices = Devices::open_dir(dir, options.direct_io, bt.page_size)?;
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
        // The WAL's and checkpoints' buffers come out of the budget; the
        // caches get the rest.
        let cache_bytes = options.cache_bytes.saturating_sub(reserve);
        let pool_budget = match &bt.insert_buffer {
            Some(ib) => {
                ib.validate().map_err(Error::InvalidOptions)?;
                (cache_bytes as f64 * (1.0 - ib.share)) as u64
            }
            None => cache_bytes,
        };
        // An adaptive insert buffer lends its memory to the pool while it
        // is off: as spare frames, up to a plain pool's count.
        let per = (ps + crate::buffer_pool::frame_overhead(ps)) as u64;
        let lent_frames = match &bt.insert_buffer {
            Some(ib) if ib.adaptive => (cache_bytes / per) as usize,
            _ => 0,
        };
        // A checkpoint may rewrite as many page bytes as the WAL it ends
        // holds, however small the pool.
        let wal_pages = usize::try_from(bt.checkpoint_wal_bytes / ps as u64).unwrap_or(usize::MAX);
        let pool = BufferPool::with_spare(
            devices.pages.clone(),
            devices.spill.clone(),
            ps,
            pool_budget,
            lent_frames,
        )
        .with_spill_floor(wal_pages);
        if pool.capacity() < MIN_FRAMES {
            return Err(Error::InvalidOptions(format!(
                "a cache of {} B leaves the buffer pool {} frames of {ps} B; it needs at least {MIN_FRAMES}",
                options.cache_bytes,
                pool.capacity()
            )));
        }
        let ib_budget = cache_bytes.saturating_sub(pool.memory_bytes()) as usize;
        let ib = bt
            .insert_buffer
            .map(|o| InsertBuffer::new(&o, ib_budget, pool.capacity(), ps));
        let shortcut = match &bt.shortcut {
            Some(o) => {
                o.validate().map_err(Error::InvalidOptions)?;
                Some(Arc::new(Shortcut::new(*o, ps)))
            }
            None => None,
        };
        let tree = Tree::new(pool, ps, shortcut);
        // The newest valid meta page, then any newer checkpoint left in the
        // double-write file.
        let mut meta: Option<Meta> = None;
        let mut written_slots = 0;
        for slot in 0..2u64 {
            if devices.pages.len() >= (slot + 1) * ps as u64 {
                let mut b = AlignedBuf::zeroed(ps);
                devices.pages.read_at(&mut b, slot * ps as u64)?;
                if b.iter().any(|&x| x != 0) {
                    written_slots += 1;
                }
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
        // Only checkpoints write the meta slots, each after its pages are
        // durable in the double-write file, which finishes a torn meta
        // write above. A written slot with no valid meta page is damage,
        // and opening it as a new store would overwrite the tree.
        if meta.is_none() && written_slots > 0 {
            return Err(Error::corruption(
                "page file",
                "its meta pages are damaged and no checkpoint is in the double-write file",
            ));
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
            Some(m) => {
                let mut shape = Shape {
                    root: m.root,
                    height: m.height,
                    page_count: m.page_count,
                    free: Vec::new(),
                    clean: Vec::new(),
                    spare: Vec::new(),
                    level_runs: Vec::new(),
                };
                let (unused, chain) =
                    free_space::read(devices.pages.as_ref(), m.free, m.page_count, ps)?;
                unused.install(&mut shape, &chain);
                (shape, m.epoch)
            }
            None => {
                let p = tree.pool.create(2)?;
                page::init(&mut p.write(), 2, KIND_LEAF, 0);
                (
                    Shape {
                        root: 2,
                        height: 0,
                        page_count: 3,
                        free: Vec::new(),
                        clean: Vec::new(),
                        spare: Vec::new(),
                        level_runs: Vec::new(),
                    },
                    0,
                )
            }
        };
        // What recovery replays, as encoded batches: decoded one at a time,
        // so the log is held in memory once.
        let mut replayed: VecDeque<Vec<u8>> = VecDeque::new();
        let carried = meta.map_or(Carried::Nothing, |m| m.carried);
        if carried != Carried::Nothing {
            let slot = &devices.carry[(epoch % 2) as usize];
            let required = carried == Carried::Written;
            replayed.extend(carry_over::read(slot.as_ref(), epoch, required)?);
        }
        let (wal, salvaged) = Wal::open_with(
            devices.wal.clone(),
            epoch,
            options.wal_recovery,
            &mut |payload| {
                // Damage that passed the record checksum is refused here,
                // before anything is applied.
                WriteBatch::decode(payload)?;
                replayed.push_back(payload.to_vec());
                Ok(())
            },
        )?;
        if let Some(s) = salvaged {
            log::warn!(
                "btree: WAL damaged at offset {}: recovered up to it, {} bytes after it dropped",
                s.offset,
                s.dropped_bytes
            );
        }
        let shared = Arc::new(Shared {
            tree,
            state: RwLock::new(State {
                shape,
                epoch,
                ib,
                hot: Vec::new(),
                gate: GateWindow::default(),
                unreplayed: VecDeque::new(),
            }),
            devices,
            wal,
            opts: bt,
            sync: options.sync,
            poisoned: Poison::new(),
            counters: Counters::default(),
            stop: AtomicBool::new(false),
            wal_buffer,
            chunk_pages,
            reserve,
            fill: Mutex::new(Vec::new()),
            ib_budget,
        });
        {
            let mut st = shared.state.write();
            let replaying = !replayed.is_empty();
            st.unreplayed = replayed;
            while let Some(payload) = st.unreplayed.pop_front() {
                // Carried as in flight, so a checkpoint halfway through
                // replaying it keeps it all or nothing.
                let batch = WriteBatch::decode(&payload)?;
                shared.apply(&mut st, &batch, Some(&payload))?;
            }
            shared.tree.publish(&st.shape);
            if fresh || replaying {
                shared.checkpoint(&mut st, None)?;
            }
            if let Some(sc) = &shared.tree.shortcut {
                // Best effort: a tree whose inner pages cannot be read now
                // is served by dependent descents until a rebuild works.
                if let Err(e) = sc.rebuild_locked(&shared.tree, &st.shape) {
                    log::warn!("shortcut: initial training failed: {e}");
                }
            }
        }
        let rebuilder = match &shared.tree.shortcut {
            Some(sc) if sc.options().variant != Variant::Sync => {
                let s = shared.clone();
                Some(
                    std::thread::Builder::new()
                        .name("btree-shortcut".into())
                        .spawn(move || s.rebuild_loop())
                        .map_err(|e| {
                            Error::InvalidOptions(format!(
                                "cannot start the shortcut rebuild thread: {e}"
                            ))
                        })?,
                )
            }
            _ => None,
        };
        let ticker = match options.sync {
            SyncMode::Batched(every) => {
                let s = shared.clone();
                Some(
                    PeriodicSync::start("btree-group-sync", every, move || s.group_sync())
                        .map_err(|e| {
                            Error::InvalidOptions(format!("cannot start the sync thread: {e}"))
                        })?,
                )
            }
            _ => None,
        };
        Ok(Self {
            shared,
            ticker,
            rebuilder,
        })
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
        *s.tree.level_counts.lock() = None;
        s.checkpoint(&mut st, None)?;
        if let Some(sc) = &s.tree.shortcut {
            sc.stash.take();
            sc.rebuild_locked(&s.tree, &st.shape)?;
        }
        s.counters.api.count_puts(n);
        Ok(n)
    }

    /// SHORTCUT's counters and companion statistics, if it is on.
    pub fn shortcut_report(&self) -> Option<ShortcutReport> {
        self.shared.tree.shortcut.as_ref().map(|sc| sc.report(true))
    }

    /// Zeroes SHORTCUT's runtime counters (not its companion), so a
    /// measurement phase starts from zero.
    pub fn reset_shortcut_counters(&self) {
        if let Some(sc) = &self.shared.tree.shortcut {
            sc.reset_counters();
        }
    }

    /// Rebuilds SHORTCUT's companion and physically re-lays out every
    /// level the policy picks, now, holding the tree's write lock.
    pub fn relayout_shortcut(&self) -> Result<()> {
        let s = &self.shared;
        s.check_poison()?;
        let mut st = s.state.write();
        let Some(sc) = &s.tree.shortcut else {
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
        match &s.tree.shortcut {
            Some(sc) => sc.rebuild_locked(&s.tree, &st.shape),
            None => Ok(()),
        }
    }
}

impl Shared {
    /// The background rebuilder of SHORTCUT's companion: waits for a
    /// poke (or checks every 100 ms), then walks the inner levels a few
    /// pages per hold of the shared lock, so writers are delayed by one
    /// chunk at most, and swaps the new companion in.
    fn rebuild_loop(&self) {
        let Some(sc) = self.tree.shortcut.as_ref() else {
            return;
        };
        while !self.stop.load(Acquire) {
            sc.wait(Duration::from_millis(100));
            if self.stop.load(Acquire) || self.poisoned.is_set() {
                continue;
            }
            if !sc.needs_rebuild(&self.state.read().shape) {
                continue;
            }
            let r = sc.rebuild_in_steps(&self.tree, &|step| {
                if self.stop.load(Acquire) {
                    return Ok(Progress::Stale);
                }
                let st = self.state.read();
                step(&st.shape)
            });
            match r {
                Ok(true) => {
                    if !sc.levels_to_relocate().is_empty() {
                        if let Err(e) = self.relayout_in_steps(sc) {
                            log::warn!("shortcut: background re-layout failed: {e}");
                        }
                    }
                }
                Ok(false) => {}
                Err(e) => log::warn!("shortcut: background rebuild failed: {e}"),
            }
        }
    }

    /// One walk step of a background rebuild or re-layout, under the
    /// shared lock.
    fn walk_step(&self, step: &mut crate::shortcut::WalkStep<'_>) -> Result<Progress> {
        if self.stop.load(Acquire) {
            return Ok(Progress::Stale);
        }
        let st = self.state.read();
        step(&st.shape)
    }

    /// Re-lays out, in the background, every level the policy picks: a
    /// fresh walk lists the level's nodes, which then move into their run
    /// a chunk at a time under the write lock (each chunk's pages read in
    /// beforehand under the shared lock); a last rebuild fits the
    /// companion to the new placement.
    fn relayout_in_steps(&self, sc: &Shortcut) -> Result<()> {
        for level in sc.levels_to_relocate() {
            let started = std::time::Instant::now();
            // The list is taken under the write lock: a stepwise walk could
            // miss nodes that splits moved, and a re-layout must know every
            // node that holds an id in its run. Only the levels above are
            // read, mostly from the pool.
            let mut mv = {
                let mut st = self.state.write();
                let Some(nodes) = Shortcut::list_level_locked(&self.tree, &st.shape, level)? else {
                    continue;
                };
                LevelMove::plan(&self.tree, &mut st.shape, level, nodes)
            };
            while !mv.is_done() {
                if self.stop.load(Acquire) || self.poisoned.is_set() {
                    break;
                }
                {
                    let _st = self.state.read();
                    for id in mv.upcoming(relayout::CHUNK) {
                        drop(self.tree.pool.read(id));
                    }
                }
                let mut st = self.state.write();
                self.move_nodes(&mut st, &mut mv, relayout::CHUNK)
                    .inspect_err(|e| self.poison(e))?;
            }
            let (moved, skipped) = {
                let mut st = self.state.write();
                mv.finish(&self.tree, &mut st.shape)
            };
            sc.note_relayout(moved, skipped, started.elapsed());
        }
        sc.rebuild_in_steps(&self.tree, &|step| self.walk_step(step))
            .map(drop)
    }

    /// SHORTCUT-SYNC's re-layout: the same, all under the writer's lock.
    fn relayout_locked(&self, st: &mut State, sc: &Shortcut) -> Result<()> {
        for level in sc.levels_to_relocate() {
            let started = std::time::Instant::now();
            let Some(nodes) = Shortcut::list_level_locked(&self.tree, &st.shape, level)? else {
                continue;
            };
            let mut mv = LevelMove::plan(&self.tree, &mut st.shape, level, nodes);
            self.move_nodes(st, &mut mv, usize::MAX)?;
            let (moved, skipped) = mv.finish(&self.tree, &mut st.shape);
            sc.note_relayout(moved, skipped, started.elapsed());
        }
        sc.rebuild_locked(&self.tree, &st.shape)
    }

    /// Moves up to `count` nodes of `mv`, checkpointing whenever the pool
    /// needs room.
    fn move_nodes(&self, st: &mut State, mv: &mut LevelMove, count: usize) -> Result<()> {
        for _ in 0..count {
            if mv.is_done() {
                break;
            }
            if self.needs_checkpoint(st) {
                self.checkpoint(st, None)?;
            }
            mv.step(&self.tree, &mut st.shape)?;
        }
        Ok(())
    }

    fn check_poison(&self) -> Result<()> {
        self.poisoned.check()
    }

    fn poison(&self, e: &Error) {
        if self.poisoned.set(e) {
            log::error!("btree store poisoned: {e}");
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
        self.gate(st, logged)?;
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
            // Relief applies the coldest pages' records and may have taken
            // this very leaf: split it (the key may now belong to a new
            // sibling) or kept it in the pool. Then the write goes to the
            // tree, after whatever is still buffered for its leaf.
            let now = self.tree.find_leaf(&st.shape, key, &mut path)?;
            if now != leaf || self.tree.pool.is_resident(now) {
                if st.ib.as_ref().is_some_and(|ib| ib.has(now)) {
                    self.apply_buffered(st, now, logged)?;
                }
                return self.write_tree(st, key, value);
            }
        }
        let Some(ib) = st.ib.as_mut() else {
            return Ok(());
        };
        match ib.offer(leaf, key, value) {
            Offer::Kept => self.relieve(st, logged, None),
            Offer::Load(LoadReason::Hot) => {
                if !st.hot.contains(&leaf) {
                    st.hot.push(leaf);
                }
                if st.hot.len() >= LOAD_BATCH {
                    self.load_hot(st, logged)?;
                }
                Ok(())
            }
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

    /// The gate's counts so far: operations, and the window's fields.
    fn gate_counts(&self, st: &State) -> (u64, Window) {
        let c = &self.counters;
        let lookups = c.read_hits.load(Relaxed) + c.read_misses.load(Relaxed);
        let writes = c.write_hits.load(Relaxed) + c.write_misses.load(Relaxed);
        let k = st.ib.as_ref().map_or(st.gate.parked, |ib| ib.counters);
        let w = Window {
            lookups,
            write_misses: c.write_misses.load(Relaxed),
            loads: k.promoted_loads + k.full_loads + k.pressure_loads,
        };
        (lookups + writes, w)
    }

    /// At the end of each window of operations (two per base pool frame),
    /// turns an adaptive insert buffer off or on as [`gate`] decides: off,
    /// its records are applied and its memory lent to the pool; on, the
    /// pool gives the memory back and the buffer starts empty.
    fn gate(&self, st: &mut State, logged: Option<&[u8]>) -> Result<()> {
        if !self.opts.insert_buffer.is_some_and(|o| o.adaptive) {
            return Ok(());
        }
        let pool = &self.tree.pool;
        let (ops, now) = self.gate_counts(st);
        if ops < st.gate.ops + 2 * pool.base_capacity() as u64 {
            return Ok(());
        }
        let w = Window {
            lookups: now.lookups - st.gate.start.lookups,
            write_misses: now.write_misses - st.gate.start.write_misses,
            loads: now.loads - st.gate.start.loads,
        };
        let on = st.ib.is_some();
        if on {
            st.gate.saving_share = gate::saving_share(&w, st.gate.saving_share);
        }
        let state = GateState {
            on,
            saving_share: st.gate.saving_share,
            frames: pool.spare_capacity() as u64,
            pages: st.shape.page_count,
        };
        let keep = gate::keep_buffering(&w, &state);
        if on && !keep {
            self.drain_buffer(st, logged)?;
            if let Some(ib) = st.ib.take() {
                st.gate.parked = ib.counters;
            }
            pool.lend();
            st.gate.switches += 1;
        } else if !on && keep && pool.reclaim()? {
            if let Some(o) = &self.opts.insert_buffer {
                let mut ib =
                    InsertBuffer::new(o, self.ib_budget, pool.capacity(), self.tree.page_size);
                ib.counters = st.gate.parked;
                st.ib = Some(ib);
                st.gate.switches += 1;
            }
        }
        let (ops, start) = self.gate_counts(st);
        st.gate.ops = ops;
        st.gate.start = start;
        Ok(())
    }

    /// Applies every buffered record, the coldest pages first, reading the
    /// pages a batch at a time.
    fn drain_buffer(&self, st: &mut State, logged: Option<&[u8]>) -> Result<()> {
        st.hot.clear();
        loop {
            let batch = match st.ib.as_mut() {
                Some(ib) if !ib.is_empty() => ib.coldest_batch(usize::MAX),
                _ => return Ok(()),
            };
            if batch.is_empty() {
                return Ok(());
            }
            self.apply_pages(st, &batch, logged, false)?;
        }
    }

    /// Applies the buffered records of `pages`, reading them a batch at a
    /// time with overlapping reads. With `release`, an H page (loaded only
    /// to take its records) leaves the pool at once rather than displace a
    /// page in use, so its frame serves the next batch; an L page stays,
    /// as after a postponed insert.
    fn apply_pages(
        &self,
        st: &mut State,
        pages: &[PageId],
        logged: Option<&[u8]>,
        release: bool,
    ) -> Result<()> {
        let mut done = Vec::with_capacity(LOAD_BATCH);
        for chunk in pages.chunks(LOAD_BATCH) {
            self.tree.pool.prefetch(chunk)?;
            done.clear();
            for &page in chunk {
                self.apply_buffered(st, page, logged)?;
                if release && !st.ib.as_ref().is_some_and(|ib| ib.is_hot(page)) {
                    done.push(page);
                }
            }
            // The chunk's released pages leave together: the changed ones
            // go to the spill file in one batch of writes.
            self.tree.pool.evict_all(&done)?;
        }
        Ok(())
    }

    /// Loads the waiting hot pages with overlapping reads and applies their
    /// buffered records (postponed inserts); they stay in the pool.
    fn load_hot(&self, st: &mut State, logged: Option<&[u8]>) -> Result<()> {
        let mut pages = std::mem::take(&mut st.hot);
        if let Some(ib) = st.ib.as_ref() {
            // Pressure or a resident write may have applied some already.
            pages.retain(|&p| ib.has(p));
        }
        self.tree.pool.prefetch(&pages)?;
        for page in pages {
            self.apply_buffered(st, page, logged)?;
        }
        Ok(())
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
            self.apply_pages(st, &batch, logged, true)?;
        }
        Ok(())
    }

    /// Writes what checkpoint `epoch` carries over — the insert buffer's
    /// records, then the batch in flight, then (during recovery) the
    /// batches not yet replayed — to its slot, and says whether there was
    /// anything to write.
    fn carry_over(&self, st: &State, epoch: u64, inflight: Option<&[u8]>) -> Result<Carried> {
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
        parts.extend(st.unreplayed.iter().map(Vec::as_slice));
        if parts.is_empty() {
            return Ok(Carried::Nothing);
        }
        let slot = &self.devices.carry[(epoch % 2) as usize];
        carry_over::write(slot.as_ref(), epoch, &parts)?;
        Ok(Carried::Written)
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
    /// Refused once the store is poisoned: the tree in memory may then be
    /// half-changed (a batch that failed while being applied), and only
    /// recovery from disk may follow. Background work (SHORTCUT's
    /// re-layouts) checkpoints too, and must never persist such a state.
    fn checkpoint(&self, st: &mut State, inflight: Option<&[u8]>) -> Result<()> {
        self.check_poison()?;
        let pool = &self.tree.pool;
        // The free-list chain lives in free ids: any stale frame or spilled
        // image of those ids is garbage, and the chain's image replaces it.
        let (free, chain) = free_space::chain(&mut st.shape, self.tree.page_size);
        let mut ids = pool.checkpoint_ids();
        ids.retain(|id| chain.binary_search_by_key(id, |(c, _)| *c).is_err());
        ids.extend(chain.iter().map(|(id, _)| *id));
        ids.sort_unstable();
        let mut meta = Meta {
            page_size: self.tree.page_size as u32,
            epoch: st.epoch + 1,
            root: st.shape.root,
            height: st.shape.height,
            page_count: st.shape.page_count,
            free,
            carried: Carried::Nothing,
        };
        let result = meta
            .check_persistable()
            .and_then(|()| self.carry_over(st, meta.epoch, inflight))
            .and_then(|carried| {
                meta.carried = carried;
                checkpoint::install(
                    self.devices.pages.as_ref(),
                    self.devices.dwb.as_ref(),
                    &ids,
                    &mut |group, images| {
                        let ps = self.tree.page_size;
                        let mut from_pool = Vec::with_capacity(group.len());
                        for (&id, buf) in group.iter().zip(images.chunks_mut(ps)) {
                            match chain.binary_search_by_key(&id, |(c, _)| *c) {
                                Ok(i) => buf.copy_from_slice(&chain[i].1),
                                Err(_) => from_pool.push((id, buf)),
                            }
                        }
                        pool.copy_pages(&mut from_pool)
                    },
                    &meta,
                    self.chunk_pages,
                )
            })
            .and_then(|_| {
                pool.checkpoint_done()?;
                free_space::settle(&mut st.shape, &chain);
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
            let splits_before = self.tree.shortcut.as_ref().map(|sc| sc.stash.len());
            // A batch is atomic to lookups too: one of several writes runs
            // inside a change (a single write is atomic by its leaf latch).
            let change = (batch.len() > 1).then(|| self.tree.version.change());
            let applied = self.apply(&mut st, batch, Some(&payload));
            drop(change);
            if let Err(e) = applied {
                // The tree may be half-changed in memory: only recovery
                // from disk can restore a consistent state.
                self.poison(&e);
                return Err(e);
            }
            if let Some(sc) = &self.tree.shortcut {
                if splits_before != Some(sc.stash.len()) {
                    if sc.options().variant == Variant::Sync {
                        // SHORTCUT-SYNC: the rebuild runs here, on the
                        // critical path, with every other operation waiting.
                        if sc.needs_rebuild(&st.shape) {
                            if let Err(e) = sc.rebuild_locked(&self.tree, &st.shape) {
                                log::warn!("shortcut: inline rebuild failed: {e}");
                            } else if !sc.levels_to_relocate().is_empty() {
                                if let Err(e) = self.relayout_locked(&mut st, sc) {
                                    self.poison(&e);
                                    return Err(e);
                                }
                            }
                        }
                    } else {
                        sc.poke(&st.shape);
                    }
                }
            }
            lsn
        };
        self.counters.api.add_written(batch.payload_bytes() as u64);
        let r = match self.sync {
            SyncMode::Always => self.wal.commit(lsn, true),
            _ => self.wal.write_if_over(self.wal_buffer),
        };
        if let Err(e) = &r {
            self.poison(e);
        }
        r
    }

    /// One round of `SyncMode::Batched`'s background sync.
    fn group_sync(&self) -> Result<()> {
        self.poisoned.check()?;
        self.wal.sync().inspect_err(|e| self.poison(e))
    }

    /// Whether lookups run without the tree's lock (see
    /// `structure_version`): in the plain tree. The insert buffer's records
    /// and SHORTCUT's companion change beside the pages, so with either on
    /// lookups take the lock.
    fn lock_free_lookups(&self) -> bool {
        self.tree.shortcut.is_none() && self.opts.insert_buffer.is_none()
    }

    /// Counts a lookup answered from the leaf (resident or read).
    fn count_lookup(&self, resident: bool, key: &[u8], value: Option<&[u8]>) {
        let c = &self.counters;
        if resident {
            c.read_hits.fetch_add(1, Relaxed);
        } else {
            c.read_misses.fetch_add(1, Relaxed);
        }
        c.api.count_get(key, value);
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
        let leaf = match &s.tree.shortcut {
            Some(sc) => sc.leaf_for(&s.tree, &st.shape, key)?,
            None => s.tree.leaf_for(&st.shape, key)?,
        };
        let buffered = st.ib.as_ref().and_then(|ib| ib.lookup(leaf, key));
        let v = match buffered {
            Some(b) => {
                s.counters.buffer_reads.fetch_add(1, Relaxed);
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
        let bytes = match &st.ib {
            Some(ib) if !ib.is_empty() => {
                s.tree
                    .scan_with(&st.shape, range, &|leaf| ib.sorted(leaf), visit)?
            }
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
            ops: c.api.ops(),
            user_bytes_written: c.api.bytes_written(),
            user_bytes_read: c.api.bytes_read(),
            device: dev,
            cache: CacheCounts {
                hits: pool.counters.hits.load(Relaxed),
                misses: pool.counters.misses.load(Relaxed),
                evictions: pool.counters.evictions.load(Relaxed),
            },
            memory_bytes: pool.memory_bytes()
                + s.reserve
                + st.ib.as_ref().map_or(0, |ib| ib.memory_bytes() as u64)
                + s.tree.shortcut.as_ref().map_or(0, |sc| sc.memory_bytes()),
            extra: {
                let mut extra = vec![
                    ("height".into(), f64::from(st.shape.height + 1)),
                    ("pool_frames".into(), pool.capacity() as f64),
                    ("pages".into(), st.shape.page_count as f64),
                    (
                        "free_pages".into(),
                        (st.shape.free.len() + st.shape.clean.len()) as f64,
                    ),
                    ("dirty_pages".into(), pool.dirty_count() as f64),
                    ("spilled_pages".into(), pool.spilled() as f64),
                    ("spill_log_slots".into(), pool.spill_log_slots() as f64),
                    ("working_bytes".into(), s.reserve as f64),
                    ("spills".into(), pool.counters.spills.load(Relaxed) as f64),
                    (
                        "spill_batches".into(),
                        pool.counters.spill_batches.load(Relaxed) as f64,
                    ),
                    (
                        "spill_requests".into(),
                        pool.counters.spill_requests.load(Relaxed) as f64,
                    ),
                    ("checkpoints".into(), c.checkpoints.load(Relaxed) as f64),
                    ("wal_bytes".into(), s.wal.len() as f64),
                    ("write_hits".into(), c.write_hits.load(Relaxed) as f64),
                    ("write_misses".into(), c.write_misses.load(Relaxed) as f64),
                    ("read_hits".into(), c.read_hits.load(Relaxed) as f64),
                    ("read_misses".into(), c.read_misses.load(Relaxed) as f64),
                    ("buffer_reads".into(), c.buffer_reads.load(Relaxed) as f64),
                ];
                if s.opts.insert_buffer.is_some() {
                    extra.extend([
                        ("ib_on".into(), f64::from(u8::from(st.ib.is_some()))),
                        ("ib_switches".into(), st.gate.switches as f64),
                    ]);
                }
                if s.opts.insert_buffer.is_some() {
                    // Counters run on while an adaptive buffer is off, so
                    // differences between two snapshots stay meaningful.
                    let k = st.ib.as_ref().map_or(st.gate.parked, |ib| ib.counters);
                    extra.extend([
                        ("ib_refused_writes".into(), k.refused as f64),
                        ("ib_buffered_writes".into(), k.buffered as f64),
                        ("ib_hot_loads".into(), k.promoted_loads as f64),
                        ("ib_full_loads".into(), k.full_loads as f64),
                        ("ib_pressure_loads".into(), k.pressure_loads as f64),
                        ("ib_applied_records".into(), k.applied_records as f64),
                        (
                            "ib_bytes".into(),
                            st.ib.as_ref().map_or(0.0, |ib| ib.memory_bytes() as f64),
                        ),
                        ("ib_budget_bytes".into(), s.ib_budget as f64),
                    ]);
                }
                if let Some(ib) = &st.ib {
                    let d = ib.detector();
                    extra.extend([
                        ("ib_records".into(), ib.records() as f64),
                        ("ib_pages".into(), ib.pages() as f64),
                        ("ib_stack_nodes".into(), d.len() as f64),
                        ("ib_l_nodes".into(), d.l_count() as f64),
                        ("ib_promotions".into(), d.counters.promotions as f64),
                    ]);
                }
                if let Some(sc) = &s.tree.shortcut {
                    let r = sc.report(false);
                    let (mut p, mut h) = (0u64, 0u64);
                    for (l, (&n, &k)) in r.level_predictions.iter().zip(&r.level_hits).enumerate() {
                        p += n;
                        h += k;
                        if n > 0 {
                            extra.push((format!("sc_accuracy_level_{l}"), k as f64 / n as f64));
                        }
                    }
                    extra.extend([
                        ("sc_predictions".into(), p as f64),
                        ("sc_hits".into(), h as f64),
                        ("sc_prefetched".into(), r.prefetched as f64),
                        ("sc_prefetch_used".into(), r.prefetch_used as f64),
                        ("sc_prefetch_wasted".into(), r.prefetch_wasted as f64),
                        ("sc_rebuilds".into(), r.rebuilds as f64),
                        ("sc_rebuild_seconds".into(), r.rebuild_seconds_total),
                        ("sc_relayouts".into(), r.relayouts as f64),
                        ("sc_relocated".into(), r.relocated as f64),
                        ("sc_relocation_skips".into(), r.relocation_skips as f64),
                        ("sc_lookups".into(), r.lookups as f64),
                        ("sc_prefetch_failed".into(), r.prefetch_failed as f64),
                        ("sc_stale_walks".into(), r.stale_walks as f64),
                        ("sc_disabled_levels".into(), r.disabled_levels as f64),
                        ("sc_relayout_seconds".into(), r.relayout_seconds_total),
                        ("sc_companion_bytes".into(), r.companion_bytes as f64),
                        ("sc_segments".into(), r.segments as f64),
                        ("sc_discontinuities".into(), r.discontinuities as f64),
                        ("sc_stash_entries".into(), r.stash_entries as f64),
                    ]);
                }
                // Pages per level (0 = leaves), found by walking the inner
                // pages only; skipped if a page cannot be read.
                if let Ok(levels) = s.tree.level_pages(&st.shape) {
                    for (i, n) in levels.iter().enumerate() {
                        extra.push((format!("pages_level_{i}"), *n as f64));
                    }
                }
                for (i, f) in s.fill.lock().iter().enumerate() {
                    extra.extend([
                        (format!("fill_level_{i}"), f.mean_fill()),
                        (format!("min_fill_level_{i}"), f.min_fill),
                        (format!("under_half_level_{i}"), f.under_half as f64),
                        (format!("plain_pages_level_{i}"), f.plain_slots as f64),
                    ]);
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
        let report = s.tree.verify(&st.shape)?;
        *s.fill.lock() = report.levels;
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
        drop(self.ticker.take());
        if let Some(sc) = &self.shared.tree.shortcut {
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

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_core::KvStoreExt;

    /// Rewrites every tree page of a closed store in place with `f`, and
    /// counts the pages with head slots it finds.
    fn each_tree_page(pages: &dyn BlockDevice, ps: usize, f: impl Fn(&[u8]) -> Vec<u8>) -> usize {
        let mut heads = 0;
        for id in 2..pages.len() / ps as u64 {
            let mut b = AlignedBuf::zeroed(ps);
            pages.read_at(&mut b, id * ps as u64).unwrap();
            if page::check(&b, id, &|| String::new()).is_err()
                || !matches!(page::kind(&b), page::KIND_LEAF | page::KIND_INNER)
            {
                continue;
            }
            heads += usize::from(page::has_heads(&b));
            let out = f(&b);
            b.copy_from_slice(&out);
            pages.write_at(&b, id * ps as u64).unwrap();
        }
        heads
    }

    /// A store whose pages have the plain slots of format 3 opens, reads
    /// and verifies as it is, and its pages take head slots as writes
    /// split them, every record kept.
    #[test]
    fn pages_of_plain_slots_are_read_and_take_heads_when_they_split() {
        let d = Devices::in_memory(1024).unwrap();
        let opts = Options {
            cache_bytes: 256 << 10,
            sync: SyncMode::Never,
            ..Options::default()
        };
        let bt = BTreeOptions {
            page_size: 1024,
            ..BTreeOptions::default()
        };
        let key = |i: u32| format!("user{:08}", i.wrapping_mul(2_654_435_761) % 100_000_000);
        let mut model = std::collections::BTreeMap::new();
        let db = BTreeStore::open_on(d.clone(), &opts, bt).unwrap();
        for i in 0..4000u32 {
            db.put(key(i).as_bytes(), &i.to_le_bytes()).unwrap();
            model.insert(key(i).into_bytes(), i.to_le_bytes().to_vec());
        }
        drop(db);
        let converted = each_tree_page(d.pages.as_ref(), 1024, page::to_plain);
        assert!(converted > 100, "only {converted} pages had heads");
        assert_eq!(each_tree_page(d.pages.as_ref(), 1024, <[u8]>::to_vec), 0);

        let db = BTreeStore::open_on(d.clone(), &opts, bt).unwrap();
        db.verify().unwrap();
        // Verification counts the pages still to take heads.
        let (plain, leaves) = {
            let s = db.stats();
            (s.extra("plain_pages_level_0"), s.extra("pages_level_0"))
        };
        assert!(leaves.is_some_and(|n| n > 100.0));
        assert_eq!(plain, leaves);
        for (k, v) in &model {
            assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
        }
        for i in 4000..6000u32 {
            db.put(key(i).as_bytes(), &i.to_le_bytes()).unwrap();
            model.insert(key(i).into_bytes(), i.to_le_bytes().to_vec());
        }
        db.verify().unwrap();
        let s = db.stats();
        assert!(s.extra("plain_pages_level_0") < s.extra("pages_level_0"));
        let got: Vec<(Vec<u8>, Vec<u8>)> = db.scan_collect(KeyRange::all(), usize::MAX).unwrap();
        assert!(got.into_iter().eq(model.clone()));
        drop(db);
        let split = each_tree_page(d.pages.as_ref(), 1024, <[u8]>::to_vec);
        assert!(split > 50, "only {split} pages took heads");
    }
}
