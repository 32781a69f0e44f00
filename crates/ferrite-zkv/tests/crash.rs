//! Crash tests on `FaultyDevice` under the emulated zoned device: random
//! workloads cut by power loss or I/O faults at random points, then
//! recovery. Every write acknowledged under `SyncMode::Always` must be
//! present, the write in flight all-or-nothing, and the tree must verify.
//! In half the runs a second fault and power cut interrupt the first
//! recovery.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrite_core::testkit::{interrupted_recovery, range_delete_effect};
use ferrite_core::{Error, KeyRange, KvStore, KvStoreExt, SyncMode, WriteBatch};
use ferrite_io::{
    BlockDevice, CrashMode, EmulatedZonedDevice, FaultKind, FaultOp, FaultRule, FaultyDevice,
    MemDevice, ZonedDevice,
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

/// Power loss: every unsynced write lost, or each unsynced block kept at
/// random.
fn crash_mode(rng: &mut SmallRng, seed: u64) -> CrashMode {
    if rng.gen_bool(0.5) {
        CrashMode::DropAll
    } else {
        CrashMode::KeepRandom {
            seed,
            keep: rng.gen_range(0.0..1.0),
        }
    }
}

/// Restarts the crashed device, reopens the store on it and verifies it.
fn recover(
    faulty: &Arc<FaultyDevice<MemDevice>>,
    opts: &ferrite_core::Options,
    zo: ferrite_zkv::ZkvOptions,
    seed: u64,
) -> ZkvStore {
    faulty.restart();
    let dev: Arc<dyn ZonedDevice> = Arc::new(EmulatedZonedDevice::load(faulty.clone()).unwrap());
    let db =
        ZkvStore::open_on(dev, opts, zo).unwrap_or_else(|e| panic!("seed {seed}: reopen: {e}"));
    db.verify()
        .unwrap_or_else(|e| panic!("seed {seed}: verify: {e}"));
    db
}

/// Returns (writes acknowledged, whether a write failed before the crash).
/// The write load of a crash run.
#[derive(Debug, Clone)]
struct Load {
    zones: u32,
    ops: std::ops::Range<usize>,
    keys: u32,
    /// Share of puts whose value goes to the value log.
    logged: f64,
    /// A refused write (the device is full) ends the run early and is
    /// not a failure: the run is about what survives the crash.
    may_fill: bool,
    /// From this share of the run on, nine writes in ten delete: leaves
    /// empty and join their neighbours.
    thinning_from: Option<f64>,
}

const MIXED: Load = Load {
    zones: 20,
    ops: 200..2500,
    keys: 1500,
    logged: 0.05,
    may_fill: false,
    thinning_from: None,
};

/// What a crash run did: writes acknowledged, whether a write failed
/// before the crash, value-log records moved by reclamation.
fn run_seed(seed: u64, variant: Variant) -> (usize, bool) {
    let (acked, failed, _) = run_load(seed, variant, &MIXED);
    (acked, failed)
}

/// What reclamation did in a crash run before the crash.
#[derive(Debug, Default, Clone, Copy)]
struct Moves {
    /// Value-log records moved.
    relocated: f64,
    /// Zones left draining (their records moved through the buffers).
    drained: f64,
    /// Leaves that joined a neighbour.
    joined: f64,
}

fn run_load(seed: u64, variant: Variant, load: &Load) -> (usize, bool, Moves) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let faulty = Arc::new(FaultyDevice::new(MemDevice::new()));
    let geo = common::geometry(load.zones);
    // Some runs split each MetaLog slot over two zones.
    let zo = common::small_opts(variant)
        .geometry(geo)
        .meta_zones(1 + (seed % 2) as u32);
    let opts = common::options(SyncMode::Always);
    let dev: Arc<dyn ZonedDevice> =
        Arc::new(EmulatedZonedDevice::format(faulty.clone(), geo).unwrap());
    let db = ZkvStore::open_on(dev, &opts, zo.clone()).unwrap();
    let mut acked: Model = BTreeMap::new();
    let ops = rng.gen_range(load.ops.clone());
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
        let thinning = load
            .thinning_from
            .is_some_and(|f| i as f64 >= f * ops as f64);
        let deletes = if thinning { 0.9 } else { 0.15 };
        for _ in 0..n {
            let at = rng.gen_range(0..load.keys);
            let k = format!("key{at:05}").into_bytes();
            if rng.gen_bool(0.01) {
                // A range delete: logged as one operation, applied as
                // deletes of the keys it finds.
                let end = format!("key{:05}", at + rng.gen_range(1..80)).into_bytes();
                batch.delete_range(&k, &end).unwrap();
                let removed = range_delete_effect(&acked, &attempt, &k, &end);
                attempt.extend(removed);
            } else if rng.gen_bool(deletes) {
                batch.delete(&k).unwrap();
                attempt.push((k, None));
            } else {
                let len = if rng.gen_bool(load.logged) {
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
            Err(e) if load.may_fill && i < fault_at && matches!(e, Error::StoreFull { .. }) => {
                break;
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
    let st = db.stats();
    let moves = Moves {
        relocated: st.field("relocated_values").unwrap_or(0.0),
        drained: st.field("drained_relocations").unwrap_or(0.0),
        joined: st.field("joined_leaves").unwrap_or(0.0),
    };
    faulty.crash(crash_mode(&mut rng, seed)).unwrap();
    drop(db);
    if seed % 2 == 1 {
        faulty.restart();
        interrupted_recovery(&mut rng, std::slice::from_ref(&faulty), || {
            let dev: Arc<dyn ZonedDevice> = Arc::new(EmulatedZonedDevice::load(faulty.clone())?);
            ZkvStore::open_on(dev, &opts, zo.clone())
        });
    }
    let db = recover(&faulty, &opts, zo, seed);
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
    // The recovered store keeps working (a full one refuses puts and
    // takes deletes).
    match db.put(b"after", b"crash") {
        Ok(()) => assert_eq!(db.get(b"after").unwrap(), Some(b"crash".to_vec())),
        Err(Error::StoreFull { .. }) if load.may_fill => {
            if let Some(k) = acked.keys().next().cloned() {
                db.delete(&k)
                    .unwrap_or_else(|e| panic!("seed {seed}: a delete after recovery: {e}"));
                assert_eq!(db.get(&k).unwrap(), None);
            }
        }
        Err(e) => panic!("seed {seed} ({variant:?}): a write after recovery: {e}"),
    }
    (n_acked, failed, moves)
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

/// Long values on a small device, rewritten over and over: reclamation
/// moves live records out of value-log zones, and faults and power cuts
/// land before, during and after the moves.
#[test]
fn crashes_while_value_log_zones_are_reclaimed() {
    let load = Load {
        zones: 14,
        ops: 15_000..30_000,
        keys: 400,
        logged: 0.7,
        may_fill: false,
        thinning_from: None,
    };
    let mut relocated = 0.0;
    for seed in 0..40 {
        let variant = [Variant::Zkv, Variant::BPlusTree, Variant::BdTree][seed as usize % 3];
        relocated += run_load(seed + 1000, variant, &load).2.relocated;
    }
    assert!(relocated > 100.0, "only {relocated} records were moved");
}

/// Many keys with logged values: a value-log zone's records belong to
/// keys all over the tree, so zones are emptied through the buffers and
/// drain; faults and power cuts land while zones drain, before the
/// checkpoint that resets them.
#[test]
fn crashes_while_value_log_zones_drain_through_the_buffers() {
    let load = Load {
        zones: 20,
        ops: 40_000..60_000,
        keys: 20_000,
        logged: 0.9,
        may_fill: true,
        thinning_from: None,
    };
    let mut drained = 0.0;
    for seed in 0..12 {
        drained += run_load(seed + 2000, Variant::Zkv, &load).2.drained;
    }
    assert!(drained > 10.0, "only {drained} zones drained");
}

/// The keys are written, then nearly all deleted: nearly empty leaves
/// join their neighbours while faults and power cuts land.
#[test]
fn crashes_while_leaves_join() {
    let load = Load {
        zones: 20,
        ops: 8_000..12_000,
        keys: 3000,
        logged: 0.05,
        may_fill: false,
        thinning_from: Some(0.5),
    };
    let mut joined = 0.0;
    for seed in 0..32 {
        joined += run_load(seed + 3000, Variant::Zkv, &load).2.joined;
    }
    assert!(joined > 30.0, "only {joined} leaves joined");
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
    let zo = ferrite_zkv::ZkvOptions::default()
        .geometry(geo)
        .wal_zones(4)
        .meta_zones(2);
    let opts = ferrite_core::Options::default()
        .sync(SyncMode::Always)
        .cache_bytes(256 << 10);
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

/// Several writer threads share the WAL instances; the device crashes
/// under them. Under `Always`, every write a thread saw acknowledged is
/// back; under `Never`, each thread's recovered writes are a prefix of
/// what it wrote (the log loses a suffix, never a write in the middle).
fn concurrent_run(seed: u64, sync: SyncMode) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let faulty = Arc::new(FaultyDevice::new(MemDevice::new()));
    let geo = common::geometry(24);
    let zo = common::small_opts(Variant::Zkv)
        .geometry(geo)
        .wal_instances(3);
    let opts = common::options(sync);
    let dev: Arc<dyn ZonedDevice> =
        Arc::new(EmulatedZonedDevice::format(faulty.clone(), geo).unwrap());
    let db = Arc::new(ZkvStore::open_on(dev, &opts, zo.clone()).unwrap());
    let threads = 3u64;
    let key = |w: u64, i: u64| format!("w{w}-{i:06}").into_bytes();
    let progress: Arc<Vec<AtomicU64>> = Arc::new((0..threads).map(|_| AtomicU64::new(0)).collect());
    let writers: Vec<_> = (0..threads)
        .map(|w| {
            let db = db.clone();
            let progress = progress.clone();
            std::thread::spawn(move || {
                let mut acked = 0u64;
                while acked < 100_000 {
                    let v = (w * 1_000_000 + acked).to_le_bytes();
                    if db.put(&key(w, acked), &v).is_err() {
                        break;
                    }
                    acked += 1;
                    progress[w as usize].store(acked, Ordering::Relaxed);
                }
                acked
            })
        })
        .collect();
    // Crash once every thread is writing.
    while progress.iter().any(|p| p.load(Ordering::Relaxed) == 0) {
        std::thread::yield_now();
    }
    std::thread::sleep(std::time::Duration::from_millis(rng.gen_range(5..60)));
    faulty.crash(crash_mode(&mut rng, seed)).unwrap();
    let acked: Vec<u64> = writers.into_iter().map(|t| t.join().unwrap()).collect();
    drop(db);
    let db = recover(&faulty, &opts, zo, seed);
    for (w, &n) in acked.iter().enumerate() {
        let w = w as u64;
        assert!(n < 100_000, "seed {seed}: thread {w} never met the crash");
        let prefix = format!("w{w}-").into_bytes();
        let mut end = prefix.clone();
        end.push(0xff);
        let got = db
            .scan_collect(
                KeyRange::from_bounds((
                    std::ops::Bound::Included(&prefix[..]),
                    std::ops::Bound::Excluded(&end[..]),
                )),
                usize::MAX,
            )
            .unwrap();
        for (i, (k, v)) in got.iter().enumerate() {
            let i = i as u64;
            assert_eq!(
                k,
                &key(w, i),
                "seed {seed}: thread {w} lost write {i} but kept a later one"
            );
            assert_eq!(v[..], (w * 1_000_000 + i).to_le_bytes(), "seed {seed}");
        }
        let recovered = got.len() as u64;
        assert!(
            recovered <= n + 1,
            "seed {seed}: thread {w}: {recovered} recovered of {n} acknowledged"
        );
        if sync == SyncMode::Always {
            assert!(
                recovered >= n,
                "seed {seed}: thread {w}: lost acknowledged writes ({recovered} of {n})"
            );
        }
    }
}

#[test]
fn concurrent_writers_keep_every_acknowledged_write() {
    for seed in 0..12 {
        concurrent_run(seed, SyncMode::Always);
    }
}

#[test]
fn concurrent_writers_lose_only_a_suffix_without_sync() {
    for seed in 100..112 {
        concurrent_run(seed, SyncMode::Never);
    }
}

#[test]
fn batched_writes_become_durable_without_a_later_write() {
    for variant in common::VARIANTS {
        let faulty = Arc::new(FaultyDevice::new(MemDevice::new()));
        let zo = common::small_opts(variant);
        let dev: Arc<dyn ZonedDevice> =
            Arc::new(EmulatedZonedDevice::format(faulty.clone(), zo.geometry).unwrap());
        // A write right after opening is inside the interval, so it does
        // not sync itself; only the background thread can make it durable.
        let every = Duration::from_millis(200);
        let opts = common::options(SyncMode::Batched(every));
        // Syncs are counted on the zoned device: it records one when its
        // zone table is persisted too, whereas the device below sees the
        // data sync that comes before that table is written.
        let zoned = dev.clone();
        let db = ZkvStore::open_on(dev, &opts, zo.clone()).unwrap();
        let before = zoned.io_stats().syncs;
        db.put(b"key", b"value").unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while zoned.io_stats().syncs == before {
            assert!(Instant::now() < deadline, "{variant:?}: never synced");
            std::thread::sleep(Duration::from_millis(2));
        }
        // Power cut with the store still open.
        faulty.crash(CrashMode::DropAll).unwrap();
        drop(db);
        let db = recover(&faulty, &common::options(SyncMode::Always), zo, 0);
        assert_eq!(
            db.get(b"key").unwrap().as_deref(),
            Some(&b"value"[..]),
            "{variant:?}"
        );
    }
}

/// A power cut while a new store is being created, at every write the
/// creation makes: the device then holds no valid MetaLog snapshot, or
/// the first one. Either way nothing was acknowledged, and reopening
/// makes (or finds) an empty store that takes writes; it is never refused
/// as damaged.
#[test]
fn a_crash_while_a_store_is_created_leaves_one_that_opens() {
    for variant in common::VARIANTS {
        let zo = common::small_opts(variant);
        let writes = {
            let faulty = Arc::new(FaultyDevice::new(MemDevice::new()));
            let dev: Arc<dyn ZonedDevice> =
                Arc::new(EmulatedZonedDevice::format(faulty.clone(), zo.geometry).unwrap());
            let before = faulty.io_stats().writes;
            drop(ZkvStore::open_on(dev, &common::options(SyncMode::Always), zo.clone()).unwrap());
            faulty.io_stats().writes - before
        };
        assert!(writes > 1, "{variant:?}: creation wrote {writes} times");
        for n in 1..=writes {
            for mode in [
                CrashMode::DropAll,
                CrashMode::KeepRandom { seed: n, keep: 0.5 },
            ] {
                let faulty = Arc::new(FaultyDevice::new(MemDevice::new()));
                let dev: Arc<dyn ZonedDevice> =
                    Arc::new(EmulatedZonedDevice::format(faulty.clone(), zo.geometry).unwrap());
                faulty.inject(FaultRule::nth(
                    FaultOp::Write,
                    n,
                    FaultKind::Torn { blocks: 1 },
                ));
                let opened = ZkvStore::open_on(dev, &common::options(SyncMode::Always), zo.clone());
                faulty.crash(mode).unwrap();
                drop(opened);
                let db = recover(&faulty, &common::options(SyncMode::Always), zo.clone(), n);
                assert_eq!(db.scan_collect(KeyRange::all(), 10).unwrap(), vec![]);
                db.put(b"k", b"v").unwrap();
            }
        }
    }
}

/// A restart gives the flushers back the leaf zones they were filling, so
/// a crash costs them no zone. Each zone a crash costs comes out of the
/// reserve reclamation needs: reclamation's checkpoint writes into the
/// flushers' zones, and a small device crashed often enough had none left
/// for it and failed the next write with a device error.
#[test]
fn a_restart_gives_the_flushers_their_zones_back() {
    for variant in [Variant::Zkv, Variant::BPlusTree, Variant::BdTree] {
        let faulty = Arc::new(FaultyDevice::new(MemDevice::new()));
        let geo = common::geometry(24);
        let zo = common::small_opts(variant).geometry(geo);
        let opts = common::options(SyncMode::Always);
        let dev: Arc<dyn ZonedDevice> =
            Arc::new(EmulatedZonedDevice::format(faulty.clone(), geo).unwrap());
        let db = ZkvStore::open_on(dev, &opts, zo.clone()).unwrap();
        let free = |db: &ZkvStore| db.stats().field("free_zones").unwrap();
        // Values under the inline limit: the value log takes no zone, so
        // every zone in use is a leaf zone.
        let mut acked = Model::new();
        let mut free_before = 0.0;
        for round in 0..6u32 {
            for i in 0..1500u32 {
                let k = format!("key{:05}", (i * 7 + round) % 900).into_bytes();
                let v = vec![(i + round) as u8; 40];
                db.put(&k, &v).unwrap();
                acked.insert(k, v);
            }
            if round == 2 {
                db.checkpoint().unwrap();
            }
            free_before = free(&db);
        }
        faulty.crash(CrashMode::DropAll).unwrap();
        drop(db);
        let db = recover(&faulty, &opts, zo.clone(), 0);
        assert!(
            free(&db) >= free_before,
            "{variant:?}: {} zones free after the restart, {free_before} before",
            free(&db)
        );
        for (k, v) in &acked {
            assert_eq!(db.get(k).unwrap().as_ref(), Some(v), "{variant:?}");
        }
        // The flushers write on into the zones they took back.
        for i in 0..3000u32 {
            db.put(format!("new{i:05}").as_bytes(), &[3; 40]).unwrap();
        }
        db.checkpoint().unwrap();
        db.verify().unwrap();
        drop(db);
        let db = recover(&faulty, &opts, zo, 1);
        assert_eq!(db.get(b"new02999").unwrap(), Some(vec![3; 40]));
        assert_eq!(
            db.get(b"key00001").unwrap().as_ref(),
            acked.get(b"key00001".as_slice())
        );
    }
}

/// A recovery that fails part way leaves the device as it found it.
/// Closing a store checkpoints it, and a checkpoint of a recovery cut
/// short would record the snapshot's buffered pairs applied so far with
/// the snapshot's WAL position: the rest, which only that snapshot held,
/// would be lost to the next recovery. Each run fails the recovery at its
/// `n`-th device read or write: while the snapshot's buffered pairs are
/// applied (they overflow the merged filter into the leaves, which are
/// read and written), while the WAL is replayed, or at the checkpoint
/// that ends recovery.
#[test]
fn a_recovery_that_fails_part_way_writes_nothing() {
    let runs = (1..=16u64)
        .map(|n| (FaultOp::Read, n))
        .chain((1..=8).map(|n| (FaultOp::Write, n)));
    let mut failed_opens = 0;
    for (op, n) in runs {
        let faulty = Arc::new(FaultyDevice::new(MemDevice::new()));
        let geo = common::geometry(24);
        let zo = common::small_opts(Variant::Zkv).geometry(geo);
        let opts = common::options(SyncMode::Always);
        let dev: Arc<dyn ZonedDevice> =
            Arc::new(EmulatedZonedDevice::format(faulty.clone(), geo).unwrap());
        let db = ZkvStore::open_on(dev, &opts, zo.clone()).unwrap();
        let mut acked = Model::new();
        for i in 0..3000u32 {
            let k = format!("key{:05}", (i * 7919) % 2000).into_bytes();
            let v = vec![i as u8; 10 + (i % 90) as usize];
            db.put(&k, &v).unwrap();
            acked.insert(k, v);
            if i == 2900 {
                // The snapshot holds the pairs still buffered; the last
                // hundred puts are only in the WAL.
                db.checkpoint().unwrap();
            }
        }
        faulty.crash(CrashMode::DropAll).unwrap();
        drop(db);
        faulty.restart();
        faulty.inject(FaultRule::nth(op, n, FaultKind::Eio));
        let opened = EmulatedZonedDevice::load(faulty.clone())
            .map_err(Error::from)
            .and_then(|d| ZkvStore::open_on(Arc::new(d), &opts, zo.clone()));
        failed_opens += usize::from(opened.is_err());
        // The power goes before a store that did open closes, so only
        // what a failed open did before returning reaches the device.
        faulty.clear_faults();
        faulty.crash(CrashMode::DropAll).unwrap();
        drop(opened);
        let db = recover(&faulty, &opts, zo, n);
        for (k, v) in &acked {
            assert_eq!(
                db.get(k).unwrap().as_ref(),
                Some(v),
                "{op:?} {n} failed: lost {:?}",
                String::from_utf8_lossy(k)
            );
        }
    }
    assert!(failed_opens >= 12, "only {failed_opens} opens failed");
}
