//! Store identity decoding: never panics, and what decodes re-encodes to
//! the same bytes. The first byte picks the image. Its second bit set, the
//! image opens with the magic, the format version and a known engine's
//! name, and the rest of the input follows, so the fields after the name
//! see arbitrary bytes; clear, the rest of the input is the image. Its
//! first bit set, the image is sealed with its CRC-32C (spec:
//! `docs/format/store-identity.md`), so the checks behind the checksum are
//! reached.
#![no_main]

use ferrite_core::{EngineKind, StoreIdentity};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [pick, choice, rest @ ..] = data else {
        return;
    };
    let mut image = Vec::new();
    if pick & 2 == 2 {
        let name = EngineKind::ALL[*choice as usize % EngineKind::ALL.len()].name();
        image.extend_from_slice(b"FERRITE\0");
        image.extend_from_slice(&1u32.to_le_bytes());
        image.push(name.len() as u8);
        image.extend_from_slice(name.as_bytes());
    } else {
        image.push(*choice);
    }
    image.extend_from_slice(rest);
    if pick & 1 == 1 {
        image.extend_from_slice(&crc32c::crc32c(&image).to_le_bytes());
    }
    if let Ok(id) = StoreIdentity::decode(&image, std::path::Path::new("FERRITE")) {
        assert_eq!(id.encode(), image);
    }
});
