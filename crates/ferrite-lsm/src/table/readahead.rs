//! Readahead for passes that read a table once, in order (compactions and
//! checks), and for long forward scans.
//!
//! A [`Readahead`] holds one run of consecutive pages of one table's data
//! region, read in a single device request of up to [`READAHEAD_PAGES`].
//! Blocks parsed from it are copies, so the run can be replaced while
//! they are in use. Such passes read around the block cache: a block they
//! find cached is used, but what they read does not enter it, because a
//! compaction touches every block of its inputs once and would otherwise
//! evict the blocks lookups keep coming back to (RocksDB's compaction
//! reads with `fill_cache = false` and its own readahead, for the same
//! reasons). One block per request, on a disk where a request costs
//! about 100 µs, also held compactions to about 40 MB/s.
//!
//! A scan's iterator reads its first blocks one at a time, through the
//! cache, as a lookup does; from its third block in a row it reads runs
//! ([`ScanRuns`]) that start at [`SCAN_FIRST_PAGES`] and double up to
//! [`SCAN_MAX_PAGES`] (RocksDB's iterator auto-readahead: 8 KiB doubling
//! to 256 KiB after two reads of one file), and the blocks it takes from
//! them enter the cache. In a compressed table several frames share a
//! page, so reading them one by one would read each page several times.
//!
//! Invariant: `buf` holds pages `first .. first + pages` of the table's
//! data region, as read from the device.

use ferrite_io::AlignedBuf;

use super::block::PAGE;

/// Pages one readahead request covers (1 MiB).
pub const READAHEAD_PAGES: u32 = 256;

#[derive(Default)]
pub struct Readahead {
    first: u32,
    pages: u32,
    buf: Option<AlignedBuf>,
}

impl Readahead {
    pub fn new() -> Self {
        Self::default()
    }

    /// The bytes of pages `page .. page + pages`, if this run holds them.
    pub fn get(&self, page: u32, pages: u32) -> Option<&[u8]> {
        let buf = self.buf.as_ref()?;
        if page < self.first || page.checked_add(pages)? > self.first + self.pages {
            return None;
        }
        let from = (page - self.first) as usize * PAGE;
        buf.get(from..from + pages as usize * PAGE)
    }

    /// Replaces the run with `buf`, the pages from `first` on.
    pub fn fill(&mut self, first: u32, buf: AlignedBuf) {
        self.first = first;
        self.pages = (buf.len() / PAGE) as u32;
        self.buf = Some(buf);
    }

    /// Pages to read for a block at `page` spanning `pages`, in a data
    /// region of `data_pages`: a run of `run` pages, cut at the region's
    /// end, and never shorter than the block.
    pub fn span(page: u32, pages: u32, data_pages: u32, run: u32) -> u32 {
        run.min(data_pages.saturating_sub(page)).max(pages)
    }
}

/// Pages of a scan's first readahead run (8 KiB).
pub const SCAN_FIRST_PAGES: u32 = 2;
/// Pages of its longest (256 KiB).
pub const SCAN_MAX_PAGES: u32 = 64;

/// A forward scan's readahead: off for its first two blocks, then runs
/// that double from [`SCAN_FIRST_PAGES`] to [`SCAN_MAX_PAGES`].
#[derive(Default)]
pub struct ScanRuns {
    pub run: Readahead,
    /// Blocks this scan has read in a row.
    blocks: u32,
    /// Pages of the next run.
    pages: u32,
}

impl ScanRuns {
    /// Notes the scan's next block after the one it started in; the run
    /// length to read it with, or `None` to read it alone (the second).
    pub fn next(&mut self) -> Option<u32> {
        self.blocks = self.blocks.saturating_add(1);
        (self.blocks > 1).then(|| {
            if self.pages == 0 {
                self.pages = SCAN_FIRST_PAGES;
            }
            self.pages
        })
    }

    /// A run of `pages` was read: the next is twice as long, up to the
    /// most.
    pub fn grow(&mut self) {
        self.pages = (self.pages * 2).min(SCAN_MAX_PAGES);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_runs_start_after_two_blocks_and_double_to_the_most() {
        let mut s = ScanRuns::default();
        assert_eq!(s.next(), None);
        let mut seen = Vec::new();
        for _ in 0..8 {
            let p = s.next().unwrap();
            seen.push(p);
            s.grow();
        }
        assert_eq!(seen, [2, 4, 8, 16, 32, 64, 64, 64]);
    }

    #[test]
    fn serves_only_pages_it_holds() {
        let mut r = Readahead::new();
        assert!(r.get(0, 1).is_none());
        let mut buf = AlignedBuf::zeroed(3 * PAGE);
        buf[PAGE] = 7;
        r.fill(10, buf);
        assert_eq!(r.get(11, 1).map(|b| b[0]), Some(7));
        assert_eq!(r.get(10, 3).map(<[u8]>::len), Some(3 * PAGE));
        assert!(r.get(9, 1).is_none());
        assert!(r.get(12, 2).is_none());
        assert!(r.get(13, 1).is_none());
        assert!(r.get(u32::MAX, 2).is_none());
    }

    #[test]
    fn span_is_a_run_cut_at_the_region_end_but_never_below_the_block() {
        let r = READAHEAD_PAGES;
        assert_eq!(Readahead::span(0, 1, 10_000, r), READAHEAD_PAGES);
        assert_eq!(Readahead::span(0, 1, 10_000, 4), 4);
        assert_eq!(Readahead::span(95, 1, 100, r), 5);
        assert_eq!(Readahead::span(95, 8, 100, r), 8);
        assert_eq!(Readahead::span(100, 1, 100, r), 1);
    }
}
