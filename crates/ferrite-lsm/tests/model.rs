//! Model-based tests: random operations against the LSM engine and a
//! `BTreeMap`, with memtables and tables so small that flushes and
//! compactions happen constantly, reopening in between.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::collections::BTreeMap;
use std::ops::Bound;

use ferrite_core::{KeyRange, KvStore, KvStoreExt, SyncMode, WriteBatch};
use ferrite_learned::FitKind;
use ferrite_lsm::IndexKind;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Put(u16, u16),
    Delete(u16),
    Get(u16),
    Scan(u16, u16),
    Batch(Vec<(u16, Option<u16>)>),
    Flush,
    Reopen,
}

/// Keys share long prefixes and collide in their first 8 bytes, which is
/// what a learned index must cope with.
fn key(k: u16) -> Vec<u8> {
    if k.is_multiple_of(3) {
        format!("user{:06}", k).into_bytes()
    } else {
        format!("usr{:05}-{}", k / 7, k % 7).into_bytes()
    }
}

fn value(k: u16, v: u16) -> Vec<u8> {
    let n = (v as usize * 7) % 300;
    let mut out = format!("{k}:{v}:").into_bytes();
    out.resize(out.len() + n, b'x');
    out
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        30 => (0..600u16, any::<u16>()).prop_map(|(k, v)| Op::Put(k, v)),
        8 => (0..600u16).prop_map(Op::Delete),
        15 => (0..600u16).prop_map(Op::Get),
        4 => (0..600u16, 0..600u16).prop_map(|(a, b)| Op::Scan(a.min(b), a.max(b))),
        4 => proptest::collection::vec((0..600u16, proptest::option::of(any::<u16>())), 1..20).prop_map(Op::Batch),
        1 => Just(Op::Flush),
        1 => Just(Op::Reopen),
    ]
}

fn run(ops: Vec<Op>, index: IndexKind) {
    run_with(ops, common::tiny(index));
}

fn run_with(ops: Vec<Op>, lsm: ferrite_lsm::LsmOptions) {
    run_loaded(BTreeMap::new(), ops, lsm);
}

/// [`run_with`] on a store that first bulk-loads `initial` (key → value
/// numbers).
fn run_loaded(initial: BTreeMap<u16, u16>, ops: Vec<Op>, lsm: ferrite_lsm::LsmOptions) {
    let d = common::fresh();
    let mut db = common::open(&d, lsm.clone(), SyncMode::Never).unwrap();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = initial
        .iter()
        .map(|(&k, &v)| (key(k), value(k, v)))
        .collect();
    let loaded = db
        .bulk_load(&mut model.iter().map(|(k, v)| (k.clone(), v.clone())))
        .unwrap();
    assert_eq!(loaded, model.len() as u64);
    for op in ops {
        match op {
            Op::Put(k, v) => {
                db.put(&key(k), &value(k, v)).unwrap();
                model.insert(key(k), value(k, v));
            }
            Op::Delete(k) => {
                db.delete(&key(k)).unwrap();
                model.remove(&key(k));
            }
            Op::Get(k) => assert_eq!(db.get(&key(k)).unwrap().as_ref(), model.get(&key(k))),
            Op::Scan(a, b) => {
                let (ka, kb) = (key(a), key(b));
                let (lo, hi) = if ka <= kb { (ka, kb) } else { (kb, ka) };
                let got = db
                    .scan_collect(KeyRange::from_bounds(&lo[..]..&hi[..]), usize::MAX)
                    .unwrap();
                let want: Vec<_> = model
                    .range::<Vec<u8>, _>((Bound::Included(&lo), Bound::Excluded(&hi)))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                assert_eq!(got, want);
            }
            Op::Batch(items) => {
                let mut b = WriteBatch::new();
                for (k, v) in items {
                    match v {
                        Some(v) => {
                            b.put(&key(k), &value(k, v)).unwrap();
                            model.insert(key(k), value(k, v));
                        }
                        None => {
                            b.delete(&key(k)).unwrap();
                            model.remove(&key(k));
                        }
                    }
                }
                db.write_batch(&b).unwrap();
            }
            Op::Flush => db.flush().unwrap(),
            Op::Reopen => {
                db.sync().unwrap();
                drop(db);
                db = common::open(&d, lsm.clone(), SyncMode::Never).unwrap();
            }
        }
    }
    db.wait_for_compactions().unwrap();
    db.verify().unwrap();
    assert_eq!(common::contents(&db), model);
    for (k, v) in &model {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn learned_index_store_matches_a_btreemap(ops in proptest::collection::vec(op(), 1..1500)) {
        run(ops, IndexKind::LEARNED);
    }

    #[test]
    fn sparse_index_store_matches_a_btreemap(ops in proptest::collection::vec(op(), 1..1500)) {
        run(ops, IndexKind::Sparse);
    }

    #[test]
    fn a_bulk_loaded_store_then_written_matches_a_btreemap(
        initial in proptest::collection::btree_map(0..600u16, any::<u16>(), 0..600),
        ops in proptest::collection::vec(op(), 1..800),
        partitions in prop_oneof![Just(1usize), Just(4usize)],
    ) {
        run_loaded(initial, ops, common::tiny(IndexKind::LEARNED).partitions(partitions));
    }

    #[test]
    fn partitioned_store_matches_a_btreemap(ops in proptest::collection::vec(op(), 1..1500)) {
        run_with(ops, common::tiny(IndexKind::LEARNED).partitions(5));
    }

    #[test]
    fn plr_only_single_line_and_bourbon_stores_match_a_btreemap(ops in proptest::collection::vec(op(), 1..600)) {
        run(ops.clone(), IndexKind::Learned { fit: FitKind::Piecewise, eps: 2.0 });
        run(ops.clone(), IndexKind::Learned { fit: FitKind::Linear, eps: 0.0 });
        run(ops, IndexKind::BOURBON);
    }
}

#[test]
fn a_bulk_load_refuses_a_store_with_data_or_unsorted_input_and_loses_nothing() {
    let d = common::fresh();
    let db = common::open(&d, common::tiny(IndexKind::Sparse), SyncMode::Never).unwrap();
    let unsorted = vec![(key(3), value(3, 1)), (key(0), value(0, 1))];
    assert!(matches!(
        db.bulk_load(&mut unsorted.into_iter()),
        Err(ferrite_core::Error::NotAscending { index: 1 })
    ));
    // Nothing of a refused load is installed: the store is still empty.
    assert!(common::contents(&db).is_empty());
    let pairs: Vec<_> = (0..300u16).map(|k| (key(k), value(k, 7))).collect();
    let mut sorted = pairs.clone();
    sorted.sort();
    assert_eq!(db.bulk_load(&mut sorted.clone().into_iter()).unwrap(), 300);
    assert!(matches!(
        db.bulk_load(&mut sorted.clone().into_iter()),
        Err(ferrite_core::Error::InvalidOptions(_))
    ));
    // Loaded pairs are in the bottom level, not in a log: a reopen keeps
    // them, and a later write wins over a loaded pair.
    // A range delete right after the load takes loaded pairs out (its
    // sequence number is above theirs).
    db.delete_range(b"user000000", b"user000100").unwrap();
    db.put(&key(5), b"newer").unwrap();
    drop(db);
    let db = common::open(&d, common::tiny(IndexKind::Sparse), SyncMode::Never).unwrap();
    db.put(&key(6), b"newest").unwrap();
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    db.verify().unwrap();
    let mut want: BTreeMap<Vec<u8>, Vec<u8>> = sorted
        .into_iter()
        .filter(|(k, _)| {
            !(k.as_slice() >= b"user000000".as_slice() && k.as_slice() < b"user000100".as_slice())
        })
        .collect();
    want.insert(key(5), b"newer".to_vec());
    want.insert(key(6), b"newest".to_vec());
    assert_eq!(common::contents(&db), want);
}

#[test]
fn a_long_run_reaches_deep_levels_and_stays_consistent() {
    let d = common::fresh();
    let db = common::open(&d, common::tiny(IndexKind::LEARNED), SyncMode::Never).unwrap();
    let mut model = BTreeMap::new();
    for i in 0..20_000u32 {
        let k = key((i.wrapping_mul(2_654_435_761) % 5000) as u16);
        let v = value(i as u16, (i % 97) as u16);
        if i % 11 == 0 {
            db.delete(&k).unwrap();
            model.remove(&k);
        } else {
            db.put(&k, &v).unwrap();
            model.insert(k, v);
        }
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    let r = db.report();
    assert!(r.levels.iter().skip(2).any(|l| l.tables > 0), "{r:?}");
    assert!(
        r.levels.iter().all(|l| l.learned_tables == l.tables),
        "(tables, learned) per level: {:?}; sparse fallbacks: {:?}",
        r.levels
            .iter()
            .map(|l| (l.tables, l.learned_tables))
            .collect::<Vec<_>>(),
        db.stats().field("sparse_fallbacks")
    );
    let st = db.stats();
    assert!(st.field("compactions").unwrap() > 10.0);
    db.verify().unwrap();
    assert_eq!(common::contents(&db), model);
}

#[test]
fn tables_a_model_does_not_pay_for_keep_the_sparse_index() {
    let d = common::fresh();
    // The default: two-block tables, where separators are smaller than any
    // model, all fall back; the store reads the same either way.
    let db = common::open(
        &d,
        common::tiny(IndexKind::LEARNED).smaller_index(true),
        SyncMode::Never,
    )
    .unwrap();
    let mut model = BTreeMap::new();
    for i in 0..6000u32 {
        let k = key((i.wrapping_mul(2_654_435_761) % 3000) as u16);
        let v = value(i as u16, (i % 31) as u16);
        db.put(&k, &v).unwrap();
        model.insert(k, v);
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    let r = db.report();
    let tables: usize = r.levels.iter().map(|l| l.tables).sum();
    let learned: usize = r.levels.iter().map(|l| l.learned_tables).sum();
    let st = db.stats();
    assert!(tables > 0 && learned == 0, "{r:?}");
    assert!(st.field("sparse_fallbacks").unwrap() >= tables as f64);
    let sparse_live: f64 = (0..r.levels.len())
        .map(|l| st.field(&format!("l{l}_sparse_tables")).unwrap())
        .sum();
    assert_eq!(sparse_live, tables as f64);
    db.verify().unwrap();
    assert_eq!(common::contents(&db), model);
}

#[test]
fn load_aware_construction_learns_only_where_lookups_pay() {
    let d = common::fresh();
    // A saving so large that any lookup pays for a model, so the test
    // checks the mechanics (counters reach the policy), not a tuning.
    let opts = common::tiny(IndexKind::LEARNED)
        .load_aware(Some(ferrite_lsm::LoadAware { saving_ns: 1e6 }));
    let db = common::open(&d, opts, SyncMode::Never).unwrap();
    // Writes alone: every compaction output is left sparse.
    for i in 0..6000u32 {
        db.put(&key((i % 3000) as u16), &value(i as u16, 1))
            .unwrap();
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    let st = db.stats();
    assert!(st.field("load_aware_sparse").unwrap() > 0.0);
    assert_eq!(st.field("load_aware_learned"), Some(0.0));
    assert_eq!(
        db.report()
            .levels
            .iter()
            .map(|l| l.learned_tables)
            .sum::<usize>(),
        0
    );
    // Reads between writes: the tables they hit get models when rewritten.
    let mut most_learned = 0;
    for round in 0..6u32 {
        for _ in 0..10 {
            for k in 0..3000u16 {
                assert!(db.get(&key(k)).unwrap().is_some());
            }
        }
        for i in 0..3000u16 {
            db.put(&key(i), &value(i, 2 + round as u16)).unwrap();
        }
        db.flush().unwrap();
        db.wait_for_compactions().unwrap();
        let learned: usize = db.report().levels.iter().map(|l| l.learned_tables).sum();
        most_learned = most_learned.max(learned);
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    let st = db.stats();
    assert!(
        st.field("load_aware_learned").unwrap() > 0.0,
        "{:?}",
        st.fields()
    );
    assert!(most_learned > 0, "no learned table was ever live");
    db.verify().unwrap();
}

#[test]
fn dropping_a_partition_removes_exactly_its_keys() {
    let d = common::fresh();
    let lsm = common::tiny(IndexKind::LEARNED).partitions(4);
    let db = common::open(&d, lsm.clone(), SyncMode::Never).unwrap();
    let mut model = BTreeMap::new();
    for i in 0..4000u32 {
        let k = key((i % 2000) as u16);
        db.put(&k, &value(i as u16, 1)).unwrap();
        model.insert(k, value(i as u16, 1));
    }
    let victim = lsm.partition_of(&key(7));
    db.drop_partition(victim).unwrap();
    model.retain(|k, _| lsm.partition_of(k) != victim);
    assert!(model.len() < 2000 && !model.is_empty());
    // Writes after the drop are kept, in every partition.
    for k in [7u16, 8, 9, 10] {
        db.put(&key(k), b"after").unwrap();
        model.insert(key(k), b"after".to_vec());
    }
    assert_eq!(common::contents(&db), model);
    assert_eq!(db.stats().field("partition_drops"), Some(1.0));
    assert!(db.drop_partition(4).is_err(), "partition out of range");
    drop(db);
    // Partitions route keys, so the store keeps its own count when opened
    // with another.
    let other = common::tiny(IndexKind::LEARNED).partitions(8);
    let db = common::open(&d, other, SyncMode::Never).unwrap();
    assert_eq!(common::contents(&db), model);
    drop(db);
    let db = common::open(&d, lsm, SyncMode::Never).unwrap();
    db.wait_for_compactions().unwrap();
    db.verify().unwrap();
    assert_eq!(common::contents(&db), model);
}
