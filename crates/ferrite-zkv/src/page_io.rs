//! Leaf page I/O: where a page id is read from and how a new page gets one.
//!
//! Reads look in the write sequencers (pages waiting to be written), then
//! the read cache, then the device; a page read from the device is offered
//! to the read cache. Writes go to a ZFlusher: a writer takes the first
//! flusher it can lock, so concurrent writers fill different zones. Every
//! page id handed out counts as valid in its zone until [`PageIo::release`].

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use ferrite_core::Result;
use ferrite_io::{AlignedBuf, ZonedDevice};
use parking_lot::Mutex;

use crate::flusher::Flusher;
use crate::read_cache::ReadCache;
use crate::zone_space::ZoneSpace;

pub struct PageIo {
    pub dev: Arc<dyn ZonedDevice>,
    pub page_size: usize,
    pub space: Mutex<ZoneSpace>,
    flushers: Vec<Mutex<Flusher>>,
    rr: AtomicUsize,
    pub cache: ReadCache,
    /// Admit pages read from the device to the read cache.
    admit_reads: bool,
    pub device_page_reads: AtomicU64,
}

impl PageIo {
    pub fn new(
        dev: Arc<dyn ZonedDevice>,
        page_size: usize,
        space: ZoneSpace,
        flushers: Vec<Flusher>,
        cache_pages: usize,
        admit_reads: bool,
    ) -> Self {
        Self {
            page_size,
            dev,
            space: Mutex::new(space),
            flushers: flushers.into_iter().map(Mutex::new).collect(),
            rr: AtomicUsize::new(0),
            cache: ReadCache::new(cache_pages, 16),
            admit_reads: admit_reads && cache_pages > 0,
            device_page_reads: AtomicU64::new(0),
        }
    }

    fn zone_of(&self, page: u64) -> u32 {
        (page * self.page_size as u64 / self.dev.geometry().zone_size) as u32
    }

    pub fn read(&self, page: u64) -> Result<Arc<AlignedBuf>> {
        let zone = self.zone_of(page);
        for f in &self.flushers {
            let mut f = f.lock();
            if f.zone() == Some(zone) {
                if let Some(b) = f.lookup(page) {
                    return Ok(b);
                }
            }
        }
        if let Some(b) = self.cache.get(page) {
            return Ok(b);
        }
        let mut buf = AlignedBuf::zeroed(self.page_size);
        self.dev.read_at(&mut buf, page * self.page_size as u64)?;
        self.device_page_reads.fetch_add(1, Ordering::Relaxed);
        let buf = Arc::new(buf);
        if self.admit_reads {
            self.cache.insert(page, buf.clone());
        }
        Ok(buf)
    }

    /// Gives `buf` a page id at some flusher's write pointer.
    pub fn write(&self, buf: AlignedBuf) -> Result<u64> {
        let n = self.flushers.len();
        let start = self.rr.fetch_add(1, Ordering::Relaxed);
        for i in 0..n {
            if let Some(mut f) = self.flushers[(start + i) % n].try_lock() {
                return f.push(buf, self.dev.as_ref(), &self.space, &self.cache);
            }
        }
        self.flushers[start % n]
            .lock()
            .push(buf, self.dev.as_ref(), &self.space, &self.cache)
    }

    /// The page is no longer referenced.
    pub fn release(&self, page: u64) {
        let z = self.zone_of(page) as usize;
        self.space.lock().sub_valid(z, 1);
        self.cache.remove(page);
    }

    /// Writes every waiting page.
    pub fn drain(&self) -> Result<()> {
        for f in &self.flushers {
            f.lock().drain(self.dev.as_ref(), &self.cache)?;
        }
        Ok(())
    }

    /// (zone writes, pages written) over all flushers.
    pub fn write_counts(&self) -> (u64, u64) {
        self.flushers.iter().fold((0, 0), |(a, b), f| {
            let f = f.lock();
            (a + f.zone_writes, b + f.pages_written)
        })
    }

    pub fn waiting_pages(&self) -> usize {
        self.flushers.iter().map(|f| f.lock().waiting()).sum()
    }
}
