//! `LsmOptions::cache_flushed`: a flush leaves the blocks it wrote in the
//! block cache, so reading back what was just flushed costs no device
//! read; without it, or when the flush would fill more than half the
//! cache, the same reads go to the device.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use ferrite_core::{KvStore, Options, SyncMode, WriteBatch};
use ferrite_io::BlockDevice;
use ferrite_lsm::LsmOptions;

/// Device reads of the tables while every flushed key is read back.
fn reads_after_flush(cache_flushed: bool, cache_bytes: u64) -> u64 {
    let d = common::fresh();
    let opts = Options::default()
        .cache_bytes(cache_bytes)
        .sync(SyncMode::Never);
    let db = common::open_opts(
        &d,
        LsmOptions::default().cache_flushed(cache_flushed),
        &opts,
    )
    .unwrap();
    let key = |i: u32| format!("key{:08}", i.wrapping_mul(2_654_435_761)).into_bytes();
    for chunk in 0..20u32 {
        let mut b = WriteBatch::new();
        for i in chunk * 1000..(chunk + 1) * 1000 {
            b.put(&key(i), &[i as u8; 100]).unwrap();
        }
        db.write_batch(&b).unwrap();
    }
    db.flush().unwrap();
    assert!(
        db.report().levels.iter().any(|l| l.tables > 0),
        "the keys are in tables"
    );
    let before = d[0].io_stats().reads;
    for i in 0..20_000u32 {
        assert_eq!(db.get(&key(i)).unwrap(), Some(vec![i as u8; 100]));
    }
    d[0].io_stats().reads - before
}

#[test]
fn flushed_blocks_are_read_from_the_cache() {
    assert_eq!(reads_after_flush(true, 16 << 20), 0);
    let cold = reads_after_flush(false, 16 << 20);
    assert!(cold > 0, "without it the blocks are read");
    // The flush's blocks (about 2.4 MiB) fit a 4 MiB cache, and every
    // block stays once read (one read each), but they are more than half
    // of it: the flush leaves the cache as it was. In 5 MiB they enter it.
    assert_eq!(reads_after_flush(true, 4 << 20), cold);
    assert_eq!(reads_after_flush(true, 5 << 20), 0);
}
