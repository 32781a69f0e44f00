//! Block-trace parsers on arbitrary text: the first byte picks the format
//! (CloudPhysics, Tectonic, fio iolog). Parsing never panics; it yields
//! requests of at least one block that end inside the 64-bit block space,
//! or a typed error naming the line.
#![no_main]

use ferrite_trace::{parse_str, FORMATS};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let format = FORMATS[pick as usize % FORMATS.len()];
    let text = String::from_utf8_lossy(rest);
    if let Ok(reqs) = parse_str(format, &text) {
        for r in reqs {
            assert!(r.blocks >= 1, "{r:?}");
            assert!(r.start.checked_add(r.blocks).is_some(), "{r:?}");
        }
    }
});
