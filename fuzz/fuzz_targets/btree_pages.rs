//! The B+tree's on-disk decoders from arbitrary bytes: a page image, a
//! meta page and a free-list payload. Decoding never panics; a page that
//! passes its checks has its keys in order and inside its fences; a meta
//! page or free list that decodes encodes back to bytes that decode the
//! same; the page's own search (heads and all) finds every key where the
//! decoded keys put it, and every key between them where it belongs. Page
//! images are also fed sealed with a valid checksum, so the layout checks
//! behind it see arbitrary bytes too.
#![no_main]

use ferrite_btree::internals::{DecodedCell, DecodedPage, FreeSpace, MetaPage};
use libfuzzer_sys::fuzz_target;

fn key_of(c: &DecodedCell) -> &[u8] {
    match c {
        DecodedCell::Pair { key, .. }
        | DecodedCell::OutOfLine { key, .. }
        | DecodedCell::Separator { key, .. } => key,
    }
}

fn page(p: &DecodedPage) {
    let keys: Vec<&[u8]> = p.cells.iter().map(key_of).collect();
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "keys out of order");
    if let (Some(first), Some(low)) = (keys.first(), &p.low) {
        assert!(*first >= low.as_slice(), "a key below the low fence");
    }
    if let (Some(last), Some(high)) = (keys.last(), &p.high) {
        assert!(*last < high.as_slice(), "a key at or above the high fence");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    match sel % 4 {
        0 | 3 => {
            // A page of 1 KiB, its id taken from the image itself so the
            // misdirected-write check does not reject everything.
            let mut b = vec![0u8; 1024];
            let n = rest.len().min(b.len());
            b[..n].copy_from_slice(&rest[..n]);
            if sel % 4 == 3 {
                // The checksum leads the page and covers the rest of it.
                let crc = crc32c::crc32c(&b[4..]);
                b[..4].copy_from_slice(&crc.to_le_bytes());
            }
            let id = u64::from_le_bytes(b[24..32].try_into().unwrap_or_default());
            if let Ok(p) = ferrite_btree::internals::decode_page(&b, id) {
                page(&p);
                let keys: Vec<&[u8]> = p.cells.iter().map(key_of).collect();
                for k in &keys {
                    // The key itself, and keys just below and above it.
                    let mut probes = vec![k.to_vec(), [*k, &[0][..]].concat()];
                    if let Some((last, head)) = k.split_last() {
                        probes.push([head, &[last.wrapping_sub(1)][..]].concat());
                        probes.push(head.to_vec());
                    }
                    for q in probes {
                        assert_eq!(
                            ferrite_btree::internals::search_page(&b, &q),
                            keys.binary_search(&q.as_slice()),
                            "search for {q:?}"
                        );
                    }
                }
            }
        }
        1 => {
            if let Some(m) = MetaPage::decode(rest) {
                let mut again = vec![0u8; 4096];
                m.encode(&mut again);
                assert_eq!(MetaPage::decode(&again), Some(m));
            }
        }
        _ => {
            let Some((count, payload)) = rest.split_first_chunk::<8>() else {
                return;
            };
            let page_count = u64::from_le_bytes(*count) % (1 << 40);
            if let Ok(set) = FreeSpace::decode(payload, page_count) {
                assert_eq!(FreeSpace::decode(&set.encode(), page_count), Ok(set));
            }
        }
    }
});
