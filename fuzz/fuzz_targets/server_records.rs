//! The server data model's record decoders on arbitrary bytes (the first
//! byte picks one): never panic; a metadata record, an expiry-index key
//! or a dead-collection key that decodes re-encodes to exactly the bytes
//! it came from, so no two records decode alike.
#![no_main]

use ferrite_server::model::{layout, Kind, Meta};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, record)) = data.split_first() else {
        return;
    };
    match which % 4 {
        0 => {
            if let Ok(meta) = Meta::decode(record) {
                assert_eq!(meta.encode(), record);
            }
        }
        1 => {
            if let Some((at, slot, key)) = layout::decode_expiry(record) {
                assert_eq!(layout::expiry(at, slot, key), record);
            }
        }
        2 => {
            if let Some((slot, version)) = layout::decode_trash(record) {
                assert_eq!(layout::trash(slot, version), record);
            }
        }
        _ => {
            // Element keys: whatever their bytes, the accessors answer.
            let _ = layout::decode_score(record);
            let _ = layout::decode_item(record);
            for kind in [Kind::Hash, Kind::Set, Kind::ZSet] {
                let _ = layout::member_at(kind, record);
            }
        }
    }
});
