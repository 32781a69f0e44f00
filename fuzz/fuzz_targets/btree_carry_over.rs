//! The B+tree's carry-over payload from arbitrary bytes: decoding never
//! panics; it yields batches or a typed error, and what it yields encodes
//! back to batches that decode the same.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(batches) = ferrite_btree::internals::decode_carry_over(data) {
        let mut again = Vec::new();
        again.extend_from_slice(&(batches.len() as u32).to_le_bytes());
        for b in &batches {
            let mut enc = Vec::new();
            b.encode(&mut enc);
            again.extend_from_slice(&(enc.len() as u32).to_le_bytes());
            again.extend_from_slice(&enc);
        }
        let round = ferrite_btree::internals::decode_carry_over(&again).expect("re-encoded payload decodes");
        assert_eq!(round, batches);
    }
});
