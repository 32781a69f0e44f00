//! Reads: a lookup goes merged filter → batch array → leaf (its ADB, then
//! the page through sequencer, read cache or device), and a value-log
//! location is resolved last. A scan merges the buffered pairs, a chunk
//! at a time, over the tree's leaves, so it never holds the buffers'
//! locks while it reads pages.

use std::ops::{Bound, ControlFlow};
use std::sync::atomic::Ordering;

use ferrite_core::{KeyRange, Result, ScanVisitor};

use super::{Inner, OVERLAY_CHUNK};
use crate::pair::{Pair, Val};

impl Inner {
    fn resolve(&self, v: Val) -> Result<Option<Vec<u8>>> {
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
        let end = range.end;
        let mut lo: Bound<Vec<u8>> = match range.start {
            Bound::Included(k) => Bound::Included(k.to_vec()),
            Bound::Excluded(k) => Bound::Excluded(k.to_vec()),
            Bound::Unbounded => Bound::Unbounded,
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
            let lo_ref = match &lo {
                Bound::Included(k) => Bound::Included(k.as_slice()),
                Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
                Bound::Unbounded => Bound::Unbounded,
            };
            let (chunk, upto) = self.overlay_chunk(lo_ref, end);
            let hi = match &upto {
                Some(u) => Bound::Included(u.as_slice()),
                None => end,
            };
            let mut over = chunk.into_iter().peekable();
            let mut stop = false;
            {
                let tree = self.tree.read();
                tree.scan(lo_ref, hi, &self.ctx(), &mut |p| {
                    while let Some(o) = over.next_if(|o| o.key() < p.key()) {
                        if emit(&o, &mut bytes)?.is_break() {
                            stop = true;
                            return Ok(ControlFlow::Break(()));
                        }
                    }
                    let newer = over.next_if(|o| o.key() == p.key());
                    let cf = emit(newer.as_ref().unwrap_or(&p), &mut bytes)?;
                    stop = cf.is_break();
                    Ok(cf)
                })?;
            }
            if !stop {
                for o in over {
                    if emit(&o, &mut bytes)?.is_break() {
                        stop = true;
                        break;
                    }
                }
            }
            match upto {
                Some(u) if !stop => lo = Bound::Excluded(u),
                _ => return Ok(bytes),
            }
        }
    }
}
