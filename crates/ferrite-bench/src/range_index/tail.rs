//! Where RASK's tail latency comes from: every operation of a replay
//! classed by the structural work it did, and each class's latencies.
//!
//! An operation's class is read from RASK's event counters before and
//! after it (outside the timed span), so the index runs its normal code:
//! nothing is instrumented inside it. A write that crosses leaves can do
//! several kinds of work; it takes the class of the costliest, in the
//! order of [`OpClass`]. The profile also says how the slowest operations
//! divide between classes: each class's share of the operations at or
//! above the whole replay's 99th percentile.

use std::time::Instant;

use ferrite_rask::{PhysicalRun, Rask, RaskStats, Segment};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::{RangeOp, WARMUP_OPS};

/// What an operation did, costliest structural work first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum OpClass {
    /// Joined a fragmented leaf into its left neighbour.
    Merge,
    /// Re-cut a fragmented leaf and its left neighbour into new leaves.
    Resplit,
    /// Split a full leaf (after collecting it), range-consciously.
    Split,
    /// Split a full leaf being filled in address order: the newest entry
    /// starts a new leaf and the old log is kept.
    AppendSplit,
    /// Collected a full leaf with normal GC (after the lightweight stage).
    NormalGc,
    /// Collected a full leaf with lightweight GC alone.
    LightweightGc,
    /// Found a full leaf and rebuilt it without collecting or splitting.
    FullLeaf,
    /// A put or delete that appended to its leaves' logs (growing a log
    /// allocated below the leaf capacity counts here).
    Write,
    /// A lookup.
    Get,
}

impl OpClass {
    /// Every class, in declaration order (a class's discriminant is its
    /// place here).
    pub const ALL: [OpClass; 9] = [
        OpClass::Merge,
        OpClass::Resplit,
        OpClass::Split,
        OpClass::AppendSplit,
        OpClass::NormalGc,
        OpClass::LightweightGc,
        OpClass::FullLeaf,
        OpClass::Write,
        OpClass::Get,
    ];

    pub fn name(self) -> &'static str {
        match self {
            OpClass::Merge => "merge",
            OpClass::Resplit => "resplit",
            OpClass::Split => "split",
            OpClass::AppendSplit => "append split",
            OpClass::NormalGc => "normal GC",
            OpClass::LightweightGc => "lightweight GC",
            OpClass::FullLeaf => "full leaf, rebuilt",
            OpClass::Write => "put or delete",
            OpClass::Get => "get",
        }
    }

    /// The class of `op`, from the index's counters just before and just
    /// after it.
    pub fn of(op: &RangeOp, before: &RaskStats, after: &RaskStats) -> OpClass {
        if matches!(op, RangeOp::Get(_)) {
            return OpClass::Get;
        }
        let grew = |f: fn(&RaskStats) -> u64| f(after) > f(before);
        // `splits` counts append splits too: a split that is not one of
        // them was range-conscious.
        let splits = after.splits - before.splits;
        let appends = after.append_splits - before.append_splits;
        if grew(|s| s.merges) {
            OpClass::Merge
        } else if grew(|s| s.resplits) {
            OpClass::Resplit
        } else if splits > appends {
            OpClass::Split
        } else if appends > 0 {
            OpClass::AppendSplit
        } else if grew(|s| s.normal_gcs) {
            OpClass::NormalGc
        } else if grew(|s| s.lightweight_gcs) {
            OpClass::LightweightGc
        } else if grew(|s| s.full_leaf_writes) {
            OpClass::FullLeaf
        } else {
            OpClass::Write
        }
    }
}

/// One class's operations in a [`TailProfile`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClassLatency {
    pub class: String,
    pub ops: u64,
    /// Share of all timed operations.
    pub share: f64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    /// Share of the operations at or above the whole replay's p99 that
    /// are of this class.
    pub share_of_tail: f64,
}

/// The latencies of a RASK replay by [`OpClass`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TailProfile {
    pub ops: u64,
    pub p99_ns: u64,
    /// Operations at or above `p99_ns`.
    pub tail_ops: u64,
    /// The classes that occurred, in [`OpClass`] order.
    pub classes: Vec<ClassLatency>,
}

/// Replays `ops` `runs` times on fresh default RASK indexes (after an
/// untimed warm-up on another, as the replayer does), timing every
/// operation, and profiles the latencies by class.
pub fn profile(ops: &[RangeOp], runs: usize) -> Option<TailProfile> {
    let mut out: Vec<Segment<PhysicalRun>> = Vec::with_capacity(4096);
    let mut hists: Vec<Histogram<u64>> = OpClass::ALL
        .iter()
        .map(|_| Histogram::new(3))
        .collect::<Result<_, _>>()
        .ok()?;
    replay(ops.get(..ops.len().min(WARMUP_OPS))?, &mut out, None);
    for _ in 0..runs.max(1) {
        replay(ops, &mut out, Some(&mut hists));
    }
    let mut all = Histogram::<u64>::new(3).ok()?;
    for h in &hists {
        all.add(h).ok()?;
    }
    let ops_timed = all.len();
    if ops_timed == 0 {
        return None;
    }
    let p99 = all.value_at_quantile(0.99);
    let tail = |h: &Histogram<u64>| {
        if h.is_empty() || h.max() < p99 {
            0
        } else {
            h.count_between(p99, h.max())
        }
    };
    let tail_ops: u64 = hists.iter().map(tail).sum();
    let classes = OpClass::ALL
        .iter()
        .zip(&hists)
        .filter(|(_, h)| !h.is_empty())
        .map(|(c, h)| ClassLatency {
            class: c.name().to_string(),
            ops: h.len(),
            share: h.len() as f64 / ops_timed as f64,
            p50_ns: h.value_at_quantile(0.5),
            p90_ns: h.value_at_quantile(0.9),
            p99_ns: h.value_at_quantile(0.99),
            share_of_tail: tail(h) as f64 / tail_ops.max(1) as f64,
        })
        .collect();
    Some(TailProfile {
        ops: ops_timed,
        p99_ns: p99,
        tail_ops,
        classes,
    })
}

/// One replay on a fresh index; with `hists`, every operation is timed
/// and recorded under its class (indexed as [`OpClass::ALL`]).
fn replay(
    ops: &[RangeOp],
    out: &mut Vec<Segment<PhysicalRun>>,
    mut hists: Option<&mut Vec<Histogram<u64>>>,
) {
    let ix: Rask<PhysicalRun> = Rask::new();
    let mut before = ix.counters();
    for op in ops {
        let started = Instant::now();
        match *op {
            // The streams hold only valid runs.
            RangeOp::Put(r, v) => {
                let _ = ix.put(r, v);
            }
            RangeOp::Delete(r) => ix.delete(r),
            RangeOp::Get(r) => {
                out.clear();
                ix.get_into(r, out);
            }
        }
        let ns = started.elapsed().as_nanos() as u64;
        if let Some(h) = hists.as_deref_mut() {
            let after = ix.counters();
            // `ALL` lists the classes in declaration order.
            let _ = h[OpClass::of(op, &before, &after) as usize].record(ns);
            before = after;
        }
    }
    ix.reclaim();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::range_index::synthetic_ops;
    use ferrite_rask::BlockRange;

    fn put() -> RangeOp {
        RangeOp::Put(
            BlockRange::new(0, 3).unwrap(),
            PhysicalRun::new(0, 0).unwrap(),
        )
    }

    #[test]
    fn every_class_sits_at_its_discriminant() {
        for (i, c) in OpClass::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i, "{}", c.name());
        }
    }

    #[test]
    fn the_costliest_event_names_the_class() {
        let zero = RaskStats::default();
        let mut s = zero;
        s.full_leaf_writes = 1;
        s.lightweight_gcs = 1;
        s.normal_gcs = 1;
        assert_eq!(OpClass::of(&put(), &zero, &s), OpClass::NormalGc);
        s.splits = 1;
        s.append_splits = 1;
        assert_eq!(OpClass::of(&put(), &zero, &s), OpClass::AppendSplit);
        s.splits = 2;
        assert_eq!(OpClass::of(&put(), &zero, &s), OpClass::Split);
        s.merges = 1;
        assert_eq!(OpClass::of(&put(), &zero, &s), OpClass::Merge);
        assert_eq!(OpClass::of(&put(), &s, &s), OpClass::Write);
        let get = RangeOp::Get(BlockRange::new(0, 3).unwrap());
        assert_eq!(OpClass::of(&get, &zero, &s), OpClass::Get);
    }

    #[test]
    fn a_profile_accounts_for_every_operation_and_its_tail() {
        let ops = synthetic_ops(30_000, 7, 1 << 14, 0.8, 0.02);
        let p = profile(&ops, 2).unwrap();
        assert_eq!(p.ops, 2 * ops.len() as u64);
        assert_eq!(p.classes.iter().map(|c| c.ops).sum::<u64>(), p.ops);
        let shares: f64 = p.classes.iter().map(|c| c.share_of_tail).sum();
        assert!((shares - 1.0).abs() < 1e-9, "{shares}");
        assert!(p.tail_ops >= p.ops / 100, "{} of {}", p.tail_ops, p.ops);
        // A stream this size fills, collects and splits leaves.
        for class in ["get", "put or delete", "split"] {
            assert!(p.classes.iter().any(|c| c.class == class), "{class}");
        }
    }
}
