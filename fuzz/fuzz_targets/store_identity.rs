//! Store identity decoding: never panics, and what decodes re-encodes to
//! the same bytes.
#![no_main]

use ferrite_core::StoreIdentity;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(id) = StoreIdentity::decode(data, std::path::Path::new("FERRITE")) {
        assert_eq!(id.encode(), data);
    }
});
