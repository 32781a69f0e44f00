//! Reads: a lookup goes merged filter → batch array → leaf (its ADB, then
//! the page through sequencer, read cache or device), and a value-log
//! location is resolved last. A scan merges the buffered pairs, a chunk
//! at a time, over the tree's leaves, so it never holds the buffers'
//! locks while it reads pages.

use std::ops::{Bound, ControlFlow};
use std::sync::atomic::Ordering;

use ferrite_core::{CommitView, KeyRange, Result, ScanVisitor, WriteCheck};

use super::{Inner, OVERLAY_CHUNK};
use crate::merged_filter::MergedFilter;
use crate::pair::{merge_sorted, Pair, Val};
use crate::tree::Tree;

/// A condition on the state a write would apply to: it reads keys and
/// ranges as they are at that instant (the compare of a compare-and-swap,
/// a transaction's validation).
pub(super) type Cond<'a> = WriteCheck<'a>;

/// The lock a write holds while it applies: the merged filter's (ZKV),
/// or the tree's (the baselines, and ZKV without the filter).
pub(super) enum Locked<'a> {
    Buffers(&'a MergedFilter),
    Tree(&'a Tree),
}

/// What a conditional write's check reads: the store with the write lock
/// `view` held.
pub(super) struct CheckView<'a> {
    pub(super) inner: &'a Inner,
    pub(super) view: &'a Locked<'a>,
}

impl CommitView for CheckView<'_> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.inner.get_locked(self.view, key)
    }

    fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        for p in self.inner.pairs_locked(self.view, range)? {
            let value = self.inner.resolve(p.val.clone())?.unwrap_or_default();
            if visit(p.key(), &value).is_break() {
                break;
            }
        }
        Ok(())
    }
}

impl Inner {
    pub(super) fn resolve(&self, v: Val) -> Result<Option<Vec<u8>>> {
        match v {
            Val::Put(b) => Ok(Some(b.as_slice().to_vec())),
            Val::Vlog(loc) => self.vlog.lock().read(loc).map(Some),
            Val::Del => Ok(None),
        }
    }

    pub(super) fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if self.opts.buffers_writes() {
            if let Some(v) = self.mf.lock().get(key) {
                self.c.mf_hits.fetch_add(1, Ordering::Relaxed);
                return self.resolve(v);
            }
            let arr = self.batches.read().clone();
            if let Some(v) = arr.get(key) {
                self.c.batch_hits.fetch_add(1, Ordering::Relaxed);
                return self.resolve(v);
            }
        }
        let v = self.tree.read().get(key, &self.ctx())?;
        match v {
            Some(v) => self.resolve(v),
            None => Ok(None),
        }
    }

    /// The value of `key` with the write lock `view` held.
    pub(super) fn get_locked(&self, view: &Locked<'_>, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let v = match view {
            Locked::Buffers(mf) => match mf.get(key) {
                Some(v) => Some(v),
                None => match self.batches.read().get(key) {
                    Some(v) => Some(v),
                    None => self.tree.read().get(key, &self.ctx())?,
                },
            },
            Locked::Tree(t) => t.get(key, &self.ctx())?,
        };
        v.map_or(Ok(None), |v| self.resolve(v))
    }

    /// Every live pair of `range` (values unresolved), sorted, with the
    /// write lock `view` held.
    pub(super) fn pairs_locked(&self, view: &Locked<'_>, range: KeyRange<'_>) -> Result<Vec<Pair>> {
        if range.is_empty() {
            return Ok(Vec::new());
        }
        let (lo, hi) = (range.start, range.end);
        let mut tree_pairs = Vec::new();
        let mut collect = |p: Pair| {
            tree_pairs.push(p);
            Ok(ControlFlow::Continue(()))
        };
        let buffered = match view {
            Locked::Buffers(mf) => {
                self.tree.read().scan(lo, hi, &self.ctx(), &mut collect)?;
                let arr = self.batches.read().range(lo, hi, usize::MAX);
                merge_sorted(arr, mf.range(lo, hi, usize::MAX))
            }
            Locked::Tree(t) => {
                t.scan(lo, hi, &self.ctx(), &mut collect)?;
                Vec::new()
            }
        };
        let mut all = merge_sorted(tree_pairs, buffered);
        all.retain(|p| p.val != Val::Del);
        Ok(all)
    }

    /// Up to [`OVERLAY_CHUNK`] buffered pairs from `lo` on, merged (filter
    /// newest), and the key up to which they are complete (`None`: to `end`).
    fn overlay_chunk(&self, lo: Bound<&[u8]>, end: Bound<&[u8]>) -> (Vec<Pair>, Option<Vec<u8>>) {
        if !self.opts.buffers_writes() {
            return (Vec::new(), None);
        }
        let mf = self.mf.lock().range(lo, end, OVERLAY_CHUNK);
        let arr = self.batches.read().clone().range(lo, end, OVERLAY_CHUNK);
        let mut upto: Option<Vec<u8>> = None;
        for c in [&mf, &arr] {
            if c.len() >= OVERLAY_CHUNK {
                if let Some(last) = c.last() {
                    if upto.as_ref().is_none_or(|u| last.key() < u.as_slice()) {
                        upto = Some(last.key().to_vec());
                    }
                }
            }
        }
        let mut merged = crate::pair::merge_sorted(arr, mf);
        if let Some(u) = &upto {
            merged.retain(|p| p.key() <= u.as_slice());
        }
        (merged, upto)
    }

    /// Merges the tree with the buffers in rounds: a bounded chunk of
    /// buffered pairs is fetched without the tree lock (the lock order puts
    /// the buffers first), then the tree is scanned up to where that chunk
    /// is complete, so a short scan never copies the whole buffer.
    pub(super) fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<u64> {
        self.scan_dir(range, false, visit)
    }

    /// As [`Inner::scan`], in descending key order: a bounded chunk of
    /// buffered pairs from the top, then the tree's leaves down to where
    /// that chunk is complete.
    pub(super) fn scan_rev(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<u64> {
        self.scan_dir(range, true, visit)
    }

    /// [`Inner::scan`] ascending, or descending if `rev`. Each round moves
    /// the bound the scan starts from (the range's start ascending, its
    /// end descending) past the keys it merged.
    fn scan_dir(&self, range: KeyRange<'_>, rev: bool, visit: &mut ScanVisitor<'_>) -> Result<u64> {
        let (mut from, fixed) = if rev {
            (range.end.map(<[u8]>::to_vec), range.start)
        } else {
            (range.start.map(<[u8]>::to_vec), range.end)
        };
        // Whether buffered pair `o` comes before tree pair `p` in the
        // scan's order.
        let ahead = |o: &Pair, p: &Pair| {
            if rev {
                o.key() > p.key()
            } else {
                o.key() < p.key()
            }
        };
        let mut bytes = 0u64;
        let mut emit = |p: &Pair, bytes: &mut u64| -> Result<ControlFlow<()>> {
            match self.resolve(p.val.clone())? {
                Some(v) => {
                    *bytes += (p.key().len() + v.len()) as u64;
                    Ok(visit(p.key(), &v))
                }
                None => Ok(ControlFlow::Continue(())),
            }
        };
        loop {
            let from_ref = from.as_ref().map(Vec::as_slice);
            let (chunk, reach) = if rev {
                self.overlay_chunk_rev(fixed, from_ref)
            } else {
                self.overlay_chunk(from_ref, fixed)
            };
            let far = match &reach {
                Some(r) => Bound::Included(r.as_slice()),
                None => fixed,
            };
            let mut over = chunk.into_iter().peekable();
            let mut stop = false;
            {
                let tree = self.tree.read();
                let mut each = |p: Pair| {
                    while let Some(o) = over.next_if(|o| ahead(o, &p)) {
                        if emit(&o, &mut bytes)?.is_break() {
                            stop = true;
                            return Ok(ControlFlow::Break(()));
                        }
                    }
                    let newer = over.next_if(|o| o.key() == p.key());
                    let cf = emit(newer.as_ref().unwrap_or(&p), &mut bytes)?;
                    stop = cf.is_break();
                    Ok(cf)
                };
                if rev {
                    tree.scan_rev(far, from_ref, &self.ctx(), &mut each)?;
                } else {
                    tree.scan(from_ref, far, &self.ctx(), &mut each)?;
                }
            }
            if !stop {
                for o in over {
                    if emit(&o, &mut bytes)?.is_break() {
                        stop = true;
                        break;
                    }
                }
            }
            match reach {
                Some(r) if !stop => from = Bound::Excluded(r),
                _ => return Ok(bytes),
            }
        }
    }
}

impl Inner {
    /// Up to [`OVERLAY_CHUNK`] buffered pairs from `hi` down, merged
    /// (filter newest), in descending order, and the key down to which
    /// they are complete (`None`: to `start`).
    fn overlay_chunk_rev(
        &self,
        start: Bound<&[u8]>,
        hi: Bound<&[u8]>,
    ) -> (Vec<Pair>, Option<Vec<u8>>) {
        if !self.opts.buffers_writes() {
            return (Vec::new(), None);
        }
        let mut mf = self.mf.lock().range_rev(start, hi, OVERLAY_CHUNK);
        let mut arr = self
            .batches
            .read()
            .clone()
            .range_rev(start, hi, OVERLAY_CHUNK);
        let mut downto: Option<Vec<u8>> = None;
        for c in [&mf, &arr] {
            if c.len() >= OVERLAY_CHUNK {
                if let Some(last) = c.last() {
                    if downto.as_ref().is_none_or(|d| last.key() > d.as_slice()) {
                        downto = Some(last.key().to_vec());
                    }
                }
            }
        }
        mf.reverse();
        arr.reverse();
        let mut merged = merge_sorted(arr, mf);
        if let Some(d) = &downto {
            merged.retain(|p| p.key() >= d.as_slice());
        }
        merged.reverse();
        (merged, downto)
    }
}
