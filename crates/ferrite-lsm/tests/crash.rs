//! Crash tests: a fault at a random point (an I/O error, a torn write or a
//! failed sync on any device), then a power cut that keeps a random subset
//! of unsynced blocks, then recovery. Every write acknowledged under
//! `SyncMode::Always` must be present, the write that failed must be all or
//! nothing, and the store must pass `verify`. Memtables and tables are tiny,
//! so crashes land in flushes, compactions and manifest writes too, and
//! faults hit background work while foreground writes continue. In half
//! the runs a second fault and power cut interrupt the first recovery.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ferrite_core::testkit::{
    apply_effect, full_disk, interrupted_recovery, power_cut, random_batch, random_crash,
    random_fault, with_effect, Effect, FullDisk,
};
use ferrite_core::{KvStore, SyncMode};
use ferrite_io::{BlockDevice, CrashMode, FaultKind, FaultOp, FaultRule};
use ferrite_lsm::IndexKind;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

#[test]
fn acknowledged_writes_survive_crashes() {
    let mut flushes = 0.0;
    let mut compactions = 0.0;
    let mut interrupted = 0;
    for seed in 0..100u64 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let index = if seed % 2 == 0 {
            IndexKind::LEARNED
        } else {
            IndexKind::Sparse
        };
        // Every third seed partitions the store, so flushes split the
        // memtable and recovery routes replayed writes.
        let lsm = common::tiny(index).partitions(if seed % 3 == 0 { 3 } else { 1 });
        let d = common::fresh();
        let db = common::open(&d, lsm.clone(), SyncMode::Always).unwrap();
        let mut acked: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let fail_at = rng.gen_range(0..600);
        let mut failed: Option<Effect> = None;
        for i in 0..600 {
            if i == fail_at {
                random_fault(&mut rng, &d);
            }
            let ops = rng.gen_range(1..6);
            let (b, effect) = random_batch(&mut rng, &acked, ops, 800, (i % 251) as u8, &mut |r| {
                if r.gen_bool(0.03) {
                    9000
                } else {
                    r.gen_range(0..120)
                }
            });
            match db.write_batch(&b) {
                Ok(()) => {
                    apply_effect(&mut acked, &effect);
                    let k = format!("key{:04}", rng.gen_range(0..800)).into_bytes();
                    if let Ok(got) = db.get(&k) {
                        assert_eq!(got.as_ref(), acked.get(&k), "seed {seed}: lookup at op {i}");
                    }
                }
                Err(_) => {
                    failed = Some(effect);
                    break;
                }
            }
        }
        let st = db.stats();
        flushes += st.field("flushes").unwrap_or(0.0);
        compactions += st.field("compactions").unwrap_or(0.0);
        let crash = random_crash(&mut rng, seed);
        power_cut(db, &d, crash);
        if seed % 4 >= 2 {
            interrupted += u32::from(interrupted_recovery(&mut rng, &d, || {
                common::open(&d, lsm.clone(), SyncMode::Always)
            }));
        }
        let db = common::open(&d, lsm, SyncMode::Always).unwrap_or_else(|e| {
            panic!("seed {seed} (fault at op {fail_at}, {crash:?}): reopen: {e}")
        });
        db.verify()
            .unwrap_or_else(|e| panic!("seed {seed}: verify: {e}"));
        let got = common::contents(&db);
        let with_failed = with_effect(&acked, failed.as_ref());
        assert!(
            got == acked || got == with_failed,
            "seed {seed} (fault at op {fail_at}, {crash:?}): {} keys recovered, {} acknowledged",
            got.len(),
            acked.len()
        );
        // The recovered store takes writes again.
        db.put(b"after", b"crash").unwrap();
        assert_eq!(db.get(b"after").unwrap().as_deref(), Some(&b"crash"[..]));
    }
    // Some of the interrupted recoveries met their fault (and failed).
    assert!(interrupted > 0, "no interrupted recovery met its fault");
    assert!(flushes > 500.0, "flushes happened ({flushes})");
    assert!(compactions > 100.0, "compactions happened ({compactions})");
}

#[test]
fn a_failed_sync_poisons_the_store() {
    let d = common::fresh();
    let db = common::open(&d, common::tiny(IndexKind::LEARNED), SyncMode::Always).unwrap();
    db.put(b"a", b"1").unwrap();
    for dev in &d[3..] {
        dev.inject(FaultRule::nth(FaultOp::Sync, 1, FaultKind::Eio));
    }
    assert!(db.put(b"b", b"2").is_err());
    assert!(matches!(
        db.get(b"a"),
        Err(ferrite_core::Error::Poisoned { .. })
    ));
    assert!(matches!(
        db.put(b"c", b"3"),
        Err(ferrite_core::Error::Poisoned { .. })
    ));
}

#[test]
fn batched_writes_become_durable_without_a_later_write() {
    let d = common::fresh();
    // A write right after opening is inside the interval, so it does not
    // sync itself; only the background thread can make it durable.
    let every = Duration::from_millis(200);
    let db = common::open(
        &d,
        common::tiny(IndexKind::LEARNED),
        SyncMode::Batched(every),
    )
    .unwrap();
    let syncs = || d[3..].iter().map(|w| w.io_stats().syncs).sum::<u64>();
    let before = syncs();
    db.put(b"key", b"value").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while syncs() == before {
        assert!(Instant::now() < deadline, "the WAL was never synced");
        std::thread::sleep(Duration::from_millis(2));
    }
    // Power cut with the store still open.
    power_cut(db, &d, CrashMode::DropAll);
    let db = common::open(&d, common::tiny(IndexKind::LEARNED), SyncMode::Always).unwrap();
    assert_eq!(db.get(b"key").unwrap().as_deref(), Some(&b"value"[..]));
}

/// A full disk, reached at a different point in each run (inside flushes,
/// compactions and manifest writes too): the failing call and every later
/// one report it (`is_no_space`), a reopen on the still-full disk fails
/// the same way without harm, and once space returns every acknowledged
/// write is there and the store takes writes again.
#[test]
fn a_full_disk_is_reported_and_loses_nothing() {
    for seed in 0..24u64 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let index = if seed % 2 == 0 {
            IndexKind::LEARNED
        } else {
            IndexKind::Sparse
        };
        let d = common::fresh();
        let shape = FullDisk {
            keys: 5_000,
            max_value: 100,
            warm: seed % 8 * 100,
            max_headroom: 32 << 10,
        };
        let open = || common::open(&d, common::tiny(index), SyncMode::Always);
        full_disk(&mut rng, &d, shape, open, &format!("seed {seed}"));
    }
}

/// A manifest whose counters recovery accepts just below the limit (a
/// damaged value can be): the flush that would store a generation at the
/// limit, and the write that would take a sequence number to it, are
/// refused as corruption. Written, the manifest would read as damage and
/// a reopen would fall back to the one before, without the flushed data.
#[test]
fn counters_at_their_limit_are_refused_not_written() {
    let limit = ferrite_core::engine::COUNTER_LIMIT;
    for (generation, last_seq) in [(limit - 2, 7), (4, limit - 3)] {
        let d = common::fresh();
        let state = ferrite_lsm::internals::ManifestState {
            generation,
            next_table: 1,
            log_number: 0,
            last_seq,
            partitions: 1,
            tables: Vec::new(),
            part_logs: vec![0],
            range_dels: Vec::new(),
        };
        let bytes = state.encode();
        let mut buf = ferrite_io::AlignedBuf::zeroed(bytes.len().div_ceil(4096) * 4096);
        buf[..bytes.len()].copy_from_slice(&bytes);
        d[1 + (generation % 2) as usize].write_at(&buf, 0).unwrap();
        let lsm = common::tiny(IndexKind::Sparse);
        let db = common::open(&d, lsm.clone(), SyncMode::Always).unwrap();
        let mut acked = BTreeMap::new();
        let mut refused = None;
        for i in 0..4u32 {
            let k = i.to_be_bytes().to_vec();
            match db.put(&k, b"v").and_then(|()| db.flush()) {
                Ok(()) => {
                    acked.insert(k, b"v".to_vec());
                }
                Err(e) => {
                    refused = Some(e);
                    break;
                }
            }
        }
        // Refused in the write, or in a background flush that poisoned
        // the store.
        let e = refused.expect("a counter passed the limit");
        let limit_named = |s: &str| s.contains("reached the limit");
        assert!(
            match &e {
                ferrite_core::Error::Corruption { reason, .. } => limit_named(reason),
                ferrite_core::Error::Poisoned { cause, .. } => limit_named(cause),
                _ => false,
            },
            "{e}"
        );
        drop(db);
        // Nothing acknowledged is lost: the store reopens with it, or
        // refuses to open.
        match common::open(&d, lsm, SyncMode::Always) {
            Ok(db) => {
                let got = common::contents(&db);
                assert!(
                    acked.iter().all(|(k, v)| got.get(k) == Some(v)),
                    "{} of {} acknowledged keys reopened",
                    got.len(),
                    acked.len()
                );
            }
            Err(e) => assert!(matches!(e, ferrite_core::Error::Corruption { .. }), "{e}"),
        }
    }
}
