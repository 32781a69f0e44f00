//! Crash tests: faults at random points, a power cut that keeps a random
//! subset of unsynced blocks, then recovery. Every write acknowledged under
//! `SyncMode::Always` must be present, the one that failed must be all or
//! nothing, and the tree must pass `verify`; in half the runs a second
//! fault and power cut interrupt the first recovery.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{contents, fresh, open, open_as, open_with, wire, Devs, Mode};
use ferrite_btree::{BTreeOptions, BTreeStore};
use ferrite_core::testkit::{
    apply_effect, full_disk, interrupted_recovery, power_cut, random_batch, random_crash,
    random_fault, with_effect, Effect, FullDisk,
};
use ferrite_core::{KvStore, Options, SyncMode, WriteBatch};
use ferrite_io::{BlockDevice, CrashMode, FaultKind, FaultOp, FaultRule};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

#[test]
fn acknowledged_writes_survive_crashes() {
    crash_loop(Mode::Plain);
}

#[test]
fn acknowledged_writes_survive_crashes_with_records_buffered() {
    crash_loop(Mode::Turbo);
}

#[test]
fn acknowledged_writes_survive_crashes_during_shortcut_rebuilds() {
    crash_loop(Mode::Shortcut);
}

fn crash_loop(mode: Mode) {
    let turbo = mode == Mode::Turbo;
    let shortcut = mode == Mode::Shortcut;
    let keys = if turbo || shortcut { 5000 } else { 600 };
    let mut buffered = 0.0;
    let mut spills = 0.0;
    let mut rebuilds = 0.0;
    let mut prefetch_used = 0.0;
    let mut relocated = 0.0;
    let mut interrupted = 0;
    for seed in 0..40u64 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let d = fresh();
        let db = open_as(&d, mode).unwrap();
        let mut acked: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        if turbo || shortcut {
            // Data several times the pool, so most leaves are not resident.
            for chunk in 0..keys / 100 {
                let mut b = WriteBatch::new();
                for k in chunk * 100..(chunk + 1) * 100 {
                    let k = format!("key{k:04}").into_bytes();
                    b.put(&k, &[9; 24]).unwrap();
                    acked.insert(k, vec![9; 24]);
                }
                db.write_batch(&b).unwrap();
            }
        }
        let fail_at = rng.gen_range(0..400);
        let mut failed: Option<Effect> = None;
        for i in 0..400 {
            if i == fail_at {
                random_fault(&mut rng, &d);
            }
            // A batch of 1-8 puts, deletes and range deletes over a small
            // key space (range deletes empty whole leaves, replayed from
            // the WAL and carried over checkpoints), with some values large
            // enough to need overflow pages.
            let ops = rng.gen_range(1..9);
            let (b, effect) =
                random_batch(&mut rng, &acked, ops, keys, (i % 251) as u8, &mut |r| {
                    if r.gen_bool(0.05) {
                        // Chains of one to a few dozen pages, so runs and
                        // multi-batch reads meet crashes and recovery.
                        *[6000, 6000, 25_000, 60_000]
                            .get(r.gen_range(0..4))
                            .unwrap_or(&6000)
                    } else if turbo {
                        r.gen_range(1..40)
                    } else {
                        r.gen_range(1..200)
                    }
                });
            if turbo && i == 200 {
                let st = db.stats();
                buffered += st.field("ib_buffered_writes").unwrap_or(0.0);
                spills += st.field("spills").unwrap_or(0.0);
            }
            match db.write_batch(&b) {
                Ok(()) => {
                    apply_effect(&mut acked, &effect);
                    // A lookup between writes (through the one-shot path
                    // when SHORTCUT is on) sees the acknowledged state.
                    let k = format!("key{:04}", rng.gen_range(0..keys)).into_bytes();
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
        let crash = random_crash(&mut rng, seed);
        if shortcut {
            let st = db.stats();
            rebuilds += st.field("sc_rebuilds").unwrap_or(0.0);
            relocated += st.field("sc_relocated").unwrap_or(0.0);
            prefetch_used += st.field("sc_prefetch_used").unwrap_or(0.0);
        }
        power_cut(db, &d, crash);
        if seed % 2 == 1 {
            interrupted += u32::from(interrupted_recovery(&mut rng, &d, || open_as(&d, mode)));
        }
        let db = open_as(&d, mode).unwrap_or_else(|e| {
            panic!("seed {seed} (failed at op {fail_at}, {crash:?}): reopen: {e}")
        });
        db.verify()
            .unwrap_or_else(|e| panic!("seed {seed}: verify: {e}"));
        let got = contents(&db);
        let with_failed = with_effect(&acked, failed.as_ref());
        if !(got == acked || got == with_failed) {
            for (k, v) in &got {
                if acked.get(k) != Some(v) {
                    eprintln!(
                        "extra/different {:?} len {} acked {:?} failedhas {}",
                        String::from_utf8_lossy(k),
                        v.len(),
                        acked.get(k).map(|v| v.len()),
                        failed
                            .as_ref()
                            .is_some_and(|f| f.iter().any(|(fk, _)| fk == k))
                    );
                }
            }
            for k in acked.keys() {
                if !got.contains_key(k) {
                    eprintln!("missing {:?}", String::from_utf8_lossy(k));
                }
            }
            eprintln!(
                "fail_at {fail_at} failed {:?}",
                failed.as_ref().map(|f| f.len())
            );
        }
        assert!(
            got == acked || got == with_failed,
            "seed {seed}: recovered state is neither the acknowledged state nor it plus the failed batch \
             ({} keys recovered, {} acknowledged)",
            got.len(),
            acked.len()
        );
        // The recovered store keeps working.
        db.put(b"after", b"crash").unwrap();
        assert_eq!(db.get(b"after").unwrap(), Some(b"crash".to_vec()));
    }
    // Some of the interrupted recoveries met their fault (and failed).
    assert!(interrupted > 0, "no interrupted recovery met its fault");
    if turbo {
        // The runs must actually have buffered writes (not just loaded pages).
        assert!(buffered > 1000.0, "only {buffered} writes were buffered");
        // ... and dirty pages were evicted to the spill file between
        // checkpoints, so recovery ran past stolen pages.
        assert!(spills > 100.0, "only {spills} pages were spilled");
    }
    if shortcut {
        // Companions were rebuilt while writes ran, beyond the one each of
        // the 40 runs builds at open, and lookups used prefetched pages.
        // How many rebuilds the background gets through depends on the
        // host's load (80 to 123 seen here), so the bound only asks for
        // rebuilds in a good share of the runs.
        assert!(rebuilds > 50.0, "only {rebuilds} companion rebuilds");
        assert!(
            prefetch_used > 100.0,
            "only {prefetch_used} prefetched pages used"
        );
        // ... and nodes were physically moved, so crashes met re-layouts.
        assert!(relocated > 1000.0, "only {relocated} nodes relocated");
    }
}

#[test]
fn batched_writes_become_durable_without_a_later_write() {
    let d = fresh();
    // A write right after opening is inside the interval, so it does not
    // sync itself; only the background thread can make it durable.
    let every = Duration::from_millis(200);
    let db = open_with(&d, Mode::Plain, SyncMode::Batched(every)).unwrap();
    let before = d[2].io_stats().syncs;
    db.put(b"key", b"value").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while d[2].io_stats().syncs == before {
        assert!(Instant::now() < deadline, "the WAL was never synced");
        std::thread::sleep(Duration::from_millis(2));
    }
    // Power cut with the store still open.
    power_cut(db, &d, CrashMode::DropAll);
    let db = open(&d).unwrap();
    assert_eq!(db.get(b"key").unwrap().as_deref(), Some(&b"value"[..]));
}

#[test]
fn a_failed_sync_poisons_the_store() {
    let d = fresh();
    let db = open(&d).unwrap();
    db.put(b"a", b"1").unwrap();
    d[2].inject(FaultRule::nth(FaultOp::Sync, 1, FaultKind::Eio));
    assert!(db.put(b"b", b"2").is_err());
    assert!(matches!(
        db.get(b"a"),
        Err(ferrite_core::Error::Poisoned { .. })
    ));
    assert!(matches!(
        db.put(b"c", b"3"),
        Err(ferrite_core::Error::Poisoned { .. })
    ));
    drop(db);
    d[2].clear_faults();
    let db = open(&d).unwrap();
    assert_eq!(db.get(b"a").unwrap(), Some(b"1".to_vec()));
}

/// A full disk, reached at a different point in each run (inside
/// checkpoints and evictions too): the write that meets it and every later
/// call report it (`is_no_space`), a reopen on the still-full disk fails
/// the same way without harm, and once space returns every acknowledged
/// write is there and the store takes writes again.
#[test]
fn a_full_disk_is_reported_and_loses_nothing() {
    for seed in 0..36u64 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let d = fresh();
        let mode = [Mode::Plain, Mode::Turbo, Mode::Shortcut][seed as usize % 3];
        let shape = FullDisk {
            keys: 20_000,
            max_value: 200,
            warm: seed % 12 * 300,
            max_headroom: 64 << 10,
        };
        full_disk(
            &mut rng,
            &d,
            shape,
            || open_as(&d, mode),
            &format!("seed {seed}"),
        );
    }
}

/// Recovery that must checkpoint halfway through its replay (reopened
/// with a pool too small to hold what the WAL dirties) and then fails
/// before its closing checkpoint loses nothing: the batches it had yet to
/// replay travel in that checkpoint's carry-over, not only in the WAL the
/// checkpoint resets. Each run fails a different sync of the double-write
/// file, so a different one of the reopen's checkpoints.
#[test]
fn a_recovery_that_checkpoints_and_then_fails_loses_nothing() {
    let open_sized = |d: &Devs, cache_bytes: u64| {
        let opts = Options::default()
            .cache_bytes(cache_bytes)
            .sync(SyncMode::Always);
        let bt = BTreeOptions::default()
            .page_size(1024)
            .checkpoint_wal_bytes(96 << 10);
        BTreeStore::open_on(wire(d), &opts, bt)
    };
    let mut failed_reopens = 0;
    let mut mid_replay_checkpoints = 0.0;
    for nth in 1..=8u64 {
        let mut rng = SmallRng::seed_from_u64(nth);
        let d = fresh();
        let db = open_sized(&d, 4 << 20).unwrap();
        let mut acked = BTreeMap::new();
        let mut b = WriteBatch::new();
        for k in 0..3000u32 {
            b.put(&k.to_be_bytes(), &[1; 40]).unwrap();
            acked.insert(k.to_be_bytes().to_vec(), vec![1; 40]);
        }
        db.write_batch(&b).unwrap();
        db.flush().unwrap();
        // Small batches over the whole key space: each dirties its own
        // leaf, which a small pool can only spill.
        for i in 0..400u32 {
            let mut b = WriteBatch::new();
            for _ in 0..3 {
                let k = rng.gen_range(0..3000u32).to_be_bytes().to_vec();
                let v = vec![(i % 250) as u8 + 2; 40];
                b.put(&k, &v).unwrap();
                acked.insert(k, v);
            }
            db.write_batch(&b).unwrap();
        }
        power_cut(db, &d, CrashMode::DropAll);
        d[1].inject(FaultRule::nth(FaultOp::Sync, nth, FaultKind::Eio));
        match open_sized(&d, 64 << 10) {
            Ok(db) => {
                mid_replay_checkpoints += db.stats().field("checkpoints").unwrap_or(0.0) - 1.0;
                drop(db);
            }
            Err(_) => failed_reopens += 1,
        }
        for dev in &d {
            dev.clear_faults();
            dev.crash(CrashMode::DropAll).unwrap();
            dev.restart();
        }
        let db = open_sized(&d, 4 << 20).unwrap();
        db.verify().unwrap();
        let got = contents(&db);
        let lost = acked.iter().filter(|(k, v)| got.get(*k) != Some(v)).count();
        assert_eq!(
            lost, 0,
            "failing sync {nth} of the reopen: {lost} writes lost"
        );
    }
    // The sweep must reach past recovery's first checkpoint: reopens that
    // failed after checkpoints of their own, and reopens that checkpointed
    // before the closing one.
    assert!(failed_reopens > 2, "only {failed_reopens} reopens failed");
    assert!(
        mid_replay_checkpoints > 0.0,
        "no reopen checkpointed halfway through its replay"
    );
}

/// A fault at a random write or sync of a compaction (the rebuilt tree's
/// pages, the checkpoint that installs it) and a power cut: the store
/// reopens with exactly what it held, from the old tree or the new.
#[test]
fn a_crash_during_compaction_loses_nothing() {
    let mut compacted = 0;
    let mut faulted = 0;
    for seed in 0..12u64 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let d = fresh();
        let db = open_as(&d, Mode::Plain).unwrap();
        let mut acked = BTreeMap::new();
        for chunk in 0..40u32 {
            let mut b = WriteBatch::new();
            for i in chunk * 100..(chunk + 1) * 100 {
                let k = format!("key{i:05}").into_bytes();
                let v = vec![(i % 251) as u8; if i % 500 == 0 { 9000 } else { 150 }];
                b.put(&k, &v).unwrap();
                acked.insert(k, v);
            }
            db.write_batch(&b).unwrap();
        }
        let keys: Vec<Vec<u8>> = acked.keys().cloned().collect();
        for chunk in keys.chunks(100) {
            let mut b = WriteBatch::new();
            for (i, k) in chunk.iter().enumerate() {
                if i % 20 != 0 {
                    b.delete(k).unwrap();
                    acked.remove(k);
                }
            }
            db.write_batch(&b).unwrap();
        }
        let dev = &d[rng.gen_range(0..3)];
        let op = if rng.gen_bool(0.7) {
            FaultOp::Write
        } else {
            FaultOp::Sync
        };
        dev.inject(FaultRule::nth(op, rng.gen_range(1..6), FaultKind::Eio));
        // The compactor runs once the store is quiet; it either finishes
        // or meets the fault and poisons the store.
        let start = Instant::now();
        loop {
            if db.get(b"key00000").is_err() {
                faulted += 1;
                break;
            }
            if db.stats().field("compactions") == Some(1.0) {
                compacted += 1;
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "seed {seed}: no compaction"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        power_cut(db, &d, CrashMode::KeepRandom { seed, keep: 0.5 });
        let db = open_as(&d, Mode::Plain).unwrap_or_else(|e| panic!("seed {seed}: reopen: {e}"));
        db.verify()
            .unwrap_or_else(|e| panic!("seed {seed}: verify: {e}"));
        assert!(
            contents(&db) == acked,
            "seed {seed}: contents differ after the crash"
        );
    }
    // Both outcomes were met.
    assert!(
        faulted > 0 && compacted > 0,
        "faulted {faulted}, compacted {compacted}"
    );
}
