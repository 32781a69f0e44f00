//! An open table: its filter, index and properties in memory, its data
//! blocks read through the block cache (uncompressed there: a compressed
//! block is unpacked once, on its way in).
//!
//! Lookups never depend on the learned model being right: the model's
//! window is where the search starts, and a search that finds its answer at
//! a window edge goes on past it (galloping), so a wrong model costs reads,
//! never a wrong answer. For a key the table holds, the window is
//! guaranteed by construction (`ferrite_learned::bounded`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use ferrite_core::{Error, Result};
use ferrite_io::AlignedBuf;

use super::block::{Block, PAGE};
use super::bloom::Bloom;
use super::footer::{region_intact, Footer, Properties};
use super::index::{Index, LearnedIndex};
use super::packing::unpack;
use super::readahead::{Readahead, READAHEAD_PAGES};
use crate::block_cache::BlockCache;
use crate::table_space::{Extent, TableSpace};

/// Block number, block, slot.
pub type Position = (usize, Arc<Block>, usize);

/// What a table says about a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    Value(Vec<u8>),
    Deleted,
}

pub struct Table {
    pub id: u64,
    pub extent: Extent,
    pub footer: Footer,
    pub props: Properties,
    pub index: Index,
    bloom: Bloom,
    space: Arc<TableSpace>,
    cache: Arc<BlockCache>,
    /// Set once the durable manifest no longer lists the table: dropping it
    /// then frees its extent.
    obsolete: AtomicBool,
    /// Lookups that reached the index (SwiftKV's per-table search count).
    pub lookups: AtomicU64,
    pub created: Instant,
    /// Pages the data blocks span uncompressed: the pages the index counts
    /// in (the footer's data pages when the table is not compressed).
    logical_pages: u32,
}

/// Where a block is stored: the table pages to read and, in them, its
/// bytes (the whole pages, or a compressed frame within them).
#[derive(Clone, Copy)]
struct Stored {
    page: u32,
    pages: u32,
    skip: usize,
    len: usize,
    /// Pages the block spans uncompressed.
    logical: u32,
}

impl Table {
    /// Opens table `id` stored in `extent`.
    pub fn open(
        id: u64,
        extent: Extent,
        space: Arc<TableSpace>,
        cache: Arc<BlockCache>,
    ) -> Result<Self> {
        let loc = || format!("table {id} (pages {}+{})", extent.start, extent.pages);
        let bad = |why: &str| Error::corruption(loc(), why.to_string());
        if extent.pages == 0 {
            return Err(bad("empty extent"));
        }
        let last = space.read(extent.start + extent.pages - 1, 1)?;
        let footer = Footer::decode(&last).map_err(bad)?;
        let meta_pages = footer.meta_pages as u64;
        if meta_pages == 0 || footer.data_pages as u64 + meta_pages != extent.pages {
            return Err(bad("footer page counts disagree with the extent"));
        }
        let region = if meta_pages == 1 {
            last
        } else {
            space.read(extent.start + footer.data_pages as u64, meta_pages)?
        };
        if !region_intact(&region) {
            return Err(bad("meta region checksum mismatch"));
        }
        let (f, i, p) = (
            footer.filter_len as usize,
            footer.index_len as usize,
            footer.props_len as usize,
        );
        let part = |from: usize, len: usize| region.get(from..from.checked_add(len)?);
        let bloom = part(0, f)
            .and_then(Bloom::decode)
            .ok_or_else(|| bad("bad filter"))?;
        let props = part(f + i, p)
            .and_then(|b| Properties::decode(b, footer.data_pages))
            .ok_or_else(|| bad("bad properties"))?;
        let logical_pages = props
            .packing
            .as_ref()
            .map_or(footer.data_pages, |p| p.logical_pages);
        let index = part(f, i)
            .and_then(|b| Index::decode(footer.index_kind, b, logical_pages))
            .ok_or_else(|| bad("bad index block"))?;
        let blocks = index.block_count(logical_pages);
        if blocks == 0 || footer.entries == 0 {
            return Err(bad("table without blocks"));
        }
        if props
            .packing
            .as_ref()
            .is_some_and(|p| p.ends.len() != blocks)
        {
            return Err(bad("packing and index disagree on the blocks"));
        }
        let t = Self {
            id,
            extent,
            footer,
            props,
            index,
            bloom,
            space,
            cache,
            obsolete: AtomicBool::new(false),
            lookups: AtomicU64::new(0),
            created: Instant::now(),
            logical_pages,
        };
        t.cache.pin(t.memory_bytes());
        Ok(t)
    }

    pub fn smallest(&self) -> &[u8] {
        &self.props.smallest
    }

    pub fn largest(&self) -> &[u8] {
        &self.props.largest
    }

    /// The largest sequence number among the entries (0 in tables from
    /// before range deletes).
    pub fn max_seq(&self) -> u64 {
        self.props.max_seq
    }

    pub fn bytes(&self) -> u64 {
        self.extent.pages * PAGE as u64
    }

    pub fn overlaps(&self, lo: &[u8], hi: &[u8]) -> bool {
        self.smallest() <= hi && lo <= self.largest()
    }

    /// Marks the table as gone from the durable manifest.
    pub fn mark_obsolete(&self) {
        self.obsolete.store(true, Ordering::Release);
    }

    /// Bytes the filter, index and packing hold in memory.
    pub fn memory_bytes(&self) -> usize {
        self.bloom.memory_bytes()
            + self.index.memory_bytes()
            + self.props.packing.as_ref().map_or(0, |p| p.memory_bytes())
            + std::mem::size_of::<Self>()
    }

    pub fn block_count(&self) -> usize {
        self.index.block_count(self.logical_pages)
    }

    /// Whether the data blocks are compressed.
    pub fn compressed(&self) -> bool {
        self.props.packing.is_some()
    }

    /// Pages the data blocks take uncompressed.
    pub fn logical_pages(&self) -> u32 {
        self.logical_pages
    }

    /// Where block `b` is stored.
    fn stored(&self, b: usize) -> Result<Stored> {
        let corrupt = || Error::corruption(format!("table {}", self.id), format!("no block {b}"));
        let (page, pages) = self
            .index
            .block_pages(b, self.logical_pages)
            .filter(|&(_, n)| n > 0)
            .ok_or_else(corrupt)?;
        let Some(packing) = &self.props.packing else {
            return Ok(Stored {
                page,
                pages,
                skip: 0,
                len: pages as usize * PAGE,
                logical: pages,
            });
        };
        let (start, end) = packing.frame(b).ok_or_else(corrupt)?;
        let first = start / PAGE as u64;
        Ok(Stored {
            page: first as u32,
            pages: (end.div_ceil(PAGE as u64) - first) as u32,
            skip: (start - first * PAGE as u64) as usize,
            len: (end - start) as usize,
            logical: pages,
        })
    }

    /// Block `b` from its stored bytes `at` (the pages `s` names).
    fn decode(&self, b: usize, s: &Stored, at: &[u8]) -> Result<Block> {
        let bytes = at.get(s.skip..s.skip + s.len).ok_or_else(|| {
            Error::corruption(format!("table {}", self.id), format!("block {b} cut short"))
        })?;
        let buf = if self.props.packing.is_some() {
            unpack(bytes, s.logical).map_err(|why| {
                Error::corruption(
                    format!(
                        "table {} block {b} (page {})",
                        self.id,
                        self.extent.start + s.page as u64
                    ),
                    why.to_string(),
                )
            })?
        } else {
            AlignedBuf::from_slice(bytes)
        };
        self.parse_block(b, s.page, buf)
    }

    /// Puts every data block in the cache from `image`, the bytes the
    /// table was written from (so nothing is read back). A block that does
    /// not decode from its own image is a corrupt table.
    pub fn cache_from(&self, image: &[u8]) -> Result<()> {
        for b in 0..self.block_count() {
            let s = self.stored(b)?;
            let from = s.page as usize * PAGE;
            let at = image
                .get(from..from + s.pages as usize * PAGE)
                .ok_or_else(|| {
                    Error::corruption(
                        format!("table {}", self.id),
                        format!("block {b} past its image"),
                    )
                })?;
            let blk = Arc::new(self.decode(b, &s, at)?);
            self.cache.insert((self.id, b as u32), blk);
        }
        Ok(())
    }

    /// Block `b`, from the cache or the device.
    pub fn block(&self, b: usize) -> Result<Arc<Block>> {
        let key = (self.id, b as u32);
        if let Some(blk) = self.cache.get(key) {
            return Ok(blk);
        }
        let s = self.stored(b)?;
        let blk = if self.props.packing.is_some() {
            // A frame shares its pages with its neighbours: only the
            // device blocks that hold it are read.
            let at = (self.extent.start + s.page as u64) * PAGE as u64 + s.skip as u64;
            let (buf, skip) = self.space.read_span(at, s.len)?;
            self.decode(b, &Stored { skip, ..s }, &buf)?
        } else {
            // Uncompressed: the pages read are the block.
            let buf = self
                .space
                .read(self.extent.start + s.page as u64, s.pages as u64)?;
            self.parse_block(b, s.page, buf)?
        };
        let blk = Arc::new(blk);
        self.cache.insert(key, blk.clone());
        Ok(blk)
    }

    /// Block `b` for a pass that reads the table once, in order: from the
    /// cache if it holds the block, else from `ahead`, refilled with one
    /// long read when it does not cover the block. The block does not
    /// enter the cache (see [`super::readahead`]).
    pub fn block_ahead(&self, b: usize, ahead: &mut Readahead) -> Result<Arc<Block>> {
        Ok(self.block_in_run(b, ahead, READAHEAD_PAGES, false)?.0)
    }

    /// Block `b` from the cache, else from `ahead`, refilled when it does
    /// not cover the block with one read of `run` pages (cut at the data
    /// region's end, never shorter than the block); with `fill_cache`, a
    /// block read this way enters the cache as a lookup's would. Also
    /// says whether it read the device.
    pub fn block_in_run(
        &self,
        b: usize,
        ahead: &mut Readahead,
        run: u32,
        fill_cache: bool,
    ) -> Result<(Arc<Block>, bool)> {
        let key = (self.id, b as u32);
        if let Some(blk) = self.cache.get(key) {
            return Ok((blk, false));
        }
        let data_pages = self.footer.data_pages;
        let corrupt = || Error::corruption(format!("table {}", self.id), format!("no block {b}"));
        let s = self.stored(b)?;
        let read = ahead.get(s.page, s.pages).is_none();
        if read {
            let span = Readahead::span(s.page, s.pages, data_pages, run);
            let buf = self
                .space
                .read(self.extent.start + s.page as u64, span as u64)?;
            ahead.fill(s.page, buf);
        }
        let bytes = ahead.get(s.page, s.pages).ok_or_else(corrupt)?;
        let blk = Arc::new(self.decode(b, &s, bytes)?);
        if fill_cache {
            self.cache.insert(key, blk.clone());
        }
        Ok((blk, read))
    }

    /// The newest entry for `key` in this table, if any. `hash` is the
    /// key's [`Bloom::hash`].
    pub fn get(&self, key: &[u8], hash: u64) -> Result<Option<Found>> {
        if key < self.smallest() || key > self.largest() || !self.bloom.may_contain(hash) {
            return Ok(None);
        }
        self.lookups.fetch_add(1, Ordering::Relaxed);
        let Some((_, blk, slot)) = self.seek(key, false)? else {
            return Ok(None);
        };
        Ok(match blk.entry(slot) {
            Some((k, v)) if k == key => Some(match v {
                Some(v) => Found::Value(v.to_vec()),
                None => Found::Deleted,
            }),
            _ => None,
        })
    }

    /// The block and slot of the first entry `>= key`, or `None` past the
    /// end. With `exact_below` false the search trusts that nothing below
    /// the model's window is `>= key` (true for any key the table holds,
    /// which is all a point lookup needs).
    pub fn seek(&self, key: &[u8], exact_below: bool) -> Result<Option<Position>> {
        match &self.index {
            Index::Sparse(s) => {
                let b = s.separators.partition_point(|sep| sep.as_slice() < key);
                if b >= s.separators.len() {
                    return Ok(None);
                }
                let blk = self.block(b)?;
                let slot = blk.lower_bound_in(key, 0, blk.len());
                if slot < blk.len() {
                    return Ok(Some((b, blk, slot)));
                }
                // Separators are >= their block's last key, so this happens
                // only when `key` equals no entry and sits at the boundary.
                self.first_of_block(b + 1)
            }
            Index::Learned(l) => self.seek_learned(l, key, exact_below),
        }
    }

    /// The first entry of block `b`, or `None` past the last block.
    pub fn first_of_block(&self, b: usize) -> Result<Option<Position>> {
        if b >= self.block_count() {
            return Ok(None);
        }
        Ok(Some((b, self.block(b)?, 0)))
    }

    /// Reads the block holding the model's predicted position first and
    /// moves to a neighbouring block only when the key lies beyond this
    /// one's first or last entry, so a good prediction costs one block.
    fn seek_learned(
        &self,
        l: &LearnedIndex,
        key: &[u8],
        exact_below: bool,
    ) -> Result<Option<Position>> {
        let x = l.projection.project(key);
        let (w, p) = l.model.predict(x).unwrap_or((
            ferrite_learned::Window {
                lo: 0,
                hi: 0,
                at: 0,
            },
            0.0,
        ));
        let corrupt = || Error::corruption(format!("table {}", self.id), "prediction out of range");
        let (mut b, mut fetched) = self.window_start(l, key, &w, p)?.ok_or_else(corrupt)?;
        let blocks = self.block_count();
        if !l.whole_block {
            let blk = match fetched.take() {
                Some(blk) => blk,
                None => self.block(b)?,
            };
            // The common case for a key the table holds: the key's lower
            // bound lies strictly inside the window's part of the predicted
            // block, so the entries on both sides of it prove it without
            // looking at the block's ends. Slot 0 stays out of the window
            // so that a slot above `lo` always has a smaller entry below.
            let n = blk.len();
            let base = l.block_first(b);
            let lo = (w.lo.saturating_sub(base) as usize).clamp(1, n);
            let hi = ((w.hi + 1).saturating_sub(base) as usize).clamp(lo, n);
            let slot = blk.lower_bound_in(key, lo, hi);
            if slot > lo && slot < hi {
                return Ok(Some((b, blk, slot)));
            }
            fetched = Some(blk);
        }
        // -1: moving to lower blocks, 1: to higher ones.
        let mut dir = 0i8;
        let mut steps = 0usize;
        loop {
            if steps == WALK_BLOCKS {
                // Far from the prediction (a projection that cannot tell
                // these keys apart, as keys sharing long prefixes past the
                // table's own): gallop and binary-search the blocks instead
                // of walking them one by one.
                return self.seek_far(key, b, dir);
            }
            steps += 1;
            let blk = match fetched.take() {
                Some(blk) => blk,
                None => self.block(b)?,
            };
            let first = blk.entry(0).map(|(k, _)| k).ok_or_else(corrupt)?;
            if key <= first {
                // Nothing below can be >= key once an earlier entry is < key;
                // without `exact_below`, a window starting in this block
                // proves the answer (if the key is here at all) is no lower.
                let below_ruled_out = b == 0
                    || dir == 1
                    || key == first
                    || (!exact_below && l.block_first(b) <= w.lo);
                if below_ruled_out {
                    return Ok(Some((b, blk, 0)));
                }
                dir = -1;
                b -= 1;
                continue;
            }
            let last = blk
                .entry(blk.len() - 1)
                .map(|(k, _)| k)
                .ok_or_else(corrupt)?;
            if key > last {
                if dir == -1 {
                    return self.first_of_block(b + 1);
                }
                if b + 1 >= blocks {
                    return Ok(None);
                }
                dir = 1;
                b += 1;
                continue;
            }
            let n = blk.len();
            if l.whole_block {
                let slot = blk.lower_bound_in(key, 1, n);
                return Ok(Some((b, blk, slot)));
            }
            // In the predicted block, search the window's part of it first
            // (the answer is there for a key the table holds), widening to
            // the whole block only if the window's ends say otherwise.
            let base = l.block_first(b);
            let lo = (w.lo.saturating_sub(base) as usize).clamp(1, n);
            let hi = ((w.hi + 1).saturating_sub(base) as usize).clamp(lo, n);
            let mut slot = blk.lower_bound_in(key, lo, hi);
            if slot == lo && lo > 1 && blk.key(lo - 1) >= key {
                slot = blk.lower_bound_in(key, 1, lo);
            } else if slot == hi && hi < n {
                slot = blk.lower_bound_in(key, hi, n);
            }
            return Ok(Some((b, blk, slot)));
        }
    }

    /// The lower bound of `key` when a walk from the predicted block has
    /// gone `dir` (1: up, -1: down) to block `b` without finding it: the
    /// first block whose last key is `>= key`, found by galloping from `b`
    /// and binary search, `O(log distance)` block reads.
    fn seek_far(&self, key: &[u8], b: usize, dir: i8) -> Result<Option<Position>> {
        let blocks = self.block_count();
        let last_below = |t: usize| -> Result<bool> {
            let blk = self.block(t)?;
            Ok(blk.is_empty() || blk.key(blk.len() - 1) < key)
        };
        // Invariant of the search below: every block before `lo` ends
        // below `key`, and block `hi` (if inside the table) does not.
        let (mut lo, mut hi) = if dir >= 0 {
            let (mut lo, mut step) = (b, 1usize);
            let mut probe = b;
            loop {
                if probe >= blocks {
                    break (lo, blocks);
                }
                if !last_below(probe)? {
                    break (lo, probe);
                }
                lo = probe + 1;
                probe = b.saturating_add(step);
                step = step.saturating_mul(2);
            }
        } else {
            // Moving down, block `b + 1` starts at or above `key`.
            let (mut hi, mut step) = ((b + 1).min(blocks), 1usize);
            let mut probe = b;
            loop {
                if !last_below(probe)? {
                    hi = probe;
                    if probe == 0 {
                        break (0, 0);
                    }
                    probe = probe.saturating_sub(step);
                    step = step.saturating_mul(2);
                    continue;
                }
                break (probe + 1, hi);
            }
        };
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if last_below(mid)? {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        if lo >= blocks {
            return Ok(None);
        }
        let blk = self.block(lo)?;
        let slot = if blk.is_empty() || key <= blk.key(0) {
            0
        } else {
            blk.lower_bound_in(key, 1, blk.len())
        };
        Ok(Some((lo, blk, slot)))
    }

    /// Where a learned lookup starts: the block of the model's prediction
    /// `p` (window `w`), and that block if it had to be read. When the
    /// window spans several blocks, the index's thresholds name the one
    /// that holds the key, if the table holds it. Without a threshold and
    /// with the predicted block not cached, the window's blocks are read
    /// in one contiguous device read and the search starts in the one
    /// whose last key is `>= key` (the only one that can hold it), so a
    /// prediction that lands beside the key's block costs a longer read,
    /// never a second one. Only that block enters the cache, as a sparse
    /// lookup's would.
    fn window_start(
        &self,
        l: &LearnedIndex,
        key: &[u8],
        w: &ferrite_learned::Window,
        p: f64,
    ) -> Result<Option<(usize, Option<Arc<Block>>)>> {
        let Some((lo, hi, at)) = l.window_blocks(w, self.footer.entries) else {
            return Ok(None);
        };
        if lo == hi {
            return Ok(Some((at, None)));
        }
        if let Some(b) = l.thresholds.as_ref().and_then(|t| t.block(l, p, lo, hi)) {
            return Ok(Some((b, None)));
        }
        if hi - lo >= WINDOW_READ_BLOCKS {
            return Ok(Some((at, None)));
        }
        if let Some(blk) = self.cache.get((self.id, at as u32)) {
            return Ok(Some((at, Some(blk))));
        }
        let (Ok(first), Ok(last)) = (self.stored(lo), self.stored(hi)) else {
            return Ok(Some((at, None)));
        };
        let Some(pages) = (last.page + last.pages).checked_sub(first.page) else {
            return Ok(Some((at, None)));
        };
        let buf = self
            .space
            .read(self.extent.start + first.page as u64, pages as u64)?;
        let mut chosen = None;
        for b in lo..=hi {
            let Ok(s) = self.stored(b) else {
                break;
            };
            let from = s.page.checked_sub(first.page).ok_or_else(|| {
                Error::corruption(format!("table {}", self.id), "block map out of order")
            })? as usize
                * PAGE;
            let bytes = buf
                .get(from..)
                .ok_or_else(|| Error::corruption(format!("table {}", self.id), "block map"))?;
            let blk = Arc::new(self.decode(b, &s, bytes)?);
            let holds = !blk.is_empty() && blk.key(blk.len() - 1) >= key;
            chosen = Some((b, blk));
            if holds {
                break;
            }
        }
        let Some((b, blk)) = chosen else {
            return Ok(Some((at, None)));
        };
        self.cache.insert((self.id, b as u32), blk.clone());
        Ok(Some((b, Some(blk))))
    }

    fn parse_block(&self, b: usize, page: u32, buf: AlignedBuf) -> Result<Block> {
        Block::parse(buf, &|| {
            format!(
                "table {} block {b} (page {})",
                self.id,
                self.extent.start + page as u64
            )
        })
    }
}

/// Most blocks a learned lookup reads at once for one window (a window is
/// capped at half a block's entries, so it rarely spans more than two).
const WINDOW_READ_BLOCKS: usize = 4;

/// Blocks a learned lookup walks one by one from the predicted block
/// before it gallops instead (`seek_far`).
const WALK_BLOCKS: usize = 3;

impl Drop for Table {
    fn drop(&mut self) {
        self.cache.unpin(self.memory_bytes());
        if self.obsolete.load(Ordering::Acquire) {
            self.cache.forget_table(self.id);
            self.space.release(self.extent);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::IndexKind;
    use crate::table::packing::Compression;
    use crate::table::TableBuilder;
    use ferrite_io::{BlockDevice, MemDevice};
    use ferrite_learned::FitKind;
    use proptest::prelude::*;

    /// A table of `keys`; with `reused`, from a builder that built
    /// another table before (of other keys, prefix and entry size), as a
    /// compaction's builder does.
    fn build(
        keys: &[Vec<u8>],
        kind: IndexKind,
        value_len: usize,
        reused: bool,
        compression: Compression,
    ) -> Table {
        let space = Arc::new(TableSpace::new(Arc::new(MemDevice::new())));
        let cache = Arc::new(BlockCache::new(1 << 20));
        let mut b = TableBuilder::new(kind, 10, 2)
            .smaller_index(false)
            .compression(compression);
        if reused {
            for i in 0..700u32 {
                b.add(format!("~~~~~~~~{i:06}").as_bytes(), Some(&[9; 40]));
            }
            assert!(b.finish().is_some());
        }
        for (i, k) in keys.iter().enumerate() {
            let v = vec![i as u8; value_len + i % 3 * (value_len / 2)];
            b.add(k, if i % 5 == 4 { None } else { Some(&v) });
        }
        let built = b.finish().unwrap();
        let extent = space.allocate(built.pages());
        space.write(extent, &built.bytes).unwrap();
        Table::open(1, extent, space, cache).unwrap()
    }

    fn position(t: &Table, key: &[u8], exact_below: bool) -> Option<Vec<u8>> {
        t.seek(key, exact_below)
            .unwrap()
            .and_then(|(_, b, s)| b.entry(s).map(|(k, _)| k.to_vec()))
    }

    /// Keys drawn so that many share their first 8 bytes (a common prefix
    /// and short suffixes), next to ones that do not.
    fn keys() -> impl Strategy<Value = Vec<Vec<u8>>> {
        proptest::collection::btree_set(
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 1..12),
                (0u32..500, proptest::collection::vec(any::<u8>(), 0..3)).prop_map(|(n, s)| {
                    let mut k = format!("prefix--{n:05}").into_bytes();
                    k.extend(s);
                    k
                }),
                (0u64..1_000_000).prop_map(|n| (n * 7919).to_be_bytes().to_vec()),
            ],
            1..2000,
        )
        .prop_map(|s| s.into_iter().collect())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        #[test]
        fn learned_lookups_return_what_binary_search_returns(
            keys in keys(),
            probes in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..14), 0..200),
            value_len in prop_oneof![Just(0usize), Just(8), Just(100), Just(3000)],
            reused in any::<bool>(),
            compression in prop_oneof![Just(Compression::None), Just(Compression::Lz4), Just(Compression::Zstd(1))],
        ) {
            let sparse = build(&keys, IndexKind::Sparse, value_len, reused, compression);
            for kind in [
                IndexKind::LEARNED,
                IndexKind::Learned { fit: FitKind::Piecewise, eps: 1.0 },
                IndexKind::Learned { fit: FitKind::Linear, eps: 0.0 },
                IndexKind::BOURBON,
            ] {
                let learned = build(&keys, kind, value_len, reused, compression);
                for k in keys.iter().chain(&probes) {
                    let want = keys.iter().find(|x| *x >= k).cloned();
                    prop_assert_eq!(position(&sparse, k, true), want.clone());
                    prop_assert_eq!(position(&learned, k, true), want.clone());
                    let h = Bloom::hash(k);
                    prop_assert_eq!(learned.get(k, h).unwrap(), sparse.get(k, h).unwrap());
                    if keys.contains(k) {
                        prop_assert_eq!(position(&learned, k, false), Some(k.clone()));
                    }
                }
            }
        }
    }

    /// A learned table of `keys`, each with `value`, on a device of its
    /// own (returned, for its I/O counts) behind a cache of `cache` bytes.
    fn learned_table(keys: &[Vec<u8>], value: &[u8], cache: u64) -> (Table, Arc<MemDevice>) {
        learned_table_in(keys, value, cache, Compression::None)
    }

    fn learned_table_in(
        keys: &[Vec<u8>],
        value: &[u8],
        cache: u64,
        compression: Compression,
    ) -> (Table, Arc<MemDevice>) {
        let dev = Arc::new(MemDevice::new());
        let space = Arc::new(TableSpace::new(dev.clone()));
        let mut b = TableBuilder::new(IndexKind::LEARNED, 10, 1)
            .smaller_index(false)
            .compression(compression);
        for k in keys {
            b.add(k, Some(value));
        }
        let built = b.finish().unwrap();
        let extent = space.allocate(built.pages());
        space.write(extent, &built.bytes).unwrap();
        let t = Table::open(1, extent, space, Arc::new(BlockCache::new(cache))).unwrap();
        (t, dev)
    }

    #[test]
    fn fixed_size_entries_need_no_block_map() {
        let keys: Vec<Vec<u8>> = (0..5000u64)
            .map(|i| (i * 977).to_be_bytes().to_vec())
            .collect();
        let (t, _) = learned_table(&keys, &[1; 8], 1 << 20);
        match &t.index {
            Index::Learned(l) => {
                assert!(matches!(l.map, crate::table::index::BlockMap::Fixed { .. }));
                assert_eq!(
                    l.model.segment_count(),
                    1,
                    "evenly spaced keys fit one line"
                );
            }
            Index::Sparse(_) => panic!("asked for a learned index"),
        }
        for k in &keys {
            assert_eq!(
                t.get(k, Bloom::hash(k)).unwrap(),
                Some(Found::Value(vec![1; 8]))
            );
        }
    }

    /// 20000 keys with irregular gaps, ascending.
    fn irregular_keys() -> Vec<Vec<u8>> {
        (0..20_000u64)
            .map(|i| {
                let x = (i ^ 0x5555).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                (x ^ (x >> 29)).to_be_bytes().to_vec()
            })
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect()
    }

    #[test]
    fn a_sequential_pass_reads_ahead_and_leaves_the_cache_alone() {
        for c in [Compression::None, Compression::Lz4] {
            sequential_pass(c);
        }
    }

    fn sequential_pass(c: Compression) {
        let keys = irregular_keys();
        // 100-byte values: a variable block map, blocks of several sizes.
        let (t, dev) = learned_table_in(&keys, &[5; 100], 1 << 30, c);
        assert_eq!(t.compressed(), c != Compression::None);
        let t = Arc::new(t);
        let blocks = t.block_count() as u64;
        t.block(blocks as usize / 2).unwrap();
        let cached = t.cache.bytes();
        let before = dev.io_stats().reads;
        let mut it = crate::table::TableIter::sequential(t.clone()).unwrap();
        let mut seen = Vec::new();
        while let Some((k, v)) = it.peek() {
            assert_eq!(v, Some(&[5u8; 100][..]));
            seen.push(k.to_vec());
            it.advance().unwrap();
        }
        assert_eq!(seen, keys);
        let reads = dev.io_stats().reads - before;
        let runs = t
            .footer
            .data_pages
            .div_ceil(super::super::readahead::READAHEAD_PAGES);
        assert!(
            blocks > 100 && reads <= runs as u64 + 1,
            "{reads} reads for {blocks} blocks"
        );
        // Only the block a lookup cached is in the cache, and it was used.
        assert_eq!(t.cache.counts().hits, 1);
        assert_eq!(t.cache.bytes(), cached);
    }

    #[test]
    fn a_long_scan_reads_in_growing_runs_and_fills_the_cache() {
        for c in [Compression::None, Compression::Lz4] {
            let keys = irregular_keys();
            let (t, dev) = learned_table_in(&keys, &[5; 100], 1 << 30, c);
            let t = Arc::new(t);
            let scan = || {
                let mut it = crate::table::TableIter::new(t.clone(), None).unwrap();
                let mut n = 0;
                while it.peek().is_some() {
                    n += 1;
                    it.advance().unwrap();
                }
                n
            };
            let before = dev.io_stats().reads;
            assert_eq!(scan(), keys.len());
            let reads = dev.io_stats().reads - before;
            let blocks = t.block_count() as u64;
            // Runs double to 64 pages: a few reads cover the table.
            let most = 8 + t.footer.data_pages as u64 / 64;
            assert!(
                blocks > 100 && reads <= most,
                "{c}: {reads} reads for {blocks} blocks"
            );
            let before = dev.io_stats().reads;
            assert_eq!(scan(), keys.len());
            assert_eq!(
                dev.io_stats().reads,
                before,
                "{c}: the second scan hits the cache"
            );
        }
    }

    #[test]
    fn keys_the_projection_cannot_tell_apart_cost_a_logarithmic_search() {
        // Thousands of keys whose first eight bytes past the table's common
        // prefix are equal (as a collection's members are, behind a
        // version), beside keys that are not: the model sends every one of
        // them to the same place, and a lookup must not walk the blocks.
        let mut keys: Vec<Vec<u8>> = (0..20_000u32)
            .map(|i| {
                let mut k = vec![0x10, 0, 0, 0, 0, 0, 0, 7];
                k.extend_from_slice(&i.to_be_bytes());
                k
            })
            .collect();
        keys.extend((0..50u32).map(|i| format!("z{i:04}").into_bytes()));
        keys.sort();
        let (t, dev) = learned_table(&keys, &[3; 100], 0);
        let blocks = t.block_count() as u64;
        assert!(blocks > 200, "{blocks} blocks");
        for probe in (0..20_000u32).step_by(997) {
            let mut k = keys[probe as usize].clone();
            let before = dev.io_stats().reads;
            assert_eq!(position(&t, &k, true), Some(k.clone()));
            k.push(0);
            let want = keys.iter().find(|x| **x >= k).cloned();
            assert_eq!(position(&t, &k, true), want);
            let reads = dev.io_stats().reads - before;
            assert!(reads < 60, "two seeks read {reads} blocks of {blocks}");
        }
    }

    #[test]
    fn an_uncached_learned_lookup_reads_the_device_once() {
        for c in [Compression::None, Compression::Lz4, Compression::Zstd(3)] {
            uncached_lookups(c);
        }
    }

    fn uncached_lookups(c: Compression) {
        // Keys with irregular gaps, so the model's windows often span a
        // block boundary; a cache too small to keep any block.
        let keys = irregular_keys();
        let (t, dev) = learned_table_in(&keys, &[3; 40], 0, c);
        assert_eq!(t.compressed(), c != Compression::None);
        if c != Compression::None {
            // The index still counts uncompressed pages; the device holds
            // fewer.
            assert!(t.footer.data_pages * 2 < t.logical_pages());
        }
        let before = dev.io_stats().reads;
        for k in &keys {
            assert_eq!(
                t.get(k, Bloom::hash(k)).unwrap(),
                Some(Found::Value(vec![3; 40]))
            );
        }
        assert_eq!(dev.io_stats().reads - before, keys.len() as u64);
    }

    #[test]
    fn a_table_cached_from_its_image_is_read_without_the_device() {
        let keys = irregular_keys();
        for c in [Compression::None, Compression::Lz4, Compression::Zstd(3)] {
            let dev = Arc::new(MemDevice::new());
            let space = Arc::new(TableSpace::new(dev.clone()));
            let mut b = TableBuilder::new(IndexKind::LEARNED, 10, 1).compression(c);
            for (i, k) in keys.iter().enumerate() {
                b.add(k, Some(&[i as u8; 40]));
            }
            let built = b.finish().unwrap();
            let extent = space.allocate(built.pages());
            space.write(extent, &built.bytes).unwrap();
            let t = Table::open(1, extent, space, Arc::new(BlockCache::new(64 << 20))).unwrap();
            // An image cut short is an error.
            let short = &built.bytes[..built.bytes.len() / 2];
            assert!(t.cache_from(short).is_err(), "{c:?}");
            t.cache_from(&built.bytes).unwrap();
            let before = dev.io_stats().reads;
            for (i, k) in keys.iter().enumerate() {
                let want = Some(Found::Value(vec![i as u8; 40]));
                assert_eq!(t.get(k, Bloom::hash(k)).unwrap(), want, "{c:?}");
            }
            assert_eq!(
                dev.io_stats().reads,
                before,
                "{c:?}: every block was cached"
            );
            assert_eq!(t.cache.counts().misses, 0, "{c:?}");
        }
    }

    #[test]
    fn thresholds_let_an_uncached_learned_lookup_read_one_block() {
        // Irregular gaps and a window of up to a quarter of a block: many
        // windows reach across a boundary, and the thresholds must send
        // every lookup of a key the table holds to its own block.
        let keys = irregular_keys();
        let (t, dev) = learned_table(&keys, &[3; 100], 0);
        let Index::Learned(l) = &t.index else {
            panic!("asked for a learned index");
        };
        assert!(l.thresholds.is_some(), "windows span blocks here");
        let crossing = keys
            .iter()
            .filter(|k| {
                let (w, _) = l.model.predict(l.projection.project(k)).unwrap();
                let (lo, hi, _) = l.window_blocks(&w, keys.len() as u64).unwrap();
                lo < hi
            })
            .count();
        assert!(crossing > keys.len() / 10, "{crossing} windows cross");
        let before = dev.io_stats().read_bytes;
        for k in &keys {
            assert_eq!(
                t.get(k, Bloom::hash(k)).unwrap(),
                Some(Found::Value(vec![3; 100]))
            );
        }
        assert_eq!(
            dev.io_stats().read_bytes - before,
            keys.len() as u64 * PAGE as u64
        );
    }

    #[test]
    fn a_damaged_compressed_block_is_a_typed_error() {
        let keys = irregular_keys();
        let dev = Arc::new(MemDevice::new());
        let space = Arc::new(TableSpace::new(dev.clone()));
        let mut b = TableBuilder::new(IndexKind::LEARNED, 10, 1).compression(Compression::Lz4);
        for k in &keys {
            b.add(k, Some(&[1; 100]));
        }
        let mut built = b.finish().unwrap();
        // A byte inside the first frame's payload.
        built.bytes[40] ^= 0x10;
        let extent = space.allocate(built.pages());
        space.write(extent, &built.bytes).unwrap();
        let t = Table::open(1, extent, space, Arc::new(BlockCache::new(0))).unwrap();
        assert!(t.compressed());
        assert!(matches!(t.block(0), Err(Error::Corruption { .. })));
        let k = &keys[keys.len() - 1];
        assert_eq!(
            t.get(k, Bloom::hash(k)).unwrap(),
            Some(Found::Value(vec![1; 100])),
            "the other blocks still read"
        );
    }

    #[test]
    fn damaged_meta_is_a_typed_error() {
        let space = Arc::new(TableSpace::new(Arc::new(MemDevice::new())));
        let mut b = TableBuilder::new(IndexKind::LEARNED, 10, 1).smaller_index(false);
        b.add(b"k", Some(b"v"));
        let mut built = b.finish().unwrap();
        let n = built.bytes.len();
        built.bytes[n - 100] ^= 1;
        let extent = space.allocate(built.pages());
        space.write(extent, &built.bytes).unwrap();
        let r = Table::open(1, extent, space, Arc::new(BlockCache::new(1 << 20)));
        assert!(matches!(r, Err(Error::Corruption { .. })));
    }
}
