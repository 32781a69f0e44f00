//! The data model's counters, for `INFO`: keys expired, and the
//! sweeper's and the expiry cycle's work.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[derive(Default)]
pub struct ModelStats {
    expired_keys: AtomicU64,
    expire_cycles: AtomicU64,
    swept_elements: AtomicU64,
    swept_collections: AtomicU64,
    sweep_passes: AtomicU64,
    /// Dead collections waiting for the sweeper, as last seen.
    sweep_backlog: AtomicU64,
}

/// A copy of the counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ModelCounts {
    pub expired_keys: u64,
    pub expire_cycles: u64,
    pub swept_elements: u64,
    pub swept_collections: u64,
    pub sweep_passes: u64,
    pub sweep_backlog: u64,
}

impl ModelStats {
    pub fn add_expired(&self, n: u64) {
        if n > 0 {
            self.expired_keys.fetch_add(n, Relaxed);
        }
    }

    pub fn count_expire_cycle(&self) {
        self.expire_cycles.fetch_add(1, Relaxed);
    }

    pub fn count_sweep(&self, elements: u64, collections: u64, backlog: u64) {
        self.sweep_passes.fetch_add(1, Relaxed);
        self.swept_elements.fetch_add(elements, Relaxed);
        self.swept_collections.fetch_add(collections, Relaxed);
        self.sweep_backlog.store(backlog, Relaxed);
    }

    pub fn counts(&self) -> ModelCounts {
        ModelCounts {
            expired_keys: self.expired_keys.load(Relaxed),
            expire_cycles: self.expire_cycles.load(Relaxed),
            swept_elements: self.swept_elements.load(Relaxed),
            swept_collections: self.swept_collections.load(Relaxed),
            sweep_passes: self.sweep_passes.load(Relaxed),
            sweep_backlog: self.sweep_backlog.load(Relaxed),
        }
    }

    /// `CONFIG RESETSTAT`: the counters start again (the backlog is a
    /// reading, not a count).
    pub fn reset(&self) {
        for c in [
            &self.expired_keys,
            &self.expire_cycles,
            &self.swept_elements,
            &self.swept_collections,
            &self.sweep_passes,
        ] {
            c.store(0, Relaxed);
        }
    }
}
