//! The block map: logical block ranges to where their data lives in the
//! data log. The volume is written against this trait so the same volume
//! runs on RASK ([`crate::RaskMap`]) or on the per-block map a team would
//! write first ([`crate::PerBlockMap`]), side by side in one benchmark.
//!
//! Contract every implementation keeps:
//! - `lookup` answers ascending segments that tile the range exactly,
//!   `None` for unmapped blocks;
//! - `map` and `unmap` are logged before they return; the log reaches the
//!   device only in `sync` and `checkpoint`, which the volume calls after
//!   syncing the data they point at (so a durable entry never points at
//!   data that is not);
//! - reopening rebuilds the map as of the last completed `sync`.

use ferrite_rask::{BlockRange, PhysicalRun, Segment};

use crate::error::Result;

/// Which map a volume runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapKind {
    /// RASK: one entry per written range.
    Rask,
    /// A `BTreeMap` with one entry per block.
    PerBlock,
}

impl std::str::FromStr for MapKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "rask" => Ok(MapKind::Rask),
            "per-block" | "perblock" | "btreemap" => Ok(MapKind::PerBlock),
            _ => Err(format!("unknown map {s:?}: rask or per-block")),
        }
    }
}

impl std::fmt::Display for MapKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MapKind::Rask => "rask",
            MapKind::PerBlock => "per-block",
        })
    }
}

/// A durable map from logical block ranges to physical runs.
pub trait BlockMap: Send + Sync {
    fn kind(&self) -> MapKind;

    /// Appends the segments tiling `range` to `out`.
    fn lookup(&self, range: BlockRange, out: &mut Vec<Segment<PhysicalRun>>);

    /// Maps `range` to the run starting at `run` (logged, not synced).
    fn map(&self, range: BlockRange, run: PhysicalRun) -> Result<()>;

    /// Unmaps `range` (logged, not synced).
    fn unmap(&self, range: BlockRange) -> Result<()>;

    /// Makes every change so far durable.
    fn sync(&self) -> Result<()>;

    /// Where the log ends now: every change so far lies before it.
    fn log_position(&self) -> u64;

    /// Makes the changes before `position` durable, and writes none made
    /// after it (they may point at data not yet synced).
    fn sync_to(&self, position: u64) -> Result<()>;

    /// Writes the whole map so its log can be emptied (durable on return).
    fn checkpoint(&self) -> Result<()>;

    /// Bytes of log a reopen would replay.
    fn log_bytes(&self) -> u64;

    /// Every mapped run, ascending, disjoint.
    fn for_each(&self, f: &mut dyn FnMut(BlockRange, PhysicalRun));

    /// Entries the map holds now.
    fn entries(&self) -> u64;

    /// Refuses every later change and sync, and skips the closing sync:
    /// called when data the map may point at failed to reach the device.
    fn abandon(&self);

    /// Frees memory the map retired but still holds (RASK frees old
    /// leaves through epochs), so a heap measurement sees only what the
    /// map needs.
    fn settle(&self) {}

    /// Seconds the last open spent rebuilding the map.
    fn recovery_seconds(&self) -> f64;
}
