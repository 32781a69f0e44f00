//! The log-structured leaf (paper §4.1) and its lock-free reading.
//!
//! A leaf owns the block space `[anchor, last]`; `anchor` is fixed for the
//! leaf's life, `last` belongs to the leaf's current [`Log`]. A log's
//! `last` only ever shrinks in place, under the leaf's lock, and only past
//! every entry the log holds (a split that hands the top of the space to a
//! new leaf, linked before the shrink is published). A log is a
//! preallocated array of `capacity` entries, filled oldest first; entries
//! below its published length are never written again. Appends write the
//! next slot and then publish the new length (release), so a reader that
//! loads the length (acquire) sees a consistent prefix without locking.
//!
//! A log stores its entries in one of two slot formats, fixed when it is
//! built: compact slots hold a range as two 32-bit offsets from the log's
//! `base` (16 bytes with an 8-byte value, against 24 for a plain entry),
//! wide slots hold the range as it is. A log is compact when every entry it
//! is built with fits the offsets, and a leaf whose space spans fewer than
//! 2^32 blocks always is (its base is its anchor). An append that does not
//! fit a compact log is refused like an append to a full one, and the
//! writer rebuilds the log, which picks the format again.
//!
//! GC, split and merge never edit a log's entries in place: they build a
//! new log and swap the leaf's pointer (the old one is retired through
//! epoch-based reclamation). The one exception is the fill split of a leaf
//! written in address order, which only shrinks the bound past every
//! entry. A reader therefore always works on an immutable snapshot of one
//! leaf's entries and never has to retry: with the old bound it sees the
//! leaf as it was before the split, with the new one it moves on to the
//! leaf that took the rest. This is what the paper's per-leaf version
//! numbers (V_GC, V_split, V_merge) guard against, achieved by
//! copy-on-write instead. The header keeps the paper's deleted bit and the
//! fragmentation counter N_frag.
//!
//! Writers hold the leaf's lock for every change to the leaf: appending,
//! swapping its log, changing its `next` pointer, and changing the `prev`
//! pointer of its right neighbour.

use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::mem::{align_of, size_of, MaybeUninit};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use std::alloc::Layout;

use crossbeam_epoch::{Atomic, Guard, Owned, Pointable, Shared};
use parking_lot::lock_api::RawMutex as _;
use parking_lot::RawMutex;

use crate::entry::{Entry, EntryBuf};
use crate::range::BlockRange;
use crate::value::RangeValue;

const DELETED: u32 = 1 << 31;

/// The `shape` bit marking a log of wide slots.
const WIDE: u32 = 1 << 31;

/// A range as two offsets from its log's base, and its value.
#[repr(C)]
#[derive(Clone, Copy)]
struct Compact<V> {
    lo: u32,
    hi: u32,
    value: V,
}

impl<V: Copy> Compact<V> {
    /// `e` as offsets from `base`; `e` must fit (see [`fits`]).
    fn of(e: &Entry<V>, base: u64) -> Self {
        Self {
            lo: (e.range.l() - base) as u32,
            hi: (e.range.r() - base) as u32,
            value: e.value,
        }
    }

    fn entry(&self, base: u64) -> Entry<V> {
        Entry {
            range: BlockRange::ordered(base + self.lo as u64, base + self.hi as u64),
            value: self.value,
        }
    }
}

/// Words (8 bytes) one slot of the given format takes.
const fn stride<V>(wide: bool) -> usize {
    if wide {
        size_of::<Entry<V>>().div_ceil(8)
    } else {
        size_of::<Compact<V>>().div_ceil(8)
    }
}

/// A leaf's entries and the upper end of its space, in one allocation:
/// this header followed by the slots (so a lookup touches the header and
/// the newest entries in neighbouring cache lines).
#[repr(C)]
pub(crate) struct Log<V> {
    /// Inclusive upper bound of the leaf's space (see [`Log::last`]).
    last: AtomicU64,
    /// The block compact slots count from.
    base: u64,
    len: AtomicU32,
    /// Slots allocated, and [`WIDE`].
    shape: u32,
    _value: PhantomData<V>,
    words: [UnsafeCell<MaybeUninit<u64>>],
}

/// The sized prefix of [`Log`], for its layout.
#[repr(C)]
struct LogHeader<V> {
    last: AtomicU64,
    base: u64,
    len: AtomicU32,
    shape: u32,
    _value: PhantomData<V>,
    words: [UnsafeCell<MaybeUninit<u64>>; 0],
}

// SAFETY: slots below `len` are immutable once published; the one slot a
// writer fills is above `len` and is only touched under the leaf's lock.
unsafe impl<V: Send + Sync> Sync for Log<V> {}
// SAFETY: the log owns plain `Copy` data.
unsafe impl<V: Send + Sync> Send for Log<V> {}

/// The allocation of a log of `words` slot words, and the words' offset.
fn log_layout<V>(words: usize) -> Option<(Layout, usize)> {
    let (l, off) = Layout::new::<LogHeader<V>>()
        .extend(Layout::array::<u64>(words).ok()?)
        .ok()?;
    Some((l.pad_to_align(), off))
}

fn shape_words<V>(shape: u32) -> usize {
    (shape & !WIDE) as usize * stride::<V>(shape & WIDE != 0)
}

/// How a log is made: base, format, upper bound, slots, and the entries to
/// copy in (`n` entries at `src`, read only during `init`).
pub(crate) struct LogInit<V> {
    last: u64,
    base: u64,
    shape: u32,
    src: *const Entry<V>,
    n: usize,
}

// `init` allocates the layout `log_layout(shape_words(shape))` and writes
// the header and `n <=` slots entries; `deref` rebuilds the fat pointer
// from the stored shape; `drop` frees the same layout (entries are
// `Copy`, nothing to drop). The address is aligned to `ALIGN`, and every
// slot to 8 bytes, which `Log::new` checks is enough for the value type.
impl<V: RangeValue> Pointable for Log<V> {
    const ALIGN: usize = align_of::<LogHeader<V>>();
    type Init = LogInit<V>;

    unsafe fn init(init: Self::Init) -> usize {
        let Some((layout, _)) = log_layout::<V>(shape_words::<V>(init.shape)) else {
            std::alloc::handle_alloc_error(Layout::new::<LogHeader<V>>());
        };
        // SAFETY: the layout has a non-zero size (the header).
        let p = unsafe { std::alloc::alloc(layout) };
        if p.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        let h = p.cast::<LogHeader<V>>();
        // SAFETY: `p` is a fresh allocation of `layout`, which holds the
        // header and the slots behind it; `Log::new` made `n` at most the
        // slot count and checked that every entry fits the format.
        unsafe {
            std::ptr::addr_of_mut!((*h).last).write(AtomicU64::new(init.last));
            std::ptr::addr_of_mut!((*h).base).write(init.base);
            std::ptr::addr_of_mut!((*h).len).write(AtomicU32::new(init.n as u32));
            std::ptr::addr_of_mut!((*h).shape).write(init.shape);
            let src = std::slice::from_raw_parts(init.src, init.n);
            let slots = (*Self::deref(p as usize)).slot_ptr(0);
            if init.shape & WIDE != 0 {
                for (i, e) in src.iter().enumerate() {
                    slots
                        .add(i * stride::<V>(true))
                        .cast::<Entry<V>>()
                        .write(*e);
                }
            } else {
                for (i, e) in src.iter().enumerate() {
                    slots
                        .add(i * stride::<V>(false))
                        .cast::<Compact<V>>()
                        .write(Compact::of(e, init.base));
                }
            }
        }
        p as usize
    }

    unsafe fn deref<'a>(ptr: usize) -> &'a Self {
        // SAFETY: `ptr` came from `init`; the header is initialised.
        let words = shape_words::<V>(unsafe { (*(ptr as *const LogHeader<V>)).shape });
        let fat = std::ptr::slice_from_raw_parts(ptr as *const UnsafeCell<MaybeUninit<u64>>, words)
            as *const Log<V>;
        // SAFETY: `Log` is `LogHeader` with its words as a trailing slice
        // of length `words`, laid out as `init` allocated it.
        unsafe { &*fat }
    }

    unsafe fn deref_mut<'a>(ptr: usize) -> &'a mut Self {
        // SAFETY: as in `deref`; the caller has exclusive access.
        let words = shape_words::<V>(unsafe { (*(ptr as *const LogHeader<V>)).shape });
        let fat =
            std::ptr::slice_from_raw_parts_mut(ptr as *mut UnsafeCell<MaybeUninit<u64>>, words)
                as *mut Log<V>;
        // SAFETY: as in `deref`.
        unsafe { &mut *fat }
    }

    unsafe fn drop(ptr: usize) {
        // SAFETY: `ptr` came from `init` and is dropped once.
        let words = shape_words::<V>(unsafe { (*(ptr as *const LogHeader<V>)).shape });
        if let Some((layout, _)) = log_layout::<V>(words) {
            // SAFETY: same layout as allocated in `init`.
            unsafe { std::alloc::dealloc(ptr as *mut u8, layout) };
        }
    }
}

/// Whether `e` fits a compact slot counted from `base`.
fn fits<V>(base: u64, e: &Entry<V>) -> bool {
    e.range.l() >= base && e.range.r() - base <= u32::MAX as u64
}

impl<V: RangeValue> Log<V> {
    /// A new log for a leaf anchored at `anchor`, holding `entries` with
    /// room for `cap` (at least as many).
    pub fn new(anchor: u64, last: u64, cap: usize, entries: &[Entry<V>]) -> Owned<Log<V>> {
        const {
            assert!(align_of::<V>() <= 8, "slots are 8-byte aligned");
        }
        // One pass for the entries' extent.
        let (low, high) = entries.iter().fold((u64::MAX, 0), |(lo, hi), e| {
            (lo.min(e.range.l()), hi.max(e.range.r()))
        });
        let base = if last - anchor <= u32::MAX as u64 || entries.is_empty() {
            anchor
        } else {
            low
        };
        let wide = !entries.is_empty() && (low < base || high - base > u32::MAX as u64);
        let cap = cap.max(entries.len()).min((WIDE - 1) as usize) as u32;
        // `init` copies the entries before returning; the pointer is not kept.
        Owned::init(LogInit {
            last,
            base,
            shape: cap | if wide { WIDE } else { 0 },
            src: entries.as_ptr(),
            n: entries.len().min(cap as usize),
        })
    }

    /// Inclusive upper bound of the leaf's space. It may shrink between
    /// two loads, so a reader loads it once per visit to the log.
    pub fn last(&self) -> u64 {
        self.last.load(Ordering::Acquire)
    }

    /// Hands `[last + 1, ..]` of this log's space to the leaf linked after
    /// it.
    ///
    /// # Safety
    /// The caller holds the lock of the leaf whose current log this is,
    /// every entry ends at or below `last`, and the leaf that takes the
    /// rest of the space is already linked as this leaf's `next`.
    pub unsafe fn shrink_last(&self, last: u64) {
        debug_assert!(last <= self.last());
        // Release: a reader that sees the new bound also sees the link.
        self.last.store(last, Ordering::Release);
    }

    /// Whether the entries, oldest first, are disjoint, ascending, and not
    /// tombstones, all ending below `below`: a leaf being filled in address
    /// order, holding nothing a collection could free.
    pub fn ascending_below(&self, below: u64) -> bool {
        let mut prev_r: Option<u64> = None;
        for e in self.iter() {
            if e.value.is_tombstone() || prev_r.is_some_and(|r| e.range.l() <= r) {
                return false;
            }
            prev_r = Some(e.range.r());
        }
        prev_r.is_none_or(|r| r < below)
    }

    pub fn is_wide(&self) -> bool {
        self.shape & WIDE != 0
    }

    /// Allocated slots.
    pub fn slots(&self) -> usize {
        (self.shape & !WIDE) as usize
    }

    /// Published entries.
    pub fn len(&self) -> usize {
        (self.len.load(Ordering::Acquire) as usize).min(self.slots())
    }

    /// Where slot `i` starts; derived from the whole word slice, so it may
    /// address all of the slot's words.
    fn slot_ptr(&self, i: usize) -> *mut u64 {
        let off = (i * stride::<V>(self.is_wide())).min(self.words.len());
        // SAFETY: `off` is at most the slice's length, so the pointer is
        // inside the allocation or one past its end.
        UnsafeCell::raw_get(unsafe { self.words.as_ptr().add(off) }).cast::<u64>()
    }

    /// Entry `i` (below [`Log::len`]).
    fn at(&self, i: usize) -> Entry<V> {
        let p = self.slot_ptr(i);
        // SAFETY: slot `i` lies inside `words` (`i` is below the slot
        // count, and each slot is `stride` words); it was written with
        // this format before `len` covering it was published (release,
        // paired with the acquire in `len`) and is never written again;
        // words are 8-byte aligned, enough for both formats.
        unsafe {
            if self.is_wide() {
                p.cast::<Entry<V>>().read()
            } else {
                p.cast::<Compact<V>>().read().entry(self.base)
            }
        }
    }

    /// Writes slot `i`.
    ///
    /// # Safety
    /// `i` is below the slot count and above the published length, no
    /// other thread writes it, and `e` fits the format.
    unsafe fn write(&self, i: usize, e: Entry<V>) {
        let p = self.slot_ptr(i);
        // SAFETY: forwarded from the caller; the slot's words are inside
        // `words` and nobody reads them until `len` is published.
        unsafe {
            if self.is_wide() {
                p.cast::<Entry<V>>().write(e);
            } else {
                p.cast::<Compact<V>>().write(Compact::of(&e, self.base));
            }
        }
    }

    /// Appends the published entries, oldest first, to `out`.
    pub fn copy_into(&self, out: &mut EntryBuf<V>) {
        let n = self.len();
        let p = self.slot_ptr(0);
        out.reserve(n);
        // SAFETY (both arms): the first `n` slots are published entries of
        // this format, `stride` words apart (see `at`).
        if self.is_wide() {
            out.extend(
                (0..n).map(|i| unsafe { p.add(i * stride::<V>(true)).cast::<Entry<V>>().read() }),
            );
        } else {
            let base = self.base;
            out.extend((0..n).map(|i| {
                let c = unsafe { p.add(i * stride::<V>(false)).cast::<Compact<V>>().read() };
                c.entry(base)
            }));
        }
    }

    /// The published entries, oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = Entry<V>> + ExactSizeIterator + '_ {
        (0..self.len()).map(move |i| self.at(i))
    }

    /// The published entries that overlap `target`, newest first. The
    /// test runs on the stored form (offsets, for compact slots), so
    /// entries outside `target` are never decoded.
    pub fn overlapping(&self, target: BlockRange) -> Overlapping<'_, V> {
        let n = self.len();
        let (lo, hi, left) = if self.is_wide() {
            (target.l(), target.r(), n)
        } else if target.r() < self.base || target.l().saturating_sub(self.base) > u32::MAX as u64 {
            // Every compact entry lies inside [base, base + 2^32).
            (0, 0, 0)
        } else {
            (
                target.l().saturating_sub(self.base),
                (target.r() - self.base).min(u32::MAX as u64),
                n,
            )
        };
        Overlapping {
            slots: self.slot_ptr(0),
            base: self.base,
            wide: self.is_wide(),
            left,
            lo,
            hi,
            _log: PhantomData,
        }
    }

    /// Appends `e`; false if the log is full or `e` does not fit its
    /// format.
    ///
    /// # Safety
    /// The caller holds the lock of the leaf whose current log this is, so
    /// no other thread writes the slot.
    pub unsafe fn push(&self, e: Entry<V>) -> bool {
        let n = self.len.load(Ordering::Relaxed) as usize;
        if n >= self.slots() || !(self.is_wide() || fits(self.base, &e)) {
            return false;
        }
        // SAFETY: slot `n` is allocated and above the published length,
        // so no reader looks at it, the caller's lock excludes other
        // writers, and `e` fits the format.
        unsafe { self.write(n, e) };
        self.len.store(n as u32 + 1, Ordering::Release);
        true
    }

    /// Bytes one slot of this log's format takes.
    pub fn slot_bytes(&self) -> usize {
        stride::<V>(self.is_wide()) * 8
    }

    pub fn heap_bytes(&self) -> usize {
        log_layout::<V>(shape_words::<V>(self.shape)).map_or(0, |(l, _)| l.size())
    }
}

/// See [`Log::overlapping`]; `lo` and `hi` bound the target as stored
/// (offsets from the base for compact slots).
pub(crate) struct Overlapping<'a, V> {
    /// The log's first slot; the log outlives `'a`.
    slots: *const u64,
    base: u64,
    wide: bool,
    /// Slots not yet looked at: `0..left`.
    left: usize,
    lo: u64,
    hi: u64,
    _log: PhantomData<&'a Log<V>>,
}

impl<V: RangeValue> Overlapping<'_, V> {
    /// The next slot down whose stored form `S` (`Entry<V>` for wide logs,
    /// `Compact<V>` for compact ones: the log's format) `hit` accepts.
    fn next_as<S: Copy>(&mut self, hit: impl Fn(&S) -> bool) -> Option<S> {
        let stride = size_of::<S>().div_ceil(8);
        while self.left > 0 {
            self.left -= 1;
            // SAFETY: as in `Log::at`: slot `left` is a published slot of
            // the log `'a` borrows, stored as `S`, `stride` words apart.
            let slot = unsafe { self.slots.add(self.left * stride).cast::<S>().read() };
            if hit(&slot) {
                return Some(slot);
            }
        }
        None
    }
}

impl<V: RangeValue> Iterator for Overlapping<'_, V> {
    type Item = Entry<V>;

    fn next(&mut self) -> Option<Entry<V>> {
        let (lo, hi, base) = (self.lo, self.hi, self.base);
        if self.wide {
            self.next_as(|e: &Entry<V>| e.range.l() <= hi && e.range.r() >= lo)
        } else {
            self.next_as(|c: &Compact<V>| c.lo as u64 <= hi && c.hi as u64 >= lo)
                .map(|c| c.entry(base))
        }
    }
}

/// A leaf of the index.
pub(crate) struct Leaf<V: RangeValue> {
    pub anchor: u64,
    lock: RawMutex,
    /// Deleted bit (31) and N_frag (low bits).
    header: AtomicU32,
    pub log: Atomic<Log<V>>,
    pub next: Atomic<Leaf<V>>,
    pub prev: Atomic<Leaf<V>>,
}

impl<V: RangeValue> Leaf<V> {
    pub fn new(anchor: u64, log: Owned<Log<V>>) -> Self {
        Self {
            anchor,
            lock: RawMutex::INIT,
            header: AtomicU32::new(0),
            log: Atomic::from(log),
            next: Atomic::null(),
            prev: Atomic::null(),
        }
    }

    pub fn lock(&self) {
        self.lock.lock();
    }

    pub fn try_lock(&self) -> bool {
        self.lock.try_lock()
    }

    /// # Safety
    /// The calling thread holds the lock.
    pub unsafe fn unlock(&self) {
        // SAFETY: forwarded from the caller.
        unsafe { self.lock.unlock() };
    }

    pub fn is_deleted(&self) -> bool {
        self.header.load(Ordering::Acquire) & DELETED != 0
    }

    /// Marks the leaf deleted (under its lock).
    pub fn mark_deleted(&self) {
        self.header.fetch_or(DELETED, Ordering::Release);
    }

    pub fn frag(&self) -> u32 {
        self.header.load(Ordering::Relaxed) & !DELETED
    }

    /// Counts one fragmented insertion (under the lock); returns the count.
    pub fn bump_frag(&self) -> u32 {
        let h = self.header.load(Ordering::Relaxed);
        if h & !DELETED < DELETED - 1 {
            self.header.store(h + 1, Ordering::Relaxed);
        }
        (h & !DELETED) + 1
    }

    pub fn reset_frag(&self) {
        self.header.fetch_and(DELETED, Ordering::Relaxed);
    }

    /// The current log. Never null: a leaf is created with one and every
    /// swap installs another.
    pub fn current<'g>(&self, guard: &'g Guard) -> &'g Log<V> {
        let p = self.log.load(Ordering::Acquire, guard);
        // SAFETY: logs are only retired through the epoch after being
        // replaced, so one loaded under `guard` outlives it.
        unsafe { p.deref() }
    }

    pub fn next_leaf<'g>(&self, guard: &'g Guard) -> Option<&'g Leaf<V>> {
        let p: Shared<'g, Leaf<V>> = self.next.load(Ordering::Acquire, guard);
        // SAFETY: as for logs: leaves are retired through the epoch after
        // being unlinked.
        unsafe { p.as_ref() }
    }

    pub fn prev_leaf<'g>(&self, guard: &'g Guard) -> Option<&'g Leaf<V>> {
        let p: Shared<'g, Leaf<V>> = self.prev.load(Ordering::Acquire, guard);
        // SAFETY: see `next_leaf`.
        unsafe { p.as_ref() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::PhysicalRun;

    fn e(l: u64, r: u64, block: u64) -> Entry<PhysicalRun> {
        Entry::new(
            BlockRange::new(l, r).unwrap(),
            PhysicalRun::new(1, block).unwrap(),
        )
    }

    fn read(log: &Owned<Log<PhysicalRun>>) -> Vec<Entry<PhysicalRun>> {
        log.iter().collect()
    }

    #[test]
    fn a_narrow_leaf_is_compact_and_round_trips() {
        let anchor = 1 << 40;
        let entries = [
            e(anchor, anchor + 9, 5),
            e(anchor + 3, anchor + u32::MAX as u64, 7),
        ];
        let log = Log::new(anchor, anchor + u32::MAX as u64, 4, &entries);
        assert!(!log.is_wide());
        assert_eq!(read(&log), entries);
        // Compact slots are 16 bytes against a plain entry's 24.
        let wide = size_of::<LogHeader<PhysicalRun>>() + 4 * size_of::<Entry<PhysicalRun>>();
        assert_eq!(log.heap_bytes(), wide - 4 * 8);
        // SAFETY: the log is not shared.
        assert!(unsafe { log.push(e(anchor + 100, anchor + 200, 9)) });
        assert_eq!(log.len(), 3);
        assert_eq!(log.iter().last(), Some(e(anchor + 100, anchor + 200, 9)));
    }

    #[test]
    fn entries_too_far_apart_make_a_wide_log() {
        let entries = [e(10, 20, 1), e(10 + (1 << 33), 11 + (1 << 33), 2)];
        let log = Log::new(0, u64::MAX, 4, &entries);
        assert!(log.is_wide());
        assert_eq!(read(&log), entries);
        // A wide log takes any entry.
        // SAFETY: the log is not shared.
        assert!(unsafe { log.push(e(u64::MAX - 5, u64::MAX, 3)) });
        assert_eq!(log.iter().last(), Some(e(u64::MAX - 5, u64::MAX, 3)));
    }

    #[test]
    fn a_compact_log_refuses_what_does_not_fit_and_a_rebuild_takes_it() {
        // A wide leaf space: the base is the lowest entry.
        let log = Log::new(0, u64::MAX, 8, &[e(1000, 1010, 1)]);
        assert!(!log.is_wide());
        let below = e(999, 999, 2);
        let far = e(1000 + (1 << 32), 1000 + (1 << 32), 3);
        // SAFETY: the log is not shared.
        unsafe {
            assert!(!log.push(below));
            assert!(!log.push(far));
            assert!(log.push(e(2000, 3000, 4)));
        }
        assert_eq!(log.len(), 2);
        let mut all = read(&log);
        all.push(below);
        let rebuilt = Log::new(0, u64::MAX, 8, &all);
        assert!(!rebuilt.is_wide());
        assert_eq!(read(&rebuilt), all);
        all.push(far);
        let rebuilt = Log::new(0, u64::MAX, 8, &all);
        assert!(rebuilt.is_wide());
        assert_eq!(read(&rebuilt), all);
    }

    #[test]
    fn a_full_log_refuses_appends() {
        let log = Log::new(0, 100, 2, &[e(0, 1, 1), e(2, 3, 2)]);
        // SAFETY: the log is not shared.
        assert!(!unsafe { log.push(e(4, 5, 3)) });
        assert_eq!(log.slots(), 2);
        assert_eq!(log.len(), 2);
    }

    #[test]
    fn only_an_in_order_log_without_tombstones_ascends() {
        let ascends = |entries: &[Entry<PhysicalRun>], below| {
            Log::new(0, 1000, 8, entries).ascending_below(below)
        };
        assert!(ascends(&[], 0));
        assert!(ascends(&[e(0, 3, 1), e(4, 9, 2), e(20, 20, 3)], 21));
        // The bound must lie past the newest entry.
        assert!(!ascends(&[e(0, 3, 1), e(4, 9, 2)], 9));
        // Overlapping or out-of-order entries hold something to collect.
        assert!(!ascends(&[e(0, 3, 1), e(3, 9, 2)], 100));
        assert!(!ascends(&[e(10, 13, 1), e(0, 5, 2)], 100));
        let tomb = Entry::new(BlockRange::new(5, 6).unwrap(), PhysicalRun::TOMBSTONE);
        assert!(!ascends(&[e(0, 3, 1), tomb], 100));
    }

    #[test]
    fn a_shrunk_bound_is_what_readers_load() {
        let log = Log::new(0, 1000, 4, &[e(0, 3, 1), e(4, 9, 2)]);
        assert_eq!(log.last(), 1000);
        // SAFETY: the log is not shared; both entries end below 10.
        unsafe { log.shrink_last(9) };
        assert_eq!(log.last(), 9);
        assert_eq!(read(&log), [e(0, 3, 1), e(4, 9, 2)]);
    }
}
