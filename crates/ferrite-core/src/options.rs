//! Options common to every engine, and the durability modes.
//!
//! Engines take an [`Options`] for what all of them share (durability,
//! memory budget, I/O mode) and keep their own option structs for the rest.

use std::time::Duration;

use crate::error::{Error, Result};

/// When an acknowledged write becomes durable. Named the same in every engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncMode {
    /// Every write is durable when its call returns (group commit may share
    /// one fsync among concurrent writers).
    Always,
    /// Writes are synced in groups at most this far apart; a crash may lose
    /// the writes of the last interval, never part of a batch.
    Batched(Duration),
    /// Writes become durable only at an explicit `sync`, `flush` or close.
    Never,
}

impl SyncMode {
    /// Parses `always`, `never`, or `batched:<ms>` (e.g. `batched:10`).
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "always" => Ok(SyncMode::Always),
            "never" => Ok(SyncMode::Never),
            _ => s
                .strip_prefix("batched:")
                .and_then(|ms| ms.parse::<u64>().ok())
                .map(|ms| SyncMode::Batched(Duration::from_millis(ms)))
                .ok_or_else(|| {
                    Error::InvalidOptions(format!(
                        "sync mode {s:?}: expected always, never or batched:<milliseconds>"
                    ))
                }),
        }
    }
}

impl std::fmt::Display for SyncMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SyncMode::Always => f.write_str("always"),
            SyncMode::Never => f.write_str("never"),
            SyncMode::Batched(d) => write!(f, "batched:{}", d.as_millis()),
        }
    }
}

/// What opening a store does with a write-ahead log that is damaged where
/// a later record proves it had been synced (`docs/format/wal.md`): the
/// writes logged after the damage were acknowledged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum WalRecovery {
    /// Refuse to open ([`Error::Corruption`]), changing nothing.
    #[default]
    Refuse,
    /// Replay the log up to the damage and cut it off there: every write
    /// logged after the damage is lost, and the store opens as it was
    /// just before it. For salvaging a store whose log cannot be restored
    /// from elsewhere.
    TruncateAtDamage,
}

/// Options every engine understands. Set them with the chained setters
/// (`Options::default().sync(SyncMode::Always)`); each default's reason
/// is on its field.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Options {
    pub sync: SyncMode,
    /// Memory the engine may use for caching pages, blocks or nodes, in
    /// bytes, including the metadata of those caches.
    pub cache_bytes: u64,
    /// Create the store if the directory holds none.
    pub create_if_missing: bool,
    /// Fail if the directory already holds a store.
    pub error_if_exists: bool,
    /// Bypass the OS page cache (O_DIRECT) so only the engine caches.
    pub direct_io: bool,
    /// What opening does with a damaged write-ahead log.
    pub wal_recovery: WalRecovery,
    /// Under `SyncMode::Always`, writers that arrive while another writes
    /// are written by one leader in a group (one write-lock acquisition,
    /// one log sync for all), as RocksDB does; off, each writer takes the
    /// lock and waits for its sync itself. Without a sync per write the
    /// group is not used: handing a write to a leader and waking its
    /// writer costs more than the lock it saves (docs/results/serve.md).
    pub write_group: bool,
}

crate::option_setters!(Options {
    sync: SyncMode,
    cache_bytes: u64,
    create_if_missing: bool,
    error_if_exists: bool,
    direct_io: bool,
    wal_recovery: WalRecovery,
    write_group: bool,
});

impl Default for Options {
    fn default() -> Self {
        Self {
            sync: SyncMode::Batched(Duration::from_millis(10)),
            cache_bytes: 64 << 20,
            create_if_missing: true,
            error_if_exists: false,
            direct_io: true,
            wal_recovery: WalRecovery::Refuse,
            write_group: true,
        }
    }
}

impl Options {
    /// Whether writers are grouped (see [`Options::write_group`]).
    pub fn groups_writes(&self) -> bool {
        self.write_group && self.sync == SyncMode::Always
    }

    /// Checks that the options can work together.
    pub fn validate(&self) -> Result<()> {
        if self.cache_bytes < 64 << 10 {
            return Err(Error::InvalidOptions(format!(
                "cache_bytes {} is below the 64 KiB minimum",
                self.cache_bytes
            )));
        }
        if let SyncMode::Batched(d) = self.sync {
            if d.is_zero() {
                return Err(Error::InvalidOptions(
                    "batched sync needs a non-zero interval; use SyncMode::Always".into(),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sync_mode_parses_and_prints() {
        for s in ["always", "never", "batched:25"] {
            assert_eq!(SyncMode::parse(s).unwrap().to_string(), s);
        }
        assert!(SyncMode::parse("sometimes").is_err());
        assert!(SyncMode::parse("batched:x").is_err());
    }

    #[test]
    fn validation() {
        assert!(Options::default().validate().is_ok());
        let tiny = Options::default().cache_bytes(10);
        assert!(tiny.validate().is_err());
        let zero = Options::default().sync(SyncMode::Batched(Duration::ZERO));
        assert!(zero.validate().is_err());
    }
}
