//! An NBD server for a volume: the fixed-newstyle handshake and the
//! transmission phase with simple replies.
//!
//! Written here rather than taken from a crate: the one NBD server crate
//! on crates.io (`nbd` 0.3) serves a `Read + Write + Seek` one request at
//! a time with no `NBD_OPT_GO`/`INFO` block-size constraints, FUA, TRIM
//! or WRITE_ZEROES, and a volume needs all of them and concurrent
//! requests per connection.
//!
//! Structured replies are refused (`NBD_REP_ERR_UNSUP`): every command
//! the server offers is answered correctly with simple replies, which
//! every client (qemu, libnbd, the kernel) accepts.

mod protocol;
mod server;

pub use protocol::{
    decode_request, parse_info_request, Command, InfoRequest, ProtocolError, Request, CMD_FLAG_FUA,
    IHAVEOPT, NBD_MAGIC, OPTION_REPLY_MAGIC, OPT_GO, REP_ACK, REQUEST_LEN, REQUEST_MAGIC,
    SIMPLE_REPLY_MAGIC,
};
pub use server::{stop_on_signals, NbdConfig, NbdServer};
