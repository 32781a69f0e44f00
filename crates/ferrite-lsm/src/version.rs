//! A version: the set of live tables, level by level, immutable once made.
//!
//! A version has one set of levels per partition (SwiftKV's subtrees; a
//! key belongs to partition `first 8 bytes mod P`). Invariants, per
//! partition: L0 is ordered newest first and its tables may overlap; in
//! every deeper level tables are ordered by key and their key ranges are
//! disjoint; a key's newest version is in the first table, searching L0 in
//! order and then each level, that holds it. Each partition's L0 has an
//! [`L0Index`] built with the version, so a lookup tests only the L0
//! tables whose range holds its key. A new version is made by
//! [`Version::edit`], never by changing one, so readers holding an old
//! version keep a consistent view (and keep its tables' extents alive).

use std::sync::Arc;

use ferrite_core::Result;

use crate::l0_index::{self, L0Index};
use crate::manifest::TableRecord;
use crate::range_del::{Fragments, RangeDel};
use crate::table::{Found, Table};

/// The levels of one partition: `levels[0]` is L0.
pub type Levels = Vec<Vec<Arc<Table>>>;

#[derive(Clone, Default)]
pub struct Version {
    /// `parts[p]`: the levels of partition `p` (SwiftKV's subtrees; one
    /// partition when the store is not partitioned).
    pub parts: Vec<Levels>,
    /// Per partition, the index of its L0 (of `parts[p][0]`).
    l0: Vec<L0Index>,
    /// Per partition, its L0 as sorted runs (positions in `parts[p][0]`,
    /// newest run first, each in key order; see [`crate::l0_index::runs`]).
    l0_runs: Vec<Vec<Vec<usize>>>,
    /// Bytes of every table, summed with the version.
    table_bytes: u64,
    /// Range deletes flushed out of their memtables (see `range_del`):
    /// persisted in the manifest with the tables they judge.
    pub range_dels: Arc<Vec<RangeDel>>,
    /// `range_dels` fragmented for reads, rebuilt whenever they change.
    range_frags: Arc<Fragments>,
}

impl Version {
    pub fn empty(parts: usize, levels: usize) -> Self {
        Self {
            parts: vec![vec![Vec::new(); levels]; parts],
            l0: vec![L0Index::default(); parts],
            l0_runs: vec![Vec::new(); parts],
            table_bytes: 0,
            range_dels: Arc::new(Vec::new()),
            range_frags: Arc::new(Fragments::default()),
        }
    }

    /// The range deletes, fragmented for reads.
    pub fn range_fragments(&self) -> &Arc<Fragments> {
        &self.range_frags
    }

    fn set_range_dels(&mut self, dels: Vec<RangeDel>) {
        self.range_frags = Arc::new(Fragments::build(&dels));
        self.range_dels = Arc::new(dels);
    }

    /// Rebuilds every partition's L0 index and runs (after `parts`
    /// changed).
    fn indexed(mut self) -> Self {
        let l0 =
            |levels: &Levels| -> Vec<Arc<Table>> { levels.first().cloned().unwrap_or_default() };
        self.l0 = self
            .parts
            .iter()
            .map(|levels| L0Index::build(l0(levels).iter().map(|t| (t.smallest(), t.largest()))))
            .collect();
        self.table_bytes = self.tables().map(|(_, _, t)| t.bytes()).sum();
        self.l0_runs = self
            .parts
            .iter()
            .map(|levels| l0_index::runs(l0(levels).iter().map(|t| (t.smallest(), t.largest()))))
            .collect();
        self
    }

    /// Partition `part`'s L0 as sorted runs, newest first, each in key
    /// order: a run reads as one level.
    pub fn l0_runs(&self, part: usize) -> Vec<Vec<Arc<Table>>> {
        let l0 = self.levels(part).first().map_or(&[][..], Vec::as_slice);
        self.l0_runs
            .get(part)
            .map(|runs| {
                runs.iter()
                    .map(|run| run.iter().filter_map(|&i| l0.get(i).cloned()).collect())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Where a flush into partition `part` cuts its output, besides the
    /// target table size: after the largest key of some of L1's tables,
    /// about `pieces` of them, ascending; while L1 is empty (a store's
    /// first merge), after that of every table of L0's oldest run.
    /// Flushes cut alike then, so an L0 → L1 merge meets keys that no
    /// input table straddles, where it can install what it has merged so
    /// far and free those inputs.
    ///
    /// Which L1 ends are cuts depends on each key alone: those whose hash
    /// is a multiple of a power of two, chosen so that about `pieces`
    /// qualify. L1's tables change under the flushes (merges out of it
    /// take tables away), and a rule by position would then pick other
    /// keys; by hash, an end stays a cut while its table stays, and a
    /// smaller power of two keeps every cut of a larger one. Cutting at
    /// every end instead makes each flush as many tables as L1 holds,
    /// small ones, whose cost slows loads; and the oldest run's ends must
    /// not add to L1's, or each flush would inherit the last one's cuts
    /// until a flush is hundreds of tables.
    pub fn flush_cuts(&self, part: usize, pieces: usize) -> Vec<Vec<u8>> {
        let l1 = self.levels(part).get(1).map_or(&[][..], Vec::as_slice);
        let mut cuts: Vec<Vec<u8>> = if l1.is_empty() {
            let oldest_run = self.l0_runs(part).pop().unwrap_or_default();
            oldest_run.iter().map(|t| t.largest().to_vec()).collect()
        } else {
            sampled_ends(l1.iter().map(|t| t.largest()), pieces)
        };
        cuts.sort_unstable();
        cuts.dedup();
        cuts
    }

    /// Bytes of all the version's tables.
    pub fn table_bytes(&self) -> u64 {
        self.table_bytes
    }

    /// How many sorted runs partition `part`'s L0 holds.
    pub fn l0_run_count(&self, part: usize) -> usize {
        self.l0_runs.get(part).map_or(0, Vec::len)
    }

    /// Builds a version from recovered `(partition, level, table)`s;
    /// L0 newest first means descending table id.
    pub fn from_tables(
        parts: usize,
        levels: usize,
        mut tables: Vec<(usize, usize, Arc<Table>)>,
    ) -> Self {
        let mut v = Self::empty(parts, levels);
        tables.sort_by(|a, b| a.2.smallest().cmp(b.2.smallest()));
        for (part, level, t) in tables {
            if let Some(l) = v.parts.get_mut(part).and_then(|p| p.get_mut(level)) {
                l.push(t);
            }
        }
        for p in &mut v.parts {
            if let Some(l0) = p.first_mut() {
                l0.sort_by_key(|t| std::cmp::Reverse(t.id));
            }
        }
        v.indexed()
    }

    pub fn levels(&self, part: usize) -> &[Vec<Arc<Table>>] {
        self.parts.get(part).map_or(&[], Vec::as_slice)
    }

    /// The newest version of `key`, which lives in partition `part`.
    pub fn get(&self, part: usize, key: &[u8], hash: u64) -> Result<Option<(Found, u64)>> {
        for (level, tables) in self.levels(part).iter().enumerate() {
            if level == 0 {
                let Some(index) = self.l0.get(part) else {
                    continue;
                };
                for &i in index.candidates(key) {
                    let Some(t) = tables.get(i as usize) else {
                        continue;
                    };
                    if let Some(f) = t.get(key, hash)? {
                        return Ok(Some((f, t.max_seq())));
                    }
                }
            } else if let Some(t) = find_in_level(tables, key) {
                if let Some(f) = t.get(key, hash)? {
                    return Ok(Some((f, t.max_seq())));
                }
            }
        }
        Ok(None)
    }

    /// Whether every table in `ids` is live in this version.
    pub fn contains_all(&self, ids: &[u64]) -> bool {
        ids.iter()
            .all(|id| self.tables().any(|(_, _, t)| t.id == *id))
    }

    /// A new version without the tables in `removed` and with `added`
    /// (partition, level, table) placed in order.
    /// The version with `dels` added to its range deletes.
    pub fn with_range_dels(&self, dels: impl IntoIterator<Item = RangeDel>) -> Self {
        let mut v = self.clone();
        let mut all = (*self.range_dels).clone();
        all.extend(dels);
        v.set_range_dels(all);
        v
    }

    /// The version without the range deletes no table or memtable needs
    /// any more (memtables from `oldest_mem` on are still in memory).
    pub fn without_obsolete_range_dels(&self, oldest_mem: u64) -> Self {
        if self.range_dels.is_empty() {
            return self.clone();
        }
        let keep: Vec<RangeDel> = self
            .range_dels
            .iter()
            .filter(|d| {
                let tables = self
                    .tables()
                    .map(|(_, _, t)| (t.max_seq(), t.smallest(), t.largest()));
                !d.obsolete(tables, oldest_mem)
            })
            .cloned()
            .collect();
        let mut v = self.clone();
        if keep.len() != self.range_dels.len() {
            v.set_range_dels(keep);
        }
        v
    }

    pub fn edit(&self, removed: &[u64], added: &[(usize, usize, Arc<Table>)]) -> Self {
        let mut v = Self {
            l0: Vec::new(),
            l0_runs: Vec::new(),
            table_bytes: 0,
            range_dels: self.range_dels.clone(),
            range_frags: self.range_frags.clone(),
            parts: self
                .parts
                .iter()
                .map(|levels| {
                    levels
                        .iter()
                        .map(|l| {
                            l.iter()
                                .filter(|t| !removed.contains(&t.id))
                                .cloned()
                                .collect()
                        })
                        .collect()
                })
                .collect(),
        };
        for (part, level, t) in added {
            let Some(l) = v.parts.get_mut(*part).and_then(|p| p.get_mut(*level)) else {
                continue;
            };
            if *level == 0 {
                l.insert(0, t.clone());
            } else {
                let at = l.partition_point(|x| x.smallest() < t.smallest());
                l.insert(at, t.clone());
            }
        }
        v.indexed()
    }

    pub fn level_bytes(&self, part: usize, level: usize) -> u64 {
        self.levels(part)
            .get(level)
            .map_or(0, |l| l.iter().map(|t| t.bytes()).sum())
    }

    /// Tables of `level` in `part` whose ranges meet `[lo, hi]`.
    pub fn overlapping(&self, part: usize, level: usize, lo: &[u8], hi: &[u8]) -> Vec<Arc<Table>> {
        self.levels(part)
            .get(level)
            .map(|l| l.iter().filter(|t| t.overlaps(lo, hi)).cloned().collect())
            .unwrap_or_default()
    }

    /// The most L0 runs any partition has (what stalls writers).
    pub fn max_l0(&self) -> usize {
        self.l0_runs.iter().map(Vec::len).max().unwrap_or(0)
    }

    /// Every table with its partition and level.
    pub fn tables(&self) -> impl Iterator<Item = (usize, usize, &Arc<Table>)> {
        self.parts.iter().enumerate().flat_map(|(p, levels)| {
            levels
                .iter()
                .enumerate()
                .flat_map(move |(l, ts)| ts.iter().map(move |t| (p, l, t)))
        })
    }

    pub fn records(&self) -> Vec<TableRecord> {
        self.tables()
            .map(|(p, l, t)| TableRecord {
                id: t.id,
                partition: p as u16,
                level: l as u8,
                start: t.extent.start,
                pages: t.extent.pages,
            })
            .collect()
    }
}

/// The table of a sorted, disjoint level whose range holds `key`.
pub fn find_in_level<'a>(tables: &'a [Arc<Table>], key: &[u8]) -> Option<&'a Arc<Table>> {
    let i = tables.partition_point(|t| t.largest() < key);
    tables.get(i).filter(|t| t.smallest() <= key)
}

/// Of some table ends, those whose hash is a multiple of the least power
/// of two that leaves about `pieces` of them (every end when there are no
/// more than `pieces`).
fn sampled_ends<'a>(ends: impl ExactSizeIterator<Item = &'a [u8]>, pieces: usize) -> Vec<Vec<u8>> {
    let stride = ends.len().div_ceil(pieces.max(1)).next_power_of_two() as u32;
    ends.filter(|k| crc32c::crc32c(k).is_multiple_of(stride))
        .map(<[u8]>::to_vec)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::sampled_ends;

    fn ends(n: u32) -> Vec<Vec<u8>> {
        (0..n).map(|i| (i * 7919).to_be_bytes().to_vec()).collect()
    }

    fn sample(ends: &[Vec<u8>], pieces: usize) -> Vec<Vec<u8>> {
        sampled_ends(ends.iter().map(Vec::as_slice), pieces)
    }

    #[test]
    fn few_ends_are_all_cuts() {
        let e = ends(5);
        assert_eq!(sample(&e, 8), e);
        assert_eq!(sample(&e, 5), e);
    }

    #[test]
    fn many_ends_give_about_the_pieces_asked_for() {
        for (n, pieces) in [(64, 8), (200, 8), (1000, 4), (37, 4)] {
            let got = sample(&ends(n), pieces).len();
            assert!(
                got >= pieces / 2 && got <= pieces * 2 + 2,
                "{n} ends, {pieces} pieces: {got} cuts"
            );
        }
    }

    #[test]
    fn a_cut_stays_a_cut_while_its_table_stays() {
        // Tables leave L1 between flushes: every surviving cut is still
        // one, and a smaller stride keeps all of a larger one's.
        let all = ends(100);
        let before = sample(&all, 8);
        let fewer: Vec<Vec<u8>> = all.iter().step_by(3).cloned().collect();
        let after = sample(&fewer, 8);
        for c in before.iter().filter(|c| fewer.contains(c)) {
            assert!(after.contains(c), "cut {c:?} lost");
        }
        assert!(after.len() >= before.iter().filter(|c| fewer.contains(c)).count());
    }
}
