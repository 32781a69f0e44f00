//! One test per zoned-device rule: each broken rule is a typed error and
//! leaves the device unchanged.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use ferrite_io::{
    AlignedBuf, DeviceError, EmulatedZonedDevice, MemDevice, ZoneCondition, ZoneError,
    ZoneGeometry, ZonedDevice,
};

const B: usize = 4096;

fn device(max_open: u32, max_active: u32) -> EmulatedZonedDevice<MemDevice> {
    EmulatedZonedDevice::format(
        MemDevice::new(),
        ZoneGeometry::small(8, max_open, max_active),
    )
    .unwrap()
}

fn blocks(n: usize, fill: u8) -> AlignedBuf {
    let mut b = AlignedBuf::zeroed(n * B);
    b.fill(fill);
    b
}

fn zone_err(r: Result<impl std::fmt::Debug, DeviceError>) -> ZoneError {
    match r {
        Err(DeviceError::Zone(z)) => z,
        other => panic!("expected a zone error, got {other:?}"),
    }
}

fn wp(d: &impl ZonedDevice, zone: u32) -> u64 {
    d.report_zones(zone, 1)[0].write_pointer
}

#[test]
fn write_must_be_at_the_write_pointer() {
    let d = device(4, 4);
    d.write_at(&blocks(1, 1), 0).unwrap();
    let e = zone_err(d.write_at(&blocks(1, 2), 2 * B as u64));
    assert_eq!(
        e,
        ZoneError::NotAtWritePointer {
            zone: 0,
            offset: 8192,
            write_pointer: 4096
        }
    );
    // Rewriting already-written data is the same violation.
    assert!(matches!(
        zone_err(d.write_at(&blocks(1, 2), 0)),
        ZoneError::NotAtWritePointer { .. }
    ));
    assert_eq!(wp(&d, 0), 4096);
}

#[test]
fn write_may_not_pass_the_zone_capacity() {
    let d = device(4, 4);
    let g = *d.geometry();
    let cap_blocks = (g.zone_capacity as usize) / B;
    d.write_at(&blocks(cap_blocks - 1, 1), 0).unwrap();
    let e = zone_err(d.write_at(&blocks(2, 1), g.zone_capacity - B as u64));
    assert!(
        matches!(e, ZoneError::PastCapacity { zone: 0, .. }),
        "{e:?}"
    );
    // The gap between capacity and zone size is not addressable either.
    let e = zone_err(d.write_at(&blocks(1, 1), g.zone_capacity + B as u64));
    assert!(matches!(e, ZoneError::NotAtWritePointer { .. }), "{e:?}");
}

#[test]
fn write_may_not_cross_into_the_next_zone() {
    let d = device(4, 4);
    let g = *d.geometry();
    let e = zone_err(d.write_at(&blocks(2, 1), g.zone_size - B as u64));
    assert_eq!(e, ZoneError::CrossesZoneBoundary { zone: 0 });
}

#[test]
fn write_to_a_full_zone_fails() {
    let d = device(4, 4);
    d.finish_zone(1).unwrap();
    assert_eq!(
        zone_err(d.append(1, &blocks(1, 1))),
        ZoneError::ZoneFull { zone: 1 }
    );
    // A zone filled by writes is full too.
    let g = *d.geometry();
    let n = g.zone_capacity as usize / B;
    for i in 0..n / 32 {
        d.write_at(&blocks(32, 3), (i * 32 * B) as u64).unwrap();
    }
    assert_eq!(d.report_zones(0, 1)[0].condition, ZoneCondition::Full);
    assert_eq!(
        zone_err(d.append(0, &blocks(1, 1))),
        ZoneError::ZoneFull { zone: 0 }
    );
}

#[test]
fn too_many_open_zones() {
    let d = device(2, 8);
    d.open_zone(0).unwrap();
    d.open_zone(1).unwrap();
    assert_eq!(
        zone_err(d.open_zone(2)),
        ZoneError::TooManyOpenZones {
            zone: 2,
            max_open: 2
        }
    );
    assert_eq!(
        zone_err(d.append(2, &blocks(1, 1))),
        ZoneError::TooManyOpenZones {
            zone: 2,
            max_open: 2
        }
    );
    d.close_zone(0).unwrap();
    d.append(2, &blocks(1, 1)).unwrap();
}

#[test]
fn too_many_active_zones() {
    let d = device(2, 2);
    d.append(0, &blocks(1, 1)).unwrap();
    d.append(1, &blocks(1, 1)).unwrap();
    d.close_zone(0).unwrap();
    d.close_zone(1).unwrap();
    assert_eq!(
        zone_err(d.append(2, &blocks(1, 1))),
        ZoneError::TooManyActiveZones {
            zone: 2,
            max_active: 2
        }
    );
    d.finish_zone(0).unwrap();
    d.append(2, &blocks(1, 1)).unwrap();
}

#[test]
fn append_returns_where_data_landed() {
    let d = device(4, 4);
    let g = *d.geometry();
    let a = d.append(3, &blocks(2, 7)).unwrap();
    let b = d.append(3, &blocks(1, 8)).unwrap();
    assert_eq!(a, 3 * g.zone_size);
    assert_eq!(b, 3 * g.zone_size + 2 * B as u64);
    let mut r = AlignedBuf::zeroed(B);
    d.read_at(&mut r, b).unwrap();
    assert!(r.iter().all(|&x| x == 8));
}

#[test]
fn append_larger_than_the_limit_fails() {
    let d = device(4, 4);
    let limit = d.geometry().max_append;
    let e = zone_err(d.append(0, &blocks(limit as usize / B + 1, 1)));
    assert_eq!(
        e,
        ZoneError::AppendTooLarge {
            len: limit + B as u64,
            limit
        }
    );
}

#[test]
fn read_past_the_write_pointer_fails() {
    let d = device(4, 4);
    d.append(0, &blocks(1, 1)).unwrap();
    let mut r = AlignedBuf::zeroed(2 * B);
    assert!(matches!(
        zone_err(d.read_at(&mut r, 0)),
        ZoneError::ReadPastWritePointer { .. }
    ));
}

#[test]
fn reset_empties_and_zeroes_a_zone() {
    let d = device(4, 4);
    d.append(0, &blocks(4, 9)).unwrap();
    d.reset_zone(0).unwrap();
    let z = d.report_zones(0, 1)[0];
    assert_eq!((z.condition, z.write_pointer), (ZoneCondition::Empty, 0));
    d.finish_zone(0).unwrap();
    let mut r = AlignedBuf::zeroed(B);
    d.read_at(&mut r, 0).unwrap();
    assert!(r.iter().all(|&x| x == 0), "old data must not come back");
}

#[test]
fn read_only_and_offline_zones() {
    let d = device(4, 4);
    d.append(0, &blocks(1, 1)).unwrap();
    d.fail_zone(0, ZoneCondition::ReadOnly).unwrap();
    let mut r = AlignedBuf::zeroed(B);
    d.read_at(&mut r, 0).unwrap();
    assert_eq!(
        zone_err(d.append(0, &blocks(1, 1))),
        ZoneError::ZoneReadOnly { zone: 0 }
    );
    assert_eq!(
        zone_err(d.reset_zone(0)),
        ZoneError::ZoneReadOnly { zone: 0 }
    );
    d.fail_zone(1, ZoneCondition::Offline).unwrap();
    assert_eq!(
        zone_err(d.read_at(&mut r, d.geometry().zone_size)),
        ZoneError::ZoneOffline { zone: 1 }
    );
}

#[test]
fn no_such_zone() {
    let d = device(4, 4);
    assert_eq!(
        zone_err(d.append(8, &blocks(1, 1))),
        ZoneError::NoSuchZone {
            zone: 8,
            zone_count: 8
        }
    );
    assert!(matches!(
        zone_err(d.reset_zone(99)),
        ZoneError::NoSuchZone { .. }
    ));
}

#[test]
fn invalid_transitions() {
    let d = device(4, 4);
    assert!(matches!(
        zone_err(d.close_zone(0)),
        ZoneError::InvalidTransition { .. }
    ));
    d.finish_zone(0).unwrap();
    assert!(matches!(
        zone_err(d.open_zone(0)),
        ZoneError::ZoneFull { .. }
    ));
}

#[test]
fn misaligned_io_is_rejected() {
    let d = device(4, 4);
    let b = AlignedBuf::zeroed(100);
    assert!(matches!(
        d.append(0, &b),
        Err(DeviceError::Misaligned { .. })
    ));
    assert_eq!(wp(&d, 0), 0);
}
