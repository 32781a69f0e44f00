//! The Z+-tree: inner nodes and leaf metadata in memory, leaf pages on
//! zones, written only as appends.
//!
//! The inner level is an ordered map from each leaf's low key to its
//! metadata (`BTreeMap`, an in-memory B-tree, standing in for the paper's
//! olc-btree; its memory is reported apart from the buffers' budget, as the
//! paper keeps inner nodes outside its 400 MB). A leaf's metadata holds its
//! global page id (a page offset on the zoned device; `NO_PAGE` for an
//! empty first leaf), at most one adaptive delta buffer, and, in the
//! BD-tree variant, its delta chain.
//!
//! Writes never touch a page in place. ZKV absorbs a run of pairs into the
//! leaf's ADB, or merges ADB, run and page into new pages handed to a
//! ZFlusher (several pages when the result overflows: a split, whose new
//! leaves enter the map). The baselines keep leaf images in an LRU pool and
//! write a dirty image to a new page when it is evicted. A leaf left empty
//! leaves the map (its left neighbour takes its range), so a lookup never
//! sees an empty leaf but the first. In ZKV a merge that leaves a page
//! under a quarter full joins the leaf with a neighbour when the two fit
//! in three quarters of a page (the baselines, as in the paper, never
//! join leaves): a leaf's page is its unit of zone space and of work for
//! scans and value-log moves, so after deletes the leaf count follows the
//! data down. A merge that overflows its page shares with a neighbour
//! that has room (a B*-tree's redistribution) when the two then fit in the
//! pages the overflow alone would have split into: the same pages are
//! written as by the split, no leaf is added, and after random inserts the
//! leaves are fuller than a split's halves leave them.
//!
//! Invariants: the map's first key is empty; every live leaf's page, ADB
//! and delta keys lie in `[low, next low)`; a zone's valid count equals the
//! pages leaves point into it.

use std::collections::{BTreeMap, VecDeque};
use std::ops::{Bound, ControlFlow};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ferrite_core::{Error, Result};
use ferrite_io::AlignedBuf;
use parking_lot::Mutex;

use crate::adb::{Adb, AdbClass, AdbPool, MAX_PAIRS};
use crate::lru_pool::LruPool;
use crate::merged_filter::{after_start, before_end};
use crate::options::{Variant, ZkvOptions};
use crate::page::{self, cell_bytes, LeafPage};
use crate::page_io::PageIo;
use crate::pair::{merge_over, Bytes, Pair, Val};
use crate::vlog::Vlog;

pub const NO_PAGE: u64 = u64::MAX;
/// A page's fill the tree has not seen yet.
const UNKNOWN_BYTES: u16 = u16::MAX;

/// Turns a loaded `(key, value)` into what a leaf stores (large values go
/// to the value log).
pub type ValueMapper<'a> = dyn FnMut(&[u8], &[u8]) -> Result<Val> + 'a;

/// What a write path needs besides the tree.
pub struct Ctx<'a> {
    pub io: &'a PageIo,
    pub lru: &'a Mutex<LruPool>,
    pub vlog: &'a Mutex<Vlog>,
    pub opts: &'a ZkvOptions,
}

#[derive(Debug)]
pub struct Leaf {
    pub low: Bytes,
    pub page: AtomicU64,
    /// Cell bytes of the page as this tree last wrote it
    /// ([`UNKNOWN_BYTES`] for a page it did not write, as after a restore).
    /// 16 bits hold any page's (at most 32 KiB) and keep `Leaf` as small as
    /// it was without it: every leaf of the tree has one, in memory.
    pub page_bytes: u16,
    pub adb: Option<Adb>,
    /// Changes whenever the ADB changes class or is merged.
    pub gen: u32,
    pub delta: Vec<Pair>,
    pub live: bool,
}

impl Leaf {
    fn new(low: Bytes, page: u64) -> Self {
        Self {
            low,
            page: AtomicU64::new(page),
            page_bytes: if page == NO_PAGE { 0 } else { UNKNOWN_BYTES },
            adb: None,
            gen: 0,
            delta: Vec::new(),
            live: true,
        }
    }
}

/// Write-path counters.
#[derive(Debug, Default, Clone)]
pub struct TreeCounters {
    /// Leaf pages written (ZKV at merge, baselines at write-back).
    pub leaf_writes: u64,
    /// Buffered pairs that reached pages.
    pub pairs_to_pages: u64,
    pub adb_absorbs: u64,
    pub direct_merges: u64,
    pub pressure_merges: u64,
    pub splits: u64,
    /// Leaves that left the map: emptied, or joined into a neighbour.
    pub removed_leaves: u64,
    /// Leaves that joined a neighbour (ZKV, after deletes).
    pub joined_leaves: u64,
    /// Overflows shared with a neighbour instead of adding a leaf (ZKV).
    pub shared_leaves: u64,
    pub consolidations: u64,
    pub migrated_pages: u64,
    pub batches: u64,
    pub batch_pairs: u64,
    pub traversals: u64,
}

pub struct Tree {
    map: BTreeMap<Bytes, u32>,
    leaves: Vec<Leaf>,
    free: Vec<u32>,
    pub pool: AdbPool,
    pub delta_bytes: usize,
    delta_budget: usize,
    delta_fifo: VecDeque<u32>,
    pub c: TreeCounters,
    baseline: bool,
}

/// `bytes` as a leaf's `page_bytes`.
fn fill_hint(bytes: usize) -> u16 {
    u16::try_from(bytes).map_or(UNKNOWN_BYTES, |b| b.min(UNKNOWN_BYTES - 1))
}

/// Cell bytes of `pairs` in a page.
fn cells(pairs: &[Pair]) -> usize {
    pairs
        .iter()
        .map(|p| cell_bytes(p.key().len(), &p.val))
        .sum()
}

/// The join policy: a leaf whose page would be under a quarter full takes
/// in a neighbour holding `theirs` bytes when the two fill at most three
/// quarters of a page's `usable` bytes. Both bounds keep a join and a
/// split apart: a split leaves each half about half full, so neither
/// half joins again at once, and a joined page has a quarter of its room
/// left for inserts before it splits.
fn joins(ours: usize, theirs: usize, usable: usize) -> bool {
    ours < usable / 4 && ours + theirs <= usable * 3 / 4
}

/// Share of the pages a shared overflow fills at most: the room left
/// keeps the next overflow of either leaf some inserts away.
const SHARE_FILL: (usize, usize) = (7, 8);

/// The sharing policy: a leaf holding `ours` bytes, more than one page's
/// `usable`, takes in a neighbour holding `theirs` when the two fit in
/// the pages `ours` alone splits into, each filled to at most
/// [`SHARE_FILL`].
fn shares(ours: usize, theirs: usize, usable: usize) -> bool {
    let pages = ours.div_ceil(usable.max(1));
    pages >= 2 && (ours + theirs) * SHARE_FILL.1 <= pages * usable * SHARE_FILL.0
}

fn newest_last_dedup(mut v: Vec<Pair>, dead: &mut Vec<Val>) -> Vec<Pair> {
    v.reverse();
    v.sort_by(|a, b| a.key().cmp(b.key())); // stable: newest first per key
    let mut out: Vec<Pair> = Vec::with_capacity(v.len());
    for p in v {
        if out.last().is_some_and(|q| q.key() == p.key()) {
            dead.push(p.val);
        } else {
            out.push(p);
        }
    }
    out
}

impl Tree {
    pub fn new(opts: &ZkvOptions, adb_threshold: usize, delta_budget: usize) -> Self {
        let mut t = Self {
            map: BTreeMap::new(),
            leaves: Vec::new(),
            free: Vec::new(),
            pool: AdbPool::new(opts.adb_instances, adb_threshold),
            delta_bytes: 0,
            delta_budget,
            delta_fifo: VecDeque::new(),
            c: TreeCounters::default(),
            baseline: opts.variant != Variant::Zkv,
        };
        t.add_leaf(Bytes::new(&[]), NO_PAGE);
        t
    }

    /// Rebuilds the leaf level from a MetaLog's list.
    pub fn restore(
        opts: &ZkvOptions,
        adb_threshold: usize,
        delta_budget: usize,
        leaves: &[(Vec<u8>, u64)],
        page_ok: impl Fn(u64) -> bool,
    ) -> Result<Self> {
        let bad = |r: String| Error::corruption("zkv MetaLog leaf list", r);
        let mut t = Self::new(opts, adb_threshold, delta_budget);
        t.map.clear();
        t.leaves.clear();
        let mut prev: Option<&[u8]> = None;
        for (i, (low, page)) in leaves.iter().enumerate() {
            if i == 0 && !low.is_empty() {
                return Err(bad("the first leaf's low key is not empty".into()));
            }
            if prev.is_some_and(|p| p >= low.as_slice()) {
                return Err(bad(format!("leaf {i} is out of order")));
            }
            if *page != NO_PAGE && !page_ok(*page) {
                return Err(bad(format!(
                    "leaf {i} points at page {page} outside a leaf zone"
                )));
            }
            prev = Some(low);
            t.add_leaf(Bytes::new(low), *page);
        }
        if t.map.is_empty() {
            t.add_leaf(Bytes::new(&[]), NO_PAGE);
        }
        Ok(t)
    }

    fn add_leaf(&mut self, low: Bytes, page: u64) -> u32 {
        let leaf = Leaf::new(low.clone(), page);
        let id = match self.free.pop() {
            Some(i) => {
                self.leaves[i as usize] = leaf;
                i
            }
            None => {
                self.leaves.push(leaf);
                (self.leaves.len() - 1) as u32
            }
        };
        self.map.insert(low, id);
        id
    }

    pub fn leaf_count(&self) -> usize {
        self.map.len()
    }

    pub fn find(&self, key: &[u8]) -> u32 {
        self.map
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(key)))
            .next_back()
            .map_or(0, |(_, &l)| l)
    }

    /// The low key of the leaf after the one holding `key`.
    fn upper(&self, key: &[u8]) -> Option<&Bytes> {
        self.map
            .range::<[u8], _>((Bound::Excluded(key), Bound::Unbounded))
            .next()
            .map(|(k, _)| k)
    }

    fn leaf(&self, id: u32) -> &Leaf {
        &self.leaves[id as usize]
    }

    /// The leaf's current page image, if it has one.
    fn image(&self, id: u32, ctx: &Ctx<'_>) -> Result<Option<Arc<AlignedBuf>>> {
        if self.baseline {
            let pid = {
                let mut lru = ctx.lru.lock();
                if let Some(b) = lru.get(id) {
                    return Ok(Some(b));
                }
                self.leaf(id).page.load(Ordering::Acquire)
            };
            if pid == NO_PAGE {
                return Ok(None);
            }
            let b = ctx.io.read(pid)?;
            self.put_lru(id, b.clone(), false, ctx)?;
            Ok(Some(b))
        } else {
            let pid = self.leaf(id).page.load(Ordering::Acquire);
            if pid == NO_PAGE {
                return Ok(None);
            }
            ctx.io.read(pid).map(Some)
        }
    }

    fn put_lru(&self, id: u32, buf: Arc<AlignedBuf>, dirty: bool, ctx: &Ctx<'_>) -> Result<()> {
        let mut lru = ctx.lru.lock();
        for (l, img) in lru.insert(id, buf, dirty) {
            self.write_back(l, &img, ctx)?;
        }
        Ok(())
    }

    /// Writes a baseline leaf's dirty image to a new page (copy-on-write).
    fn write_back(&self, id: u32, img: &AlignedBuf, ctx: &Ctx<'_>) -> Result<()> {
        let pid = ctx
            .io
            .write(AlignedBuf::from_slice(&img[..ctx.io.page_size]))?;
        let old = self.leaf(id).page.swap(pid, Ordering::AcqRel);
        if old != NO_PAGE {
            ctx.io.release(old);
        }
        Ok(())
    }

    fn parse<'b>(&self, id: u32, img: &'b AlignedBuf, ctx: &Ctx<'_>) -> Result<LeafPage<'b>> {
        let pid = self.leaf(id).page.load(Ordering::Relaxed);
        LeafPage::parse(&img[..ctx.io.page_size], || format!("zkv leaf page {pid}"))
    }

    fn page_pairs(&self, id: u32, ctx: &Ctx<'_>) -> Result<Vec<Pair>> {
        let Some(img) = self.image(id, ctx)? else {
            return Ok(Vec::new());
        };
        let p = self.parse(id, &img, ctx)?;
        Ok((0..p.len())
            .map(|i| Pair::new(p.key(i), p.value(i).to_val()))
            .collect())
    }

    /// What the tree holds for `key` (`Some(Val::Del)` from a buffer).
    pub fn get(&self, key: &[u8], ctx: &Ctx<'_>) -> Result<Option<Val>> {
        let id = self.find(key);
        let l = self.leaf(id);
        if let Some(v) = l.adb.as_ref().and_then(|a| a.get(key)) {
            return Ok(Some(v));
        }
        if let Some(p) = l.delta.iter().rev().find(|p| p.key() == key) {
            return Ok(Some(p.val.clone()));
        }
        let Some(img) = self.image(id, ctx)? else {
            return Ok(None);
        };
        let p = self.parse(id, &img, ctx)?;
        Ok(p.get(key).map(|s| s.to_val()))
    }

    /// Where leaf `id` holds each `(key, loc)` of `items` (value-log
    /// locations of keys in the leaf's range): whether that is the value
    /// the tree answers with, and whether any of its buffers or its page
    /// holds it at all (a shadowed pair still counts as live until a merge
    /// drops it). Reads the leaf's page once, and only if a key needs it.
    pub fn holds_all(
        &self,
        id: u32,
        items: &[(&[u8], u64)],
        ctx: &Ctx<'_>,
    ) -> Result<Vec<(bool, bool)>> {
        let l = self.leaf(id);
        // Per item: its answer from the buffers alone, or `None` when it
        // also takes the page (the pair is in no buffer).
        let mut out: Vec<Option<(bool, bool)>> = Vec::with_capacity(items.len());
        for &(key, loc) in items {
            let target = Val::Vlog(loc);
            let adb = l.adb.as_ref().and_then(|a| a.get(key));
            let newest_delta = l
                .delta
                .iter()
                .rev()
                .find(|p| p.key() == key)
                .map(|p| &p.val);
            let in_delta = l.delta.iter().any(|p| p.key() == key && p.val == target);
            out.push(if adb.as_ref() == Some(&target) || in_delta {
                let visible = match &adb {
                    Some(v) => *v == target,
                    None => newest_delta == Some(&target),
                };
                Some((visible, true))
            } else {
                // On the page it is visible only if no buffer shadows it.
                (adb.is_some() || newest_delta.is_some()).then_some((false, false))
            });
        }
        let needs_page = items
            .iter()
            .zip(&out)
            .any(|(_, o)| o.is_none_or(|(_, anywhere)| !anywhere));
        let img = if needs_page {
            self.image(id, ctx)?
        } else {
            None
        };
        let page = match &img {
            Some(i) => Some(self.parse(id, i, ctx)?),
            None => None,
        };
        Ok(items
            .iter()
            .zip(out)
            .map(|(&(key, loc), o)| {
                let on_page = page
                    .as_ref()
                    .and_then(|p| p.get(key))
                    .is_some_and(|v| v.to_val() == Val::Vlog(loc));
                match o {
                    Some((visible, true)) => (visible, true),
                    Some((_, false)) => (false, on_page),
                    None => (on_page, on_page),
                }
            })
            .collect())
    }

    /// Merges the buffers of every leaf holding one of `keys` (sorted),
    /// with the pairs of `incoming` (sorted, unique, keys among `keys`,
    /// newer than everything the tree holds), into new pages, releasing
    /// every value they replace. Each leaf is found when its turn comes,
    /// as rewriting one may join or split leaves.
    pub fn rewrite_leaves(
        &mut self,
        keys: &[Vec<u8>],
        incoming: Vec<Pair>,
        ctx: &Ctx<'_>,
    ) -> Result<()> {
        let mut incoming = incoming.into_iter().peekable();
        let mut i = 0;
        while i < keys.len() {
            let id = self.find(&keys[i]);
            let upper = self.upper(&keys[i]).cloned();
            let below = |k: &[u8]| upper.as_ref().is_none_or(|u| k < u.as_slice());
            let j = i + keys[i..].partition_point(|k| below(k));
            let mut run = Vec::new();
            while let Some(p) = incoming.next_if(|p| below(p.key())) {
                run.push(p);
            }
            self.merge_leaf(id, run, ctx)?;
            i = j;
        }
        debug_assert!(incoming.next().is_none(), "a pair without its key");
        Ok(())
    }

    fn release_dead(dead: Vec<Val>, ctx: &Ctx<'_>) {
        if dead.iter().any(|v| matches!(v, Val::Vlog(_))) {
            let vlog = ctx.vlog.lock();
            for v in dead {
                if let Val::Vlog(loc) = v {
                    vlog.release(loc, &ctx.io.space);
                }
            }
        }
    }

    /// Inserts a sorted batch from the batch array, one run per leaf per
    /// traversal (or one pair per traversal without batch merging).
    pub fn insert_batch(&mut self, batch: &[Pair], ctx: &Ctx<'_>) -> Result<()> {
        self.c.batches += 1;
        self.c.batch_pairs += batch.len() as u64;
        let mut i = 0;
        while i < batch.len() {
            let key = batch[i].key();
            let leaf = self.find(key);
            let j = if ctx.opts.batch_merge {
                match self.upper(key) {
                    Some(u) => i + batch[i..].partition_point(|p| p.key() < u.as_slice()),
                    None => batch.len(),
                }
            } else {
                i + 1
            };
            self.c.traversals += 1;
            self.insert_run(leaf, batch[i..j].to_vec(), ctx)?;
            i = j;
        }
        self.relieve(ctx)
    }

    /// ZKV: a run of pairs for one leaf goes to its ADB, or with the ADB
    /// into new pages when they would pass 16 pairs.
    fn insert_run(&mut self, id: u32, run: Vec<Pair>, ctx: &Ctx<'_>) -> Result<()> {
        if !ctx.opts.adb || !run.iter().all(Adb::fits) {
            return self.merge_leaf(id, run, ctx);
        }
        let l = &mut self.leaves[id as usize];
        let after = l.adb.as_ref().map_or(run.len(), |a| a.count_after(&run));
        if after > MAX_PAIRS {
            self.c.direct_merges += 1;
            return self.merge_leaf(id, run, ctx);
        }
        let old_bytes = l.adb.as_ref().map_or(0, |a| a.mem_bytes());
        let old_class = l.adb.as_ref().map(|a| a.class());
        let adb = l.adb.get_or_insert_with(|| {
            Adb::new(AdbClass::for_count(run.len()).unwrap_or(AdbClass::B256))
        });
        let replaced = adb.absorb(run);
        let (new_bytes, class) = (adb.mem_bytes(), adb.class());
        if old_class != Some(class) {
            l.gen = l.gen.wrapping_add(1);
            self.pool.enlist(id, l.gen, class);
        }
        self.pool.bytes = self.pool.bytes + new_bytes - old_bytes;
        self.c.adb_absorbs += 1;
        Self::release_dead(replaced.into_iter().map(|p| p.val).collect(), ctx);
        Ok(())
    }

    /// A baseline write: the B+-tree modifies the pooled page; the BD-tree
    /// appends a delta unless the page is pooled or the chain is full.
    pub fn apply_baseline(&mut self, pair: Pair, ctx: &Ctx<'_>) -> Result<()> {
        let id = self.find(pair.key());
        self.c.traversals += 1;
        if ctx.opts.variant == Variant::BdTree && !ctx.lru.lock().contains(id) {
            let l = &mut self.leaves[id as usize];
            if l.delta.is_empty() {
                self.delta_fifo.push_back(id);
            }
            // Charged by capacity: what the chain's allocation really holds.
            let before = l.delta.capacity() * std::mem::size_of::<Pair>();
            let heap = pair.key.heap_bytes() + pair.val.heap_bytes();
            l.delta.push(pair);
            self.delta_bytes += l.delta.capacity() * std::mem::size_of::<Pair>() - before + heap;
            if l.delta.len() >= ctx.opts.bd_chain {
                self.c.consolidations += 1;
                self.merge_leaf(id, Vec::new(), ctx)?;
            }
            return self.relieve(ctx);
        }
        self.merge_leaf(id, vec![pair], ctx)
    }

    /// Takes a leaf's ADB and delta chain as one sorted, unique list.
    fn take_buffers(&mut self, id: u32, dead: &mut Vec<Val>) -> Vec<Pair> {
        let l = &mut self.leaves[id as usize];
        let mut out = Vec::new();
        if let Some(a) = l.adb.take() {
            self.pool.bytes = self.pool.bytes.saturating_sub(a.mem_bytes());
            l.gen = l.gen.wrapping_add(1);
            out = a.into_pairs();
            out.sort_by(|x, y| x.key().cmp(y.key()));
        }
        if !l.delta.is_empty() {
            let d = std::mem::take(&mut l.delta);
            let held = d.capacity() * std::mem::size_of::<Pair>()
                + d.iter()
                    .map(|p| p.key.heap_bytes() + p.val.heap_bytes())
                    .sum::<usize>();
            self.delta_bytes = self.delta_bytes.saturating_sub(held);
            let d = newest_last_dedup(d, dead);
            out = merge_over(out, d, dead);
        }
        out
    }

    /// Merges the leaf's buffers and `incoming` (sorted, unique, newest)
    /// with its page into new page images.
    fn merge_leaf(&mut self, id: u32, incoming: Vec<Pair>, ctx: &Ctx<'_>) -> Result<()> {
        let _work = ferrite_core::background::begin(ferrite_core::background::Work::Flush);
        let mut dead = Vec::new();
        let buffered = self.take_buffers(id, &mut dead);
        let newer = merge_over(buffered, incoming, &mut dead);
        self.c.pairs_to_pages += newer.len() as u64;
        let page = self.page_pairs(id, ctx)?;
        let merged = merge_over(page, newer, &mut dead);
        let live: Vec<Pair> = merged.into_iter().filter(|p| p.val != Val::Del).collect();
        Self::release_dead(dead, ctx);
        self.rebuild(id, live, ctx)
    }

    /// Replaces leaf `id`'s content with `entries` (sorted, live), split
    /// over as many pages as they need, or joined with a neighbour's when
    /// both are small (ZKV).
    fn rebuild(&mut self, id: u32, entries: Vec<Pair>, ctx: &Ctx<'_>) -> Result<()> {
        let ps = ctx.io.page_size;
        if entries.is_empty() {
            let l = self.leaf(id);
            if !l.low.as_slice().is_empty() && l.delta.is_empty() {
                self.remove_leaf(id, ctx);
            } else {
                self.drop_page(id, ctx);
            }
            return Ok(());
        }
        let (id, entries) = if self.baseline || !ctx.opts.leaf_joins {
            (id, entries)
        } else {
            self.join_neighbour(id, entries, ctx)?
        };
        let (id, entries) = if self.baseline || !ctx.opts.leaf_shares {
            (id, entries)
        } else {
            self.take_in_neighbour(id, entries, ctx, shares)?
        };
        let usable = ps - page::HEADER;
        let sizes: Vec<usize> = entries
            .iter()
            .map(|p| cell_bytes(p.key().len(), &p.val))
            .collect();
        let total: usize = sizes.iter().sum();
        let pages = total.div_ceil(usable).max(1);
        let target = total.div_ceil(pages);
        let mut chunks: Vec<std::ops::Range<usize>> = Vec::new();
        let (mut start, mut bytes) = (0usize, 0usize);
        for (i, &s) in sizes.iter().enumerate() {
            let full = bytes + s > usable;
            let enough = bytes >= target && chunks.len() + 1 < pages;
            if i > start && (full || enough) {
                chunks.push(start..i);
                start = i;
                bytes = 0;
            }
            bytes += s;
        }
        chunks.push(start..entries.len());
        self.c.splits += chunks.len() as u64 - 1;
        for (n, r) in chunks.into_iter().enumerate() {
            let mut buf = AlignedBuf::zeroed(ps);
            let refs: Vec<(&[u8], &Val)> = entries[r.clone()]
                .iter()
                .map(|p| (p.key(), &p.val))
                .collect();
            page::encode(&refs, &mut buf)?;
            let target_leaf = if n == 0 {
                id
            } else {
                self.add_leaf(entries[r.start].key.clone(), NO_PAGE)
            };
            self.leaves[target_leaf as usize].page_bytes = fill_hint(sizes[r].iter().sum());
            if self.baseline {
                self.put_lru(target_leaf, Arc::new(buf), true, ctx)?;
            } else {
                let pid = ctx.io.write(buf)?;
                self.c.leaf_writes += 1;
                let old = self.leaf(target_leaf).page.swap(pid, Ordering::AcqRel);
                if old != NO_PAGE {
                    ctx.io.release(old);
                }
            }
        }
        Ok(())
    }

    /// Leaves leaf `id` without a page (its pooled image too), releasing
    /// the one it had.
    fn drop_page(&mut self, id: u32, ctx: &Ctx<'_>) {
        let old = self.leaf(id).page.swap(NO_PAGE, Ordering::AcqRel);
        if old != NO_PAGE {
            ctx.io.release(old);
        }
        if self.baseline {
            ctx.lru.lock().remove(id);
        }
        self.leaves[id as usize].page_bytes = 0;
    }

    /// Drops leaf `id` (not the first) from the map: its left neighbour
    /// takes its range. Its buffers must be empty or taken.
    fn remove_leaf(&mut self, id: u32, ctx: &Ctx<'_>) {
        self.drop_page(id, ctx);
        let low = self.leaf(id).low.clone();
        self.map.remove(&low);
        self.leaves[id as usize].live = false;
        self.free.push(id);
        self.c.removed_leaves += 1;
    }

    /// ZKV: leaf `id`, about to hold `entries`, joins a neighbour (the
    /// right one first) when [`joins`] says the two belong in one page.
    /// Returns the leaf that is to hold the joined entries and those
    /// entries; the other leaf has left the map. Deletes would otherwise
    /// leave a tree of nearly empty pages, each a page of zone space, a
    /// page to read per scan step, and a page to rewrite whenever a
    /// value-log zone's records in it move.
    fn join_neighbour(
        &mut self,
        id: u32,
        entries: Vec<Pair>,
        ctx: &Ctx<'_>,
    ) -> Result<(u32, Vec<Pair>)> {
        self.take_in_neighbour(id, entries, ctx, joins)
    }

    /// Leaf `id`, about to hold `entries`, takes in a neighbour (the right
    /// one first) whose bytes `policy(ours, theirs, usable)` accepts:
    /// [`joins`] for a nearly empty leaf, [`shares`] for an overflowing
    /// one. Returns the leaf that is to hold both leaves' entries and
    /// those entries; the other leaf has left the map.
    fn take_in_neighbour(
        &mut self,
        id: u32,
        entries: Vec<Pair>,
        ctx: &Ctx<'_>,
        policy: fn(usize, usize, usize) -> bool,
    ) -> Result<(u32, Vec<Pair>)> {
        let usable = ctx.io.page_size - page::HEADER;
        let ours = cells(&entries);
        if !policy(ours, 0, usable) {
            return Ok((id, entries));
        }
        let low = self.leaf(id).low.clone();
        let right = self
            .map
            .range::<Bytes, _>((Bound::Excluded(&low), Bound::Unbounded))
            .next()
            .map(|(_, &r)| r);
        let left = if low.as_slice().is_empty() {
            None
        } else {
            self.map
                .range::<Bytes, _>((Bound::Unbounded, Bound::Excluded(&low)))
                .next_back()
                .map(|(_, &l)| l)
        };
        for (n, is_right) in [(right, true), (left, false)] {
            let Some(n) = n else { continue };
            let l = self.leaf(n);
            if !l.delta.is_empty() {
                continue;
            }
            // An upper bound: buffered pairs may replace page pairs.
            let buffered = l.adb.as_ref().map_or(0, |a| cells(&a.pairs()));
            if l.page_bytes != UNKNOWN_BYTES
                && !policy(ours, l.page_bytes as usize + buffered, usable)
            {
                continue;
            }
            let page = self.page_pairs(n, ctx)?;
            let on_page = cells(&page);
            self.leaves[n as usize].page_bytes = fill_hint(on_page);
            if !policy(ours, on_page + buffered, usable) {
                continue;
            }
            let mut dead = Vec::new();
            let newer = self.take_buffers(n, &mut dead);
            let theirs: Vec<Pair> = merge_over(page, newer, &mut dead)
                .into_iter()
                .filter(|p| p.val != Val::Del)
                .collect();
            Self::release_dead(dead, ctx);
            if ours > usable {
                self.c.shared_leaves += 1;
            } else {
                self.c.joined_leaves += 1;
            }
            return Ok(if is_right {
                self.remove_leaf(n, ctx);
                let mut all = entries;
                all.extend(theirs);
                (id, all)
            } else {
                self.remove_leaf(id, ctx);
                let mut all = theirs;
                all.extend(entries);
                (n, all)
            });
        }
        Ok((id, entries))
    }

    /// Whether the tree holds nothing (one empty leaf, no buffers).
    pub fn is_empty(&self) -> bool {
        self.map.len() == 1
            && self.leaves.iter().filter(|l| l.live).all(|l| {
                l.page.load(Ordering::Acquire) == NO_PAGE && l.adb.is_none() && l.delta.is_empty()
            })
    }

    /// Builds the leaf level of an empty tree from strictly ascending pairs,
    /// filling pages to `fill` of their usable bytes; returns pairs loaded.
    pub fn bulk_load(
        &mut self,
        sorted: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>,
        to_val: &mut ValueMapper<'_>,
        fill: f64,
        ctx: &Ctx<'_>,
    ) -> Result<u64> {
        if !self.is_empty() {
            return Err(Error::InvalidOptions(
                "bulk load needs an empty store".into(),
            ));
        }
        let ps = ctx.io.page_size;
        let limit = ((ps - page::HEADER) as f64 * fill.clamp(0.1, 1.0)) as usize;
        let mut chunk: Vec<Pair> = Vec::new();
        let mut bytes = 0usize;
        let mut n = 0u64;
        let mut first = true;
        let flush = |t: &mut Self, chunk: &mut Vec<Pair>, first: &mut bool| -> Result<()> {
            if chunk.is_empty() {
                return Ok(());
            }
            let mut buf = AlignedBuf::zeroed(ps);
            let refs: Vec<(&[u8], &Val)> = chunk.iter().map(|p| (p.key(), &p.val)).collect();
            page::encode(&refs, &mut buf)?;
            let pid = ctx.io.write(buf)?;
            let id = if *first {
                0
            } else {
                t.add_leaf(chunk[0].key.clone(), NO_PAGE)
            };
            *first = false;
            t.leaf(id).page.store(pid, Ordering::Release);
            t.leaves[id as usize].page_bytes = fill_hint(cells(chunk));
            t.c.leaf_writes += 1;
            chunk.clear();
            Ok(())
        };
        let mut prev: Option<Vec<u8>> = None;
        for (index, (k, v)) in sorted.enumerate() {
            ferrite_core::engine::check_key(&k)?;
            ferrite_core::engine::check_value(&v)?;
            if prev.as_ref().is_some_and(|p| *p >= k) {
                return Err(Error::NotAscending {
                    index: index as u64,
                });
            }
            let val = to_val(&k, &v)?;
            let size = cell_bytes(k.len(), &val);
            if !chunk.is_empty() && bytes + size > limit {
                flush(self, &mut chunk, &mut first)?;
                bytes = 0;
            }
            bytes += size;
            chunk.push(Pair::new(&k, val));
            prev = Some(k);
            n += 1;
        }
        flush(self, &mut chunk, &mut first)?;
        Ok(n)
    }

    /// Merges ADBs (ADB-256 first) while ADB memory is over its threshold,
    /// and consolidates delta chains while delta memory is over budget.
    pub fn relieve(&mut self, ctx: &Ctx<'_>) -> Result<()> {
        while self.pool.over() {
            let Some((id, gen)) = self.pool.next_victim() else {
                break;
            };
            let current = self
                .leaves
                .get(id as usize)
                .is_some_and(|l| l.live && l.gen == gen && l.adb.is_some());
            if current {
                self.c.pressure_merges += 1;
                self.merge_leaf(id, Vec::new(), ctx)?;
            }
        }
        while self.delta_bytes > self.delta_budget {
            let Some(id) = self.delta_fifo.pop_front() else {
                break;
            };
            if self
                .leaves
                .get(id as usize)
                .is_some_and(|l| l.live && !l.delta.is_empty())
            {
                self.c.consolidations += 1;
                self.merge_leaf(id, Vec::new(), ctx)?;
            }
        }
        Ok(())
    }

    /// Baselines: writes every dirty pooled image (a checkpoint).
    pub fn write_dirty(&self, ctx: &Ctx<'_>) -> Result<()> {
        if !self.baseline {
            return Ok(());
        }
        let mut lru = ctx.lru.lock();
        for (l, img) in lru.take_dirty() {
            self.write_back(l, &img, ctx)?;
        }
        Ok(())
    }

    /// Moves every live leaf page in `zone` to a flusher; returns pages moved.
    pub fn migrate_zone(&mut self, zone: u32, ctx: &Ctx<'_>) -> Result<u64> {
        let ppz = ctx.io.dev.geometry().zone_size / ctx.io.page_size as u64;
        let range = u64::from(zone) * ppz..(u64::from(zone) + 1) * ppz;
        let mut moved = 0;
        for l in self.leaves.iter().filter(|l| l.live) {
            let pid = l.page.load(Ordering::Acquire);
            if pid != NO_PAGE && range.contains(&pid) {
                let img = ctx.io.read(pid)?;
                let new = ctx
                    .io
                    .write(AlignedBuf::from_slice(&img[..ctx.io.page_size]))?;
                l.page.store(new, Ordering::Release);
                ctx.io.release(pid);
                moved += 1;
            }
        }
        self.c.migrated_pages += moved;
        Ok(moved)
    }

    /// Visits live pairs of the tree in `[start, end]` in key order.
    pub fn scan(
        &self,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        ctx: &Ctx<'_>,
        visit: &mut dyn FnMut(Pair) -> Result<ControlFlow<()>>,
    ) -> Result<()> {
        let first = match start {
            Bound::Included(k) | Bound::Excluded(k) => k,
            Bound::Unbounded => &[],
        };
        let lower = self
            .map
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(first)))
            .next_back()
            .map(|(k, _)| k.clone());
        let from = lower.map_or(Bound::Unbounded, Bound::Included);
        for (low, &id) in self.map.range::<Bytes, _>((from, Bound::Unbounded)) {
            if !low.as_slice().is_empty() && !before_end(low.as_slice(), end) {
                break;
            }
            for p in self.leaf_pairs(id, ctx)? {
                if p.val == Val::Del || !after_start(p.key(), start) {
                    continue;
                }
                if !before_end(p.key(), end) {
                    return Ok(());
                }
                if visit(p)?.is_break() {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// The leaf pairs of `start..end` (buffers over pages, deletes left
    /// out) in descending key order, leaf by leaf from the top down.
    pub fn scan_rev(
        &self,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        ctx: &Ctx<'_>,
        visit: &mut dyn FnMut(Pair) -> Result<ControlFlow<()>>,
    ) -> Result<()> {
        let upper = match end {
            Bound::Included(k) | Bound::Excluded(k) => Bound::Included(k),
            Bound::Unbounded => Bound::Unbounded,
        };
        for (low, &id) in self.map.range::<[u8], _>((Bound::Unbounded, upper)).rev() {
            let pairs = self.leaf_pairs(id, ctx)?;
            for p in pairs.into_iter().rev() {
                if p.val == Val::Del || !before_end(p.key(), end) {
                    continue;
                }
                if !after_start(p.key(), start) {
                    return Ok(());
                }
                if visit(p)?.is_break() {
                    return Ok(());
                }
            }
            // Leaves below hold keys below this one's low key.
            if !low.as_slice().is_empty() && !after_start(low.as_slice(), start) {
                return Ok(());
            }
        }
        Ok(())
    }

    /// A leaf's pairs, its buffers over its page, sorted.
    fn leaf_pairs(&self, id: u32, ctx: &Ctx<'_>) -> Result<Vec<Pair>> {
        let l = self.leaf(id);
        let mut dead = Vec::new();
        let mut overlay: Vec<Pair> = l.adb.as_ref().map_or_else(Vec::new, |a| a.pairs());
        overlay.sort_by(|x, y| x.key().cmp(y.key()));
        if !l.delta.is_empty() {
            let d = newest_last_dedup(l.delta.clone(), &mut dead);
            overlay = merge_over(overlay, d, &mut dead);
        }
        Ok(merge_over(self.page_pairs(id, ctx)?, overlay, &mut dead))
    }

    /// `(low key, page id)` of every leaf, in key order.
    pub fn leaf_list(&self) -> Vec<(Vec<u8>, u64)> {
        self.map
            .iter()
            .map(|(k, &id)| {
                (
                    k.as_slice().to_vec(),
                    self.leaf(id).page.load(Ordering::Acquire),
                )
            })
            .collect()
    }

    /// Merges the buffers (ADB, delta chain) of up to `most` leaves that
    /// hold any into their pages; returns how many leaves still hold
    /// buffered pairs. A clean close runs it so its snapshot carries no
    /// buffered pairs: in the MetaLog they cost two copies, in the leaves
    /// one.
    pub fn merge_buffers(&mut self, most: usize, ctx: &Ctx<'_>) -> Result<usize> {
        let buffered: Vec<u32> = self
            .map
            .values()
            .copied()
            .filter(|&id| {
                let l = self.leaf(id);
                l.adb.is_some() || !l.delta.is_empty()
            })
            .collect();
        let now = buffered.len().min(most);
        for &id in &buffered[..now] {
            // A merge may join a neighbour (which then left the map).
            let l = &self.leaves[id as usize];
            if l.live && (l.adb.is_some() || !l.delta.is_empty()) {
                self.merge_leaf(id, Vec::new(), ctx)?;
            }
        }
        Ok(buffered.len() - now)
    }

    /// Pairs held in ADBs and delta chains, sorted, newest per key.
    pub fn buffered(&self, dead: &mut Vec<Val>) -> Vec<Pair> {
        let mut out = Vec::new();
        for &id in self.map.values() {
            let l = self.leaf(id);
            let mut v: Vec<Pair> = l.adb.as_ref().map_or_else(Vec::new, |a| a.pairs());
            v.sort_by(|x, y| x.key().cmp(y.key()));
            if !l.delta.is_empty() {
                v = merge_over(v, newest_last_dedup(l.delta.clone(), dead), dead);
            }
            out.extend(v);
        }
        out
    }

    /// Bytes of leaf metadata and the inner map (outside the buffers' budget).
    pub fn index_bytes(&self) -> usize {
        self.leaves.len() * std::mem::size_of::<Leaf>()
            + self
                .map
                .keys()
                .map(|k| std::mem::size_of::<Bytes>() + 4 + 16 + k.heap_bytes())
                .sum::<usize>()
    }

    /// Pages per zone that leaves point to.
    pub fn pages_per_zone(&self, zones: usize, ppz: u64) -> Vec<u64> {
        let mut v = vec![0u64; zones];
        for l in self.leaves.iter().filter(|l| l.live) {
            let p = l.page.load(Ordering::Acquire);
            if p != NO_PAGE {
                if let Some(c) = v.get_mut((p / ppz) as usize) {
                    *c += 1;
                }
            }
        }
        v
    }

    /// Checks order, ranges and checksums of every leaf.
    pub fn verify(&self, ctx: &Ctx<'_>) -> Result<()> {
        let bad = |r: String| Error::corruption("zkv tree", r);
        let entries: Vec<(&Bytes, u32)> = self.map.iter().map(|(k, &v)| (k, v)).collect();
        if entries
            .first()
            .is_none_or(|(k, _)| !k.as_slice().is_empty())
        {
            return Err(bad("the first leaf's low key is not empty".into()));
        }
        for (i, &(low, id)) in entries.iter().enumerate() {
            let next = entries.get(i + 1).map(|(k, _)| k.as_slice());
            let l = self.leaf(id);
            if !l.live || l.low != *low {
                return Err(bad(format!("leaf {id} does not match its map entry")));
            }
            let in_range = |k: &[u8]| k >= low.as_slice() && next.is_none_or(|n| k < n);
            let mut keys: Vec<Vec<u8>> = Vec::new();
            if let Some(img) = self.image(id, ctx)? {
                let p = self.parse(id, &img, ctx)?;
                keys.extend((0..p.len()).map(|j| p.key(j).to_vec()));
            }
            if let Some(a) = &l.adb {
                if a.len() > MAX_PAIRS {
                    return Err(bad(format!("leaf {id}'s ADB holds {} pairs", a.len())));
                }
                keys.extend(a.pairs().iter().map(|p| p.key().to_vec()));
            }
            keys.extend(l.delta.iter().map(|p| p.key().to_vec()));
            if let Some(k) = keys.iter().find(|k| !in_range(k)) {
                return Err(bad(format!("leaf {id} holds key {k:?} outside its range")));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{joins, shares};

    #[test]
    fn an_overflow_shares_with_a_neighbour_when_both_fit_its_split() {
        let usable = 4080;
        // Not overflowing: nothing to share.
        assert!(!shares(usable, 0, usable));
        // Just over a page with a neighbour under three fifths: two pages
        // of at most seven eighths, as many as the split writes.
        assert!(shares(usable + 100, usable * 3 / 5, usable));
        // A neighbour too full: the split is the better layout.
        assert!(!shares(usable + 100, usable * 3 / 4, usable));
        // The bound is the pages the overflow alone needs.
        assert!(shares(usable * 2 + 1, usable / 2, usable));
        assert!(!shares(usable * 2 + 1, usable, usable));
    }

    #[test]
    fn a_small_leaf_joins_a_neighbour_it_fits_with() {
        let usable = 4080;
        assert!(joins(0, 0, usable));
        assert!(joins(1000, 2000, usable));
        assert!(joins(1019, usable * 3 / 4 - 1019, usable));
        // Not small enough itself.
        assert!(!joins(1020, 0, usable));
        // Together past three quarters.
        assert!(!joins(1000, 2061, usable));
    }

    #[test]
    fn the_halves_of_a_split_do_not_join() {
        let usable = 4080;
        // A split of an overfull page leaves each part about half a
        // page: neither is small.
        for half in [usable / 2, usable * 3 / 8] {
            assert!(!joins(half, half, usable));
        }
    }
}
