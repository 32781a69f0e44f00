//! Partitions' flush buffers and L0 index (SwiftKV §3.2): a partition's
//! share of flushed memtables waits until it makes a table's worth, reads
//! and scans see it meanwhile, `flush` and recovery move it to tables, and
//! recovery does not copy again what a partition already wrote out.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::collections::BTreeMap;

use ferrite_core::{KeyRange, KvStore, KvStoreExt, SyncMode};
use ferrite_lsm::{IndexKind, LsmOptions};

/// Options whose L0 never compacts, so its tables can be counted: neither
/// its runs nor its bytes (against L1's target) reach a trigger.
fn options(partitions: usize, table_bytes: usize) -> LsmOptions {
    common::tiny(IndexKind::LEARNED)
        .l1_bytes(1 << 30)
        .memtable_bytes(64 << 10)
        .max_immutable(1)
        .table_bytes(table_bytes)
        .l0_compaction_trigger(1000)
        .l0_slowdown(1000)
        .l0_stop(1000)
        .partitions(partitions)
}

fn key(i: u64) -> Vec<u8> {
    let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut k = x.to_be_bytes().to_vec();
    k.extend_from_slice(&i.to_be_bytes());
    k
}

fn extra(db: &ferrite_lsm::LsmStore, name: &str) -> f64 {
    db.stats().field(name).unwrap()
}

#[test]
fn buffers_write_fewer_larger_l0_tables_and_reads_see_them() {
    let parts = 8;
    let d = common::fresh();
    let lsm = options(parts, 1 << 20);
    let db = common::open(&d, lsm.clone(), SyncMode::Never).unwrap();
    let mut model = BTreeMap::new();
    let mut checked_buffered = 0;
    for i in 0..8000u64 {
        let v = vec![(i % 251) as u8; 100];
        db.put(&key(i), &v).unwrap();
        model.insert(key(i), v);
        if i % 500 == 499 {
            db.wait_for_compactions().unwrap();
            if extra(&db, "flush_buffer_bytes") > 0.0 {
                // Lookups and scans see buffered entries.
                checked_buffered += 1;
                for k in model.keys().step_by(5) {
                    assert_eq!(db.get(k).unwrap().as_ref(), model.get(k));
                }
                assert_eq!(common::contents(&db), model);
            }
        }
    }
    assert!(checked_buffered > 3, "buffers were seldom holding entries");
    db.wait_for_compactions().unwrap();
    let flushes = extra(&db, "flushes");
    let l0 = extra(&db, "l0_tables");
    assert!(flushes >= 6.0, "{flushes} flushes");
    // Unbuffered, every flush writes one table per partition; a buffer
    // keeps two flushed memtables besides the immutable one here, so a
    // partition writes at most every other flush.
    assert!(
        l0 <= flushes * parts as f64 / 2.0,
        "{l0} L0 tables after {flushes} flushes"
    );
    let (lo, hi) = (key(3), key(4000));
    let (lo, hi) = if lo <= hi { (lo, hi) } else { (hi, lo) };
    let got = db
        .scan_collect(KeyRange::from_bounds(&lo[..]..&hi[..]), usize::MAX)
        .unwrap();
    let want: Vec<_> = model
        .range(lo.clone()..hi.clone())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(got, want);
    // Closing keeps buffered entries in their WALs; reopening replays them.
    drop(db);
    let db = common::open(&d, lsm.clone(), SyncMode::Never).unwrap();
    assert_eq!(common::contents(&db), model);
    // `flush` empties the buffers into tables.
    db.put(&key(9_000_000), b"late").unwrap();
    model.insert(key(9_000_000), b"late".to_vec());
    db.flush().unwrap();
    assert_eq!(extra(&db, "flush_buffer_bytes"), 0.0);
    db.verify().unwrap();
    assert_eq!(common::contents(&db), model);
    // Compacting L0 away (of every partition) keeps every key.
    assert!(extra(&db, "l0_tables") > 0.0);
    db.compact_l0().unwrap();
    assert_eq!(extra(&db, "l0_tables"), 0.0);
    db.verify().unwrap();
    assert_eq!(common::contents(&db), model);
}

#[test]
fn recovery_copies_nothing_a_partition_already_wrote_out() {
    let parts = 2;
    let d = common::fresh();
    // Partition 0 gets large values and fills a table's worth every flush;
    // partition 1's few small entries wait in its buffer until the WAL
    // they are in is needed, so at close it still holds memtables that
    // partition 0 has written out.
    let lsm = options(parts, 48 << 10);
    let db = common::open(&d, lsm.clone(), SyncMode::Never).unwrap();
    let mut model = BTreeMap::new();
    for i in 0..6000u64 {
        let k = key(i);
        let v = if lsm.partition_of(&k) == 0 {
            vec![1u8; 200]
        } else if i % 16 == 1 {
            vec![2u8; 4]
        } else {
            continue;
        };
        db.put(&k, &v).unwrap();
        model.insert(k, v);
    }
    db.wait_for_compactions().unwrap();
    assert!(extra(&db, "flush_buffer_bytes") > 0.0);
    drop(db);
    let db = common::open(&d, lsm, SyncMode::Never).unwrap();
    assert_eq!(common::contents(&db), model);
    // Every key was written once and nothing compacts: L0 holds each entry
    // once unless recovery copied entries already in tables.
    let entries: u64 = db.report().levels.iter().map(|l| l.entries).sum();
    assert_eq!(entries, model.len() as u64);
    db.verify().unwrap();
}
