//! Model-based tests: every variant against a `BTreeMap`, with tiny
//! buffers, reopens, checkpoints and reclamation in between.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::collections::BTreeMap;
use std::ops::Bound;

use ferrite_core::{KeyRange, KvStore, KvStoreExt, SyncMode, WriteBatch};
use ferrite_zkv::{Variant, ZkvOptions, ZkvStore};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Put(u16, Vec<u8>),
    Delete(u16),
    Get(u16),
    Scan(u16, u16),
    Batch(Vec<(u16, Option<Vec<u8>>)>),
    /// Puts keys `a..b` (beyond the keys the other operations use), so
    /// the tree has leaves to split and join.
    Fill(u16, u16),
    /// Deletes keys `a..b`: empties leaves or leaves them nearly empty,
    /// so neighbours join.
    DeleteRun(u16, u16),
    Reopen,
    Checkpoint,
    Collect,
}

fn key(k: u16) -> Vec<u8> {
    // Variable length keys sharing prefixes.
    let mut v = format!("k{:05}", k).into_bytes();
    if k.is_multiple_of(7) {
        v.extend_from_slice(b"-long-suffix");
    }
    v
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        8 => proptest::collection::vec(any::<u8>(), 0..24),
        1 => proptest::collection::vec(any::<u8>(), 65..300),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        40 => (0..400u16, value()).prop_map(|(k, v)| Op::Put(k, v)),
        8 => (0..400u16).prop_map(Op::Delete),
        15 => (0..400u16).prop_map(Op::Get),
        4 => (0..400u16, 0..80u16).prop_map(|(a, n)| Op::Scan(a, a + n)),
        4 => proptest::collection::vec((0..400u16, proptest::option::of(value())), 1..20).prop_map(Op::Batch),
        2 => (0..2600u16, 1..400u16).prop_map(|(a, n)| Op::Fill(a, a + n)),
        3 => (0..3000u16, 0..400u16).prop_map(|(a, n)| Op::DeleteRun(a, a + n)),
        1 => Just(Op::Reopen),
        1 => Just(Op::Checkpoint),
        1 => Just(Op::Collect),
    ]
}

fn run(variant: Variant, ops: &[Op]) {
    run_with(common::small_opts(variant), ops);
}

fn run_with(zo: ZkvOptions, ops: &[Op]) {
    let dev = common::mem_device(24);
    let opts = common::options(SyncMode::Never);
    let mut db = ZkvStore::open_on(dev.clone(), &opts, zo.clone()).unwrap();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for op in ops {
        match op {
            Op::Put(k, v) => {
                db.put(&key(*k), v).unwrap();
                model.insert(key(*k), v.clone());
            }
            Op::Delete(k) => {
                db.delete(&key(*k)).unwrap();
                model.remove(&key(*k));
            }
            Op::Get(k) => assert_eq!(
                db.get(&key(*k)).unwrap(),
                model.get(&key(*k)).cloned(),
                "get {k}"
            ),
            Op::Scan(a, b) => {
                let (ka, kb) = (key(*a), key(*b));
                let got = db
                    .scan_collect(
                        KeyRange::from_bounds((Bound::Included(&ka[..]), Bound::Excluded(&kb[..]))),
                        usize::MAX,
                    )
                    .unwrap();
                let want: Vec<_> = model
                    .range(ka.clone()..kb.clone())
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                assert_eq!(got, want, "scan {a}..{b}");
            }
            Op::Batch(items) => {
                let mut b = WriteBatch::new();
                for (k, v) in items {
                    match v {
                        Some(v) => {
                            b.put(&key(*k), v).unwrap();
                            model.insert(key(*k), v.clone());
                        }
                        None => {
                            b.delete(&key(*k)).unwrap();
                            model.remove(&key(*k));
                        }
                    }
                }
                db.write_batch(&b).unwrap();
            }
            Op::Fill(a, b) => {
                for k in *a..*b {
                    let v = u64::from(k).to_le_bytes().repeat(5);
                    db.put(&key(k), &v).unwrap();
                    model.insert(key(k), v);
                }
            }
            Op::DeleteRun(a, b) => {
                for k in *a..*b {
                    db.delete(&key(k)).unwrap();
                    model.remove(&key(k));
                }
            }
            Op::Reopen => {
                drop(db);
                db = ZkvStore::open_on(dev.clone(), &opts, zo.clone()).unwrap();
            }
            Op::Checkpoint => db.checkpoint().unwrap(),
            Op::Collect => {
                db.collect_garbage(8).unwrap();
            }
        }
    }
    db.verify().unwrap();
    let all = db.scan_collect(KeyRange::all(), usize::MAX).unwrap();
    let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(all, want);
    drop(db);
    // The MetaLog's leaf size wins over the options' on reopen.
    let other_size = if zo.leaf_size == 4096 { 8192 } else { 4096 };
    let other = zo.leaf_size(other_size);
    let db = ZkvStore::open_on(dev, &opts, other).unwrap();
    db.verify().unwrap();
    for (k, v) in &model {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn zkv_matches_a_btreemap(ops in proptest::collection::vec(op(), 1..400)) {
        run(Variant::Zkv, &ops);
    }

    #[test]
    fn zkv_with_16k_leaves_matches_a_btreemap(ops in proptest::collection::vec(op(), 1..400)) {
        run_with(common::small_opts(Variant::Zkv).leaf_size(16 << 10), &ops);
    }

    #[test]
    fn btree_with_32k_leaves_matches_a_btreemap(ops in proptest::collection::vec(op(), 1..300)) {
        run_with(common::small_opts(Variant::BPlusTree).leaf_size(32 << 10), &ops);
    }

    #[test]
    fn btree_baseline_matches_a_btreemap(ops in proptest::collection::vec(op(), 1..300)) {
        run(Variant::BPlusTree, &ops);
    }

    #[test]
    fn bdtree_baseline_matches_a_btreemap(ops in proptest::collection::vec(op(), 1..300)) {
        run(Variant::BdTree, &ops);
    }
}

/// A long deterministic run in which every mechanism must fire.
#[test]
fn every_mechanism_fires() {
    mechanisms_fire(4096);
}

#[test]
fn every_mechanism_fires_with_16k_leaves() {
    mechanisms_fire(16 << 10);
}

fn mechanisms_fire(leaf_size: usize) {
    let dev = common::mem_device(16);
    let opts = common::options(SyncMode::Never);
    let zo = common::small_opts(Variant::Zkv)
        .geometry(common::geometry(16))
        .leaf_size(leaf_size);
    let db = ZkvStore::open_on(dev, &opts, zo).unwrap();
    let mut model = BTreeMap::new();
    let mut x: u64 = 7;
    // Enough leaves that delta-buffer memory runs short at any leaf size.
    let scale = (leaf_size / 4096).max(1) as u64;
    for i in 0..60_000 * scale {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let k = (x >> 33) % (20_000 * scale);
        let key = format!("key{k:06}").into_bytes();
        if i.is_multiple_of(11) {
            db.delete(&key).unwrap();
            model.remove(&key);
        } else {
            let v = if i.is_multiple_of(97) {
                vec![b'L'; 200]
            } else {
                i.to_le_bytes().to_vec()
            };
            db.put(&key, &v).unwrap();
            model.insert(key, v);
        }
    }
    db.verify().unwrap();
    let s = db.stats();
    assert_eq!(s.field("leaf_size"), Some(leaf_size as f64));
    for name in [
        "mf_evictions",
        "adb_absorbs",
        "direct_merges",
        "pressure_merges",
        "splits",
        "checkpoints",
        "zone_writes",
        "gc_zones",
        "vlog_bytes",
        "mf_shadow_removed",
    ] {
        assert!(
            s.field(name).unwrap() > 0.0,
            "{name} never happened: {:?}",
            s.fields()
        );
    }
    assert!(
        s.field("pages_written").unwrap() > s.field("zone_writes").unwrap(),
        "the ring merger groups pages"
    );
    for (k, v) in &model {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
    }
    let n = db.scan_collect(KeyRange::all(), usize::MAX).unwrap().len();
    assert_eq!(n, model.len());
}

/// Scattered deletes leave leaves nearly empty; ZKV joins them with their
/// neighbours, so the leaf count follows the data down, and every key
/// left reads back, before and after a reopen.
#[test]
fn deletes_join_nearly_empty_leaves() {
    let dev = common::mem_device(24);
    let opts = common::options(SyncMode::Never);
    let zo = common::small_opts(Variant::Zkv);
    let db = ZkvStore::open_on(dev.clone(), &opts, zo.clone()).unwrap();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for i in 0..20_000u32 {
        let k = format!("key{:08}", i.wrapping_mul(2_654_435_761) % 100_000_000).into_bytes();
        // Some values in the value log, whose records the joined leaves
        // must keep pointing at.
        let v = if i.is_multiple_of(13) {
            vec![i as u8; 150]
        } else {
            i.to_le_bytes().to_vec()
        };
        db.put(&k, &v).unwrap();
        model.insert(k, v);
    }
    db.checkpoint().unwrap();
    let leaves = |db: &ZkvStore| db.stats().field("leaves").unwrap();
    let before = leaves(&db);
    // Nine keys in ten, spread over every leaf.
    let victims: Vec<Vec<u8>> = model
        .keys()
        .enumerate()
        .filter(|(i, _)| i % 10 != 3)
        .map(|(_, k)| k.clone())
        .collect();
    for k in &victims {
        db.delete(k).unwrap();
        model.remove(k);
    }
    db.checkpoint().unwrap();
    db.verify().unwrap();
    let after = leaves(&db);
    assert!(db.stats().field("joined_leaves").unwrap() > 0.0);
    assert!(
        after * 3.0 <= before,
        "{before} leaves before the deletes, {after} after"
    );
    let check = |db: &ZkvStore| {
        let all = db.scan_collect(KeyRange::all(), usize::MAX).unwrap();
        assert!(all.into_iter().eq(model.clone()));
    };
    check(&db);
    drop(db);
    let db = ZkvStore::open_on(dev, &opts, zo).unwrap();
    db.verify().unwrap();
    check(&db);
}

#[test]
fn bulk_load_then_updates_for_every_variant() {
    for variant in common::VARIANTS {
        let dev = common::mem_device(24);
        let opts = common::options(SyncMode::Never);
        let db = ZkvStore::open_on(dev.clone(), &opts, common::small_opts(variant)).unwrap();
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = (0..5000u32)
            .map(|i| ((i * 2).to_be_bytes().to_vec(), i.to_le_bytes().to_vec()))
            .collect();
        let n = db.bulk_load(&mut model.clone().into_iter()).unwrap();
        assert_eq!(n, 5000);
        assert!(
            db.bulk_load(&mut std::iter::once((vec![1], vec![1])))
                .is_err(),
            "not empty"
        );
        for i in 0..3000u32 {
            let k = ((i * 7919) % 10_000).to_be_bytes().to_vec();
            db.put(&k, b"new").unwrap();
            model.insert(k, b"new".to_vec());
        }
        db.verify().unwrap();
        drop(db);
        let db = ZkvStore::open_on(dev, &opts, common::small_opts(variant)).unwrap();
        let all = db.scan_collect(KeyRange::all(), usize::MAX).unwrap();
        assert_eq!(all.len(), model.len(), "{variant:?}");
        assert!(all.into_iter().eq(model.into_iter()), "{variant:?}");
    }
}

/// With space tight (a device about 65% full of live leaves), reclamation
/// keeps space amplification near its bound under uniform updates, and
/// every update stays readable.
#[test]
fn reclamation_bounds_space_amplification_when_space_is_tight() {
    let geo = common::geometry(28);
    let zo = common::small_opts(Variant::Zkv)
        .geometry(geo)
        .wal_zones(4)
        .meta_zones(2)
        .gc_space_amp(Some(1.25))
        .checkpoint_wal_bytes(None);
    let dev = common::mem_device(28);
    let opts = common::options(SyncMode::Never);
    let db = ZkvStore::open_on(dev, &opts, zo).unwrap();
    let n = 330_000u64;
    let mut pairs = (0..n).map(|i| (i.to_be_bytes().to_vec(), vec![0u8; 8]));
    db.bulk_load(&mut pairs).unwrap();
    let mut x = 1u64;
    let mut max_amp: f64 = 0.0;
    for i in 0..60_000u64 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let k = (x >> 20) % n;
        db.put(&k.to_be_bytes(), &i.to_le_bytes()).unwrap();
        if i % 5_000 == 4_999 {
            max_amp = max_amp.max(db.space_amplification());
        }
    }
    let s = db.stats();
    assert!(
        s.field("gc_zones").unwrap() > 0.0,
        "nothing was reclaimed: {:?}",
        s.fields()
    );
    assert!(max_amp <= 1.35, "space amplification reached {max_amp}");
    db.verify().unwrap();
    assert_eq!(
        db.scan_collect(KeyRange::all(), usize::MAX).unwrap().len() as u64,
        n
    );
}
