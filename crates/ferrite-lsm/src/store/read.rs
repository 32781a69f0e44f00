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
use super::{Inner, SuperVersion};
use crate::merge::{LevelIter, MemSource, Merge, Source};
use crate::options::LsmOptions;
use crate::table::bloom::Bloom;
use crate::table::{Found, Table, TableIter};

/// One consistent view of the tree: a `SuperVersion` read at a sequence
/// number (the store's current one, or a snapshot's).
pub(super) struct View<'a> {
    pub sv: &'a SuperVersion,
    pub seq: u64,
}

impl Inner {
    /// The view current now.
    pub(super) fn current_view(&self) -> (Arc<SuperVersion>, u64) {
        let seq = self.visible.load(Ordering::Acquire);
        (self.current.read().clone(), seq)
    }

    pub(super) fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let (sv, seq) = self.current_view();
        self.get_at(&View { sv: &sv, seq }, key)
    }

    /// `key`'s value in `view`: the newest version in memtables, flush
    /// buffer, tables, unless a range delete newer than it covers it.
    pub(super) fn get_at(&self, view: &View<'_>, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let (sv, seq) = (view.sv, view.seq);
        let dels = sv.range_dels(seq);
        let live = |found_seq: u64, v: Option<Vec<u8>>| match &dels {
            Some(d) if d.covers(key, found_seq) => None,
            _ => v,
        };
        let hash = Bloom::hash(key);
        if let Some((s, v)) = sv.mem.get_entry(key, hash, seq) {
            return Ok(live(s, v));
        }
        for m in &sv.imms {
            if let Some((s, v)) = m.get_entry(key, hash, seq) {
                return Ok(live(s, v));
            }
        }
        let part = self.opts.partition_of(key);
        for m in sv.buffers.pending(part) {
            if let Some((s, v)) = m.get_entry(key, hash, seq) {
                return Ok(live(s, v));
            }
        }
        Ok(match sv.version.get(part, key, hash)? {
            Some((Found::Value(v), max_seq)) => live(max_seq, Some(v)),
            Some((Found::Deleted, _)) | None => None,
        })
    }

    pub(super) fn scan(
        &self,
        range: KeyRange<'_>,
        rev: bool,
        visit: &mut ScanVisitor<'_>,
    ) -> Result<u64> {
        let (sv, seq) = self.current_view();
        self.scan_at(&View { sv: &sv, seq }, range, rev, visit)
    }

    /// Visits `range` in `view`, ascending or (`rev`) descending: every
    /// source merged newest first, range deletes applied.
    pub(super) fn scan_at(
        &self,
        view: &View<'_>,
        range: KeyRange<'_>,
        rev: bool,
        visit: &mut ScanVisitor<'_>,
    ) -> Result<u64> {
        let (sv, seq) = (view.sv, view.seq);
        // Sources start at the range's start (its end, going down).
        let from = if rev { range.end } else { range.start };
        let mem = |m: Arc<crate::memtable::Memtable>| -> Box<dyn Source> {
            if rev {
                Box::new(MemSource::rev(m, seq, from, None))
            } else {
                Box::new(MemSource::new(m, seq, from))
            }
        };
        let mut sources: Vec<Box<dyn Source>> = Vec::new();
        sources.push(mem(sv.mem.clone()));
        for m in &sv.imms {
            sources.push(mem(m.clone()));
        }
        for m in sv.buffers.memtables() {
            let wanted = (0..self.opts.partitions)
                .map(|p| sv.buffers.holds(p, m.id()))
                .collect();
            sources.push(Box::new(buffered_source(m, seq, from, wanted, rev)));
        }
        let start = match range.start {
            Bound::Included(k) | Bound::Excluded(k) => Some(k),
            Bound::Unbounded => None,
        };
        // Partitions split keys by hash, not range: a scan merges every
        // partition's levels (what partitioning costs scans).
        for (p, levels) in sv.version.parts.iter().enumerate() {
            // L0 as its sorted runs, newest first: a flush's pieces are
            // read end to end, opening only the one a seek lands in.
            let runs = sv.version.l0_runs(p);
            let l1_on = levels.iter().skip(1);
            for tables in runs.iter().chain(l1_on) {
                if !tables.is_empty() {
                    sources.push(if rev {
                        Box::new(LevelIter::new_rev(tables.clone(), range.end)?)
                    } else {
                        Box::new(LevelIter::new(tables.clone(), start)?)
                    });
                }
            }
        }
        let dels = sv.range_dels(seq);
        let mut merged = if rev {
            Merge::new_rev(sources)
        } else {
            Merge::new(sources)
        };
        let mut read = 0u64;
        let (mut k, mut v) = (Vec::new(), Vec::new());
        while let Some((live, found_seq)) = merged.next_into(&mut k, &mut v)? {
            let (inside, past) = if rev {
                (range.before_end(&k), !range.after_start(&k))
            } else {
                (range.after_start(&k), !range.before_end(&k))
            };
            if past {
                break;
            }
            if !inside || !live || dels.as_ref().is_some_and(|d| d.covers(&k, found_seq)) {
                continue;
            }
            read += (k.len() + v.len()) as u64;
            if visit(&k, &v) == ControlFlow::Break(()) {
                break;
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
