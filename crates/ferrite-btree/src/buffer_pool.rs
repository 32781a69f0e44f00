//! The buffer pool: a fixed set of page frames under a byte budget.
//!
//! Owns every page in memory. Invariants:
//! - at most one frame holds a page, found through the page table;
//! - a pinned frame is never evicted; guards pin and unpin;
//! - **no steal**: a dirty frame is never written back or evicted outside a
//!   checkpoint, so the page file always holds exactly the last checkpoint
//!   (checkpoints write through a double-write file; see `checkpoint`).
//!   When dirty frames pass the high-water mark the tree checkpoints;
//! - the memory it holds (frames, their metadata, the page table) stays
//!   within the budget given at creation.
//!
//! Readers of the tree fetch concurrently: the page table is behind a mutex
//! held only to find or claim a frame; a frame being loaded is write-latched
//! until its bytes arrive, and a failed load leaves it empty.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::Arc;

use ferrite_core::{Error, Result};
use ferrite_io::{AlignedBuf, BlockDevice};
use parking_lot::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::clock::{pick_victim, FrameState};
use crate::page::{self, PageId};
use crate::page_map::PageMap;

const EMPTY: u64 = u64::MAX;

type PageTable = PageMap<usize>;

/// Bytes of bookkeeping per frame beyond the page itself: the frame's
/// atomics and lock, its buffer header, and a page-table entry with load.
pub const FRAME_OVERHEAD: usize = 128;

struct Frame {
    id: AtomicU64,
    data: RwLock<AlignedBuf>,
    pins: AtomicU32,
    referenced: AtomicBool,
    dirty: AtomicBool,
}

/// Counters of pool activity.
#[derive(Debug, Default)]
pub struct PoolCounters {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub evictions: AtomicU64,
}

pub struct BufferPool {
    dev: Arc<dyn BlockDevice>,
    page_size: usize,
    frames: Vec<Frame>,
    table: RwLock<PageTable>,
    hand: Mutex<usize>,
    dirty: AtomicUsize,
    pub counters: PoolCounters,
}

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
        if !f.dirty.swap(true, AcqRel) {
            self.pool.dirty.fetch_add(1, AcqRel);
        }
        f.data.write()
    }
}

/// A page held for reading: pinned (so the clock never picks its frame,
/// which would make a claimer wait on the latch this reader holds) and
/// latched shared, with the frame verified to hold the page.
pub struct PageRead<'p> {
    guard: Option<RwLockReadGuard<'p, AlignedBuf>>,
    pins: &'p AtomicU32,
}

impl std::ops::Deref for PageRead<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.guard.as_deref().map_or(&[], |b| b)
    }
}

impl Drop for PageRead<'_> {
    fn drop(&mut self) {
        self.guard = None;
        self.pins.fetch_sub(1, AcqRel);
    }
}

impl Drop for PageRef<'_> {
    fn drop(&mut self) {
        self.pool.frame(self.frame).pins.fetch_sub(1, AcqRel);
    }
}

impl BufferPool {
    /// A pool using at most `budget` bytes (at least 64 frames).
    pub fn new(dev: Arc<dyn BlockDevice>, page_size: usize, budget: u64) -> Self {
        let per = (page_size + FRAME_OVERHEAD) as u64;
        let n = (budget / per).max(64) as usize;
        let frames = (0..n)
            .map(|_| Frame {
                id: AtomicU64::new(EMPTY),
                data: RwLock::new(AlignedBuf::zeroed(page_size)),
                pins: AtomicU32::new(0),
                referenced: AtomicBool::new(false),
                dirty: AtomicBool::new(false),
            })
            .collect();
        Self {
            dev,
            page_size,
            frames,
            table: RwLock::new(PageTable::with_capacity_and_hasher(n, Default::default())),
            hand: Mutex::new(0),
            dirty: AtomicUsize::new(0),
            counters: PoolCounters::default(),
        }
    }

    fn frame(&self, i: usize) -> &Frame {
        // Frame indices only come from the page table and the clock, both
        // bounded by the frame count.
        &self.frames[i]
    }

    pub fn device(&self) -> &dyn BlockDevice {
        self.dev.as_ref()
    }

    pub fn capacity(&self) -> usize {
        self.frames.len()
    }

    pub fn dirty_count(&self) -> usize {
        self.dirty.load(Acquire)
    }

    /// Bytes the pool holds.
    pub fn memory_bytes(&self) -> u64 {
        (self.frames.len() * (self.page_size + FRAME_OVERHEAD)) as u64
    }

    /// Claims a frame for `id` under the table lock. Errors if every frame
    /// is pinned or dirty.
    fn claim(&self, table: &mut PageTable, id: PageId) -> Result<usize> {
        let mut hand = self.hand.lock();
        let state = |i: usize| {
            let f = self.frame(i);
            FrameState {
                empty: f.id.load(Acquire) == EMPTY,
                pinned: f.pins.load(Acquire) > 0,
                dirty: f.dirty.load(Acquire),
                referenced: f.referenced.load(Acquire),
            }
        };
        let mut clear = |i: usize| self.frame(i).referenced.store(false, Release);
        let Some((victim, next)) = pick_victim(self.frames.len(), *hand, &state, &mut clear) else {
            return Err(Error::corruption(
                "buffer pool",
                "every frame is pinned or dirty; the pool is too small for this operation",
            ));
        };
        *hand = next;
        let f = self.frame(victim);
        let old = f.id.swap(id, AcqRel);
        if old != EMPTY {
            table.remove(&old);
            self.counters.evictions.fetch_add(1, Relaxed);
        }
        f.pins.store(1, Release);
        f.referenced.store(true, Release);
        table.insert(id, victim);
        Ok(victim)
    }

    /// Latches page `id` for reading, loading it on a miss. The fast path
    /// for lookups and scans: one shared table lookup and one shared latch.
    pub fn read(&self, id: PageId) -> Result<PageRead<'_>> {
        loop {
            let hit = self.table.read().get(&id).copied();
            if let Some(i) = hit {
                let f = self.frame(i);
                f.pins.fetch_add(1, AcqRel);
                let guard = f.data.read();
                if f.id.load(Acquire) == id {
                    if !f.referenced.load(Relaxed) {
                        f.referenced.store(true, Relaxed);
                    }
                    self.counters.hits.fetch_add(1, Relaxed);
                    return Ok(PageRead {
                        guard: Some(guard),
                        pins: &f.pins,
                    });
                }
                drop(guard);
                f.pins.fetch_sub(1, AcqRel);
                continue;
            }
            // Load through the pinning path, then take the hit path.
            drop(self.fetch(id)?);
        }
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
                if f.id.load(Acquire) == id {
                    if !f.referenced.load(Relaxed) {
                        f.referenced.store(true, Relaxed);
                    }
                    // Wait out a load in progress; a failed load empties the frame.
                    let ok = {
                        let _g = f.data.read();
                        f.id.load(Acquire) == id
                    };
                    if ok {
                        self.counters.hits.fetch_add(1, Relaxed);
                        return Ok(PageRef {
                            pool: self,
                            frame: i,
                        });
                    }
                }
                f.pins.fetch_sub(1, AcqRel);
                continue;
            }
            let mut table = self.table.write();
            if table.contains_key(&id) {
                continue;
            }
            let i = self.claim(&mut table, id)?;
            let f = self.frame(i);
            let mut data = f.data.write();
            drop(table);
            self.counters.misses.fetch_add(1, Relaxed);
            let off = id * self.page_size as u64;
            let loaded = self
                .dev
                .read_at(&mut data, off)
                .map_err(Error::from)
                .and_then(|_| page::check(&data, id, &|| format!("page {id} at offset {off}")));
            if let Err(e) = loaded {
                let mut table = self.table.write();
                table.remove(&id);
                f.id.store(EMPTY, Release);
                f.pins.fetch_sub(1, AcqRel);
                return Err(e);
            }
            drop(data);
            return Ok(PageRef {
                pool: self,
                frame: i,
            });
        }
    }

    /// Pins a new page `id` (zeroed, dirty) without reading the device.
    pub fn create(&self, id: PageId) -> Result<PageRef<'_>> {
        let mut table = self.table.write();
        if let Some(&i) = table.get(&id) {
            self.frame(i).pins.fetch_add(1, AcqRel);
            let r = PageRef {
                pool: self,
                frame: i,
            };
            drop(table);
            r.write().fill(0);
            return Ok(r);
        }
        let i = self.claim(&mut table, id)?;
        drop(table);
        let r = PageRef {
            pool: self,
            frame: i,
        };
        r.write().fill(0);
        Ok(r)
    }

    /// Copies of every dirty page, sealed, in page-id order.
    pub fn dirty_pages(&self) -> Vec<(PageId, AlignedBuf)> {
        let mut out: Vec<(PageId, AlignedBuf)> = self
            .frames
            .iter()
            .filter(|f| f.dirty.load(Acquire))
            .filter_map(|f| {
                let mut d = f.data.write();
                let id = f.id.load(Acquire);
                if id == EMPTY {
                    return None;
                }
                page::seal(&mut d);
                Some((id, d.clone()))
            })
            .collect();
        out.sort_by_key(|(id, _)| *id);
        out
    }

    /// Marks every page clean after a checkpoint made them durable.
    pub fn mark_all_clean(&self) {
        for f in &self.frames {
            if f.dirty.swap(false, AcqRel) {
                self.dirty.fetch_sub(1, AcqRel);
            }
        }
    }
}
