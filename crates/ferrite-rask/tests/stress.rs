#![allow(clippy::unwrap_used, reason = "tests fail loudly")]
//! Writers and lock-free readers at once. Each writer owns every T-th
//! stripe of the block space and checks its own stripes against a private
//! oracle while the others write next door (so leaves are shared, split
//! and merged under contention); readers check that every answer tiles
//! its target and that each block's value came from the stripe's owner.

mod common;
use common::mapped_blocks;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ferrite_rask::{BlockRange, PhysicalRun, Rask, RaskOptions};
use rand::{Rng, SeedableRng};

const STRIPE: u64 = 256;
const STRIPES: u64 = 64;

#[test]
fn writers_and_readers_agree_with_per_stripe_oracles() {
    let writers = 3u64;
    let ops = if cfg!(miri) {
        200
    } else if cfg!(debug_assertions) {
        20_000
    } else {
        100_000
    };
    let index = Arc::new(
        Rask::<PhysicalRun>::with_options(RaskOptions {
            leaf_capacity: 8,
            merge_threshold: None,
        })
        .unwrap(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for t in 0..writers {
        let index = index.clone();
        handles.push(std::thread::spawn(move || {
            let mut rng = rand::rngs::StdRng::seed_from_u64(t);
            let mut oracle: BTreeMap<u64, u64> = BTreeMap::new();
            for _ in 0..ops {
                let stripe = rng.gen_range(0..STRIPES / writers) * writers + t;
                let base = stripe * STRIPE;
                let l = base + rng.gen_range(0..STRIPE);
                let r = (l + rng.gen_range(0..40)).min(base + STRIPE - 1);
                let range = BlockRange::new(l, r).unwrap();
                match rng.gen_range(0..8) {
                    0 => {
                        index.delete(range);
                        for b in l..=r {
                            oracle.remove(&b);
                        }
                    }
                    1..=5 => {
                        let v = PhysicalRun::new(t as u16, rng.gen_range(0..1 << 40)).unwrap();
                        index.put(range, v).unwrap();
                        for b in l..=r {
                            oracle.insert(b, v.offset(b - l).to_bits());
                        }
                    }
                    _ => {
                        for s in index.get(range) {
                            for b in s.range.l()..=s.range.r() {
                                let got = s.value.map(|v| v.offset(b - s.range.l()).to_bits());
                                assert_eq!(got, oracle.get(&b).copied(), "writer {t}, block {b}");
                            }
                        }
                    }
                }
            }
            oracle
        }));
    }
    let mut readers = Vec::new();
    for t in 0..2u64 {
        let index = index.clone();
        let stop = stop.clone();
        readers.push(std::thread::spawn(move || {
            let mut rng = rand::rngs::StdRng::seed_from_u64(100 + t);
            let mut reads = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let l = rng.gen_range(0..STRIPE * STRIPES);
                let range = BlockRange::with_len(l, rng.gen_range(1..600)).unwrap();
                let segs = index.get(range);
                let mut at = range.l();
                for s in &segs {
                    assert_eq!(s.range.l(), at);
                    if let Some(v) = s.value {
                        for b in [s.range.l(), s.range.r()] {
                            assert_eq!(
                                u64::from(v.file()),
                                (b / STRIPE) % writers,
                                "block {b} written by a non-owner"
                            );
                        }
                    }
                    at = s.range.r() + 1;
                }
                assert_eq!(at, range.r() + 1);
                reads += 1;
            }
            reads
        }));
    }
    let mut all = BTreeMap::new();
    for h in handles {
        all.extend(h.join().unwrap());
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
    index.verify().unwrap();
    assert_eq!(mapped_blocks(&index), all);
    let s = index.stats();
    assert!(s.splits > 0 && s.merges + s.resplits > 0, "{s:?}");
}

/// Threads that sweep their own region in order, as a block store's
/// sequential streams do, so nearly every lookup starts from the thread's
/// finger, while deletes and fragmented writes make leaves merge and
/// retire under the fingers of the other threads.
#[test]
fn sequential_sweeps_follow_their_fingers_through_merges() {
    let threads = 3u64;
    let region = 4096u64;
    let rounds = if cfg!(miri) {
        1
    } else if cfg!(debug_assertions) {
        6
    } else {
        40
    };
    let index = Arc::new(
        Rask::<PhysicalRun>::with_options(RaskOptions {
            leaf_capacity: 4,
            merge_threshold: Some(1),
        })
        .unwrap(),
    );
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let index = index.clone();
            std::thread::spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(7 + t);
                let mut oracle: BTreeMap<u64, u64> = BTreeMap::new();
                // Regions interleave in 64-block stripes, so neighbouring
                // leaves belong to different threads.
                let block = |i: u64| (i / 64) * 64 * threads + t * 64 + i % 64;
                for round in 0..rounds {
                    let mut i = 0;
                    while i < region {
                        let len = rng.gen_range(1..24).min(64 - i % 64);
                        let (l, r) = (block(i), block(i + len - 1));
                        let range = BlockRange::new(l, r).unwrap();
                        if (round + i) % 5 == 0 {
                            index.delete(range);
                            for b in l..=r {
                                oracle.remove(&b);
                            }
                        } else {
                            let v = PhysicalRun::new(t as u16, rng.gen_range(0..1 << 40)).unwrap();
                            index.put(range, v).unwrap();
                            for b in l..=r {
                                oracle.insert(b, v.offset(b - l).to_bits());
                            }
                        }
                        // Read back what was written and the run before it.
                        let from = block(i.saturating_sub(8));
                        for s in index.get(BlockRange::new(from.min(l), r).unwrap()) {
                            for b in s.range.l()..=s.range.r() {
                                if (b / 64) % threads != t {
                                    continue;
                                }
                                let got = s.value.map(|v| v.offset(b - s.range.l()).to_bits());
                                assert_eq!(got, oracle.get(&b).copied(), "thread {t}, block {b}");
                            }
                        }
                        i += len;
                    }
                }
                oracle
            })
        })
        .collect();
    let mut all = BTreeMap::new();
    for h in handles {
        all.extend(h.join().unwrap());
    }
    index.verify().unwrap();
    assert_eq!(mapped_blocks(&index), all);
    let s = index.stats();
    assert!(s.merges > 0, "{s:?}");
}

/// A writer fills a volume in address order, so nearly every full leaf
/// is split by handing its space's top to a new leaf and shrinking the old
/// leaf's bound in place, while readers look just behind and ahead of the
/// writer. Every block written before a read began must be found, with
/// its value; blocks past that may be found only with theirs.
#[test]
fn readers_see_every_acknowledged_write_while_leaves_fill_in_order() {
    use std::sync::atomic::AtomicU64;
    const PHYS: u64 = 1 << 30;
    let blocks: u64 = if cfg!(miri) {
        3_000
    } else if cfg!(debug_assertions) {
        100_000
    } else {
        1_000_000
    };
    let index = Arc::new(
        Rask::<PhysicalRun>::with_options(RaskOptions {
            leaf_capacity: 4,
            merge_threshold: None,
        })
        .unwrap(),
    );
    // One past the last block whose put has returned.
    let written = Arc::new(AtomicU64::new(0));
    // Reads done by all readers: the writer waits for some every few
    // thousand blocks, so reads overlap the whole fill however the
    // threads are scheduled.
    let reads = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..2u64)
        .map(|t| {
            let index = index.clone();
            let written = written.clone();
            let reads = reads.clone();
            std::thread::spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(40 + t);
                loop {
                    let done = written.load(Ordering::Acquire);
                    if done >= blocks {
                        return;
                    }
                    let l = done.saturating_sub(rng.gen_range(0..64));
                    let range = BlockRange::with_len(l, rng.gen_range(1..96)).unwrap();
                    let mut at = l;
                    for s in index.get(range) {
                        assert_eq!(s.range.l(), at);
                        for b in s.range.l()..=s.range.r() {
                            match s.value {
                                Some(v) => {
                                    assert_eq!(v.offset(b - s.range.l()).block(), PHYS + b)
                                }
                                None => assert!(b >= done, "block {b} lost (written up to {done})"),
                            }
                        }
                        at = s.range.r() + 1;
                    }
                    assert_eq!(at, range.r() + 1);
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let mut b = 0;
    while b < blocks {
        let len = rng.gen_range(1..16).min(blocks - b);
        let v = PhysicalRun::new(0, PHYS + b).unwrap();
        index.put(BlockRange::with_len(b, len).unwrap(), v).unwrap();
        let before = b;
        b += len;
        written.store(b, Ordering::Release);
        if before / 4096 != b / 4096 {
            let seen = reads.load(Ordering::Relaxed);
            // A reader that stopped early has failed: join it below.
            while reads.load(Ordering::Relaxed) < seen + 4
                && readers.iter().all(|r| !r.is_finished())
            {
                std::thread::yield_now();
            }
        }
    }
    for r in readers {
        r.join().unwrap();
    }
    index.verify().unwrap();
    let s = index.stats();
    assert!(s.append_splits * 10 > s.splits * 9, "{s:?}");
}
