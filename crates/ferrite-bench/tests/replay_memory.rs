//! The memory a replay reports for an index is the heap the index holds:
//! with the counting allocator as this binary's allocator, RASK's measured
//! growth matches the bytes it counts in its own structures, and nothing
//! the harness allocates after the replay (the counters it gathers) is
//! charged to it.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use ferrite_bench::counting_alloc::CountingAlloc;
use ferrite_bench::range_index::{synthetic_ops, Replayer};

#[global_allocator]
static A: CountingAlloc = CountingAlloc::new();

#[test]
fn a_replay_charges_rask_with_its_own_bytes_only() {
    for (n, blocks) in [(2_000, 1 << 14), (60_000, 1 << 20)] {
        let ops = synthetic_ops(n, 5, blocks, 0.8, 0.05);
        let r = Replayer { sample_every: 0 }.run("rask", &ops).unwrap();
        let measured = r.memory_bytes.unwrap();
        let counted = r.rask.unwrap().index_bytes;
        eprintln!("{n} ops: measured {measured}, counted {counted}");
        assert!(
            measured.abs_diff(counted) <= 512,
            "{n} ops: heap growth {measured} bytes, the index counts {counted}"
        );
    }
}
