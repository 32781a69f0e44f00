//! Emulated zoned-device metadata (header and zone tables) read from
//! arbitrary bytes: loading never panics, and a loaded device keeps its
//! invariants under a few operations.
#![no_main]

use ferrite_io::{AlignedBuf, BlockDevice, EmulatedZonedDevice, MemDevice, ZonedDevice};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dev = MemDevice::new();
    let len = data.len().div_ceil(4096).max(1) * 4096;
    let mut buf = AlignedBuf::zeroed(len);
    buf[..data.len()].copy_from_slice(data);
    if dev.write_at(&buf, 0).is_err() {
        return;
    }
    if let Ok(zoned) = EmulatedZonedDevice::load(dev) {
        let g = *zoned.geometry();
        if g.zone_count > 4096 {
            return;
        }
        for z in zoned.report_zones(0, g.zone_count) {
            assert!(z.write_pointer >= z.start && z.write_pointer <= z.start + z.capacity);
        }
        let _ = zoned.append(0, &AlignedBuf::zeroed(g.block_size as usize));
    }
});
