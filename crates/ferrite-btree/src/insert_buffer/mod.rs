//! The insert buffer (TurboIndex): a record-level cache beside the buffer
//! pool for writes whose leaf is not resident, and the detector that
//! decides when such a leaf is worth loading.
//!
//! Owns the buffered records (the *accumulator*: each node of the
//! [`HotPageDetector`]'s stack holds its page's [`RecordSet`], so one
//! probe by page id finds both) and the log of write hits. The
//! tree consults it through the write-miss hook (`hook`):
//! - a write whose leaf is resident is applied to the page, and the page
//!   id is logged (once) without touching the stack; the log is replayed
//!   into the stack on the next write miss (approximated LIRS, §III-B);
//! - a write whose leaf is not resident is buffered here; once the page's
//!   reuse score reaches the threshold the store loads the page and
//!   applies them all (postponed inserts), a few such pages at a time with
//!   overlapping reads; once its records pass a quarter of a page, at once;
//! - when the buffer passes its byte budget, the pages at the bottom of
//!   the stack are applied in a batch, in page-id order, read a few at a
//!   time with overlapping reads.
//!
//! Invariants: a buffered record is newer than the page image of the leaf
//! its key maps to, and the buffer's records are in the WAL (the write
//! logged them; a checkpoint re-logs them into the new epoch). Records of
//! a page stay buffered while a reader loads it; the next write to that
//! page applies them first, since the page is then resident.
//!
//! Memory is counted from allocation sizes (capacities of every vector and
//! table), and the budget covers all of it: records, nodes, indexes, log.
//! With the adaptive option the store drops the whole buffer while it does
//! not pay ([`gate`]) and lends its memory to the pool meanwhile.

mod detector;
pub mod gate;
pub(crate) mod hook;
mod record_set;

pub use detector::{HotPageDetector, Recency};
pub use record_set::{Record, RecordSet, MAX_PART};

use crate::page::PageId;
use crate::page_map::{table_bytes, PageSet};

/// How the insert buffer is configured.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct InsertBufferOptions {
    /// Share of the engine's memory budget given to the insert buffer; the
    /// buffer pool gets the rest.
    pub share: f64,
    /// Reuse score at which a page's buffered records are applied by
    /// loading it (the paper evaluates 1 and 2).
    pub reuse_threshold: u8,
    /// L-type quota as a fraction of the buffer pool's frames (paper: 0.9).
    pub l_quota: f64,
    /// Turn the buffer off (its records applied, its memory lent to the
    /// pool) while it saves fewer reads than its memory would as pool
    /// frames, and on again when writes make it pay (see `gate`). Off:
    /// the fixed split of the paper.
    pub adaptive: bool,
}

ferrite_core::option_setters!(InsertBufferOptions {
    share: f64,
    reuse_threshold: u8,
    l_quota: f64,
    adaptive: bool,
});

impl Default for InsertBufferOptions {
    fn default() -> Self {
        Self {
            share: 0.05,
            reuse_threshold: 2,
            l_quota: 0.9,
            adaptive: true,
        }
    }
}

impl InsertBufferOptions {
    pub fn validate(&self) -> Result<(), String> {
        if !(self.share > 0.0 && self.share < 0.9) {
            return Err(format!(
                "insert buffer share {} is outside (0, 0.9)",
                self.share
            ));
        }
        if !(self.l_quota > 0.0 && self.l_quota <= 1.0) {
            return Err(format!("L quota {} is outside (0, 1]", self.l_quota));
        }
        if self.reuse_threshold == 0 {
            return Err("a reuse threshold of 0 loads on every miss".into());
        }
        Ok(())
    }
}

/// Activity counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct BufferCounters {
    /// Writes buffered instead of loading their leaf.
    pub buffered: u64,
    /// Writes not buffered because no room could be made (applied directly).
    pub refused: u64,
    /// Pages loaded because their reuse score reached the threshold.
    pub promoted_loads: u64,
    /// Pages loaded because their records passed the per-page cap.
    pub full_loads: u64,
    /// Pages applied to make room (memory pressure).
    pub pressure_loads: u64,
    /// Records applied to pages.
    pub applied_records: u64,
    /// Write hits logged for the stack.
    pub logged_hits: u64,
}

/// Why a buffered write asks for its page to be loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadReason {
    /// Reuse score at the threshold: the page is hot.
    Hot,
    /// The page's records reached the per-page cap.
    Full,
}

/// What became of a write offered to the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// Buffered; the page stays unloaded.
    Kept,
    /// Buffered, and the page should now be loaded with all its records.
    Load(LoadReason),
    /// Not buffered: the stack is full (the caller writes to the page).
    NoRoom,
}

/// Stack nodes per ten buffer-pool frames the stack is sized for: enough
/// to follow every page of a data set twice the pool, with room to spare.
pub const NODES_PER_TEN_FRAMES: usize = 25;

pub struct InsertBuffer {
    /// The LRU stack; each node's payload is its page's records.
    stack: HotPageDetector<RecordSet>,
    hit_log: Vec<PageId>,
    logged: PageSet,
    log_cap: usize,
    budget: usize,
    max_nodes: usize,
    threshold: u8,
    /// Record bytes per page beyond which the page is loaded.
    page_cap: usize,
    /// Heap bytes of all record sets, kept up to date on every change.
    record_bytes: usize,
    records: usize,
    pages: usize,
    pub counters: BufferCounters,
}

impl InsertBuffer {
    /// A buffer of `budget` bytes beside a pool of `frames` frames of
    /// `page_size` bytes. The stack's fixed structures (nodes, index, hit
    /// log) get room for [`NODES_PER_TEN_FRAMES`] nodes per ten frames, but at
    /// most 60% of the budget; the rest holds records. The stack must reach
    /// well past the pool to tell hot pages from a loop over more pages
    /// than the pool holds.
    pub fn new(opts: &InsertBufferOptions, budget: usize, frames: usize, page_size: usize) -> Self {
        // A full log is replayed at once, so it need not hold every frame.
        let log_cap = (frames / 4).max(16);
        let log_bytes = log_cap * 8 + table_bytes(log_cap, 8);
        let room = (budget * 3 / 5).saturating_sub(log_bytes);
        let mut max_nodes = (room / 46).min(frames * NODES_PER_TEN_FRAMES / 10);
        while max_nodes > 4 && HotPageDetector::<RecordSet>::bytes_for(max_nodes) > room {
            max_nodes = max_nodes * 15 / 16;
        }
        let quota = (frames as f64 * opts.l_quota) as usize;
        let mut logged = PageSet::default();
        logged.reserve(log_cap);
        Self {
            stack: HotPageDetector::new(quota, max_nodes),
            hit_log: Vec::with_capacity(log_cap),
            logged,
            log_cap,
            budget,
            max_nodes: max_nodes.max(4),
            threshold: opts.reuse_threshold,
            page_cap: page_size / 4,
            record_bytes: 0,
            records: 0,
            pages: 0,
            counters: BufferCounters::default(),
        }
    }

    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Whether a record of this size is buffered (else it takes the page path).
    pub fn fits(key: &[u8], value: Option<&[u8]>, inline_max: usize) -> bool {
        key.len() <= MAX_PART
            && value.is_none_or(|v| v.len() <= MAX_PART && key.len() + v.len() <= inline_max)
    }

    /// Bytes held, from allocation sizes.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.stack.heap_bytes()
            + self.record_bytes
            + self.hit_log.capacity() * 8
            + table_bytes(self.logged.capacity(), 8)
    }

    pub fn over_budget(&self) -> bool {
        self.memory_bytes() > self.budget
    }

    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// Buffered records.
    pub fn records(&self) -> usize {
        self.records
    }

    /// Pages with buffered records.
    pub fn pages(&self) -> usize {
        self.pages
    }

    pub fn detector(&self) -> &HotPageDetector<RecordSet> {
        &self.stack
    }

    /// Whether `page` is of type L (low inter-reference recency).
    pub fn is_hot(&self, page: PageId) -> bool {
        self.stack.recency(page) == Some(Recency::L)
    }

    pub fn has(&self, page: PageId) -> bool {
        self.records > 0 && self.stack.payload(page).is_some_and(|s| !s.is_empty())
    }

    /// The buffered version of `key` in `page`'s records: `Some(None)` is
    /// a buffered delete, `None` means nothing is buffered for it.
    pub fn lookup(&self, page: PageId, key: &[u8]) -> Option<Option<&[u8]>> {
        if self.records == 0 {
            return None;
        }
        self.stack.payload(page)?.get(key)
    }

    /// `page`'s buffered records in key order (empty if none).
    pub fn sorted(&self, page: PageId) -> Vec<Record<'_>> {
        match self.stack.payload(page) {
            Some(set) if self.records > 0 => set.sorted(),
            _ => Vec::new(),
        }
    }

    /// Notes a write hit on resident `page`: logged once, applied to the
    /// stack at the next miss (or when the log is full).
    pub fn note_hit(&mut self, page: PageId) {
        if self.hit_log.len() >= self.log_cap {
            self.replay_hits();
        }
        if self.logged.insert(page) {
            self.hit_log.push(page);
            self.counters.logged_hits += 1;
        }
    }

    /// Applies the logged write hits to the stack, in the order they came.
    pub fn replay_hits(&mut self) {
        for &page in &self.hit_log {
            self.stack.access_hit(page);
        }
        self.hit_log.clear();
        self.logged.clear();
    }

    /// Whether buffering a write to `page` needs a stack node freed first.
    pub fn needs_room(&self, page: PageId) -> bool {
        self.stack.is_full() && self.stack.payload(page).is_none()
    }

    /// Offers a write to non-resident `page` (a put, or a delete when
    /// `value` is `None`): Algorithm 1 on the stack, then the record.
    pub fn offer(&mut self, page: PageId, key: &[u8], value: Option<&[u8]>) -> Offer {
        self.replay_hits();
        let reuse = self.stack.access(page);
        let Some(set) = self.stack.payload_mut(page) else {
            self.counters.refused += 1;
            return Offer::NoRoom;
        };
        let (before, was_empty) = (set.heap_bytes(), set.is_empty());
        let added = set.put(key, value);
        let after = set.heap_bytes();
        let full = after > self.page_cap;
        self.record_bytes = self.record_bytes + after - before;
        self.records += added;
        if was_empty {
            self.pages += 1;
        }
        self.counters.buffered += 1;
        if reuse >= self.threshold {
            self.counters.promoted_loads += 1;
            Offer::Load(LoadReason::Hot)
        } else if full {
            self.counters.full_loads += 1;
            Offer::Load(LoadReason::Full)
        } else {
            Offer::Kept
        }
    }

    /// Removes `page`'s records once they have been applied to the page.
    /// Its node stays in the stack with its reuse score reset: the score
    /// counts reuse since the page last left the buffer, so a page that
    /// was loaded and evicted accumulates records again before its next
    /// load instead of being loaded on every miss.
    pub fn take(&mut self, page: PageId) {
        self.stack.reset_reuse(page);
        let Some(set) = self.stack.payload_mut(page) else {
            return;
        };
        let set = std::mem::take(set);
        if set.is_empty() {
            return;
        }
        self.record_bytes -= set.heap_bytes();
        self.records -= set.len();
        self.pages -= 1;
        self.counters.applied_records += set.len() as u64;
    }

    /// Drops cold record-less H nodes from the stack; with `make_room`,
    /// frees a sixteenth of the stack's slots even inside the locality.
    pub fn prune(&mut self, make_room: bool) {
        let target = if make_room {
            self.max_nodes - (self.max_nodes / 16).max(1)
        } else {
            self.max_nodes
        };
        self.stack.prune(&|set| !set.is_empty(), target, 512);
    }

    /// The coldest pages holding records, up to about `bytes` of records,
    /// in page-id order (the batch applied under memory pressure).
    pub fn coldest_batch(&mut self, bytes: usize) -> Vec<PageId> {
        let mut out = Vec::new();
        let mut got = 0usize;
        self.stack.coldest(&mut |p, set| {
            if !set.is_empty() {
                out.push(p);
                got += set.heap_bytes();
            }
            got < bytes
        });
        out.sort_unstable();
        self.counters.pressure_loads += out.len() as u64;
        out
    }

    /// Every buffered record, page by page (for carrying them over a
    /// checkpoint and for `verify`).
    pub fn for_each(&self, f: &mut dyn FnMut(PageId, Record<'_>)) {
        if self.records == 0 {
            return;
        }
        self.stack.for_each(&mut |page, set| {
            for r in set.sorted() {
                f(page, r);
            }
        });
    }

    /// Checks the stack's invariants and the byte accounting.
    pub fn check(&self) -> Result<(), String> {
        self.stack.check()?;
        let (mut bytes, mut records, mut pages) = (0, 0, 0);
        self.stack.for_each(&mut |_, set| {
            bytes += set.heap_bytes();
            records += set.len();
            pages += usize::from(!set.is_empty());
        });
        if (bytes, records, pages) != (self.record_bytes, self.records, self.pages) {
            return Err(format!(
                "record accounting {}/{}/{} differs from the sets' {bytes}/{records}/{pages}",
                self.record_bytes, self.records, self.pages
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buffer(frames: usize, threshold: u8) -> InsertBuffer {
        let opts = InsertBufferOptions::default().reuse_threshold(threshold);
        InsertBuffer::new(&opts, 1 << 20, frames, 4096)
    }

    #[test]
    fn a_page_reused_inside_the_locality_is_loaded_at_the_threshold() {
        let mut ib = buffer(10, 2);
        // Page 7 is among the first pages seen: L, inside the locality.
        assert_eq!(ib.offer(7, b"a", Some(b"1")), Offer::Kept);
        assert_eq!(ib.offer(7, b"b", Some(b"2")), Offer::Kept); // reuse 1
        assert_eq!(ib.offer(7, b"c", None), Offer::Load(LoadReason::Hot)); // reuse 2
        assert_eq!(ib.sorted(7).len(), 3);
        ib.take(7);
        assert!(ib.is_empty() && !ib.has(7));
        ib.check().unwrap();
    }

    #[test]
    fn lookups_see_the_newest_buffered_version() {
        let mut ib = buffer(10, 2);
        ib.offer(3, b"k", Some(b"old"));
        ib.offer(3, b"k", Some(b"new"));
        assert_eq!(ib.lookup(3, b"k"), Some(Some(&b"new"[..])));
        ib.offer(3, b"k", None);
        assert_eq!(ib.lookup(3, b"k"), Some(None));
        assert_eq!(ib.lookup(4, b"k"), None);
        assert_eq!(ib.records(), 1);
        ib.check().unwrap();
    }

    #[test]
    fn records_past_a_quarter_page_force_a_load() {
        let mut ib = buffer(1, 200);
        let mut reason = Offer::Kept;
        for i in 0..200u32 {
            reason = ib.offer(9, &i.to_be_bytes(), Some(&[0; 8]));
            if reason != Offer::Kept {
                break;
            }
        }
        assert_eq!(reason, Offer::Load(LoadReason::Full));
    }

    #[test]
    fn logged_hits_reach_the_stack_on_the_next_miss() {
        let mut ib = buffer(10, 2);
        ib.note_hit(5);
        ib.note_hit(5);
        assert_eq!(ib.counters.logged_hits, 1);
        assert!(
            ib.detector().recency(5).is_none(),
            "a hit alone does not touch the stack"
        );
        ib.offer(6, b"x", Some(b"y"));
        assert!(ib.detector().recency(5).is_some());
    }

    #[test]
    fn the_coldest_batch_comes_in_page_order_and_memory_is_counted() {
        let mut ib = buffer(4, 100);
        let empty = ib.memory_bytes();
        for p in [50u64, 40, 30, 20, 10] {
            ib.offer(p, b"key", Some(b"value"));
        }
        assert!(ib.memory_bytes() > empty);
        // The three oldest pages are 50, 40, 30.
        let batch = ib.coldest_batch(3 * 12);
        assert!(batch.windows(2).all(|w| w[0] < w[1]));
        assert!(batch.contains(&50) && !batch.contains(&10));
        for p in batch {
            ib.take(p);
        }
        ib.prune(false);
        ib.check().unwrap();
    }
}
