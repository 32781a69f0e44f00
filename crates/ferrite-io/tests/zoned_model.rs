//! The zone rule book under random command sequences, and the emulated
//! device under concurrent appends.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::sync::Arc;
use std::time::Duration;

use ferrite_io::{
    AlignedBuf, EmulatedZonedDevice, LatencyDevice, LatencyProfile, MemDevice, ZoneCondition,
    ZoneGeometry, ZoneTable, ZonedDevice,
};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Cmd {
    Write(u32, u64),
    Append(u32, u64),
    Open(u32),
    Close(u32),
    Finish(u32),
    Reset(u32),
}

fn cmd() -> impl Strategy<Value = Cmd> {
    let z = 0u32..6;
    let n = 1u64..64;
    prop_oneof![
        (z.clone(), n.clone()).prop_map(|(z, n)| Cmd::Write(z, n)),
        (z.clone(), n).prop_map(|(z, n)| Cmd::Append(z, n)),
        z.clone().prop_map(Cmd::Open),
        z.clone().prop_map(Cmd::Close),
        z.clone().prop_map(Cmd::Finish),
        z.prop_map(Cmd::Reset),
    ]
}

proptest! {
    /// Whatever the command sequence, the limits hold, the counts match the
    /// conditions, write pointers stay in range, and a rejected command
    /// changes nothing.
    #[test]
    fn zone_table_invariants(cmds in proptest::collection::vec(cmd(), 1..200)) {
        let g = ZoneGeometry::small(6, 2, 3);
        let bs = u64::from(g.block_size);
        let mut t = ZoneTable::new(g);
        for c in cmds {
            let before = t.clone();
            let r = match c {
                Cmd::Write(z, n) => {
                    let wp = t.zone(z).map(|(_, wp)| wp).unwrap_or(0);
                    t.admit_write(z, Some(wp), n * bs).map(|_| ())
                }
                Cmd::Append(z, n) => t.admit_write(z, None, n * bs).map(|_| ()),
                Cmd::Open(z) => t.open(z),
                Cmd::Close(z) => t.close(z),
                Cmd::Finish(z) => t.finish(z),
                Cmd::Reset(z) => t.reset(z),
            };
            if r.is_err() {
                prop_assert_eq!(&t, &before, "a rejected command changed the table");
            }
            let mut open = 0;
            let mut active = 0;
            for z in 0..g.zone_count {
                let (cond, wp) = t.zone(z).unwrap();
                prop_assert!(wp <= g.zone_capacity && wp % bs == 0);
                prop_assert_eq!(cond == ZoneCondition::Full, wp == g.zone_capacity);
                if cond == ZoneCondition::Empty { prop_assert_eq!(wp, 0); }
                open += u32::from(cond.is_open());
                active += u32::from(cond.is_active());
            }
            prop_assert_eq!((open, active), (t.open_count(), t.active_count()));
            prop_assert!(open <= g.max_open && active <= g.max_active);
        }
    }
}

#[test]
fn concurrent_appends_land_in_disjoint_places() {
    let geo = ZoneGeometry::small(4, 4, 4);
    let dev = Arc::new(EmulatedZonedDevice::format(MemDevice::new(), geo).unwrap());
    let threads: Vec<_> = (0..4u8)
        .map(|t| {
            let dev = dev.clone();
            std::thread::spawn(move || {
                let mut placed = Vec::new();
                for i in 0..40u8 {
                    let mut b = AlignedBuf::zeroed(4096);
                    b.fill(t * 64 + i);
                    placed.push((dev.append(0, &b).unwrap(), t * 64 + i));
                }
                placed
            })
        })
        .collect();
    let mut all: Vec<(u64, u8)> = threads
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    all.sort();
    for (i, &(addr, _)) in all.iter().enumerate() {
        assert_eq!(
            addr,
            i as u64 * 4096,
            "appends must tile the zone without gaps"
        );
    }
    for (addr, fill) in all {
        let mut b = AlignedBuf::zeroed(4096);
        dev.read_at(&mut b, addr).unwrap();
        assert!(b.iter().all(|&x| x == fill));
    }
    assert_eq!(dev.report_zones(0, 1)[0].write_pointer, 160 * 4096);
}

#[test]
fn zoned_device_stacks_on_a_latency_device() {
    let slow = LatencyDevice::new(
        MemDevice::new(),
        LatencyProfile::fixed(Duration::from_micros(200)),
        3,
    )
    .unwrap();
    let dev = EmulatedZonedDevice::format(slow, ZoneGeometry::small(2, 1, 1)).unwrap();
    let t = std::time::Instant::now();
    let at = dev.append(1, &AlignedBuf::zeroed(4096)).unwrap();
    assert!(t.elapsed() >= Duration::from_micros(200));
    assert_eq!(at, dev.geometry().zone_size);
}
