#![allow(clippy::unwrap_used, reason = "tests fail loudly")]
//! RASK against a per-block oracle: every get must return exactly what a
//! map from block to value returns, and the structure must stay valid.

use std::collections::BTreeMap;

use ferrite_rask::{BlockRange, PhysicalRun, RangeValue, Rask, RaskOptions};
use proptest::prelude::*;

/// block -> packed PhysicalRun bits
#[derive(Default)]
struct Oracle(BTreeMap<u64, u64>);

impl Oracle {
    fn put(&mut self, r: BlockRange, v: PhysicalRun) {
        for b in r.l()..=r.r() {
            self.0.insert(b, v.offset(b - r.l()).to_bits());
        }
    }
    fn delete(&mut self, r: BlockRange) {
        for b in r.l()..=r.r() {
            self.0.remove(&b);
        }
    }
}

fn check_get(
    index: &Rask<PhysicalRun>,
    oracle: &Oracle,
    r: BlockRange,
) -> Result<(), TestCaseError> {
    let segs = index.get(r);
    let mut at = r.l();
    let mut prev_gap = false;
    for s in &segs {
        prop_assert_eq!(s.range.l(), at, "segments must tile the target");
        for b in s.range.l()..=s.range.r() {
            let want = oracle.0.get(&b).copied();
            let got = s.value.map(|v| v.offset(b - s.range.l()).to_bits());
            prop_assert_eq!(got, want, "block {}", b);
        }
        prop_assert!(
            !(prev_gap && s.value.is_none()),
            "adjacent gaps must be joined"
        );
        prev_gap = s.value.is_none();
        at = s.range.r() + 1;
    }
    prop_assert_eq!(at, r.r() + 1);
    Ok(())
}

#[derive(Debug, Clone)]
enum Op {
    Put(u64, u64, u16, u64),
    Delete(u64, u64),
    Get(u64, u64),
}

fn op(space: u64) -> impl Strategy<Value = Op> {
    let len = 1u64..24;
    prop_oneof![
        5 => (0..space, len.clone(), 0u16..4, 0u64..1_000_000).prop_map(|(l, n, f, b)| Op::Put(l, n, f, b)),
        1 => (0..space, len.clone()).prop_map(|(l, n)| Op::Delete(l, n)),
        2 => (0..space, 1u64..64).prop_map(|(l, n)| Op::Get(l, n)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn matches_a_per_block_oracle(cap in 4usize..20, ops in proptest::collection::vec(op(400), 1..600)) {
        let index = Rask::with_options(RaskOptions { leaf_capacity: cap, merge_threshold: None }).unwrap();
        let mut oracle = Oracle::default();
        for o in ops {
            match o {
                Op::Put(l, n, f, b) => {
                    let r = BlockRange::with_len(l, n).unwrap();
                    let v = PhysicalRun::new(f, b).unwrap();
                    index.put(r, v).unwrap();
                    oracle.put(r, v);
                }
                Op::Delete(l, n) => {
                    let r = BlockRange::with_len(l, n).unwrap();
                    index.delete(r);
                    oracle.delete(r);
                }
                Op::Get(l, n) => check_get(&index, &oracle, BlockRange::with_len(l, n).unwrap())?,
            }
            if let Err(e) = index.verify() {
                prop_assert!(false, "{}", e);
            }
        }
        check_get(&index, &oracle, BlockRange::new(0, 500).unwrap())?;
        // The visible mapping, run by run, is the oracle.
        let mut seen = BTreeMap::new();
        index.for_each_mapped(|r, v| {
            for b in r.l()..=r.r() {
                seen.insert(b, v.offset(b - r.l()).to_bits());
            }
        });
        prop_assert_eq!(seen, oracle.0);
    }
}

/// One million random operations over a larger space with the default
/// leaf size, checked against the oracle as they go.
#[test]
fn a_million_random_operations() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let index = Rask::<PhysicalRun>::new();
    let mut oracle = Oracle::default();
    let space = 200_000u64;
    let n = if cfg!(debug_assertions) {
        200_000
    } else {
        1_000_000
    };
    for i in 0..n {
        let l = rng.gen_range(0..space);
        let len = rng.gen_range(1..=64);
        let r = BlockRange::with_len(l, len).unwrap();
        match rng.gen_range(0..10) {
            0..=5 => {
                let v = PhysicalRun::new(rng.gen_range(0..8), rng.gen_range(0..1 << 40)).unwrap();
                index.put(r, v).unwrap();
                oracle.put(r, v);
            }
            6 => {
                index.delete(r);
                oracle.delete(r);
            }
            _ => check_get(&index, &oracle, r).unwrap(),
        }
        if i % 100_000 == 0 {
            index.verify().unwrap();
        }
    }
    index.verify().unwrap();
    let s = index.stats();
    assert!(s.splits > 0 && s.merges + s.resplits > 0, "{s:?}");
    assert!(PhysicalRun::TOMBSTONE.is_tombstone());
}

#[test]
fn invalid_input_is_a_typed_error() {
    let index = Rask::<PhysicalRun>::new();
    assert!(index
        .put(BlockRange::block(3), PhysicalRun::TOMBSTONE)
        .is_err());
    let near_end = PhysicalRun::new(0, PhysicalRun::BLOCK_SPACE - 1).unwrap();
    assert!(index.put(BlockRange::new(0, 1).unwrap(), near_end).is_err());
    assert!(Rask::<PhysicalRun>::with_options(RaskOptions {
        leaf_capacity: 2,
        merge_threshold: None
    })
    .is_err());
    // Nothing was stored by the refused calls.
    assert_eq!(index.get(BlockRange::new(0, 9).unwrap())[0].value, None);
    // The last block of the space is indexable.
    let v = PhysicalRun::new(1, 0).unwrap();
    index.put(BlockRange::block(u64::MAX), v).unwrap();
    let g = index.get(BlockRange::new(u64::MAX - 1, u64::MAX).unwrap());
    assert_eq!(g.len(), 2);
    assert_eq!(g[1].value, Some(v));
}
