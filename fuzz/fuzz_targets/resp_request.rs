//! The server's request decoder on arbitrary bytes: never panics; a
//! command it decodes took no more bytes than it was given, obeys the
//! limits, and (multibulk) re-encodes to exactly the bytes it took.
#![no_main]

use ferrite_server::{decode_request, Limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_bulk: 512,
        max_args: 64,
        max_inline: 1024,
    };
    let mut at = 0;
    while let Ok(Some((args, used))) = decode_request(&data[at..], &limits) {
        assert!(used > 0 && at + used <= data.len());
        assert!(args.len() <= limits.max_args);
        assert!(args.iter().all(|a| a.len() <= limits.max_bulk));
        if data[at] == b'*' && !args.is_empty() {
            let mut again = format!("*{}\r\n", args.len()).into_bytes();
            for a in &args {
                again.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
                again.extend_from_slice(a);
                again.extend_from_slice(b"\r\n");
            }
            // Headers may be spelled other ways (`*02`); the content may not.
            let reparsed = decode_request(&again, &limits).unwrap().unwrap();
            assert_eq!(reparsed, (args, again.len()));
        }
        at += used;
    }
});
