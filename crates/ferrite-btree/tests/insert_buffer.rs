//! The B+tree with its insert buffer on (TurboIndex) against a BTreeMap:
//! 1 KiB pages and a pool a fraction of the data, so writes are buffered,
//! pages are promoted and loaded with postponed inserts, the buffer runs
//! full and applies its coldest pages, and checkpoints carry buffered
//! records over — all constantly.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use ferrite_btree::{BTreeOptions, BTreeStore, InsertBufferOptions};
use ferrite_core::{KeyRange, KvStore, KvStoreExt, Options, WriteBatch};
use ferrite_io::MemDevice;
use proptest::prelude::*;

type Devs = [Arc<MemDevice>; 6];

fn devices() -> Devs {
    common::mem_devices(1024)
}

fn open(d: &Devs, threshold: u8) -> BTreeStore {
    let bt = BTreeOptions::default()
        .page_size(1024)
        .checkpoint_wal_bytes(256 << 10)
        .insert_buffer(Some(
            InsertBufferOptions::default()
                .share(0.3)
                .reuse_threshold(threshold),
        ))
        .shortcut(None);
    common::open_unsynced(d, 100 << 10, bt).unwrap()
}

fn key(i: u32) -> Vec<u8> {
    format!("k{i:06}").into_bytes()
}

/// Loads `n` keys so the data is several times the pool.
fn preload(db: &BTreeStore, model: &mut BTreeMap<Vec<u8>, Vec<u8>>, n: u32) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(200) {
        let mut b = WriteBatch::new();
        for &i in chunk {
            b.put(&key(i), &i.to_le_bytes()).unwrap();
            model.insert(key(i), i.to_le_bytes().to_vec());
        }
        db.write_batch(&b).unwrap();
    }
}

fn check(db: &BTreeStore, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    db.verify().unwrap();
    let all = db.scan_collect(KeyRange::all(), usize::MAX).unwrap();
    let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(all.len(), want.len(), "full scan length");
    assert!(all == want, "full scan differs from the model");
    for (k, v) in model.iter().step_by(7) {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
    }
}

#[derive(Debug, Clone)]
enum Op {
    Put(u32, usize),
    Delete(u32),
    Get(u32),
    /// A run of lookups long enough that the adaptive gate turns the
    /// buffer off (and the writes after it turn it on again).
    Reads(u32, u32),
    Scan(u32, u32),
    Batch(Vec<(u32, usize)>),
    Big(u32),
    Reopen,
    Flush,
}

fn op(keys: u32) -> impl Strategy<Value = Op> {
    prop_oneof![
        30 => (0..keys, 0usize..40).prop_map(|(k, n)| Op::Put(k, n)),
        6 => (0..keys).prop_map(Op::Delete),
        10 => (0..keys).prop_map(Op::Get),
        1 => (0..keys, 100u32..600).prop_map(|(k, n)| Op::Reads(k, n)),
        3 => (0..keys, 1u32..200).prop_map(|(k, n)| Op::Scan(k, n)),
        3 => proptest::collection::vec((0..keys, 0usize..40), 1..30).prop_map(Op::Batch),
        1 => (0..keys).prop_map(Op::Big),
        1 => Just(Op::Reopen),
        1 => Just(Op::Flush),
    ]
}

fn value(i: u32, n: usize) -> Vec<u8> {
    (0..n).map(|j| (i as usize + j) as u8).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]
    #[test]
    fn behaves_like_a_map(ops in proptest::collection::vec(op(4000), 300..1200), threshold in 1u8..3) {
        let d = devices();
        let mut db = open(&d, threshold);
        let mut model = BTreeMap::new();
        preload(&db, &mut model, 4000);
        for op in ops {
            match op {
                Op::Put(i, n) => {
                    db.put(&key(i), &value(i, n)).unwrap();
                    model.insert(key(i), value(i, n));
                }
                Op::Delete(i) => {
                    db.delete(&key(i)).unwrap();
                    model.remove(&key(i));
                }
                Op::Get(i) => {
                    prop_assert_eq!(db.get(&key(i)).unwrap(), model.get(&key(i)).cloned());
                }
                Op::Reads(start, n) => {
                    for j in 0..n {
                        let i = (start + j * 7919) % 4000;
                        prop_assert_eq!(db.get(&key(i)).unwrap(), model.get(&key(i)).cloned());
                    }
                }
                Op::Scan(i, n) => {
                    let (a, b) = (key(i), key(i + n));
                    let got = db
                        .scan_collect(KeyRange::from_bounds(&a[..]..&b[..]), usize::MAX)
                        .unwrap();
                    let want: Vec<_> = model
                        .range(a.clone()..b.clone())
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    prop_assert_eq!(got, want);
                }
                Op::Batch(items) => {
                    let mut b = WriteBatch::new();
                    for (i, n) in items {
                        if n % 5 == 0 {
                            b.delete(&key(i)).unwrap();
                            model.remove(&key(i));
                        } else {
                            b.put(&key(i), &value(i, n)).unwrap();
                            model.insert(key(i), value(i, n));
                        }
                    }
                    db.write_batch(&b).unwrap();
                }
                Op::Big(i) => {
                    // Too large to buffer: takes the page path, after the
                    // page's buffered records.
                    db.put(&key(i), &value(i, 3000)).unwrap();
                    model.insert(key(i), value(i, 3000));
                }
                Op::Reopen => {
                    drop(db);
                    db = open(&d, threshold);
                }
                Op::Flush => db.flush().unwrap(),
            }
        }
        check(&db, &model);
        drop(db);
        let db = open(&d, threshold);
        check(&db, &model);
    }
}

#[test]
fn every_mechanism_runs_and_the_answers_stay_right() {
    let d = devices();
    let db = open(&d, 2);
    let mut model = BTreeMap::new();
    preload(&db, &mut model, 20_000);
    let mut x = 99u64;
    for step in 0..60_000u32 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        // Three sets with probabilities 0.8 / 0.19 / 0.01, as the paper's
        // workload 3, so hot pages get promoted and cold ones stay buffered.
        let r = (x >> 33) % 100;
        let third = 20_000 / 3;
        let base = if r < 80 {
            0
        } else if r < 99 {
            third
        } else {
            2 * third
        };
        let i = base + ((x >> 8) % u64::from(third)) as u32;
        if step % 11 == 0 {
            db.delete(&key(i)).unwrap();
            model.remove(&key(i));
        } else {
            db.put(&key(i), &value(i, 8)).unwrap();
            model.insert(key(i), value(i, 8));
        }
        if step % 5_000 == 0 {
            assert_eq!(db.get(&key(i)).unwrap(), model.get(&key(i)).cloned());
        }
    }
    let s = db.stats();
    let e = |n: &str| s.field(n).unwrap();
    assert!(
        e("ib_buffered_writes") > 10_000.0,
        "buffered {}",
        e("ib_buffered_writes")
    );
    assert!(
        e("ib_hot_loads") > 0.0,
        "no page reached the reuse threshold"
    );
    assert!(e("ib_pressure_loads") > 0.0, "the buffer never ran full");
    assert!(e("ib_promotions") > 0.0);
    assert!(e("spills") > 0.0, "no dirty page was evicted");
    eprintln!(
        "ib {} budget {} nodes {} pages {} records {}",
        e("ib_bytes"),
        e("ib_budget_bytes"),
        e("ib_stack_nodes"),
        e("ib_pages"),
        e("ib_records")
    );
    assert!(e("ib_bytes") <= e("ib_budget_bytes") * 1.05 + 4096.0);
    // The caches stay within the budget; the WAL and checkpoint buffers'
    // minimum sizes are reported on top at a budget this small.
    let caches = s.memory_bytes as f64 - e("working_bytes");
    assert!(
        caches <= f64::from(100 << 10) + 8192.0,
        "caches hold {caches} B"
    );
    check(&db, &model);
    drop(db);
    let db = open(&d, 2);
    check(&db, &model);
}

#[test]
fn the_gate_lends_the_buffer_to_the_pool_while_reads_dominate() {
    let d = devices();
    let db = open(&d, 2);
    let mut model = BTreeMap::new();
    preload(&db, &mut model, 20_000);
    let e = |db: &BTreeStore, n: &str| db.stats().field(n).unwrap();
    let frames_on = e(&db, "pool_frames");
    let mut x = 7u64;
    let mut next = |n: u64| {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 33) % n
    };
    // Uniform lookups with a write in fifty: the buffer's frames are worth
    // more to lookups than the reads its writes save.
    for step in 0..20_000u32 {
        let i = next(20_000) as u32;
        if step % 50 == 0 {
            db.put(&key(i), &value(i, 8)).unwrap();
            model.insert(key(i), value(i, 8));
        } else {
            assert_eq!(db.get(&key(i)).unwrap(), model.get(&key(i)).cloned());
        }
    }
    assert_eq!(e(&db, "ib_on"), 0.0, "the buffer is still on");
    assert!(e(&db, "ib_switches") >= 1.0);
    assert_eq!(e(&db, "ib_bytes"), 0.0);
    assert!(e(&db, "pool_frames") > frames_on, "no memory was lent");
    let s = db.stats();
    let caches = s.memory_bytes as f64 - s.field("working_bytes").unwrap();
    assert!(caches <= f64::from(100 << 10), "caches hold {caches} B");
    check(&db, &model);
    // Writes only: the buffer comes back, and the pool returns the frames.
    for _ in 0..5_000 {
        let i = next(20_000) as u32;
        db.put(&key(i), &value(i, 9)).unwrap();
        model.insert(key(i), value(i, 9));
    }
    assert_eq!(e(&db, "ib_on"), 1.0, "the buffer stayed off");
    assert_eq!(e(&db, "pool_frames"), frames_on);
    assert!(e(&db, "ib_records") > 0.0);
    check(&db, &model);
    drop(db);
    let db = open(&d, 2);
    check(&db, &model);
}

#[test]
fn a_plain_btree_directory_is_not_opened_as_turboindex() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options::default().direct_io(false);
    drop(BTreeStore::open(dir.path(), &opts, BTreeOptions::default()).unwrap());
    assert!(BTreeStore::open(dir.path(), &opts, BTreeOptions::turbo()).is_err());
    let dir = tempfile::tempdir().unwrap();
    let db = BTreeStore::open(dir.path(), &opts, BTreeOptions::turbo()).unwrap();
    db.put(b"a", b"1").unwrap();
    drop(db);
    let db = BTreeStore::open(dir.path(), &opts, BTreeOptions::turbo()).unwrap();
    assert_eq!(db.get(b"a").unwrap(), Some(b"1".to_vec()));
}
