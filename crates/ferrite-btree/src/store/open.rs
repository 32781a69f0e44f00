//! Opening a store: its devices, how the memory budget is cut, and
//! recovery.
//!
//! Recovery takes the newer valid meta page, finishes a checkpoint left
//! in the double-write file, reads the free-space chain, then replays what
//! the checkpoint carried over and the WAL after it, and checkpoints again
//! if it replayed anything, so the next crash starts from a clean log. A
//! meta slot that was written but is no longer valid is damage, never a
//! new store.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use ferrite_core::engine::SnapshotChain;
use ferrite_core::engine::{PeriodicSync, Poison, WriteGroup};
use ferrite_core::{Error, Options, Result, StoreIdentity, SyncMode, WriteBatch};
use ferrite_io::{AlignedBuf, BlockDevice, DirectFile, DirectFileOptions, MemDevice};
use ferrite_wal::Wal;
use parking_lot::{Mutex, RwLock};

use super::{BTreeStore, Counters, Shared, State, FORMAT_VERSION, OLDEST_READABLE_FORMAT};
use crate::buffer_pool::BufferPool;
use crate::carry_over;
use crate::checkpoint;
use crate::free_space;
use crate::insert_buffer::hook::Turbo;
use crate::meta::{Carried, Meta};
use crate::options::BTreeOptions;
use crate::page::{self, KIND_LEAF};
use crate::shape::Shape;
use crate::shortcut::{Shortcut, Variant};
use crate::tree::{SplitObserver, Tree};

/// The devices a store lives on.
#[derive(Clone)]
pub struct Devices {
    pub pages: Arc<dyn BlockDevice>,
    pub dwb: Arc<dyn BlockDevice>,
    pub wal: Arc<dyn BlockDevice>,
    /// Dirty pages evicted between checkpoints (see `buffer_pool`): synced
    /// by a checkpoint that names them and read by recovery only to finish
    /// such a checkpoint.
    pub spill: Arc<dyn BlockDevice>,
    /// The two carry-over slots (see `carry_over`): the insert buffer's
    /// records and a batch in flight, replayed on top of a checkpoint.
    pub carry: [Arc<dyn BlockDevice>; 2],
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
    let frames = cache_bytes as usize / (ps + crate::buffer_pool::FRAME_OVERHEAD);
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

/// Old-version bytes live snapshots may keep at least, whatever the cache
/// budget (past the larger of the two they are cut off).
const SNAPSHOT_FLOOR: u64 = 16 << 20;

/// The fewest frames a pool may have: a split pins up to three pages and
/// each lookup running at the same time one more (with more threads than
/// that, an operation finding every frame pinned fails with an error).
const MIN_FRAMES: usize = 8;

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
        let kind = bt.engine_kind().map_err(Error::InvalidOptions)?;
        StoreIdentity::establish(dir, kind, OLDEST_READABLE_FORMAT..=FORMAT_VERSION, options)?;
        let devices = Devices::open_dir(dir, options.direct_io, bt.page_size)?;
        Self::open_on(devices, options, bt)
    }

    /// Opens or creates a store on the given devices (for tests on
    /// fault-injecting or latency devices).
    pub fn open_on(devices: Devices, options: &Options, bt: BTreeOptions) -> Result<Self> {
        options.validate()?;
        bt.validate().map_err(Error::InvalidOptions)?;
        let ps = bt.page_size;
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
        let per = (ps + crate::buffer_pool::FRAME_OVERHEAD) as u64;
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
        let turbo = Turbo::new(bt.insert_buffer, ib_budget, pool.capacity(), ps);
        let shortcut = match &bt.shortcut {
            Some(o) => {
                o.validate().map_err(Error::InvalidOptions)?;
                Some(Arc::new(Shortcut::new(*o, ps)))
            }
            None => None,
        };
        let observer = shortcut.clone().map(|s| s as Arc<dyn SplitObserver>);
        let share = bt.share_leaves && bt.insert_buffer.is_none() && observer.is_none();
        let tree = Tree::new(pool, ps, observer)
            .with_value_compression(bt.compress_values)
            .with_leaf_sharing(share);
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
        let files = checkpoint::Files {
            pages: devices.pages.as_ref(),
            dwb: devices.dwb.as_ref(),
            spill: devices.spill.as_ref(),
        };
        if let Some(m) = checkpoint::recover(files, meta.as_ref(), ps, chunk_pages)? {
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
            shortcut,
            state: RwLock::new(State {
                shape,
                epoch,
                applied: 0,
                turbo,
                unreplayed: VecDeque::new(),
            }),
            devices,
            wal,
            opts: bt,
            sync: options.sync,
            group: options.groups_writes().then(WriteGroup::new),
            poisoned: Poison::new(),
            counters: Counters::default(),
            stop: AtomicBool::new(false),
            wal_buffer,
            chunk_pages,
            reserve,
            snapshots: SnapshotChain::new(options.cache_bytes.max(SNAPSHOT_FLOOR)),
            fill: Mutex::new(Vec::new()),
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
            // Clean ids are holes (see `checkpoint`), also those a store
            // written before pages were given back left.
            shared.hollow(st.shape.clean.clone());
            if let Some(sc) = &shared.shortcut {
                // Best effort: a tree whose inner pages cannot be read now
                // is served by dependent descents until a rebuild works.
                if let Err(e) = sc.rebuild_locked(&shared.tree, &st.shape) {
                    log::warn!("shortcut: initial training failed: {e}");
                }
            }
        }
        let rebuilder = match &shared.shortcut {
            Some(sc) if sc.options().variant != Variant::Sync => {
                let s = shared.clone();
                Some(
                    std::thread::Builder::new()
                        .name("btree-shortcut".into())
                        .spawn(move || s.rebuild_loop())
                        .map_err(|e| Error::resource("the shortcut rebuild thread", e))?,
                )
            }
            _ => None,
        };
        let ticker = match options.sync {
            SyncMode::Batched(every) => {
                let s = shared.clone();
                Some(
                    PeriodicSync::start("btree-group-sync", every, move || s.group_sync())
                        .map_err(|e| Error::resource("the sync thread", e))?,
                )
            }
            _ => None,
        };
        let compactor = {
            let s = shared.clone();
            Some(
                std::thread::Builder::new()
                    .name("btree-compactor".into())
                    .spawn(move || s.compact_loop())
                    .map_err(|e| Error::resource("the compaction thread", e))?,
            )
        };
        Ok(Self {
            shared,
            ticker,
            rebuilder,
            compactor,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_core::{KeyRange, KvStore, KvStoreExt};

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
        let opts = Options::default()
            .cache_bytes(256 << 10)
            .sync(SyncMode::Never);
        let bt = BTreeOptions::default().page_size(1024);
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
            (s.field("plain_pages_level_0"), s.field("pages_level_0"))
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
        assert!(s.field("plain_pages_level_0") < s.field("pages_level_0"));
        let got: Vec<(Vec<u8>, Vec<u8>)> = db.scan_collect(KeyRange::all(), usize::MAX).unwrap();
        assert!(got.into_iter().eq(model.clone()));
        drop(db);
        let split = each_tree_page(d.pages.as_ref(), 1024, <[u8]>::to_vec);
        assert!(split > 50, "only {split} pages took heads");
    }
}
