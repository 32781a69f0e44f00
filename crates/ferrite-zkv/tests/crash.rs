//! Crash tests on `FaultyDevice` under the emulated zoned device: random
//! workloads cut by power loss or I/O faults at random points, then
//! recovery. Every write acknowledged under `SyncMode::Always` must be
//! present, the write in flight all-or-nothing, and the tree must verify.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use ferrite_core::{KeyRange, KvStore, KvStoreExt, SyncMode, WriteBatch};
use ferrite_io::{
    CrashMode, EmulatedZonedDevice, FaultKind, FaultOp, FaultRule, FaultyDevice, MemDevice,
    ZonedDevice,
};
use ferrite_zkv::{Variant, ZkvStore};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// The possible states of the keys the interrupted write touched.
fn in_flight_ok(got: &Model, acked: &Model, attempt: &[(Vec<u8>, Option<Vec<u8>>)]) -> bool {
    let mut applied = acked.clone();
    for (k, v) in attempt {
        match v {
            Some(v) => applied.insert(k.clone(), v.clone()),
            None => applied.remove(k),
        };
    }
    got == acked || *got == applied
}

/// Returns (writes acknowledged, whether a write failed before the crash).
fn run_seed(seed: u64, variant: Variant) -> (usize, bool) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let faulty = Arc::new(FaultyDevice::new(MemDevice::new()));
    let geo = common::geometry(20);
    let zo = ferrite_zkv::ZkvOptions {
        geometry: geo,
        // Some runs split each MetaLog slot over two zones.
        meta_zones: 1 + (seed % 2) as u32,
        ..common::small_opts(variant)
    };
    let opts = common::options(SyncMode::Always);
    let dev: Arc<dyn ZonedDevice> =
        Arc::new(EmulatedZonedDevice::format(faulty.clone(), geo).unwrap());
    let db = ZkvStore::open_on(dev, &opts, zo.clone()).unwrap();
    let mut acked: Model = BTreeMap::new();
    let ops = rng.gen_range(200..2500);
    let fault_at = rng.gen_range(0..ops);
    let mut attempt: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
    let (mut n_acked, mut failed) = (0usize, false);
    for i in 0..ops {
        if i == fault_at {
            match rng.gen_range(0..4) {
                0 => faulty.inject(FaultRule::nth(
                    FaultOp::Write,
                    rng.gen_range(1..4),
                    FaultKind::Eio,
                )),
                1 => faulty.inject(FaultRule::nth(FaultOp::Sync, 1, FaultKind::Eio)),
                2 => faulty.inject(FaultRule::nth(
                    FaultOp::Write,
                    rng.gen_range(1..3),
                    FaultKind::Torn { blocks: 1 },
                )),
                _ => faulty.inject(FaultRule::after(
                    FaultOp::Write,
                    rng.gen_range(0..30),
                    FaultKind::NoSpace,
                )),
            }
        }
        let n = if rng.gen_bool(0.1) {
            rng.gen_range(2..6)
        } else {
            1
        };
        attempt.clear();
        let mut batch = WriteBatch::new();
        for _ in 0..n {
            let k = format!("key{:05}", rng.gen_range(0..1500)).into_bytes();
            if rng.gen_bool(0.15) {
                batch.delete(&k).unwrap();
                attempt.push((k, None));
            } else {
                let len = if rng.gen_bool(0.05) {
                    200
                } else {
                    rng.gen_range(1..20)
                };
                let v: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
                batch.put(&k, &v).unwrap();
                attempt.push((k, Some(v)));
            }
        }
        match db.write_batch(&batch) {
            Ok(()) => {
                n_acked += 1;
                for (k, v) in attempt.drain(..) {
                    match v {
                        Some(v) => acked.insert(k, v),
                        None => acked.remove(&k),
                    };
                }
            }
            Err(e) => {
                assert!(
                    i >= fault_at,
                    "seed {seed}: write {i} failed before any fault: {e}"
                );
                failed = true;
                break;
            }
        }
    }
    let mode = if rng.gen_bool(0.5) {
        CrashMode::DropAll
    } else {
        CrashMode::KeepRandom {
            seed,
            keep: rng.gen_range(0.0..1.0),
        }
    };
    faulty.crash(mode).unwrap();
    drop(db);
    faulty.restart();
    let dev: Arc<dyn ZonedDevice> = Arc::new(EmulatedZonedDevice::load(faulty.clone()).unwrap());
    let db =
        ZkvStore::open_on(dev, &opts, zo).unwrap_or_else(|e| panic!("seed {seed}: reopen: {e}"));
    db.verify()
        .unwrap_or_else(|e| panic!("seed {seed}: verify: {e}"));
    let got: Model = db
        .scan_collect(KeyRange::all(), usize::MAX)
        .unwrap()
        .into_iter()
        .collect();
    assert!(
        in_flight_ok(&got, &acked, &attempt),
        "seed {seed} ({variant:?}): recovered state is neither the acknowledged one nor it plus the write in flight \
         ({} keys recovered, {} acknowledged)",
        got.len(),
        acked.len()
    );
    for (k, v) in &acked {
        if !attempt.iter().any(|(a, _)| a == k) {
            assert_eq!(
                db.get(k).unwrap().as_ref(),
                Some(v),
                "seed {seed}: lost {k:?}"
            );
        }
    }
    // The recovered store keeps working.
    db.put(b"after", b"crash").unwrap();
    assert_eq!(db.get(b"after").unwrap(), Some(b"crash".to_vec()));
    (n_acked, failed)
}

#[test]
fn zkv_survives_crashes_at_random_points() {
    let (mut acked, mut failed) = (0, 0);
    for seed in 0..100 {
        let (a, f) = run_seed(seed, Variant::Zkv);
        acked += a;
        failed += usize::from(f);
    }
    assert!(acked > 20_000, "too few acknowledged writes: {acked}");
    assert!(failed >= 30, "faults cut only {failed} of 100 runs");
}

#[test]
fn baselines_survive_crashes_at_random_points() {
    let mut failed = 0;
    for seed in 100..110 {
        failed += usize::from(run_seed(seed, Variant::BPlusTree).1);
        failed += usize::from(run_seed(seed + 50, Variant::BdTree).1);
    }
    assert!(failed >= 5, "faults cut only {failed} of 20 runs");
}

#[test]
fn without_faults_every_write_succeeds() {
    let geo = common::geometry(40);
    let dev: Arc<dyn ZonedDevice> =
        Arc::new(EmulatedZonedDevice::format(MemDevice::new(), geo).unwrap());
    let zo = ferrite_zkv::ZkvOptions {
        geometry: geo,
        wal_zones: 4,
        meta_zones: 2,
        ..ferrite_zkv::ZkvOptions::default()
    };
    let opts = ferrite_core::Options {
        sync: SyncMode::Always,
        cache_bytes: 256 << 10,
        ..ferrite_core::Options::default()
    };
    let db = ZkvStore::open_on(dev, &opts, zo).unwrap();
    let mut pairs = (0..20_000u64).map(|i| (i.to_be_bytes().to_vec(), i.to_le_bytes().to_vec()));
    db.bulk_load(&mut pairs).unwrap();
    let mut rng = SmallRng::seed_from_u64(5);
    for i in 0..3000 {
        let k = rng.gen_range(0..40_000u64).to_be_bytes();
        let v = if i % 50 == 0 {
            vec![7u8; 600]
        } else {
            vec![1u8; 8]
        };
        db.put(&k, &v).unwrap_or_else(|e| panic!("write {i}: {e}"));
    }
    db.verify().unwrap();
}
