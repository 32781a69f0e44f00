//! SSTable and manifest decoders: data blocks, compressed block frames,
//! footers, index blocks, properties (with their packing), bloom filters
//! and manifest snapshots never panic on any
//! bytes, and a parsed block answers every slot. Blocks are also fed
//! sealed with a valid checksum, so the layout checks behind it see
//! arbitrary bytes too.
#![no_main]

use ferrite_io::AlignedBuf;
use ferrite_lsm::internals::Block;
use ferrite_lsm::internals::Bloom;
use ferrite_lsm::internals::{Footer, Properties};
use ferrite_lsm::internals::Index;
use ferrite_lsm::internals::ManifestState;
use ferrite_lsm::internals::{unpack, Packing};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    match selector % 8 {
        0 | 6 => {
            let mut page = rest.to_vec();
            page.resize(rest.len().div_ceil(4096).max(1) * 4096, 0);
            if selector % 7 == 6 {
                // The trailer's checksum covers everything before it.
                let at = page.len() - 4;
                let crc = crc32c::crc32c(&page[..at]);
                page[at..].copy_from_slice(&crc.to_le_bytes());
            }
            if let Ok(b) = Block::parse(AlignedBuf::from_slice(&page), &|| "fuzz".into()) {
                for i in 0..=b.len() {
                    let _ = b.entry(i);
                }
                let _ = b.lower_bound_in(b"key", 0, b.len());
                let _ = b.lower_bound_in(rest, 0, b.len());
            }
        }
        1 => {
            let _ = Footer::decode(rest);
        }
        2 => {
            let pages = rest.first().copied().unwrap_or(1) as u32;
            for kind in 0..3 {
                if let Some(Index::Learned(l)) =
                    Index::decode(kind, rest.get(1..).unwrap_or_default(), pages)
                {
                    let _ = l.model.window(u64::from_le_bytes([7; 8]));
                    let _ = l.locate(3);
                }
            }
        }
        3 => {
            let pages = rest.first().copied().unwrap_or(1) as u32;
            let _ = Properties::decode(rest.get(1..).unwrap_or_default(), pages);
            let _ = Packing::decode(rest.get(1..).unwrap_or_default(), pages);
        }
        7 => {
            // A frame's checksum covers its codec byte and payload, so the
            // decompressors see arbitrary payloads through a valid one too.
            let pages = rest.first().copied().unwrap_or(1) as u32 % 4;
            let mut frame = rest.get(1..).unwrap_or_default().to_vec();
            let _ = unpack(&frame, pages);
            if let Some(at) = frame.len().checked_sub(4).filter(|&a| a > 0) {
                let crc = crc32c::crc32c(&frame[..at]);
                frame[at..].copy_from_slice(&crc.to_le_bytes());
                let _ = unpack(&frame, pages);
            }
        }
        4 => {
            if let Some(b) = Bloom::decode(rest) {
                let _ = b.may_contain(Bloom::hash(b"key"));
            }
        }
        _ => {
            if let Some(m) = ManifestState::decode(rest) {
                assert_eq!(ManifestState::decode(&m.encode()), Some(m));
            }
        }
    }
});
