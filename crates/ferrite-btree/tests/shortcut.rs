//! SHORTCUT's one-shot descent: predictions are checked, never trusted.
//! Answers must equal a `BTreeMap` oracle whatever the companion predicts
//! (coarse models, stale models, exact arrays), and on a bulk-loaded tree
//! the keyless models must hit most of the time with a phantom map of one
//! run per level.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use ferrite_btree::{BTreeOptions, BTreeStore, ShortcutOptions, ShortcutVariant};
use ferrite_core::{KeyRange, KvStore, KvStoreExt};
use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn open(page_size: usize, cache: u64, sc: ShortcutOptions) -> BTreeStore {
    let bt = BTreeOptions::with_shortcut(sc).page_size(page_size);
    common::open_unsynced(&common::mem_devices(page_size), cache, bt).unwrap()
}

fn key(i: u64) -> Vec<u8> {
    i.to_be_bytes().to_vec()
}

fn extra(db: &BTreeStore, name: &str) -> f64 {
    db.stats().field(name).unwrap_or(0.0)
}

/// Bulk-loads `n` keys spread over the u64 space, then looks up `probes`
/// random stored keys; returns the store.
fn loaded(n: u64, probes: u64, sc: ShortcutOptions) -> BTreeStore {
    let db = open(4096, 256 << 10, sc);
    let stride = u64::MAX / n;
    let mut pairs = (0..n).map(|i| (key(i * stride), i.to_le_bytes().to_vec()));
    db.bulk_load(&mut pairs).unwrap();
    db.reset_shortcut_counters();
    let mut rng = SmallRng::seed_from_u64(1);
    for _ in 0..probes {
        let i = rng.gen_range(0..n);
        assert_eq!(
            db.get(&key(i * stride)).unwrap(),
            Some(i.to_le_bytes().to_vec())
        );
    }
    db
}

#[test]
fn keyless_models_hit_on_a_bulk_loaded_tree() {
    let db = loaded(300_000, 20_000, ShortcutOptions::default());
    let r = db.shortcut_report().unwrap();
    assert!(r.level_predictions.len() >= 2, "tree too shallow: {r:?}");
    let (p, h): (u64, u64) = (r.level_predictions.iter().sum(), r.level_hits.iter().sum());
    assert!(h as f64 / p as f64 > 0.5, "accuracy {h}/{p}");
    // A bulk-loaded level is one run of pages: no mapping entries at all.
    assert_eq!(r.discontinuities, 0);
    assert!(r.prefetch_used > 10_000, "{r:?}");
    // The companion is a tiny fraction of the tree (≈ 1,800 nodes here).
    assert!(r.companion_bytes < 16 << 10, "{} B", r.companion_bytes);
    db.verify().unwrap();
}

#[test]
fn the_base_variant_is_exact_on_a_static_tree() {
    let db = loaded(
        100_000,
        5_000,
        ShortcutOptions::default().variant(ShortcutVariant::Base),
    );
    let r = db.shortcut_report().unwrap();
    assert_eq!(r.level_hits, r.level_predictions);
    assert_eq!(r.prefetch_wasted, 0);
    // Exact arrays cost memory per node.
    assert!(r.companion_bytes as f64 > 8.0 * r.nodes_modelled as f64);
}

#[test]
fn a_useless_level_stops_predicting() {
    // One segment per level over a skewed key set: predictions mostly
    // miss, so selective prefetching turns the levels off.
    let db = open(
        4096,
        256 << 10,
        ShortcutOptions::default()
            .eps(1e12)
            .min_accuracy(0.9)
            .accuracy_window(256),
    );
    let mut pairs = (0..200_000u64).map(|i| (key(i * i * i * 17), vec![1u8; 8]));
    db.bulk_load(&mut pairs).unwrap();
    let mut rng = SmallRng::seed_from_u64(3);
    for _ in 0..5_000 {
        let i = rng.gen_range(0..200_000u64);
        assert_eq!(db.get(&key(i * i * i * 17)).unwrap(), Some(vec![1u8; 8]));
    }
    let before = extra(&db, "sc_predictions");
    for _ in 0..5_000 {
        let i = rng.gen_range(0..200_000u64);
        db.get(&key(i * i * i * 17)).unwrap();
    }
    assert_eq!(
        extra(&db, "sc_predictions"),
        before,
        "disabled levels still predict"
    );
}

#[test]
fn sync_rebuilds_inline_and_background_rebuilds_catch_up() {
    for variant in [ShortcutVariant::Sync, ShortcutVariant::Shortcut] {
        let db = open(
            1024,
            128 << 10,
            ShortcutOptions::default()
                .variant(variant)
                .stash_threshold(0.05),
        );
        let mut pairs = (0..20_000u64).map(|i| (key(i * 1000), vec![2u8; 8]));
        db.bulk_load(&mut pairs).unwrap();
        let after_load = extra(&db, "sc_rebuilds");
        // Inserts between the loaded keys split leaves everywhere.
        for i in 0..20_000u64 {
            db.put(&key(i * 1000 + 500), &[3u8; 8]).unwrap();
        }
        if variant == ShortcutVariant::Sync {
            assert!(extra(&db, "sc_rebuilds") >= after_load + 3.0);
        } else {
            let t = std::time::Instant::now();
            while extra(&db, "sc_rebuilds") < after_load + 1.0 && t.elapsed().as_secs() < 20 {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            assert!(extra(&db, "sc_rebuilds") >= after_load + 1.0);
        }
        for i in (0..20_000u64).step_by(7) {
            assert_eq!(db.get(&key(i * 1000 + 500)).unwrap(), Some(vec![3u8; 8]));
            assert_eq!(db.get(&key(i * 1000)).unwrap(), Some(vec![2u8; 8]));
        }
        db.verify().unwrap();
    }
}

/// Splits everywhere, then a physical re-layout: every level is one run
/// of page ids again, and nothing was lost or misplaced.
#[test]
fn relayout_puts_levels_back_into_one_run() {
    for variant in [ShortcutVariant::Shortcut, ShortcutVariant::Sync] {
        let db = open(
            1024,
            128 << 10,
            ShortcutOptions::default()
                .variant(variant)
                .stash_threshold(0.2)
                .relocate_threshold(0.01),
        );
        let mut pairs = (0..30_000u64).map(|i| (key(i * 1000), vec![2u8; 8]));
        db.bulk_load(&mut pairs).unwrap();
        let mut rng = SmallRng::seed_from_u64(9);
        for _ in 0..12_000 {
            let i = rng.gen_range(0..30_000u64);
            db.put(&key(i * 1000 + 1 + rng.gen_range(0..998)), &[3u8; 8])
                .unwrap();
        }
        let t = std::time::Instant::now();
        while extra(&db, "sc_relayouts") < 1.0 && t.elapsed().as_secs() < 30 {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let r = db.shortcut_report().unwrap();
        assert!(r.relayouts >= 1 && r.relocated > 500, "{variant:?}: {r:?}");
        db.verify().unwrap();
        for i in (0..30_000u64).step_by(3) {
            assert_eq!(db.get(&key(i * 1000)).unwrap(), Some(vec![2u8; 8]));
        }
        // Splits went on after that re-layout; one more, now that writes
        // have stopped, leaves few runs.
        db.relayout_shortcut().unwrap();
        db.verify().unwrap();
        let r = db.shortcut_report().unwrap();
        assert!(
            (r.discontinuities as f64) < 0.01 * r.nodes_modelled as f64,
            "{variant:?}: {} discontinuities over {} nodes",
            r.discontinuities,
            r.nodes_modelled
        );
    }
}

/// Inserts everywhere while the background rebuilder lists, moves and
/// re-lists levels: parents split under its walks, leaves split between
/// its chunks. Every value stays readable, and the tree verifies.
#[test]
fn inserts_during_background_relayouts_lose_nothing() {
    let db = Arc::new(open(
        1024,
        96 << 10,
        ShortcutOptions::default()
            .stash_threshold(0.02)
            .relocate_threshold(0.02)
            .walk_chunk(1),
    ));
    let n = 40_000u64;
    let mix = |i: u64| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (i >> 7)).wrapping_add(1);
    let mut base: Vec<u64> = (0..n).map(mix).collect();
    base.sort_unstable();
    let mut pairs = base.iter().map(|&k| (key(k), k.to_le_bytes().to_vec()));
    db.bulk_load(&mut pairs).unwrap();
    let writer = {
        let db = db.clone();
        std::thread::spawn(move || {
            for i in n..3 * n {
                let k = mix(i);
                db.put(&key(k), &k.to_le_bytes()).unwrap();
            }
        })
    };
    let mut rng = SmallRng::seed_from_u64(5);
    while !writer.is_finished() {
        let k = base[rng.gen_range(0..base.len())];
        assert_eq!(db.get(&key(k)).unwrap(), Some(k.to_le_bytes().to_vec()));
    }
    writer.join().unwrap();
    db.verify().unwrap();
    for i in 0..3 * n {
        let k = mix(i);
        assert_eq!(
            db.get(&key(k)).unwrap(),
            Some(k.to_le_bytes().to_vec()),
            "record {i}"
        );
    }
    let t = std::time::Instant::now();
    while extra(&db, "sc_relocated") == 0.0 && t.elapsed().as_secs() < 30 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(extra(&db, "sc_relocated") > 0.0, "no node was moved");
    db.verify().unwrap();
}

#[derive(Debug, Clone)]
enum Op {
    Put(u16, u8),
    Delete(u16),
    Get(u16),
    Scan(u16, u16),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<u16>(), any::<u8>()).prop_map(|(k, v)| Op::Put(k, v)),
        1 => any::<u16>().prop_map(Op::Delete),
        4 => any::<u16>().prop_map(Op::Get),
        1 => (any::<u16>(), 0u16..200).prop_map(|(k, n)| Op::Scan(k, n)),
    ]
}

fn sk(k: u16) -> Vec<u8> {
    // Keys with a long shared prefix and variable length.
    let mut v = b"user/".to_vec();
    v.extend_from_slice(format!("{k:05}").as_bytes());
    v.extend(std::iter::repeat_n(b'x', usize::from(k % 7)));
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Coarse models (one segment per level), stale models (no rebuilds
    /// from the stash), exact arrays gone stale: answers never change.
    #[test]
    fn wrong_predictions_never_change_answers(
        ops in proptest::collection::vec(op(), 1..1500),
        which in 0usize..4,
    ) {
        let sc = match which {
            0 => ShortcutOptions::default().eps(1e12).stash_threshold(1.0),
            1 => ShortcutOptions::default().stash_threshold(1.0),
            2 => ShortcutOptions::default().variant(ShortcutVariant::Base).stash_threshold(1.0),
            // Rebuilds and physical re-layouts inline, after a few splits.
            _ => ShortcutOptions::default().variant(ShortcutVariant::Sync).stash_threshold(0.02).relocate_threshold(0.0),
        };
        let db = open(1024, 64 << 10, sc);
        let mut oracle = BTreeMap::new();
        let mut pairs: Vec<(Vec<u8>, Vec<u8>)> =
            (0..6000u16).step_by(2).map(|k| (sk(k), vec![7u8; 20])).collect();
        pairs.sort();
        oracle.extend(pairs.iter().cloned());
        db.bulk_load(&mut pairs.into_iter()).unwrap();
        for op in ops {
            match op {
                Op::Put(k, v) => {
                    let v = vec![v; 10 + usize::from(v % 40)];
                    db.put(&sk(k % 6000), &v).unwrap();
                    oracle.insert(sk(k % 6000), v);
                }
                Op::Delete(k) => {
                    db.delete(&sk(k % 6000)).unwrap();
                    oracle.remove(&sk(k % 6000));
                }
                Op::Get(k) => {
                    let got = db.get(&sk(k % 6000)).unwrap();
                    prop_assert_eq!(got.as_ref(), oracle.get(&sk(k % 6000)));
                }
                Op::Scan(k, n) => {
                    let from = sk(k % 6000);
                    let got = db.scan_collect(KeyRange::from_bounds(&from[..]..), usize::from(n)).unwrap();
                    let want: Vec<_> = oracle.range(from.clone()..).take(usize::from(n))
                        .map(|(k, v)| (k.clone(), v.clone())).collect();
                    prop_assert_eq!(got, want);
                }
            }
        }
        db.verify().unwrap();
        for (k, v) in &oracle {
            let got = db.get(k).unwrap();
            prop_assert_eq!(got.as_ref(), Some(v));
        }
    }
}
