//! The replication stream's decoders on arbitrary bytes — frames, a
//! copy's records, a change's payload — never panic; a frame and a
//! copy's records re-encode to the bytes they came from, a change to one
//! that decodes to it again.
#![no_main]

use ferrite_server::model::change;
use ferrite_server::replication::frame::{self, Decoder, Kind};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut d = Decoder::default();
    d.feed(data);
    while let Ok(Some((kind, f))) = d.next_frame() {
        let payload = &f[frame::HEADER..];
        assert_eq!(frame::encode(kind, payload), f);
        match kind {
            Kind::Change => {
                if let Ok(c) = change::decode(payload) {
                    assert_eq!(change::decode(&c.encode()).unwrap(), c);
                }
            }
            Kind::Records => {
                if let Ok(pairs) = frame::read_records(payload) {
                    assert_eq!(frame::records(&pairs), payload);
                }
            }
            _ => {}
        }
    }
    if let Ok(c) = change::decode(data) {
        let again = change::decode(&c.encode()).unwrap();
        assert_eq!(again, c);
    }
});
