//! Reads: point lookups go memtable → immutables → the key's partition's
//! flush buffer → its levels (L0 tables whose range holds the key, newest
//! first, then one table per level, each behind its range and bloom
//! filter); scans merge every source newest-first at one sequence number,
//! so a scan sees one state. `verify` checks every table.

use std::ops::{Bound, ControlFlow};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use ferrite_core::{Error, KeyRange, Result, ScanVisitor};

use super::flush::buffered_source;
use super::Inner;
use crate::merge::{LevelIter, MemSource, Merge, Source};
use crate::options::LsmOptions;
use crate::table::bloom::Bloom;
use crate::table::{Found, Table, TableIter};

impl Inner {
    pub(super) fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let seq = self.visible.load(Ordering::Acquire);
        let sv = self.current.read().clone();
        if let Some(v) = sv.mem.get(key, seq) {
            return Ok(v);
        }
        for m in &sv.imms {
            if let Some(v) = m.get(key, seq) {
                return Ok(v);
            }
        }
        let part = self.opts.partition_of(key);
        for m in sv.buffers.pending(part) {
            if let Some(v) = m.get(key, seq) {
                return Ok(v);
            }
        }
        Ok(match sv.version.get(part, key, Bloom::hash(key))? {
            Some(Found::Value(v)) => Some(v),
            Some(Found::Deleted) | None => None,
        })
    }

    pub(super) fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<u64> {
        let seq = self.visible.load(Ordering::Acquire);
        let sv = self.current.read().clone();
        let start = match range.start {
            Bound::Included(k) | Bound::Excluded(k) => Some(k),
            Bound::Unbounded => None,
        };
        let mut sources: Vec<Box<dyn Source>> = Vec::new();
        sources.push(Box::new(MemSource::new(sv.mem.clone(), seq, range.start)));
        for m in &sv.imms {
            sources.push(Box::new(MemSource::new(m.clone(), seq, range.start)));
        }
        for m in sv.buffers.memtables() {
            let wanted = (0..self.opts.partitions)
                .map(|p| sv.buffers.holds(p, m.id()))
                .collect();
            sources.push(Box::new(buffered_source(m, seq, range.start, wanted)));
        }
        // Partitions split keys by hash, not range: a scan merges every
        // partition's levels (what partitioning costs scans).
        for levels in &sv.version.parts {
            for (level, tables) in levels.iter().enumerate() {
                if level == 0 {
                    for t in tables {
                        sources.push(Box::new(TableIter::new(t.clone(), start)?));
                    }
                } else if !tables.is_empty() {
                    sources.push(Box::new(LevelIter::new(tables.clone(), start)?));
                }
            }
        }
        let mut merged = Merge::new(sources);
        let mut read = 0u64;
        let (mut k, mut v) = (Vec::new(), Vec::new());
        while let Some(live) = merged.next_into(&mut k, &mut v)? {
            if !range.before_end(&k) {
                break;
            }
            if !range.after_start(&k) {
                continue;
            }
            if live {
                read += (k.len() + v.len()) as u64;
                if visit(&k, &v) == ControlFlow::Break(()) {
                    break;
                }
            }
        }
        Ok(read)
    }

    /// Checks every table: blocks' checksums, key order, the recorded key
    /// range, every learned window, and the levels' order.
    pub(super) fn verify(&self) -> Result<()> {
        let sv = self.current.read().clone();
        for levels in &sv.version.parts {
            for (level, tables) in levels.iter().enumerate().skip(1) {
                for pair in tables.windows(2) {
                    if let [a, b] = pair {
                        if a.largest() >= b.smallest() {
                            return Err(Error::corruption(
                                format!("level {level}"),
                                format!("tables {} and {} overlap or are out of order", a.id, b.id),
                            ));
                        }
                    }
                }
            }
        }
        for (part, _, t) in sv.version.tables() {
            verify_table(t, part, &self.opts)?;
        }
        Ok(())
    }
}

fn verify_table(t: &Arc<Table>, part: usize, opts: &LsmOptions) -> Result<()> {
    let bad = |why: String| Error::corruption(format!("table {}", t.id), why);
    let mut it = TableIter::sequential(t.clone())?;
    let mut prev: Option<Vec<u8>> = None;
    let mut n = 0u64;
    while let Some((k, _)) = it.peek() {
        if prev.as_deref().is_some_and(|p| p >= k) {
            return Err(bad("keys out of order".into()));
        }
        if opts.partition_of(k) != part {
            return Err(bad(format!(
                "entry {n} belongs to another partition than {part}"
            )));
        }
        if n == 0 && k != t.smallest() {
            return Err(bad("first key differs from the recorded smallest".into()));
        }
        // Every key must be found where the index sends a lookup.
        let found = t.seek(k, false)?;
        if found
            .as_ref()
            .and_then(|(_, b, s)| b.entry(*s))
            .map(|(fk, _)| fk)
            != Some(k)
        {
            return Err(bad(format!("index does not find entry {n}")));
        }
        prev = Some(k.to_vec());
        n += 1;
        it.advance()?;
    }
    if n != t.footer.entries {
        return Err(bad(format!(
            "{n} entries, footer says {}",
            t.footer.entries
        )));
    }
    if prev.as_deref() != Some(t.largest()) {
        return Err(bad("last key differs from the recorded largest".into()));
    }
    Ok(())
}
