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
//! A log stores its entries in one slot format ([`crate::slot`]), fixed
//! when it is built: the smallest that holds every entry it is built with,
//! ranges counted from the log's base block (the leaf's anchor, unless the
//! leaf's space spans 2^32 blocks or more) and values, where the type
//! allows, from the smallest value's image. An append that does not fit
//! the format is refused like an append to a full log, and the writer
//! rebuilds the log, which picks the format again.
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
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, Ordering};

use std::alloc::Layout;

use crossbeam_epoch::{Atomic, Guard, Owned, Pointable, Shared};
use parking_lot::lock_api::RawMutex as _;
use parking_lot::RawMutex;

use crate::ablation::{self, UnfoundList};
use crate::entry::{Entry, EntryBuf, Segment};
use crate::range::BlockRange;
use crate::slot::{with_slot, Bases, Format, Slot};
use crate::value::RangeValue;

const DELETED: u32 = 1 << 31;

/// Bits of a log's `shape` holding its format; the bytes after the header
/// are above (so a reference to the log is made with one shift).
const FORMAT_BITS: u32 = 2;

/// A leaf's entries and the upper end of its space, in one allocation:
/// this header followed by the slots (so a lookup touches the header and
/// the newest entries in neighbouring cache lines).
#[repr(C)]
pub(crate) struct Log<V> {
    /// Inclusive upper bound of the leaf's space (see [`Log::last`]).
    last: AtomicU64,
    /// The block range offsets count from.
    base: u64,
    len: AtomicU16,
    /// Slots allocated.
    slots: u16,
    /// Bytes after the header, above the format.
    shape: u32,
    _value: PhantomData<V>,
    /// The base image (formats that offset values), then the slots.
    bytes: [UnsafeCell<MaybeUninit<u8>>],
}

/// The sized prefix of [`Log`], for its layout.
#[repr(C)]
struct LogHeader<V> {
    last: AtomicU64,
    base: u64,
    len: AtomicU16,
    slots: u16,
    shape: u32,
    _value: PhantomData<V>,
    bytes: [UnsafeCell<MaybeUninit<u8>>; 0],
}

// SAFETY: slots below `len` are immutable once published; the one slot a
// writer fills is above `len` and is only touched under the leaf's lock.
unsafe impl<V: Send + Sync> Sync for Log<V> {}
// SAFETY: the log owns plain `Copy` data.
unsafe impl<V: Send + Sync> Send for Log<V> {}

/// The allocation of a log with `bytes` bytes after its header.
fn log_layout<V>(bytes: usize) -> Option<Layout> {
    let (l, _) = Layout::new::<LogHeader<V>>()
        .extend(Layout::array::<u8>(bytes).ok()?)
        .ok()?;
    Some(l.pad_to_align())
}

/// Bytes after the header of a log of this shape.
fn shape_bytes(shape: u32) -> usize {
    (shape >> FORMAT_BITS) as usize
}

/// How a log is made: bases, slots, shape, upper bound, and what to copy
/// in (read only during `init`).
pub(crate) struct LogInit<V> {
    last: u64,
    bases: Bases,
    slots: u16,
    shape: u32,
    fill: Fill<V>,
}

impl<V: RangeValue> LogInit<V> {
    /// A log of `format` with `slots` slots (at most `u16::MAX`).
    fn sized(last: u64, bases: Bases, format: Format, slots: usize, fill: Fill<V>) -> Self {
        let bytes = format.prefix_bytes() + slots * format.slot_bytes::<V>();
        Self {
            last,
            bases,
            slots: slots as u16,
            shape: ((bytes as u32) << FORMAT_BITS) | format as u32,
            fill,
        }
    }
}

/// The first slots of a new log.
enum Fill<V> {
    /// `n` entries at `src`, encoded in the log's format.
    Entries { src: *const Entry<V>, n: usize },
    /// `n` slots at `src`, already in the log's format with its bases
    /// (from a log of the same shape of slot).
    Slots { src: *const u8, n: usize },
}

// `init` allocates the layout `log_layout(shape_bytes(shape))` and writes
// the header, the base image and `n <=` slots entries; `deref` rebuilds
// the fat pointer from the stored shape; `drop` frees the same layout
// (entries are `Copy`, nothing to drop). Slots are read and written
// unaligned, so only the header needs `ALIGN`.
impl<V: RangeValue> Pointable for Log<V> {
    const ALIGN: usize = std::mem::align_of::<LogHeader<V>>();
    type Init = LogInit<V>;

    unsafe fn init(init: Self::Init) -> usize {
        let Some(layout) = log_layout::<V>(shape_bytes(init.shape)) else {
            std::alloc::handle_alloc_error(Layout::new::<LogHeader<V>>());
        };
        // SAFETY: the layout has a non-zero size (the header).
        let p = unsafe { std::alloc::alloc(layout) };
        if p.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        let h = p.cast::<LogHeader<V>>();
        // SAFETY: `p` is a fresh allocation of `layout`, which holds the
        // header, the base image and the slots behind it; `Log::new` made
        // `n` at most the slot count and chose a format every entry fits.
        unsafe {
            std::ptr::addr_of_mut!((*h).last).write(AtomicU64::new(init.last));
            std::ptr::addr_of_mut!((*h).base).write(init.bases.block);
            std::ptr::addr_of_mut!((*h).len).write(AtomicU16::new(0));
            std::ptr::addr_of_mut!((*h).slots).write(init.slots);
            std::ptr::addr_of_mut!((*h).shape).write(init.shape);
            let log = Self::deref(p as usize);
            let format = log.format();
            if format.offsets_values() {
                log.payload()
                    .cast::<u64>()
                    .write_unaligned(init.bases.image);
            }
            let (first, bytes) = (log.slot_ptr(0), format.slot_bytes::<V>());
            let stored = match init.fill {
                Fill::Entries { src, n } => {
                    let src = std::slice::from_raw_parts(src, n);
                    // `Log::new` chose a format every entry fits; should
                    // one not, the log ends before it rather than hold an
                    // unwritten slot.
                    let stored = with_slot!(format, |S| {
                        let mut stored = 0;
                        for e in src {
                            let Some(x) = <S as Slot<V>>::encode(e, init.bases) else {
                                break;
                            };
                            <S as Slot<V>>::write(first.add(stored * bytes), x);
                            stored += 1;
                        }
                        stored
                    });
                    debug_assert_eq!(stored, n, "an entry does not fit the chosen format");
                    stored
                }
                Fill::Slots { src, n } => {
                    // `Log::grown` made `n` at most the slot count.
                    std::ptr::copy_nonoverlapping(src, first, n * bytes);
                    n
                }
            };
            std::ptr::addr_of_mut!((*h).len).write(AtomicU16::new(stored as u16));
        }
        p as usize
    }

    unsafe fn deref<'a>(ptr: usize) -> &'a Self {
        // SAFETY: `ptr` came from `init`; the header is initialised.
        let n = shape_bytes(unsafe { (*(ptr as *const LogHeader<V>)).shape });
        let fat = std::ptr::slice_from_raw_parts(ptr as *const UnsafeCell<MaybeUninit<u8>>, n)
            as *const Log<V>;
        // SAFETY: `Log` is `LogHeader` with its bytes as a trailing slice
        // of length `n`, laid out as `init` allocated it.
        unsafe { &*fat }
    }

    unsafe fn deref_mut<'a>(ptr: usize) -> &'a mut Self {
        // SAFETY: as in `deref`; the caller has exclusive access.
        let n = shape_bytes(unsafe { (*(ptr as *const LogHeader<V>)).shape });
        let fat = std::ptr::slice_from_raw_parts_mut(ptr as *mut UnsafeCell<MaybeUninit<u8>>, n)
            as *mut Log<V>;
        // SAFETY: as in `deref`.
        unsafe { &mut *fat }
    }

    unsafe fn drop(ptr: usize) {
        // SAFETY: `ptr` came from `init` and is dropped once.
        let n = shape_bytes(unsafe { (*(ptr as *const LogHeader<V>)).shape });
        if let Some(layout) = log_layout::<V>(n) {
            // SAFETY: same layout as allocated in `init`.
            unsafe { std::alloc::dealloc(ptr as *mut u8, layout) };
        }
    }
}

impl<V: RangeValue> Log<V> {
    /// A new log for a leaf anchored at `anchor`, holding `entries` with
    /// room for `cap` (at least as many; none without entries).
    pub fn new(anchor: u64, last: u64, cap: usize, entries: &[Entry<V>]) -> Owned<Log<V>> {
        const {
            // Keeps the bytes after the header of the largest log (2^16
            // slots) within the 30 bits `shape` has for them.
            assert!(std::mem::size_of::<V>() <= 4096, "values are small records");
        }
        let (format, bases) = Format::choose(anchor, last, entries);
        // Without entries the format is a placeholder: no slots, so the
        // first append rebuilds the log in a format chosen for it.
        let cap = if entries.is_empty() { 0 } else { cap };
        let cap = cap.max(entries.len()).min(u16::MAX as usize);
        // `init` copies the entries before returning; the pointer is not kept.
        let fill = Fill::Entries {
            src: entries.as_ptr(),
            n: entries.len().min(cap),
        };
        Owned::init(LogInit::sized(last, bases, format, cap, fill))
    }

    /// A copy of this log with `slots` slots (at least its length): same
    /// space, format and bases, its published slots copied as they are
    /// stored. Growing a log this way skips decoding and re-encoding it.
    pub fn grown(&self, slots: usize) -> Owned<Log<V>> {
        let n = self.len();
        let slots = slots.max(n).min(u16::MAX as usize);
        let fill = Fill::Slots {
            src: self.slot_ptr(0),
            n,
        };
        let (last, bases, format) = (self.last(), self.bases(), self.format());
        Owned::init(LogInit::sized(last, bases, format, slots, fill))
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
        let (n, p, bases) = (self.len(), self.slot_ptr(0), self.bases());
        with_slot!(self.format(), |S| {
            let bytes = <S as Slot<V>>::FORMAT.slot_bytes::<V>();
            let mut prev_r: Option<u64> = None;
            for i in 0..n {
                // SAFETY: the first `n` slots are published entries of this
                // format, `bytes` apart (see `at`).
                let e = unsafe { <S as Slot<V>>::load(p.add(i * bytes), bases) };
                if e.value.is_tombstone() || prev_r.is_some_and(|r| e.range.l() <= r) {
                    return false;
                }
                prev_r = Some(e.range.r());
            }
            prev_r.is_none_or(|r| r < below)
        })
    }

    pub fn format(&self) -> Format {
        Format::from_bits(self.shape)
    }

    /// Allocated slots.
    pub fn slots(&self) -> usize {
        self.slots as usize
    }

    /// Published entries.
    pub fn len(&self) -> usize {
        (self.len.load(Ordering::Acquire) as usize).min(self.slots())
    }

    /// The first byte after the header.
    fn payload(&self) -> *mut u8 {
        UnsafeCell::raw_get(self.bytes.as_ptr()).cast::<u8>()
    }

    fn bases(&self) -> Bases {
        let image = if self.format().offsets_values() {
            // SAFETY: formats that offset values keep the base image in the
            // first 8 bytes after the header, written by `init`.
            unsafe { self.payload().cast::<u64>().read_unaligned() }
        } else {
            0
        };
        Bases {
            block: self.base,
            image,
        }
    }

    /// Where slot `i` starts; derived from the whole byte slice, so it may
    /// address all of the slot's bytes.
    fn slot_ptr(&self, i: usize) -> *mut u8 {
        let format = self.format();
        let off = (format.prefix_bytes() + i * format.slot_bytes::<V>()).min(self.bytes.len());
        // SAFETY: `off` is at most the slice's length, so the pointer is
        // inside the allocation or one past its end.
        unsafe { self.payload().add(off) }
    }

    /// Entry `i` (below [`Log::len`]).
    fn at(&self, i: usize) -> Entry<V> {
        let (p, bases) = (self.slot_ptr(i), self.bases());
        // SAFETY: slot `i` lies inside `bytes` (`i` is below the slot
        // count); it was written in this format with these bases before
        // `len` covering it was published (release, paired with the
        // acquire in `len`) and is never written again.
        with_slot!(self.format(), |S| unsafe { <S as Slot<V>>::load(p, bases) })
    }

    /// Appends the published entries, oldest first, to `out`.
    pub fn copy_into(&self, out: &mut EntryBuf<V>) {
        let (n, p, bases) = (self.len(), self.slot_ptr(0), self.bases());
        out.reserve(n);
        with_slot!(self.format(), |S| {
            let bytes = <S as Slot<V>>::FORMAT.slot_bytes::<V>();
            // SAFETY: the first `n` slots are published entries of this
            // format, `bytes` apart (see `at`).
            out.extend((0..n).map(|i| unsafe { <S as Slot<V>>::load(p.add(i * bytes), bases) }));
        })
    }

    /// The published entries, oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = Entry<V>> + ExactSizeIterator + '_ {
        (0..self.len()).map(move |i| self.at(i))
    }

    /// Appends to `out` the latest value of every block of `target` this
    /// log holds (see [`ablation::search`]).
    #[inline]
    pub fn search(&self, target: BlockRange, unfound: &mut UnfoundList, out: &mut Vec<Segment<V>>) {
        with_slot!(self.format(), |S| ablation::search(
            self.overlapping_as::<S>(target),
            target,
            unfound,
            out
        ))
    }

    /// The published entries that overlap `target`, newest first, read as
    /// `S` (the log's format). The test runs on the stored form (offsets,
    /// for offset formats), so entries outside `target` are never decoded.
    fn overlapping_as<S: Slot<V>>(&self, target: BlockRange) -> Overlapping<'_, V, S> {
        let n = self.len();
        let (lo, hi, left) = match S::FORMAT.max_offset() {
            None => (target.l(), target.r(), n),
            // Every entry lies inside [base, base + max].
            Some(max) if target.r() < self.base || target.l().saturating_sub(self.base) > max => {
                (0, 0, 0)
            }
            Some(max) => (
                target.l().saturating_sub(self.base),
                (target.r() - self.base).min(max),
                n,
            ),
        };
        Overlapping {
            slots: self.slot_ptr(0),
            bases: self.bases(),
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
        if n >= self.slots() {
            return false;
        }
        let (p, bases) = (self.slot_ptr(n), self.bases());
        with_slot!(self.format(), |S| {
            let Some(x) = <S as Slot<V>>::encode(&e, bases) else {
                return false;
            };
            // SAFETY: slot `n` is allocated and above the published
            // length, so no reader looks at it, and the caller's lock
            // excludes other writers.
            unsafe { <S as Slot<V>>::write(p, x) };
        });
        self.len.store(n as u16 + 1, Ordering::Release);
        true
    }

    /// Bytes one slot of this log's format takes.
    pub fn slot_bytes(&self) -> usize {
        self.format().slot_bytes::<V>()
    }

    pub fn heap_bytes(&self) -> usize {
        log_layout::<V>(shape_bytes(self.shape)).map_or(0, |l| l.size())
    }
}

/// See [`Log::overlapping_as`]; `lo` and `hi` bound the target as stored
/// (offsets from the base block, for offset formats).
pub(crate) struct Overlapping<'a, V, S> {
    /// The log's first slot; the log outlives `'a`.
    slots: *const u8,
    bases: Bases,
    /// Slots not yet looked at: `0..left`.
    left: usize,
    lo: u64,
    hi: u64,
    _log: PhantomData<(&'a Log<V>, S)>,
}

impl<V: RangeValue, S: Slot<V>> Iterator for Overlapping<'_, V, S> {
    type Item = Entry<V>;

    fn next(&mut self) -> Option<Entry<V>> {
        let bytes = S::FORMAT.slot_bytes::<V>();
        while self.left > 0 {
            self.left -= 1;
            // SAFETY: as in `Log::at`: slot `left` is a published slot of
            // the log `'a` borrows, stored as `S`, `bytes` apart.
            unsafe {
                let p = self.slots.add(self.left * bytes);
                let (lo, hi) = S::bounds(p);
                if lo <= self.hi && hi >= self.lo {
                    return Some(S::load(p, self.bases));
                }
            }
        }
        None
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
    use std::mem::size_of;

    fn e(l: u64, r: u64, block: u64) -> Entry<PhysicalRun> {
        Entry::new(
            BlockRange::new(l, r).unwrap(),
            PhysicalRun::new(1, block).unwrap(),
        )
    }

    fn read(log: &Owned<Log<PhysicalRun>>) -> Vec<Entry<PhysicalRun>> {
        log.iter().collect()
    }

    fn header() -> usize {
        size_of::<LogHeader<PhysicalRun>>()
    }

    #[test]
    fn a_log_takes_the_smallest_format_its_entries_fit_and_round_trips() {
        let anchor = 1 << 40;
        let near = [e(anchor, anchor + 9, 5), e(anchor + 3, anchor + 0xffff, 7)];
        let log = Log::new(anchor, anchor + u32::MAX as u64, 4, &near);
        assert_eq!(log.format(), Format::Narrow);
        assert_eq!(read(&log), near);
        // The header, the base image, four 8-byte slots.
        assert_eq!(log.heap_bytes(), header() + 8 + 4 * 8);
        // SAFETY: the log is not shared.
        assert!(unsafe { log.push(e(anchor + 100, anchor + 200, 9)) });
        assert_eq!(log.len(), 3);
        assert_eq!(log.iter().last(), Some(e(anchor + 100, anchor + 200, 9)));

        let far = [near[0], e(anchor + 3, anchor + u32::MAX as u64, 7)];
        let log = Log::new(anchor, anchor + u32::MAX as u64, 4, &far);
        assert_eq!(log.format(), Format::Packed);
        assert_eq!(read(&log), far);
        // 12-byte slots, packed without padding.
        assert_eq!(
            log.heap_bytes(),
            (header() + 8 + 4 * 12).next_multiple_of(8)
        );

        let other_file = Entry::new(far[1].range, PhysicalRun::new(2, 7).unwrap());
        let log = Log::new(anchor, anchor + u32::MAX as u64, 4, &[far[0], other_file]);
        assert_eq!(log.format(), Format::Compact);
        assert_eq!(read(&log), [far[0], other_file]);
        assert_eq!(log.heap_bytes(), header() + 4 * 16);
    }

    #[test]
    fn a_grown_log_keeps_its_slots_as_stored_and_an_empty_one_has_none() {
        let anchor = 1 << 40;
        let first = [
            e(anchor + 5, anchor + 9, 50),
            e(anchor + 20, anchor + 29, 60),
        ];
        for log in [
            Log::new(anchor, anchor + 1000, 2, &first),
            Log::new(anchor, u64::MAX, 2, &first),
        ] {
            let format = log.format();
            let grown = log.grown(6);
            assert_eq!((grown.format(), grown.slots()), (format, 6));
            assert_eq!(grown.last(), log.last());
            assert_eq!(read(&grown), first);
            assert_eq!(
                grown.heap_bytes(),
                Log::new(anchor, log.last(), 6, &first).heap_bytes()
            );
            // SAFETY: the logs are not shared.
            unsafe {
                assert!(!log.push(e(anchor + 40, anchor + 41, 70)));
                assert!(grown.push(e(anchor + 40, anchor + 41, 70)));
                // Still the narrow log's bases: a run before the first
                // does not fit, as in the log it grew from.
                assert_eq!(
                    grown.push(e(anchor + 50, anchor + 51, 10)),
                    format != Format::Narrow
                );
            }
            assert_eq!(grown.iter().nth(2), Some(e(anchor + 40, anchor + 41, 70)));
        }
        // Built empty, a log has no slots: its first entry rebuilds it.
        let empty = Log::<PhysicalRun>::new(0, u64::MAX, 8, &[]);
        assert_eq!((empty.slots(), empty.len()), (0, 0));
        // SAFETY: the log is not shared.
        assert!(!unsafe { empty.push(e(1, 2, 3)) });
    }

    #[test]
    fn entries_too_far_apart_make_a_wide_log() {
        let entries = [e(10, 20, 1), e(10 + (1 << 33), 11 + (1 << 33), 2)];
        let log = Log::new(0, u64::MAX, 4, &entries);
        assert_eq!(log.format(), Format::Wide);
        assert_eq!(read(&log), entries);
        // A wide log takes any entry.
        // SAFETY: the log is not shared.
        assert!(unsafe { log.push(e(u64::MAX - 5, u64::MAX, 3)) });
        assert_eq!(log.iter().last(), Some(e(u64::MAX - 5, u64::MAX, 3)));
    }

    #[test]
    fn a_log_refuses_what_does_not_fit_its_format_and_a_rebuild_takes_it() {
        // A wide leaf space: the base is the lowest entry.
        let log = Log::new(0, u64::MAX, 8, &[e(1000, 1010, 1)]);
        assert_eq!(log.format(), Format::Narrow);
        let below = e(999, 999, 2);
        let far = e(1000 + (1 << 32), 1000 + (1 << 32), 3);
        let beyond_16_bits = e(1000 + (1 << 16), 1000 + (1 << 16), 4);
        let older_run = e(1020, 1030, 0);
        // SAFETY: the log is not shared.
        unsafe {
            assert!(!log.push(below));
            assert!(!log.push(far));
            assert!(!log.push(beyond_16_bits));
            assert!(!log.push(older_run));
            assert!(log.push(e(2000, 3000, 4)));
        }
        assert_eq!(log.len(), 2);
        let mut all = read(&log);
        for (x, format) in [
            (below, Format::Narrow),
            (older_run, Format::Narrow),
            (beyond_16_bits, Format::Packed),
            (far, Format::Wide),
        ] {
            all.push(x);
            let rebuilt = Log::new(0, u64::MAX, 8, &all);
            assert_eq!(rebuilt.format(), format, "after {x:?}");
            assert_eq!(read(&rebuilt), all);
        }
    }

    #[test]
    fn a_get_sees_only_overlapping_entries_newest_first_in_every_format() {
        let anchor = 1 << 20;
        let base = [
            e(anchor + 10, anchor + 19, 1),
            e(anchor + 30, anchor + 39, 2),
            e(anchor + 15, anchor + 34, 3),
        ];
        let cases: [(Entry<PhysicalRun>, Format); 4] = [
            (e(anchor + 50, anchor + 60, 4), Format::Narrow),
            (e(anchor + 50, anchor + (1 << 20), 4), Format::Packed),
            (
                Entry::new(
                    BlockRange::new(anchor + 50, anchor + 60).unwrap(),
                    PhysicalRun::new(9, 4).unwrap(),
                ),
                Format::Compact,
            ),
            (e(anchor + (1 << 33), anchor + (1 << 33), 4), Format::Wide),
        ];
        for (extra, format) in cases {
            let mut entries = base.to_vec();
            entries.push(extra);
            let log = Log::new(anchor, u64::MAX, 8, &entries);
            assert_eq!(log.format(), format);
            let got = |l: u64, r: u64| -> Vec<Entry<PhysicalRun>> {
                let target = BlockRange::new(l, r).unwrap();
                with_slot!(log.format(), |S| log.overlapping_as::<S>(target).collect())
            };
            assert_eq!(
                got(anchor + 18, anchor + 31),
                [base[2], base[1], base[0]],
                "{format:?}"
            );
            assert_eq!(got(anchor + 35, anchor + 40), [base[1]], "{format:?}");
            assert_eq!(got(anchor + 20, anchor + 29), [base[2]], "{format:?}");
            assert!(got(0, anchor + 9).is_empty(), "{format:?}");
            assert!(got(anchor + 40, anchor + 49).is_empty(), "{format:?}");
            assert_eq!(got(anchor, u64::MAX).len(), 4, "{format:?}");
        }
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
