//! Block-range indexes behind one interface, for the RASK experiment: RASK
//! itself and the baselines a block store could use instead (paper §3.4,
//! §7.1). Every index stores the same value type ([`PhysicalRun`]) and
//! answers a lookup with segments that tile the asked range, `None` for
//! unmapped blocks, so one oracle checks them all.
//!
//! Every index can be shared between threads, as a block server's index
//! must be: RASK and congee synchronise themselves; every other baseline
//! is a single-threaded structure ([`SerialIndex`]) behind one
//! `parking_lot::Mutex`, the way a team would first share it.
//!
//! | name | what it is |
//! |---|---|
//! | `rask` | `ferrite_rask::Rask` |
//! | `btreemap-block` | `BTreeMap<block, run>`, one entry per block |
//! | `art-block` | the `congee` crate's ART-OLC with one 8-byte key per block (synchronises itself) |
//! | `btree-lazy` | ranges keyed by left bound + sequence number; writes drop only fully covered ranges, reads pick the newest per block |
//! | `btree-eager` | non-overlapping ranges; writes trim or split what they overlap |
//! | `rangemap` | the `rangemap` crate's `RangeInclusiveMap` (eager, coalescing) |
//! | `interval-tree` | the `iset` crate's interval tree; keeps every written range, newest wins |
//! | `origin` | an EBS-index-like LSM: a page-table memtable turned into sorted run arrays at 128K blocks |

mod art_block;
mod btree_block;
mod eager;
mod interval_tree;
mod lazy;
mod origin;
mod rangemap_index;
mod rask_index;
mod replay;
mod segments;
pub mod tail;

pub use ferrite_trace::{compact_writes, ops_from_trace, RangeOp};
pub use rask_index::RaskCounters;
pub use replay::{synthetic_ops, verify, ReplayResult, Replayer, WARMUP_OPS};

use ferrite_rask::{BlockRange, PhysicalRun, Segment};

/// A block-range index under test, shareable between threads.
pub trait RangeIndex: Send + Sync {
    /// Maps `r` to the run `v` (block `r.l() + i` at `v.offset(i)`).
    fn put(&self, r: BlockRange, v: PhysicalRun);
    fn delete(&self, r: BlockRange);
    /// Appends segments tiling `r` to `out`.
    fn get(&self, r: BlockRange, out: &mut Vec<Segment<PhysicalRun>>);
    /// RASK's counters after `writes` puts and deletes (the baselines
    /// keep none).
    fn counters(&self, writes: u64) -> Option<RaskCounters> {
        let _ = writes;
        None
    }
    /// Frees what the index has retired but not yet released (RASK's
    /// epoch garbage), so the memory measured after a replay is what the
    /// index holds, and nothing is released during the next replay's
    /// measurement.
    fn settle(&self) {}
}

/// A single-threaded baseline structure.
pub trait SerialIndex: Send {
    fn put(&mut self, r: BlockRange, v: PhysicalRun);
    fn delete(&mut self, r: BlockRange);
    fn get(&mut self, r: BlockRange, out: &mut Vec<Segment<PhysicalRun>>);
}

/// A serial baseline behind a mutex.
#[derive(Default)]
pub struct Locked<I>(pub(crate) parking_lot::Mutex<I>);

impl<I: SerialIndex> RangeIndex for Locked<I> {
    fn put(&self, r: BlockRange, v: PhysicalRun) {
        self.0.lock().put(r, v);
    }
    fn delete(&self, r: BlockRange) {
        self.0.lock().delete(r);
    }
    fn get(&self, r: BlockRange, out: &mut Vec<Segment<PhysicalRun>>) {
        self.0.lock().get(r, out);
    }
}

/// Every index the experiment compares, by name.
pub const INDEXES: &[&str] = &[
    "rask",
    "btreemap-block",
    "art-block",
    "btree-lazy",
    "btree-eager",
    "rangemap",
    "interval-tree",
    "origin",
];

/// A fresh, empty index.
///
/// `rask-<n>` is RASK with `n`-entry leaves (the capacity sweep); `rask`
/// has the paper's 16.
pub fn make(name: &str) -> Option<Box<dyn RangeIndex>> {
    if let Some(cap) = name.strip_prefix("rask-") {
        return Some(Box::new(rask_index::RaskIndex::with_leaf_capacity(
            cap.parse().ok()?,
        )?));
    }
    Some(match name {
        "rask" => Box::new(rask_index::RaskIndex::default()),
        "btreemap-block" => Box::new(Locked::<btree_block::BTreeBlock>::default()),
        "art-block" => Box::new(art_block::ArtBlock::default()),
        "btree-lazy" => Box::new(Locked::<lazy::LazyBTree>::default()),
        "btree-eager" => Box::new(Locked::<eager::EagerBTree>::default()),
        "rangemap" => Box::new(Locked::<rangemap_index::RangeMapIndex>::default()),
        "interval-tree" => Box::new(Locked::<interval_tree::IntervalTree>::default()),
        "origin" => Box::new(Locked::<origin::Origin>::default()),
        _ => return None,
    })
}

/// True for the indexes keyed by range (everything but the per-block ones
/// and RASK itself).
pub fn is_range_baseline(name: &str) -> bool {
    matches!(
        name,
        "btree-lazy" | "btree-eager" | "rangemap" | "interval-tree" | "origin"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_index_agrees_with_the_oracle_on_a_random_stream() {
        let ops = synthetic_ops(20_000, 5, 4096, 0.7, 0.05);
        for name in INDEXES {
            let ix = make(name).unwrap_or_else(|| panic!("{name}"));
            let checked = verify(ix.as_ref(), &ops).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(checked > 1000, "{name}");
        }
    }
}
