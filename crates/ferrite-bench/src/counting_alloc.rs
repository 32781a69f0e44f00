//! A counting global allocator, so in-memory index sizes can be measured
//! exactly (heap bytes live, and the peak).
//!
//! Besides the process's totals it keeps each thread's net bytes (what the
//! thread allocated less what it freed), so a measurement taken on one
//! thread is not moved by whatever another thread allocates meanwhile (a
//! test harness's output thread, a logger).
//!
//! Install it in a binary with
//! `#[global_allocator] static A: CountingAlloc = CountingAlloc::new();`
//! (the `ferrite-bench` binary does; the user-facing `ferrite` binary does
//! not). Each allocation costs two relaxed atomic updates. The readings
//! are `None` in a process whose allocator it is not, so a measurement
//! can never report zero bytes for want of the allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

static LIVE: AtomicU64 = AtomicU64::new(0);
static PEAK: AtomicU64 = AtomicU64::new(0);
/// Set by the first allocation through the counting allocator.
static INSTALLED: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// This thread's allocations less its frees, in bytes. A `const`
    /// initialiser with no destructor: reading it never allocates, so the
    /// allocator may touch it.
    static THREAD_NET: Cell<i64> = const { Cell::new(0) };
}

/// The system allocator, counting.
pub struct CountingAlloc;

impl CountingAlloc {
    pub const fn new() -> Self {
        CountingAlloc
    }
}

impl Default for CountingAlloc {
    fn default() -> Self {
        Self::new()
    }
}

/// Whether this process allocates through the counting allocator.
pub fn installed() -> bool {
    INSTALLED.load(Relaxed)
}

/// Heap bytes currently allocated through the counting allocator, if it
/// is this process's allocator.
pub fn live_bytes() -> Option<u64> {
    installed().then(|| LIVE.load(Relaxed))
}

/// Bytes the calling thread has allocated less the bytes it has freed,
/// since it started, if counted. Only differences mean anything: the
/// growth of a structure one thread built is the difference of two
/// readings on that thread.
pub fn thread_net_bytes() -> Option<i64> {
    installed().then(|| THREAD_NET.with(Cell::get))
}

/// Highest `live_bytes` since the last [`reset_peak`], if counted.
pub fn peak_bytes() -> Option<u64> {
    installed().then(|| PEAK.load(Relaxed))
}

pub fn reset_peak() {
    PEAK.store(LIVE.load(Relaxed), Relaxed);
}

fn grew(n: u64) {
    if !INSTALLED.load(Relaxed) {
        INSTALLED.store(true, Relaxed);
    }
    let now = LIVE.fetch_add(n, Relaxed) + n;
    PEAK.fetch_max(now, Relaxed);
    thread_net(n as i64);
}

fn shrank(n: u64) {
    LIVE.fetch_sub(n, Relaxed);
    thread_net(-(n as i64));
}

/// Adds `d` to this thread's net bytes; nothing while the thread's
/// locals are being torn down.
fn thread_net(d: i64) {
    let _ = THREAD_NET.try_with(|c| c.set(c.get().wrapping_add(d)));
}

// SAFETY: every call is forwarded to the system allocator unchanged.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size() as u64);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size() as u64);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size() as u64);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            shrank(layout.size() as u64);
            grew(new_size as u64);
        }
        p
    }
}
