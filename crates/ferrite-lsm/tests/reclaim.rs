//! A store left idle after deleting what it holds gives the space back:
//! the memtable holding the deletes is flushed once writes stop, and the
//! tables made mostly of deletes are compacted down until the deletes meet
//! what they delete and both are dropped, with no further write to
//! trigger a compaction.

mod common;

use std::time::{Duration, Instant};

use ferrite_core::{KeyRange, KvStore, KvStoreExt, SyncMode, WriteBatch};
use ferrite_lsm::{IndexKind, LsmStore};
use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};

/// The tables' data, uncompressed (the test's values compress to almost
/// nothing).
fn table_bytes(db: &LsmStore) -> u64 {
    db.report()
        .levels
        .iter()
        .map(|l| l.uncompressed_data_bytes)
        .sum()
}

#[test]
fn an_idle_store_drops_what_it_deleted() {
    let d = common::fresh();
    // A memtable that holds all the deletes: a mass delete's last
    // memtable, whose deletes only the idle flush brings to a table.
    let opts = common::tiny(IndexKind::Sparse)
        .memtable_bytes(1 << 20)
        .table_bytes(32 << 10)
        .l1_bytes(128 << 10)
        .l0_compaction_trigger(4);
    let db = common::open(&d, opts, SyncMode::Never).unwrap();
    let key = |i: u32| format!("key{i:08}").into_bytes();
    for chunk in 0..50u32 {
        let mut b = WriteBatch::new();
        for i in chunk * 100..(chunk + 1) * 100 {
            b.put(&key(i), &[i as u8; 100]).unwrap();
        }
        db.write_batch(&b).unwrap();
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    let full = table_bytes(&db);
    assert!(full > 400 << 10, "the load is in tables: {full} bytes");

    // Deletes of every key but the last hundred, then nothing.
    for chunk in 0..49u32 {
        let mut b = WriteBatch::new();
        for i in chunk * 100..(chunk + 1) * 100 {
            b.delete(&key(i)).unwrap();
        }
        db.write_batch(&b).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let left = loop {
        let now = table_bytes(&db);
        // The deleted values leave the tables only once the deletes,
        // flushed from the idle memtable, have been compacted onto them.
        let mem = db.report().memtable_bytes;
        if now < full / 10 {
            break now;
        }
        assert!(
            Instant::now() < deadline,
            "after 30 s idle the tables still hold {now} of {full} bytes, memtables {mem}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(left > 0, "the hundred live keys stay");
    let live = db.scan_collect(KeyRange::all(), usize::MAX).unwrap();
    assert_eq!(live.len(), 100);
    assert_eq!(live[0].0, key(4900));
    // And the trigger rests: a settled store stops compacting.
    let settled = db.report().levels;
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(db.report().levels, settled);
}

/// A WAL outlives its memtable by one manifest write at most, not until
/// its device comes round again, and a store closed cleanly keeps only
/// the live memtable's log (one block): every other WAL device is empty,
/// and every write reads back after reopening.
#[test]
fn the_logs_of_flushed_memtables_are_emptied() {
    use ferrite_io::BlockDevice;
    let d = common::fresh();
    let opts = common::tiny(IndexKind::Sparse);
    let db = common::open(&d, opts.clone(), SyncMode::Always).unwrap();
    let mut model = std::collections::BTreeMap::new();
    for i in 0..3000u32 {
        let (k, v) = (
            format!("key{:08}", i * 7919 % 3001).into_bytes(),
            vec![i as u8; 100],
        );
        db.put(&k, &v).unwrap();
        model.insert(k, v);
    }
    db.flush().unwrap();
    let retired = db.stats().field("retired_logs").unwrap();
    assert!(retired > 0.0, "no log was emptied while the store ran");
    db.close().unwrap();
    let logs: Vec<u64> = d[3..].iter().map(|x| x.len()).collect();
    let kept: Vec<u64> = logs.iter().copied().filter(|&l| l > 0).collect();
    assert_eq!(kept.len(), 1, "logs at rest: {logs:?}");
    assert!(kept[0] <= 4096, "the live log holds one block: {logs:?}");

    let db = common::open(&d, opts, SyncMode::Always).unwrap();
    assert_eq!(common::contents(&db), model);
    db.verify().unwrap();
}

/// Options whose memtable holds the whole test, so only `flush` makes L0
/// tables and only the count trigger (never reached here) or the close
/// merges them.
fn roomy() -> ferrite_lsm::LsmOptions {
    ferrite_lsm::LsmOptions::default()
        .memtable_bytes(4 << 20)
        .table_bytes(64 << 10)
        .l0_compaction_trigger(4)
        .l1_bytes(64 << 20)
        .level_multiplier(10)
        .levels(4)
        .index(IndexKind::Sparse)
}

/// Loads 3000 keys into L1, then rewrites `rewritten` of them into one L0
/// table, closes and reopens: the levels' table counts and entries.
fn at_rest_after_rewriting(rewritten: u32) -> (Vec<usize>, u64) {
    let d = common::fresh();
    let db = common::open(&d, roomy(), SyncMode::Never).expect("open");
    let mut model = std::collections::BTreeMap::new();
    let mut put = |db: &LsmStore, i: u32, round: u8| {
        // Values that do not compress, so table bytes follow the pairs.
        let mut v = vec![0u8; 100];
        SmallRng::seed_from_u64(u64::from(i) << 8 | u64::from(round)).fill_bytes(&mut v);
        let k = format!("key{i:08}").into_bytes();
        db.put(&k, &v).expect("put");
        model.insert(k, v);
    };
    for i in 0..3000 {
        put(&db, i, 1);
    }
    db.flush().expect("flush");
    db.compact_l0().expect("compact L0");
    for i in 0..rewritten {
        put(&db, i * 3 % 3000, 2);
    }
    db.flush().expect("flush");
    assert_eq!(db.report().levels[0].runs, 1, "the rewrites are one L0 run");
    db.close().expect("close");

    let db = common::open(&d, roomy(), SyncMode::Never).expect("open");
    assert_eq!(common::contents(&db), model);
    db.verify().expect("verify");
    let r = db.report();
    (
        r.levels.iter().map(|l| l.tables).collect(),
        r.levels.iter().map(|l| l.entries).sum(),
    )
}

#[test]
fn a_close_leaves_no_shadowed_versions_once_l0_is_a_tenth_of_the_store() {
    // A third of the keys rewritten: L0 is about a third of L1's bytes, so
    // the close merges it and every key is stored once at rest.
    let (tables, entries) = at_rest_after_rewriting(1000);
    assert_eq!(tables[0], 0, "L0 left at rest: {tables:?}");
    assert_eq!(entries, 3000, "shadowed versions left at rest");
    // Ten keys rewritten: well under a tenth, the close leaves L0 alone
    // rather than rewrite L1 for them.
    let (tables, entries) = at_rest_after_rewriting(10);
    assert_eq!(tables[0], 1, "{tables:?}");
    assert_eq!(entries, 3010);
}

/// An L0 → L1 merge of everything a store holds (four flushes of random
/// keys into an empty L1, the shape a load leaves) installs its outputs
/// slice by slice and frees the inputs it has passed, so the table space
/// never holds the data twice: the most of it in use at once stays within
/// 1.4× the live tables, where a merge that installs only at its end
/// needs 2×. Reads and a reopen see every pair.
#[test]
fn an_l0_merge_needs_room_for_a_slice_not_for_the_data_twice() {
    let d = common::fresh();
    let opts = common::tiny(IndexKind::Sparse)
        .memtable_bytes(256 << 10)
        // Flushes by the memtable's size alone, so the load stays in L0
        // until the merge under test.
        .log_share(0.0)
        .max_immutable(1)
        .table_bytes(32 << 10)
        .l0_compaction_trigger(8)
        .l0_slowdown(16)
        .l0_stop(24)
        .l1_bytes(64 << 20)
        .level_multiplier(10);
    let db = common::open(&d, opts.clone(), SyncMode::Never).unwrap();
    let mut rng = SmallRng::seed_from_u64(7);
    let mut model = std::collections::BTreeMap::new();
    for _ in 0..6000 {
        let k = format!("user{:016}", rng.next_u64()).into_bytes();
        // Random values: compression would hide what the space holds.
        let mut v = vec![0u8; 100];
        rng.fill_bytes(&mut v);
        db.put(&k, &v).unwrap();
        model.insert(k, v);
    }
    db.flush().unwrap();
    let before = db.report();
    assert!(
        before.levels[0].runs >= 3,
        "the load is several L0 runs: {:?}",
        before.levels[0]
    );
    assert!(
        before.levels[0].tables > before.levels[0].runs,
        "flushes cut their output into pieces"
    );
    assert_eq!(before.levels[1].tables, 0, "nothing is in L1 yet");

    db.compact_l0().unwrap();
    let after = db.report();
    assert_eq!(after.levels[0].tables, 0);
    let live: u64 = after.levels.iter().map(|l| l.bytes).sum();
    let slices = db.stats().field("compaction_slices").unwrap();
    let peak = db.stats().field("table_space_peak_bytes").unwrap();
    assert!(
        peak <= 1.4 * live as f64,
        "the tables took {peak} bytes at their peak for {live} live"
    );
    assert!(slices >= 3.0, "{slices} slices installed before the end");
    assert_eq!(common::contents(&db), model);
    db.close().unwrap();

    let db = common::open(&d, opts, SyncMode::Never).unwrap();
    assert_eq!(common::contents(&db), model);
    db.verify().unwrap();
}
