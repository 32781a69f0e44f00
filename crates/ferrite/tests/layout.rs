//! A store's layout options (the LSM's partitions, ZKV's zone geometry)
//! are fixed when it is created: `ferrite::open`, which knows neither,
//! opens such a store whatever it was created with, as `ferrite inspect`
//! and `ferrite serve` do. (The B+tree's page size is still refused when
//! it differs: its files are opened with it before its meta page is
//! read.)
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use ferrite::{Config, EngineKind, SyncMode};

fn fill_and_reopen(b: ferrite::ConfigBuilder) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let store = b
        .sync(SyncMode::Never)
        .direct_io(false)
        .open(&path)
        .unwrap();
    for i in 0..2000u32 {
        store.put(format!("key{i:05}"), i.to_le_bytes()).unwrap();
    }
    store.close().unwrap();
    let store = ferrite::open(&path).unwrap();
    assert_eq!(store.iter().count(), 2000);
    assert_eq!(
        store.get("key01234").unwrap(),
        Some(1234u32.to_le_bytes().to_vec())
    );
    store.verify().unwrap();
    store.close().unwrap();
}

#[test]
fn a_partitioned_lsm_opens_with_default_options() {
    fill_and_reopen(
        Config::builder(EngineKind::Lsm).lsm(ferrite::lsm::LsmOptions::default().partitions(4)),
    );
}

#[test]
fn a_zkv_store_on_a_small_device_opens_with_default_options() {
    fill_and_reopen(Config::builder(EngineKind::Zkv).zkv(
        ferrite::zkv::ZkvOptions::default().geometry(ferrite::zkv::ZoneGeometry::small(48, 8, 8)),
    ));
}
