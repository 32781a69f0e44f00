//! The memory a replay reports for an index is the heap the index holds:
//! with the counting allocator as this binary's allocator, RASK's measured
//! growth matches the bytes it counts in its own structures, and nothing
//! the harness allocates after the replay (the counters it gathers), nor
//! anything another thread allocates during it, is charged to it.
//!
//! One test, replaying on one thread: indexes retire memory through
//! crossbeam-epoch's one process-wide collector, and a test thread that
//! exits hands its share of the collector back while the next test runs,
//! as an experiment, which replays one index at a time on one thread,
//! never has it.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::sync::atomic::{AtomicBool, Ordering};

use ferrite_bench::counting_alloc::CountingAlloc;
use ferrite_bench::range_index::{synthetic_ops, Replayer};
use ferrite_trace::RangeOp;

#[global_allocator]
static A: CountingAlloc = CountingAlloc::new();

/// Replays `ops` on RASK and checks its measured heap growth against the
/// bytes it counts.
fn check(what: &str, ops: &[RangeOp]) {
    let r = Replayer { sample_every: 0 }.run("rask", ops).unwrap();
    let measured = r.memory_bytes.unwrap();
    let counted = r.rask.unwrap().index_bytes;
    eprintln!("{what}: measured {measured}, counted {counted}");
    assert!(
        measured.abs_diff(counted) <= 512,
        "{what}: heap growth {measured} bytes, the index counts {counted}"
    );
}

/// Stops the allocating thread however the replays end, so a failed
/// assertion fails the test rather than waiting on the thread.
struct Stop<'a>(&'a AtomicBool);

impl Drop for Stop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

#[test]
fn a_replay_charges_rask_with_its_own_bytes_only() {
    for (n, blocks) in [(2_000, 1 << 14), (60_000, 1 << 20)] {
        check(&format!("{n} ops"), &synthetic_ops(n, 5, blocks, 0.8, 0.05));
    }
    // Beside a thread that holds a growing set of buffers and lets them
    // go, over and over: at any instant megabytes are live on it.
    let ops = synthetic_ops(20_000, 7, 1 << 16, 0.8, 0.05);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut held: Vec<Vec<u8>> = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                held.push(vec![1u8; 64 << 10]);
                if held.len() == 64 {
                    held.clear();
                }
            }
        });
        let _stop = Stop(&stop);
        for i in 0..5 {
            check(&format!("beside an allocating thread, run {i}"), &ops);
        }
    });
}
