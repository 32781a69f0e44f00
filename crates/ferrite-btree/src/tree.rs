//! The B+tree over the buffer pool: lookups, inserts with splits, deletes,
//! ordered scans, and values stored out of line.
//!
//! The tree's shape (root, height, page allocation) is [`Shape`], guarded
//! by the store's lock: shared for long scans, exclusive for changes.
//! Lookups and short scans may instead read the root and height the tree
//! publishes and go by page latches, validated by [`Tree::version`]: every change spanning
//! pages (splits, root growth, freeing an overflow chain, relocations,
//! bulk loads) runs inside a `structure_version::Change`. Invariants: every leaf is at level 0 and every inner page at
//! its distance from the leaves; keys within a page are sorted; the keys of
//! the subtree under inner cell `i` lie in `[sep_i, sep_{i+1})`, and every
//! page's fence keys are exactly those bounds (a split hands the separator
//! it posts to both halves as their shared fence); leaves are
//! linked left to right. Deletes never merge pages (a lazy policy: an
//! emptied leaf stays linked and is refilled by later inserts), so the tree
//! never shrinks in height while it is written; an idle tree that lost
//! most of its pairs is rebuilt whole instead (see `compaction`). Values whose cell would exceed a quarter of the
//! page go to a chain of overflow pages; split points are chosen with the
//! new cell included, so any cell up to a third of a page always fits.
//! An overflowing leaf first shares with a sibling under the same parent
//! (`Tree::share`, where the options allow), and splits only when
//! neither has the room. A split is even by bytes, except an append to
//! the rightmost page of a level, which keeps nine tenths in the left
//! page ([`APPEND_SPLIT_SHARE`]):
//! ascending keys then fill pages instead of leaving each half empty.

use std::collections::HashSet;
use std::ops::{Bound, ControlFlow};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use ferrite_core::{Error, KeyRange, Result, ScanVisitor};

use crate::buffer_pool::{BufferPool, Found, Route};
use crate::insert_buffer::Record;
use crate::page::{self, PageId, StoredValue, KIND_INNER, KIND_LEAF};
use crate::shape::Shape;
use crate::structure_version::StructureVersion;

/// Where a descent ended: the leaf, the route to it from its parent (none
/// if the root is the leaf), and how many inner levels were found through
/// their routes. The routed hits are counted once per lookup, with the
/// leaf's, instead of once per level.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Descent {
    pub leaf: PageId,
    route: Option<Route>,
    routed: u64,
}

/// Pairs a lock-free scan collected, in key order, in one buffer.
#[derive(Debug, Default)]
pub(crate) struct Collected {
    bytes: Vec<u8>,
    /// Per pair: key offset, key length, value offset, value length.
    pairs: Vec<[u32; 4]>,
}

impl Collected {
    fn clear(&mut self) {
        self.bytes.clear();
        self.pairs.clear();
    }

    fn push(&mut self, k: &[u8], v: &[u8]) {
        let at = self.bytes.len() as u32;
        self.bytes.extend_from_slice(k);
        self.bytes.extend_from_slice(v);
        self.pairs
            .push([at, k.len() as u32, at + k.len() as u32, v.len() as u32]);
    }

    /// Gives pair `i` the value `v` (appended to the buffer).
    fn set_value(&mut self, i: usize, v: &[u8]) {
        let at = self.bytes.len() as u32;
        self.bytes.extend_from_slice(v);
        if let Some(p) = self.pairs.get_mut(i) {
            p[2] = at;
            p[3] = v.len() as u32;
        }
    }

    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    /// Pair `i`: key and value.
    pub fn get(&self, i: usize) -> Option<(&[u8], &[u8])> {
        let [k, kl, v, vl] = *self.pairs.get(i)?;
        let span = |at: u32, len: u32| self.bytes.get(at as usize..(at + len) as usize);
        Some((span(k, kl)?, span(v, vl)?))
    }
}

/// Told of every node a split or a root growth adds, so a companion that
/// predicts where nodes lie (SHORTCUT) knows when it has gone stale. The
/// tree calls it under its write lock, after the new node is linked in
/// its level.
pub trait SplitObserver: Send + Sync {
    /// `new` joined `level` right after `left` (for a new root: `level`
    /// is the root's, and `left` the old root).
    fn node_added(&self, level: u8, left: PageId, new: PageId);
}

/// A child page and the key bounds its subtree must respect.
type ChildBounds = (PageId, Option<Vec<u8>>, Option<Vec<u8>>);

pub struct Tree {
    pub pool: BufferPool,
    pub page_size: usize,
    /// Told of every split (SHORTCUT's stash, if it is on).
    observer: Option<Arc<dyn SplitObserver>>,
    /// Pages per level (0 = leaves) once counted, kept current by splits
    /// and root growth (deletes never merge), so statistics need not walk
    /// the tree again.
    pub level_counts: parking_lot::Mutex<Option<Vec<u64>>>,
    /// Changes lookups could see half-done (see `structure_version`).
    pub version: StructureVersion,
    /// The shape's root, height and page count as published for lookups
    /// that take no lock: written inside a change, read between two
    /// readings of `version`.
    published: Published,
    /// Overflow values are stored lz4-compressed where that makes their
    /// chain shorter (`overflow`).
    pub(crate) compress_values: bool,
    /// Whether an overflowing leaf first shares with a sibling.
    share_leaves: bool,
}

/// What [`Tree::verify`] found besides the invariants holding.
pub struct TreeReport {
    /// Per level, leaves first.
    pub levels: Vec<LevelFill>,
}

/// How full one level's pages are, in bytes of the usable page (cells,
/// slots and fence keys). Deletes are lazy (pages never merge), so no
/// lower bound is enforced; the figures show what deletes left behind.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LevelFill {
    pub pages: u64,
    pub used_bytes: u64,
    pub usable_bytes: u64,
    /// The emptiest page's fill, 0..=1.
    pub min_fill: f64,
    /// Pages under half full.
    pub under_half: u64,
    /// Pages with the plain slots of format 3 and older (they take key
    /// heads when a split rebuilds them).
    pub plain_slots: u64,
}

impl LevelFill {
    fn add(&mut self, used: usize, usable: usize) {
        let fill = used as f64 / usable as f64;
        self.min_fill = if self.pages == 0 {
            fill
        } else {
            self.min_fill.min(fill)
        };
        self.pages += 1;
        self.used_bytes += used as u64;
        self.usable_bytes += usable as u64;
        self.under_half += u64::from(2 * used < usable);
    }

    /// The level's mean fill, 0..=1.
    pub fn mean_fill(&self) -> f64 {
        self.used_bytes as f64 / self.usable_bytes.max(1) as f64
    }
}

/// What a verification walk accumulates.
struct Walk<'a> {
    seen: &'a mut HashSet<PageId>,
    leaves: &'a mut Vec<PageId>,
    levels: &'a mut Vec<LevelFill>,
}

#[derive(Default)]
struct Published {
    root: AtomicU64,
    height: AtomicU32,
    pages: AtomicU64,
}

/// The largest key a tree with `page_size` pages accepts: its cell (with an
/// overflow reference) must fit in a third of the usable page, so a page
/// holds any one cell beside two fence keys of that length, and a split
/// always finds a cut.
pub fn max_key_len(page_size: usize) -> usize {
    (page::usable(page_size) / 3 - 20).min(ferrite_core::MAX_KEY_LEN)
}

/// Shortest key `s` with `left < s <= right`, to keep separators small.
pub(crate) fn separator(left: &[u8], right: &[u8]) -> Vec<u8> {
    let common = left.iter().zip(right).take_while(|(a, b)| a == b).count();
    right
        .get(..(common + 1).min(right.len()))
        .unwrap_or(right)
        .to_vec()
}

/// The left page's share of the bytes when the rightmost page of a level
/// splits for a cell appended at its end: keys arriving in ascending
/// order (timestamps, counters) only ever fill the rightmost page, so an
/// even split would leave every page behind them half empty. The left
/// page keeps a tenth free, as PostgreSQL's fillfactor does, for values
/// that grow in place.
pub const APPEND_SPLIT_SHARE: f64 = 0.9;

/// The left page's share of the bytes a split of `cells` aims for: one
/// half, or [`APPEND_SPLIT_SHARE`] when the page is the rightmost of its
/// level (no high fence) and the new cell, at `pos`, is its last.
fn split_share(cells: usize, pos: usize, high: &Option<Vec<u8>>) -> f64 {
    if high.is_none() && pos + 1 >= cells {
        APPEND_SPLIT_SHARE
    } else {
        0.5
    }
}

/// Chooses where to cut `cells` so both halves fit in `cap` bytes, with
/// the left half's share of the bytes closest to `share` (a half for an
/// even split). `fences(m)` gives the bytes the left and right halves'
/// fence cells take when cut at `m`.
fn split_point(
    cells: &[Vec<u8>],
    cap: usize,
    fences: &dyn Fn(usize) -> (usize, usize),
    share: f64,
) -> Option<usize> {
    let sizes: Vec<usize> = cells.iter().map(|c| page::raw_cell_size(c)).collect();
    let total: usize = sizes.iter().sum();
    let mut best: Option<(usize, f64)> = None;
    let mut left = 0;
    for m in 1..cells.len() {
        left += sizes[m - 1];
        let right = total - left;
        if left.max(right) > cap {
            continue;
        }
        let (lf, rf) = fences(m);
        if left + lf <= cap && right + rf <= cap {
            let (l, r) = ((left + lf) as f64, (right + rf) as f64);
            let skew = (l - share * (l + r)).abs();
            if best.is_none_or(|(_, s)| skew < s) {
                best = Some((m, skew));
            }
        }
    }
    best.map(|(m, _)| m)
}

/// The key that goes up when `cells` are cut at `m`: for a leaf the
/// shortest separator between the two sides, for an inner page the first
/// right separator itself. It becomes both sides' shared fence.
fn up_key(cells: &[Vec<u8>], kind: u8, m: usize) -> Vec<u8> {
    let right_first = page::raw_cell_key(&cells[m], kind);
    if kind == KIND_LEAF {
        separator(page::raw_cell_key(&cells[m - 1], kind), right_first)
    } else {
        right_first.to_vec()
    }
}

/// Where to cut an overfull page's `cells` (of `kind`, within fences `low`
/// and `high`) so every piece fits `cap` bytes with its fence keys: one
/// cut, the left piece's share of the bytes as close to `share` as fits,
/// when one can; otherwise as few as greedy packing
/// finds, since between keys with long common prefixes the separators,
/// and so both halves' fences, can be nearly as long as the keys. `None`
/// only if a single cell cannot fit with its fences (the key limit rules
/// that out).
fn split_plan(
    cells: &[Vec<u8>],
    kind: u8,
    cap: usize,
    low: &Option<Vec<u8>>,
    high: &Option<Vec<u8>>,
    share: f64,
) -> Option<Vec<usize>> {
    let fence_bytes = |m: usize| {
        let up = up_key(cells, kind, m);
        (
            page::fence_cell_size(low.as_deref(), Some(&up)),
            page::fence_cell_size(Some(&up), high.as_deref()),
        )
    };
    if let Some(m) = split_point(cells, cap, &fence_bytes, share) {
        return Some(vec![m]);
    }
    let sizes: Vec<usize> = cells.iter().map(|c| page::raw_cell_size(c)).collect();
    let mut cuts = Vec::new();
    let mut start = 0;
    let mut lo = low.clone();
    while start < cells.len() {
        let mut used = 0;
        let mut best = None;
        for end in start + 1..=cells.len() {
            used += sizes[end - 1];
            if used > cap {
                break;
            }
            let hi = if end == cells.len() {
                high.clone()
            } else {
                Some(up_key(cells, kind, end))
            };
            if used + page::fence_cell_size(lo.as_deref(), hi.as_deref()) <= cap {
                best = Some((end, hi));
            }
        }
        let (end, hi) = best?;
        if end < cells.len() {
            cuts.push(end);
        }
        start = end;
        lo = hi;
    }
    Some(cuts)
}

impl Tree {
    pub fn new(
        pool: BufferPool,
        page_size: usize,
        observer: Option<Arc<dyn SplitObserver>>,
    ) -> Self {
        Self {
            pool,
            page_size,
            observer,
            level_counts: parking_lot::Mutex::new(None),
            version: StructureVersion::new(),
            published: Published::default(),
            compress_values: false,
            share_leaves: false,
        }
    }

    /// Relieves an overflowing leaf into a sibling before splitting it,
    /// where both then fit ([`Tree::share`]).
    pub fn with_leaf_sharing(mut self, on: bool) -> Self {
        self.share_leaves = on;
        self
    }

    /// Stores overflow values compressed where it shortens their chains.
    pub fn with_value_compression(mut self, on: bool) -> Self {
        self.compress_values = on;
        self
    }

    /// Makes `shape`'s root and height the ones lock-free lookups use.
    /// Callers hold the tree's write lock, inside a change when lookups
    /// may be running.
    pub(crate) fn publish(&self, shape: &Shape) {
        let p = &self.published;
        p.root.store(shape.root, Relaxed);
        p.height.store(shape.height, Relaxed);
        p.pages.store(shape.page_count, Relaxed);
    }

    /// The leaf for `key` by the published shape, latching one page at a
    /// time and no lock: valid only if `version` did not move meanwhile.
    pub(crate) fn leaf_for_published(&self, key: &[u8]) -> Result<PageId> {
        let d = self.route_published(key)?;
        self.pool.count_routed(d.routed);
        Ok(d.leaf)
    }

    /// [`Tree::leaf_for_published`] with the route to the leaf, for
    /// [`Tree::get_at`].
    pub(crate) fn route_published(&self, key: &[u8]) -> Result<Descent> {
        let p = &self.published;
        self.descend(p.root.load(Relaxed), p.height.load(Relaxed), key)
    }

    /// A page id for a new node: a freed one, else one from the smallest
    /// spare run (so re-layouts' leftovers are reused before the file
    /// grows), else a fresh one.
    fn alloc(&self, shape: &mut Shape) -> PageId {
        if let Some(id) = shape.free.pop().or_else(|| shape.clean.pop()) {
            return id;
        }
        let smallest = shape
            .spare
            .iter()
            .enumerate()
            .min_by_key(|(_, &(_, len))| len)
            .map(|(i, _)| i);
        if let Some(i) = smallest {
            let (first, len) = shape.spare[i];
            if len <= 1 {
                shape.spare.swap_remove(i);
            } else {
                shape.spare[i] = (first + 1, len - 1);
            }
            return first;
        }
        self.grow(shape, 1)
    }

    /// `n` fresh page ids at the end of the file. Every growth of the file
    /// goes through here (or [`Tree::note_growth`]), because lock-free
    /// scans bound a leaf chain by the published page count: a leaf whose
    /// id is past it would make a sound chain look like a cycle.
    pub(crate) fn grow(&self, shape: &mut Shape, n: u64) -> PageId {
        let first = shape.page_count;
        shape.page_count += n;
        self.note_growth(shape);
        first
    }

    /// Publishes `shape`'s page count after ids were taken from the end of
    /// the file outside the tree (the free-list chain a checkpoint writes).
    pub(crate) fn note_growth(&self, shape: &Shape) {
        self.published.pages.fetch_max(shape.page_count, Relaxed);
    }

    /// The largest key plus value kept inline in a leaf cell.
    pub(crate) fn inline_max(&self) -> usize {
        page::usable(self.page_size) / 4 - 8
    }

    /// Descends to the leaf for `key`, recording the pages passed.
    pub(crate) fn find_leaf(
        &self,
        shape: &Shape,
        key: &[u8],
        path: &mut Vec<PageId>,
    ) -> Result<PageId> {
        let mut id = shape.root;
        for _ in 0..shape.height {
            path.push(id);
            let p = self.pool.fetch(id)?;
            let b = p.read();
            expect_kind(id, &b, KIND_INNER)?;
            id = page::child_for(&b, key);
        }
        path.push(id);
        Ok(id)
    }

    /// Descends to the leaf for `key` without recording the path.
    pub(crate) fn leaf_for(&self, shape: &Shape, key: &[u8]) -> Result<PageId> {
        let d = self.descend(shape.root, shape.height, key)?;
        self.pool.count_routed(d.routed);
        Ok(d.leaf)
    }

    /// The leaf for `key` and the route to it. Each level below the root
    /// is read through its route, so a descent through resident pages
    /// takes the page table only where a route is unknown or stale.
    fn descend(&self, root: PageId, height: u32, key: &[u8]) -> Result<Descent> {
        let mut d = Descent {
            leaf: root,
            route: None,
            routed: 0,
        };
        for _ in 0..height {
            let id = d.leaf;
            let (b, found) = self.pool.read_child(id, d.route)?;
            d.routed += u64::from(found == Found::Routed);
            expect_kind(id, &b, KIND_INNER)?;
            let (position, child) = page::child_route(&b, key);
            d.route = Some(b.route(position));
            d.leaf = child;
        }
        Ok(d)
    }

    /// The pages from the root to `key`'s leaf by the published shape,
    /// every level found through the page table.
    #[cfg(feature = "bench-internals")]
    pub(crate) fn path_published(&self, key: &[u8], path: &mut Vec<PageId>) -> Result<()> {
        let leaf = self.walk_published(key, |id| path.push(id))?;
        path.push(leaf);
        Ok(())
    }

    /// `key`'s leaf by the published shape, every level found through the
    /// page table (the descent without routes).
    #[cfg(feature = "bench-internals")]
    pub(crate) fn leaf_by_table(&self, key: &[u8]) -> Result<PageId> {
        self.walk_published(key, |_| {})
    }

    /// Descends the published shape by the page table, showing `visit`
    /// each inner page passed; returns the leaf.
    #[cfg(feature = "bench-internals")]
    fn walk_published(&self, key: &[u8], mut visit: impl FnMut(PageId)) -> Result<PageId> {
        let p = &self.published;
        let mut id = p.root.load(Relaxed);
        for _ in 0..p.height.load(Relaxed) {
            visit(id);
            let b = self.pool.read(id)?;
            expect_kind(id, &b, KIND_INNER)?;
            id = page::child_for(&b, key);
        }
        Ok(id)
    }

    /// The value of `key` in `leaf`, the leaf it maps to, and whether the
    /// leaf was resident.
    pub(crate) fn get_in(&self, leaf: PageId, key: &[u8]) -> Result<(Option<Vec<u8>>, bool)> {
        self.get_at(
            Descent {
                leaf,
                route: None,
                routed: 0,
            },
            key,
        )
    }

    /// [`Tree::get_in`] for the leaf a descent reached; counts the
    /// descent's routed hits and the leaf's in one update.
    pub(crate) fn get_at(&self, d: Descent, key: &[u8]) -> Result<(Option<Vec<u8>>, bool)> {
        let (b, found) = self.pool.read_child(d.leaf, d.route)?;
        self.pool
            .count_routed(d.routed + u64::from(found == Found::Routed));
        let resident = found.resident();
        let v = match page::search(&b, key) {
            Ok(i) => match page::value(&b, i) {
                StoredValue::Inline(v) => Some(v.to_vec()),
                StoredValue::Overflow { first, len, .. } => {
                    drop(b);
                    Some(self.read_overflow(first, len)?)
                }
            },
            Err(_) => None,
        };
        Ok((v, resident))
    }

    /// Inserts or replaces `key`.
    pub fn put(&self, shape: &mut Shape, key: &[u8], value: &[u8]) -> Result<()> {
        let mut path = Vec::with_capacity(8);
        let leaf = self.find_leaf(shape, key, &mut path)?;
        self.put_at(shape, &path, leaf, key, value)
    }

    /// Inserts or replaces `key` in `leaf`, reached through `path` (as
    /// [`Tree::find_leaf`] found them, with no change to the tree since).
    pub(crate) fn put_at(
        &self,
        shape: &mut Shape,
        path: &[PageId],
        leaf: PageId,
        key: &[u8],
        value: &[u8],
    ) -> Result<()> {
        let stored = if key.len() + value.len() <= self.inline_max() {
            StoredValue::Inline(value)
        } else {
            self.write_overflow(shape, value)?
        };
        let mut old_overflow = None;
        let mut change = None;
        {
            let p = self.pool.fetch(leaf)?;
            let mut b = p.write();
            // The leaf's operations trust its layout: a damaged link to
            // another kind of page stops here.
            expect_kind(leaf, &b, KIND_LEAF)?;
            let found = page::search(&b, key);
            let freed = found.map_or(0, |i| page::slot_cell_size(&b, i));
            if page::free_space(&b) + freed < page::leaf_cell_size(&b, key.len(), &stored) {
                // A split: lookups must not see the leaf between the old
                // cell's removal and the new one's placement on either half.
                change = Some(self.version.change());
            }
            let pos = match found {
                Ok(i) => {
                    if let StoredValue::Overflow { first, len, run } = page::value(&b, i) {
                        old_overflow = Some((first, len, run));
                    }
                    page::remove(&mut b, i);
                    i
                }
                Err(i) => i,
            };
            if !page::leaf_insert(&mut b, pos, key, &stored) {
                drop(b);
                let _change = change.get_or_insert_with(|| self.version.change());
                let cell = page::encode_leaf_cell(key, &stored);
                if !(self.share_leaves && self.share(path, leaf, pos, &cell)?) {
                    self.split(shape, path, leaf, pos, cell)?;
                }
            }
        }
        drop(change);
        if let Some((first, len, run)) = old_overflow {
            self.free_overflow(shape, first, len, run)?;
        }
        Ok(())
    }

    /// Splits page `id` (the last of `path`) while inserting `cell` at
    /// slot `pos`, and posts the new separator to the parent.
    fn split(
        &self,
        shape: &mut Shape,
        path: &[PageId],
        id: PageId,
        pos: usize,
        cell: Vec<u8>,
    ) -> Result<()> {
        let _change = self.version.change();
        let p = self.pool.fetch(id)?;
        let mut lb = p.write();
        let kind = page::kind(&lb);
        let level = page::level(&lb);
        // Page headers name levels in one byte; no tree with pages of at
        // least two cells grows that tall, so a page at the top is damage.
        let parent_level = level
            .checked_add(1)
            .ok_or_else(|| Error::corruption(format!("page {id}"), "a page at level 255 split"))?;
        let (low, high) = page::fences_owned(&lb);
        let mut cells = page::raw_cells(&lb);
        let pos = pos.min(cells.len());
        cells.insert(pos, cell);
        let share = split_share(cells.len(), pos, &high);
        let cuts = split_plan(
            &cells,
            kind,
            page::usable(self.page_size),
            &low,
            &high,
            share,
        )
        .ok_or_else(|| {
            Error::corruption(format!("page {id}"), "no split of the page fits its pages")
        })?;
        if cuts.is_empty() {
            // The insert found no room, yet the cells fit one page: the
            // page's count of reclaimable bytes is short of its cells'.
            return Err(Error::corruption(
                format!("page {id}"),
                "the page's free space disagrees with its cells",
            ));
        }
        let seps: Vec<Vec<u8>> = cuts.iter().map(|&m| up_key(&cells, kind, m)).collect();
        // The new pages, left to right, written one at a time so a split
        // pins at most two frames; each takes the cells up to the next cut
        // and the fences either side of it.
        let ids: Vec<PageId> = cuts.iter().map(|_| self.alloc(shape)).collect();
        let old_link = page::link(&lb);
        for (i, &new_id) in ids.iter().enumerate() {
            let end = cuts.get(i + 1).copied().unwrap_or(cells.len());
            let piece = &cells[cuts[i]..end];
            let hi = seps.get(i + 1).or(high.as_ref()).map(Vec::as_slice);
            let r = self.pool.create(new_id)?;
            let mut rb = r.write();
            page::init(&mut rb, new_id, kind, level);
            if kind == KIND_LEAF {
                page::rebuild(&mut rb, piece, Some(&seps[i]), hi);
                page::set_link(&mut rb, ids.get(i + 1).copied().unwrap_or(old_link));
            } else {
                // The first cell moves up; its child becomes the page's
                // leftmost child.
                let (first, rest) = piece
                    .split_first()
                    .ok_or_else(|| Error::corruption(format!("page {id}"), "empty split piece"))?;
                page::set_link(&mut rb, page::raw_cell_child(first));
                page::rebuild(&mut rb, rest, Some(&seps[i]), hi);
            }
        }
        page::rebuild(&mut lb, &cells[..cuts[0]], low.as_deref(), Some(&seps[0]));
        if kind == KIND_LEAF {
            page::set_link(&mut lb, ids[0]);
        }
        drop(lb);
        drop(p);
        if let Some(o) = &self.observer {
            let mut left = id;
            for &new_id in &ids {
                o.node_added(level, left, new_id);
                left = new_id;
            }
        }
        if let Some(c) = self.level_counts.lock().as_mut() {
            if let Some(n) = c.get_mut(usize::from(level)) {
                *n += ids.len() as u64;
            }
        }
        for (i, (sep, new_id)) in seps.into_iter().zip(ids).enumerate() {
            // The first separator goes to the parent on `path`; a post may
            // split that parent (or grow the root), so later ones find
            // their parent again from the root.
            let ancestors = if i == 0 {
                path[..path.len().saturating_sub(1)].to_vec()
            } else {
                self.path_to_level(shape, &sep, u32::from(level) + 1)?
            };
            self.insert_into_parent(shape, &ancestors, sep, new_id, parent_level)?;
        }
        Ok(())
    }

    /// Relieves leaf `id` (the last of `path`), which `cell` at slot `pos`
    /// overflows, by sharing with a sibling under the same parent, the
    /// right one first, as a B*-tree redistributes: when the two leaves'
    /// cells, with `cell`, fit both pages with a sixteenth of each to
    /// spare, they are laid out evenly over the two and the parent's
    /// separator between them moves. No page is added, so random inserts
    /// leave leaves fuller than splits alone do. Returns false, having
    /// changed nothing, when neither sibling has the room.
    fn share(&self, path: &[PageId], id: PageId, pos: usize, cell: &[u8]) -> Result<bool> {
        let [.., parent, _] = path else {
            return Ok(false);
        };
        let pp = self.pool.fetch(*parent)?;
        let mut pb = pp.write();
        expect_kind(*parent, &pb, KIND_INNER)?;
        let (at, child) = page::child_route(&pb, page::raw_cell_key(cell, KIND_LEAF));
        if child != id {
            return Ok(false);
        }
        // Position `at` among the children: 0 the link, `i + 1` slot `i`'s
        // child; the separator left of position `p` is slot `p - 1`.
        if at < page::count(&pb) {
            let right = page::child(&pb, at);
            if self.rebalance(&mut pb, *parent, at, id, right, (true, pos, cell))? {
                return Ok(true);
            }
        }
        if at >= 1 {
            let left = if at == 1 {
                page::link(&pb)
            } else {
                page::child(&pb, at - 2)
            };
            return self.rebalance(&mut pb, *parent, at - 1, left, id, (false, pos, cell));
        }
        Ok(false)
    }

    /// Lays the cells of sibling leaves `left` and `right`, whose
    /// separator is slot `sep_slot` of their latched parent `pb`, and the
    /// new cell (`into_left`, slot, bytes) evenly over the two, if they
    /// fit with a sixteenth of each page to spare; moves the separator.
    /// Latches `left` before `right`: top down, then left to right, as
    /// every other path takes them.
    fn rebalance(
        &self,
        pb: &mut [u8],
        parent: PageId,
        sep_slot: usize,
        left: PageId,
        right: PageId,
        (into_left, pos, cell): (bool, usize, &[u8]),
    ) -> Result<bool> {
        let lp = self.pool.fetch(left)?;
        let mut lb = lp.write();
        expect_kind(left, &lb, KIND_LEAF)?;
        if page::link(&lb) != right {
            return Err(Error::corruption(
                format!("page {left}"),
                format!(
                    "its link {} is not its parent's next child {right}",
                    page::link(&lb)
                ),
            ));
        }
        let rp = self.pool.fetch(right)?;
        let mut rb = rp.write();
        expect_kind(right, &rb, KIND_LEAF)?;
        let (low, _) = page::fences_owned(&lb);
        let (_, high) = page::fences_owned(&rb);
        let mut lc = page::raw_cells(&lb);
        let mut rc = page::raw_cells(&rb);
        let into = if into_left { &mut lc } else { &mut rc };
        into.insert(pos.min(into.len()), cell.to_vec());
        let mut cells = lc;
        cells.append(&mut rc);
        // The room left is what the next inserts use before the pair
        // overflows again. With an eighth, a random load of YCSB's keys
        // left more pages than a byte-fair pool of 1.5× the data holds
        // (28 device bytes per lookup after it); with a sixteenth, they
        // fit (none). `docs/results/space.md`, "an overflowing leaf
        // shares".
        let cap = page::usable(self.page_size) * 15 / 16;
        let fences = |m: usize| {
            let up = up_key(&cells, KIND_LEAF, m);
            (
                page::fence_cell_size(low.as_deref(), Some(&up)),
                page::fence_cell_size(Some(&up), high.as_deref()),
            )
        };
        let Some(m) = split_point(&cells, cap, &fences, 0.5) else {
            return Ok(false);
        };
        let sep = up_key(&cells, KIND_LEAF, m);
        let old = page::raw_cell(pb, sep_slot);
        page::remove(pb, sep_slot);
        if !page::inner_insert(pb, sep_slot, &sep, right) {
            // The new separator is longer than the parent has room for.
            if !page::insert_raw(pb, sep_slot, &old) {
                return Err(Error::corruption(
                    format!("page {parent}"),
                    "a separator it held no longer fits",
                ));
            }
            return Ok(false);
        }
        page::rebuild(&mut lb, &cells[..m], low.as_deref(), Some(&sep));
        page::rebuild(&mut rb, &cells[m..], Some(&sep), high.as_deref());
        Ok(true)
    }

    /// The pages from the root down to the one at `level` whose range
    /// holds `key`.
    fn path_to_level(&self, shape: &Shape, key: &[u8], level: u32) -> Result<Vec<PageId>> {
        let mut path = Vec::new();
        let mut id = shape.root;
        for _ in level..shape.height {
            path.push(id);
            let b = self.pool.read(id)?;
            expect_kind(id, &b, KIND_INNER)?;
            id = page::child_for(&b, key);
        }
        if level <= shape.height {
            path.push(id);
        }
        Ok(path)
    }

    fn insert_into_parent(
        &self,
        shape: &mut Shape,
        ancestors: &[PageId],
        key: Vec<u8>,
        child: PageId,
        level: u8,
    ) -> Result<()> {
        let Some(&parent) = ancestors.last() else {
            // The root split: grow the tree by one level.
            let id = self.alloc(shape);
            let p = self.pool.create(id)?;
            let mut b = p.write();
            page::init(&mut b, id, KIND_INNER, level);
            page::set_link(&mut b, shape.root);
            if !page::inner_insert(&mut b, 0, &key, child) {
                return Err(Error::corruption(
                    format!("page {id}"),
                    "separator does not fit a new root",
                ));
            }
            if let Some(o) = &self.observer {
                o.node_added(level, shape.root, id);
            }
            if let Some(c) = self.level_counts.lock().as_mut() {
                c.push(1);
            }
            shape.root = id;
            shape.height += 1;
            self.publish(shape);
            return Ok(());
        };
        let p = self.pool.fetch(parent)?;
        let mut b = p.write();
        let pos = match page::search(&b, &key) {
            Ok(i) | Err(i) => i,
        };
        if page::inner_insert(&mut b, pos, &key, child) {
            return Ok(());
        }
        drop(b);
        drop(p);
        let cell = page::encode_inner_cell(&key, child);
        self.split(shape, ancestors, parent, pos, cell)
    }

    /// Moves the node at `level` (below the root) that `low`, its
    /// subtree's lower bound, leads to, and that is expected at page
    /// `old`, to the unused page id `new`: copies it, points its parent
    /// at `new` and, for a leaf, its left sibling `left` too (`None` only
    /// for the leftmost leaf, whose bound is empty). Returns false and
    /// changes nothing if the tree no longer matches those expectations.
    /// The caller frees `old` (see [`Tree::release_ids`]). Callers hold
    /// the tree's write lock.
    pub(crate) fn relocate(
        &self,
        shape: &mut Shape,
        level: u32,
        low: &[u8],
        old: PageId,
        new: PageId,
        left: Option<PageId>,
    ) -> Result<bool> {
        if level >= shape.height || old == new {
            return Ok(false);
        }
        let _change = self.version.change();
        let mut parent = shape.root;
        for _ in 0..shape.height - level - 1 {
            let b = self.pool.read(parent)?;
            if page::kind(&b) != KIND_INNER {
                return Err(Error::corruption(
                    format!("page {parent}"),
                    "expected an inner page",
                ));
            }
            parent = page::child_for(&b, low);
        }
        if page::child_for(&self.pool.read(parent)?, low) != old {
            return Ok(false);
        }
        // A leaf's left sibling: `left`, or a leaf a few links right of it
        // (splits since the caller listed the level put new leaves there).
        let mut pred = None;
        if level == 0 {
            match left {
                Some(l) => {
                    let mut p = l;
                    for _ in 0..8 {
                        let b = self.pool.read(p)?;
                        if page::kind(&b) != KIND_LEAF {
                            break;
                        }
                        let next = page::link(&b);
                        if next == old {
                            pred = Some(p);
                            break;
                        }
                        if next < 2 {
                            break;
                        }
                        p = next;
                    }
                    if pred.is_none() {
                        return Ok(false);
                    }
                }
                None if !low.is_empty() => return Ok(false),
                None => {}
            }
        }
        {
            let src = self.pool.fetch(old)?;
            let dst = self.pool.create(new)?;
            let s = src.read();
            let mut d = dst.write();
            d.copy_from_slice(&s);
            page::set_page_id(&mut d, new);
        }
        page::set_child_for(&mut self.pool.fetch(parent)?.write(), low, new);
        if let Some(p) = pred {
            page::set_link(&mut self.pool.fetch(p)?.write(), new);
        }
        self.pool.forget(old);
        Ok(true)
    }

    /// Takes `n` consecutive unused page ids for a re-layout: the smallest
    /// spare run that holds them, else fresh ids at the end of the file.
    pub(crate) fn reserve_run(&self, shape: &mut Shape, n: u64) -> PageId {
        let best = shape
            .spare
            .iter()
            .enumerate()
            .filter(|(_, &(_, len))| len >= n)
            .min_by_key(|(_, &(_, len))| len)
            .map(|(i, _)| i);
        if let Some(i) = best {
            let (first, len) = shape.spare.swap_remove(i);
            if len > n {
                shape.spare.push((first + n, len - n));
            }
            return first;
        }
        self.grow(shape, n)
    }

    /// Frees page ids a re-layout no longer uses: runs of at least
    /// `min_run` consecutive ids (merged with adjacent spare runs) stay
    /// whole for later re-layouts; the rest go to the free list.
    pub(crate) fn release_ids(&self, shape: &mut Shape, mut ids: Vec<PageId>, min_run: u64) {
        ids.sort_unstable();
        ids.dedup();
        let mut runs: Vec<(PageId, u64)> = Vec::new();
        for id in ids {
            match runs.last_mut() {
                Some((first, len)) if *first + *len == id => *len += 1,
                _ => runs.push((id, 1)),
            }
        }
        for (first, len) in runs {
            if len >= min_run {
                shape.spare.push((first, len));
            } else {
                shape.free.extend(first..first + len);
            }
        }
        // Merge adjacent spare runs.
        shape.spare.sort_unstable();
        let mut merged: Vec<(PageId, u64)> = Vec::with_capacity(shape.spare.len());
        for (first, len) in shape.spare.drain(..) {
            match merged.last_mut() {
                Some((f, l)) if *f + *l == first => *l += len,
                _ => merged.push((first, len)),
            }
        }
        shape.spare = merged;
    }

    /// Removes `key`; returns whether it was present.
    pub fn delete(&self, shape: &mut Shape, key: &[u8]) -> Result<bool> {
        let leaf = self.leaf_for(shape, key)?;
        let overflow = {
            let p = self.pool.fetch(leaf)?;
            let mut b = p.write();
            expect_kind(leaf, &b, KIND_LEAF)?;
            match page::search(&b, key) {
                Ok(i) => {
                    let of = match page::value(&b, i) {
                        StoredValue::Overflow { first, len, run } => Some((first, len, run)),
                        StoredValue::Inline(_) => None,
                    };
                    page::remove(&mut b, i);
                    Some(of)
                }
                Err(_) => None,
            }
        };
        match overflow {
            None => Ok(false),
            Some(of) => {
                if let Some((first, len, run)) = of {
                    self.free_overflow(shape, first, len, run)?;
                }
                Ok(true)
            }
        }
    }

    /// Collects the pairs of `range` in key order by the published shape,
    /// latching one leaf at a time and taking no lock, until the range
    /// ends (true) or at least `max_bytes` of pairs are in `out` at the end
    /// of a leaf (false; the scan goes on after `out`'s last key). Valid
    /// only if [`Tree::version`] did not move meanwhile.
    pub(crate) fn collect_published(
        &self,
        range: KeyRange<'_>,
        max_bytes: usize,
        out: &mut Collected,
    ) -> Result<bool> {
        out.clear();
        let start: &[u8] = match range.start {
            Bound::Included(s) | Bound::Excluded(s) => s,
            Bound::Unbounded => &[],
        };
        let mut id = self.leaf_for_published(start)?;
        let pages = self.published.pages.load(Relaxed);
        let mut long = Vec::new();
        for _ in 0..=pages {
            if id < 2 {
                return Ok(true);
            }
            let b = self.pool.read(id)?;
            let from = match page::search(&b, start) {
                Ok(i) | Err(i) => i,
            };
            let mut ended = false;
            for i in from..page::count(&b) {
                let k = page::key(&b, i);
                if !range.after_start(k) {
                    continue;
                }
                if !range.before_end(k) {
                    ended = true;
                    break;
                }
                match page::value(&b, i) {
                    StoredValue::Inline(v) => out.push(k, v),
                    StoredValue::Overflow { first, len, .. } => {
                        long.push((out.len(), first, len));
                        out.push(k, &[]);
                    }
                }
            }
            id = page::link(&b);
            drop(b);
            // Long values are read with no leaf latched, the leaf's chains
            // all in one round of reads.
            if long.len() > 1 {
                let chains: Vec<(PageId, u32)> = long.iter().map(|&(_, f, l)| (f, l)).collect();
                self.preload_overflow(&chains);
            }
            for (pair, first, len) in long.drain(..) {
                let v = self.read_overflow(first, len)?;
                out.set_value(pair, &v);
            }
            if ended {
                return Ok(true);
            }
            if out.bytes.len() >= max_bytes {
                return Ok(id < 2);
            }
        }
        Err(Error::corruption("leaf chain", "longer than the file"))
    }

    /// Visits the pairs of `range` in key order.
    pub fn scan(
        &self,
        shape: &Shape,
        range: KeyRange<'_>,
        visit: &mut ScanVisitor<'_>,
    ) -> Result<u64> {
        self.scan_with(shape, range, &|_| Vec::new(), visit)
    }

    /// Visits the pairs of `range` in key order, with `overlay(leaf)`
    /// (newer versions of keys of that leaf, sorted; `None` is a delete)
    /// taking precedence over the leaf's cells.
    pub(crate) fn scan_with<'o>(
        &self,
        shape: &Shape,
        range: KeyRange<'_>,
        overlay: &dyn Fn(PageId) -> Vec<Record<'o>>,
        visit: &mut ScanVisitor<'_>,
    ) -> Result<u64> {
        let start: &[u8] = match range.start {
            Bound::Included(s) | Bound::Excluded(s) => s,
            Bound::Unbounded => &[],
        };
        let mut id = self.leaf_for(shape, start)?;
        let mut bytes = 0u64;
        let mut hops = 0u64;
        while id >= 2 && hops <= shape.page_count {
            hops += 1;
            let b = self.pool.read(id)?;
            let from = match page::search(&b, start) {
                Ok(i) | Err(i) => i,
            };
            let extra = overlay(id);
            let mut e = extra.partition_point(|(k, _)| *k < start);
            let mut i = from;
            let n = page::count(&b);
            loop {
                // The next pair in key order from the page or the overlay;
                // on equal keys the overlay's version wins.
                let pk = (i < n).then(|| page::key(&b, i));
                let ek = extra.get(e).map(|(k, _)| *k);
                let (k, newer) = match (pk, ek) {
                    (None, None) => break,
                    (Some(p), Some(x)) if x <= p => {
                        if x == p {
                            i += 1;
                        }
                        e += 1;
                        (x, extra.get(e - 1).map(|(_, v)| *v))
                    }
                    (Some(p), _) => {
                        i += 1;
                        (p, None)
                    }
                    (None, Some(x)) => {
                        e += 1;
                        (x, extra.get(e - 1).map(|(_, v)| *v))
                    }
                };
                if !range.after_start(k) {
                    continue;
                }
                if !range.before_end(k) {
                    return Ok(bytes);
                }
                // The page's value is at the slot just passed.
                let Some(flow) =
                    self.visit_pair(&b, i.saturating_sub(1), k, newer, &mut bytes, visit)?
                else {
                    continue;
                };
                if flow == ControlFlow::Break(()) {
                    return Ok(bytes);
                }
            }
            id = page::link(&b);
        }
        Ok(bytes)
    }

    /// Visits key `k` of a scan with the overlay's version `newer` if it
    /// has one, else with slot `slot` of leaf `b`, and adds the pair's
    /// bytes; `None` for a key the overlay deletes (not visited).
    fn visit_pair(
        &self,
        b: &[u8],
        slot: usize,
        k: &[u8],
        newer: Option<Option<&[u8]>>,
        bytes: &mut u64,
        visit: &mut ScanVisitor<'_>,
    ) -> Result<Option<ControlFlow<()>>> {
        let flow = match newer {
            Some(None) => return Ok(None),
            Some(Some(v)) => {
                *bytes += (k.len() + v.len()) as u64;
                visit(k, v)
            }
            None => match page::value(b, slot) {
                StoredValue::Inline(v) => {
                    *bytes += (k.len() + v.len()) as u64;
                    visit(k, v)
                }
                StoredValue::Overflow { first, len, .. } => {
                    let v = self.read_overflow(first, len)?;
                    *bytes += (k.len() + v.len()) as u64;
                    visit(k, &v)
                }
            },
        };
        Ok(Some(flow))
    }

    /// The leaf holding the largest keys below `below` (below every key:
    /// `None`), by the tree's shape.
    fn leaf_before(&self, shape: &Shape, below: Option<&[u8]>) -> Result<PageId> {
        let mut id = shape.root;
        for _ in 0..shape.height {
            let b = self.pool.read(id)?;
            expect_kind(id, &b, KIND_INNER)?;
            id = match below {
                Some(k) => page::child_below(&b, k),
                None => page::last_child(&b),
            };
        }
        Ok(id)
    }

    /// Visits the pairs of `range` in descending key order, with
    /// `overlay` as in [`Tree::scan_with`]. From the leaf holding the
    /// range's end, each next leaf is found by a descent to the keys just
    /// below the current one's low fence (leaves link only rightward).
    pub(crate) fn scan_rev_with<'o>(
        &self,
        shape: &Shape,
        range: KeyRange<'_>,
        overlay: &dyn Fn(PageId) -> Vec<Record<'o>>,
        visit: &mut ScanVisitor<'_>,
    ) -> Result<u64> {
        let mut bytes = 0u64;
        let mut id = match range.end {
            Bound::Included(e) | Bound::Excluded(e) => self.leaf_for(shape, e)?,
            Bound::Unbounded => self.leaf_before(shape, None)?,
        };
        for _ in 0..=shape.page_count {
            let b = self.pool.read(id)?;
            expect_kind(id, &b, KIND_LEAF)?;
            let extra = overlay(id);
            let mut i = page::count(&b);
            let mut e = extra.len();
            loop {
                // The previous pair in key order from the page or the
                // overlay; on equal keys the overlay's version wins.
                let pk = i.checked_sub(1).map(|j| page::key(&b, j));
                let ek = e.checked_sub(1).and_then(|j| extra.get(j)).map(|(k, _)| *k);
                let (k, newer) = match (pk, ek) {
                    (None, None) => break,
                    (Some(p), Some(x)) if x >= p => {
                        if x == p {
                            i -= 1;
                        }
                        e -= 1;
                        (x, extra.get(e).map(|(_, v)| *v))
                    }
                    (Some(p), _) => {
                        i -= 1;
                        (p, None)
                    }
                    (None, Some(x)) => {
                        e -= 1;
                        (x, extra.get(e).map(|(_, v)| *v))
                    }
                };
                if !range.before_end(k) {
                    continue;
                }
                if !range.after_start(k) {
                    return Ok(bytes);
                }
                let Some(flow) = self.visit_pair(&b, i, k, newer, &mut bytes, visit)? else {
                    continue;
                };
                if flow == ControlFlow::Break(()) {
                    return Ok(bytes);
                }
            }
            let Some(low) = page::fences(&b).0.map(<[u8]>::to_vec) else {
                return Ok(bytes);
            };
            drop(b);
            // Every key left of this leaf is below its low fence.
            if !range.after_start(&low) {
                return Ok(bytes);
            }
            id = self.leaf_before(shape, Some(&low))?;
        }
        Err(Error::corruption(
            "leaf fences",
            "a reverse walk visits more leaves than the file holds",
        ))
    }

    /// Removes the keys of `start..end` that the leaf holding `start`
    /// holds, rebuilding it once without them (a leaf wholly inside the
    /// range is emptied in one step), and frees their overflow chains.
    /// Returns the pairs removed and where the range goes on (the leaf's
    /// high fence), if it does. The caller runs it inside a change, the
    /// leaf free of buffered records.
    pub fn delete_range_leaf(
        &self,
        shape: &mut Shape,
        start: &[u8],
        end: &[u8],
    ) -> Result<(u64, Option<Vec<u8>>)> {
        let id = self.leaf_for(shape, start)?;
        let (removed, chains, high) = {
            let p = self.pool.fetch(id)?;
            let mut b = p.write();
            expect_kind(id, &b, KIND_LEAF)?;
            let n = page::count(&b);
            let from = page::search(&b, start).unwrap_or_else(|i| i);
            let to = page::search(&b, end).unwrap_or_else(|i| i);
            let mut chains = Vec::new();
            if from < to {
                for i in from..to {
                    if let StoredValue::Overflow { first, len, run } = page::value(&b, i) {
                        chains.push((first, len, run));
                    }
                }
                let keep: Vec<Vec<u8>> = (0..from)
                    .chain(to..n)
                    .map(|i| page::raw_cell(&b, i))
                    .collect();
                let (low, high) = page::fences_owned(&b);
                page::rebuild(&mut b, &keep, low.as_deref(), high.as_deref());
            }
            (
                to.saturating_sub(from) as u64,
                chains,
                page::fences_owned(&b).1,
            )
        };
        for (first, len, run) in chains {
            self.free_overflow(shape, first, len, run)?;
        }
        // Leaves to the right hold keys at or above this one's high fence.
        Ok((removed, high.filter(|h| h.as_slice() < end)))
    }

    /// The leaves holding keys of `start..end`, left to right.
    pub(crate) fn leaves_in(
        &self,
        shape: &Shape,
        start: &[u8],
        end: &[u8],
        out: &mut Vec<PageId>,
    ) -> Result<()> {
        let mut id = self.leaf_for(shape, start)?;
        for _ in 0..=shape.page_count {
            out.push(id);
            let b = self.pool.read(id)?;
            match page::fences(&b).1 {
                Some(h) if h < end && page::link(&b) >= 2 => id = page::link(&b),
                _ => return Ok(()),
            }
        }
        Err(Error::corruption("leaf chain", "longer than the file"))
    }

    /// Pages per level, leaves first: counted once by reading the inner
    /// pages (outside the pool, so the count disturbs no cache), then kept
    /// current by splits.
    pub fn level_pages(&self, shape: &Shape) -> Result<Vec<u64>> {
        if let Some(c) = self.level_counts.lock().as_ref() {
            if c.len() == shape.height as usize + 1 {
                return Ok(c.clone());
            }
        }
        let counted = self.count_level_pages(shape)?;
        *self.level_counts.lock() = Some(counted.clone());
        Ok(counted)
    }

    fn count_level_pages(&self, shape: &Shape) -> Result<Vec<u64>> {
        let mut buf = ferrite_io::AlignedBuf::zeroed(self.page_size);
        let mut levels = vec![0u64; shape.height as usize + 1];
        let mut frontier = vec![shape.root];
        for depth in 0..shape.height as usize {
            if let Some(slot) = levels.get_mut(shape.height as usize - depth) {
                *slot = frontier.len() as u64;
            }
            let mut next = Vec::new();
            for id in frontier {
                self.pool.peek(id, &mut buf)?;
                let b = &buf[..];
                next.push(page::link(b));
                next.extend((0..page::count(b)).map(|i| page::child(b, i)));
            }
            frontier = next;
        }
        if let Some(slot) = levels.first_mut() {
            *slot = frontier.len() as u64;
        }
        Ok(levels)
    }

    /// Checks every structural invariant; returns the reachable pages and
    /// how full each level is.
    pub fn verify(&self, shape: &Shape) -> Result<TreeReport> {
        let mut seen = HashSet::new();
        let mut leaves = Vec::new();
        let mut levels = vec![LevelFill::default(); shape.height as usize + 1];
        let mut walk = Walk {
            seen: &mut seen,
            leaves: &mut leaves,
            levels: &mut levels,
        };
        self.verify_node(shape.root, shape.height, None, None, &mut walk)?;
        // Leaves must be linked left to right in key order.
        for w in leaves.windows(2) {
            let p = self.pool.fetch(w[0])?;
            let link = page::link(&p.read());
            if link != w[1] {
                return Err(Error::corruption(
                    format!("leaf {}", w[0]),
                    format!("links to {link}, next leaf is {}", w[1]),
                ));
            }
        }
        if let Some(&last) = leaves.last() {
            let p = self.pool.fetch(last)?;
            if page::link(&p.read()) != 0 {
                return Err(Error::corruption(
                    format!("leaf {last}"),
                    "last leaf has a right sibling",
                ));
            }
        }
        // Ids the tree does not use must really be unused: a tree page on
        // the free list would be handed out again and overwritten.
        let spare = shape
            .spare
            .iter()
            .flat_map(|&(f, n)| f..f.saturating_add(n));
        let mut unused = HashSet::new();
        for id in shape.free.iter().chain(&shape.clean).copied().chain(spare) {
            if seen.contains(&id) || !unused.insert(id) || !(2..shape.page_count).contains(&id) {
                return Err(Error::corruption(
                    format!("page {id}"),
                    "listed as unused, but in the tree, listed twice or outside the file",
                ));
            }
        }
        Ok(TreeReport { levels })
    }

    fn verify_node(
        &self,
        id: PageId,
        level: u32,
        low: Option<&[u8]>,
        high: Option<&[u8]>,
        walk: &mut Walk<'_>,
    ) -> Result<()> {
        let loc = || format!("page {id}");
        if !(2..u64::MAX / 2).contains(&id) || !walk.seen.insert(id) {
            return Err(Error::corruption(loc(), "page reached twice or invalid id"));
        }
        let p = self.pool.fetch(id)?;
        let b = p.read();
        if u32::from(page::level(&b)) != level {
            return Err(Error::corruption(
                loc(),
                format!("level {} where {level} expected", page::level(&b)),
            ));
        }
        // A page's fences must be exactly the bounds its parent routes by:
        // a stale fence means a split or a move reached one side only.
        if page::fences(&b) != (low, high) {
            return Err(Error::corruption(
                loc(),
                "fence keys differ from the separators in its parent",
            ));
        }
        let usable = page::usable(self.page_size);
        if let Some(f) = walk.levels.get_mut(level as usize) {
            f.add(usable - page::free_space(&b), usable);
            f.plain_slots += u64::from(!page::has_heads(&b));
        }
        let n = page::count(&b);
        for i in 0..n {
            let k = page::key(&b, i);
            if i > 0 && page::key(&b, i - 1) >= k {
                return Err(Error::corruption(
                    loc(),
                    format!("keys out of order at slot {i}"),
                ));
            }
            if low.is_some_and(|l| k < l) || high.is_some_and(|h| k >= h) {
                return Err(Error::corruption(
                    loc(),
                    format!("key at slot {i} outside its parent's bounds"),
                ));
            }
        }
        if level == 0 {
            if page::kind(&b) != KIND_LEAF {
                return Err(Error::corruption(loc(), "expected a leaf"));
            }
            for i in 0..n {
                if let StoredValue::Overflow { first, len, run } = page::value(&b, i) {
                    let mut next = first;
                    self.walk_overflow(first, len, &mut |of, _| {
                        if run && of != next {
                            return Err(Error::corruption(
                                loc(),
                                format!("the chain at {first} is marked consecutive but has page {of} after {}", next - 1),
                            ));
                        }
                        next = of + 1;
                        if walk.seen.insert(of) {
                            Ok(())
                        } else {
                            Err(Error::corruption(
                                loc(),
                                format!("overflow page {of} shared"),
                            ))
                        }
                    })?;
                }
            }
            walk.leaves.push(id);
            return Ok(());
        }
        if page::kind(&b) != KIND_INNER {
            return Err(Error::corruption(loc(), "expected an inner page"));
        }
        let children: Vec<ChildBounds> = (0..=n)
            .map(|i| {
                let child = if i == 0 {
                    page::link(&b)
                } else {
                    page::child(&b, i - 1)
                };
                let lo = if i == 0 {
                    low.map(<[u8]>::to_vec)
                } else {
                    Some(page::key(&b, i - 1).to_vec())
                };
                let hi = if i == n {
                    high.map(<[u8]>::to_vec)
                } else {
                    Some(page::key(&b, i).to_vec())
                };
                (child, lo, hi)
            })
            .collect();
        drop(b);
        drop(p);
        for (child, lo, hi) in children {
            self.verify_node(child, level - 1, lo.as_deref(), hi.as_deref(), walk)?;
        }
        Ok(())
    }
}

/// An error unless page `id` (its bytes `b`) is of `kind`: a child or
/// sibling link read from disk may name any checked page.
fn expect_kind(id: PageId, b: &[u8], kind: u8) -> Result<()> {
    if page::kind(b) == kind {
        return Ok(());
    }
    let want = if kind == KIND_LEAF {
        "a leaf"
    } else {
        "an inner page"
    };
    Err(Error::corruption(
        format!("page {id}"),
        format!("expected {want}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separators_are_short_and_between() {
        assert_eq!(separator(b"apple", b"banana"), b"b");
        assert_eq!(separator(b"abc", b"abd"), b"abd");
        assert_eq!(separator(b"ab", b"abc"), b"abc");
        let (l, r) = (b"user123".as_slice(), b"user2".as_slice());
        let s = separator(l, r);
        assert!(l < s.as_slice() && s.as_slice() <= r);
    }

    #[test]
    fn split_points_fit_both_halves() {
        let cells: Vec<Vec<u8>> = vec![
            vec![0; 1000],
            vec![0; 1000],
            vec![0; 1000],
            vec![0; 1000],
            vec![0; 1000],
        ];
        let none = |_: usize| (0, 0);
        let m = split_point(&cells, 4064, &none, 0.5).unwrap();
        assert!(m == 2 || m == 3);
        assert_eq!(
            split_point(&[vec![0; 3000], vec![0; 3000]], 4064, &none, 0.5),
            Some(1)
        );
        assert_eq!(split_point(&[vec![0; 5000]], 4064, &none, 0.5), None);
        // Fences count: a long right fence pushes the cut right.
        let fences = |_: usize| (0, 2100);
        assert_eq!(split_point(&cells, 4064, &fences, 0.5), Some(4));
        let huge = |_: usize| (3100, 3100);
        assert_eq!(split_point(&cells, 4064, &huge, 0.5), None);
    }

    #[test]
    fn an_append_to_the_rightmost_page_keeps_the_left_page_nearly_full() {
        let cells: Vec<Vec<u8>> = (0..10).map(|_| vec![0; 400]).collect();
        let none = |_: usize| (0, 0);
        // Appended at the end of the rightmost page: nine tenths stay.
        let share = split_share(cells.len(), cells.len() - 1, &None);
        assert_eq!(share, APPEND_SPLIT_SHARE);
        assert_eq!(split_point(&cells, 4064, &none, share), Some(9));
        // Anywhere else, or on a page with a right neighbour: even.
        assert_eq!(split_share(cells.len(), 3, &None), 0.5);
        assert_eq!(split_share(cells.len(), 9, &Some(b"k".to_vec())), 0.5);
        assert_eq!(split_point(&cells, 4064, &none, 0.5), Some(5));
    }

    #[test]
    fn long_shared_prefixes_split_three_ways() {
        // Three keys with a 290-byte common prefix between short ones: any
        // cut between two of them needs two fences nearly as long as a key
        // on each side, so no two-way split of a 1 KiB page fits.
        let long = |i: u32| {
            let mut k = vec![b'p'; 290];
            k.extend_from_slice(format!("{i:05}").as_bytes());
            k
        };
        let over = StoredValue::Overflow {
            first: 9,
            len: 5000,
            run: false,
        };
        let mut keys: Vec<Vec<u8>> = vec![b"a1".to_vec(), b"a2".to_vec(), b"a3".to_vec()];
        keys.extend([long(82), long(212), long(304)]);
        keys.extend([b"x1".to_vec(), b"x2".to_vec()]);
        let cells: Vec<Vec<u8>> = keys
            .iter()
            .map(|k| {
                if k.len() > 100 {
                    page::encode_leaf_cell(k, &over)
                } else {
                    page::encode_leaf_cell(k, &StoredValue::Inline(&[7; 150]))
                }
            })
            .collect();
        let cap = page::usable(1024);
        let cuts = split_plan(&cells, KIND_LEAF, cap, &None, &None, 0.5).unwrap();
        assert!(cuts.len() >= 2, "{cuts:?}");
        let mut bounds = vec![0];
        bounds.extend(&cuts);
        bounds.push(cells.len());
        for w in bounds.windows(2) {
            let used: usize = cells[w[0]..w[1]]
                .iter()
                .map(|c| page::raw_cell_size(c))
                .sum();
            let lo = (w[0] > 0).then(|| up_key(&cells, KIND_LEAF, w[0]));
            let hi = (w[1] < cells.len()).then(|| up_key(&cells, KIND_LEAF, w[1]));
            let fences = page::fence_cell_size(lo.as_deref(), hi.as_deref());
            assert!(used + fences <= cap, "piece {w:?}: {used} + {fences}");
        }
    }
}
