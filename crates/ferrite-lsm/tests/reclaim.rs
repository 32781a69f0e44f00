//! A store left idle after deleting what it holds gives the space back:
//! the memtable holding the deletes is flushed once writes stop, and the
//! tables made mostly of deletes are compacted down until the deletes meet
//! what they delete and both are dropped, with no further write to
//! trigger a compaction.

mod common;

use std::time::{Duration, Instant};

use ferrite_core::{KeyRange, KvStore, KvStoreExt, SyncMode, WriteBatch};
use ferrite_lsm::{IndexKind, LsmStore};

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
