//! RASK recovery from arbitrary bytes: the input is cut into two snapshot
//! files and a redo log. Opening never panics; it yields an index that
//! passes `verify` and keeps working, or a typed error. An index that
//! took a snapshot and a synced write reopens mapping every block as
//! before. With the third
//! byte odd, the first snapshot is instead sealed around the input as its
//! runs (spec: `docs/format/rask-snapshot.md`), so the run checks behind
//! the checksums see arbitrary runs.
#![no_main]

use ferrite_rask::{BlockRange, DurableOptions, DurableRask, PhysicalRun, RangeValue, RaskDevices};
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
    let again = RaskDevices {
        snapshots: devices.snapshots.clone(),
        log: devices.log.clone(),
    };
    let Ok(db) = DurableRask::<PhysicalRun>::open_on(devices, DurableOptions::default()) else {
        return;
    };
    assert!(db.index().verify().is_ok());
    let r = BlockRange::new(7, 9).unwrap_or(BlockRange::block(7));
    let Some(v) = PhysicalRun::new(1, 1) else {
        return;
    };
    let _ = db.get(r);
    // A snapshot raises the recovered epoch; a put after it goes to the
    // redo log.
    let written = db
        .snapshot()
        .and_then(|()| db.put(r, v))
        .and_then(|()| db.sync());
    let held = runs(&db);
    drop(db);
    // What a snapshot and a synced log held comes back at a reopen.
    if written.is_ok() {
        let db = DurableRask::<PhysicalRun>::open_on(again, DurableOptions::default())
            .expect("a synced index reopens");
        assert_eq!(runs(&db), held, "a reopen maps every block as before");
    }
});

/// Every mapped run of the index, continuous pieces joined (a reopened
/// index may cut runs where the one before it did not).
fn runs(db: &DurableRask<PhysicalRun>) -> Vec<(BlockRange, PhysicalRun)> {
    let mut out: Vec<(BlockRange, PhysicalRun)> = Vec::new();
    for seg in db.get(BlockRange::new(0, u64::MAX).unwrap_or(BlockRange::block(0))) {
        let Some(v) = seg.value else {
            continue;
        };
        if let Some((lr, lv)) = out.last_mut() {
            if lr.r().checked_add(1) == Some(seg.range.l()) {
                if let Some(m) = PhysicalRun::merge(*lr, lv, seg.range, &v) {
                    *lr = BlockRange::new(lr.l(), seg.range.r()).unwrap_or(*lr);
                    *lv = m;
                    continue;
                }
            }
        }
        out.push((seg.range, v));
    }
    out
}
