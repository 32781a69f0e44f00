//! What a server is started with.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use ferrite::SyncMode;

use crate::request::Limits;

#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServerConfig {
    /// TCP address to listen on (port 0 picks a free one).
    pub listen: SocketAddr,
    /// A Unix socket to listen on as well.
    pub unix: Option<PathBuf>,
    /// The durability promised to clients, as `INFO` and `CONFIG GET
    /// appendfsync` report it. Open the store with
    /// [`crate::store_sync_mode`] of it: under `Always` the server syncs
    /// once per pipeline before replying, not the store once per write.
    pub sync: SyncMode,
    /// The store's cache budget, reported as `maxmemory`.
    pub cache_bytes: u64,
    /// Connections past this are refused with Redis's error.
    pub max_clients: usize,
    /// Event loops serving the connections (at least one).
    pub io_threads: usize,
    /// Threads that run key reads while they go to the device
    /// ([`crate::readers`]); 0 keeps every read on its loop.
    pub readers: usize,
    pub limits: Limits,
    /// Clients must `AUTH` with this first.
    pub requirepass: Option<String>,
    /// A client that leaves a request half sent this long is disconnected.
    pub client_timeout: Duration,
    /// Start as a replica of this master (`--replicaof HOST PORT`); a
    /// store that was a replica when it stopped follows its master again
    /// without it.
    pub replicaof: Option<(String, u16)>,
}

impl Default for ServerConfig {
    /// Loopback port 6380 (next to Redis's 6379), 10 000 clients as Redis
    /// allows, an event loop per core and four readers per core (enough
    /// device reads in flight for an SSD's queue), half a minute for a
    /// stalled request.
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 6380)),
            unix: None,
            sync: SyncMode::Batched(Duration::from_millis(10)),
            cache_bytes: 64 << 20,
            max_clients: 10_000,
            io_threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            readers: 4 * std::thread::available_parallelism().map_or(2, |n| n.get()),
            limits: Limits::default(),
            requirepass: None,
            client_timeout: Duration::from_secs(30),
            replicaof: None,
        }
    }
}

/// The mode to open the store with for a server promising `promised`:
/// `Always` becomes `Never`, because the server syncs each pipeline that
/// wrote before replying (one sync for many writes); the others are the
/// store's own.
pub fn store_sync_mode(promised: SyncMode) -> SyncMode {
    match promised {
        SyncMode::Always => SyncMode::Never,
        other => other,
    }
}
