//! Where a ZKV store's zones go: the footprint accounts for every written
//! byte of the device by zone role, and a checkpoint leaves the WAL ring
//! holding its mark only (the log moves to an empty zone, so the zone of
//! the records the checkpoint covers is reset with the others).
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::collections::BTreeMap;

use ferrite_core::{KvStore, KvStoreExt, SpaceKind, SyncMode};
use ferrite_zkv::{Variant, ZkvStore};

#[test]
fn a_checkpoint_leaves_the_log_one_block_and_the_footprint_covers_every_zone() {
    let dev = common::mem_device(24);
    let opts = common::options(SyncMode::Always);
    let zo = common::small_opts(Variant::Zkv).checkpoint_wal_bytes(None);
    let db = ZkvStore::open_on(dev.clone(), &opts, zo.clone()).unwrap();
    let mut model = BTreeMap::new();
    for i in 0..1500u32 {
        let k = format!("key{:06}", i.wrapping_mul(7919) % 5000).into_bytes();
        let v = vec![(i % 251) as u8; 40];
        db.put(&k, &v).unwrap();
        model.insert(k, v);
    }
    let g = *dev.geometry();
    let log_before = db.stats().footprint.get(SpaceKind::Log);
    assert!(
        log_before > u64::from(g.block_size),
        "records were logged: {log_before}"
    );
    db.flush().unwrap();
    let f = db.stats().footprint;
    assert_eq!(
        f.get(SpaceKind::Log),
        u64::from(g.block_size),
        "after a checkpoint the ring holds its mark: {f:?}"
    );
    // Every zone's written bytes are under exactly one kind.
    let written: u64 = dev
        .report_zones(0, g.zone_count)
        .iter()
        .map(|z| z.write_pointer - z.start)
        .sum();
    assert_eq!(f.total(), written, "{f:?}");
    assert!(
        f.get(SpaceKind::Data) > 0 && f.get(SpaceKind::Metadata) > 0,
        "{f:?}"
    );
    db.close().unwrap();

    let db = ZkvStore::open_on(dev, &opts, zo).unwrap();
    assert_eq!(common_contents(&db), model);
    db.verify().unwrap();
}

fn common_contents(db: &ZkvStore) -> BTreeMap<Vec<u8>, Vec<u8>> {
    db.scan_collect(ferrite_core::KeyRange::all(), usize::MAX)
        .unwrap()
        .into_iter()
        .collect()
}
