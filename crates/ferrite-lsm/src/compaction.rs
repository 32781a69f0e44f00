//! Leveled compaction: which tables to merge (a pure policy) and the merge
//! itself.
//!
//! Policy ([`pick_level`], per partition): every level gets a score, L0
//! its table count over the trigger, deeper levels their bytes over their
//! target (a partition's share of the level's target); the level with the
//! highest score ≥ 1 is compacted. L0 compacts all its tables
//! (they may overlap, so taking only some could put an older version above
//! a newer one) with the L1 tables they overlap; a deeper level compacts
//! one table, chosen round-robin by a per-level key cursor, with the next
//! level's tables it overlaps. A table with no overlap below moves down
//! without being rewritten.
//!
//! The merge keeps only the newest version of each key (readers that need
//! older ones hold older versions, whose tables stay alive) and drops a
//! delete when no deeper level can hold its key. Output tables are cut at
//! the target size, never inside a key.

use std::sync::Arc;

use ferrite_core::Result;

use crate::merge::{LevelIter, Merge, Source};
use crate::options::LsmOptions;
use crate::range_del::RangeDels;
use crate::table::{BuiltTable, Table, TableBuilder, TableIter};
use crate::version::Version;

/// What the policy sees of a level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LevelShape {
    pub tables: usize,
    pub bytes: u64,
}

/// The level to compact and its score, if any level is due.
pub fn pick_level(shape: &[LevelShape], opts: &LsmOptions) -> Option<(usize, f64)> {
    let last = shape.len().saturating_sub(1);
    shape
        .iter()
        .enumerate()
        .take(last) // the last level has nowhere to go
        .map(|(l, s)| {
            let score = if l == 0 {
                s.tables as f64 / opts.l0_compaction_trigger as f64
            } else {
                let share = (opts.level_target(l) / opts.partitions.max(1) as u64).max(1);
                s.bytes as f64 / share as f64
            };
            (l, score)
        })
        .filter(|&(_, score)| score >= 1.0)
        .max_by(|a, b| a.1.total_cmp(&b.1))
}

/// One compaction to run.
pub struct Job {
    pub part: usize,
    pub level: usize,
    /// Inputs from `level` (newest first for L0) and from `level + 1`.
    pub upper: Vec<Arc<Table>>,
    pub lower: Vec<Arc<Table>>,
}

impl Job {
    pub fn is_move(&self) -> bool {
        self.level > 0 && self.upper.len() == 1 && self.lower.is_empty()
    }

    pub fn input_bytes(&self) -> u64 {
        self.upper
            .iter()
            .chain(&self.lower)
            .map(|t| t.bytes())
            .sum()
    }
}

/// Chooses the inputs of a compaction of `level` in partition `part`;
/// `cursor` is the key that level's last compaction ended at.
pub fn plan(v: &Version, part: usize, level: usize, cursor: Option<&[u8]>) -> Option<Job> {
    let tables = v.levels(part).get(level)?;
    let upper: Vec<Arc<Table>> = if level == 0 {
        tables.clone()
    } else {
        let i = cursor.map_or(0, |c| tables.partition_point(|t| t.smallest() <= c));
        let t = tables.get(i).or_else(|| tables.first())?;
        vec![t.clone()]
    };
    let lo = upper.iter().map(|t| t.smallest()).min()?.to_vec();
    let hi = upper.iter().map(|t| t.largest()).max()?.to_vec();
    let lower = v.overlapping(part, level + 1, &lo, &hi);
    Some(Job {
        part,
        level,
        upper,
        lower,
    })
}

/// Merges a job's inputs into new tables for `job.level + 1`, handing each
/// finished table to `emit` as soon as it is built.
pub fn merge(
    job: &Job,
    v: &Version,
    opts: &LsmOptions,
    emit: &mut dyn FnMut(BuiltTable) -> Result<()>,
) -> Result<()> {
    let mut sources: Vec<Box<dyn Source>> = Vec::new();
    for t in &job.upper {
        sources.push(Box::new(TableIter::sequential(t.clone())?));
    }
    sources.push(Box::new(LevelIter::sequential(job.lower.clone())?));
    let mut merged = Merge::new(sources);
    let out_level = job.level + 1;
    // The version's range deletes are durable: entries older than one
    // covering them go now (a live snapshot keeps the inputs it reads).
    let dels = RangeDels::visible(v.range_dels.iter(), u64::MAX);
    let mut b = TableBuilder::new(opts.index, opts.bloom_bits_per_key, opts.training_threads)
        .smaller_index(opts.smaller_index);
    let (mut key, mut value) = (Vec::new(), Vec::new());
    while let Some((live, seq)) = merged.next_into(&mut key, &mut value)? {
        if dels.covers(&key, seq) || (!live && v.is_base_for(job.part, out_level, &key)) {
            continue;
        }
        if b.estimated_bytes() >= opts.table_bytes {
            if let Some(t) = b.finish() {
                emit(t)?;
            }
        }
        b.note_seq(seq);
        b.add(&key, live.then_some(value.as_slice()));
    }
    if let Some(t) = b.finish() {
        emit(t)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_overdue_level_is_picked() {
        let opts = LsmOptions::default()
            .l0_compaction_trigger(4)
            .l1_bytes(100)
            .level_multiplier(10);
        let shape = |v: &[(usize, u64)]| -> Vec<LevelShape> {
            v.iter()
                .map(|&(tables, bytes)| LevelShape { tables, bytes })
                .collect()
        };
        assert_eq!(pick_level(&shape(&[(3, 0), (1, 99), (0, 0)]), &opts), None);
        assert_eq!(
            pick_level(&shape(&[(4, 0), (1, 99), (0, 0)]), &opts),
            Some((0, 1.0))
        );
        assert_eq!(
            pick_level(&shape(&[(4, 0), (1, 300), (0, 0)]), &opts).map(|p| p.0),
            Some(1)
        );
        assert_eq!(
            pick_level(&shape(&[(0, 0), (0, 50), (0, 3000), (0, 0)]), &opts).map(|p| p.0),
            Some(2)
        );
        // The last level is never a source.
        assert_eq!(
            pick_level(&shape(&[(0, 0), (0, 0), (0, 1 << 40)]), &opts),
            None
        );
    }
}
