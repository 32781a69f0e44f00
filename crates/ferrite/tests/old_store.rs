//! Stores written by earlier releases open and keep working: an LSM store
//! whose tables are format version 3 (uncompressed; written by the release
//! before table compression, `tests/fixtures/lsm-table-v3`) reads back
//! exactly, takes new writes into compressed tables, compacts old and new
//! tables together, and reopens.
//!
//! The fixture holds keys `k00000..k01499` with the values of [`value`],
//! then deletes of every tenth key and a range delete of `k01000..k01100`,
//! flushed and cleanly closed, with the small options of [`config`].
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::collections::BTreeMap;
use std::path::Path;

use ferrite::{Config, EngineKind, Store, SyncMode};

fn config() -> Config {
    Config::builder(EngineKind::Lsm)
        .cache_bytes(64 << 10)
        .sync(SyncMode::Never)
        .direct_io(false)
        .lsm(
            ferrite::lsm::LsmOptions::default()
                .memtable_bytes(16 << 10)
                .max_immutable(2)
                .table_bytes(16 << 10)
                .l0_compaction_trigger(2)
                .l1_bytes(64 << 10)
                .level_multiplier(3)
                .levels(4),
        )
        .build()
        .unwrap()
}

fn value(i: u32) -> Vec<u8> {
    format!("value {i} ")
        .repeat(i as usize % 7 + 1)
        .into_bytes()
}

/// What the fixture holds.
fn written() -> BTreeMap<Vec<u8>, Vec<u8>> {
    (0..1500u32)
        .filter(|i| i % 10 != 0 && !(1000..1100).contains(i))
        .map(|i| (format!("k{i:05}").into_bytes(), value(i)))
        .collect()
}

fn contents(db: &Store) -> BTreeMap<Vec<u8>, Vec<u8>> {
    db.iter().map(|r| r.unwrap()).collect()
}

fn stat(db: &Store, name: &str) -> f64 {
    db.stats().field(name).unwrap()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

#[test]
fn an_lsm_store_of_uncompressed_version_3_tables_opens_and_compacts_with_compressed_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lsm-table-v3"),
        &path,
    );
    let mut model = written();
    let db = config().open(&path).unwrap();
    db.verify().unwrap();
    assert_eq!(contents(&db), model);
    // (Compactions may already be rewriting the old tables, compressed.)

    // New writes (lz4 by default) over half the keys, enough to compact
    // old tables with new ones.
    for i in (0..1500u32).step_by(2) {
        let v = [value(i).as_slice(), b"again"].concat();
        db.put(format!("k{i:05}"), &v).unwrap();
        model.insert(format!("k{i:05}").into_bytes(), v);
    }
    db.flush().unwrap();
    assert!(stat(&db, "compressed_tables") > 0.0);
    assert!(stat(&db, "table_data_bytes") < stat(&db, "table_uncompressed_data_bytes"));
    assert_eq!(contents(&db), model);
    db.verify().unwrap();
    db.close().unwrap();

    let db = config().open(&path).unwrap();
    assert_eq!(contents(&db), model);
    db.verify().unwrap();
}
