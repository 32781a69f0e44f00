//! Recorded block-map operations (`ferrite volume serve
//! --record-map-ops`) on arbitrary bytes, with and without the header.
//! Decoding never panics; what it accepts re-encodes to the bytes it came
//! from (less a torn tail), and every put's run fits its range.
#![no_main]

use std::path::Path;

use ferrite_rask::RangeValue;
use ferrite_trace::map_ops::{decode, encode, header};
use ferrite_trace::RangeOp;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = decode(data, Path::new("<fuzz>"));
    let mut bytes = header();
    bytes.extend_from_slice(data);
    if let Ok(rec) = decode(&bytes, Path::new("<fuzz>")) {
        let mut again = header();
        for op in &rec.ops {
            if let RangeOp::Put(r, run) = op {
                assert!(run.check(*r).is_none(), "{op:?}");
            }
            encode(op, &mut again);
        }
        assert_eq!(again.len() + rec.torn_tail, bytes.len());
        assert_eq!(&again[..], &bytes[..again.len()]);
    }
});
