//! Value-log reclamation under uniform updates of values that all live in
//! the value log: the records of one zone belong to keys spread over most
//! leaves, so rewriting the leaves that point at them costs more than the
//! zone frees, and zones are emptied through the buffers and drain. The
//! store must keep taking updates for several rewrites of its data,
//! answer every read with the newest value, and reopen to the same
//! contents.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use ferrite_core::{KeyRange, KvStore, KvStoreExt, SyncMode};
use ferrite_io::{EmulatedZonedDevice, MemDevice, ZonedDevice};
use ferrite_zkv::{Variant, ZkvOptions, ZkvStore};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const KEYS: u64 = 20_000;
const VALUE: usize = 200;

fn key(i: u64) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

fn value(i: u64, version: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity(VALUE);
    v.extend_from_slice(&i.to_le_bytes());
    v.extend_from_slice(&version.to_le_bytes());
    v.resize(VALUE, (i as u8) ^ (version as u8));
    v
}

fn tally(db: &ZkvStore, reclaimed: &mut f64, drained: &mut f64) {
    let s = db.stats();
    *reclaimed += s.field("gc_zones").unwrap();
    *drained += s.field("drained_relocations").unwrap();
}

fn open(dev: &Arc<dyn ZonedDevice>, opts: &ZkvOptions) -> ZkvStore {
    let db =
        ZkvStore::open_on(dev.clone(), &common::options(SyncMode::Never), opts.clone()).unwrap();
    db.verify().unwrap();
    db
}

#[test]
fn uniform_updates_of_logged_values_drain_zones_through_the_buffers() {
    // 20 000 records of about 220 bytes take six of the 768 KiB zones and
    // their leaves one more; 24 zones leave 16 for data, room for the
    // reserve, the open zones and a few zones draining at once, and few
    // enough that three rewrites of the data must reclaim zones (with
    // leaves that share on overflow, 32 zones left so much room that
    // reclamation was seldom due).
    let geo = common::geometry(24);
    let opts = common::small_opts(Variant::Zkv).geometry(geo);
    let dev: Arc<dyn ZonedDevice> =
        Arc::new(EmulatedZonedDevice::format(MemDevice::new(), geo).unwrap());
    let mut db = open(&dev, &opts);
    let mut versions = vec![0u32; KEYS as usize];
    for i in 0..KEYS {
        db.put(&key(i), &value(i, 0)).unwrap();
    }
    let mut rng = SmallRng::seed_from_u64(5);
    // Counters start over at each open.
    let (mut reclaimed, mut drained) = (0.0, 0.0);
    // Three rewrites of the data.
    for step in 0..3 * KEYS {
        let i = rng.gen_range(0..KEYS);
        versions[i as usize] += 1;
        let v = value(i, versions[i as usize]);
        db.put(&key(i), &v)
            .unwrap_or_else(|e| panic!("update {step} refused: {e}"));
        let j = rng.gen_range(0..KEYS);
        assert_eq!(
            db.get(&key(j)).unwrap(),
            Some(value(j, versions[j as usize])),
            "record {j} after update {step}"
        );
        if step % 25_000 == 24_999 {
            tally(&db, &mut reclaimed, &mut drained);
            drop(db);
            db = open(&dev, &opts);
        }
    }
    tally(&db, &mut reclaimed, &mut drained);
    assert!(reclaimed > 10.0, "only {reclaimed} zones were reclaimed");
    assert!(drained > 0.0, "no zone was emptied through the buffers");
    db.verify().unwrap();
    let expect: BTreeMap<Vec<u8>, Vec<u8>> = (0..KEYS)
        .map(|i| (key(i), value(i, versions[i as usize])))
        .collect();
    drop(db);
    let db = open(&dev, &opts);
    let got: BTreeMap<Vec<u8>, Vec<u8>> = db
        .scan_collect(KeyRange::all(), usize::MAX)
        .unwrap()
        .into_iter()
        .collect();
    assert!(got == expect, "the reopened store differs");
}
