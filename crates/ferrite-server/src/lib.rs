//! # ferrite-server: every ferrite engine behind the Redis protocol
//!
//! A RESP2/RESP3 server over one ferrite [`ferrite::Store`], so Redis
//! clients, `redis-cli`, `redis-benchmark` and proxies such as twemproxy
//! use ferrite unchanged. It speaks Redis's string commands with Redis's
//! reply types and error texts, sixteen databases, `MULTI`/`EXEC` as one
//! atomic batch, pipelining, `SCAN`, `INFO` (with the engine's own
//! counters) and a clean shutdown; it depends on the `ferrite` facade
//! only.
//!
//! | module | owns |
//! |---|---|
//! | `request` | decoding requests (multibulk and inline) under limits; pure |
//! | `reply` | replies and their RESP2 / RESP3 encoding |
//! | `keyspace` | databases as key prefixes, the transaction lock, direct and transactional access |
//! | `command` | the command table and each command |
//! | `glob`, `cursor` | `KEYS`/`SCAN` patterns; `SCAN` cursors |
//! | `session` | a connection's state and its read–run–reply loop |
//! | `listener` | [`Server`]: accepting, a thread per client, stopping |
//! | `shared`, `clients`, `stats`, `config`, `stream` | what connections share |
//!
//! Atomicity: single-key read-modify-writes (`INCR`, `APPEND`, `SETNX`,
//! `GETSET`, `SET NX|XX|GET`) loop on the engine's compare-and-swap; a
//! multi-key check-and-write (`MSETNX`, multi-key `DEL`, `EXEC`) runs with
//! the keyspace to itself under a server-wide lock that single writes take
//! shared.

mod clients;
mod command;
mod config;
mod cursor;
mod glob;
mod keyspace;
mod listener;
mod reply;
mod request;
mod session;
mod shared;
mod stats;
mod stream;

pub use config::{store_sync_mode, ServerConfig};
pub use keyspace::MAX_USER_KEY;
pub use listener::{stop_on_signals, Server};
pub use request::{decode as decode_request, Limits, ProtocolError};

/// The Redis version whose commands and replies the server follows (what
/// `INFO`'s `redis_version` and `HELLO` report; `ferrite_version` is
/// this crate's).
pub const REDIS_VERSION: &str = "7.0.0";

/// Why a server could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Io(std::io::Error),
    #[error("the store failed: {0}")]
    Store(ferrite::Error),
}
