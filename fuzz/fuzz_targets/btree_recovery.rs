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

use ferrite_btree::{BTreeOptions, ShortcutOptions};
use libfuzzer_sys::fuzz_target;

mod image;
use image::batch;

const PAGE: usize = 1024;

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
        let m = image::btree_meta(file_bytes, pick & 8 == 8, PAGE);
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
    let bt = if pick & 16 == 16 {
        BTreeOptions::with_shortcut(ShortcutOptions::default())
    } else {
        BTreeOptions::default()
    };
    image::btree_recovers(PAGE, [&file, &[], &log, &[]], bt);
});
