//! The insert buffer's memory accounting against the allocator: what it
//! reports (and charges to the engine's budget) must be what it holds.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering::Relaxed};

use ferrite_btree::internals::{InsertBuffer, Offer};
use ferrite_btree::InsertBufferOptions;

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator and only counts bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Relaxed);
        // SAFETY: same layout contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Relaxed);
        // SAFETY: `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - layout.size() as isize, Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

#[test]
fn reported_bytes_match_the_allocator() {
    let before = LIVE.load(Relaxed);
    // A threshold no page reaches, so records pile up (until a page's
    // records pass the per-page cap).
    let opts = InsertBufferOptions::default().reuse_threshold(200);
    let mut ib = InsertBuffer::new(&opts, 8 << 20, 4000, 4096);
    let mut x = 5u64;
    let check = |ib: &InsertBuffer, when: &str| {
        let held = (LIVE.load(Relaxed) - before) as f64;
        let reported = (ib.memory_bytes() - std::mem::size_of::<InsertBuffer>()) as f64;
        let err = (reported - held).abs() / held;
        assert!(
            err < 0.05,
            "{when}: reported {reported} B, allocator holds {held} B"
        );
    };
    check(&ib, "empty");
    for i in 0..200_000u64 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let page = (x >> 33) % 8_000;
        if ib.needs_room(page) {
            ib.prune(true);
            if ib.needs_room(page) {
                for p in ib.coldest_batch(1 << 20) {
                    ib.take(p);
                }
                ib.prune(true);
            }
        }
        if i % 3 == 0 {
            ib.note_hit((x >> 20) % 8_000);
        }
        let key = x.to_be_bytes();
        if let Offer::Load(_) = ib.offer(page, &key, Some(&i.to_le_bytes())) {
            ib.take(page);
        }
        if i % 50_000 == 0 {
            check(&ib, "while buffering");
        }
    }
    assert!(ib.records() > 20_000, "{} records", ib.records());
    check(&ib, "full");
    ib.check().unwrap();
}
