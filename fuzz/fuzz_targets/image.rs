//! Building blocks of the device images the recovery targets open: a
//! device holding bytes, little-endian fields read leniently, write
//! batches drawn from input bytes, and the durability check a store that
//! opened must pass.
#![allow(dead_code, reason = "each target uses part of it")]

use std::sync::Arc;

use ferrite_core::{KeyRange, KvStore, KvStoreExt, WriteBatch};
use ferrite_io::{AlignedBuf, BlockDevice, MemDevice};

/// A device of `block`-byte blocks holding `bytes` from offset 0.
pub fn device(bytes: &[u8], block: usize) -> Option<Arc<dyn BlockDevice>> {
    let dev = MemDevice::with_block_size(block).ok()?;
    if !bytes.is_empty() {
        let mut buf = AlignedBuf::zeroed(bytes.len().div_ceil(block) * block);
        buf[..bytes.len()].copy_from_slice(bytes);
        dev.write_at(&buf, 0).ok()?;
    }
    Some(Arc::new(dev))
}

/// The u64 at `at`, with missing bytes read as zero.
pub fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    for (i, x) in b.iter().skip(at).take(8).enumerate() {
        w[i] = *x;
    }
    u64::from_le_bytes(w)
}

/// `bytes` cut into pieces, each a length byte `n` followed by up to
/// `n & 0x3f` bytes: `(n, piece)` in order.
pub fn pieces(bytes: &[u8]) -> Vec<(u8, &[u8])> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while let Some((&n, tail)) = rest.split_first() {
        let (piece, after) = tail.split_at(usize::from(n & 0x3f).min(tail.len()));
        out.push((n, piece));
        rest = after;
    }
    out
}

/// A batch of one operation drawn from `chunk`: its first `1 + (n >> 6)`
/// bytes are the key, the rest the value (a delete when there is none);
/// `None` when the key is not one a store takes.
pub fn batch(n: u8, chunk: &[u8]) -> Option<WriteBatch> {
    let (key, value) = chunk.split_at(chunk.len().min(1 + (n as usize >> 6)));
    let mut batch = WriteBatch::new();
    let made = if value.is_empty() {
        batch.delete(key).map(|_| ())
    } else {
        batch.put(key, value).map(|_| ())
    };
    made.ok().map(|()| batch)
}

/// The durability oracle of the recovery targets: `db`, opened from a
/// damaged image, takes a put, a value long enough for an engine's out-of-
/// line path and a delete of `victim`, flushes and verifies. If all of that
/// succeeds and it scans, the store `reopen` opens on the same devices must
/// hold exactly what it held.
pub fn check_durable<S: KvStore>(
    db: S,
    victim: &[u8],
    reopen: impl FnOnce() -> ferrite_core::Result<S>,
) {
    let _ = db.get(b"key");
    let written = db
        .put(b"key", b"value")
        .and_then(|()| db.put(b"long", &[7u8; 300]))
        .and_then(|()| db.delete(victim))
        .and_then(|()| db.flush())
        .and_then(|()| db.verify());
    let held = db.scan_collect(KeyRange::all(), usize::MAX);
    drop(db);
    if let (Ok(()), Ok(held)) = (written, held) {
        let db = reopen().expect("a store that flushed and verified reopens");
        let found = db
            .scan_collect(KeyRange::all(), usize::MAX)
            .expect("a reopened store scans");
        assert_eq!(found, held, "a reopen finds what the flush held");
    }
}

/// The first key `scan` found, or one no store holds.
pub fn first_key(scan: &ferrite_core::Result<Vec<(Vec<u8>, Vec<u8>)>>) -> Vec<u8> {
    match scan {
        Ok(kv) => kv.first().map_or(b"absent".to_vec(), |(k, _)| k.clone()),
        Err(_) => b"absent".to_vec(),
    }
}

/// Opens a B+tree whose page file, double-write file, WAL and spill file
/// hold `images` (its carry-over slots empty), with `page`-byte pages, a
/// 256 KiB cache, no syncs and a checkpoint every 64 KiB of WAL (`bt`'s
/// other options kept). A store that opens must pass [`check_durable`].
pub fn btree_recovers(page: usize, images: [&[u8]; 4], mut bt: ferrite_btree::BTreeOptions) {
    let [pages, dwb, wal, spill] = images;
    let (Some(pages), Some(dwb), Some(wal), Some(spill), Some(c0), Some(c1)) = (
        device(pages, page),
        device(dwb, page),
        device(wal, page),
        device(spill, page),
        device(&[], page),
        device(&[], page),
    ) else {
        return;
    };
    let devices = ferrite_btree::Devices {
        pages,
        dwb,
        wal,
        spill,
        carry: [c0, c1],
    };
    let again = devices.clone();
    let opts = ferrite_core::Options::default()
        .cache_bytes(256 << 10)
        .sync(ferrite_core::SyncMode::Never);
    bt.page_size = page;
    bt.checkpoint_wal_bytes = 64 << 10;
    let Ok(db) = ferrite_btree::BTreeStore::open_on(devices, &opts, bt.clone()) else {
        return;
    };
    let victim = first_key(&db.scan_collect(KeyRange::all(), 64));
    check_durable(db, &victim, || {
        ferrite_btree::BTreeStore::open_on(again, &opts, bt)
    });
}

/// A B+tree meta page from the first 48 bytes of `b`: epoch, root,
/// height, page count and free-list chain, reduced to small values unless
/// `raw`; what it says of the carry-over comes from the epoch's high bits.
pub fn btree_meta(b: &[u8], raw: bool, page: usize) -> ferrite_btree::internals::MetaPage {
    use ferrite_btree::internals::{Carried, ChainRef, MetaPage};
    let small = |v: u64, m: u64| if raw { v } else { v % m };
    MetaPage {
        page_size: page as u32,
        epoch: small(u64_at(b, 0), 8),
        root: small(u64_at(b, 8), 16),
        height: small(u64_at(b, 16), 4) as u32,
        page_count: small(u64_at(b, 24), 32),
        free: ChainRef {
            head: small(u64_at(b, 32), 16),
            len: small(u64_at(b, 40), 4096),
        },
        carried: [Carried::Unrecorded, Carried::Nothing, Carried::Written]
            [(u64_at(b, 0) >> 61) as usize % 3],
    }
}
