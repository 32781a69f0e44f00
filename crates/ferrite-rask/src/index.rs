//! The RASK index: ART inner nodes over leaf anchors, and a doubly linked
//! list of log-structured leaves that partition the block space.
//!
//! Invariants:
//! - the live (not deleted) leaves, in list order, have increasing anchors
//!   and their spaces `[anchor, last]` tile `[0, u64::MAX]`; the first leaf
//!   (anchor 0) is never deleted;
//! - every entry of a leaf lies inside the leaf's space (a write that spans
//!   leaves is divided, the value through `RangeValue::divide`);
//! - within a leaf, a newer entry wins over an older one;
//! - between structural changes the ART maps every live leaf's anchor to
//!   it; it is updated under the locks of the leaves concerned, and a leaf
//!   leaves it before being retired, so what a pinned reader finds there
//!   is not freed before the reader unpins (though it may be deleted, or
//!   not the leaf holding the key asked for: readers check and walk);
//! - a deleted leaf's `prev` points at a leaf that held its space when it
//!   was deleted, so following `prev` from a deleted leaf ends at a live one.
//!
//! Concurrency (paper §6.2): readers take no lock, in the ART (see `art`)
//! or in a leaf; they read leaf snapshots whose entries are immutable and
//! whose bound only shrinks past them (see `leaf`), loading the bound once
//! per visit, and walk right
//! along `next`, re-locating when they meet a deleted leaf. Writers lock
//! one leaf at a time and hand the lock over left to right when a write
//! spans leaves; merging with the left neighbour only *tries* its lock, so
//! locks are always waited for in left-to-right order and writers cannot
//! deadlock. Retired logs and leaves are freed by epoch-based reclamation
//! (crossbeam-epoch).
//!
//! Finger: block-store I/O is local (a disk is written and read in runs),
//! so each thread remembers the leaf its last lookup found and starts the
//! next one there, stepping right a few leaves, before it asks the ART.
//! The finger is a raw pointer kept between operations, outside any epoch
//! guard, so it is trusted only while the index's count of retired leaves
//! is what it was when the finger was taken: a leaf is marked deleted
//! before that count moves, and a finger is only taken from a leaf seen
//! live after the count was read (see [`Rask::locate`]).

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_epoch::{self as epoch, Atomic, Guard, Owned, Shared};
use smallvec::SmallVec;

use crate::ablation::{self, UnfoundList};
use crate::art::Art;
use crate::entry::{Entry, EntryBuf, Segment};
use crate::error::{RaskError, Result};
use crate::gc;
use crate::leaf::{Leaf, Log};
use crate::range::BlockRange;
use crate::slot::Format;
use crate::split::{self, Settled};
use crate::value::RangeValue;

/// Tuning of the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaskOptions {
    /// Entries per leaf (the paper's default is 16).
    pub leaf_capacity: usize,
    /// Fragmented insertions into a leaf before it is merged with its left
    /// neighbour (or the two are resplit); `None` means capacity / 4.
    pub merge_threshold: Option<usize>,
}

impl Default for RaskOptions {
    fn default() -> Self {
        Self {
            leaf_capacity: 16,
            merge_threshold: None,
        }
    }
}

/// Counters and sizes of an index.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RaskStats {
    /// Leaf insertions that found the leaf full (collected, split, or both).
    pub full_leaf_writes: u64,
    /// Leaf insertions during which a collection ran (a full leaf whose
    /// entries are disjoint and tombstone-free has nothing to collect and
    /// goes straight to a split).
    pub gc_writes: u64,
    pub lightweight_gcs: u64,
    pub normal_gcs: u64,
    /// Leaf splits (one overflowing insertion each).
    pub splits: u64,
    /// Splits of a leaf being filled left to right, which keeps all but
    /// the newest entry (see `split`).
    pub append_splits: u64,
    /// Cut points chosen by those splits and by resplits (a split that had
    /// to cut a side again counts two).
    pub cuts: u64,
    /// Cuts that left the visible data of a written range in two leaves
    /// (the range fragmentation a range-conscious split avoids).
    pub dividing_cuts: u64,
    /// Cuts that fell inside a range as written that still held visible
    /// data, whether or not that data lay on both sides of the cut.
    pub straddling_cuts: u64,
    pub merges: u64,
    pub resplits: u64,
    /// Merges skipped because the left neighbour was busy.
    pub merge_skips: u64,
    /// Range pieces stored in a leaf other than the write's first.
    pub fragments: u64,
    pub leaves: u64,
    /// Leaves by the slot format of their log (see `slot`): 8-byte slots
    /// (16-bit range offsets, 32-bit value offsets).
    pub narrow_leaves: u64,
    /// 12-byte slots (32-bit range and value offsets).
    pub packed_leaves: u64,
    /// 32-bit range offsets and values as they are.
    pub compact_leaves: u64,
    /// Plain ranges and values: entries too far apart for offsets from
    /// one base.
    pub wide_leaves: u64,
    pub entries: u64,
    /// Bytes of leaves, logs and ART nodes, the sum of the four below (the
    /// heap the index holds also has its fixed part and scratch buffers).
    pub index_bytes: u64,
    /// Log slots holding entries.
    pub entry_bytes: u64,
    /// Log slots allocated and not yet written (room to append).
    pub free_slot_bytes: u64,
    /// Leaf structures and log headers.
    pub header_bytes: u64,
    /// ART nodes.
    pub art_bytes: u64,
}

#[derive(Default)]
struct Counters {
    full_leaf_writes: AtomicU64,
    gc_writes: AtomicU64,
    lightweight_gcs: AtomicU64,
    normal_gcs: AtomicU64,
    splits: AtomicU64,
    append_splits: AtomicU64,
    cuts: AtomicU64,
    dividing_cuts: AtomicU64,
    straddling_cuts: AtomicU64,
    merges: AtomicU64,
    resplits: AtomicU64,
    merge_skips: AtomicU64,
    fragments: AtomicU64,
}

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

thread_local! {
    static UNFOUND: RefCell<UnfoundList> = RefCell::new(UnfoundList::default());
    static SCRATCH: RefCell<gc::Scratch> = RefCell::new(gc::Scratch::default());
    static FINGER: Cell<Finger> = const { Cell::new(Finger::NONE) };
}

/// Where this thread's last lookup ended (see the module docs).
#[derive(Clone, Copy)]
struct Finger {
    /// [`Rask::id`] of the index, so a finger never crosses indexes.
    index: u64,
    /// [`Rask::retired`] when the leaf was seen live.
    retired: u64,
    leaf: usize,
    /// The leaf's space when it was seen, so a lookup far from it does
    /// not touch the leaf at all (a hint: the leaf is checked on use).
    anchor: u64,
    last: u64,
}

impl Finger {
    const NONE: Finger = Finger {
        index: 0,
        retired: 0,
        leaf: 0,
        anchor: 0,
        last: 0,
    };

    /// Whether `pos` lies in the leaf's space as seen, or within
    /// [`FINGER_STEPS`] spaces of that width right of it.
    fn near(&self, pos: u64) -> bool {
        let width = self.last.saturating_sub(self.anchor).saturating_add(1);
        let reach = self
            .last
            .saturating_add(width.saturating_mul(FINGER_STEPS as u64));
        self.anchor <= pos && pos <= reach
    }
}

/// Leaves a finger may step right before the ART is asked instead.
const FINGER_STEPS: usize = 2;

/// Source of [`Rask::id`]: ids are never reused, so a finger into a
/// dropped index cannot match a new one at the same address.
static NEXT_INDEX_ID: AtomicU64 = AtomicU64::new(1);

/// Runs `f` with this thread's collector buffers.
fn with_scratch<R>(f: impl FnOnce(&mut gc::Scratch) -> R) -> R {
    SCRATCH.with(|s| match s.try_borrow_mut() {
        Ok(mut sc) => f(&mut sc),
        Err(_) => f(&mut gc::Scratch::default()),
    })
}

/// A concurrent, in-memory range-as-a-key index.
pub struct Rask<V: RangeValue> {
    head: Atomic<Leaf<V>>,
    art: Art,
    cap: usize,
    merge_threshold: u32,
    c: Counters,
    id: u64,
    /// Leaves retired so far; bumped after a leaf is marked deleted and
    /// before it is handed to the epoch.
    retired: AtomicU64,
}

// SAFETY: all shared state is reached through atomics, locks and the epoch
// scheme described in the module docs; values are `Send + Sync`.
unsafe impl<V: RangeValue> Send for Rask<V> {}
// SAFETY: as above.
unsafe impl<V: RangeValue> Sync for Rask<V> {}

impl<V: RangeValue> Default for Rask<V> {
    fn default() -> Self {
        Self::build(16, 4)
    }
}

impl<V: RangeValue> Rask<V> {
    /// An empty index with the paper's defaults (16 entries per leaf).
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_options(o: RaskOptions) -> Result<Self> {
        if !(4..=128).contains(&o.leaf_capacity) {
            return Err(RaskError::BadCapacity(o.leaf_capacity));
        }
        let thr = o.merge_threshold.unwrap_or(o.leaf_capacity / 4).max(1);
        Ok(Self::build(
            o.leaf_capacity,
            thr.min(u32::MAX as usize) as u32,
        ))
    }

    fn build(cap: usize, merge_threshold: u32) -> Self {
        let head = Owned::new(Leaf::new(0, Log::new(0, u64::MAX, cap, &[])));
        // SAFETY: nothing else can see the index while it is built.
        let guard = unsafe { epoch::unprotected() };
        let head = head.into_shared(guard);
        let art = Art::new();
        art.insert(0, head.as_raw() as usize, Self::anchor_in_art, guard);
        Self {
            head: Atomic::from(head),
            art,
            cap,
            merge_threshold,
            c: Counters::default(),
            id: NEXT_INDEX_ID.fetch_add(1, Ordering::Relaxed),
            retired: AtomicU64::new(0),
        }
    }

    pub fn leaf_capacity(&self) -> usize {
        self.cap
    }

    /// Maps every block of `range` to `value` (divided per block run).
    pub fn put(&self, range: BlockRange, value: V) -> Result<()> {
        crate::value::validate(range, &value)?;
        self.write(range, value);
        Ok(())
    }

    /// Unmaps every block of `range`.
    pub fn delete(&self, range: BlockRange) {
        self.write(range, V::TOMBSTONE);
    }

    /// The latest value of every block of `range`: ascending segments that
    /// tile it exactly, `None` for blocks not mapped.
    pub fn get(&self, range: BlockRange) -> Vec<Segment<V>> {
        let mut out = Vec::new();
        self.get_into(range, &mut out);
        out
    }

    /// [`Rask::get`] appending to `out` (which it does not clear).
    pub fn get_into(&self, target: BlockRange, out: &mut Vec<Segment<V>>) {
        let guard = epoch::pin();
        let start = out.len();
        let mut pos = target.l();
        let mut leaf = self.locate(pos, &guard);
        UNFOUND.with(|u| {
            let mut unfound = u.borrow_mut();
            loop {
                let log = leaf.current(&guard);
                if leaf.is_deleted() || leaf.anchor > pos {
                    leaf = self.locate(pos, &guard);
                    continue;
                }
                let last = log.last();
                if last < pos {
                    leaf = match leaf.next_leaf(&guard) {
                        Some(n) => n,
                        None => self.locate(pos, &guard),
                    };
                    continue;
                }
                let hi = target.r().min(last);
                let part = BlockRange::ordered(pos, hi);
                log.search(part, &mut unfound, out);
                if hi == target.r() {
                    break;
                }
                pos = hi + 1;
                leaf = match leaf.next_leaf(&guard) {
                    Some(n) => n,
                    None => self.locate(pos, &guard),
                };
            }
        });
        ablation::coalesce_gaps(out, start);
    }

    fn head<'g>(&self, guard: &'g Guard) -> &'g Leaf<V> {
        // SAFETY: the head leaf is never deleted and lives as long as the index.
        unsafe { self.head.load(Ordering::Relaxed, guard).deref() }
    }

    /// The ART's `key_of`: the anchor of the leaf at `ptr`. The ART keeps
    /// no keys of its own and calls this only for the values it holds, or
    /// held when a pinned caller reached them.
    fn anchor_in_art(ptr: usize) -> u64 {
        // SAFETY: every call into the ART is made pinned, and a leaf is
        // removed from the ART before it is retired, so a leaf reached
        // through the ART is freed only after the caller unpins (see
        // `leaf_at`).
        unsafe { (*(ptr as *const Leaf<V>)).anchor }
    }

    fn leaf_at<'g>(&self, ptr: usize, _guard: &'g Guard) -> &'g Leaf<V> {
        // SAFETY: `ptr` was read from the ART under `guard`. The ART only
        // holds leaves not yet retired (one leaves it, under its lock,
        // before it is retired), so the leaf was live when the ART held it
        // and the guard keeps it from being freed since.
        unsafe { &*(ptr as *const Leaf<V>) }
    }

    /// A live leaf whose current space holds `pos` (no lock taken).
    fn locate<'g>(&self, pos: u64, guard: &'g Guard) -> &'g Leaf<V> {
        // Read before any leaf is checked for deletion: a leaf seen live
        // after this load cannot be freed before the count moves on.
        let retired = self.retired.load(Ordering::SeqCst);
        if let Some(leaf) = self.near_finger(pos, retired, guard) {
            return leaf;
        }
        let leaf = self.locate_from_art(pos, guard);
        if !leaf.is_deleted() {
            FINGER.set(Finger {
                index: self.id,
                retired,
                leaf: leaf as *const Leaf<V> as usize,
                anchor: leaf.anchor,
                last: leaf.current(guard).last(),
            });
        }
        leaf
    }

    /// The leaf holding `pos` if it is this thread's finger or a few
    /// leaves right of it.
    fn near_finger<'g>(&self, pos: u64, retired: u64, guard: &'g Guard) -> Option<&'g Leaf<V>> {
        let f = FINGER.get();
        if f.index != self.id || f.retired != retired || f.leaf == 0 || !f.near(pos) {
            return None;
        }
        // No leaf was retired since the finger's leaf was seen live, and
        // one retired from now on is freed only after `guard` is dropped.
        let mut leaf = self.leaf_at(f.leaf, guard);
        for step in 0..=FINGER_STEPS {
            if leaf.is_deleted() || leaf.anchor > pos {
                return None;
            }
            let last = leaf.current(guard).last();
            if last >= pos {
                if step > 0 {
                    FINGER.set(Finger {
                        leaf: leaf as *const Leaf<V> as usize,
                        anchor: leaf.anchor,
                        last,
                        ..f
                    });
                }
                return Some(leaf);
            }
            leaf = leaf.next_leaf(guard)?;
        }
        None
    }

    /// [`Rask::locate`] through the ART.
    fn locate_from_art<'g>(&self, pos: u64, guard: &'g Guard) -> &'g Leaf<V> {
        let start = self.art.predecessor(pos, Self::anchor_in_art, guard);
        let mut leaf = match start {
            Some(p) => self.leaf_at(p, guard),
            None => self.head(guard),
        };
        loop {
            if leaf.is_deleted() || leaf.anchor > pos {
                // A structural change is in flight: step back towards the
                // leaf that absorbed this space.
                std::hint::spin_loop();
                leaf = leaf.prev_leaf(guard).unwrap_or_else(|| self.head(guard));
                continue;
            }
            if leaf.current(guard).last() >= pos {
                return leaf;
            }
            leaf = leaf.next_leaf(guard).unwrap_or_else(|| self.head(guard));
        }
    }

    /// Locks the leaf holding `pos` (the caller holds no leaf lock).
    fn lock_for<'g>(&self, pos: u64, guard: &'g Guard) -> &'g Leaf<V> {
        loop {
            let leaf = self.locate(pos, guard);
            leaf.lock();
            if !leaf.is_deleted() && leaf.anchor <= pos && leaf.current(guard).last() >= pos {
                return leaf;
            }
            // SAFETY: locked just above.
            unsafe { leaf.unlock() };
        }
    }

    /// Locks the leaf holding `pos`, which lies right of `held` (locked by
    /// the caller). Only leaves right of `held` are waited for.
    fn lock_right_of<'g>(&self, held: &'g Leaf<V>, pos: u64, guard: &'g Guard) -> &'g Leaf<V> {
        loop {
            let mut leaf = held.next_leaf(guard).unwrap_or_else(|| self.head(guard));
            while !leaf.is_deleted() && leaf.current(guard).last() < pos {
                leaf = leaf.next_leaf(guard).unwrap_or_else(|| self.head(guard));
            }
            if leaf.is_deleted() || leaf.anchor > pos || leaf.anchor <= held.anchor {
                std::hint::spin_loop();
                continue;
            }
            leaf.lock();
            if !leaf.is_deleted() && leaf.anchor <= pos && leaf.current(guard).last() >= pos {
                return leaf;
            }
            // SAFETY: locked just above.
            unsafe { leaf.unlock() };
        }
    }

    fn write(&self, range: BlockRange, value: V) {
        let guard = epoch::pin();
        let whole = Entry::new(range, value);
        let mut pos = range.l();
        let mut leaf = self.lock_for(pos, &guard);
        loop {
            let last = leaf.current(&guard).last();
            let seg_end = range.r().min(last);
            let fragment = pos > range.l();
            if fragment {
                bump(&self.c.fragments, 1);
            }
            let frag = if fragment || value.is_tombstone() {
                leaf.bump_frag()
            } else {
                leaf.frag()
            };
            let split = self.append(leaf, whole.part(BlockRange::ordered(pos, seg_end)), &guard);
            let mut cur = leaf;
            if !split && frag > self.merge_threshold {
                cur = self.merge_with_left(leaf, &guard);
            }
            if seg_end == range.r() {
                // SAFETY: `cur` is the leaf this thread holds.
                unsafe { cur.unlock() };
                return;
            }
            pos = seg_end + 1;
            let next = self.lock_right_of(cur, pos, &guard);
            // SAFETY: hand-over: the next leaf is locked, release this one.
            unsafe { cur.unlock() };
            leaf = next;
        }
    }

    /// Appends `e` to the locked `leaf`, collecting or splitting it when
    /// full. Returns true if the leaf was split.
    fn append(&self, leaf: &Leaf<V>, e: Entry<V>, guard: &Guard) -> bool {
        let log = leaf.current(guard);
        // SAFETY: the caller holds `leaf`'s lock and `log` is its current log.
        if unsafe { log.push(e) } {
            return false;
        }
        if log.len() >= self.cap && !e.value.is_tombstone() && log.ascending_below(e.range.l()) {
            self.split_off_newest(leaf, log, e, guard);
            return true;
        }
        let n = log.len();
        if 0 < n && n < self.cap && n >= log.slots() {
            // The log was allocated smaller than the leaf's capacity: grow
            // it, its slots copied as they are, if `e` fits its format. A
            // rebuild would choose no smaller format: a log holding
            // entries was built with some (one built empty has no slots),
            // and the format chosen for them still has to hold them.
            let grown = log.grown(self.slots_for((n + 1) * 2));
            // SAFETY: the new log is not published yet; this thread holds
            // the leaf's lock.
            if unsafe { grown.push(e) } {
                self.swap_log(leaf, grown, guard);
                return false;
            }
        }
        let mut entries = EntryBuf::new();
        log.copy_into(&mut entries);
        let full = entries.len() >= self.cap;
        entries.push(e);
        if !full {
            // Room left below the capacity, but `e` needs a wider format:
            // rebuild, which chooses it.
            let slots = self.slots_for(entries.len() * 2);
            self.swap_log(
                leaf,
                Log::new(leaf.anchor, log.last(), slots, &entries),
                guard,
            );
            return false;
        }
        bump(&self.c.full_leaf_writes, 1);
        let mut settled = Settled::new();
        let split = with_scratch(|sc| {
            // Disjoint entries without tombstones (a growing leaf) hold
            // nothing to collect.
            if !gc::disjoint_values(&entries, sc) {
                bump(&self.c.gc_writes, 1);
                bump(&self.c.lightweight_gcs, 1);
                let freed = gc::lightweight_with(&mut entries, sc);
                // Normal GC runs when the lightweight stage frees (almost)
                // nothing, as a single freed slot would only defer the next
                // GC by one write; and before a split, which would
                // otherwise copy garbage into both halves.
                if freed <= self.cap / 16 || entries.len() > self.fill_limit() {
                    bump(&self.c.normal_gcs, 1);
                    gc::collect_overlapping(&mut entries, sc);
                }
            }
            // A collection that leaves the leaf more than five eighths
            // full would be repeated within a few writes: split instead,
            // into pieces with room to grow.
            if entries.len() <= self.fill_limit() {
                return false;
            }
            if split::settle_append(&entries, leaf.anchor, self.cap, &mut settled) {
                bump(&self.c.append_splits, 1);
            } else {
                split::settle(&entries, leaf.anchor, self.fill_limit(), sc, &mut settled);
            }
            true
        });
        if !split {
            self.swap_log(leaf, self.log_for(leaf.anchor, log.last(), &entries), guard);
            return false;
        }
        if settled.pieces.len() == 1 {
            self.swap_log(
                leaf,
                self.log_for(leaf.anchor, log.last(), settled.piece(0)),
                guard,
            );
            return false;
        }
        bump(&self.c.splits, 1);
        bump(&self.c.cuts, settled.cuts as u64);
        bump(&self.c.dividing_cuts, settled.dividing_cuts as u64);
        bump(&self.c.straddling_cuts, settled.straddling_cuts as u64);
        let after = leaf.next.load(Ordering::Acquire, guard);
        self.install(leaf, log.last(), &settled, after, guard);
        true
    }

    /// The fill split of a full `leaf` (locked, `log` its current log)
    /// whose entries ascend, each past the one before, with `e` past them
    /// all: `e` alone starts a new leaf and the old one keeps its log as it
    /// is, its space shrunk to end below `e`. This is the split
    /// [`split::settle_append`] makes, without copying the full log.
    fn split_off_newest(&self, leaf: &Leaf<V>, log: &Log<V>, e: Entry<V>, guard: &Guard) {
        bump(&self.c.full_leaf_writes, 1);
        bump(&self.c.splits, 1);
        bump(&self.c.append_splits, 1);
        bump(&self.c.cuts, 1);
        let anchor = e.range.l();
        let after = leaf.next.load(Ordering::Acquire, guard);
        let fresh = Owned::new(Leaf::new(
            anchor,
            self.log_for(anchor, log.last(), std::slice::from_ref(&e)),
        ));
        // Locked until the ART holds it, as in `install`.
        fresh.lock();
        fresh.next.store(after, Ordering::Relaxed);
        fresh
            .prev
            .store(Shared::from(leaf as *const Leaf<V>), Ordering::Relaxed);
        let fresh = fresh.into_shared(guard);
        // SAFETY: `after` is live (or null) under `guard`; its prev pointer
        // is protected by the lock of its left neighbour, held here.
        if let Some(n) = unsafe { after.as_ref() } {
            n.prev.store(fresh, Ordering::Release);
        }
        leaf.next.store(fresh, Ordering::Release);
        // SAFETY: the caller holds the leaf's lock and `log` is its current
        // log; every entry ends below `anchor` (`ascending_below`), and the
        // leaf holding the rest of the space is linked just above.
        unsafe { log.shrink_last(anchor - 1) };
        self.art
            .insert(anchor, fresh.as_raw() as usize, Self::anchor_in_art, guard);
        // SAFETY: locked by this thread when it was created, above.
        unsafe { fresh.deref().unlock() };
    }

    /// Most entries a leaf keeps after a collection or a split.
    fn fill_limit(&self) -> usize {
        (self.cap * 5 / 8).max(2)
    }

    /// Slots to allocate for a log meant to hold `n` entries: logs start
    /// small and grow by doubling up to the leaf capacity, so a leaf's
    /// memory follows its entries rather than its capacity.
    fn slots_for(&self, n: usize) -> usize {
        n.clamp(4, self.cap)
    }

    /// A log for `entries` with room to grow by half again.
    fn log_for(&self, anchor: u64, last: u64, entries: &[Entry<V>]) -> Owned<Log<V>> {
        let n = entries.len();
        Log::new(anchor, last, self.slots_for(n + (n / 4).max(2)), entries)
    }

    fn swap_log(&self, leaf: &Leaf<V>, log: Owned<Log<V>>, guard: &Guard) {
        let old = leaf.log.swap(log, Ordering::AcqRel, guard);
        // SAFETY: the old log is unreachable from the leaf now; readers that
        // loaded it are pinned, so the epoch frees it only after them.
        unsafe { guard.defer_destroy(old) };
    }

    /// Makes the locked `leaf` hold `pieces[0]`, links fresh leaves for the
    /// other pieces between it and `after`, and registers them in the ART.
    /// `last` is the upper end of the space the pieces tile.
    ///
    /// The fresh leaves are locked from birth until they are in the ART.
    /// Once linked, a writer can reach one along `next` before it is
    /// registered; unlocked, the fresh leaf on its left would be free for
    /// that writer's merge, which would retire it and remove an anchor the
    /// ART does not hold yet, and the registration that follows would
    /// leave the ART pointing at a retired leaf.
    fn install<'g>(
        &self,
        leaf: &'g Leaf<V>,
        last: u64,
        settled: &Settled<V>,
        after: Shared<'g, Leaf<V>>,
        guard: &'g Guard,
    ) {
        let mut next = after;
        let mut upper = last;
        let mut created: SmallVec<[Shared<'g, Leaf<V>>; 4]> = SmallVec::new();
        for (i, p) in settled.pieces.iter().enumerate().skip(1).rev() {
            let fresh = Owned::new(Leaf::new(
                p.anchor,
                self.log_for(p.anchor, upper, settled.piece(i)),
            ));
            // Unreachable yet, so this cannot wait.
            fresh.lock();
            fresh.next.store(next, Ordering::Relaxed);
            let fresh = fresh.into_shared(guard);
            // SAFETY: `next` is a live leaf (or null) under `guard`; its
            // prev pointer is protected by the lock of its left neighbour,
            // which the caller holds.
            if let Some(n) = unsafe { next.as_ref() } {
                n.prev.store(fresh, Ordering::Release);
            }
            next = fresh;
            upper = p.anchor - 1;
            created.push(fresh);
        }
        let me = Shared::from(leaf as *const Leaf<V>);
        // SAFETY: as above.
        if let Some(n) = unsafe { next.as_ref() } {
            n.prev.store(me, Ordering::Release);
        }
        // Link before publishing the shrunk log: a reader that sees the new
        // `last` must also see the leaves that took the rest.
        leaf.next.store(next, Ordering::Release);
        self.swap_log(
            leaf,
            self.log_for(leaf.anchor, upper, settled.piece(0)),
            guard,
        );
        for s in &created {
            // SAFETY: just created and linked; alive under `guard`.
            let anchor = unsafe { s.deref() }.anchor;
            self.art
                .insert(anchor, s.as_raw() as usize, Self::anchor_in_art, guard);
        }
        for s in &created {
            // SAFETY: locked by this thread when it was created, above.
            unsafe { s.deref().unlock() };
        }
    }

    /// Merges the locked `leaf` into its left neighbour, or resplits the
    /// two, if that neighbour's lock is free. Returns the leftmost leaf the
    /// caller now holds (the neighbour after a merge or resplit, else `leaf`).
    fn merge_with_left<'g>(&self, leaf: &'g Leaf<V>, guard: &'g Guard) -> &'g Leaf<V> {
        let Some(p) = leaf.prev_leaf(guard) else {
            leaf.reset_frag();
            return leaf;
        };
        if !p.try_lock() {
            bump(&self.c.merge_skips, 1);
            return leaf;
        }
        let me = leaf as *const Leaf<V>;
        if p.is_deleted() || p.next.load(Ordering::Acquire, guard).as_raw() != me {
            // SAFETY: locked just above.
            unsafe { p.unlock() };
            return leaf;
        }
        let plog = p.current(guard);
        let llog = leaf.current(guard);
        let mut settled = Settled::new();
        with_scratch(|sc| {
            let mut left = EntryBuf::new();
            plog.copy_into(&mut left);
            gc::normal_with(&mut left, sc);
            let mut right = EntryBuf::new();
            llog.copy_into(&mut right);
            gc::normal_with(&mut right, sc);
            let merged = join_boundary(left, right, leaf.anchor);
            split::settle(&merged, p.anchor, self.cap, sc, &mut settled);
        });
        let pieces = &settled.pieces;
        if pieces.len() == 2 && pieces[1].anchor == leaf.anchor {
            // The collected leaves keep their boundary.
            self.swap_log(
                p,
                self.log_for(p.anchor, leaf.anchor - 1, settled.piece(0)),
                guard,
            );
            self.swap_log(
                leaf,
                self.log_for(leaf.anchor, llog.last(), settled.piece(1)),
                guard,
            );
            bump(&self.c.resplits, 1);
            leaf.reset_frag();
            p.reset_frag();
            // SAFETY: this thread holds `leaf`; `p` stays locked for the caller.
            unsafe { leaf.unlock() };
            return p;
        }
        let after = leaf.next.load(Ordering::Acquire, guard);
        // Out of the ART before any new leaf (possibly with the same anchor)
        // goes in; until the new state is published, lookups through `p`
        // still reach `leaf` by its `next` pointer.
        let removed = self.art.remove(leaf.anchor, Self::anchor_in_art, guard);
        debug_assert_eq!(removed, Some(me as usize), "the ART did not hold the leaf");
        if pieces.len() == 1 {
            // Publish the merged log first: a reader with the old `p` log
            // still finds `leaf` (and its frozen snapshot) through `next`.
            self.swap_log(
                p,
                self.log_for(p.anchor, llog.last(), settled.piece(0)),
                guard,
            );
            leaf.mark_deleted();
            self.retired.fetch_add(1, Ordering::SeqCst);
            p.next.store(after, Ordering::Release);
            // SAFETY: `after` is live under `guard`; its prev pointer is
            // protected by `leaf`'s lock, held here.
            if let Some(n) = unsafe { after.as_ref() } {
                n.prev
                    .store(Shared::from(p as *const Leaf<V>), Ordering::Release);
            }
            bump(&self.c.merges, 1);
        } else {
            bump(&self.c.resplits, 1);
            bump(&self.c.cuts, settled.cuts as u64);
            bump(&self.c.dividing_cuts, settled.dividing_cuts as u64);
            bump(&self.c.straddling_cuts, settled.straddling_cuts as u64);
            self.install(p, llog.last(), &settled, after, guard);
            leaf.mark_deleted();
            self.retired.fetch_add(1, Ordering::SeqCst);
        }
        p.reset_frag();
        // SAFETY: `leaf` is unlinked from the list and the ART; threads that
        // still see it are pinned. Its log goes with it.
        unsafe {
            guard.defer_destroy(leaf.log.load(Ordering::Acquire, guard));
            leaf.unlock();
            guard.defer_destroy(Shared::from(me));
        }
        p
    }

    /// The event counters alone (no walk of the leaves; sizes are zero).
    pub fn counters(&self) -> RaskStats {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RaskStats {
            full_leaf_writes: g(&self.c.full_leaf_writes),
            gc_writes: g(&self.c.gc_writes),
            lightweight_gcs: g(&self.c.lightweight_gcs),
            normal_gcs: g(&self.c.normal_gcs),
            splits: g(&self.c.splits),
            append_splits: g(&self.c.append_splits),
            cuts: g(&self.c.cuts),
            dividing_cuts: g(&self.c.dividing_cuts),
            straddling_cuts: g(&self.c.straddling_cuts),
            merges: g(&self.c.merges),
            resplits: g(&self.c.resplits),
            merge_skips: g(&self.c.merge_skips),
            fragments: g(&self.c.fragments),
            ..RaskStats::default()
        }
    }

    /// Counters plus a walk of the leaves for sizes.
    pub fn stats(&self) -> RaskStats {
        let guard = epoch::pin();
        let (mut leaves, mut entries) = (0u64, 0u64);
        let mut by_format = [0u64; 4];
        let (mut entry_bytes, mut free_slot_bytes, mut header_bytes) = (0u64, 0u64, 0u64);
        let mut leaf = Some(self.head(&guard));
        while let Some(l) = leaf {
            let log = l.current(&guard);
            leaves += 1;
            by_format[log.format() as usize] += 1;
            entries += log.len() as u64;
            let slot = log.slot_bytes() as u64;
            let slots = log.slots() as u64 * slot;
            entry_bytes += log.len() as u64 * slot;
            free_slot_bytes += slots - log.len() as u64 * slot;
            header_bytes += (std::mem::size_of::<Leaf<V>>() + log.heap_bytes()) as u64 - slots;
            leaf = l.next_leaf(&guard);
        }
        let art_bytes = self.art.heap_bytes(&guard) as u64;
        RaskStats {
            leaves,
            narrow_leaves: by_format[Format::Narrow as usize],
            packed_leaves: by_format[Format::Packed as usize],
            compact_leaves: by_format[Format::Compact as usize],
            wide_leaves: by_format[Format::Wide as usize],
            entries,
            index_bytes: entry_bytes + free_slot_bytes + header_bytes + art_bytes,
            entry_bytes,
            free_slot_bytes,
            header_bytes,
            art_bytes,
            ..self.counters()
        }
    }

    /// Calls `f` with every mapped run in ascending order, each with its
    /// latest value (no overlaps, no tombstones). Each leaf is read as one
    /// snapshot; hold writers off for a snapshot of the whole index.
    pub fn for_each_mapped(&self, mut f: impl FnMut(BlockRange, V)) {
        let guard = epoch::pin();
        let mut pos = 0u64;
        let mut out = Vec::new();
        let mut unfound = UnfoundList::default();
        let mut leaf = self.head(&guard);
        loop {
            let log = leaf.current(&guard);
            if leaf.is_deleted() || leaf.anchor > pos {
                leaf = self.locate(pos, &guard);
                continue;
            }
            let last = log.last();
            if last >= pos {
                out.clear();
                let part = BlockRange::ordered(pos, last);
                log.search(part, &mut unfound, &mut out);
                for s in &out {
                    if let Some(v) = s.value {
                        f(s.range, v);
                    }
                }
                if last == u64::MAX {
                    return;
                }
                pos = last + 1;
            }
            leaf = match leaf.next_leaf(&guard) {
                Some(n) => n,
                None => self.locate(pos, &guard),
            };
        }
    }

    /// Lets retired leaves, logs and ART nodes be freed now (for memory
    /// measurements). Each pass moves the epoch at most one step and frees
    /// a few bags of garbage; a single-threaded replay leaves a backlog
    /// that sixteen clear.
    pub fn reclaim(&self) {
        for _ in 0..16 {
            epoch::pin().flush();
        }
    }

    /// Checks the structural invariants; returns what is wrong.
    pub fn verify(&self) -> std::result::Result<(), String> {
        let guard = epoch::pin();
        let art = &self.art;
        let mut expect_anchor = 0u64;
        let mut leaf = Some(self.head(&guard));
        let mut count = 0usize;
        let mut prev: *const Leaf<V> = std::ptr::null();
        while let Some(l) = leaf {
            if l.is_deleted() {
                return Err(format!("deleted leaf {} is linked", l.anchor));
            }
            if l.anchor != expect_anchor {
                return Err(format!(
                    "leaf anchored at {} where {} was expected",
                    l.anchor, expect_anchor
                ));
            }
            if l.prev.load(Ordering::Acquire, &guard).as_raw() != prev {
                return Err(format!("leaf {} has a wrong prev pointer", l.anchor));
            }
            if art.get(l.anchor, Self::anchor_in_art, &guard) != Some(l as *const Leaf<V> as usize)
            {
                return Err(format!(
                    "the ART does not map anchor {} to its leaf",
                    l.anchor
                ));
            }
            let log = l.current(&guard);
            let last = log.last();
            if log.len() > self.cap || log.slots() > self.cap {
                return Err(format!("leaf {} holds more than its capacity", l.anchor));
            }
            for e in log.iter() {
                if e.range.l() < l.anchor || e.range.r() > last {
                    return Err(format!(
                        "entry {} lies outside leaf [{}, {}]",
                        e.range, l.anchor, last
                    ));
                }
            }
            count += 1;
            prev = l;
            leaf = l.next_leaf(&guard);
            if last == u64::MAX {
                if leaf.is_some() {
                    return Err("a leaf follows the one ending at u64::MAX".into());
                }
                break;
            }
            expect_anchor = last + 1;
            if leaf.is_none() {
                return Err(format!("the list ends at {} before u64::MAX", last));
            }
        }
        if art.len() != count {
            return Err(format!(
                "the ART holds {} anchors for {} leaves",
                art.len(),
                count
            ));
        }
        Ok(())
    }
}

/// Concatenates two adjacent leaves' collected entries, joining the runs
/// that meet at `boundary` into one entry when `RangeValue::merge` says
/// they are one run. The joined entry is placed after every entry that was
/// older than either part and before every entry newer than either, so no
/// block's newest entry changes.
fn join_boundary<V: RangeValue>(
    left: EntryBuf<V>,
    right: EntryBuf<V>,
    boundary: u64,
) -> EntryBuf<V> {
    let li = left.iter().rposition(|e| e.range.r() + 1 == boundary);
    let ri = right.iter().rposition(|e| e.range.l() == boundary);
    let joined = match (li, ri) {
        (Some(a), Some(b)) => {
            let (x, y) = (left[a], right[b]);
            V::merge(x.range, &x.value, y.range, &y.value).map(|v| {
                (
                    a,
                    b,
                    Entry::new(BlockRange::ordered(x.range.l(), y.range.r()), v),
                )
            })
        }
        _ => None,
    };
    let Some((a, b, m)) = joined else {
        let mut all = left;
        all.extend(right);
        return all;
    };
    let mut all = EntryBuf::with_capacity(left.len() + right.len() - 1);
    all.extend_from_slice(&left[..a]);
    all.extend_from_slice(&right[..b]);
    all.push(m);
    all.extend_from_slice(&left[a + 1..]);
    all.extend_from_slice(&right[b + 1..]);
    all
}

impl<V: RangeValue> Drop for Rask<V> {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no other thread can reach the index; retired
        // leaves and logs are owned by the epoch collector, not the list.
        unsafe {
            let guard = epoch::unprotected();
            let mut cur = self.head.load(Ordering::Relaxed, guard);
            while !cur.is_null() {
                let next = cur.deref().next.load(Ordering::Relaxed, guard);
                let log = cur.deref().log.load(Ordering::Relaxed, guard);
                if !log.is_null() {
                    drop(log.into_owned());
                }
                drop(cur.into_owned());
                cur = next;
            }
        }
    }
}
