//! Leveled compaction: which tables to merge (a pure policy) and the merge
//! itself.
//!
//! Policy ([`pick_level`], per partition): every level gets a score, L0
//! its sorted runs over the trigger or its bytes over L1's target,
//! whichever is higher (RocksDB's rule: a load in key order makes every
//! flush extend one run, and L0 must not grow without bound then),
//! deeper levels their bytes over their target (a partition's share of
//! the level's target); the level with the
//! highest score ≥ 1 is compacted. L0 compacts all its tables
//! (they may overlap, so taking only some could put an older version above
//! a newer one) with the L1 tables they overlap; a deeper level compacts
//! one table, chosen round-robin by a per-level key cursor, with the next
//! level's tables it overlaps. A table with no overlap below moves down
//! without being rewritten, unless it would carry deletes into the last
//! level, where nothing is left for them to delete.
//!
//! At a clean close ([`l0_due_at_close`]) a partition's L0 is merged into
//! L1 when it holds at least a `level_multiplier`-th of the bytes below
//! it: L0 tables hold new versions of keys whose old versions sit below,
//! and a store left at rest with them keeps both on disk until enough
//! writes come to fill L0 again. A tenth is the share leveled compaction
//! lets each level keep of the next, so at rest no more than that is
//! shadowed, and the close's merge is bounded by L1's overlap.
//!
//! Deletes ([`pick_for_deletes`]): when no level is due, a table whose
//! entries are mostly deletes is compacted anyway (RocksDB's
//! compact-on-deletion), one level at a time, until its deletes meet what
//! they delete and both are dropped. Without it a store left idle after a
//! mass delete or expiry would keep the deleted data on disk, since only
//! size triggers compaction. Deletes jobs always rewrite, never move.
//!
//! The merge keeps only the newest version of each key (readers that need
//! older ones hold older versions, whose tables stay alive) and drops a
//! delete when no deeper level can hold its key. Output tables are cut at
//! the target size, never inside a key, and at keys no input straddles
//! ([`clean_cuts`]), where the job installs what it has merged so far and
//! frees the inputs it has passed: an L0 → L1 merge of a store's whole
//! data then needs room for the data and a slice, not for the data twice.
//! Flushes cut their tables at some of L1's table ends
//! ([`crate::version::Version::flush_cuts`]) so that such keys exist.

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
    /// Tables, or for L0 sorted runs.
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
            // A partition's share of level `l`'s target.
            let share = |l: usize| (opts.level_target(l) / opts.partitions.max(1) as u64).max(1);
            let score = if l == 0 {
                // Runs bound reads; bytes bound L0 when every flush
                // extends one run (keys written in order), as L1's target.
                let runs = s.tables as f64 / opts.l0_compaction_trigger as f64;
                runs.max(s.bytes as f64 / share(1) as f64)
            } else {
                s.bytes as f64 / share(l) as f64
            };
            (l, score)
        })
        .filter(|&(_, score)| score >= 1.0)
        .max_by(|a, b| a.1.total_cmp(&b.1))
}

/// Whether a clean close merges this partition's L0 into L1 first: L0
/// holds at least `1 / level_multiplier` of the bytes in the levels below
/// (all of them when nothing is below).
pub fn l0_due_at_close(shape: &[LevelShape], opts: &LsmOptions) -> bool {
    let Some((l0, below)) = shape.split_first() else {
        return false;
    };
    if l0.tables == 0 || below.is_empty() {
        return false;
    }
    let below: u64 = below.iter().map(|s| s.bytes).sum();
    l0.bytes.saturating_mul(opts.level_multiplier) >= below
}

/// What the deletes trigger sees of a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableShape {
    pub entries: u64,
    pub deletes: u64,
}

/// Deletes must make up at least this share of a table's entries for it
/// to be compacted when no level is due.
pub const DELETES_SHARE: f64 = 0.5;

/// When no level is due: the (level, table) with the largest share of
/// deletes, if it reaches [`DELETES_SHARE`]. The last level is never a
/// source (it holds no deletes: merges into it drop them and moves into
/// it are refused for tables with any).
pub fn pick_for_deletes(levels: &[Vec<TableShape>]) -> Option<(usize, usize)> {
    let last = levels.len().saturating_sub(1);
    levels
        .iter()
        .enumerate()
        .take(last)
        .flat_map(|(l, tables)| tables.iter().enumerate().map(move |(i, t)| (l, i, t)))
        .filter(|(_, _, t)| t.deletes > 0 && t.entries > 0)
        .map(|(l, i, t)| (l, i, t.deletes as f64 / t.entries as f64))
        .filter(|&(_, _, share)| share >= DELETES_SHARE)
        .max_by(|a, b| a.2.total_cmp(&b.2))
        .map(|(l, i, _)| (l, i))
}

/// Which table of a deeper level a compaction takes.
#[derive(Debug, Clone, Copy)]
pub enum Pick<'c> {
    /// The first at or after the key the level's last compaction ended at.
    After(Option<&'c [u8]>),
    /// This one, for its deletes: rewritten even with nothing below.
    Deletes(usize),
}

/// One compaction to run.
pub struct Job {
    pub part: usize,
    pub level: usize,
    /// Inputs from `level` (newest first for L0) and from `level + 1`.
    pub upper: Vec<Arc<Table>>,
    pub lower: Vec<Arc<Table>>,
    /// Whether `level + 1` is the partition's last level.
    pub into_last: bool,
    /// Picked for its deletes.
    pub for_deletes: bool,
}

impl Job {
    pub fn is_move(&self) -> bool {
        self.level > 0
            && self.upper.len() == 1
            && self.lower.is_empty()
            && !self.for_deletes
            && !(self.into_last && self.upper[0].footer.deletes > 0)
    }

    pub fn input_bytes(&self) -> u64 {
        self.upper
            .iter()
            .chain(&self.lower)
            .map(|t| t.bytes())
            .sum()
    }
}

/// Chooses the inputs of a compaction of `level` in partition `part`
/// (L0 compacts all its tables, whatever `pick` says).
pub fn plan(v: &Version, part: usize, level: usize, pick: Pick<'_>) -> Option<Job> {
    let tables = v.levels(part).get(level)?;
    let upper: Vec<Arc<Table>> = if level == 0 {
        tables.clone()
    } else {
        let t = match pick {
            Pick::After(cursor) => {
                let i = cursor.map_or(0, |c| tables.partition_point(|t| t.smallest() <= c));
                tables.get(i).or_else(|| tables.first())?
            }
            Pick::Deletes(i) => tables.get(i)?,
        };
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
        into_last: level + 2 == v.levels(part).len(),
        for_deletes: matches!(pick, Pick::Deletes(_)),
    })
}

/// What a merge needs of the version its job was planned on, taken out so
/// that neither the version nor the job holds the inputs while the merge
/// runs (each is freed once installed away and passed).
pub struct Beneath {
    /// The version's range deletes: durable, so entries older than one
    /// covering them go now (a live snapshot keeps the inputs it reads).
    dels: RangeDels,
    /// The levels below the output level, which a delete may still have
    /// to shadow.
    levels: Vec<Vec<Arc<Table>>>,
}

impl Beneath {
    pub fn of(v: &Version, job: &Job) -> Self {
        Self {
            dels: RangeDels::of_sets(vec![v.range_fragments().clone()], Vec::new(), u64::MAX),
            levels: v
                .levels(job.part)
                .iter()
                .skip(job.level + 2)
                .cloned()
                .collect(),
        }
    }

    /// Whether no level below the output can hold `key` (so a delete of
    /// it may be dropped).
    fn is_base_for(&self, key: &[u8]) -> bool {
        self.levels
            .iter()
            .all(|tables| crate::version::find_in_level(tables, key).is_none())
    }
}

/// What a merge hands its caller as it goes.
pub enum Step<'k> {
    /// A finished output table.
    Table(BuiltTable),
    /// Every input entry at or below this key is in the tables handed over
    /// so far, and no input table straddles the key: those tables can
    /// replace the inputs wholly at or below it now, and the version stays
    /// sound (disjoint levels, no input left shadowing an output), so a
    /// merge frees its inputs' space as it passes them instead of holding
    /// inputs and outputs whole until it ends.
    Through(&'k [u8]),
}

/// Keys at which a merge of tables with these `(smallest, largest)` ranges
/// can stop and resume: the largest key of an input that no other input
/// straddles (has a smaller smallest key and a larger largest), ascending,
/// the last input's end left out (the merge's end installs that).
pub fn clean_cuts<'a>(ranges: impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone) -> Vec<Vec<u8>> {
    let end = ranges.clone().map(|(_, hi)| hi).max();
    let mut cuts: Vec<&[u8]> = ranges
        .clone()
        .map(|(_, hi)| hi)
        .filter(|&g| Some(g) != end)
        .filter(|&g| !ranges.clone().any(|(lo, hi)| lo <= g && g < hi))
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    cuts.into_iter().map(<[u8]>::to_vec).collect()
}

/// Merges a job's inputs into new tables for `job.level + 1`, handing each
/// finished table to `emit` as soon as it is built, and at each clean cut
/// ([`clean_cuts`]) passed with at least a quarter table's worth since the
/// last, cutting the table there and saying so ([`Step::Through`]).
/// `emit` returning false abandons the merge; the result says whether it
/// ran to the end.
pub fn merge(
    job: Job,
    beneath: &Beneath,
    opts: &LsmOptions,
    emit: &mut dyn FnMut(Step<'_>) -> Result<bool>,
) -> Result<bool> {
    let cuts = clean_cuts(
        job.upper
            .iter()
            .chain(&job.lower)
            .map(|t| (t.smallest(), t.largest())),
    );
    // The sources own the inputs from here, and let go of each as they
    // pass it.
    let mut sources: Vec<Box<dyn Source>> = Vec::new();
    if job.level == 0 {
        // L0's sorted runs, newest first, each read as one level.
        for run in crate::l0_index::runs(job.upper.iter().map(|t| (t.smallest(), t.largest()))) {
            let tables = run
                .iter()
                .filter_map(|&i| job.upper.get(i).cloned())
                .collect();
            sources.push(Box::new(LevelIter::sequential(tables)?));
        }
    } else {
        for t in &job.upper {
            sources.push(Box::new(TableIter::sequential(t.clone())?));
        }
    }
    sources.push(Box::new(LevelIter::sequential(job.lower)?));
    drop(job.upper);
    let mut next_cut = 0;
    let mut merged = Merge::new(sources);
    let dels = &beneath.dels;
    let mut b = TableBuilder::new(opts.index, opts.bloom_bits_per_key, opts.training_threads)
        .smaller_index(opts.smaller_index)
        .compression(opts.compression);
    let (mut key, mut value) = (Vec::new(), Vec::new());
    while let Some((live, seq)) = merged.next_into(&mut key, &mut value)? {
        let mut passed = None;
        while cuts
            .get(next_cut)
            .is_some_and(|c| c.as_slice() < key.as_slice())
        {
            passed = Some(next_cut);
            next_cut += 1;
        }
        if let Some(cut) = passed.and_then(|i| cuts.get(i)) {
            if b.is_empty() || b.estimated_bytes() >= opts.table_bytes / 4 {
                if let Some(t) = b.finish() {
                    if !emit(Step::Table(t))? {
                        return Ok(false);
                    }
                }
                if !emit(Step::Through(cut))? {
                    return Ok(false);
                }
            }
        }
        if dels.covers(&key, seq) || (!live && beneath.is_base_for(&key)) {
            continue;
        }
        if b.estimated_bytes() >= opts.table_bytes {
            if let Some(t) = b.finish() {
                if !emit(Step::Table(t))? {
                    return Ok(false);
                }
            }
        }
        b.note_seq(seq);
        b.add(&key, live.then_some(value.as_slice()));
    }
    if let Some(t) = b.finish() {
        if !emit(Step::Table(t))? {
            return Ok(false);
        }
    }
    Ok(true)
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
        // One run holding more than L1's target: a load in key order.
        assert_eq!(pick_level(&shape(&[(1, 99), (0, 0), (0, 0)]), &opts), None);
        assert_eq!(
            pick_level(&shape(&[(1, 200), (1, 50), (0, 0)]), &opts),
            Some((0, 2.0))
        );
    }

    #[test]
    fn a_close_merges_l0_once_it_is_a_tenth_of_what_lies_below() {
        let opts = LsmOptions::default().level_multiplier(10);
        let shape = |v: &[(usize, u64)]| -> Vec<LevelShape> {
            v.iter()
                .map(|&(tables, bytes)| LevelShape { tables, bytes })
                .collect()
        };
        assert!(!l0_due_at_close(&shape(&[(0, 0), (3, 500)]), &opts));
        assert!(!l0_due_at_close(&shape(&[(1, 9), (3, 50), (9, 50)]), &opts));
        assert!(l0_due_at_close(&shape(&[(1, 10), (3, 50), (9, 50)]), &opts));
        assert!(l0_due_at_close(&shape(&[(2, 10), (0, 0), (0, 0)]), &opts));
        assert!(
            !l0_due_at_close(&shape(&[(2, 10)]), &opts),
            "no level to merge into"
        );
    }

    #[test]
    fn a_merge_can_stop_only_where_no_input_straddles() {
        let cuts = |ranges: &[(&[u8], &[u8])]| clean_cuts(ranges.iter().copied());
        // Two runs cut alike at "c", and an L1 table a..f across that
        // cut: no clean cut; with L1 cut at "c" too, "c" is one.
        assert_eq!(
            cuts(&[
                (b"a", b"c"),
                (b"d", b"k"),
                (b"b", b"c"),
                (b"e", b"j"),
                (b"a", b"f"),
                (b"g", b"z")
            ]),
            Vec::<Vec<u8>>::new(),
            "the L1 table a..f straddles c"
        );
        assert_eq!(
            cuts(&[
                (b"a", b"c"),
                (b"d", b"k"),
                (b"b", b"c"),
                (b"e", b"j"),
                (b"a", b"c"),
                (b"d", b"z")
            ]),
            vec![b"c".to_vec()],
            "k and j lie inside d..z"
        );
        // A key equal to a cut ends there: a table starting at it
        // straddles nothing below.
        assert_eq!(
            cuts(&[(b"a", b"c"), (b"c", b"e"), (b"f", b"h")]),
            vec![b"e".to_vec()],
            "c is both an end and a start, so a..c and c..e share it"
        );
        assert!(cuts(&[(b"a", b"z")]).is_empty());
        assert!(cuts(&[]).is_empty());
    }

    #[test]
    fn the_table_most_made_of_deletes_is_picked_once_they_are_half() {
        let t = |entries, deletes| TableShape { entries, deletes };
        assert_eq!(pick_for_deletes(&[vec![], vec![t(100, 49)], vec![]]), None);
        assert_eq!(
            pick_for_deletes(&[vec![t(10, 5)], vec![t(100, 49), t(100, 90)], vec![]]),
            Some((1, 1))
        );
        assert_eq!(
            pick_for_deletes(&[vec![], vec![], vec![t(10, 10)]]),
            None,
            "the last level is never a source"
        );
        assert_eq!(pick_for_deletes(&[vec![t(0, 0)], vec![]]), None);
    }
}
