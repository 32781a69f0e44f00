//! The log-structured leaf (paper §4.1) and its lock-free reading.
//!
//! A leaf owns the block space `[anchor, last]`; `anchor` is fixed for the
//! leaf's life, `last` belongs to the leaf's current [`Log`]. A log is a
//! preallocated array of `capacity` entries, filled oldest first; entries
//! below its published length are never written again. Appends write the
//! next slot and then publish the new length (release), so a reader that
//! loads the length (acquire) sees a consistent prefix without locking.
//!
//! GC, split and merge never edit a log in place: they build a new log
//! and swap the leaf's pointer (the old one is retired through epoch-based
//! reclamation). A reader therefore always works on an immutable snapshot
//! of one leaf and never has to retry; this is what the paper's per-leaf
//! version numbers (V_GC, V_split, V_merge) guard against, achieved by
//! copy-on-write instead. The header keeps the paper's deleted bit and the
//! fragmentation counter N_frag.
//!
//! Writers hold the leaf's lock for every change to the leaf: appending,
//! swapping its log, changing its `next` pointer, and changing the `prev`
//! pointer of its right neighbour.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use std::alloc::Layout;

use crossbeam_epoch::{Atomic, Guard, Owned, Pointable, Shared};
use parking_lot::lock_api::RawMutex as _;
use parking_lot::RawMutex;

use crate::entry::Entry;
use crate::value::RangeValue;

const DELETED: u32 = 1 << 31;

/// A leaf's entries and the upper end of its space, in one allocation:
/// this header followed by `cap` entry slots (so a lookup touches the
/// header and the newest entries in neighbouring cache lines).
#[repr(C)]
pub(crate) struct Log<V> {
    /// Inclusive upper bound of the leaf's space.
    pub last: u64,
    len: AtomicUsize,
    cap: usize,
    slots: [UnsafeCell<MaybeUninit<Entry<V>>>],
}

/// The sized prefix of [`Log`], for its layout.
#[repr(C)]
struct LogHeader<V> {
    last: u64,
    len: AtomicUsize,
    cap: usize,
    slots: [UnsafeCell<MaybeUninit<Entry<V>>>; 0],
}

// SAFETY: slots below `len` are immutable once published; the one slot a
// writer fills is above `len` and is only touched under the leaf's lock.
unsafe impl<V: Send + Sync> Sync for Log<V> {}
// SAFETY: the log owns plain `Copy` data.
unsafe impl<V: Send + Sync> Send for Log<V> {}

fn log_layout<V>(cap: usize) -> Option<(Layout, usize)> {
    let (l, off) = Layout::new::<LogHeader<V>>()
        .extend(Layout::array::<Entry<V>>(cap).ok()?)
        .ok()?;
    Some((l.pad_to_align(), off))
}

/// How a log is made: upper bound, slots, and the entries to copy in
/// (`n` entries at `src`, read only during `init`).
pub(crate) struct LogInit<V> {
    last: u64,
    cap: usize,
    src: *const Entry<V>,
    n: usize,
}

// `init` allocates the layout `log_layout(cap)` and writes the header and
// `n <= cap` slots; `deref` rebuilds the fat pointer from the stored
// `cap`; `drop` frees the same layout (entries are `Copy`, nothing to
// drop). The address is aligned to `ALIGN`.
impl<V: RangeValue> Pointable for Log<V> {
    const ALIGN: usize = std::mem::align_of::<LogHeader<V>>();
    type Init = LogInit<V>;

    unsafe fn init(init: Self::Init) -> usize {
        let cap = init.cap.max(init.n);
        let Some((layout, off)) = log_layout::<V>(cap) else {
            std::alloc::handle_alloc_error(Layout::new::<LogHeader<V>>());
        };
        // SAFETY: the layout has a non-zero size (the header).
        let p = unsafe { std::alloc::alloc(layout) };
        if p.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        let h = p.cast::<LogHeader<V>>();
        // SAFETY: `p` is a fresh allocation of `layout`, which holds the
        // header and `cap` slots from offset `off`.
        unsafe {
            std::ptr::addr_of_mut!((*h).last).write(init.last);
            std::ptr::addr_of_mut!((*h).len).write(AtomicUsize::new(init.n));
            std::ptr::addr_of_mut!((*h).cap).write(cap);
            std::ptr::copy_nonoverlapping(init.src, p.add(off).cast::<Entry<V>>(), init.n);
        }
        p as usize
    }

    unsafe fn deref<'a>(ptr: usize) -> &'a Self {
        // SAFETY: `ptr` came from `init`; the header is initialised.
        let cap = unsafe { (*(ptr as *const LogHeader<V>)).cap };
        let fat =
            std::ptr::slice_from_raw_parts(ptr as *const UnsafeCell<MaybeUninit<Entry<V>>>, cap)
                as *const Log<V>;
        // SAFETY: `Log` is `LogHeader` with its slots as a trailing slice
        // of length `cap`, laid out as `init` allocated it.
        unsafe { &*fat }
    }

    unsafe fn deref_mut<'a>(ptr: usize) -> &'a mut Self {
        // SAFETY: as in `deref`; the caller has exclusive access.
        let cap = unsafe { (*(ptr as *const LogHeader<V>)).cap };
        let fat =
            std::ptr::slice_from_raw_parts_mut(ptr as *mut UnsafeCell<MaybeUninit<Entry<V>>>, cap)
                as *mut Log<V>;
        // SAFETY: as in `deref`.
        unsafe { &mut *fat }
    }

    unsafe fn drop(ptr: usize) {
        // SAFETY: `ptr` came from `init` and is dropped once.
        let cap = unsafe { (*(ptr as *const LogHeader<V>)).cap };
        if let Some((layout, _)) = log_layout::<V>(cap) {
            // SAFETY: same layout as allocated in `init`.
            unsafe { std::alloc::dealloc(ptr as *mut u8, layout) };
        }
    }
}

impl<V: RangeValue> Log<V> {
    /// A new log holding `entries` with room for `cap` (at least as many).
    pub fn new(last: u64, cap: usize, entries: &[Entry<V>]) -> Owned<Log<V>> {
        // `init` copies the entries before returning; the pointer is not kept.
        Owned::init(LogInit {
            last,
            cap,
            src: entries.as_ptr(),
            n: entries.len(),
        })
    }

    /// The published entries, oldest first.
    pub fn entries(&self) -> &[Entry<V>] {
        let n = self.len.load(Ordering::Acquire);
        // SAFETY: `UnsafeCell<MaybeUninit<T>>` has `T`'s layout; slots
        // below `n` were initialised before `n` was published (release,
        // paired with the acquire above) and are never written again.
        unsafe {
            std::slice::from_raw_parts(self.slots.as_ptr().cast::<Entry<V>>(), n.min(self.cap))
        }
    }

    /// Allocated slots.
    pub fn slots(&self) -> usize {
        self.cap
    }

    /// Appends `e`; false if the log is full.
    ///
    /// # Safety
    /// The caller holds the lock of the leaf whose current log this is, so
    /// no other thread writes the slot.
    pub unsafe fn push(&self, e: Entry<V>) -> bool {
        let n = self.len.load(Ordering::Relaxed);
        let Some(slot) = self.slots.get(n) else {
            return false;
        };
        // SAFETY: slot `n` is above the published length, so no reader
        // looks at it, and the caller's lock excludes other writers.
        unsafe { (*slot.get()).write(e) };
        self.len.store(n + 1, Ordering::Release);
        true
    }

    pub fn heap_bytes(&self) -> usize {
        log_layout::<V>(self.cap).map_or(0, |(l, _)| l.size())
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
