//! # ferrite-server: Redis's data model over every ferrite engine
//!
//! A RESP2/RESP3 server over one ferrite [`ferrite::Store`], so Redis
//! clients, `redis-cli`, `redis-benchmark` and proxies such as twemproxy
//! use ferrite unchanged. It holds Redis's data model — strings with
//! expiry, hashes, sets, sorted sets and lists, sixteen databases — as
//! ordered records (the `model` module), with Redis's commands, reply
//! types and error texts; `MULTI`/`EXEC` with `WATCH`, blocking pops,
//! pub/sub and keyspace events, `SCAN`, `INFO`, `CONFIG` and a clean
//! shutdown. It depends on the `ferrite` facade only.
//!
//! | module | owns |
//! |---|---|
//! | `model` | the data model: records, transactions, expiry cycle, sweeper, `WATCH` |
//! | `request` | decoding requests (multibulk and inline) under limits; pure |
//! | `reply` | replies and their RESP2 / RESP3 encoding |
//! | `command` | the command table and each command family |
//! | `executor` | grouping commands into transactions, `EXEC`, serving blocked clients |
//! | `event_loop` | an I/O thread over many connections: read, run grouped, sync, answer, deliver |
//! | `conn` | one connection in a loop: buffers, timers, closing |
//! | `session` | a connection's state |
//! | `mailbox` | what other connections send a connection, and its waker |
//! | `pubsub`, `blocked` | channel subscriptions; clients blocked on keys |
//! | `background` | the expiry cycle's and the sweeper's threads |
//! | `replication` | replicas: the stream of changes, full and partial syncs, `WAIT` |
//! | `listener` | [`Server`]: accepting into the loops, the open-file limit, stopping |
//! | `settings` | `CONFIG GET`/`SET` |
//! | `shared`, `clients`, `stats`, `config`, `cursor`, `glob` | what connections share |
//!
//! Atomicity: every command runs in a transaction of the model holding
//! the keyspace lock (exclusively when it writes), and its writes reach
//! the store as one atomic batch; the key commands an event loop receives
//! in one turn, from all its connections, share one transaction, and
//! `EXEC` runs its queue as one.

mod background;
mod blocked;
mod clients;
mod command;
mod config;
mod conn;
mod cursor;
mod event_loop;
mod executor;
mod glob;
mod listener;
mod mailbox;
pub mod model;
mod pubsub;
mod read_route;
mod readers;
pub mod replication;
mod reply;
mod request;
mod script;
mod session;
mod settings;
mod shared;
mod stats;

pub use config::{store_sync_mode, ServerConfig};
pub use listener::{stop_on_signals, Server};
pub use model::MAX_USER_KEY;
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
    #[error("the store's records are not the data model's: {0}")]
    Model(model::ModelError),
}
