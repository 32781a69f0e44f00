//! Bad bytes on the device give typed errors, never panics: corrupt leaf
//! pages, arbitrary MetaLog snapshots (with valid checksums) and arbitrary
//! WAL contents; and broken zone rules are refused by the device.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::sync::Arc;

use ferrite_core::testkit::{self, Model};
use ferrite_core::{Error, KeyRange, KvStore, KvStoreExt, SyncMode};
use ferrite_io::{
    AlignedBuf, BlockDevice, CrashMode, EmulatedZonedDevice, FaultyDevice, MemDevice, ZonedDevice,
};
use ferrite_zkv::{Variant, ZkvStore};
use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn frame(body: &[u8]) -> AlignedBuf {
    ferrite_zkv::internals::encode_frame(1, body, 4096)
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

const KEYS: u32 = 600;

/// One bit flipped anywhere a zone has been written, on a closed store
/// (the media going bad under the zoned device; its own zone table is the
/// device's business). The store refuses to open, or every lookup and
/// scan returns the right data or a typed corruption error, `verify`
/// fails whenever a lookup met damage, and later writes, merges,
/// checkpoints and reclamation over the damage fail typed, without a
/// panic and without changing an answer.
#[test]
fn a_flipped_bit_is_refused_never_answered() {
    let mut detected = 0;
    for seed in 0..150u64 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let variant = common::VARIANTS[seed as usize % 3];
        let mem = Arc::new(MemDevice::new());
        let geo = common::geometry(24);
        let dev: Arc<dyn ZonedDevice> =
            Arc::new(EmulatedZonedDevice::format(mem.clone(), geo).unwrap());
        let opts = common::options(SyncMode::Never);
        let db = ZkvStore::open_on(dev.clone(), &opts, common::small_opts(variant)).unwrap();
        let mut model = Model::new();
        // Values longer than 64 bytes go to the value log.
        for n in 0..rng.gen_range(500..3000u32) {
            let w = testkit::random_write(&mut rng, KEYS, false, (n % 251) as u8);
            testkit::apply(&db, &mut model, w);
        }
        db.sync().unwrap();
        drop(db);

        // A bit below some zone's write pointer, on the backing device
        // (zone addresses start after the device's own metadata).
        let written: Vec<(u64, u64)> = dev
            .report_zones(0, geo.zone_count)
            .into_iter()
            .filter(|z| z.write_pointer > z.start)
            .map(|z| (z.start, z.write_pointer))
            .collect();
        let total: u64 = written.iter().map(|(s, w)| w - s).sum();
        let mut pick = rng.gen_range(0..total);
        let mut at = 0;
        for (s, w) in &written {
            if pick < w - s {
                at = s + pick;
                break;
            }
            pick -= w - s;
        }
        let base = mem.len() - geo.address_space();
        testkit::flip_bit(mem.as_ref(), base + at, rng.gen_range(0..8));

        let what = format!(
            "seed {seed} ({variant:?}, bit at zone byte {at}, zone {})",
            at / geo.zone_size
        );
        let db = match ZkvStore::open_on(dev.clone(), &opts, common::small_opts(variant)) {
            Ok(db) => db,
            Err(e) => {
                assert!(e.is_corruption(), "{what}: open: {e}");
                detected += 1;
                continue;
            }
        };
        let writes = testkit::random_puts(&mut rng, KEYS, 1500);
        if testkit::exercise(&db, &testkit::keys(KEYS), &model, writes, &what).is_err() {
            detected += 1;
        }
    }
    // Most written bytes are stale copies (the store appends every change),
    // so about one flip in seven lands in a live page or record.
    assert!(detected >= 8, "{detected} of 150 flips detected");
}

/// A store of the variant `seed` picks, on a faulty device, after a
/// random number (in `writes`) of random writes, a sync and a power cut;
/// the device is restarted, ready to load.
fn crashed_store(
    seed: u64,
    opts: &ferrite_core::Options,
    writes: std::ops::Range<u32>,
) -> (
    Arc<FaultyDevice<MemDevice>>,
    ferrite_zkv::Variant,
    Model,
    SmallRng,
) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let variant = common::VARIANTS[seed as usize % 3];
    let faulty = Arc::new(FaultyDevice::new(MemDevice::new()));
    let dev: Arc<dyn ZonedDevice> =
        Arc::new(EmulatedZonedDevice::format(faulty.clone(), common::geometry(24)).unwrap());
    let db = ZkvStore::open_on(dev, opts, common::small_opts(variant)).unwrap();
    let mut model = Model::new();
    for n in 0..rng.gen_range(writes) {
        let w = testkit::random_write(&mut rng, KEYS, false, (n % 251) as u8);
        testkit::apply(&db, &mut model, w);
    }
    db.sync().unwrap();
    faulty.crash(CrashMode::DropAll).unwrap();
    drop(db);
    faulty.restart();
    (faulty, variant, model, rng)
}

/// A bit flipped in the newest MetaLog snapshot of a store that lost
/// power (so the snapshot is one a checkpoint wrote while writes went on,
/// not the one closing writes last): the store refuses to open, or opens
/// with exactly its data. Falling back to the snapshot before it is what a
/// torn write calls for, but the zones that snapshot names (WAL, leaves,
/// value log) may have been reset since.
#[test]
fn a_damaged_newest_snapshot_is_refused_or_loses_nothing() {
    let mut refused = 0;
    let runs = 48u64;
    for seed in 0..runs {
        let opts = common::options(SyncMode::Never);
        let (faulty, variant, model, mut rng) = crashed_store(seed, &opts, 500..4000);
        let geo = common::geometry(24);
        let dev: Arc<dyn ZonedDevice> =
            Arc::new(EmulatedZonedDevice::load(faulty.clone()).unwrap());

        // The newest frame (magic "ZKVM" at a block start) in any zone.
        let bs = u64::from(geo.block_size);
        let mut newest: Option<(u64, u64, u64)> = None;
        for z in dev.report_zones(0, geo.zone_count) {
            let mut b = AlignedBuf::zeroed(bs as usize);
            let mut at = z.start;
            while at < z.write_pointer {
                dev.read_at(&mut b, at).unwrap();
                if &b[..4] == b"ZKVM" {
                    let version = u64::from_le_bytes(b[8..16].try_into().unwrap());
                    let len = u64::from_le_bytes(b[16..24].try_into().unwrap());
                    if newest.is_none_or(|(v, _, _)| version > v) {
                        newest = Some((version, at, len));
                    }
                }
                at += bs;
            }
        }
        let (version, at, len) = newest.expect("a MetaLog snapshot");
        let mem = faulty.inner();
        let base = mem.len() - geo.address_space();
        let byte = base + at + 32 + rng.gen_range(0..len.max(1));
        testkit::flip_bit(mem, byte, rng.gen_range(0..8));

        let what = format!("seed {seed} ({variant:?}, snapshot {version})");
        match ZkvStore::open_on(dev, &opts, common::small_opts(variant)) {
            Ok(db) => {
                testkit::check_lookups(&db, &testkit::keys(KEYS), &model, None, &what);
                db.verify()
                    .unwrap_or_else(|e| panic!("{what}: opened, then failed verify: {e}"));
            }
            Err(e) => {
                assert!(e.is_corruption(), "{what}: open: {e}");
                refused += 1;
            }
        }
    }
    // Checkpoints here come when the two-zone WAL ring fills, and each
    // resets the zone the snapshot before it replays from: the fallback
    // almost never has its log, so almost every run must refuse.
    assert!(
        refused >= runs / 2,
        "{refused} of {runs} damaged snapshots refused"
    );
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

/// A bit flipped in a copy of the emulated device's newest zone table,
/// after a power cut: the device keeps that table in two copies, so the
/// write pointers, and every acknowledged write, survive.
#[test]
fn a_flipped_bit_in_the_newest_zone_table_copy_loses_nothing() {
    for seed in 0..100u64 {
        let opts = common::options(SyncMode::Always);
        let (faulty, variant, model, mut rng) = crashed_store(seed, &opts, 100..2000);
        // The header block, then four one-block table copies (24 zones).
        let mem = faulty.inner();
        let seq = |off: u64| {
            let mut b = AlignedBuf::zeroed(4096);
            mem.read_at(&mut b, off).unwrap();
            u64::from_le_bytes(b[0..8].try_into().unwrap())
        };
        let newest = (1..5u64).map(|c| c * 4096).max_by_key(|&o| seq(o)).unwrap();
        let mut b = AlignedBuf::zeroed(4096);
        mem.read_at(&mut b, newest).unwrap();
        b[20 + rng.gen_range(0..100)] ^= 1;
        mem.write_at(&b, newest).unwrap();
        let what = format!("seed {seed} ({variant:?})");
        let dev: Arc<dyn ZonedDevice> =
            Arc::new(EmulatedZonedDevice::load(faulty.clone()).unwrap());
        let db = ZkvStore::open_on(dev, &opts, common::small_opts(variant)).unwrap();
        assert_eq!(
            testkit::check_lookups(&db, &testkit::keys(KEYS), &model, None, &what),
            0
        );
    }
}

/// A bit flipped in a synced WAL record that later records vouch for (they
/// were appended after it was synced) is damage to acknowledged writes,
/// not a torn tail: recovery refuses it as corruption rather than replay
/// up to the gap and drop every write after it. Asked to salvage, it keeps
/// the writes before the damaged record and none after.
#[test]
fn a_flipped_bit_in_a_vouched_wal_record_is_refused() {
    let mut refused = 0;
    for seed in 0..24u64 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let variant = common::VARIANTS[seed as usize % 3];
        let faulty = Arc::new(FaultyDevice::new(MemDevice::new()));
        let geo = common::geometry(24);
        let dev: Arc<dyn ZonedDevice> =
            Arc::new(EmulatedZonedDevice::format(faulty.clone(), geo).unwrap());
        let opts = common::options(SyncMode::Always);
        let db = ZkvStore::open_on(dev, &opts, common::small_opts(variant)).unwrap();
        // Fewer 4 KiB units than the 96 KiB that start a checkpoint.
        let n = rng.gen_range(6..20u32);
        for i in 0..n {
            db.put(
                format!("key{i:04}").as_bytes(),
                format!("wal-value-{i:04}").as_bytes(),
            )
            .unwrap();
        }
        // Power cut with the store open: the puts are in the WAL only.
        faulty.crash(CrashMode::DropAll).unwrap();
        drop(db);
        faulty.restart();
        // The record of an early put: a synced unit's first block.
        let t = rng.gen_range(0..n / 2);
        let target = format!("wal-value-{t:04}");
        let mem = faulty.inner();
        let base = mem.len() - geo.address_space();
        let mut block = AlignedBuf::zeroed(4096);
        let mut found = None;
        for at in (base..mem.len()).step_by(4096) {
            mem.read_at(&mut block, at).unwrap();
            let Some((h, p)) = ferrite_wal::decode_record(&block) else {
                continue;
            };
            if h.durable.is_some() && p.windows(target.len()).any(|w| w == target.as_bytes()) {
                found = Some(at + 30);
            }
        }
        let at = found.unwrap_or_else(|| panic!("seed {seed}: no record holds {target}"));
        testkit::flip_bit(mem, at, rng.gen_range(0..8));
        let dev: Arc<dyn ZonedDevice> =
            Arc::new(EmulatedZonedDevice::load(faulty.clone()).unwrap());
        match ZkvStore::open_on(dev.clone(), &opts, common::small_opts(variant)) {
            Ok(db) => {
                for i in 0..n {
                    assert_eq!(
                        db.get(format!("key{i:04}").as_bytes()).unwrap(),
                        Some(format!("wal-value-{i:04}").into_bytes()),
                        "seed {seed} ({variant:?}): opened over damage to {target}, put {i} lost"
                    );
                }
            }
            Err(e) => {
                assert!(e.is_corruption(), "seed {seed}: {e}");
                refused += 1;
                // Salvaged, the store keeps the puts before the damaged one.
                let salvage = opts
                    .clone()
                    .wal_recovery(ferrite_core::WalRecovery::TruncateAtDamage);
                let db = ZkvStore::open_on(dev, &salvage, common::small_opts(variant))
                    .unwrap_or_else(|e| panic!("seed {seed}: salvage: {e}"));
                for i in 0..n {
                    let want = (i < t).then(|| format!("wal-value-{i:04}").into_bytes());
                    assert_eq!(
                        db.get(format!("key{i:04}").as_bytes()).unwrap(),
                        want,
                        "seed {seed} ({variant:?}): salvaged past damage to put {t}, put {i}"
                    );
                }
            }
        }
    }
    assert_eq!(refused, 24, "{refused} of 24 damaged logs refused");
}
