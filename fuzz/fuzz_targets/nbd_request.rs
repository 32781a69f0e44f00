//! The NBD server's decoders on arbitrary bytes: a request header and an
//! `NBD_OPT_INFO`/`GO` body. Never panics; a decoded header re-encodes to
//! the bytes it came from, and a parsed info body accounts for every
//! byte of the option.
#![no_main]

use ferrite_volume::nbd::{decode_request, parse_info_request, REQUEST_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = decode_request(data) {
        assert!(data.len() >= REQUEST_LEN);
        assert_eq!(u16::from_be_bytes([data[4], data[5]]), r.flags);
        assert_eq!(u64::from_be_bytes(data[16..24].try_into().unwrap()), r.offset);
        assert_eq!(u32::from_be_bytes(data[24..28].try_into().unwrap()), r.length);
    }
    if let Ok(info) = parse_info_request(data) {
        assert_eq!(data.len(), 4 + info.name.len() + 2 + 2 * info.items.len());
    }
});
