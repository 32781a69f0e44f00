//! Zone state survives close and reopen, and crashes keep exactly the synced state.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::sync::Arc;

use ferrite_io::{
    AlignedBuf, CrashMode, EmulatedZonedDevice, FaultKind, FaultOp, FaultRule, FaultyDevice,
    MemDevice, ZoneCondition, ZoneGeometry, ZonedDevice,
};

fn blocks(n: usize, fill: u8) -> AlignedBuf {
    let mut b = AlignedBuf::zeroed(n * 4096);
    b.fill(fill);
    b
}

#[test]
fn zone_state_survives_reopen_of_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("zns.img");
    let geo = ZoneGeometry::small(16, 4, 6);
    {
        let d = EmulatedZonedDevice::open_or_create(&path, geo).unwrap();
        d.append(0, &blocks(3, 1)).unwrap();
        d.append(1, &blocks(1, 2)).unwrap();
        d.finish_zone(2).unwrap();
        d.open_zone(5).unwrap();
        d.sync().unwrap();
    }
    let d = EmulatedZonedDevice::open(&path).unwrap();
    assert_eq!(*d.geometry(), geo);
    let z = d.report_zones(0, 6);
    assert_eq!(
        (z[0].condition, z[0].write_pointer),
        (ZoneCondition::Closed, 3 * 4096)
    );
    assert_eq!(
        (z[1].condition, z[1].write_pointer),
        (ZoneCondition::Closed, geo.zone_size + 4096)
    );
    assert_eq!(z[2].condition, ZoneCondition::Full);
    assert_eq!(
        z[5].condition,
        ZoneCondition::Empty,
        "an open zone with no data comes back empty"
    );
    let mut r = AlignedBuf::zeroed(4096);
    d.read_at(&mut r, 2 * 4096).unwrap();
    assert!(r.iter().all(|&x| x == 1));
    // Writing continues at the persisted write pointer.
    assert_eq!(d.append(0, &blocks(1, 3)).unwrap(), 3 * 4096);
    drop(d);
    // A geometry mismatch is refused rather than silently reinterpreted.
    let other = ZoneGeometry::small(8, 4, 6);
    assert!(EmulatedZonedDevice::open_or_create(&path, other).is_err());
}

#[test]
fn close_without_sync_still_saves_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("zns.img");
    let geo = ZoneGeometry::small(4, 2, 2);
    {
        let d = EmulatedZonedDevice::open_or_create(&path, geo).unwrap();
        d.append(3, &blocks(2, 1)).unwrap();
    }
    let d = EmulatedZonedDevice::open(&path).unwrap();
    assert_eq!(
        d.report_zones(3, 1)[0].write_pointer,
        3 * geo.zone_size + 8192
    );
}

#[test]
fn crash_keeps_exactly_the_synced_state() {
    let faulty = Arc::new(FaultyDevice::new(MemDevice::new()));
    let geo = ZoneGeometry::small(8, 4, 4);
    let d = EmulatedZonedDevice::format(faulty.clone(), geo).unwrap();
    d.append(0, &blocks(2, 1)).unwrap();
    d.sync().unwrap();
    d.append(0, &blocks(2, 2)).unwrap();
    d.append(1, &blocks(1, 3)).unwrap();
    faulty.crash(CrashMode::DropAll).unwrap();
    drop(d); // its final table write fails against the crashed device
    faulty.restart();
    let d = EmulatedZonedDevice::load(faulty.clone()).unwrap();
    let z = d.report_zones(0, 2);
    assert_eq!(z[0].write_pointer, 8192);
    assert_eq!(z[1].condition, ZoneCondition::Empty);
    let mut r = AlignedBuf::zeroed(8192);
    d.read_at(&mut r, 0).unwrap();
    assert!(r.iter().all(|&x| x == 1));
}

#[test]
fn a_crash_inside_sync_leaves_the_old_or_the_new_state() {
    let geo = ZoneGeometry::small(8, 4, 4);
    let mut outcomes = [0usize; 2];
    for seed in 0..16 {
        let faulty = Arc::new(FaultyDevice::new(MemDevice::new()));
        let d = EmulatedZonedDevice::format(faulty.clone(), geo).unwrap();
        d.append(0, &blocks(1, 1)).unwrap();
        d.sync().unwrap();
        d.append(0, &blocks(1, 2)).unwrap();
        // The sync after the table write fails: the new table copy is written
        // but unsynced when the power goes.
        faulty.inject(FaultRule::nth(FaultOp::Sync, 2, FaultKind::Eio));
        assert!(d.sync().is_err());
        faulty
            .crash(CrashMode::KeepRandom { seed, keep: 0.5 })
            .unwrap();
        drop(d);
        faulty.restart();
        let d = EmulatedZonedDevice::load(faulty).unwrap();
        let wp = d.report_zones(0, 1)[0].write_pointer;
        let mut r = AlignedBuf::zeroed(4096);
        match wp {
            4096 => outcomes[0] += 1,
            8192 => {
                outcomes[1] += 1;
                d.read_at(&mut r, 4096).unwrap();
                assert!(
                    r.iter().all(|&x| x == 2),
                    "seed {seed}: pointer covers lost data"
                );
            }
            _ => panic!("seed {seed}: impossible write pointer {wp}"),
        }
    }
    assert!(outcomes[0] > 0 && outcomes[1] > 0, "{outcomes:?}");
}

#[test]
fn corrupt_metadata_is_a_typed_error() {
    let dev = MemDevice::new();
    let mut junk = AlignedBuf::zeroed(4096 * 4);
    junk.fill(0xAB);
    ferrite_io::BlockDevice::write_at(&dev, &junk, 0).unwrap();
    let e = EmulatedZonedDevice::load(dev).unwrap_err();
    assert!(
        matches!(e, ferrite_io::DeviceError::CorruptMetadata { .. }),
        "{e}"
    );
}

/// The newest zone table is written twice (both copies of a pair, in one
/// write), so a bit flipped in one copy loses no write pointer; only when
/// both copies of the newest pair are bad (a crash tore their write)
/// does the device fall back to the pair before.
#[test]
fn damage_to_one_copy_of_the_newest_table_loses_nothing() {
    let geo = ZoneGeometry::small(8, 4, 4);
    let mem = Arc::new(MemDevice::new());
    let d = EmulatedZonedDevice::format(mem.clone(), geo).unwrap();
    d.append(0, &blocks(1, 1)).unwrap();
    d.sync().unwrap();
    d.append(0, &blocks(1, 2)).unwrap();
    d.sync().unwrap();
    drop(d);
    // Four one-block copies after the header block; the newest pair holds
    // the highest sequence number.
    let seq_at = |copy: u64| {
        let mut b = AlignedBuf::zeroed(4096);
        ferrite_io::BlockDevice::read_at(mem.as_ref(), &mut b, 4096 * (1 + copy)).unwrap();
        u64::from_le_bytes(b[..8].try_into().unwrap())
    };
    let seqs: Vec<u64> = (0..4).map(seq_at).collect();
    let newest = *seqs.iter().max().unwrap();
    let pair: Vec<u64> = (0..4).filter(|&c| seqs[c as usize] == newest).collect();
    assert_eq!(pair.len(), 2, "the newest table is in two copies: {seqs:?}");
    let flip = |copy: u64| {
        let mut b = AlignedBuf::zeroed(4096);
        let at = 4096 * (1 + copy);
        ferrite_io::BlockDevice::read_at(mem.as_ref(), &mut b, at).unwrap();
        b[20] ^= 1;
        ferrite_io::BlockDevice::write_at(mem.as_ref(), &b, at).unwrap();
    };
    flip(pair[0]);
    let d = EmulatedZonedDevice::load(mem.clone()).unwrap();
    assert_eq!(d.report_zones(0, 1)[0].write_pointer, 8192);
    drop(d);
    flip(pair[1]);
    let d = EmulatedZonedDevice::load(mem.clone()).unwrap();
    assert_eq!(d.report_zones(0, 1)[0].write_pointer, 4096);
}
