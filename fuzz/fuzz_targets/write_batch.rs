//! Write-batch decoding: never panics, and what decodes re-encodes to the
//! same bytes.
#![no_main]

use ferrite_core::WriteBatch;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(batch) = WriteBatch::decode(data) {
        let mut again = Vec::new();
        batch.encode(&mut again);
        assert_eq!(again, data);
    }
});
