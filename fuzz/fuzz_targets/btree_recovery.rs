//! B+tree recovery from arbitrary bytes: the input becomes the page file
//! and the WAL. Opening never panics; it yields a store that answers
//! reads, takes a write, checkpoints and verifies, or a typed error. A
//! store that did all of that reopens with the same contents.
//!
//! The first byte picks the images. Its first bit set, meta page 0 is
//! encoded from input-drawn fields (root, height, page count, free-list
//! chain; small unless the fourth bit is set), so the tree's walk starts
//! from arbitrary but checksummed roots; clear, the page file starts with
//! the input as it is. Its second bit set, every tree page is sealed: its
//! id field names its place and its checksum is valid, so the layout
//! checks behind the checksum see arbitrary cells. Its third bit set, the
//! WAL holds records of the meta page's epoch with valid checksums whose
//! payloads are input-drawn write batches. The fifth bit turns the
//! SHORTCUT companion on, whose training walks the inner pages.
#![no_main]

use ferrite_btree::internals::{Carried, ChainRef, MetaPage};
use ferrite_btree::{BTreeOptions, BTreeStore, Devices, ShortcutOptions};
use ferrite_core::{KeyRange, KvStoreExt, Options, SyncMode};
use libfuzzer_sys::fuzz_target;

mod image;
use image::{batch, u64_at};

const PAGE: usize = 1024;

/// A meta page from the first 48 bytes of `b`: epoch, root, height, page
/// count and free-list chain, reduced to small values unless `raw`; what
/// it says of the carry-over comes from the epoch's high bits.
fn meta(b: &[u8], raw: bool) -> MetaPage {
    let small = |v: u64, m: u64| if raw { v } else { v % m };
    MetaPage {
        page_size: PAGE as u32,
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

/// WAL records of `epoch`, each a write batch drawn from one of the
/// input's pieces ([`image::pieces`], [`image::batch`]).
fn wal(epoch: u64, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for (n, chunk) in image::pieces(bytes) {
        if let Some(batch) = batch(n, chunk) {
            let mut payload = Vec::new();
            batch.encode(&mut payload);
            ferrite_wal::encode_record(epoch, &payload, &mut out);
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let [pick, w, rest @ ..] = data else {
        return;
    };
    let w = (*w as usize * 8).min(rest.len());
    let (wal_bytes, file_bytes) = rest.split_at(w);

    let mut epoch = 0;
    let mut file = Vec::new();
    let pages_from = if pick & 1 == 1 {
        let m = meta(file_bytes, pick & 8 == 8);
        epoch = m.epoch;
        let mut slot = vec![0u8; PAGE];
        m.encode(&mut slot);
        // Checkpoint `e` writes meta slot `e % 2`; the other stays zero.
        if m.epoch % 2 == 1 {
            file.extend_from_slice(&[0u8; PAGE]);
        }
        file.extend_from_slice(&slot);
        if m.epoch % 2 == 0 {
            file.extend_from_slice(&[0u8; PAGE]);
        }
        file_bytes.get(48..).unwrap_or_default()
    } else {
        file_bytes
    };
    let first_page = file.len() / PAGE;
    for (i, chunk) in pages_from.chunks(PAGE).enumerate() {
        let mut page = [0u8; PAGE];
        page[..chunk.len()].copy_from_slice(chunk);
        if pick & 2 == 2 && first_page > 0 {
            let id = (first_page + i) as u64;
            page[24..32].copy_from_slice(&id.to_le_bytes());
            let crc = crc32c::crc32c(&page[4..]);
            page[..4].copy_from_slice(&crc.to_le_bytes());
        }
        file.extend_from_slice(&page);
    }
    let log = if pick & 4 == 4 {
        wal(epoch, wal_bytes)
    } else {
        wal_bytes.to_vec()
    };
    let (Some(pages), Some(wal_dev)) = (image::device(&file, PAGE), image::device(&log, PAGE))
    else {
        return;
    };
    let (Some(dwb), Some(spill), Some(c0), Some(c1)) = (
        image::device(&[], PAGE),
        image::device(&[], PAGE),
        image::device(&[], PAGE),
        image::device(&[], PAGE),
    ) else {
        return;
    };
    let devices = Devices {
        pages,
        dwb,
        wal: wal_dev,
        spill,
        carry: [c0, c1],
    };
    let again = Devices {
        pages: devices.pages.clone(),
        dwb: devices.dwb.clone(),
        wal: devices.wal.clone(),
        spill: devices.spill.clone(),
        carry: devices.carry.clone(),
    };
    let opts = Options::default().cache_bytes(256 << 10).sync(SyncMode::Never);
    let mut bt = if pick & 16 == 16 {
        BTreeOptions::with_shortcut(ShortcutOptions::default())
    } else {
        BTreeOptions::default()
    };
    bt.page_size = PAGE;
    bt.checkpoint_wal_bytes = 64 << 10;
    let Ok(db) = BTreeStore::open_on(devices, &opts, bt.clone()) else {
        return;
    };
    let victim = image::first_key(&db.scan_collect(KeyRange::all(), 64));
    image::check_durable(db, &victim, || BTreeStore::open_on(again, &opts, bt));
});
