//! Bad bytes on the device give typed errors, never panics: corrupt leaf
//! pages, arbitrary MetaLog snapshots (with valid checksums) and arbitrary
//! WAL contents; and broken zone rules are refused by the device.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::sync::Arc;

use ferrite_core::{Error, KeyRange, KvStore, KvStoreExt, SyncMode};
use ferrite_io::{AlignedBuf, BlockDevice, EmulatedZonedDevice, MemDevice, ZonedDevice};
use ferrite_zkv::{Variant, ZkvStore};
use proptest::prelude::*;

fn frame(body: &[u8]) -> AlignedBuf {
    ferrite_zkv::metalog::encode_frame(1, body, 4096)
}

#[test]
fn a_corrupt_leaf_page_is_a_typed_error() {
    let mem = Arc::new(MemDevice::new());
    let geo = common::geometry(24);
    let dev: Arc<dyn ZonedDevice> =
        Arc::new(EmulatedZonedDevice::format(mem.clone(), geo).unwrap());
    let opts = common::options(SyncMode::Never);
    let db = ZkvStore::open_on(dev.clone(), &opts, common::small_opts(Variant::Zkv)).unwrap();
    let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..2000u32)
        .map(|i| (i.to_be_bytes().to_vec(), vec![1u8; 8]))
        .collect();
    db.bulk_load(&mut pairs.clone().into_iter()).unwrap();
    drop(db);
    // Flip one byte in every leaf page on the backing device.
    let mut flipped = 0;
    let mut block = AlignedBuf::zeroed(4096);
    let mut off = 0;
    while off + 4096 <= mem.len() {
        mem.read_at(&mut block, off).unwrap();
        if &block[0..4] == b"ZKVL" {
            block[100] ^= 0x40;
            mem.write_at(&block, off).unwrap();
            flipped += 1;
        }
        off += 4096;
    }
    assert!(flipped > 5);
    let db = ZkvStore::open_on(dev, &opts, common::small_opts(Variant::Zkv)).unwrap();
    let (k, _) = pairs.swap_remove(777);
    match db.get(&k) {
        Err(Error::Corruption { reason, .. }) => assert!(reason.contains("checksum"), "{reason}"),
        other => panic!("expected a corruption error, got {other:?}"),
    }
    assert!(matches!(
        db.scan_collect(KeyRange::all(), 10),
        Err(Error::Corruption { .. })
    ));
    assert!(db.verify().is_err());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn recovery_from_arbitrary_metadata_never_panics(
        snap in proptest::collection::vec(any::<u8>(), 0..3000),
        wal in proptest::collection::vec(any::<u8>(), 0..6000),
        seed_snapshot in any::<bool>(),
    ) {
        let geo = common::geometry(24);
        let dev = EmulatedZonedDevice::format(MemDevice::new(), geo).unwrap();
        let mut body = snap.clone();
        if seed_snapshot && body.len() >= 28 {
            // A plausible header: ring 0, WAL at zone 2, sequence 1, 24 zones.
            body[0..4].copy_from_slice(&0u32.to_le_bytes());
            body[4..12].copy_from_slice(&(2 * geo.zone_size).to_le_bytes());
            body[12..20].copy_from_slice(&1u64.to_le_bytes());
            body[20..24].copy_from_slice(&24u32.to_le_bytes());
        }
        dev.write_at(&frame(&body), 0).unwrap();
        let mut w = AlignedBuf::zeroed(wal.len().div_ceil(4096).max(1) * 4096);
        w[..wal.len()].copy_from_slice(&wal);
        dev.write_at(&w, 2 * geo.zone_size).unwrap();
        let dev: Arc<dyn ZonedDevice> = Arc::new(dev);
        if let Ok(db) = ZkvStore::open_on(dev, &common::options(SyncMode::Never), common::small_opts(Variant::Zkv)) {
            let _ = db.get(b"key");
            let _ = db.verify();
        }
    }
}
