//! The server's own counters, for `INFO stats`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[derive(Default)]
pub struct ServerStats {
    connections: AtomicU64,
    rejected: AtomicU64,
    commands: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl ServerStats {
    pub fn count_connection(&self) {
        self.connections.fetch_add(1, Relaxed);
    }

    pub fn count_rejected(&self) {
        self.rejected.fetch_add(1, Relaxed);
    }

    pub fn count_command(&self) {
        self.commands.fetch_add(1, Relaxed);
    }

    /// A read of one key that found it or not.
    pub fn count_lookup(&self, found: bool) {
        if found {
            self.hits.fetch_add(1, Relaxed);
        } else {
            self.misses.fetch_add(1, Relaxed);
        }
    }

    pub fn connections(&self) -> u64 {
        self.connections.load(Relaxed)
    }

    pub fn rejected(&self) -> u64 {
        self.rejected.load(Relaxed)
    }

    pub fn commands(&self) -> u64 {
        self.commands.load(Relaxed)
    }

    pub fn hits(&self) -> u64 {
        self.hits.load(Relaxed)
    }

    pub fn misses(&self) -> u64 {
        self.misses.load(Relaxed)
    }

    /// `CONFIG RESETSTAT`.
    pub fn reset(&self) {
        for c in [
            &self.connections,
            &self.rejected,
            &self.commands,
            &self.hits,
            &self.misses,
        ] {
            c.store(0, Relaxed);
        }
    }
}
