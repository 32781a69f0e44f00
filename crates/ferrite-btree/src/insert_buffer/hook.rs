//! The write-miss hook (TurboIndex): where a write meets the insert buffer.
//!
//! Owns [`Turbo`], the buffer's run-time state beside the tree (the buffer
//! while it is on, the hot pages waiting to be loaded together, the gate's
//! window), and the policy that routes each write: a write whose leaf is
//! resident goes to the page (its id logged for the detector); a miss is
//! buffered, loads hot pages eight at a time with overlapping reads, and
//! under memory pressure applies the coldest pages' records in page order.
//!
//! The hook knows the store only through [`Host`]: the tree, the access
//! counters the gate weighs, and `make_room`, which checkpoints when the
//! next write's dirty pages might not fit. A checkpoint carries the
//! buffer's records over (see `carry_over`), so `make_room` may run between
//! any two applied records.
//!
//! Invariants: a page's records leave the buffer only once every one of
//! them is applied to the page; a write to a page with buffered records
//! applies those first, so the page never sees a newer write before an
//! older one.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use ferrite_core::{Result, WriteBatch};

use super::gate::{self, GateState, Window};
use super::{BufferCounters, InsertBuffer, InsertBufferOptions, LoadReason, Offer};
use crate::page::PageId;
use crate::shape::Shape;
use crate::tree::Tree;

/// Hot pages loaded in one batch of overlapping reads, and pages of a
/// memory-pressure batch read at a time: enough to overlap reads, few
/// enough that the frames they take come back before displacing pages in
/// use.
const LOAD_BATCH: usize = 8;

/// How lookups and writes found their leaves: what the gate weighs.
#[derive(Default)]
pub struct Accesses {
    /// Writes whose leaf was in the pool / was not.
    pub write_hits: AtomicU64,
    pub write_misses: AtomicU64,
    /// Lookups whose leaf was in the pool / was not / answered by the
    /// insert buffer without reaching the pool.
    pub read_hits: AtomicU64,
    pub read_misses: AtomicU64,
    pub buffer_reads: AtomicU64,
}

impl Accesses {
    pub fn count_write(&self, resident: bool) {
        [&self.write_misses, &self.write_hits][usize::from(resident)].fetch_add(1, Relaxed);
    }

    pub fn count_read(&self, resident: bool) {
        [&self.read_misses, &self.read_hits][usize::from(resident)].fetch_add(1, Relaxed);
    }
}

/// What the hook needs from the store it serves.
pub trait Host {
    /// The store's state under its write lock.
    type State;
    fn tree(&self) -> &Tree;
    fn accesses(&self) -> &Accesses;
    /// The parts of the state the hook changes.
    fn parts<'s>(&self, st: &'s mut Self::State) -> (&'s mut Shape, &'s mut Turbo);
    /// Checkpoints if one is due, so the next write's dirty pages fit.
    fn make_room(&self, st: &mut Self::State) -> Result<()>;
}

/// The insert buffer's run-time state (the plain tree has one with no
/// options, which the hook never sees).
pub struct Turbo {
    options: Option<InsertBufferOptions>,
    /// The buffer, while it is on.
    ib: Option<InsertBuffer>,
    /// Its byte budget, kept to rebuild it when the gate turns it back on.
    budget: usize,
    /// Pages whose reuse score reached the threshold, waiting to be loaded
    /// together (their records stay buffered until then).
    hot: Vec<PageId>,
    gate: GateWindow,
}

/// Where the gate's current window started, and what it learned.
#[derive(Debug, Clone, Copy)]
struct GateWindow {
    /// Operations (lookups and writes) at the window's start.
    ops: u64,
    start: Window,
    /// Share of write misses that saved a read, last measured while on.
    saving_share: f64,
    /// The buffer's counters, kept while it is off.
    parked: BufferCounters,
    switches: u64,
}

impl Default for GateWindow {
    fn default() -> Self {
        Self {
            ops: 0,
            start: Window::default(),
            saving_share: 0.5,
            parked: BufferCounters::default(),
            switches: 0,
        }
    }
}

impl Turbo {
    /// The state of a store with `options` (none: the plain tree), the
    /// buffer on and empty.
    pub fn new(
        options: Option<InsertBufferOptions>,
        budget: usize,
        frames: usize,
        page_size: usize,
    ) -> Self {
        Self {
            options,
            ib: options.map(|o| InsertBuffer::new(&o, budget, frames, page_size)),
            budget,
            hot: Vec::new(),
            gate: GateWindow::default(),
        }
    }

    /// Whether the store has an insert buffer (on or gated off).
    pub fn configured(&self) -> bool {
        self.options.is_some()
    }

    /// The buffer, while it is on.
    pub fn buffer(&self) -> Option<&InsertBuffer> {
        self.ib.as_ref()
    }

    /// The buffer if it is on and holds records.
    pub fn records(&self) -> Option<&InsertBuffer> {
        self.ib.as_ref().filter(|ib| !ib.is_empty())
    }

    /// Its counters; they run on while an adaptive buffer is off, so
    /// differences between two snapshots stay meaningful.
    pub fn counters(&self) -> BufferCounters {
        self.ib.as_ref().map_or(self.gate.parked, |ib| ib.counters)
    }

    /// How often the gate turned the buffer off or on.
    pub fn switches(&self) -> u64 {
        self.gate.switches
    }

    pub fn budget(&self) -> usize {
        self.budget
    }

    /// The buffered records as one encoded batch, if there are any (what a
    /// checkpoint carries over).
    pub fn carried_records(&self) -> Result<Option<Vec<u8>>> {
        let Some(ib) = self.records() else {
            return Ok(None);
        };
        let mut batch = WriteBatch::new();
        let mut failed = None;
        ib.for_each(&mut |_, (k, v)| {
            let r = match v {
                Some(v) => batch.put(k, v).map(drop),
                None => batch.delete(k).map(drop),
            };
            if let Err(e) = r {
                failed.get_or_insert(e);
            }
        });
        if let Some(e) = failed {
            return Err(e);
        }
        let mut out = Vec::with_capacity(batch.encoded_len());
        batch.encode(&mut out);
        Ok(Some(out))
    }
}

/// A put (`Some`) or delete (`None`) applied to the tree directly.
fn write_tree(tree: &Tree, shape: &mut Shape, key: &[u8], value: Option<&[u8]>) -> Result<()> {
    match value {
        Some(v) => tree.put(shape, key, v),
        None => tree.delete(shape, key).map(drop),
    }
}

/// One write of a store with an insert buffer: a write whose leaf is not
/// resident is buffered instead of loading it.
pub fn write<H: Host>(h: &H, st: &mut H::State, key: &[u8], value: Option<&[u8]>) -> Result<()> {
    gate(h, st)?;
    let tree = h.tree();
    let (shape, turbo) = h.parts(st);
    let mut path = Vec::with_capacity(8);
    let leaf = tree.find_leaf(shape, key, &mut path)?;
    let resident = tree.pool.is_resident(leaf);
    h.accesses().count_write(resident);
    let Some(ib) = turbo.ib.as_mut() else {
        return match value {
            Some(v) => tree.put_at(shape, &path, leaf, key, v),
            None => tree.delete(shape, key).map(drop),
        };
    };
    if resident && !ib.has(leaf) {
        ib.note_hit(leaf);
        return match value {
            Some(v) => tree.put_at(shape, &path, leaf, key, v),
            None => tree.delete(shape, key).map(drop),
        };
    }
    if resident || !InsertBuffer::fits(key, value, tree.inline_max()) {
        // The leaf is in the pool with records a reader left buffered,
        // or the record is too large to buffer: the page's records go
        // first, then this write.
        apply_buffered(h, st, leaf)?;
        let (shape, _) = h.parts(st);
        return write_tree(tree, shape, key, value);
    }
    ib.replay_hits();
    if ib.needs_room(leaf) || ib.over_budget() {
        relieve(h, st, Some(leaf))?;
        // Relief applies the coldest pages' records and may have taken
        // this very leaf: split it (the key may now belong to a new
        // sibling) or kept it in the pool. Then the write goes to the
        // tree, after whatever is still buffered for its leaf.
        let (shape, turbo) = h.parts(st);
        let now = tree.find_leaf(shape, key, &mut path)?;
        if now != leaf || tree.pool.is_resident(now) {
            if turbo.ib.as_ref().is_some_and(|ib| ib.has(now)) {
                apply_buffered(h, st, now)?;
            }
            let (shape, _) = h.parts(st);
            return write_tree(tree, shape, key, value);
        }
    }
    let (_, turbo) = h.parts(st);
    let Some(ib) = turbo.ib.as_mut() else {
        return Ok(());
    };
    match ib.offer(leaf, key, value) {
        Offer::Kept => relieve(h, st, None),
        Offer::Load(LoadReason::Hot) => {
            if !turbo.hot.contains(&leaf) {
                turbo.hot.push(leaf);
            }
            if turbo.hot.len() >= LOAD_BATCH {
                load_hot(h, st)?;
            }
            Ok(())
        }
        Offer::Load(LoadReason::Full) => {
            // Many writes but no reuse inside the locality: apply them
            // and let the page go, as under memory pressure.
            apply_buffered(h, st, leaf)?;
            tree.pool.evict(leaf)
        }
        Offer::NoRoom => {
            if ib.has(leaf) {
                apply_buffered(h, st, leaf)?;
            }
            let (shape, _) = h.parts(st);
            write_tree(tree, shape, key, value)
        }
    }
}

/// The gate's counts so far: operations, and the window's fields.
fn gate_counts(a: &Accesses, turbo: &Turbo) -> (u64, Window) {
    let lookups = a.read_hits.load(Relaxed) + a.read_misses.load(Relaxed);
    let writes = a.write_hits.load(Relaxed) + a.write_misses.load(Relaxed);
    let k = turbo.counters();
    let w = Window {
        lookups,
        write_misses: a.write_misses.load(Relaxed),
        loads: k.promoted_loads + k.full_loads + k.pressure_loads,
    };
    (lookups + writes, w)
}

/// At the end of each window of operations (two per base pool frame),
/// turns an adaptive insert buffer off or on as [`gate`] decides: off,
/// its records are applied and its memory lent to the pool; on, the
/// pool gives the memory back and the buffer starts empty.
fn gate<H: Host>(h: &H, st: &mut H::State) -> Result<()> {
    let (shape, turbo) = h.parts(st);
    let Some(options) = turbo.options.filter(|o| o.adaptive) else {
        return Ok(());
    };
    let pool = &h.tree().pool;
    let (ops, now) = gate_counts(h.accesses(), turbo);
    if ops < turbo.gate.ops + 2 * pool.base_capacity() as u64 {
        return Ok(());
    }
    let g = &mut turbo.gate;
    let w = Window {
        lookups: now.lookups - g.start.lookups,
        write_misses: now.write_misses - g.start.write_misses,
        loads: now.loads - g.start.loads,
    };
    let on = turbo.ib.is_some();
    if on {
        g.saving_share = gate::saving_share(&w, g.saving_share);
    }
    let state = GateState {
        on,
        saving_share: g.saving_share,
        frames: pool.spare_capacity() as u64,
        pages: shape.page_count,
    };
    let keep = gate::keep_buffering(&w, &state);
    if on && !keep {
        drain(h, st)?;
        let (_, turbo) = h.parts(st);
        if let Some(ib) = turbo.ib.take() {
            turbo.gate.parked = ib.counters;
        }
        pool.lend();
        turbo.gate.switches += 1;
    } else if !on && keep && pool.reclaim()? {
        let mut ib = InsertBuffer::new(&options, turbo.budget, pool.capacity(), h.tree().page_size);
        ib.counters = turbo.gate.parked;
        turbo.ib = Some(ib);
        turbo.gate.switches += 1;
    }
    let (_, turbo) = h.parts(st);
    let (ops, start) = gate_counts(h.accesses(), turbo);
    turbo.gate.ops = ops;
    turbo.gate.start = start;
    Ok(())
}

/// Applies every buffered record, the coldest pages first, reading the
/// pages a batch at a time.
pub fn drain<H: Host>(h: &H, st: &mut H::State) -> Result<()> {
    h.parts(st).1.hot.clear();
    loop {
        let batch = match h.parts(st).1.ib.as_mut() {
            Some(ib) if !ib.is_empty() => ib.coldest_batch(usize::MAX),
            _ => return Ok(()),
        };
        if batch.is_empty() {
            return Ok(());
        }
        apply_pages(h, st, &batch, false)?;
    }
}

/// Applies the buffered records of `pages`, reading them a batch at a
/// time with overlapping reads. With `release`, an H page (loaded only
/// to take its records) leaves the pool at once rather than displace a
/// page in use, so its frame serves the next batch; an L page stays,
/// as after a postponed insert.
fn apply_pages<H: Host>(h: &H, st: &mut H::State, pages: &[PageId], release: bool) -> Result<()> {
    let _work = ferrite_core::background::begin(ferrite_core::background::Work::BufferSpill);
    let pool = &h.tree().pool;
    let mut done = Vec::with_capacity(LOAD_BATCH);
    for chunk in pages.chunks(LOAD_BATCH) {
        pool.prefetch(chunk)?;
        done.clear();
        for &page in chunk {
            apply_buffered(h, st, page)?;
            let hot = h.parts(st).1.ib.as_ref().is_some_and(|ib| ib.is_hot(page));
            if release && !hot {
                done.push(page);
            }
        }
        // The chunk's released pages leave together: the changed ones
        // go to the spill file in one batch of writes.
        pool.evict_all(&done)?;
    }
    Ok(())
}

/// Loads the waiting hot pages with overlapping reads and applies their
/// buffered records (postponed inserts); they stay in the pool.
fn load_hot<H: Host>(h: &H, st: &mut H::State) -> Result<()> {
    let turbo = h.parts(st).1;
    let mut pages = std::mem::take(&mut turbo.hot);
    if let Some(ib) = turbo.ib.as_ref() {
        // Pressure or a resident write may have applied some already.
        pages.retain(|&p| ib.has(p));
    }
    h.tree().pool.prefetch(&pages)?;
    for page in pages {
        apply_buffered(h, st, page)?;
    }
    Ok(())
}

/// Applies `page`'s buffered records (postponed inserts), loading the
/// page. The records leave the buffer only once all are applied, so a
/// checkpoint in between snapshots them.
pub fn apply_buffered<H: Host>(h: &H, st: &mut H::State, page: PageId) -> Result<()> {
    let records: Vec<(Vec<u8>, Option<Vec<u8>>)> = match &h.parts(st).1.ib {
        Some(ib) => ib
            .sorted(page)
            .into_iter()
            .map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec)))
            .collect(),
        None => return Ok(()),
    };
    for (k, v) in &records {
        h.make_room(st)?;
        write_tree(h.tree(), h.parts(st).0, k, v.as_deref())?;
    }
    if let Some(ib) = h.parts(st).1.ib.as_mut() {
        ib.take(page);
    }
    Ok(())
}

/// Keeps the insert buffer within its budget, and with `slot_for`
/// makes a stack node free for that page: drops cold record-less
/// nodes, then applies the coldest pages' records in page-id order.
fn relieve<H: Host>(h: &H, st: &mut H::State, slot_for: Option<PageId>) -> Result<()> {
    for _round in 0..4 {
        let batch = match h.parts(st).1.ib.as_mut() {
            Some(ib) => {
                let full = slot_for.is_some_and(|p| ib.needs_room(p));
                if !full && !ib.over_budget() {
                    return Ok(());
                }
                ib.prune(full);
                let full = slot_for.is_some_and(|p| ib.needs_room(p));
                if !full && !ib.over_budget() {
                    return Ok(());
                }
                ib.coldest_batch(ib.budget() / 16)
            }
            None => return Ok(()),
        };
        if batch.is_empty() {
            return Ok(());
        }
        apply_pages(h, st, &batch, true)?;
    }
    Ok(())
}
