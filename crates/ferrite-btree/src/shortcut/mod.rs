//! SHORTCUT: one-shot root-to-leaf traversal.
//!
//! Before a lookup descends, the [`Companion`] predicts the node of every
//! level from the key alone; every predicted node not already in the
//! buffer pool is read in one batch (one io_uring submission), into the
//! [`prefetch::PrefetchPool`]; then the normal descent runs, and at each
//! level a prefetched page that the descent confirms is admitted into the
//! pool instead of being read. A wrong or missing prediction costs a
//! wasted read and falls back to the normal one: correctness never depends
//! on a prediction, because the descent follows the real child pointers.
//!
//! Invariants and rules:
//! - only nodes that are neither resident nor spilled are prefetched, and
//!   the descent runs under the store's shared lock, so a prefetched image
//!   read from the page file is the page's current version (writers, which
//!   alone change pages, are excluded; see `BufferPool::admit`);
//! - a companion is used only for the tree shape (root, height) it was
//!   built for;
//! - splits are logged in the [`stash::Stash`]; when
//!   [`stash::due`] says so (by default 5% new nodes on a level), the
//!   companion is rebuilt — in the background for [`Variant::Shortcut`]
//!   and [`Variant::Base`], inline under the writer's lock for
//!   [`Variant::Sync`] — and swapped in whole;
//! - selective prefetching: each level's hits are counted over windows of
//!   [`ShortcutOptions::accuracy_window`] predictions; a level whose window
//!   falls below [`ShortcutOptions::min_accuracy`] stops predicting until
//!   the next rebuild, which it requests.

pub mod companion;
pub mod phantom;
pub mod prefetch;
pub mod relayout;
pub mod stash;
pub mod training;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrite_core::{Error, Result};
use ferrite_io::ReadReq;
use ferrite_learned::FitOptions;
use parking_lot::{Condvar, Mutex, RwLock};

use crate::page::{self, PageId, KIND_INNER};
use crate::shape::Shape;
use crate::tree::{SplitObserver, Tree};
use companion::{Build, Companion, SegmentAccuracy};
use prefetch::PrefetchPool;
use stash::Stash;
pub use training::Progress;
use training::{LevelNodes, Walker};

/// Deepest tree the companion serves (a 4 KiB-page tree of height 16
/// would hold more keys than any device).
pub const MAX_LEVELS: usize = 16;

/// One step of a walk, run with the tree's shape under its shared lock.
pub type WalkStep<'a> = dyn FnMut(&Shape) -> Result<Progress> + 'a;

/// Which SHORTCUT the engine runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// Keyless models and phantom maps, rebuilt in the background.
    Shortcut,
    /// Exact per-level key and page arrays (SHORTCUT-BASE), rebuilt in the
    /// background.
    Base,
    /// Keyless models, rebuilt inline by the writer that makes the stash
    /// due, holding the tree's write lock (SHORTCUT-SYNC).
    Sync,
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::Shortcut => "shortcut",
            Variant::Base => "shortcut-base",
            Variant::Sync => "shortcut-sync",
        }
    }
}

/// SHORTCUT's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct ShortcutOptions {
    pub variant: Variant,
    /// Phase-1 error bound of the models, in nodes.
    pub eps: f64,
    /// Rebuild when a level has gained this fraction of new nodes.
    pub stash_threshold: f64,
    /// A level whose windowed accuracy falls below this stops predicting.
    pub min_accuracy: f64,
    /// Predictions per accuracy window.
    pub accuracy_window: u32,
    /// Inner pages a background rebuild reads per hold of the shared lock.
    pub walk_chunk: usize,
    /// A level whose models' expected hit rate (their exact-hit coverage
    /// of the training data) is below this also prefetches each
    /// prediction's runner-up, the neighbouring node on the side the
    /// line leans to: one more read in the same batch, which costs
    /// bandwidth but no extra round. 0 turns it off (the paper's design:
    /// one node per level).
    pub runner_up_below: f64,
    /// Physically re-lay out a level (see `relayout`) when its phantom map's
    /// discontinuities exceed this fraction of its nodes.
    pub relocate_threshold: f64,
    /// Rebuild when the stash is due or the shape changes; false keeps the
    /// companion built at open or bulk load (experiments use it to measure
    /// what re-layout costs the foreground).
    pub relayout: bool,
}

ferrite_core::option_setters!(ShortcutOptions {
    variant: Variant,
    eps: f64,
    stash_threshold: f64,
    min_accuracy: f64,
    accuracy_window: u32,
    walk_chunk: usize,
    runner_up_below: f64,
    relocate_threshold: f64,
    relayout: bool,
});

impl Default for ShortcutOptions {
    fn default() -> Self {
        Self {
            variant: Variant::Shortcut,
            eps: 1.25,
            stash_threshold: 0.05,
            min_accuracy: 0.1,
            accuracy_window: 4096,
            walk_chunk: 32,
            runner_up_below: 0.9,
            relocate_threshold: 0.1,
            relayout: true,
        }
    }
}

impl ShortcutOptions {
    pub fn validate(&self) -> std::result::Result<(), String> {
        if !(self.eps >= 0.0 && self.eps.is_finite()) {
            return Err(format!(
                "shortcut eps {} is not a finite value ≥ 0",
                self.eps
            ));
        }
        if !(self.stash_threshold > 0.0 && self.stash_threshold <= 1.0) {
            return Err(format!(
                "shortcut stash threshold {} is not in (0, 1]",
                self.stash_threshold
            ));
        }
        if !(0.0..=1.0).contains(&self.min_accuracy) {
            return Err(format!(
                "shortcut min accuracy {} is not in [0, 1]",
                self.min_accuracy
            ));
        }
        if !(self.relocate_threshold >= 0.0 && self.relocate_threshold.is_finite()) {
            return Err(format!(
                "shortcut relocate threshold {} is not a finite value ≥ 0",
                self.relocate_threshold
            ));
        }
        if self.accuracy_window == 0 || self.walk_chunk == 0 {
            return Err("shortcut accuracy window and walk chunk must be positive".into());
        }
        Ok(())
    }

    fn build(&self) -> Build {
        match self.variant {
            Variant::Base => Build::Exact,
            Variant::Shortcut | Variant::Sync => Build::Learned {
                fit: FitOptions { eps: self.eps },
                runner_up_below: self.runner_up_below,
            },
        }
    }
}

/// Per-level counters.
#[derive(Default)]
struct LevelCounters {
    predictions: AtomicU64,
    hits: AtomicU64,
    /// Predictions whose runner-up was the node on the path.
    runner_up_hits: AtomicU64,
    window_total: AtomicU32,
    window_hits: AtomicU32,
    disabled: AtomicBool,
}

/// Counters of the one-shot path.
#[derive(Default)]
pub struct Counters {
    pub lookups: AtomicU64,
    pub prefetched: AtomicU64,
    pub prefetch_used: AtomicU64,
    pub prefetch_wasted: AtomicU64,
    pub prefetch_failed: AtomicU64,
    pub rebuilds: AtomicU64,
    pub rebuild_nanos: AtomicU64,
    pub last_rebuild_nanos: AtomicU64,
    pub stale_walks: AtomicU64,
    pub disabled_levels: AtomicU64,
    /// Physical re-layouts (level passes), nodes moved, nodes left in
    /// place because they changed since the walk, and time spent.
    pub relayouts: AtomicU64,
    pub relocated: AtomicU64,
    pub relocation_skips: AtomicU64,
    pub relayout_nanos: AtomicU64,
}

/// A snapshot for reports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShortcutReport {
    pub variant: &'static str,
    /// Per level (0 = leaves): predictions checked and hits.
    pub level_predictions: Vec<u64>,
    pub level_hits: Vec<u64>,
    /// Per level: misses whose runner-up was right (read in the same batch).
    pub level_runner_up_hits: Vec<u64>,
    pub prefetched: u64,
    pub prefetch_used: u64,
    pub prefetch_wasted: u64,
    pub rebuilds: u64,
    pub rebuild_seconds_total: f64,
    pub relayouts: u64,
    pub relocated: u64,
    pub relayout_seconds_total: f64,
    pub last_rebuild_seconds: f64,
    pub companion_bytes: u64,
    pub nodes_modelled: u64,
    pub segments: u64,
    pub discontinuities: u64,
    pub stash_entries: u64,
    pub segment_accuracy: Vec<SegmentAccuracy>,
    /// Lookups that took the one-shot path.
    pub lookups: u64,
    /// Prefetch batches the device refused (their lookups read normally).
    pub prefetch_failed: u64,
    /// Background walks restarted because the tree changed under them.
    pub stale_walks: u64,
    /// Times a level stopped predicting for low accuracy.
    pub disabled_levels: u64,
    /// Nodes a re-layout left in place because they changed since listed.
    pub relocation_skips: u64,
}

/// SHORTCUT's state beside the tree.
pub struct Shortcut {
    opts: ShortcutOptions,
    companion: RwLock<Option<Arc<Companion>>>,
    pub stash: Stash,
    levels: [LevelCounters; MAX_LEVELS],
    pub counters: Counters,
    prefetch: PrefetchPool,
    /// A level was disabled: rebuild even if the stash is not due.
    retrain: AtomicBool,
    wake: (Mutex<bool>, Condvar),
}

/// Every split goes to the stash, which decides when a rebuild is due.
impl SplitObserver for Shortcut {
    fn node_added(&self, level: u8, left: PageId, new: PageId) {
        self.stash.record(level, left, new);
    }
}

impl Shortcut {
    pub fn new(opts: ShortcutOptions, page_size: usize) -> Self {
        Self {
            opts,
            companion: RwLock::new(None),
            stash: Stash::default(),
            levels: Default::default(),
            counters: Counters::default(),
            prefetch: PrefetchPool::new(page_size, 4 * 8),
            retrain: AtomicBool::new(false),
            wake: (Mutex::new(false), Condvar::new()),
        }
    }

    pub fn options(&self) -> &ShortcutOptions {
        &self.opts
    }

    fn current(&self) -> Option<Arc<Companion>> {
        self.companion.read().clone()
    }

    /// Whether the companion should be rebuilt for `shape`.
    pub fn needs_rebuild(&self, shape: &Shape) -> bool {
        let Some(c) = self.current() else {
            return shape.height > 0;
        };
        if !self.opts.relayout {
            return false;
        }
        if c.root != shape.root || c.height != shape.height {
            return true;
        }
        // A disabled level asks for a rebuild, but one over an unchanged
        // tree would fit the same model again.
        if self.retrain.load(Acquire) && !self.stash.is_empty() {
            return true;
        }
        stash::due(
            &self.stash.new_per_level(),
            &c.nodes_per_level(),
            self.opts.stash_threshold,
        )
    }

    /// Wakes the background rebuilder if a rebuild is due.
    pub fn poke(&self, shape: &Shape) {
        if self.opts.variant != Variant::Sync && self.needs_rebuild(shape) {
            let mut w = self.wake.0.lock();
            *w = true;
            self.wake.1.notify_one();
        }
    }

    /// Wakes the rebuilder so it sees the store closing.
    pub fn poke_stop(&self) {
        let mut w = self.wake.0.lock();
        *w = true;
        self.wake.1.notify_all();
    }

    /// Waits up to `timeout` for a poke; true if poked.
    pub fn wait(&self, timeout: Duration) -> bool {
        let mut w = self.wake.0.lock();
        if !*w {
            self.wake.1.wait_for(&mut w, timeout);
        }
        std::mem::replace(&mut *w, false)
    }

    /// Lists the nodes of `level` from a walk of the levels above it in
    /// one go, under the caller's write lock, so the list is exactly the
    /// level (a re-layout must know every node that occupies its run).
    pub fn list_level_locked(
        tree: &Tree,
        shape: &Shape,
        level: usize,
    ) -> Result<Option<LevelNodes>> {
        Ok(Self::walk_down_to_locked(tree, shape, level)?
            .into_iter()
            .nth(level))
    }

    /// Walks the inner levels of `shape` in one go (the caller holds the
    /// tree's lock).
    pub fn walk_locked(tree: &Tree, shape: &Shape) -> Result<Vec<LevelNodes>> {
        Self::walk_down_to_locked(tree, shape, 0)
    }

    /// A walk in one go that stops once level `floor` is listed.
    fn walk_down_to_locked(tree: &Tree, shape: &Shape, floor: usize) -> Result<Vec<LevelNodes>> {
        let mut w = Walker::down_to(shape, tree.page_size, floor as u32);
        match w.step(tree, shape, usize::MAX)? {
            Progress::Done => Ok(w.finish()),
            _ => Err(Error::corruption(
                "shortcut",
                "the inner levels changed during a locked walk",
            )),
        }
    }

    /// Walks the inner levels a chunk of pages per call of `with_shape`
    /// (which takes the tree's shared lock). `None` if the walk went stale
    /// or the store is closing.
    pub fn walk_in_steps(
        &self,
        tree: &Tree,
        with_shape: &dyn Fn(&mut WalkStep<'_>) -> Result<Progress>,
    ) -> Result<Option<(Shape, Vec<LevelNodes>)>> {
        let mut walker: Option<Walker> = None;
        let mut shape_at_start: Option<Shape> = None;
        loop {
            let chunk = self.opts.walk_chunk;
            let p = with_shape(&mut |shape: &Shape| {
                let w = walker.get_or_insert_with(|| {
                    shape_at_start = Some(shape.clone());
                    Walker::new(shape, tree.page_size)
                });
                w.step(tree, shape, chunk)
            })?;
            match p {
                Progress::More => continue,
                Progress::Done => break,
                Progress::Stale => {
                    self.counters.stale_walks.fetch_add(1, Relaxed);
                    return Ok(None);
                }
            }
        }
        Ok(walker.zip(shape_at_start).map(|(w, s)| (s, w.finish())))
    }

    /// Rebuilds the companion from `shape`, reading every inner page now
    /// (the caller holds the tree's lock).
    pub fn rebuild_locked(&self, tree: &Tree, shape: &Shape) -> Result<()> {
        let _work = ferrite_core::background::begin(ferrite_core::background::Work::Rebuild);
        let started = Instant::now();
        let taken = self.stash.take();
        match Self::walk_locked(tree, shape) {
            Ok(levels) => {
                self.install(shape, levels, started);
                Ok(())
            }
            Err(e) => {
                for e in taken {
                    self.stash.record(e.level, e.split, e.new);
                }
                Err(e)
            }
        }
    }

    /// Rebuilds in steps; `with_shape` runs a closure under the tree's
    /// shared lock. Returns false if the walk went stale (try later).
    pub fn rebuild_in_steps(
        &self,
        tree: &Tree,
        with_shape: &dyn Fn(&mut WalkStep<'_>) -> Result<Progress>,
    ) -> Result<bool> {
        let _work = ferrite_core::background::begin(ferrite_core::background::Work::Rebuild);
        let started = Instant::now();
        let taken = self.stash.take();
        match self.walk_in_steps(tree, with_shape)? {
            Some((shape, levels)) => {
                self.install(&shape, levels, started);
                Ok(true)
            }
            None => {
                for e in taken {
                    self.stash.record(e.level, e.split, e.new);
                }
                Ok(false)
            }
        }
    }

    /// Levels whose placement the policy says to re-lay out (never for
    /// SHORTCUT-BASE, whose arrays map any placement).
    pub fn levels_to_relocate(&self) -> Vec<usize> {
        if self.opts.variant == Variant::Base || !self.opts.relayout {
            return Vec::new();
        }
        self.current().map_or_else(Vec::new, |c| {
            relayout::levels_due(&c.level_layout(), self.opts.relocate_threshold)
        })
    }

    /// Counts one level's re-layout.
    pub fn note_relayout(&self, moved: u64, skipped: u64, took: Duration) {
        let k = &self.counters;
        k.relayouts.fetch_add(1, Relaxed);
        k.relocated.fetch_add(moved, Relaxed);
        k.relocation_skips.fetch_add(skipped, Relaxed);
        k.relayout_nanos.fetch_add(took.as_nanos() as u64, Relaxed);
    }

    fn install(&self, shape: &Shape, levels: Vec<LevelNodes>, started: Instant) {
        let c = Companion::build(shape.root, shape.height, levels, self.opts.build());
        *self.companion.write() = Some(Arc::new(c));
        for l in &self.levels {
            l.window_total.store(0, Relaxed);
            l.window_hits.store(0, Relaxed);
            l.disabled.store(false, Relaxed);
        }
        self.retrain.store(false, Release);
        let ns = started.elapsed().as_nanos() as u64;
        self.counters.rebuilds.fetch_add(1, Relaxed);
        self.counters.rebuild_nanos.fetch_add(ns, Relaxed);
        self.counters.last_rebuild_nanos.store(ns, Relaxed);
    }

    /// Records one checked prediction at `level` and applies the
    /// selective-prefetching rule (a runner-up hit counts for the window:
    /// the level's reads were useful).
    fn note(&self, c: &Companion, level: usize, segment: Option<usize>, hit: bool, second: bool) {
        c.note(level, segment, hit);
        let Some(l) = self.levels.get(level) else {
            return;
        };
        l.predictions.fetch_add(1, Relaxed);
        if hit {
            l.hits.fetch_add(1, Relaxed);
        }
        if second {
            l.runner_up_hits.fetch_add(1, Relaxed);
        }
        if hit || second {
            l.window_hits.fetch_add(1, Relaxed);
        }
        let n = l.window_total.fetch_add(1, Relaxed) + 1;
        if n >= self.opts.accuracy_window {
            let h = l.window_hits.swap(0, Relaxed);
            l.window_total.store(0, Relaxed);
            if f64::from(h) < self.opts.min_accuracy * f64::from(n)
                && !l.disabled.swap(true, Relaxed)
            {
                self.counters.disabled_levels.fetch_add(1, Relaxed);
                self.retrain.store(true, Release);
            }
        }
    }

    /// The leaf for `key`, descending from the root with every uncached
    /// predicted node read in one batch first. The caller holds the tree's
    /// shared lock.
    pub fn leaf_for(&self, tree: &Tree, shape: &Shape, key: &[u8]) -> Result<PageId> {
        let Some(c) = self
            .current()
            .filter(|c| c.root == shape.root && c.height == shape.height)
        else {
            return tree.leaf_for(shape, key);
        };
        let h = shape.height as usize;
        if h >= MAX_LEVELS {
            return tree.leaf_for(shape, key);
        }
        self.counters.lookups.fetch_add(1, Relaxed);
        let mut predicted: [Option<companion::Predicted>; MAX_LEVELS] = [None; MAX_LEVELS];
        predicted[h] = Some((shape.root, None, None));
        for (l, slot) in predicted.iter_mut().enumerate().take(h) {
            if !self.levels[l].disabled.load(Relaxed) {
                *slot = c.predict(l, key);
            }
        }
        // Every predicted node not in the pool, top-down, in one batch.
        let ps = tree.page_size as u64;
        let on_disk = tree.pool.device().len() / ps;
        let mut want: Vec<(usize, PageId)> = Vec::with_capacity(2 * h + 1);
        for l in (0..=h).rev() {
            if let Some((p, _, second)) = predicted[l] {
                for q in std::iter::once(p).chain(second.filter(|&q| q != p)) {
                    if q >= 2 && q < on_disk && !tree.pool.is_resident(q) {
                        want.push((l, q));
                    }
                }
            }
        }
        let mut bufs = self.prefetch.take(want.len());
        if !want.is_empty() {
            let mut reqs: Vec<ReadReq<'_>> = want
                .iter()
                .zip(bufs.iter_mut())
                .map(|(&(_, p), b)| ReadReq::new(p * ps, &mut b[..]))
                .collect();
            let ok = tree.pool.device().read_batch(&mut reqs).is_ok();
            drop(reqs);
            self.counters
                .prefetched
                .fetch_add(want.len() as u64, Relaxed);
            if !ok {
                // The normal reads below will meet (and report) any real
                // device error.
                self.counters.prefetch_failed.fetch_add(1, Relaxed);
                want.clear();
            }
        }
        let mut used = 0u64;
        let mut id = shape.root;
        let mut result = Ok(());
        for l in (0..=h).rev() {
            if let Some(k) = want.iter().position(|&(wl, p)| wl == l && p == id) {
                match tree.pool.admit(id, &bufs[k]) {
                    Ok(true) => used += 1,
                    Ok(false) => {}
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
            if l == 0 {
                break;
            }
            let child = match tree.pool.read(id) {
                Ok(b) => {
                    if page::kind(&b) != KIND_INNER {
                        result = Err(Error::corruption(
                            format!("page {id}"),
                            "expected an inner page",
                        ));
                        break;
                    }
                    page::child_for(&b, key)
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            };
            if let Some((p, seg, second)) = predicted[l - 1] {
                self.note(
                    &c,
                    l - 1,
                    seg,
                    p == child,
                    p != child && second == Some(child),
                );
            }
            id = child;
        }
        self.counters.prefetch_used.fetch_add(used, Relaxed);
        self.counters
            .prefetch_wasted
            .fetch_add(want.len() as u64 - used.min(want.len() as u64), Relaxed);
        self.prefetch.give(bufs);
        result.map(|_| id)
    }

    /// Bytes SHORTCUT holds: the companion, the stash, the prefetch pool.
    pub fn memory_bytes(&self) -> u64 {
        let c = self.current().map_or(0, |c| c.memory_bytes());
        (c + self.stash.memory_bytes() + self.prefetch.memory_bytes()) as u64
    }

    /// The counters and companion statistics; with `segments`, the
    /// accuracy of every segment too (one entry per segment, so statistics
    /// calls leave it out).
    pub fn report(&self, segments: bool) -> ShortcutReport {
        let c = self.current();
        let height = c.as_ref().map_or(0, |c| c.height as usize);
        let k = &self.counters;
        ShortcutReport {
            variant: self.opts.variant.name(),
            level_predictions: self.levels[..height.min(MAX_LEVELS)]
                .iter()
                .map(|l| l.predictions.load(Relaxed))
                .collect(),
            level_hits: self.levels[..height.min(MAX_LEVELS)]
                .iter()
                .map(|l| l.hits.load(Relaxed))
                .collect(),
            level_runner_up_hits: self.levels[..height.min(MAX_LEVELS)]
                .iter()
                .map(|l| l.runner_up_hits.load(Relaxed))
                .collect(),
            prefetched: k.prefetched.load(Relaxed),
            prefetch_used: k.prefetch_used.load(Relaxed),
            prefetch_wasted: k.prefetch_wasted.load(Relaxed),
            rebuilds: k.rebuilds.load(Relaxed),
            rebuild_seconds_total: k.rebuild_nanos.load(Relaxed) as f64 / 1e9,
            relayouts: k.relayouts.load(Relaxed),
            relocated: k.relocated.load(Relaxed),
            relayout_seconds_total: k.relayout_nanos.load(Relaxed) as f64 / 1e9,
            last_rebuild_seconds: k.last_rebuild_nanos.load(Relaxed) as f64 / 1e9,
            companion_bytes: c.as_ref().map_or(0, |c| c.memory_bytes() as u64),
            nodes_modelled: c
                .as_ref()
                .map_or(0, |c| c.nodes_per_level().iter().sum::<u64>()),
            segments: c.as_ref().map_or(0, |c| c.segments() as u64),
            discontinuities: c.as_ref().map_or(0, |c| c.discontinuities() as u64),
            stash_entries: self.stash.len() as u64,
            segment_accuracy: match (&c, segments) {
                (Some(c), true) => c.segment_accuracy(),
                _ => Vec::new(),
            },
            lookups: k.lookups.load(Relaxed),
            prefetch_failed: k.prefetch_failed.load(Relaxed),
            stale_walks: k.stale_walks.load(Relaxed),
            disabled_levels: k.disabled_levels.load(Relaxed),
            relocation_skips: k.relocation_skips.load(Relaxed),
        }
    }

    /// Clears the runtime counters (not the companion), so a measurement
    /// phase starts from zero.
    pub fn reset_counters(&self) {
        for l in &self.levels {
            l.predictions.store(0, Relaxed);
            l.hits.store(0, Relaxed);
            l.runner_up_hits.store(0, Relaxed);
        }
        let k = &self.counters;
        for a in [
            &k.lookups,
            &k.prefetched,
            &k.prefetch_used,
            &k.prefetch_wasted,
            &k.prefetch_failed,
        ] {
            a.store(0, Relaxed);
        }
    }
}
