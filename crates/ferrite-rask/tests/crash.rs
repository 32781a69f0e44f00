#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]
//! Crash tests for the durable index: faults at random points, a power cut
//! that keeps a random subset of unsynced blocks, then recovery. Every
//! write acknowledged under `SyncMode::Always` must be present, the one
//! that failed must be all or nothing, and the index must verify.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrite_core::testkit::{interrupted_recovery, power_cut, random_crash};
use ferrite_core::{Options, SyncMode};
use ferrite_io::{BlockDevice, CrashMode, FaultKind, FaultOp, FaultRule, FaultyDevice, MemDevice};
use ferrite_rask::{
    BlockRange, DurableOptions, DurableRask, PhysicalRun, RaskDevices, RaskOptions,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

type Dev = Arc<FaultyDevice<MemDevice>>;
type Oracle = BTreeMap<u64, u64>;

fn open(d: &[Dev; 3]) -> ferrite_rask::Result<DurableRask<PhysicalRun>> {
    open_with(d, SyncMode::Always)
}

fn open_with(d: &[Dev; 3], sync: SyncMode) -> ferrite_rask::Result<DurableRask<PhysicalRun>> {
    open_recovering(d, sync, ferrite_core::WalRecovery::Refuse)
}

fn open_recovering(
    d: &[Dev; 3],
    sync: SyncMode,
    wal_recovery: ferrite_core::WalRecovery,
) -> ferrite_rask::Result<DurableRask<PhysicalRun>> {
    let devices = RaskDevices {
        snapshots: [d[0].clone() as Arc<dyn BlockDevice>, d[1].clone()],
        log: d[2].clone(),
    };
    DurableRask::open_on(
        devices,
        DurableOptions {
            store: Options::default().sync(sync).wal_recovery(wal_recovery),
            index: RaskOptions {
                leaf_capacity: 8,
                merge_threshold: None,
            },
            checkpoint_log_bytes: 6 << 10,
            ..DurableOptions::default()
        },
    )
}

fn contents(db: &DurableRask<PhysicalRun>) -> Oracle {
    let mut m = Oracle::new();
    db.index().for_each_mapped(|r, v| {
        for b in r.l()..=r.r() {
            m.insert(b, v.offset(b - r.l()).to_bits());
        }
    });
    m
}

#[derive(Clone, Copy)]
enum Op {
    Put(BlockRange, PhysicalRun),
    Delete(BlockRange),
}

fn apply(o: &mut Oracle, op: Op) {
    match op {
        Op::Put(r, v) => {
            for b in r.l()..=r.r() {
                o.insert(b, v.offset(b - r.l()).to_bits());
            }
        }
        Op::Delete(r) => {
            for b in r.l()..=r.r() {
                o.remove(&b);
            }
        }
    }
}

/// A put of a fresh run (85%) or a delete, over a range of 1 to 79 blocks
/// below block 3080.
fn random_op(rng: &mut SmallRng) -> Op {
    let r = BlockRange::with_len(rng.gen_range(0..3000), rng.gen_range(1..80)).unwrap();
    if rng.gen_bool(0.15) {
        Op::Delete(r)
    } else {
        Op::Put(
            r,
            PhysicalRun::new(rng.gen_range(0..4), rng.gen_range(0..1 << 30)).unwrap(),
        )
    }
}

fn submit(db: &DurableRask<PhysicalRun>, op: Op) -> ferrite_rask::Result<()> {
    match op {
        Op::Put(r, v) => db.put(r, v),
        Op::Delete(r) => db.delete(r),
    }
}

/// Random puts and deletes cut by an I/O fault and a power cut; in odd
/// seeds a recovery cut short by another fault and power cut comes before
/// the reopen that is checked.
#[test]
fn acknowledged_writes_survive_crashes() {
    for seed in 0..40u64 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let d: [Dev; 3] = std::array::from_fn(|_| Arc::new(FaultyDevice::new(MemDevice::new())));
        let db = open(&d).unwrap();
        let mut acked = Oracle::new();
        let fail_at = rng.gen_range(0..600);
        let mut failed = None;
        for i in 0..600 {
            if i == fail_at {
                let dev = &d[rng.gen_range(0..3)];
                let (op, kind) = match rng.gen_range(0..3) {
                    0 => (FaultOp::Sync, FaultKind::Eio),
                    1 => (FaultOp::Write, FaultKind::Eio),
                    _ => (FaultOp::Write, FaultKind::Torn { blocks: 1 }),
                };
                dev.inject(FaultRule::nth(op, rng.gen_range(1..4), kind));
            }
            let op = random_op(&mut rng);
            let res = submit(&db, op);
            match res {
                Ok(()) => apply(&mut acked, op),
                Err(_) => {
                    failed = Some(op);
                    break;
                }
            }
        }
        let mode = random_crash(&mut rng, seed);
        power_cut(db, &d, mode);
        for dev in &d {
            dev.clear_faults();
        }
        if seed % 2 == 1 {
            interrupted_recovery(&mut rng, &d, || open(&d));
        }
        let db = open(&d).unwrap_or_else(|e| {
            panic!("seed {seed} (fault at op {fail_at}, {mode:?}): reopen: {e}")
        });
        db.index()
            .verify()
            .unwrap_or_else(|e| panic!("seed {seed}: verify: {e}"));
        let got = contents(&db);
        let mut with_failed = acked.clone();
        if let Some(op) = failed {
            apply(&mut with_failed, op);
        }
        assert!(
            got == acked || got == with_failed,
            "seed {seed}: recovered state is neither the acknowledged state nor it plus the failed write \
             ({} blocks recovered, {} acknowledged)",
            got.len(),
            acked.len()
        );
        // The recovered index keeps working and keeps its promises.
        let r = BlockRange::new(5000, 5009).unwrap();
        let v = PhysicalRun::new(9, 9).unwrap();
        db.put(r, v).unwrap();
        assert_eq!(db.get(r)[0].value, Some(v));
    }
}

#[test]
fn snapshot_and_log_restore_the_index_and_report_recovery() {
    let d: [Dev; 3] = std::array::from_fn(|_| Arc::new(FaultyDevice::new(MemDevice::new())));
    let db = open(&d).unwrap();
    let mut oracle = Oracle::new();
    let mut rng = SmallRng::seed_from_u64(1);
    for _ in 0..2000 {
        let r = BlockRange::with_len(rng.gen_range(0..10_000), rng.gen_range(1..64)).unwrap();
        let v = PhysicalRun::new(1, rng.gen_range(0..1 << 30)).unwrap();
        db.put(r, v).unwrap();
        apply(&mut oracle, Op::Put(r, v));
    }
    drop(db);
    let db = open(&d).unwrap();
    let rep = db.recovery();
    assert!(rep.snapshot_epoch > 0 && rep.snapshot_runs > 0, "{rep:?}");
    assert!(rep.replayed_records > 0, "{rep:?}");
    assert_eq!(contents(&db), oracle);
}

#[test]
fn closing_makes_unsynced_writes_durable() {
    for sync in [
        SyncMode::Never,
        SyncMode::Batched(Duration::from_secs(3600)),
    ] {
        let d: [Dev; 3] = std::array::from_fn(|_| Arc::new(FaultyDevice::new(MemDevice::new())));
        let db = open_with(&d, sync).unwrap();
        let r = BlockRange::new(5, 8).unwrap();
        let v = PhysicalRun::new(2, 40).unwrap();
        db.put(r, v).unwrap();
        drop(db);
        // Nothing is left to lose: the close synced it.
        assert_eq!(d[2].crash(CrashMode::DropAll).unwrap(), 0, "{sync}");
        d[2].restart();
        let db = open_with(&d, sync).unwrap();
        assert_eq!(db.get(r)[0].value, Some(v), "{sync}");
    }
}

#[test]
fn batched_writes_become_durable_without_a_later_write() {
    let d: [Dev; 3] = std::array::from_fn(|_| Arc::new(FaultyDevice::new(MemDevice::new())));
    // A write right after opening is inside the interval, so it does not
    // sync itself; only the background thread can make it durable.
    let db = open_with(&d, SyncMode::Batched(Duration::from_millis(200))).unwrap();
    let r = BlockRange::new(100, 199).unwrap();
    let v = PhysicalRun::new(1, 7).unwrap();
    let syncs = d[2].io_stats().syncs;
    db.put(r, v).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while d[2].io_stats().syncs == syncs {
        assert!(Instant::now() < deadline, "the log was never synced");
        std::thread::sleep(Duration::from_millis(2));
    }
    // Power cut while the index is still open: its writes must be there.
    d[2].crash(CrashMode::DropAll).unwrap();
    drop(db);
    d[2].restart();
    let db = open_with(&d, SyncMode::Always).unwrap();
    assert_eq!(db.get(r)[0].value, Some(v));
}

#[test]
fn a_failed_sync_poisons_writes_and_reopen_recovers() {
    let d: [Dev; 3] = std::array::from_fn(|_| Arc::new(FaultyDevice::new(MemDevice::new())));
    let db = open(&d).unwrap();
    let a = BlockRange::new(0, 9).unwrap();
    let v = PhysicalRun::new(0, 100).unwrap();
    db.put(a, v).unwrap();
    d[2].inject(FaultRule::nth(FaultOp::Sync, 1, FaultKind::Eio));
    assert!(db.put(BlockRange::new(20, 29).unwrap(), v).is_err());
    assert!(db.put(BlockRange::new(30, 39).unwrap(), v).is_err());
    drop(db);
    d[2].clear_faults();
    let db = open(&d).unwrap();
    assert_eq!(db.get(a)[0].value, Some(v));
    assert_eq!(db.get(BlockRange::new(30, 39).unwrap())[0].value, None);
}

#[test]
fn corrupt_snapshots_and_records_are_typed_errors() {
    let d: [Dev; 3] = std::array::from_fn(|_| Arc::new(FaultyDevice::new(MemDevice::new())));
    let db = open(&d).unwrap();
    for i in 0..500u64 {
        db.put(
            BlockRange::with_len(i * 10, 5).unwrap(),
            PhysicalRun::new(0, i).unwrap(),
        )
        .unwrap();
    }
    db.snapshot().unwrap();
    drop(db);
    // Flip a byte in the payload of the newest snapshot.
    let newest = (0..2)
        .max_by_key(|&i| {
            let mut b = ferrite_io::AlignedBuf::zeroed(4096);
            d[i].read_at(&mut b, 0)
                .map(|()| u64::from_le_bytes(b[16..24].try_into().unwrap()))
                .unwrap_or(0)
        })
        .unwrap();
    let mut b = ferrite_io::AlignedBuf::zeroed(4096);
    d[newest].read_at(&mut b, 4096).unwrap();
    b[100] ^= 0xff;
    d[newest].write_at(&b, 4096).unwrap();
    match open(&d) {
        Err(ferrite_rask::RaskError::Corruption { .. }) => {}
        Err(e) => panic!("expected a corruption error, got {e}"),
        Ok(_) => panic!("a corrupt snapshot was accepted"),
    }
}

/// A bit flipped anywhere in either snapshot slot of a closed index,
/// after many snapshots: opening refuses it as corruption, or restores
/// exactly the acknowledged mapping. Damage to the newest snapshot's
/// header must not make recovery fall back to the older snapshot, whose
/// log is gone (the log names the newer epoch).
#[test]
fn a_flipped_bit_in_a_snapshot_is_refused_never_rolled_back() {
    let mut refused = 0;
    for seed in 0..300u64 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let d: [Dev; 3] = std::array::from_fn(|_| Arc::new(FaultyDevice::new(MemDevice::new())));
        let db = open(&d).unwrap();
        let mut acked = Oracle::new();
        for _ in 0..rng.gen_range(100..900) {
            let op = random_op(&mut rng);
            submit(&db, op).unwrap();
            apply(&mut acked, op);
        }
        // Sometimes the log is empty, right after a snapshot.
        if rng.gen_bool(0.3) {
            db.snapshot().unwrap();
        }
        drop(db);
        let slots: Vec<&Dev> = d[..2].iter().filter(|s| s.len() > 0).collect();
        if slots.is_empty() {
            continue;
        }
        let slot = slots[rng.gen_range(0..slots.len())].inner();
        // Headers are where a flip turns into a silent fallback: aim at
        // them half the time.
        let at = if rng.gen_bool(0.5) {
            rng.gen_range(0..48)
        } else {
            rng.gen_range(0..slot.len())
        };
        let block = at / 4096 * 4096;
        let mut b = ferrite_io::AlignedBuf::zeroed(4096);
        slot.read_at(&mut b, block).unwrap();
        b[(at - block) as usize] ^= 1 << rng.gen_range(0..8);
        slot.write_at(&b, block).unwrap();
        match open(&d) {
            Ok(db) => assert!(
                contents(&db) == acked,
                "seed {seed} (bit at byte {at}): the index reopened with other contents"
            ),
            Err(ferrite_rask::RaskError::Corruption { .. }) => refused += 1,
            Err(e) => panic!("seed {seed}: {e}"),
        }
    }
    assert!(refused >= 30, "{refused} of 300 flips refused");
}

/// Devices holding an index of one run (blocks 3..=9) whose one snapshot
/// is resealed to name `epoch`, as damage that passes the checksum can.
fn snapshot_of_epoch(epoch: u64) -> [Dev; 3] {
    let d: [Dev; 3] = std::array::from_fn(|_| Arc::new(FaultyDevice::new(MemDevice::new())));
    let db = open(&d).unwrap();
    db.put(
        BlockRange::new(3, 9).unwrap(),
        PhysicalRun::new(0, 7).unwrap(),
    )
    .unwrap();
    db.snapshot().unwrap();
    drop(db);
    let mut edited = 0;
    for dev in &d[..2] {
        let mut b = ferrite_io::AlignedBuf::zeroed(4096);
        if dev.read_at(&mut b, 0).is_err() || &b[..8] != b"FRRASKSN" {
            continue;
        }
        b[16..24].copy_from_slice(&epoch.to_le_bytes());
        let crc = crc32c::crc32c(&b[..44]);
        b[44..48].copy_from_slice(&crc.to_le_bytes());
        dev.write_at(&b, 0).unwrap();
        edited += 1;
    }
    assert_eq!(edited, 1, "one snapshot was written");
    d
}

/// A snapshot header that passes its checksum yet names an epoch no store
/// reaches is refused: the next snapshot's epoch would overflow.
#[test]
fn a_snapshot_epoch_past_the_counter_limit_is_a_typed_error() {
    match open(&snapshot_of_epoch(u64::MAX)) {
        Err(ferrite_rask::RaskError::Corruption { .. }) => {}
        Err(e) => panic!("expected a corruption error, got {e}"),
        Ok(_) => panic!("a snapshot of epoch u64::MAX was accepted"),
    }
}

/// A snapshot header that passes its checksum with an epoch just below the
/// limit opens (a damaged value can look like that), but the next snapshot
/// is refused rather than written with an epoch a reader takes for damage,
/// and the writes since stay in the log.
#[test]
fn a_snapshot_at_the_counter_limit_is_refused_and_loses_nothing() {
    let d = snapshot_of_epoch(ferrite_core::engine::COUNTER_LIMIT - 1);
    let db = open(&d).unwrap();
    db.put(
        BlockRange::new(20, 29).unwrap(),
        PhysicalRun::new(100, 10).unwrap(),
    )
    .unwrap();
    match db.snapshot() {
        Err(ferrite_rask::RaskError::Corruption { .. }) => {}
        other => panic!("expected a corruption error, got {other:?}"),
    }
    db.sync().unwrap();
    let before = contents(&db);
    drop(db);
    let db = open(&d).unwrap();
    assert_eq!(contents(&db), before);
    assert_eq!(before.len(), 17, "both runs, block by block");
}

/// Writers on several threads share the log; whatever order their records
/// reach it in, replay must rebuild exactly the index they left (records
/// are appended and applied under one lock).
#[test]
fn concurrent_writers_recover_to_the_same_mapping() {
    // Under `batched:1` the sync thread runs beside the writers and the
    // snapshots they trigger (a 6 KiB checkpoint threshold).
    for sync in [
        SyncMode::Always,
        SyncMode::Batched(Duration::from_millis(1)),
    ] {
        let d: [Dev; 3] = std::array::from_fn(|_| Arc::new(FaultyDevice::new(MemDevice::new())));
        let db = Arc::new(open_with(&d, sync).unwrap());
        std::thread::scope(|s| {
            for t in 0..3u64 {
                let db = db.clone();
                s.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(100 + t);
                    for _ in 0..700 {
                        // Overlapping ranges across threads: order matters.
                        let r = BlockRange::with_len(rng.gen_range(0..2000), rng.gen_range(1..40))
                            .unwrap();
                        if rng.gen_bool(0.1) {
                            db.delete(r).unwrap();
                        } else {
                            let v = PhysicalRun::new(t as u16, rng.gen_range(0..1 << 30)).unwrap();
                            db.put(r, v).unwrap();
                        }
                    }
                });
            }
        });
        let before = contents(&db);
        let db = Arc::into_inner(db).unwrap();
        drop(db);
        // The close synced everything: a power cut now loses nothing.
        for dev in &d {
            assert_eq!(dev.crash(CrashMode::DropAll).unwrap(), 0, "{sync}");
            dev.restart();
        }
        let db = open_with(&d, sync).unwrap();
        db.index().verify().unwrap();
        assert!(db.recovery().snapshot_epoch > 0, "{sync}");
        assert_eq!(contents(&db), before, "{sync}");
    }
}

/// A full disk, reached at a different point in each run (inside snapshots
/// too): the failing write and every later one report it (`is_no_space`),
/// lookups keep answering from memory, a reopen on the still-full disk
/// either works or fails the same way, and once space returns every
/// acknowledged write is there.
#[test]
fn a_full_disk_is_reported_and_loses_nothing() {
    for seed in 0..24u64 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let d: [Dev; 3] = std::array::from_fn(|_| Arc::new(FaultyDevice::new(MemDevice::new())));
        let db = open(&d).unwrap();
        let mut acked = Oracle::new();
        let headroom = rng.gen_range(0..16u64) << 10;
        // Rewrites over a growing span, so the snapshot grows too and the
        // index needs ever more space.
        let mut span = 3000u64;
        let mut write = || {
            span += 20;
            let r = BlockRange::with_len(rng.gen_range(0..span), rng.gen_range(1..80)).unwrap();
            Op::Put(r, PhysicalRun::new(1, rng.gen_range(0..1 << 30)).unwrap())
        };
        let put = |db: &DurableRask<PhysicalRun>, op: Op| match op {
            Op::Put(r, v) => db.put(r, v),
            Op::Delete(r) => db.delete(r),
        };
        for _ in 0..(seed % 8 * 100) {
            let op = write();
            put(&db, op).unwrap();
            apply(&mut acked, op);
        }
        for dev in &d {
            dev.fill_up(headroom);
        }
        let (failed, first) = loop {
            let op = write();
            match put(&db, op) {
                Ok(()) => apply(&mut acked, op),
                Err(e) => break (op, e),
            }
            assert!(
                acked.len() < 50_000_000,
                "seed {seed}: the disk never filled"
            );
        };
        assert!(first.is_no_space(), "seed {seed}: {first}");
        let later = put(&db, write()).unwrap_err();
        assert!(later.is_no_space(), "seed {seed}: {later}");
        // Lookups answer from memory: the acknowledged state, or it plus
        // the write that failed.
        let mut with_failed = acked.clone();
        apply(&mut with_failed, failed);
        let now = contents(&db);
        assert!(now == acked || now == with_failed, "seed {seed}: lookups");
        drop(db);
        if let Err(e) = open(&d) {
            assert!(e.is_no_space(), "seed {seed}: reopen on a full disk: {e}");
        }
        for dev in &d {
            dev.clear_faults();
        }
        let db = open(&d).unwrap();
        db.index().verify().unwrap();
        let got = contents(&db);
        assert!(
            got == acked || got == with_failed,
            "seed {seed}: {} blocks recovered, {} acknowledged",
            got.len(),
            acked.len()
        );
    }
}

/// An index directory whose identity names format 1 (before the log's
/// epoch marks) opens, keeps its runs, and is upgraded to the current
/// format; a format this build does not read is refused.
#[test]
fn an_index_of_the_older_format_opens_and_is_upgraded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("index");
    let opts = DurableOptions {
        store: Options::default().direct_io(false),
        index: RaskOptions::default(),
        checkpoint_log_bytes: 1 << 20,
        ..DurableOptions::default()
    };
    let r = BlockRange::new(10, 19).unwrap();
    let v = PhysicalRun::new(1, 500).unwrap();
    {
        let db = DurableRask::<PhysicalRun>::open(&path, opts.clone()).unwrap();
        db.put(r, v).unwrap();
    }
    let mut id = ferrite_core::StoreIdentity::read(&path).unwrap().unwrap();
    let current = id.engine_format;
    id.engine_format = 1;
    id.write(&path).unwrap();
    {
        let db = DurableRask::<PhysicalRun>::open(&path, opts.clone()).unwrap();
        assert_eq!(db.get(r)[0].value, Some(v));
    }
    let now = ferrite_core::StoreIdentity::read(&path).unwrap().unwrap();
    assert_eq!(now.engine_format, current);
    assert!(current > 1);
    id.engine_format = current + 1;
    id.write(&path).unwrap();
    assert!(matches!(
        DurableRask::<PhysicalRun>::open(&path, opts),
        Err(ferrite_rask::RaskError::Store(
            ferrite_core::Error::WrongFormat { .. }
        ))
    ));
}

/// A bit flipped in the redo log of a closed index, anywhere before the
/// seal the close appended, is damage to acknowledged writes: opening
/// refuses it as corruption and leaves the log as it was, where cutting
/// the log off at the damage would silently drop every write after it.
/// Asked to salvage, opening restores the index as it was some operations
/// back (before the damaged record), and the index goes on from there.
#[test]
fn a_flipped_bit_in_the_closed_log_is_refused_and_left_in_place() {
    let mut tried = 0;
    for seed in 0..100u64 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let d: [Dev; 3] = std::array::from_fn(|_| Arc::new(FaultyDevice::new(MemDevice::new())));
        let db = open_with(&d, SyncMode::Never).unwrap();
        // The mapping after each operation.
        let mut states = vec![Oracle::new()];
        for _ in 0..rng.gen_range(1..400) {
            let op = random_op(&mut rng);
            submit(&db, op).unwrap();
            let mut next = states.last().unwrap().clone();
            apply(&mut next, op);
            states.push(next);
        }
        drop(db);
        let log = d[2].inner();
        let mut image = ferrite_io::AlignedBuf::zeroed(log.len() as usize);
        log.read_at(&mut image, 0).unwrap();
        let mut end = 0;
        while let Some((h, _)) = ferrite_wal::decode_record(&image[end..]) {
            if h.seal {
                break;
            }
            end += h.encoded_len();
        }
        if end == 0 {
            continue;
        }
        tried += 1;
        let at = rng.gen_range(0..end as u64);
        let block = at / 4096 * 4096;
        let mut b = ferrite_io::AlignedBuf::zeroed(4096);
        log.read_at(&mut b, block).unwrap();
        b[(at - block) as usize] ^= 1 << rng.gen_range(0..8);
        log.write_at(&b, block).unwrap();
        let mut damaged = ferrite_io::AlignedBuf::zeroed(log.len() as usize);
        log.read_at(&mut damaged, 0).unwrap();
        match open(&d) {
            Err(e) if e.is_corruption() => {}
            Err(e) => panic!("seed {seed} (bit at byte {at}): {e}"),
            Ok(_) => panic!("seed {seed} (bit at byte {at}): opened over damage"),
        }
        let mut after = ferrite_io::AlignedBuf::zeroed(log.len() as usize);
        log.read_at(&mut after, 0).unwrap();
        assert!(
            after[..] == damaged[..],
            "seed {seed}: the refused open changed the log"
        );
        let db = open_recovering(
            &d,
            SyncMode::Never,
            ferrite_core::WalRecovery::TruncateAtDamage,
        )
        .unwrap_or_else(|e| panic!("seed {seed} (bit at byte {at}): salvage: {e}"));
        assert!(
            db.recovery().dropped_log_bytes > 0,
            "seed {seed}: no cut reported"
        );
        let got = contents(&db);
        assert!(
            states.contains(&got),
            "seed {seed}: salvaged to a state the index never had"
        );
        drop(db);
        let db = open(&d).unwrap_or_else(|e| panic!("seed {seed}: reopen after salvage: {e}"));
        assert!(contents(&db) == got, "seed {seed}: reopened after salvage");
    }
    assert!(tried >= 50, "only {tried} logs held records");
}
