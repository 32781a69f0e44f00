//! RASK recovery from arbitrary bytes: the input is cut into two snapshot
//! files and a redo log. Opening never panics; it yields an index that
//! passes `verify` and keeps working, or a typed error. With the third
//! byte odd, the first snapshot is instead sealed around the input as its
//! runs (spec: `docs/format/rask-snapshot.md`), so the run checks behind
//! the checksums see arbitrary runs.
#![no_main]

use ferrite_rask::{BlockRange, DurableOptions, DurableRask, PhysicalRun, RaskDevices};
use libfuzzer_sys::fuzz_target;

mod image;

/// A snapshot of epoch `epoch` whose payload is the whole runs in `runs`
/// (16-byte ranges, 8-byte values), with a valid header and checksums.
fn sealed_snapshot(epoch: u64, runs: &[u8]) -> Vec<u8> {
    const RUN_LEN: usize = 16 + 8;
    let payload = &runs[..runs.len() / RUN_LEN * RUN_LEN];
    let mut h = vec![0u8; 4096];
    h[..8].copy_from_slice(b"FRRASKSN");
    h[8..12].copy_from_slice(&1u32.to_le_bytes());
    h[12..16].copy_from_slice(&8u32.to_le_bytes());
    h[16..24].copy_from_slice(&epoch.to_le_bytes());
    h[24..32].copy_from_slice(&((payload.len() / RUN_LEN) as u64).to_le_bytes());
    h[32..40].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    h[40..44].copy_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    let crc = crc32c::crc32c(&h[..44]);
    h[44..48].copy_from_slice(&crc.to_le_bytes());
    h.extend_from_slice(payload);
    h
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
    let sealed;
    let s0 = if data.get(2).is_some_and(|m| m & 1 == 1) {
        sealed = sealed_snapshot(u64::from(data[0]), s0);
        &sealed[..]
    } else {
        s0
    };
    let (Some(d0), Some(d1), Some(dl)) = (
        image::device(s0, 4096),
        image::device(s1, 4096),
        image::device(log, 4096),
    ) else {
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
        // A snapshot raises the recovered epoch.
        let _ = db.snapshot();
    }
});
