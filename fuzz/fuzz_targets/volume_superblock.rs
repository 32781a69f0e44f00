//! A volume's superblock decoder on arbitrary bytes: never panics, and a
//! superblock it accepts re-encodes to the same bytes.
#![no_main]

use ferrite_volume::Superblock;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(sb) = Superblock::decode(data) {
        let again = sb.encode();
        assert_eq!(&data[..again.len()], &again[..]);
    }
});
