//! The table space: one block device holding every table as an extent of
//! whole pages, and the allocator of those extents.
//!
//! Invariants:
//! - the free list is exactly the pages no live table occupies; it is not
//!   persisted but rebuilt at open from the manifest's extents
//!   ([`TableSpace::open`]), so a crash can leak nothing;
//! - an extent is freed only after the manifest that no longer lists its
//!   table is durable, so a page a durable manifest refers to is never
//!   reused;
//! - live extents are non-empty, disjoint and below `MAX_PAGES`;
//! - freed extents are discarded (TRIM / hole punch) and reused first-fit;
//!   the device grows only when no free extent fits.

use std::collections::BTreeMap;
use std::sync::Arc;

use ferrite_core::{Error, Result};
use ferrite_io::{AlignedBuf, BlockDevice};
use parking_lot::Mutex;

use crate::table::block::PAGE;

/// Pages a table space addresses: byte offsets stay below 2^62.
const MAX_PAGES: u64 = (1 << 62) / PAGE as u64;

/// Pages `[start, start + pages)` of the table space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub start: u64,
    pub pages: u64,
}

struct Free {
    /// start → pages, coalesced.
    runs: BTreeMap<u64, u64>,
    /// First page past every allocation.
    end: u64,
    /// Pages in `runs`.
    free: u64,
    /// The most pages in use (allocated, not yet released) at once since
    /// open: what the tables cost the disk at their peak, since released
    /// extents are discarded.
    peak: u64,
}

impl Free {
    fn note_use(&mut self) {
        self.peak = self.peak.max(self.end - self.free);
    }
}

pub struct TableSpace {
    dev: Arc<dyn BlockDevice>,
    free: Mutex<Free>,
}

impl TableSpace {
    #[cfg_attr(
        not(feature = "bench-internals"),
        allow(dead_code, reason = "the harness reads it through `internals`")
    )]
    /// An empty space on `dev`: every page free.
    pub fn new(dev: Arc<dyn BlockDevice>) -> Self {
        Self {
            dev,
            free: Mutex::new(Free {
                runs: BTreeMap::new(),
                end: 0,
                free: 0,
                peak: 0,
            }),
        }
    }

    /// Opens the space with `live` extents in use; everything else is free.
    /// Extents that are empty, overlap or reach past the addressable pages
    /// cannot come from this allocator: the manifest naming them is
    /// damaged, and freeing around them would hand a live table's pages
    /// to another.
    pub fn open(dev: Arc<dyn BlockDevice>, live: &[Extent]) -> Result<Self> {
        let mut sorted: Vec<Extent> = live.to_vec();
        sorted.sort_by_key(|e| e.start);
        let mut runs = BTreeMap::new();
        let mut at = 0u64;
        for e in &sorted {
            let fits = e.pages > 0 && e.start >= at;
            let end = e.start.checked_add(e.pages);
            let Some(end) = end.filter(|&end| fits && end <= MAX_PAGES) else {
                return Err(Error::corruption(
                    "lsm manifest",
                    format!(
                        "table extent {}+{} is empty, overlaps another or lies past page {MAX_PAGES}",
                        e.start, e.pages
                    ),
                ));
            };
            if e.start > at {
                runs.insert(at, e.start - at);
            }
            at = end;
        }
        let free: u64 = runs.values().sum();
        Ok(Self {
            dev,
            free: Mutex::new(Free {
                runs,
                end: at,
                free,
                peak: at - free,
            }),
        })
    }

    #[cfg_attr(
        not(feature = "bench-internals"),
        allow(dead_code, reason = "the harness reads it through `internals`")
    )]
    pub fn device(&self) -> &Arc<dyn BlockDevice> {
        &self.dev
    }

    /// Allocates `pages` pages, first fit.
    pub fn allocate(&self, pages: u64) -> Extent {
        let mut f = self.free.lock();
        let fit = f
            .runs
            .iter()
            .find(|(_, &len)| len >= pages)
            .map(|(&s, &l)| (s, l));
        if let Some((start, len)) = fit {
            f.runs.remove(&start);
            if len > pages {
                f.runs.insert(start + pages, len - pages);
            }
            f.free -= pages;
            f.note_use();
            return Extent { start, pages };
        }
        // Extend, absorbing a free run that ends at the current end.
        let tail = f
            .runs
            .iter()
            .next_back()
            .filter(|(&s, &l)| s + l == f.end)
            .map(|(&s, _)| s);
        let start = match tail {
            Some(s) => {
                if let Some(l) = f.runs.remove(&s) {
                    f.free -= l;
                }
                s
            }
            None => f.end,
        };
        f.end = start + pages;
        f.note_use();
        Extent { start, pages }
    }

    /// Returns an extent whose table is gone from the durable manifest.
    pub fn release(&self, e: Extent) {
        // Discarding is advisory: a failure leaves the pages allocated on
        // disk but free here, and they are rewritten on reuse.
        if let Err(err) = self
            .dev
            .discard(e.start * PAGE as u64, e.pages * PAGE as u64)
        {
            log::warn!(
                "discard of table pages {}+{} failed: {err}",
                e.start,
                e.pages
            );
        }
        let mut f = self.free.lock();
        f.free += e.pages;
        let (mut start, mut pages) = (e.start, e.pages);
        if let Some((&ps, &pl)) = f.runs.range(..start).next_back() {
            if ps + pl == start {
                f.runs.remove(&ps);
                start = ps;
                pages += pl;
            }
        }
        if let Some(&nl) = f.runs.get(&(start + pages)) {
            f.runs.remove(&(start + pages));
            pages += nl;
        }
        f.runs.insert(start, pages);
    }

    /// Writes a table's bytes (whole pages) to its extent.
    pub fn write(&self, e: Extent, bytes: &AlignedBuf) -> Result<()> {
        self.dev.write_at(bytes, e.start * PAGE as u64)?;
        Ok(())
    }

    /// Reads `pages` pages from page `page` of the space.
    pub fn read(&self, page: u64, pages: u64) -> Result<AlignedBuf> {
        let mut buf = AlignedBuf::zeroed((pages as usize) * PAGE);
        self.dev.read_at(&mut buf, page * PAGE as u64)?;
        Ok(buf)
    }

    /// The `len` bytes at byte `offset`, read as the device's blocks that
    /// hold them (a few 512-byte sectors where the file system allows, not
    /// whole pages): the buffer and where in it the bytes begin.
    pub fn read_span(&self, offset: u64, len: usize) -> Result<(AlignedBuf, usize)> {
        let unit = self.dev.block_size() as u64;
        let first = offset - offset % unit;
        let end = (offset + len as u64).div_ceil(unit) * unit;
        let mut buf = AlignedBuf::zeroed((end - first) as usize);
        self.dev.read_at(&mut buf, first)?;
        Ok((buf, (offset - first) as usize))
    }

    pub fn sync(&self) -> Result<()> {
        Ok(self.dev.sync()?)
    }

    #[cfg_attr(
        not(feature = "bench-internals"),
        allow(dead_code, reason = "the harness reads it through `internals`")
    )]
    /// Pages in free runs and the space's end, for reports.
    pub fn usage(&self) -> (u64, u64) {
        let f = self.free.lock();
        (f.free, f.end)
    }

    /// The most pages in use at once since open.
    pub fn peak_pages(&self) -> u64 {
        self.free.lock().peak
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_io::MemDevice;

    #[test]
    fn first_fit_reuse_and_coalescing() {
        let s = TableSpace::new(Arc::new(MemDevice::new()));
        let a = s.allocate(4);
        let b = s.allocate(2);
        let c = s.allocate(3);
        assert_eq!((a.start, b.start, c.start), (0, 4, 6));
        s.release(a);
        s.release(b);
        assert_eq!(s.usage(), (6, 9));
        let d = s.allocate(5);
        assert_eq!(d.start, 0, "coalesced run reused");
        assert_eq!(s.peak_pages(), 9, "8 in use now, 9 before");
        s.release(c);
        let e = s.allocate(10);
        assert_eq!(e.start, 5, "tail run absorbed by growth");
        assert_eq!(s.peak_pages(), 15);
    }

    /// A span is read as the device's blocks that hold it: the sectors
    /// of a 512-byte device, whole pages of a 4 KiB one; the bytes come
    /// back the same either way.
    #[test]
    fn a_span_reads_the_blocks_that_hold_it() {
        for unit in [512usize, 4096] {
            let dev = Arc::new(MemDevice::with_block_size(unit).unwrap());
            let mut page = AlignedBuf::zeroed(2 * PAGE);
            for (i, b) in page.iter_mut().enumerate() {
                *b = (i % 251) as u8;
            }
            dev.write_at(&page, 0).unwrap();
            let s = TableSpace::new(dev.clone());
            let before = dev.io_stats().read_bytes;
            let (buf, skip) = s.read_span(3000, 1500).unwrap();
            assert_eq!(&buf[skip..skip + 1500], &page[3000..4500], "unit {unit}");
            let read = dev.io_stats().read_bytes - before;
            let want = if unit == 512 {
                4608 - 2560
            } else {
                2 * PAGE as u64
            };
            assert_eq!(read, want, "unit {unit}");
        }
    }

    #[test]
    fn open_frees_the_gaps() {
        let live = [
            Extent {
                start: 10,
                pages: 5,
            },
            Extent { start: 2, pages: 3 },
        ];
        let s = TableSpace::open(Arc::new(MemDevice::new()), &live).unwrap();
        assert_eq!(s.usage(), (2 + 5, 15));
        assert_eq!(s.allocate(2).start, 0);
        assert_eq!(s.allocate(5).start, 5);
    }

    #[test]
    fn extents_no_allocator_makes_are_damage() {
        let e = |start, pages| Extent { start, pages };
        for live in [
            vec![e(4, 0)],
            vec![e(0, 5), e(4, 2)],
            vec![e(3, 2), e(3, 2)],
            vec![e(u64::MAX - 1, 5)],
            vec![e(MAX_PAGES - 1, 2)],
        ] {
            let got = TableSpace::open(Arc::new(MemDevice::new()), &live);
            assert!(
                matches!(got, Err(Error::Corruption { .. })),
                "{live:?} was accepted"
            );
        }
        assert!(TableSpace::open(Arc::new(MemDevice::new()), &[e(MAX_PAGES - 2, 2)]).is_ok());
    }
}
