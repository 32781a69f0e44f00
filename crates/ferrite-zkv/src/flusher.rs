//! ZFlusher: one per open zone, it turns new leaf pages into ordered,
//! grouped zone writes.
//!
//! - **Write sequencer**: a FIFO of pages waiting to be written. A new page
//!   is given the next page id at the zone's (host-side) write pointer when
//!   it enters, so page ids are pre-allocated in write order and the FIFO's
//!   head is always the page the device's write pointer expects.
//! - **Ring merger**: when the FIFO passes its capacity, runs of `group`
//!   consecutive head pages (default 4) leave as one zone write.
//! - A page read while it waits counts a hit; on leaving, a page with at
//!   least `cache_threshold` hits moves to the read cache instead of being
//!   dropped (the paper's counter threshold; default 1).
//!
//! Invariants: `written <= next`, the FIFO holds exactly pages
//! `[written, next)` of `zone`, and the device write pointer of `zone` is
//! at `written` (nothing but this flusher writes the zone). A zone is left
//! only after the FIFO is empty; it is then finished on the device so it
//! stops counting against the open/active limits.

use std::collections::VecDeque;
use std::sync::Arc;

use ferrite_core::{Error, Result};
use ferrite_io::{AlignedBuf, ZonedDevice};
use parking_lot::Mutex;

use crate::read_cache::ReadCache;
use crate::zone_space::{Role, ZoneSpace};

struct Waiting {
    buf: Arc<AlignedBuf>,
    hits: u32,
}

/// One zone's sequencer and merger.
pub struct Flusher {
    zone: Option<u32>,
    /// Next page id to hand out.
    next: u64,
    /// Page id at the device write pointer.
    written: u64,
    /// Last page id the zone can hold + 1.
    end: u64,
    fifo: VecDeque<Waiting>,
    /// Pages kept in the FIFO before the merger writes.
    pub capacity: usize,
    pub group: usize,
    pub cache_threshold: u32,
    pub role: Role,
    /// Bytes of a page (a multiple of the device block).
    page_size: u64,
    pub zone_writes: u64,
    pub pages_written: u64,
}

impl Flusher {
    pub fn new(
        capacity: usize,
        group: usize,
        cache_threshold: u32,
        role: Role,
        page_size: usize,
    ) -> Self {
        Self {
            zone: None,
            next: 0,
            written: 0,
            end: 0,
            fifo: VecDeque::new(),
            capacity,
            group: group.max(1),
            cache_threshold,
            role,
            page_size: page_size as u64,
            zone_writes: 0,
            pages_written: 0,
        }
    }

    /// Takes back `zone`, a leaf zone partly written before a restart
    /// with `written` bytes (a whole number of pages) of `capacity`: the
    /// next page goes at its write pointer. The flusher must hold no zone.
    pub fn resume(&mut self, zone: u32, written: u64, zone_size: u64, capacity: u64) {
        debug_assert!(self.zone.is_none() && self.fifo.is_empty());
        let start = u64::from(zone) * zone_size / self.page_size;
        self.zone = Some(zone);
        self.next = start + written / self.page_size;
        self.written = self.next;
        self.end = start + capacity / self.page_size;
    }

    pub fn zone(&self) -> Option<u32> {
        self.zone
    }

    /// The waiting image of `page`, counting a hit.
    pub fn lookup(&mut self, page: u64) -> Option<Arc<AlignedBuf>> {
        if page < self.written || page >= self.next {
            return None;
        }
        let w = self.fifo.get_mut((page - self.written) as usize)?;
        w.hits += 1;
        Some(w.buf.clone())
    }

    /// Queues `buf` (one page) and returns its page id.
    pub fn push(
        &mut self,
        buf: AlignedBuf,
        dev: &dyn ZonedDevice,
        space: &Mutex<ZoneSpace>,
        cache: &ReadCache,
    ) -> Result<u64> {
        let page_size = self.page_size;
        if self.zone.is_none() || self.next >= self.end {
            self.switch_zone(dev, space, cache)?;
        }
        let id = self.next;
        self.next += 1;
        self.fifo.push_back(Waiting {
            buf: Arc::new(buf),
            hits: 0,
        });
        if let Some(z) = self.zone {
            space.lock().add_page(z as usize);
        }
        while self.fifo.len() > self.capacity && self.fifo.len() >= self.group {
            self.write_head(self.group, dev, cache)?;
        }
        debug_assert!(
            id * page_size < dev.geometry().zone_size * u64::from(dev.geometry().zone_count)
        );
        Ok(id)
    }

    /// Writes the first `n` waiting pages as one zone write.
    fn write_head(&mut self, n: usize, dev: &dyn ZonedDevice, cache: &ReadCache) -> Result<()> {
        let _work = ferrite_core::background::begin(ferrite_core::background::Work::Flush);
        let n = n.min(self.fifo.len());
        if n == 0 {
            return Ok(());
        }
        let ps = self.page_size as usize;
        let mut out = AlignedBuf::zeroed(n * ps);
        for (i, w) in self.fifo.iter().take(n).enumerate() {
            out[i * ps..(i + 1) * ps].copy_from_slice(&w.buf[..ps]);
        }
        dev.write_at(&out, self.written * ps as u64)?;
        self.zone_writes += 1;
        self.pages_written += n as u64;
        for _ in 0..n {
            if let Some(w) = self.fifo.pop_front() {
                if self.cache_threshold > 0 && w.hits >= self.cache_threshold {
                    cache.insert(self.written, w.buf);
                }
            }
            self.written += 1;
        }
        Ok(())
    }

    /// Writes every waiting page (a checkpoint, or before leaving a zone).
    pub fn drain(&mut self, dev: &dyn ZonedDevice, cache: &ReadCache) -> Result<()> {
        while !self.fifo.is_empty() {
            self.write_head(self.group, dev, cache)?;
        }
        Ok(())
    }

    fn switch_zone(
        &mut self,
        dev: &dyn ZonedDevice,
        space: &Mutex<ZoneSpace>,
        cache: &ReadCache,
    ) -> Result<()> {
        self.leave_zone(dev, space, cache)?;
        let geo = *dev.geometry();
        let ps = self.page_size;
        let z = space.lock().take(self.role).ok_or(Error::Device(
            ferrite_io::DeviceError::NoSpace {
                op: ferrite_io::IoOp::Write,
                offset: self.next * ps,
            },
        ))?;
        let start = u64::from(z) * geo.zone_size / ps;
        self.zone = Some(z);
        self.next = start;
        self.written = start;
        self.end = start + geo.zone_capacity / ps;
        Ok(())
    }

    /// Drains and finishes the current zone, if any.
    pub fn leave_zone(
        &mut self,
        dev: &dyn ZonedDevice,
        space: &Mutex<ZoneSpace>,
        cache: &ReadCache,
    ) -> Result<()> {
        if let Some(z) = self.zone.take() {
            self.drain(dev, cache)?;
            dev.finish_zone(z)?;
            let mut s = space.lock();
            s.touch(z as usize);
            s.close(z as usize);
        }
        Ok(())
    }

    pub fn waiting(&self) -> usize {
        self.fifo.len()
    }
}
