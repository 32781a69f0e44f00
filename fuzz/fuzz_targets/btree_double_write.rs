//! B+tree recovery through the double-write file from arbitrary bytes:
//! the input becomes a double-write file, and the spill file it names,
//! over an empty page file. Opening never panics: it finishes the
//! checkpoint the file describes, or ignores a file that is not whole, and
//! yields a store that answers reads, takes a write, checkpoints and
//! verifies, or a typed error. A store that did all of that reopens with
//! the same contents.
//!
//! The first byte picks the images. Its first bit set, the double-write
//! file is built with valid checksums, so recovery reads past its header:
//! format 2 (a directory of ids and places, a page either held in the
//! file or named at an offset of the spill file) or, with the second bit
//! set, format 1 (every page held); the ids, places, images and meta page
//! are drawn from the input. Clear, the file is the input as it is. The
//! third bit seals every image as the page its entry names (valid
//! checksum and id), so recovery writes them and the tree's walk sees
//! arbitrary cells; the fourth bit leaves the meta page's fields raw
//! instead of small.
#![no_main]

use ferrite_btree::BTreeOptions;
use libfuzzer_sys::fuzz_target;

mod image;

const PAGE: usize = 1024;
/// A directory entry's place for an image held in the file itself.
const HERE: u64 = u64::MAX;

/// A page image from `bytes`, sealed as page `id` if `seal`.
fn image_of(bytes: &[u8], id: u64, seal: bool) -> Vec<u8> {
    let mut page = vec![0u8; PAGE];
    let n = bytes.len().min(PAGE);
    page[..n].copy_from_slice(&bytes[..n]);
    if seal {
        page[24..32].copy_from_slice(&id.to_le_bytes());
        let crc = crc32c::crc32c(&page[4..]);
        page[..4].copy_from_slice(&crc.to_le_bytes());
    }
    page
}

/// The double-write file and spill file a checkpoint of input-drawn pages
/// leaves, with valid checksums.
fn built(count: u8, rest: &[u8], v1: bool, seal: bool, raw: bool) -> (Vec<u8>, Vec<u8>) {
    // Newer than any checkpoint a page file holds, as a checkpoint's is.
    let mut m = image::btree_meta(rest, raw, PAGE);
    m.epoch = m.epoch.saturating_add(1);
    let mut meta_page = vec![0u8; PAGE];
    m.encode(&mut meta_page);
    let body = rest.get(48..).unwrap_or_default();
    let (entries, images) = body.split_at((count as usize % 32).min(body.len()));
    let mut pieces = images.chunks(PAGE / 4);
    let mut id = 1u64;
    let mut dir: Vec<(u64, u64, Vec<u8>)> = Vec::new();
    let mut spill = Vec::new();
    for &e in entries {
        id += 1 + u64::from(e & 3);
        let image = image_of(pieces.next().unwrap_or_default(), id, seal);
        let place = if e & 0x80 == 0x80 && !v1 {
            // At a slot of the spill file; bit 6 set moves the offset off
            // the page boundary, a place no checkpoint names.
            let slot = u64::from((e >> 2) & 0x1f);
            let at = slot * PAGE as u64 + u64::from(e & 0x40) * 1000;
            let end = (slot as usize + 1) * PAGE;
            if spill.len() < end {
                spill.resize(end, 0);
            }
            spill[slot as usize * PAGE..end].copy_from_slice(&image);
            at
        } else {
            HERE
        };
        dir.push((id, place, image));
    }
    let entry = if v1 { 8 } else { 16 };
    let dir_len = (dir.len() * entry).div_ceil(PAGE) * PAGE;
    let mut d = vec![0u8; dir_len];
    for (i, (id, place, _)) in dir.iter().enumerate() {
        d[i * entry..i * entry + 8].copy_from_slice(&id.to_le_bytes());
        if !v1 {
            d[i * 16 + 8..i * 16 + 16].copy_from_slice(&place.to_le_bytes());
        }
    }
    let mut crc = crc32c::crc32c(&meta_page);
    if !v1 {
        crc = crc32c::crc32c_append(crc, &d[..dir.len() * 16]);
    }
    let mut held = Vec::new();
    for (id, place, image) in &dir {
        if *place == HERE {
            if v1 {
                crc = crc32c::crc32c_append(crc, &id.to_le_bytes());
            }
            crc = crc32c::crc32c_append(crc, image);
            held.extend_from_slice(image);
        }
    }
    let mut h = Vec::new();
    h.extend_from_slice(if v1 { b"FBTDWB01" } else { b"FBTDWB02" });
    h.extend_from_slice(&m.epoch.to_le_bytes());
    h.extend_from_slice(&(dir.len() as u64).to_le_bytes());
    h.extend_from_slice(&crc.to_le_bytes());
    let hcrc = crc32c::crc32c(&h);
    h.extend_from_slice(&hcrc.to_le_bytes());
    let mut file = vec![0u8; PAGE];
    file[..h.len()].copy_from_slice(&h);
    file.extend_from_slice(&d);
    file.extend_from_slice(&held);
    file.extend_from_slice(&meta_page);
    (file, spill)
}

fuzz_target!(|data: &[u8]| {
    let [pick, count, rest @ ..] = data else {
        return;
    };
    let (dwb_bytes, spill_bytes) = if pick & 1 == 1 {
        built(*count, rest, pick & 2 == 2, pick & 4 == 4, pick & 8 == 8)
    } else {
        let cut = (*count as usize * 16).min(rest.len());
        (rest[cut..].to_vec(), rest[..cut].to_vec())
    };
    image::btree_recovers(
        PAGE,
        [&[], &dwb_bytes, &[], &spill_bytes],
        BTreeOptions::default(),
    );
});
