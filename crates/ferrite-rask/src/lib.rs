//! # ferrite-rask: range-as-a-key indexing for block stores
//!
//! A cloud block store maps every logical block of a virtual disk to where
//! its data lives. Writes arrive as runs of consecutive blocks, so RASK
//! indexes the run itself: one entry for `[l, r]` instead of one per block.
//!
//! - [`Rask`]: the concurrent in-memory index — ART inner nodes over leaf
//!   anchors, log-structured leaves with ablation-based search, two-stage
//!   GC, range-conscious split, workload-aware merge and resplit.
//! - [`RangeValue`]: what is stored per range, with the user functions
//!   `divide` (DivideValue) and `merge` (MergeRange); [`PhysicalRun`] is the
//!   ready implementation for "a run of physical blocks in a data file".
//! - [`SegmentCache`]: the write-side I/O compaction window that reorders
//!   and joins consecutive writes before they reach the index.
//! - [`DurableRask`]: the index made persistent with a checksummed
//!   snapshot and an append-only redo log.

mod ablation;
mod art;
mod durable;
mod entry;
mod error;
mod gc;
mod index;
mod leaf;
mod range;
mod segment_cache;
mod slot;
mod split;
mod value;

pub use ablation::UnfoundList;
pub use durable::{DurableOptions, DurableRask, RaskDevices, RecoveryReport};
pub use entry::{Entry, Segment};
pub use error::{RaskError, Result};
pub use index::{Rask, RaskOptions, RaskStats};
pub use range::BlockRange;
pub use segment_cache::{CompactedWrite, SegmentCache};
pub use value::{PhysicalRun, RangeValue};
