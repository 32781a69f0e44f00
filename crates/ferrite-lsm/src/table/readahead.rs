//! Readahead for passes that read a table once, in order (compactions and
//! checks).
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
    /// region of `data_pages`: a full run, cut at the region's end, and
    /// never shorter than the block.
    pub fn span(page: u32, pages: u32, data_pages: u32) -> u32 {
        READAHEAD_PAGES
            .min(data_pages.saturating_sub(page))
            .max(pages)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(Readahead::span(0, 1, 10_000), READAHEAD_PAGES);
        assert_eq!(Readahead::span(95, 1, 100), 5);
        assert_eq!(Readahead::span(95, 8, 100), 8);
        assert_eq!(Readahead::span(100, 1, 100), 1);
    }
}
