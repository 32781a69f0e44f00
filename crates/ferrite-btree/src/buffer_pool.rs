//! The buffer pool: a fixed set of page frames under a byte budget.
//!
//! Owns every page in memory. Invariants:
//! - at most one frame holds a page, found through the page table;
//! - a pinned frame is never evicted; guards pin and unpin;
//! - the page file always holds exactly the last checkpoint (checkpoints
//!   write through a double-write file; see `checkpoint`). A dirty frame
//!   chosen as a victim is therefore *spilled*: written to the spill file,
//!   where the spill log (`spill_log`) says, and read back from there on
//!   its next miss. Between checkpoints recovery never reads the spill
//!   file (the WAL redoes everything since the checkpoint). The next
//!   checkpoint installs every dirty frame and every spilled page; a
//!   spilled page not dirty in a frame is named where it lies in the spill
//!   file, which is synced and serves as that page's torn-page protection
//!   until the checkpoint's meta page is written (see `checkpoint`); then
//!   the file is forgotten;
//! - a dirty victim's write carries the cold dirty frames the clock hand
//!   reaches next (up to [`SPILL_BATCH`] pages); they stay resident and
//!   clean, so their evictions cost no write. The batch takes consecutive
//!   slots of the spill log and goes out as one gathered write per run of
//!   them (`BlockDevice::write_gathered`): one sequential write instead
//!   of sixteen random ones;
//! - a spilled page's slot is held while it is read, so no spill hands it
//!   to another page meanwhile;
//! - at most [`spill_cap`] pages are spilled between checkpoints (the tree
//!   checkpoints before that, which bounds a checkpoint's size); with that
//!   many spilled, dirty frames are not evicted;
//! - the memory it holds (frames, their metadata and the page table: see
//!   [`FRAME_OVERHEAD`]; the spill log's ring) stays within the budget
//!   given at creation; pages past the spill log's map spill to the mirror
//!   region, which adds one bit per page of the tree, counted in
//!   [`BufferPool::memory_bytes`];
//! - the spill log's map and the route tables are paid for by use: a
//!   frame is *retired* (emptied, pinned for good, so the clock passes it)
//!   and its buffer becomes a chunk of the map or four route tables, when
//!   the tree's page ids reach past the map or a reader finds no free
//!   table. Each has a ceiling (the map's `covered` ids; a 64th of the
//!   budget for routes), so a pool gives up at most what a reservation
//!   for the worst case would take, and usually a few frames;
//! - a pool may have *spare* frames beyond its base ones: metadata only,
//!   with no page buffer, until memory another structure gave up is lent
//!   to the pool ([`BufferPool::lend`]); [`BufferPool::reclaim`] empties
//!   them and frees their buffers again. Only frames below the active
//!   count hold pages.
//!
//! - a frame holding an inner page may keep a *route table*: for each child
//!   position, the frame the child was last found in. A descent reads a
//!   child through its route and checks, under the latch it reads with,
//!   that the frame holds the child's id; only a stale or unknown route
//!   sends it to the page table. Routes are never trusted, so eviction
//!   changes none; route tables come from retired frames (see above), and
//!   a frame keeps its table when it changes pages.
//!
//! Readers of the tree fetch concurrently: the page table is behind a lock
//! held exclusively only to claim a frame, never across I/O; a frame being
//! loaded is write-latched until its bytes arrive, and a failed load leaves
//! it empty. A dirty victim is spilled while it stays seized and in the
//! table under its old id and the new one, so a lookup of either waits on
//! its latch and then finds the new page (a miss on the old one then finds
//! it in the spill log). A frame changes pages only once *seized*: pinned
//! from zero to one and latched exclusively, both without waiting; anyone
//! who pins a frame checks its page id under its latch, so a pin taken
//! before the seizure makes it fail and one taken after finds the new id.
//! Pages are marked dirty under their latch, so a spill that clears the
//! mark under the latch never hides a later change. Lock order: a thread
//! may take the table lock while it holds latches of frames it pinned (a
//! batch load latches each frame it claims, then claims the next), so
//! under the table lock latches are only tried, never waited for (a latch
//! a reader holds makes a victim or a spill companion pass), and lookups
//! by id release the table before latching the frame they found.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, OnceLock};

use ferrite_core::{Error, Result};
use ferrite_io::{AlignedBuf, AtomicWords, BlockDevice, GatherReq};
use parking_lot::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::checkpoint;
use crate::clock::{cleaning_batch, pick_victim, FrameState};
use crate::page::{self, PageId};
use crate::page_map::PageMap;
use crate::spill_log::{self, SpillLog, Spot};

const EMPTY: u64 = u64::MAX;

/// The id of a retired frame: matches no page, and is not [`EMPTY`], so no
/// path takes the frame as free.
const RETIRED: u64 = u64::MAX - 1;

type PageTable = PageMap<usize>;

/// Bytes of bookkeeping per frame beyond the page itself: the frame's
/// atomics and lock, its buffer header, its free-list slot, and a
/// page-table entry with load.
pub const FRAME_OVERHEAD: usize = 128;

/// Page ids the spill log's map may cover per frame (see `spill_log`):
/// one per 100 bytes of page, 40 for 4 KiB pages. A pool of a fortieth
/// of its tree's pages thus may map every page, so every spilled page goes
/// to the log; past the map, pages go to the mirror, as they would with a
/// smaller pool. The map grows to the tree's ids by use (see the module
/// docs), two bytes per id.
pub fn spill_ids_per_frame(page_size: usize) -> usize {
    (page_size / 100).max(1)
}

/// A pool never retires more than this share of its base frames,
/// whatever its ceilings allow (with 4 KiB pages they allow about 3.5%).
const RETIRE_MAX_SHARE: usize = 8;

/// Heap bytes of one retired frame's route tables beyond its buffer: the
/// shared handle's allocation.
const ROUTE_PAGE_HEADER: usize =
    2 * std::mem::size_of::<usize>() + std::mem::size_of::<AtomicWords>();

/// One frame's route table: a slice of a retired frame's buffer.
struct RouteTable {
    words: Arc<AtomicWords>,
    at: usize,
}

/// Entries of a frame's route table: one per child an inner page of this
/// size can have with one-byte separators (a slot and a cell of 17
/// bytes), rounded up to a power of two and capped, so that in practice
/// every child has its own entry.
fn route_slots(page_size: usize) -> usize {
    (page_size / 16).next_power_of_two().clamp(16, 4096)
}

/// Bytes a pool of `budget` bytes (`lent_frames` spare) holds whatever
/// its use: the spill log's own part (`spill_log::own_bytes_for`), and
/// route tables' headers for as many retired frames as it may make. The
/// frames pay for everything else a reservation would have held.
fn fixed_bytes(budget: u64, lent_frames: usize, page_size: usize) -> usize {
    let per = (page_size + FRAME_OVERHEAD) as u64;
    let frames = lent_frames.max((budget / per) as usize);
    let covered = frames as u64 * spill_ids_per_frame(page_size) as u64;
    let route_headers = route_frames_cap(budget, page_size)
        * (ROUTE_PAGE_HEADER + tables_per_frame(page_size) * std::mem::size_of::<RouteTable>());
    spill_log::own_bytes_for(covered, page_size) + route_headers
}

/// Route tables one retired frame's buffer holds.
fn tables_per_frame(page_size: usize) -> usize {
    page_size / (route_slots(page_size) * std::mem::size_of::<AtomicU32>())
}

/// Frames a pool may retire for route tables: a sixty-fourth of its budget,
/// enough for one frame in 16 (with 4 KiB pages) to hold an inner page,
/// where a tree of 4 KiB pages has about one inner page per hundred leaves.
/// A pool too small to give a table to at least a few frames keeps none.
fn route_frames_cap(budget: u64, page_size: usize) -> usize {
    let frames = (budget / 64) as usize / page_size;
    if frames * tables_per_frame(page_size) < 4 {
        0
    } else {
        frames
    }
}

/// Pages that may be spilled between checkpoints, per frame.
pub const SPILL_PER_FRAME: usize = 4;

/// How many pages a pool of `frames` frames may spill between
/// checkpoints: [`SPILL_PER_FRAME`] per frame, or `floor` if that is more.
/// The store sets the floor to the pages its WAL bound covers, so a small
/// pool under random writes is not checkpointed every few hundred writes:
/// each checkpoint rewrites every page dirtied since the last, and a
/// larger allowance lets one write absorb several changes to a page.
pub fn spill_cap(frames: usize, floor: usize) -> usize {
    frames.saturating_mul(SPILL_PER_FRAME).max(floor)
}

/// Most pages one spill writes: a dirty victim and the cold dirty frames
/// the hand reaches next, written as one overlapped batch (on a virtio
/// SSD sixteen random 4 KiB writes in flight take about four times as long
/// as one, so each page costs a quarter of a lone write).
pub const SPILL_BATCH: usize = 16;

/// How many frames past the hand a spill looks through for companions.
const CLEANING_WINDOW: usize = 64;

/// The clock hand and the frames known to be empty (taken before the
/// clock runs, so an emptied frame is reused before any page is evicted).
struct Hand {
    at: usize,
    free: Vec<usize>,
}

struct Frame {
    id: AtomicU64,
    data: RwLock<AlignedBuf>,
    pins: AtomicU32,
    referenced: AtomicBool,
    dirty: AtomicBool,
    /// While the frame holds an inner page: the frames where its children
    /// were last found, by position (see [`Route`]). Given the first time
    /// a child is found below the frame, from the tables retired frames
    /// hold; kept when the frame changes pages, since every entry is
    /// checked against the frame it names before it is trusted.
    routes: OnceLock<RouteTable>,
}

/// Where a descent found a child page: the frame of the parent it read
/// and the child's position among the parent's children
/// ([`page::child_route`]).
///
/// This is the pool's form of a swizzled child reference. LeanStore
/// writes a frame's address into the parent's child pointer and must
/// unswizzle it (find the parent, rewrite the pointer) before the child
/// may leave; here the parent's bytes stay exactly as on disk and the
/// frame number sits beside them, in the parent frame's route table. A
/// route is a claim to verify, not a pointer to trust: the reader latches
/// the frame it names and checks that the frame holds the child's id (as
/// every lookup by id already does), so eviction changes no route: a
/// stale one fails that check and the reader falls back to the page table.
/// The reference bit the clock clears before it evicts is the cooling
/// stage: a child read through its route sets it again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    pub parent: usize,
    pub position: usize,
}

/// How [`BufferPool::read_child`] found a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    /// In the frame its route named.
    Routed,
    /// Resident, through the page table.
    Table,
    /// Read from the device (or waited for while another reader did).
    Loaded,
}

impl Found {
    pub fn resident(self) -> bool {
        self != Found::Loaded
    }
}

/// Counters of pool activity.
#[derive(Debug, Default)]
pub struct PoolCounters {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub evictions: AtomicU64,
    /// Dirty victims written to the spill file.
    pub spills: AtomicU64,
    /// Spill writes that carried more than one page.
    pub spill_batches: AtomicU64,
    /// Write requests spills made: one per run of pages contiguous in the
    /// spill file.
    pub spill_requests: AtomicU64,
    /// Hits found through a route, without the page table (counted apart
    /// from `hits`, which counts the table's).
    pub routed: AtomicU64,
}

pub struct BufferPool {
    dev: Arc<dyn BlockDevice>,
    spill_dev: Arc<dyn BlockDevice>,
    spill: Mutex<SpillLog>,
    page_size: usize,
    frames: Vec<Frame>,
    /// Frames that may hold pages: `base`, or every frame while the spare
    /// ones are lent.
    active: AtomicUsize,
    base: usize,
    /// The least number of pages that may be spilled (see [`spill_cap`]).
    spill_floor: usize,
    table: RwLock<PageTable>,
    hand: Mutex<Hand>,
    dirty: AtomicUsize,
    /// Entries of a frame's route table (a power of two: positions past
    /// it share entries).
    route_slots: usize,
    /// Frames that may be retired for route tables, and those that were.
    route_cap: usize,
    route_frames: AtomicUsize,
    /// Route tables made and not yet given to a frame.
    route_free: Mutex<Vec<RouteTable>>,
    /// A reader found no free table: the next claim retires a frame.
    route_wanted: AtomicBool,
    /// Frames given a route table.
    routed: AtomicUsize,
    /// Frames retired, for route tables or the spill log's map.
    retired: AtomicUsize,
    /// Where the base frames' pages lie (one slab, frame `i`'s at
    /// `slab + i * stride`), so a page can be prefetched before its
    /// frame's latch is read.
    slab: usize,
    stride: usize,
    pub counters: PoolCounters,
}

/// What [`BufferPool::claim`] returns: the frame, pinned and latched, and
/// the table lock.
type Claimed<'p> = (
    usize,
    RwLockWriteGuard<'p, AlignedBuf>,
    RwLockWriteGuard<'p, PageTable>,
);

/// A pinned page.
pub struct PageRef<'p> {
    pool: &'p BufferPool,
    frame: usize,
}

impl PageRef<'_> {
    pub fn read(&self) -> RwLockReadGuard<'_, AlignedBuf> {
        self.pool.frame(self.frame).data.read()
    }

    /// Write access; marks the page dirty. Callers hold the tree's write lock.
    pub fn write(&self) -> RwLockWriteGuard<'_, AlignedBuf> {
        let f = self.pool.frame(self.frame);
        // Marked under the latch: a spill that cleans the frame clears the
        // mark while it holds the latch, so a change made after the spill
        // always leaves the page marked.
        let guard = f.data.write();
        if !f.dirty.swap(true, AcqRel) {
            self.pool.dirty.fetch_add(1, AcqRel);
        }
        guard
    }
}

/// A page held for reading: latched shared, with the frame verified to
/// hold the page. It takes no pin: the latch alone keeps the frame's page,
/// since a frame changes pages only once seized, and seizing never waits
/// for a latch (the clock passes a frame a reader holds). Leaving out the
/// pin saves two atomic read-modify-writes per page on the lookup path,
/// each of which is a full barrier on x86.
pub struct PageRead<'p> {
    guard: RwLockReadGuard<'p, AlignedBuf>,
    frame: usize,
}

impl PageRead<'_> {
    /// The route to this page's child at `position` (this page being an
    /// inner page), for [`BufferPool::read_child`].
    pub fn route(&self, position: usize) -> Route {
        Route {
            parent: self.frame,
            position,
        }
    }
}

impl std::ops::Deref for PageRead<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.guard
    }
}

impl Drop for PageRef<'_> {
    fn drop(&mut self) {
        self.pool.frame(self.frame).pins.fetch_sub(1, AcqRel);
    }
}

impl BufferPool {
    #[cfg(test)]
    /// A pool using at most `budget` bytes (at least 64 frames), spilling
    /// dirty victims to `spill_dev`.
    pub fn new(
        dev: Arc<dyn BlockDevice>,
        spill_dev: Arc<dyn BlockDevice>,
        page_size: usize,
        budget: u64,
    ) -> Self {
        Self::with_spare(dev, spill_dev, page_size, budget, 0)
    }

    /// A pool of base frames within `budget` bytes (less the metadata of
    /// its spare frames and the spill log's fixed part), with spare frames
    /// up to `lent_frames` in all, which hold pages only while lent.
    pub fn with_spare(
        dev: Arc<dyn BlockDevice>,
        spill_dev: Arc<dyn BlockDevice>,
        page_size: usize,
        budget: u64,
        lent_frames: usize,
    ) -> Self {
        let per = (page_size + FRAME_OVERHEAD) as u64;
        let route_slots = route_slots(page_size);
        let route_cap = route_frames_cap(budget, page_size);
        let ids_per_frame = spill_ids_per_frame(page_size) as u64;
        let budget = budget.saturating_sub(fixed_bytes(budget, lent_frames, page_size) as u64);
        let spare_metadata = lent_frames.saturating_sub((budget / per) as usize) * FRAME_OVERHEAD;
        let budget = budget.saturating_sub(spare_metadata as u64);
        // The store refuses budgets too small for a working pool.
        let n = (budget / per).max(1) as usize;
        let spare = lent_frames.saturating_sub(n);
        // One slab for all frames: page-aligned allocations made one by one
        // would each cost a second page.
        let bufs = AlignedBuf::slab(n, page_size);
        let slab = bufs.first().map_or(0, AlignedBuf::addr);
        let stride = match bufs.get(1) {
            Some(b) => b.addr().wrapping_sub(slab),
            None => 0,
        };
        let frames = bufs
            .into_iter()
            .chain((0..spare).map(|_| AlignedBuf::zeroed(0)))
            .map(|buf| Frame {
                id: AtomicU64::new(EMPTY),
                data: RwLock::new(buf),
                pins: AtomicU32::new(0),
                referenced: AtomicBool::new(false),
                dirty: AtomicBool::new(false),
                routes: OnceLock::new(),
            })
            .collect();
        Self {
            dev,
            spill_dev,
            spill: Mutex::new(SpillLog::new(
                spill_cap(n, 0),
                (n + spare) as u64 * ids_per_frame,
                page_size,
            )),
            page_size,
            frames,
            active: AtomicUsize::new(n),
            base: n,
            spill_floor: 0,
            table: RwLock::new(PageTable::with_capacity_and_hasher(
                n + spare,
                Default::default(),
            )),
            hand: Mutex::new(Hand {
                at: 0,
                free: (0..n).rev().collect(),
            }),
            dirty: AtomicUsize::new(0),
            route_slots,
            route_cap,
            route_frames: AtomicUsize::new(0),
            route_free: Mutex::new(Vec::new()),
            route_wanted: AtomicBool::new(false),
            routed: AtomicUsize::new(0),
            retired: AtomicUsize::new(0),
            slab,
            stride,
            counters: PoolCounters::default(),
        }
    }

    /// The byte offset of page `id`; an id no file reaches is corruption.
    fn offset(&self, id: PageId) -> Result<u64> {
        page::offset(id, self.page_size)
            .ok_or_else(|| Error::corruption(format!("page {id}"), "an id past any page file"))
    }

    fn frame(&self, i: usize) -> &Frame {
        // Frame indices only come from the page table and the clock, both
        // bounded by the frame count.
        &self.frames[i]
    }

    pub fn device(&self) -> &dyn BlockDevice {
        self.dev.as_ref()
    }

    /// Frames that hold pages now.
    pub fn capacity(&self) -> usize {
        self.active.load(Acquire)
    }

    /// Frames the pool has without lent memory.
    pub fn base_capacity(&self) -> usize {
        self.base
    }

    #[cfg(test)]
    pub fn spare_bytes(&self) -> u64 {
        (self.spare_capacity() * self.page_size) as u64
    }

    /// Frames that may be lent.
    pub fn spare_capacity(&self) -> usize {
        self.frames.len() - self.base
    }

    /// Gives the spare frames page buffers (one allocation), so they take
    /// pages like the others; the memory must have been freed elsewhere.
    /// Returns false if they are lent already or there are none.
    pub fn lend(&self) -> bool {
        let _table = self.table.write();
        let mut hand = self.hand.lock();
        let n = self.frames.len();
        if self.capacity() == n {
            return false;
        }
        for (k, buf) in AlignedBuf::slab(n - self.base, self.page_size)
            .into_iter()
            .enumerate()
        {
            let i = self.base + k;
            *self.frame(i).data.write() = buf;
            hand.free.push(i);
        }
        self.active.store(n, Release);
        self.spill.lock().cap = spill_cap(n, self.spill_floor);
        true
    }

    /// Takes the spare frames back: their pages leave the pool (dirty ones
    /// through the spill file) and their buffers are freed. Callers exclude
    /// all other pool users. Returns false, changing nothing, if a spare
    /// frame is pinned or the spill file has no room for their dirty pages.
    pub fn reclaim(&self) -> Result<bool> {
        let mut table = self.table.write();
        let mut hand = self.hand.lock();
        let n = self.frames.len();
        if self.capacity() == self.base {
            return Ok(true);
        }
        let spare = || (self.base..n).map(|i| self.frame(i));
        if spare().any(|f| f.pins.load(Acquire) > 0) {
            return Ok(false);
        }
        let dirty = spare().filter(|f| f.dirty.load(Acquire)).count();
        {
            let sp = self.spill.lock();
            if sp.count() + dirty > spill_cap(self.base, self.spill_floor) {
                return Ok(false);
            }
        }
        // Latches are only tried under the table lock: a lookup may hold
        // one (it then holds a pin too, or is about to let go).
        let Some(mut latches) = spare()
            .map(|f| Some((f, f.data.try_write()?)))
            .collect::<Option<Vec<(&Frame, RwLockWriteGuard<'_, AlignedBuf>)>>>()
        else {
            return Ok(false);
        };
        let mut dirty: Vec<(&Frame, &mut AlignedBuf)> = latches
            .iter_mut()
            .filter(|(f, _)| f.dirty.load(Acquire) && f.id.load(Acquire) != EMPTY)
            .map(|(f, d)| (*f, &mut **d))
            .collect();
        if !dirty.is_empty() {
            self.spill_latched(&mut dirty)?;
        }
        drop(dirty);
        self.active.store(self.base, Release);
        for (f, data) in &mut latches {
            let old = f.id.swap(EMPTY, AcqRel);
            if old != EMPTY {
                table.remove(&old);
                self.counters.evictions.fetch_add(1, Relaxed);
            }
            f.referenced.store(false, Relaxed);
            **data = AlignedBuf::zeroed(0);
        }
        drop(latches);
        hand.free.retain(|&i| i < self.base);
        hand.at = 0;
        self.spill.lock().cap = spill_cap(self.base, self.spill_floor);
        Ok(true)
    }

    pub fn dirty_count(&self) -> usize {
        self.dirty.load(Acquire)
    }

    /// Bytes the pool holds: active frames whole (retired ones' buffers
    /// hold the spill log's map and the route tables), spare ones'
    /// metadata, the spill log's heap and mirror bits, the route tables'
    /// headers.
    pub fn memory_bytes(&self) -> u64 {
        let sp = self.spill.lock();
        let spill = sp.mirror_bytes() + sp.heap_bytes();
        let buffers = self.capacity() * self.page_size;
        let routes = self.route_frames.load(Relaxed) * ROUTE_PAGE_HEADER
            + self.route_free.lock().capacity() * std::mem::size_of::<RouteTable>();
        (self.frames.len() * FRAME_OVERHEAD + buffers + spill + routes) as u64
    }

    /// Frames retired for the spill log's map and route tables.
    pub fn retired_frames(&self) -> usize {
        self.retired.load(Relaxed)
    }

    /// Pages in the spill file.
    pub fn spilled(&self) -> usize {
        self.spill.lock().count()
    }

    /// Slots of the spill log ever taken (the log region's extent).
    pub fn spill_log_slots(&self) -> u64 {
        self.spill.lock().extent()
    }

    /// Lets at least `pages` pages be spilled between checkpoints,
    /// whatever the pool's size.
    pub fn with_spill_floor(mut self, pages: usize) -> Self {
        self.spill_floor = pages;
        self.spill.get_mut().cap = spill_cap(self.capacity(), pages);
        self
    }

    /// How many pages may be spilled between checkpoints.
    pub fn spill_capacity(&self) -> usize {
        self.spill.lock().cap
    }

    /// Takes unpinned frame `i` for a change of page, under the table lock:
    /// pins it (0 to 1) and latches it exclusively, or returns `None`,
    /// changing nothing, if anyone holds a pin or the latch. Whoever pins a
    /// frame checks its id under the latch, so a frame seized this way may
    /// change pages: a pin taken before the seizure is seen here, and one
    /// taken after it finds the new id. Never blocking on a latch here is
    /// what keeps the table lock free of waits on readers.
    fn seize(&self, i: usize) -> Option<RwLockWriteGuard<'_, AlignedBuf>> {
        let f = self.frame(i);
        if f.pins.compare_exchange(0, 1, AcqRel, Acquire).is_err() {
            return None;
        }
        match f.data.try_write() {
            Some(latch) if f.pins.load(Acquire) == 1 => Some(latch),
            latch => {
                drop(latch);
                f.pins.fetch_sub(1, AcqRel);
                None
            }
        }
    }

    /// Retires a frame for the spill log's map or route tables (see the
    /// module docs) and returns its buffer: a free base frame if there is
    /// one, else a clean one near the clock's hand ([`Self::retiree`]). Under
    /// the table lock and the hand; never writes. `None` if no frame may
    /// go now (every candidate is busy, dirty or lent) or the pool has
    /// given up its share already.
    fn retire(&self, table: &mut PageTable, hand: &mut Hand) -> Option<AlignedBuf> {
        if self.retired.load(Relaxed) >= self.base / RETIRE_MAX_SHARE {
            return None;
        }
        let free = hand
            .free
            .iter()
            .rposition(|&i| i < self.base && self.frame(i).id.load(Acquire) == EMPTY);
        let (i, mut latch) = match free.map(|k| hand.free.swap_remove(k)) {
            Some(i) => (i, self.seize(i)?),
            None => {
                let victim = self.retiree(hand.at)?;
                let latch = self.seize(victim)?;
                // Marked dirty only under its latch, which we hold now.
                if self.frame(victim).dirty.load(Acquire) {
                    self.release(victim, latch);
                    return None;
                }
                (victim, latch)
            }
        };
        let f = self.frame(i);
        let old = f.id.swap(RETIRED, AcqRel);
        if old != EMPTY {
            table.remove(&old);
            self.counters.evictions.fetch_add(1, Relaxed);
        }
        f.referenced.store(false, Relaxed);
        let buf = std::mem::take(&mut *latch);
        // The pin stays: the clock passes the frame for good.
        drop(latch);
        self.retired.fetch_add(1, Relaxed);
        Some(buf)
    }

    /// A clean, unpinned base frame among the [`CLEANING_WINDOW`] the hand
    /// reaches next, unreferenced if one is: looked at without moving the
    /// hand or clearing reference bits, so a retirement costs the clock
    /// one frame and a bounded look, even in a pool of dirty frames (the
    /// next claim looks again, further on).
    fn retiree(&self, at: usize) -> Option<usize> {
        let active = self.capacity();
        let mut referenced = None;
        for k in 0..CLEANING_WINDOW.min(active) {
            let i = (at + k) % active;
            let f = self.frame(i);
            if i >= self.base || f.pins.load(Acquire) > 0 || f.dirty.load(Acquire) {
                continue;
            }
            if !f.referenced.load(Acquire) {
                return Some(i);
            }
            referenced.get_or_insert(i);
        }
        referenced
    }

    /// Before a claim for page `id`: retires frames for the spill log's
    /// map until it covers `id` (or its ceiling), and for route tables if
    /// a reader asked for one. Stops at the first frame it cannot retire;
    /// the next claim tries again.
    fn pay_for_maps(&self, table: &mut PageTable, hand: &mut Hand, id: PageId) {
        while self.spill.lock().wants_chunk(id) {
            let Some(buf) = self.retire(table, hand) else {
                return;
            };
            // Every frame has the page size, so the chunk fits.
            let _ = self.spill.lock().add_chunk(buf);
        }
        if self.route_wanted.load(Relaxed) {
            self.make_route_tables(table, hand);
        }
    }

    /// Retires a frame and cuts its buffer into free route tables, if the
    /// route ceiling allows; whether it did.
    fn make_route_tables(&self, table: &mut PageTable, hand: &mut Hand) -> bool {
        if self.route_frames.load(Relaxed) >= self.route_cap {
            return false;
        }
        let Some(buf) = self.retire(table, hand) else {
            return false;
        };
        let words = Arc::new(AtomicWords::new(buf));
        let tables = (0..tables_per_frame(self.page_size)).map(|k| RouteTable {
            words: words.clone(),
            at: k * self.route_slots,
        });
        self.route_free.lock().extend(tables);
        self.route_frames.fetch_add(1, Relaxed);
        self.route_wanted.store(false, Relaxed);
        true
    }

    /// A free route table: one made already, or one of a frame retired
    /// now if the table lock and the hand are free this instant (a reader
    /// never waits for them); else the next claim makes some.
    fn free_route_table(&self) -> Option<RouteTable> {
        if let Some(t) = self.route_free.lock().pop() {
            return Some(t);
        }
        // At the ceiling (or with none) there is nothing to try: no lock
        // is touched on the read path.
        if self.route_frames.load(Relaxed) >= self.route_cap {
            return None;
        }
        let made = match (self.table.try_write(), self.hand.try_lock()) {
            (Some(mut table), Some(mut hand)) => self.make_route_tables(&mut table, &mut hand),
            _ => false,
        };
        if !made {
            self.route_wanted.store(true, Relaxed);
        }
        self.route_free.lock().pop()
    }

    /// Undoes [`BufferPool::seize`].
    fn release(&self, i: usize, latch: RwLockWriteGuard<'_, AlignedBuf>) {
        drop(latch);
        self.frame(i).pins.fetch_sub(1, AcqRel);
    }

    /// Claims a frame for `id` and returns it pinned and latched, with the
    /// table lock (which the caller holds and gets back, having entered
    /// `id`). A dirty victim is spilled first, with the cold dirty frames
    /// the hand reaches next, in one batch written *without* the table
    /// lock: the victim stays seized and in the table under both its old
    /// id and `id`, so whoever looks either up waits on its latch and then
    /// finds the frame holding `id`. Errors if every frame is pinned (or
    /// dirty, with the spill index full), or if the spill write fails.
    fn claim<'p>(
        &'p self,
        mut table: RwLockWriteGuard<'p, PageTable>,
        id: PageId,
    ) -> Result<Claimed<'p>> {
        let mut hand = self.hand.lock();
        self.pay_for_maps(&mut table, &mut hand, id);
        let active = self.capacity();
        while let Some(i) = hand.free.pop() {
            if i >= active || self.frame(i).id.load(Acquire) != EMPTY {
                continue;
            }
            // A frame a stale reader pins now is left for the clock, which
            // takes empty frames first.
            let Some(latch) = self.seize(i) else {
                continue;
            };
            let f = self.frame(i);
            f.id.store(id, Release);
            f.referenced.store(true, Release);
            table.insert(id, i);
            return Ok((i, latch, table));
        }
        let state = |i: usize| {
            let f = self.frame(i);
            FrameState {
                empty: f.id.load(Acquire) == EMPTY,
                pinned: f.pins.load(Acquire) > 0,
                dirty: f.dirty.load(Acquire),
                referenced: f.referenced.load(Acquire),
            }
        };
        // A victim a reader pins or latches between its choice and its
        // seizure is passed over; the bound only ends a pool whose frames
        // stay busy.
        for _ in 0..4 * active + 16 {
            let steal = self.spill.lock().has_room();
            let mut clear = |i: usize| self.frame(i).referenced.store(false, Release);
            let Some((victim, next)) =
                pick_victim(active, hand.at % active, steal, &state, &mut clear)
            else {
                break;
            };
            hand.at = next;
            let Some(mut latch) = self.seize(victim) else {
                continue;
            };
            let f = self.frame(victim);
            let old = f.id.load(Acquire);
            if f.dirty.load(Acquire) {
                let room = self.spill.lock().room();
                let max = (SPILL_BATCH - 1).min(room.saturating_sub(1));
                let more = cleaning_batch(active, next, CLEANING_WINDOW, max, &state);
                // Companions are latched only if no one holds them: one a
                // reader holds is simply left out.
                let mut more: Vec<(&Frame, RwLockWriteGuard<'_, AlignedBuf>)> = more
                    .into_iter()
                    .filter_map(|i| Some((self.frame(i), self.frame(i).data.try_write()?)))
                    .collect();
                table.insert(id, victim);
                drop(hand);
                drop(table);
                let written = {
                    let mut pages: Vec<(&Frame, &mut AlignedBuf)> =
                        std::iter::once((f, &mut *latch))
                            .chain(more.iter_mut().map(|(g, d)| (*g, &mut **d)))
                            .collect();
                    self.spill_latched(&mut pages)
                };
                drop(more);
                table = self.table.write();
                if let Err(e) = written {
                    table.remove(&id);
                    self.release(victim, latch);
                    return Err(e);
                }
            }
            if old != EMPTY {
                table.remove(&old);
                self.counters.evictions.fetch_add(1, Relaxed);
            }
            f.id.store(id, Release);
            f.referenced.store(true, Release);
            table.insert(id, victim);
            return Ok((victim, latch, table));
        }
        Err(Error::corruption(
            "buffer pool",
            "every frame is pinned or dirty; the pool is too small for this operation",
        ))
    }

    /// Writes latched dirty frames to the spill file in one batch and marks
    /// them clean. They stay in the table while it runs, latched, so no
    /// page can miss on these ids until their writes are done; a frame
    /// left resident is clean, and is evicted without a write.
    fn spill_latched(&self, pages: &mut [(&Frame, &mut AlignedBuf)]) -> Result<()> {
        let ids: Vec<PageId> = pages.iter().map(|(f, _)| f.id.load(Acquire)).collect();
        for (_, data) in pages.iter_mut() {
            page::seal(data);
        }
        let placed = self.spill.lock().place(&ids);
        // Pages contiguous in the file go out as one gathered write each,
        // all in flight together.
        let Some(groups) = spill_log::runs(&placed, self.page_size) else {
            self.spill.lock().finish(&placed, false);
            return Err(Error::corruption(
                format!("page {}", ids.iter().max().copied().unwrap_or(0)),
                "an id past any spill file",
            ));
        };
        let bufs: Vec<Vec<&[u8]>> = groups
            .iter()
            .map(|(_, g)| g.iter().map(|&i| &pages[i].1[..]).collect())
            .collect();
        let reqs: Vec<GatherReq<'_>> = groups
            .iter()
            .zip(&bufs)
            .map(|((off, _), b)| GatherReq::new(*off, b))
            .collect();
        self.counters
            .spill_requests
            .fetch_add(reqs.len() as u64, Relaxed);
        let written = self.spill_dev.write_gathered(&reqs);
        self.spill.lock().finish(&placed, written.is_ok());
        written?;
        for (f, _) in pages.iter() {
            if f.dirty.swap(false, AcqRel) {
                self.dirty.fetch_sub(1, AcqRel);
            }
        }
        self.counters.spills.fetch_add(pages.len() as u64, Relaxed);
        if pages.len() > 1 {
            self.counters.spill_batches.fetch_add(1, Relaxed);
        }
        Ok(())
    }

    /// Drops page `id` from the pool if it is resident and unpinned,
    /// spilling it first if dirty (if the spill file is full, the page
    /// stays, with its reference bit cleared). For pages loaded only to
    /// take buffered records: their frame goes back to the free end of the
    /// clock instead of displacing a page in use.
    pub fn evict(&self, id: PageId) -> Result<()> {
        self.evict_all(&[id])
    }

    /// [`BufferPool::evict`] for several pages, the dirty ones spilled in
    /// one batch. A page in use (pinned, or latched by a lookup) stays, and
    /// so do dirty pages past the spill file's room.
    pub fn evict_all(&self, ids: &[PageId]) -> Result<()> {
        let table = self.table.write();
        // A repeated id finds its frame seized already, and is skipped.
        let seized: Vec<(usize, RwLockWriteGuard<'_, AlignedBuf>)> = ids
            .iter()
            .filter_map(|id| table.get(id).copied())
            .filter_map(|i| Some((i, self.seize(i)?)))
            .collect();
        // Dirty pages take spill room unless already spilled; those past
        // the room stay, as the clock would leave them.
        let mut room = self.spill.lock().room();
        let mut keep = Vec::new();
        let mut go = Vec::new();
        for (i, latch) in seized {
            let f = self.frame(i);
            if f.dirty.load(Acquire) && !self.spill.lock().contains(f.id.load(Acquire)) {
                if room == 0 {
                    f.referenced.store(false, Relaxed);
                    keep.push((i, latch));
                    continue;
                }
                room -= 1;
            }
            go.push((i, latch));
        }
        for (i, latch) in keep {
            self.release(i, latch);
        }
        // Written without the table lock: the frames stay seized and in
        // the table, so whoever looks one up waits on its latch, then finds
        // it empty and misses (reading the spilled image).
        drop(table);
        let mut dirty: Vec<(&Frame, &mut AlignedBuf)> = go
            .iter_mut()
            .filter(|(i, _)| self.frame(*i).dirty.load(Acquire))
            .map(|(i, latch)| (self.frame(*i), &mut **latch))
            .collect();
        if !dirty.is_empty() {
            if let Err(e) = self.spill_latched(&mut dirty) {
                drop(dirty);
                for (i, latch) in go {
                    self.release(i, latch);
                }
                return Err(e);
            }
        }
        drop(dirty);
        let mut table = self.table.write();
        let mut hand = self.hand.lock();
        for (i, latch) in go {
            let f = self.frame(i);
            table.remove(&f.id.load(Acquire));
            f.id.store(EMPTY, Release);
            f.referenced.store(false, Relaxed);
            self.release(i, latch);
            hand.free.push(i);
            self.counters.evictions.fetch_add(1, Relaxed);
        }
        Ok(())
    }

    /// Drops page `id` from the pool and the spill log without writing it
    /// anywhere: for a page whose contents moved to another id and whose
    /// old id is free. A frame in use (pinned or latched by a lock-free
    /// lookup) is left alone; returns whether the pool no longer holds the
    /// page.
    pub fn forget(&self, id: PageId) -> bool {
        let mut table = self.table.write();
        let mut gone = true;
        if let Some(&i) = table.get(&id) {
            if let Some(latch) = self.seize(i) {
                let f = self.frame(i);
                table.remove(&id);
                f.id.store(EMPTY, Release);
                if f.dirty.swap(false, AcqRel) {
                    self.dirty.fetch_sub(1, AcqRel);
                }
                f.referenced.store(false, Relaxed);
                self.release(i, latch);
                self.hand.lock().free.push(i);
            } else {
                gone = false;
            }
        }
        self.spill.lock().remove(id);
        gone
    }

    /// Latches page `id` for reading, loading it on a miss. The fast path
    /// for lookups and scans: one shared table lookup and one shared latch.
    pub fn read(&self, id: PageId) -> Result<PageRead<'_>> {
        self.read_tracked(id).map(|(r, _)| r)
    }

    /// [`BufferPool::read`], also telling how the page was found
    /// ([`Found::Table`] if it was resident when asked for).
    pub fn read_tracked(&self, id: PageId) -> Result<(PageRead<'_>, Found)> {
        let mut found = Found::Table;
        loop {
            let hit = self.table.read().get(&id).copied();
            if let Some(i) = hit {
                self.warm_frame(i);
                if let Some(read) = self.read_frame(i, id) {
                    self.counters.hits.fetch_add(1, Relaxed);
                    return Ok((read, found));
                }
                continue;
            }
            // Load through the pinning path, then take the hit path.
            found = Found::Loaded;
            drop(self.fetch(id)?);
        }
    }

    /// [`BufferPool::read_tracked`] for page `id` reached through `route`
    /// (none for the root): a hit on the frame the route names takes no
    /// page-table lookup. A lookup by id (a route unknown, stale, or one
    /// the pool had no room to keep) records the frame it found in the
    /// route.
    ///
    /// Returns the page and how it was found. A hit through the route is
    /// not counted here: callers count a lookup's routed hits at once
    /// ([`BufferPool::count_routed`]), saving a shared counter's update
    /// per level.
    pub fn read_child(&self, id: PageId, route: Option<Route>) -> Result<(PageRead<'_>, Found)> {
        let Some(route) = route else {
            return self.read_tracked(id);
        };
        if let Some(i) = self.routed_frame(route) {
            self.warm_frame(i);
            if let Some(read) = self.read_frame(i, id) {
                return Ok((read, Found::Routed));
            }
        }
        let (read, found) = self.read_tracked(id)?;
        self.keep_route(route, read.frame);
        Ok((read, found))
    }

    /// Adds `n` hits found through routes to the counters.
    pub fn count_routed(&self, n: u64) {
        if n > 0 {
            self.counters.routed.fetch_add(n, Relaxed);
        }
    }

    /// Starts fetching frame `i`'s metadata and its page's first lines
    /// (the header and the start of the slot array), which the latch and
    /// the search then read: their cache misses overlap instead of one
    /// waiting on the other, whose latch is a full barrier.
    fn warm_frame(&self, i: usize) {
        if i < self.base {
            ferrite_io::prefetch(self.slab.wrapping_add(i.wrapping_mul(self.stride)), 256);
        }
        if let Some(f) = self.frames.get(i) {
            ferrite_io::prefetch(f as *const Frame as usize, 64);
        }
    }

    /// Latches frame `i` shared if it holds page `id`, setting its
    /// reference bit (if not set already: a store to a shared line only
    /// when it changes something).
    fn read_frame(&self, i: usize, id: PageId) -> Option<PageRead<'_>> {
        let f = self.frames.get(i)?;
        let guard = f.data.read();
        if f.id.load(Acquire) != id {
            return None;
        }
        if !f.referenced.load(Relaxed) {
            f.referenced.store(true, Relaxed);
        }
        Some(PageRead { guard, frame: i })
    }

    /// The entry of `route` in its parent frame's table, if it has one.
    fn route_entry(&self, route: Route) -> Option<&AtomicU32> {
        let table = self.frames.get(route.parent)?.routes.get()?;
        table
            .words
            .get(table.at + (route.position & (self.route_slots - 1)))
    }

    /// The frame `route` names, if the parent's frame has routes.
    fn routed_frame(&self, route: Route) -> Option<usize> {
        (self.route_entry(route)?.load(Relaxed) as usize).checked_sub(1)
    }

    /// Records that `route` led to frame `child`, giving the parent's
    /// frame a route table first if one can be had without waiting.
    fn keep_route(&self, route: Route, child: usize) {
        let Some(parent) = self.frames.get(route.parent) else {
            return;
        };
        if parent.routes.get().is_none() {
            let Some(table) = self.free_route_table() else {
                return;
            };
            match parent.routes.set(table) {
                Ok(()) => {
                    self.routed.fetch_add(1, Relaxed);
                }
                // Another reader gave the frame its table meanwhile.
                Err(table) => self.route_free.lock().push(table),
            }
        }
        let Ok(entry) = u32::try_from(child + 1) else {
            return;
        };
        if let Some(e) = self.route_entry(route) {
            e.store(entry, Relaxed);
        }
    }

    /// The frame holding page `id`, by the page table.
    #[cfg(feature = "bench-internals")]
    pub fn frame_of(&self, id: PageId) -> Option<usize> {
        self.table.read().get(&id).copied()
    }

    /// Latches frame `i` shared and lets go; whether it holds a page.
    #[cfg(feature = "bench-internals")]
    pub fn latch_frame(&self, i: usize) -> bool {
        self.frames
            .get(i)
            .is_some_and(|f| !f.data.read().is_empty())
    }

    /// `f` of frame `i`'s bytes, latched shared (the default for no frame).
    #[cfg(feature = "bench-internals")]
    pub fn with_frame<R: Default>(&self, i: usize, f: impl FnOnce(&[u8]) -> R) -> R {
        self.frames
            .get(i)
            .map(|fr| f(&fr.data.read()))
            .unwrap_or_default()
    }

    /// Frames that have route tables (for tests and reports).
    pub fn routed_frames(&self) -> usize {
        self.routed.load(Relaxed)
    }

    /// Whether page `id` is in the pool (no I/O, no effect on the clock).
    pub fn is_resident(&self, id: PageId) -> bool {
        self.table.read().contains_key(&id)
    }

    /// Pins page `id`, reading it from the device on a miss.
    pub fn fetch(&self, id: PageId) -> Result<PageRef<'_>> {
        loop {
            // Hit path: a shared lock on the table, one pin, no writes to
            // shared lines beyond the pin count and a reference bit that is
            // usually already set.
            let hit = self.table.read().get(&id).copied();
            if let Some(i) = hit {
                let f = self.frame(i);
                f.pins.fetch_add(1, AcqRel);
                // The id is checked under the latch: that waits out a load
                // in progress (a failed load empties the frame) and a
                // victim's spill (after which the frame holds another page).
                let ok = {
                    let _g = f.data.read();
                    f.id.load(Acquire) == id
                };
                if ok {
                    if !f.referenced.load(Relaxed) {
                        f.referenced.store(true, Relaxed);
                    }
                    self.counters.hits.fetch_add(1, Relaxed);
                    return Ok(PageRef {
                        pool: self,
                        frame: i,
                    });
                }
                f.pins.fetch_sub(1, AcqRel);
                continue;
            }
            let table = self.table.write();
            if table.contains_key(&id) {
                continue;
            }
            let (i, mut data, table) = self.claim(table, id)?;
            let f = self.frame(i);
            let spot = self.spill.lock().hold_for_read(id);
            drop(table);
            self.counters.misses.fetch_add(1, Relaxed);
            if let Err(e) = self.read_stored(id, spot, &mut data) {
                let mut table = self.table.write();
                table.remove(&id);
                f.id.store(EMPTY, Release);
                f.pins.fetch_sub(1, AcqRel);
                self.hand.lock().free.push(i);
                return Err(e);
            }
            drop(data);
            return Ok(PageRef {
                pool: self,
                frame: i,
            });
        }
    }

    /// Admits page `id` from `image`, a copy read from the page file by a
    /// prefetch, without reading the device. Returns false (admitting
    /// nothing) if the page is already resident, if the page file's copy
    /// may be stale (the page is in the spill file), or if the image fails
    /// its checks; the caller then reads the page normally. Callers exclude
    /// writers, so a page neither resident nor spilled has its current
    /// version in the page file.
    pub fn admit(&self, id: PageId, image: &[u8]) -> Result<bool> {
        if image.len() != self.page_size {
            return Ok(false);
        }
        self.install(id, image, false)
    }

    /// Loads the pages of `ids` that are not resident, reading them with
    /// one batch per file (page file and spill file) so the reads overlap;
    /// returns how many it loaded. Best effort: a page whose read or
    /// checks fail is left out, and the normal path reads it (and reports
    /// the failure) when it is next needed. Callers exclude writers, so a
    /// page that is neither resident nor being written keeps the image it
    /// has in the file the spill log names.
    pub fn prefetch(&self, ids: &[PageId]) -> Result<usize> {
        let mut ids: Vec<PageId> = ids.to_vec();
        ids.sort_unstable();
        ids.dedup();
        // Each page with its spot in the spill file, if spilled (held
        // until its read is done).
        let want: Vec<(PageId, Option<Spot>)> = {
            let table = self.table.read();
            let mut sp = self.spill.lock();
            // An id no file reaches is left to the read that needs it,
            // which reports it.
            ids.iter()
                .filter(|&&id| {
                    !table.contains_key(&id) && page::offset(id, self.page_size).is_some()
                })
                .map(|&id| (id, sp.hold_for_read(id)))
                .collect()
        };
        if want.is_empty() {
            return Ok(0);
        }
        let mut bufs: Vec<AlignedBuf> = want
            .iter()
            .map(|_| AlignedBuf::zeroed(self.page_size))
            .collect();
        let ps = self.page_size as u64;
        let mut read_ok = [true, true];
        for (which, spilled) in [(0, false), (1, true)] {
            let mut reqs: Vec<ferrite_io::ReadReq<'_>> = want
                .iter()
                .zip(bufs.iter_mut())
                .filter(|((_, s), _)| s.is_some() == spilled)
                .filter_map(|((id, s), b)| {
                    let off = match s {
                        Some(s) => s.offset(self.page_size)?,
                        None => id * ps,
                    };
                    Some(ferrite_io::ReadReq::new(off, b))
                })
                .collect();
            if reqs.is_empty() {
                continue;
            }
            let dev = if spilled { &self.spill_dev } else { &self.dev };
            read_ok[which] = dev.read_batch(&mut reqs).is_ok();
        }
        {
            let mut sp = self.spill.lock();
            for s in want.iter().filter_map(|(_, s)| *s) {
                sp.release(s);
            }
        }
        let mut loaded = 0;
        for ((id, spot), buf) in want.iter().zip(&bufs) {
            let spilled = spot.is_some();
            if read_ok[usize::from(spilled)] && self.install(*id, buf, spilled)? {
                loaded += 1;
            }
        }
        Ok(loaded)
    }

    /// Loads the pages of `ids` that are neither resident nor spilled with
    /// one read batch of the page file, so the reads overlap, and returns
    /// how many it loaded. Unlike [`BufferPool::prefetch`] it claims each
    /// page's frame before reading, as a miss does, so it may run beside
    /// writers: a page forgotten meanwhile finds its frame pinned. Best
    /// effort: it stops claiming when frames run out, and a page past the
    /// end of the file, or whose read or checks fail, is left out for the
    /// normal path to read (and report).
    pub fn load(&self, ids: &[PageId]) -> usize {
        let end = self.dev.len() / self.page_size as u64;
        let mut claimed: Vec<(PageId, usize, RwLockWriteGuard<'_, AlignedBuf>)> = Vec::new();
        for &id in ids {
            // The table is locked per page, as for a miss: a claim may
            // spill a dirty victim, and readers must not wait on many.
            let table = self.table.write();
            if id >= end || table.contains_key(&id) || self.spill.lock().contains(id) {
                continue;
            }
            // The frame comes latched, so a reader that finds it waits for
            // the bytes.
            let Ok((i, latch, _table)) = self.claim(table, id) else {
                break;
            };
            claimed.push((id, i, latch));
        }
        if claimed.is_empty() {
            return 0;
        }
        let ps = self.page_size as u64;
        let read = {
            let mut reqs: Vec<ferrite_io::ReadReq<'_>> = claimed
                .iter_mut()
                .map(|(id, _, data)| ferrite_io::ReadReq::new(*id * ps, &mut data[..]))
                .collect();
            self.dev.read_batch(&mut reqs).is_ok()
        };
        let mut failed = Vec::new();
        let mut loaded = 0;
        for (id, i, data) in claimed {
            if read && page::check(&data, id, &String::new).is_ok() {
                drop(data);
                self.frame(i).pins.fetch_sub(1, AcqRel);
                self.counters.misses.fetch_add(1, Relaxed);
                loaded += 1;
            } else {
                failed.push((id, i, data));
            }
        }
        if !failed.is_empty() {
            let mut table = self.table.write();
            for (id, i, data) in failed {
                let f = self.frame(i);
                table.remove(&id);
                f.id.store(EMPTY, Release);
                drop(data);
                f.pins.fetch_sub(1, AcqRel);
                self.hand.lock().free.push(i);
            }
        }
        loaded
    }

    /// Enters `image` as page `id` read from the spill file (`spilled`) or
    /// the page file, unless the page became resident, its spill state
    /// changed, or the image fails its checks.
    fn install(&self, id: PageId, image: &[u8], spilled: bool) -> Result<bool> {
        let table = self.table.write();
        if table.contains_key(&id) || self.spill.lock().contains(id) != spilled {
            return Ok(false);
        }
        if page::check(image, id, &String::new).is_err() {
            return Ok(false);
        }
        let (i, mut data, table) = self.claim(table, id)?;
        let f = self.frame(i);
        drop(table);
        data.copy_from_slice(image);
        drop(data);
        f.pins.fetch_sub(1, AcqRel);
        self.counters.misses.fetch_add(1, Relaxed);
        Ok(true)
    }

    /// Copies the current image of page `id` into `dst` without entering
    /// it into the pool: from its frame if resident, else from the spill
    /// file or the page file. For walks that must not disturb the cache.
    pub fn peek(&self, id: PageId, dst: &mut [u8]) -> Result<()> {
        // The table is released before the latch is taken (and the frame
        // checked under it): a batch load holds latches while it takes the
        // table lock.
        let hit = self.table.read().get(&id).copied();
        if let Some(i) = hit {
            let f = self.frame(i);
            let d = f.data.read();
            if f.id.load(Acquire) == id && d.len() == dst.len() {
                dst.copy_from_slice(&d);
                return Ok(());
            }
        }
        let spot = self.spill.lock().hold_for_read(id);
        self.read_stored(id, spot, dst)
    }

    /// Reads the stored image of page `id` into `dst` and checks it: from
    /// its spot in the spill file, which the caller holds for this read
    /// ([`SpillLog::hold_for_read`]) and which is released here, or, if it
    /// is not spilled, from the page file.
    fn read_stored(&self, id: PageId, spot: Option<Spot>, dst: &mut [u8]) -> Result<()> {
        let read = match spot {
            Some(s) => self.spill_offset(id, s).and_then(|off| {
                self.spill_dev.read_at(dst, off)?;
                Ok((off, "spill file"))
            }),
            None => self.offset(id).and_then(|off| {
                self.dev.read_at(dst, off)?;
                Ok((off, "page file"))
            }),
        };
        if let Some(s) = spot {
            self.spill.lock().release(s);
        }
        let (off, file) = read?;
        page::check(dst, id, &|| {
            format!("page {id} at offset {off} of the {file}")
        })
    }

    /// The byte offset of `spot` in the spill file.
    fn spill_offset(&self, id: PageId, spot: Spot) -> Result<u64> {
        spot.offset(self.page_size)
            .ok_or_else(|| Error::corruption(format!("page {id}"), "an id past any spill file"))
    }

    /// Pins a new page `id` (zeroed, dirty) without reading the device.
    pub fn create(&self, id: PageId) -> Result<PageRef<'_>> {
        let mut table = self.table.write();
        while let Some(&i) = table.get(&id) {
            self.frame(i).pins.fetch_add(1, AcqRel);
            let r = PageRef {
                pool: self,
                frame: i,
            };
            drop(table);
            {
                let mut data = r.write();
                // A miss on the id (a lookup on the page it used to be) may
                // have been claiming this frame, and failed.
                if self.frame(i).id.load(Acquire) == id {
                    data.fill(0);
                    drop(data);
                    return Ok(r);
                }
            }
            drop(r);
            table = self.table.write();
        }
        let (i, mut data, table) = self.claim(table, id)?;
        drop(table);
        data.fill(0);
        let f = self.frame(i);
        if !f.dirty.swap(true, AcqRel) {
            self.dirty.fetch_add(1, AcqRel);
        }
        drop(data);
        Ok(PageRef {
            pool: self,
            frame: i,
        })
    }

    /// The pages a checkpoint must install, ascending: every dirty frame's
    /// and every spilled page. Callers exclude all other pool users.
    pub fn checkpoint_ids(&self) -> Vec<PageId> {
        let mut ids = self.dirty_ids();
        ids.extend(self.spill.lock().ids());
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// The pages dirty frames hold, ascending.
    pub fn dirty_ids(&self) -> Vec<PageId> {
        let mut ids: Vec<PageId> = self
            .frames
            .iter()
            .filter(|f| f.dirty.load(Acquire))
            .map(|f| f.id.load(Acquire))
            .filter(|&id| id != EMPTY)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Where a checkpoint takes page `id` (one of
    /// [`Self::checkpoint_ids`]) from, `dirty` being [`Self::dirty_ids`]:
    /// a dirty frame's image is given to it ([`checkpoint::Source::HERE`]);
    /// any other page's newest image is its spilled one, which a clean
    /// frame holding the page equals, so the checkpoint names its place in
    /// the spill file instead of copying it. Callers exclude all other
    /// pool users.
    pub fn checkpoint_place(&self, dirty: &[PageId], id: PageId) -> Result<checkpoint::Source> {
        if dirty.binary_search(&id).is_ok() {
            return Ok(checkpoint::Source::HERE);
        }
        let spot = self.spill.lock().spot(id);
        match spot {
            Some(spot) => Ok(checkpoint::Source::spill(self.spill_offset(id, spot)?)),
            None => Ok(checkpoint::Source::HERE),
        }
    }

    /// Fills each page's buffer with the current, sealed image of its page:
    /// from its frame if resident, else from the spill file, the spilled
    /// ones read in one overlapped batch. A page that is neither is
    /// corruption: a checkpoint asks only for pages the pool changed.
    pub fn copy_pages(&self, pages: &mut [(PageId, &mut [u8])]) -> Result<()> {
        let mut spilled = vec![false; pages.len()];
        for ((id, dst), s) in pages.iter_mut().zip(spilled.iter_mut()) {
            *s = !self.copy_resident(*id, dst);
        }
        // Where each page not resident lies in the spill file. No other
        // pool user runs, so no slot changes hands meanwhile.
        let mut offsets = Vec::new();
        {
            let sp = self.spill.lock();
            for ((id, _), _) in pages.iter().zip(&spilled).filter(|(_, &s)| s) {
                let Some(spot) = sp.spot(*id) else {
                    return Err(Error::corruption(
                        format!("page {id}"),
                        "neither resident nor spilled at checkpoint",
                    ));
                };
                offsets.push(self.spill_offset(*id, spot)?);
            }
        }
        let mut reqs = Vec::new();
        for (((_, dst), _), &off) in pages
            .iter_mut()
            .zip(&spilled)
            .filter(|(_, &s)| s)
            .zip(&offsets)
        {
            reqs.push(ferrite_io::ReadReq::new(off, dst));
        }
        if reqs.is_empty() {
            return Ok(());
        }
        self.spill_dev.read_batch(&mut reqs)?;
        for (((id, dst), _), off) in pages.iter().zip(&spilled).filter(|(_, &s)| s).zip(&offsets) {
            page::check(dst, *id, &|| {
                format!("page {id} at offset {off} of the spill file")
            })?;
        }
        Ok(())
    }

    /// Copies page `id` into `dst`, sealed, if a frame holds it.
    fn copy_resident(&self, id: PageId, dst: &mut [u8]) -> bool {
        // Released before latching, as in `peek`.
        let hit = self.table.read().get(&id).copied();
        if let Some(i) = hit {
            let f = self.frame(i);
            let mut d = f.data.write();
            if f.id.load(Acquire) == id {
                page::seal(&mut d);
                dst.copy_from_slice(&d);
                return true;
            }
        }
        false
    }

    /// After a checkpoint installed every dirty and spilled page: all
    /// frames are clean and the spill file is empty, its blocks given back
    /// to the file system (nothing reads a spilled image past this point:
    /// the page file's meta now names the checkpoint, so recovery ignores
    /// the double-write file that named them; no sync needed).
    pub fn checkpoint_done(&self) -> Result<()> {
        for f in &self.frames {
            if f.dirty.swap(false, AcqRel) {
                self.dirty.fetch_sub(1, AcqRel);
            }
        }
        self.spill.lock().clear();
        if !self.spill_dev.is_empty() {
            self.spill_dev.set_len(0)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe_device::{Gate, ProbeDevice};
    use ferrite_io::MemDevice;

    const PS: usize = 4096;

    /// The budget that gives a pool `frames` base frames (with
    /// `lent_frames` spare).
    fn budget_for(frames: usize, lent_frames: usize) -> u64 {
        let b = (frames * (PS + FRAME_OVERHEAD)) as u64;
        b + fixed_bytes(b, lent_frames, PS) as u64
    }
    /// A byte in the page's free gap, free to mark images with.
    const MARK: usize = PS / 2;

    fn image(id: PageId, mark: u8) -> AlignedBuf {
        let mut b = AlignedBuf::zeroed(PS);
        page::init(&mut b, id, page::KIND_LEAF, 0);
        b[MARK] = mark;
        page::seal(&mut b);
        b
    }

    /// A page file holding pages `0..pages` (marked 1) and an empty spill
    /// file.
    fn devices_holding(pages: u64) -> (Arc<dyn BlockDevice>, Arc<dyn BlockDevice>) {
        let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new());
        for id in 0..pages {
            dev.write_at(&image(id, 1), id * PS as u64).unwrap();
        }
        (dev, Arc::new(MemDevice::new()))
    }

    /// Marks page `id` in the pool, which makes it dirty.
    fn change(pool: &BufferPool, id: PageId, mark: u8) {
        let r = pool.fetch(id).unwrap();
        let mut w = r.write();
        w[MARK] = mark;
        page::seal(&mut w);
    }

    /// A 64-frame pool over pages `0..40` where page 20 fails its
    /// checksum, page 30 was changed and spilled (its page-file image is
    /// stale, the spill file has the newest) and page 3 is resident.
    fn pool_with_a_damaged_and_a_spilled_page() -> BufferPool {
        let (dev, spill) = devices_holding(40);
        let mut bad = image(20, 1);
        bad[100] ^= 0xff;
        dev.write_at(&bad, 20 * PS as u64).unwrap();
        let pool = BufferPool::new(dev, spill, PS, budget_for(64, 0));
        change(&pool, 30, 2);
        pool.evict(30).unwrap();
        assert!(!pool.is_resident(30));
        drop(pool.fetch(3).unwrap());
        pool
    }

    #[test]
    fn prefetch_reads_each_page_from_the_file_that_holds_its_newest_image() {
        let pool = pool_with_a_damaged_and_a_spilled_page();
        let misses = pool.counters.misses.load(Relaxed);
        let ids = [1, 2, 3, 3, 20, 30, 9];
        assert_eq!(pool.prefetch(&ids).unwrap(), 4, "1, 2, 30 and 9");
        assert_eq!(pool.counters.misses.load(Relaxed), misses + 4);
        for id in [1, 2, 9, 30] {
            assert!(pool.is_resident(id), "{id}");
        }
        assert!(!pool.is_resident(20), "a damaged image is left out");
        assert_eq!(pool.fetch(30).unwrap().read()[MARK], 2, "the spilled image");
        assert_eq!(pool.fetch(9).unwrap().read()[MARK], 1);
        // The normal path still reports the damage.
        assert!(pool.fetch(20).is_err());
    }

    #[test]
    fn load_claims_frames_for_the_pages_the_page_file_holds_and_skips_the_rest() {
        // Load leaves page 30, whose newest image is in the spill file, to
        // the normal path, as it does 45, past the end of the file.
        let pool = pool_with_a_damaged_and_a_spilled_page();
        let misses = pool.counters.misses.load(Relaxed);
        assert_eq!(pool.load(&[1, 2, 3, 20, 30, 9, 45]), 3, "1, 2 and 9");
        assert_eq!(pool.counters.misses.load(Relaxed), misses + 3);
        for id in [1, 2, 3, 9] {
            assert!(pool.is_resident(id), "{id}");
        }
        for id in [20, 30, 45] {
            assert!(!pool.is_resident(id), "{id}");
        }
        // Loaded pages are unpinned: a forget takes them at once.
        assert!(pool.forget(9));
        assert_eq!(pool.fetch(30).unwrap().read()[MARK], 2, "the spilled image");
        assert!(
            pool.fetch(20).is_err(),
            "the normal path reports the damage"
        );
    }

    #[test]
    fn the_spill_allowance_is_four_pages_a_frame_or_the_floor() {
        assert_eq!(spill_cap(16, 0), 64);
        assert_eq!(spill_cap(16, 1000), 1000);
        assert_eq!(spill_cap(1000, 16), 4000);
        assert_eq!(spill_cap(usize::MAX, 0), usize::MAX);
    }

    #[test]
    fn a_floor_lets_a_small_pool_spill_past_four_pages_a_frame() {
        let (dev, spill) = devices_holding(200);
        let pool = BufferPool::new(dev, spill, PS, budget_for(16, 0)).with_spill_floor(150);
        assert_eq!(pool.spill_capacity(), 150);
        // Every page changed once: all but the resident ones are spilled,
        // more than the 64 that four per frame would allow.
        for id in 0..150u64 {
            change(&pool, id, 4);
        }
        assert!(pool.spilled() > 64, "{}", pool.spilled());
        for id in 0..150u64 {
            assert_eq!(pool.fetch(id).unwrap().read()[MARK], 4, "page {id}");
        }
        pool.checkpoint_done().unwrap();
        assert_eq!(pool.spilled(), 0);
    }

    #[test]
    fn lent_frames_hold_pages_and_give_them_back_intact() {
        let (dev, spill) = devices_holding(64);
        let pool = BufferPool::with_spare(dev, spill, PS, budget_for(16, 23), 23);
        assert_eq!((pool.capacity(), pool.spare_capacity()), (15, 8));
        let small = pool.memory_bytes();
        assert!(
            small <= budget_for(16, 23),
            "spare frames cost only their metadata"
        );
        assert!(pool.lend());
        assert!(!pool.lend(), "already lent");
        assert_eq!(pool.capacity(), 23);
        assert_eq!(pool.memory_bytes(), small + pool.spare_bytes());
        // Fill every frame, changing each page, so spare frames hold dirty
        // pages when they are taken back.
        for id in 0..23u64 {
            change(&pool, id, 3);
        }
        assert_eq!(
            pool.counters.evictions.load(Relaxed),
            0,
            "23 frames hold 23 pages"
        );
        {
            let in_spare = (0..23u64)
                .find(|id| pool.table.read().get(id).is_some_and(|&i| i >= pool.base))
                .unwrap();
            let _pinned = pool.fetch(in_spare).unwrap();
            assert!(!pool.reclaim().unwrap(), "a pinned spare frame stays");
            assert_eq!(pool.capacity(), 23);
        }
        assert!(pool.reclaim().unwrap());
        assert_eq!(pool.capacity(), 15);
        // The buffers are freed (4 KiB each); the spill log now maps a few
        // pages (a slot number per page id, its slot bits, and the holds
        // of the batch just written).
        assert!(
            pool.memory_bytes() <= small + 1024,
            "{}",
            pool.memory_bytes()
        );
        // Every page comes back with its change, resident or spilled.
        for id in 0..23u64 {
            assert_eq!(pool.fetch(id).unwrap().read()[MARK], 3, "page {id}");
        }
        assert!(pool.spilled() >= 8);
    }

    /// A 16-frame pool over pages `0..100` whose frames all hold changed
    /// pages `0..16` (marked 5), none referenced since, with a probe as its
    /// spill file.
    fn pool_of_cold_dirty_frames() -> (BufferPool, Arc<ProbeDevice>) {
        let (dev, _) = devices_holding(100);
        let probe = Arc::new(ProbeDevice::new());
        let pool = BufferPool::new(dev, probe.clone(), PS, budget_for(16, 0));
        assert_eq!(pool.capacity(), 16);
        for id in 0..16u64 {
            change(&pool, id, 5);
        }
        for f in &pool.frames {
            f.referenced.store(false, Relaxed);
        }
        assert_eq!(pool.dirty_count(), 16);
        (pool, probe)
    }

    #[test]
    fn a_dirty_victim_is_spilled_with_the_cold_dirty_frames_after_it_in_one_batch() {
        let (pool, probe) = pool_of_cold_dirty_frames();
        drop(pool.fetch(50).unwrap());
        // One write batch cleaned the victim and the other fifteen frames;
        // only the victim left the pool.
        assert_eq!(probe.write_batches.load(Relaxed), 1);
        assert_eq!(pool.counters.spills.load(Relaxed), 16);
        assert_eq!(pool.counters.spill_batches.load(Relaxed), 1);
        assert_eq!((pool.dirty_count(), pool.spilled()), (0, 16));
        // The sixteen pages took the spill log's first sixteen slots: one
        // stripe, written as one sequential request.
        assert_eq!(probe.gathered_requests.load(Relaxed), 1);
        assert_eq!(pool.spill_log_slots(), 16);
        let gone: Vec<PageId> = (0..16).filter(|&id| !pool.is_resident(id)).collect();
        assert_eq!(gone.len(), 1, "{gone:?}");
        // The next fifteen misses evict clean frames: no more writes.
        for id in 51..66u64 {
            drop(pool.fetch(id).unwrap());
        }
        assert_eq!(probe.write_batches.load(Relaxed), 1);
        assert_eq!(pool.counters.spills.load(Relaxed), 16);
        // Every changed page comes back from the spill file as changed.
        for id in 0..16u64 {
            assert_eq!(pool.fetch(id).unwrap().read()[MARK], 5, "page {id}");
        }
    }

    #[test]
    fn pages_past_the_spill_log_s_map_spill_to_the_mirror_and_come_back() {
        // A 16-frame pool's map covers page ids below 640.
        let (dev, _) = devices_holding(800);
        let probe = Arc::new(ProbeDevice::new());
        let pool = BufferPool::new(dev, probe.clone(), PS, budget_for(16, 0));
        // Eight pages below the map's end and eight past it, changed, then
        // pushed out by reads of others.
        let changed: Vec<PageId> = (632..640).chain(700..708).collect();
        for &id in &changed {
            change(&pool, id, 6);
        }
        for id in 0..40u64 {
            drop(pool.fetch(id).unwrap());
        }
        assert_eq!(pool.spilled(), 16);
        // The log holds eight slots; the mirror pages take no slot.
        assert_eq!(pool.spill_log_slots(), 8);
        for &id in &changed {
            assert_eq!(pool.fetch(id).unwrap().read()[MARK], 6, "page {id}");
        }
        // A checkpoint reads every spilled image from where it went.
        let mut bufs: Vec<AlignedBuf> = changed.iter().map(|_| AlignedBuf::zeroed(PS)).collect();
        for id in 0..40u64 {
            drop(pool.fetch(id).unwrap());
        }
        let mut pages: Vec<(PageId, &mut [u8])> = changed
            .iter()
            .copied()
            .zip(bufs.iter_mut().map(|b| &mut b[..]))
            .collect();
        pool.copy_pages(&mut pages).unwrap();
        assert!(pages.iter().all(|(_, b)| b[MARK] == 6));
    }

    #[test]
    fn frames_in_use_are_left_out_of_a_spill_and_never_taken() {
        let (pool, probe) = pool_of_cold_dirty_frames();
        // A reader latches page 3 and a writer pins page 7; page 9's latch
        // is held without a pin, as by a lookup that found its frame and
        // has not yet checked it.
        let held = pool.read(3).unwrap();
        let pinned = pool.fetch(7).unwrap();
        let frame9 = pool.table.read().get(&9).copied().unwrap();
        let latched = pool.frames[frame9].data.read();
        for f in &pool.frames {
            f.referenced.store(false, Relaxed);
        }
        for id in 50..80u64 {
            drop(pool.fetch(id).unwrap());
        }
        assert!(pool.is_resident(3) && pool.is_resident(7) && pool.is_resident(9));
        assert_eq!((held[MARK], latched[MARK]), (5, 5));
        assert_eq!(
            pool.dirty_count(),
            3,
            "pages 3, 7 and 9 are still unwritten"
        );
        assert_eq!(pool.counters.spills.load(Relaxed), 13);
        drop(latched);
        assert!(probe.write_batches.load(Relaxed) >= 1);
        drop(held);
        // A change made through a pin taken before the spill keeps its page
        // dirty, so it cannot be lost.
        pinned.write()[MARK] = 6;
        drop(pinned);
        assert_eq!(pool.dirty_count(), 3);
    }

    #[test]
    fn lookups_go_on_while_a_victim_is_spilled() {
        let (pool, probe) = pool_of_cold_dirty_frames();
        // Page 15 is referenced, so the hand passes it by.
        drop(pool.read(15).unwrap());
        let (started_tx, started) = std::sync::mpsc::channel();
        let (go, go_rx) = std::sync::mpsc::channel();
        let let_go = Arc::new(AtomicBool::new(false));
        *probe.gate.lock() = Some(Gate {
            started: started_tx,
            go: go_rx,
            let_go: let_go.clone(),
        });
        std::thread::scope(|s| {
            let miss = s.spawn(|| pool.fetch(50).map(|r| r.read()[MARK]));
            started.recv().unwrap();
            // The miss is writing its victim: the table is free, so a hit
            // and a miss on a page outside the batch go ahead.
            assert_eq!(pool.read(15).unwrap()[MARK], 5);
            assert!(pool.is_resident(50), "the claimed page is entered already");
            // A second miss passes over the frames the write holds and
            // takes page 15's (spilling it alone).
            assert_eq!(pool.fetch(60).unwrap().read()[MARK], 1);
            assert!(!pool.is_resident(15));
            go.send(()).unwrap();
            assert_eq!(miss.join().unwrap().unwrap(), 1);
        });
        assert!(let_go.load(Relaxed), "the write waited for the test");
        assert_eq!(pool.counters.spill_batches.load(Relaxed), 1);
        assert_eq!(pool.counters.spills.load(Relaxed), 16);
        for id in 0..16u64 {
            assert_eq!(pool.fetch(id).unwrap().read()[MARK], 5, "page {id}");
        }
    }

    #[test]
    fn pages_evicted_together_are_spilled_in_one_batch() {
        let (pool, probe) = pool_of_cold_dirty_frames();
        // Page 2 is held by a reader: it stays, and its frame with it.
        let held = pool.read(2).unwrap();
        pool.evict_all(&[0, 1, 2, 3, 3, 4, 5, 6, 7, 99]).unwrap();
        drop(held);
        assert_eq!(probe.write_batches.load(Relaxed), 1);
        assert_eq!(pool.counters.spills.load(Relaxed), 7);
        assert_eq!((pool.dirty_count(), pool.spilled()), (9, 7));
        let resident: Vec<PageId> = (0..8).filter(|&id| pool.is_resident(id)).collect();
        assert_eq!(resident, vec![2]);
        // The freed frames take the next pages without evicting any other.
        for id in 50..57u64 {
            drop(pool.fetch(id).unwrap());
        }
        assert!((8..16).all(|id| pool.is_resident(id)));
        for id in 0..8u64 {
            assert_eq!(pool.fetch(id).unwrap().read()[MARK], 5, "page {id}");
        }
    }

    #[test]
    fn a_failed_spill_loses_nothing() {
        let (pool, probe) = pool_of_cold_dirty_frames();
        probe.fail_writes.store(true, Relaxed);
        assert!(pool.fetch(50).is_err());
        // Every page is still resident and dirty, and none counts as spilled.
        assert_eq!((pool.dirty_count(), pool.spilled()), (16, 0));
        assert!((0..16).all(|id| pool.is_resident(id)));
        probe.fail_writes.store(false, Relaxed);
        drop(pool.fetch(50).unwrap());
        for id in 0..16u64 {
            assert_eq!(pool.fetch(id).unwrap().read()[MARK], 5, "page {id}");
        }
    }

    #[test]
    fn a_route_finds_its_child_without_the_table_until_the_child_moves() {
        let (dev, spill) = devices_holding(200);
        let pool = BufferPool::new(dev, spill, PS, budget_for(128, 0));
        let parent = pool.read(1).unwrap().route(7);
        let (first, found) = pool.read_child(5, Some(parent)).unwrap();
        assert_eq!((first[MARK], found), (1, Found::Loaded));
        let frame = first.frame;
        drop(first);
        let (again, found) = pool.read_child(5, Some(parent)).unwrap();
        assert_eq!((again.frame, found), (frame, Found::Routed));
        drop(again);
        assert_eq!(pool.routed_frames(), 1);
        // The child leaves; its frame takes another page: the route names
        // that frame still, and is found stale, not followed.
        pool.evict(5).unwrap();
        let other = pool.read(150).unwrap();
        assert_eq!(other.frame, frame, "the emptied frame is reused first");
        drop(other);
        change(&pool, 150, 9);
        let (back, found) = pool.read_child(5, Some(parent)).unwrap();
        assert_eq!((back[MARK], found), (1, Found::Loaded));
        assert_ne!(back.frame, frame);
        let moved = back.frame;
        drop(back);
        let (routed, found) = pool.read_child(5, Some(parent)).unwrap();
        assert_eq!((routed.frame, found), (moved, Found::Routed));
        // A route a page other than the child's parent wrote is checked
        // the same way.
        drop(routed);
        let (wrong, found) = pool.read_child(150, Some(parent)).unwrap();
        assert_eq!((wrong[MARK], found), (9, Found::Table));
    }

    #[test]
    fn a_pool_too_small_for_route_tables_reads_by_the_table() {
        let (dev, spill) = devices_holding(40);
        let pool = BufferPool::new(dev, spill, PS, budget_for(16, 0));
        let parent = pool.read(1).unwrap().route(0);
        for _ in 0..3 {
            let (r, found) = pool.read_child(2, Some(parent)).unwrap();
            assert_eq!(r[MARK], 1);
            assert_ne!(found, Found::Routed);
        }
        assert_eq!(pool.routed_frames(), 0);
        let all = pool.memory_bytes();
        assert!(all <= budget_for(16, 0), "{all}");
    }

    #[test]
    fn the_spill_map_takes_frames_only_as_page_ids_reach_past_it() {
        let (dev, spill) = devices_holding(7000);
        let budget = budget_for(256, 0);
        let pool = BufferPool::new(dev, spill, PS, budget);
        // The first chunk (2048 ids) comes with the pool.
        for id in 0..300u64 {
            change(&pool, id, 4);
        }
        assert_eq!(pool.retired_frames(), 0);
        // Pages 5000 and 6500 need three more chunks: three frames, taken
        // from clean ones near the hand as claims find them (a pool of
        // dirty frames gives none up until they are written).
        drop(pool.fetch(5000).unwrap());
        drop(pool.fetch(6500).unwrap());
        assert!((1..=3).contains(&pool.retired_frames()));
        assert!(pool.memory_bytes() <= budget, "{}", pool.memory_bytes());
        // Pages spilled past the old map's end take log slots, and every
        // changed page comes back changed.
        for id in 4000..4400u64 {
            change(&pool, id, 7);
        }
        assert!(pool.spilled() > 0);
        assert!((4000..4400).any(|id| matches!(pool.spill.lock().spot(id), Some(Spot::Slot(_)))));
        for id in (0..300u64).chain(4000..4400) {
            let want = if id < 300 { 4 } else { 7 };
            assert_eq!(pool.fetch(id).unwrap().read()[MARK], want, "page {id}");
        }
        drop(pool.fetch(6999).unwrap());
        assert_eq!(pool.retired_frames(), 3);
        assert!(pool.memory_bytes() <= budget, "{}", pool.memory_bytes());
    }

    #[test]
    fn route_tables_stay_within_their_reserve() {
        let frames = 256;
        let budget = (frames * (PS + FRAME_OVERHEAD)) as u64;
        let (dev, spill) = devices_holding(300);
        let pool = BufferPool::new(dev, spill, PS, budget);
        let can_hold = route_frames_cap(budget, PS) * tables_per_frame(PS);
        assert!(can_hold >= 4);
        for parent in 0..can_hold as u64 + 10 {
            let route = pool.read(parent).unwrap().route(0);
            drop(pool.read_child(parent + 100, Some(route)).unwrap());
        }
        assert_eq!(pool.routed_frames(), can_hold);
        assert!(
            pool.memory_bytes() <= budget,
            "{} > {budget}",
            pool.memory_bytes()
        );
    }

    #[test]
    fn copy_pages_takes_frames_and_spilled_images_and_refuses_the_rest() {
        let pool = pool_with_a_damaged_and_a_spilled_page();
        change(&pool, 4, 7);
        let mut bufs = [AlignedBuf::zeroed(PS), AlignedBuf::zeroed(PS)];
        {
            let mut pages: Vec<(PageId, &mut [u8])> = [4, 30]
                .into_iter()
                .zip(bufs.iter_mut().map(|b| &mut b[..]))
                .collect();
            pool.copy_pages(&mut pages).unwrap();
        }
        assert_eq!((bufs[0][MARK], bufs[1][MARK]), (7, 2));
        assert!(page::check(&bufs[0], 4, &String::new).is_ok(), "sealed");
        // Page 9 was never changed: the pool has no image a checkpoint may
        // take.
        let mut pages: Vec<(PageId, &mut [u8])> = [9]
            .into_iter()
            .zip(bufs.iter_mut().map(|b| &mut b[..]))
            .collect();
        assert!(pool.copy_pages(&mut pages).is_err());
    }
}

/// Routes under loom: a reader follows a route to the frame its child was
/// in while the clock evicts that child and gives the frame to another
/// page, and the child is loaded again into another frame. In every
/// interleaving the reader reads the child's bytes or, finding the route
/// stale, the page table's frame: never the other page's bytes, which a
/// route trusted without checking the frame's id would return.
#[cfg(all(test, feature = "loom"))]
mod route_model {
    use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};
    use loom::sync::{Arc, Mutex, RwLock};

    const CHILD: u64 = 5;
    const OTHER: u64 = 9;

    struct Frame {
        id: AtomicU64,
        /// The latch and the page bytes it guards (a page's id stands for
        /// its bytes).
        data: RwLock<u64>,
    }

    struct Pool {
        frames: [Frame; 2],
        table: Mutex<Vec<(u64, usize)>>,
        /// The parent's route to `CHILD`: frame index + 1.
        route: AtomicU32,
    }

    /// Frame `i`'s bytes if it holds `CHILD`: the id is checked under the
    /// latch the bytes are read under, as `BufferPool::read_frame` does.
    fn read_frame(p: &Pool, i: usize) -> Option<u64> {
        let f = &p.frames[i];
        let g = f.data.read().ok()?;
        (f.id.load(Acquire) == CHILD).then_some(*g)
    }

    fn read_child(p: &Pool) -> u64 {
        loop {
            let routed = (p.route.load(Relaxed) as usize).checked_sub(1);
            if let Some(bytes) = routed.and_then(|i| read_frame(p, i)) {
                return bytes;
            }
            let found = p
                .table
                .lock()
                .ok()
                .and_then(|t| t.iter().find(|&&(id, _)| id == CHILD).map(|&(_, i)| i));
            if let Some(i) = found {
                if let Some(bytes) = read_frame(p, i) {
                    p.route.store(i as u32 + 1, Relaxed);
                    return bytes;
                }
            }
            // The child is between frames: the real reader would load it.
            loom::thread::yield_now();
        }
    }

    /// Seizes frame `i` (the latch only tried, as under the table lock)
    /// and puts page `id` in it; false if a reader holds the latch.
    fn install(p: &Pool, i: usize, id: u64) -> bool {
        let Ok(mut table) = p.table.lock() else {
            return false;
        };
        let f = &p.frames[i];
        let Ok(mut g) = f.data.try_write() else {
            return false;
        };
        let old = f.id.swap(id, AcqRel);
        table.retain(|&(t, _)| t != old);
        table.push((id, i));
        *g = id;
        true
    }

    #[test]
    fn a_route_never_leads_a_reader_to_another_page() {
        loom::model(|| {
            let p = Arc::new(Pool {
                frames: [
                    Frame {
                        id: AtomicU64::new(CHILD),
                        data: RwLock::new(CHILD),
                    },
                    Frame {
                        id: AtomicU64::new(u64::MAX),
                        data: RwLock::new(0),
                    },
                ],
                table: Mutex::new(vec![(CHILD, 0)]),
                route: AtomicU32::new(1),
            });
            let clock = p.clone();
            let evictor = loom::thread::spawn(move || {
                // The child leaves frame 0 for another page, then comes
                // back in frame 1; a try that meets a reader's latch is
                // passed over, as the clock passes it.
                if install(&clock, 0, OTHER) {
                    while !install(&clock, 1, CHILD) {
                        loom::thread::yield_now();
                    }
                }
            });
            assert_eq!(read_child(&p), CHILD);
            assert!(evictor.join().is_ok(), "the evictor panicked");
            assert_eq!(read_child(&p), CHILD);
        });
    }
}
