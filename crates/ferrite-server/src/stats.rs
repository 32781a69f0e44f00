//! The server's own counters, for `INFO stats`, `INFO commandstats` and
//! `INFO errorstats`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use parking_lot::Mutex;

/// One command's counters.
#[derive(Default)]
struct CommandCounters {
    calls: AtomicU64,
    usec: AtomicU64,
    rejected: AtomicU64,
    failed: AtomicU64,
}

/// A copy of one command's counters.
#[derive(Debug, Clone, Copy, Default)]
pub struct CommandCounts {
    pub calls: u64,
    pub usec: u64,
    pub rejected: u64,
    pub failed: u64,
}

pub struct ServerStats {
    connections: AtomicU64,
    rejected: AtomicU64,
    commands: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    errors: AtomicU64,
    /// Commands that changed data since the last `SAVE`.
    dirty: AtomicU64,
    /// Per command, in the table's order.
    per_command: Vec<CommandCounters>,
    /// Error replies by their code (`ERR`, `WRONGTYPE`, ...).
    by_error: Mutex<BTreeMap<String, u64>>,
}

/// Counters kept per command: one per place in the command table, which
/// sits above the counters and is not imported by them (a test of the
/// table checks it fits).
pub const COMMAND_SLOTS: usize = 512;

impl Default for ServerStats {
    fn default() -> Self {
        Self {
            connections: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            commands: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            dirty: AtomicU64::new(0),
            per_command: (0..COMMAND_SLOTS)
                .map(|_| CommandCounters::default())
                .collect(),
            by_error: Mutex::new(BTreeMap::new()),
        }
    }
}

impl ServerStats {
    pub fn count_connection(&self) {
        self.connections.fetch_add(1, Relaxed);
    }

    pub fn count_rejected(&self) {
        self.rejected.fetch_add(1, Relaxed);
    }

    /// A command of the table (its index) ran for `usec`, and failed or
    /// not.
    pub fn count_call(&self, index: usize, usec: u64, failed: bool) {
        self.commands.fetch_add(1, Relaxed);
        if let Some(c) = self.per_command.get(index) {
            c.calls.fetch_add(1, Relaxed);
            c.usec.fetch_add(usec, Relaxed);
            if failed {
                c.failed.fetch_add(1, Relaxed);
            }
        }
    }

    /// A command of the table refused before it ran (arity, context).
    pub fn count_refused(&self, index: Option<usize>) {
        if let Some(c) = index.and_then(|i| self.per_command.get(i)) {
            c.rejected.fetch_add(1, Relaxed);
        }
    }

    /// An error reply with `text` (its first word is the code).
    pub fn count_error(&self, text: &str) {
        self.errors.fetch_add(1, Relaxed);
        let code = text.split(' ').next().unwrap_or("ERR").to_string();
        *self.by_error.lock().entry(code).or_insert(0) += 1;
    }

    /// A command changed data.
    pub fn count_dirty(&self) {
        self.dirty.fetch_add(1, Relaxed);
    }

    /// Changes since the last `SAVE` (`rdb_changes_since_last_save`).
    pub fn dirty(&self) -> u64 {
        self.dirty.load(Relaxed)
    }

    /// `SAVE` made everything durable: a new count starts.
    pub fn saved(&self, changes_seen: u64) {
        self.dirty
            .fetch_sub(changes_seen.min(self.dirty()), Relaxed);
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

    pub fn errors(&self) -> u64 {
        self.errors.load(Relaxed)
    }

    /// Commands that ran or were refused, by their index in the
    /// command table.
    pub fn command_stats(&self) -> Vec<(usize, CommandCounts)> {
        self.per_command
            .iter()
            .map(|c| CommandCounts {
                calls: c.calls.load(Relaxed),
                usec: c.usec.load(Relaxed),
                rejected: c.rejected.load(Relaxed),
                failed: c.failed.load(Relaxed),
            })
            .enumerate()
            .filter(|(_, c)| c.calls > 0 || c.rejected > 0)
            .collect()
    }

    pub fn error_stats(&self) -> Vec<(String, u64)> {
        self.by_error
            .lock()
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }

    /// `CONFIG RESETSTAT`.
    pub fn reset(&self) {
        for c in [
            &self.connections,
            &self.rejected,
            &self.commands,
            &self.hits,
            &self.misses,
            &self.errors,
        ] {
            c.store(0, Relaxed);
        }
        for c in &self.per_command {
            for x in [&c.calls, &c.usec, &c.rejected, &c.failed] {
                x.store(0, Relaxed);
            }
        }
        self.by_error.lock().clear();
    }
}
