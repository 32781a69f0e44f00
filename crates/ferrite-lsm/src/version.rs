//! A version: the set of live tables, level by level, immutable once made.
//!
//! Invariants: L0 is ordered newest first and its tables may overlap; in
//! every deeper level tables are ordered by key and their key ranges are
//! disjoint; a key's newest version is in the first table, searching L0 in
//! order and then each level, that holds it. A new version is made by
//! [`Version::edit`], never by changing one, so readers holding an old
//! version keep a consistent view (and keep its tables' extents alive).

use std::sync::Arc;

use ferrite_core::Result;

use crate::manifest::TableRecord;
use crate::table::{Found, Table};

#[derive(Clone, Default)]
pub struct Version {
    pub levels: Vec<Vec<Arc<Table>>>,
}

impl Version {
    pub fn empty(levels: usize) -> Self {
        Self {
            levels: vec![Vec::new(); levels],
        }
    }

    /// Builds a version from recovered tables (`records` gives levels);
    /// L0 newest first means descending table id.
    pub fn from_tables(levels: usize, mut tables: Vec<(u8, Arc<Table>)>) -> Self {
        let mut v = Self::empty(levels);
        tables.sort_by(|a, b| a.1.smallest().cmp(b.1.smallest()));
        for (level, t) in tables {
            if let Some(l) = v.levels.get_mut(level as usize) {
                l.push(t);
            }
        }
        if let Some(l0) = v.levels.first_mut() {
            l0.sort_by_key(|t| std::cmp::Reverse(t.id));
        }
        v
    }

    /// The newest version of `key`.
    pub fn get(&self, key: &[u8], hash: u64) -> Result<Option<Found>> {
        for (level, tables) in self.levels.iter().enumerate() {
            if level == 0 {
                for t in tables {
                    if let Some(f) = t.get(key, hash)? {
                        return Ok(Some(f));
                    }
                }
            } else if let Some(t) = find_in_level(tables, key) {
                if let Some(f) = t.get(key, hash)? {
                    return Ok(Some(f));
                }
            }
        }
        Ok(None)
    }

    /// A new version without the tables in `removed` and with `added`
    /// (level, table) placed in order.
    pub fn edit(&self, removed: &[u64], added: &[(usize, Arc<Table>)]) -> Self {
        let mut v = Self {
            levels: self
                .levels
                .iter()
                .map(|l| {
                    l.iter()
                        .filter(|t| !removed.contains(&t.id))
                        .cloned()
                        .collect()
                })
                .collect(),
        };
        for (level, t) in added {
            let Some(l) = v.levels.get_mut(*level) else {
                continue;
            };
            if *level == 0 {
                l.insert(0, t.clone());
            } else {
                let at = l.partition_point(|x| x.smallest() < t.smallest());
                l.insert(at, t.clone());
            }
        }
        v
    }

    pub fn level_bytes(&self, level: usize) -> u64 {
        self.levels
            .get(level)
            .map_or(0, |l| l.iter().map(|t| t.bytes()).sum())
    }

    /// Tables of `level` whose ranges meet `[lo, hi]`.
    pub fn overlapping(&self, level: usize, lo: &[u8], hi: &[u8]) -> Vec<Arc<Table>> {
        self.levels
            .get(level)
            .map(|l| l.iter().filter(|t| t.overlaps(lo, hi)).cloned().collect())
            .unwrap_or_default()
    }

    /// Whether no level below `level` can hold `key` (so a delete of it
    /// written to `level` may be dropped).
    pub fn is_base_for(&self, level: usize, key: &[u8]) -> bool {
        self.levels
            .iter()
            .skip(level + 1)
            .all(|tables| find_in_level(tables, key).is_none())
    }

    pub fn records(&self) -> Vec<TableRecord> {
        let mut out = Vec::new();
        for (level, tables) in self.levels.iter().enumerate() {
            for t in tables {
                out.push(TableRecord {
                    id: t.id,
                    level: level as u8,
                    start: t.extent.start,
                    pages: t.extent.pages,
                });
            }
        }
        out
    }
}

/// The table of a sorted, disjoint level whose range holds `key`.
pub fn find_in_level<'a>(tables: &'a [Arc<Table>], key: &[u8]) -> Option<&'a Arc<Table>> {
    let i = tables.partition_point(|t| t.largest() < key);
    tables.get(i).filter(|t| t.smallest() <= key)
}
