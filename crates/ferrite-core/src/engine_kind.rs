//! The names of ferrite's engines.
//!
//! Naming lives in the core so that a store directory can record which
//! engine made it and tools can ask for an engine by name, without the core
//! depending on any engine.

use std::str::FromStr;

use crate::error::{Error, Result};

/// Every engine design in ferrite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EngineKind {
    /// Disk B+tree with a buffer pool (the base of SHORTCUT and TurboIndex).
    Btree,
    /// B+tree with learned one-shot root-to-leaf path prediction.
    Shortcut,
    /// B+tree with a record-level insert buffer and a LIRS-style load detector.
    TurboIndex,
    /// B+tree for zoned storage (merged filter, delta buffers, zone flusher).
    Zkv,
    /// LSM-tree with learned SSTable indexes and shared-memtable partitions.
    Lsm,
    /// Range-as-a-key index for block address mapping.
    Rask,
}

impl EngineKind {
    /// The key-value engines: those a store directory can be opened with.
    pub const KEY_VALUE: [EngineKind; 5] = [
        EngineKind::Btree,
        EngineKind::Shortcut,
        EngineKind::TurboIndex,
        EngineKind::Zkv,
        EngineKind::Lsm,
    ];

    /// Every design, RASK (a block-range map with its own API) included.
    pub const ALL: [EngineKind; 6] = [
        EngineKind::Btree,
        EngineKind::Shortcut,
        EngineKind::TurboIndex,
        EngineKind::Zkv,
        EngineKind::Lsm,
        EngineKind::Rask,
    ];

    /// Whether the engine is a key-value store (all but RASK).
    pub fn is_key_value(self) -> bool {
        self != EngineKind::Rask
    }

    /// The stable name used on disk and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Btree => "btree",
            EngineKind::Shortcut => "shortcut",
            EngineKind::TurboIndex => "turboindex",
            EngineKind::Zkv => "zkv",
            EngineKind::Lsm => "lsm",
            EngineKind::Rask => "rask",
        }
    }

    /// One line on what the engine is.
    pub fn summary(self) -> &'static str {
        match self {
            EngineKind::Btree => "disk B+tree: slotted 4 KiB pages, buffer pool, WAL",
            EngineKind::Shortcut => {
                "B+tree whose learned models fetch the whole path in one parallel I/O round"
            }
            EngineKind::TurboIndex => {
                "B+tree with a record-level insert buffer and a LIRS-style page-load detector"
            }
            EngineKind::Zkv => {
                "B+tree for zoned storage: merged filter, adaptive delta buffers, zone flusher"
            }
            EngineKind::Lsm => "LSM-tree with learned SSTable index blocks and shared-memtable partitions (SwiftKV)",
            EngineKind::Rask => "in-memory range-as-a-key index for block-store address mapping",
        }
    }
}

impl std::fmt::Display for EngineKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for EngineKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        EngineKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = EngineKind::ALL.iter().map(|k| k.name()).collect();
                Error::InvalidOptions(format!(
                    "unknown engine {s:?}; engines are {}",
                    names.join(", ")
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for k in EngineKind::ALL {
            assert_eq!(k.name().parse::<EngineKind>().unwrap(), k);
        }
        assert!("rocks".parse::<EngineKind>().is_err());
    }
}
