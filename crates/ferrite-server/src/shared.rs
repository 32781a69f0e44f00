//! What every connection of a server shares: the store, the settings,
//! counters, clients, `SCAN` cursors and the shutdown flag.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::clients::Clients;
use crate::config::ServerConfig;
use crate::cursor::Cursors;
use crate::keyspace::Db;
use crate::stats::ServerStats;

pub struct Shared {
    pub config: ServerConfig,
    pub db: Db,
    pub stats: ServerStats,
    pub clients: Clients,
    pub cursors: Cursors,
    pub started: Instant,
    /// Set by `SHUTDOWN` and by signals.
    shutdown: Arc<AtomicBool>,
    next_client: AtomicU64,
}

impl Shared {
    pub fn new(config: ServerConfig, db: Db) -> Self {
        Self {
            config,
            db,
            stats: ServerStats::default(),
            clients: Clients::default(),
            cursors: Cursors::default(),
            started: Instant::now(),
            shutdown: Arc::new(AtomicBool::new(false)),
            next_client: AtomicU64::new(1),
        }
    }

    pub fn begin_shutdown(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
    }

    pub fn shutting_down(&self) -> bool {
        self.shutdown.load(Ordering::SeqCst)
    }

    /// The flag that stops the server, for signal handlers to set.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.shutdown.clone()
    }

    pub fn next_client_id(&self) -> u64 {
        self.next_client.fetch_add(1, Ordering::Relaxed)
    }
}
