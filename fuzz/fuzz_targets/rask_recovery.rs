//! RASK recovery from arbitrary bytes: the input is cut into two snapshot
//! files and a redo log. Opening never panics; it yields an index that
//! passes `verify` and keeps working, or a typed error.
#![no_main]

use std::sync::Arc;

use ferrite_io::{AlignedBuf, BlockDevice, MemDevice};
use ferrite_rask::{BlockRange, DurableOptions, DurableRask, PhysicalRun, RaskDevices};
use libfuzzer_sys::fuzz_target;

fn device(bytes: &[u8]) -> Option<Arc<dyn BlockDevice>> {
    let dev = MemDevice::new();
    if !bytes.is_empty() {
        let len = bytes.len().div_ceil(4096) * 4096;
        let mut buf = AlignedBuf::zeroed(len);
        buf[..bytes.len()].copy_from_slice(bytes);
        dev.write_at(&buf, 0).ok()?;
    }
    Some(Arc::new(dev))
}

fuzz_target!(|data: &[u8]| {
    // Two length bytes choose where the three files split the input.
    let (a, b) = match data {
        [x, y, ..] => (*x as usize * 64, *y as usize * 64),
        _ => (0, 0),
    };
    let rest = data.get(2..).unwrap_or(&[]);
    let a = a.min(rest.len());
    let b = b.min(rest.len() - a);
    let (s0, tail) = rest.split_at(a);
    let (s1, log) = tail.split_at(b);
    let (Some(d0), Some(d1), Some(dl)) = (device(s0), device(s1), device(log)) else {
        return;
    };
    let devices = RaskDevices {
        snapshots: [d0, d1],
        log: dl,
    };
    if let Ok(db) = DurableRask::<PhysicalRun>::open_on(devices, DurableOptions::default()) {
        assert!(db.index().verify().is_ok());
        let r = BlockRange::new(7, 9).unwrap_or(BlockRange::block(7));
        if let Some(v) = PhysicalRun::new(1, 1) {
            let _ = db.put(r, v);
        }
        let _ = db.get(r);
    }
});
