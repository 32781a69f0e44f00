//! Compaction's work (its policy is `crate::compaction`): a background
//! thread watches for a quiet store after many deletes, applies what the
//! insert buffer holds (TurboIndex), reads the live pairs under the shared
//! lock, and when the policy says so rebuilds the
//! tree under the write lock — the pairs bulk-loaded into fresh page ids
//! past the file's end, every old id freed — then checkpoints. The
//! checkpoint settles the old ids as clean, and clean ids are holes in
//! the page file (see `checkpoint`), so their space goes back to the file
//! system.
//!
//! Crash safety: the new pages lie past the durable checkpoint's page
//! count and no old page is written, so until the checkpoint's meta page
//! lands the durable tree and its WAL are as they were; after it, the new
//! tree is the durable one. Readers see the old tree or the new: the
//! rebuild is one structure change. A failure halfway poisons the store,
//! as any failed change to the tree does.

use std::ops::{Bound, ControlFlow};
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::time::{Duration, Instant};

use ferrite_core::{KeyRange, Result};

use super::{Shared, State};
use crate::compaction;
use crate::page::{self, KIND_LEAF};
use crate::shape::Shape;
use crate::tree::max_key_len;

/// How often the thread looks at the store.
const TICK: Duration = Duration::from_millis(250);

/// Keys and values in key order.
type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// Bytes of pairs read per hold of the shared lock.
const READ_CHUNK: u64 = 1 << 20;

impl Shared {
    /// The compaction thread: until the store stops, wakes every
    /// [`TICK`] (or when unparked to stop) and compacts a store that the
    /// policy finds quiet after enough deletes and mostly empty.
    pub(super) fn compact_loop(&self) {
        let mut seen = u64::MAX;
        let mut quiet_since = Instant::now();
        let mut deletes_judged = self.counters.deleted.load(Relaxed);
        while !self.stop.load(Acquire) {
            std::thread::park_timeout(TICK);
            if self.stop.load(Acquire) || self.poisoned.is_set() {
                continue;
            }
            let applied = self.state.read().applied;
            if applied != seen {
                seen = applied;
                quiet_since = Instant::now();
                continue;
            }
            let deletes = self.counters.deleted.load(Relaxed);
            if !compaction::worth_a_look(quiet_since.elapsed(), deletes - deletes_judged) {
                continue;
            }
            deletes_judged = deletes;
            if let Err(e) = self.compact_if_due(applied) {
                log::warn!("btree: compaction failed: {e}");
            }
        }
    }

    /// Rebuilds the tree if it is mostly empty and nothing was written
    /// since `applied` batches; returns whether it did.
    pub(super) fn compact_if_due(&self, applied: u64) -> Result<bool> {
        if self.state.read().turbo.records().is_some() {
            // Buffered records are newer than the leaves: applied first,
            // so the leaves hold everything.
            let mut st = self.state.write();
            if st.applied != applied {
                return Ok(false);
            }
            self.drain_buffer(&mut st).inspect_err(|e| self.poison(e))?;
        }
        let Some(pairs) = self.live_pairs(applied)? else {
            return Ok(false);
        };
        let mut st = self.state.write();
        self.check_poison()?;
        if st.applied != applied || st.turbo.records().is_some() {
            return Ok(false);
        }
        self.rebuild(&mut st, pairs)
            .inspect_err(|e| self.poison(e))?;
        self.checkpoint(&mut st, None)?;
        self.counters.compactions.fetch_add(1, Relaxed);
        Ok(true)
    }

    /// The tree's pairs, if it is worth rebuilding and nothing is
    /// written meanwhile. Read [`READ_CHUNK`] bytes of pairs per hold of
    /// the shared lock, so a writer that arrives waits for one chunk; a
    /// write between chunks (the batch count moved) abandons the read.
    fn live_pairs(&self, applied: u64) -> Result<Option<Pairs>> {
        let ps = self.tree.page_size as u64;
        let pages = tree_pages(&self.state.read().shape);
        if !compaction::worth_rebuilding(0, pages, ps) {
            return Ok(None);
        }
        // Past this many bytes the tree is not worth rebuilding, so the
        // read stops there.
        let limit =
            compaction::MAX_LIVE_BYTES.min((compaction::MAX_FILL * (pages * ps) as f64) as u64);
        let mut pairs: Pairs = Vec::new();
        let mut bytes = 0u64;
        let mut after: Option<Vec<u8>> = None;
        loop {
            let st = self.state.read();
            if st.applied != applied || st.turbo.records().is_some() {
                // Written meanwhile: judged again when quiet.
                return Ok(None);
            }
            let range = match &after {
                None => KeyRange::all(),
                Some(k) => KeyRange::from_bounds((Bound::Excluded(k.as_slice()), Bound::Unbounded)),
            };
            let mut chunk = 0u64;
            let mut next = None;
            self.scan_locked(&st, range, &mut |k, v| {
                let n = (k.len() + v.len()) as u64;
                bytes += n;
                chunk += n;
                pairs.push((k.to_vec(), v.to_vec()));
                if bytes > limit {
                    return ControlFlow::Break(());
                }
                if chunk >= READ_CHUNK {
                    next = Some(k.to_vec());
                    return ControlFlow::Break(());
                }
                ControlFlow::Continue(())
            })?;
            drop(st);
            if bytes > limit {
                return Ok(None);
            }
            match next {
                Some(k) => after = Some(k),
                None => break,
            }
        }
        Ok(compaction::worth_rebuilding(bytes, pages, ps).then_some(pairs))
    }

    /// Replaces the tree by one bulk-loaded from `pairs` (ascending, as a
    /// scan returns them) in ids past the file's end, and frees every old
    /// id. The caller checkpoints next.
    fn rebuild(&self, st: &mut State, pairs: Pairs) -> Result<()> {
        let tree = &self.tree;
        let _change = tree.version.change();
        let old = st.shape.page_count;
        let mut shape = Shape {
            root: st.shape.root,
            height: 0,
            page_count: old,
            free: Vec::new(),
            clean: Vec::new(),
            spare: Vec::new(),
            level_runs: Vec::new(),
        };
        let max_key = max_key_len(tree.page_size);
        let loaded = crate::bulk_load::load(
            tree,
            &mut shape,
            &mut pairs.into_iter(),
            compaction::REBUILD_FILL,
            max_key,
        )?;
        if loaded == 0 {
            let id = tree.grow(&mut shape, 1);
            let p = tree.pool.create(id)?;
            page::init(&mut p.write(), id, KIND_LEAF, 0);
            shape.root = id;
            shape.height = 0;
        }
        tree.note_growth(&shape);
        // Nothing reads an old page again once the new root is published:
        // their frames are free at once (but for a lookup holding one now,
        // whose stale frame is harmless: its id is free).
        for id in 2..old {
            tree.pool.forget(id);
        }
        shape.free = (2..old).collect();
        st.shape = shape;
        tree.publish(&st.shape);
        *tree.level_counts.lock() = None;
        self.fill.lock().clear();
        if let Some(sc) = &self.shortcut {
            sc.stash.take();
            sc.rebuild_locked(tree, &st.shape)?;
        }
        Ok(())
    }
}

/// Page ids the tree holds (its nodes and overflow chains): all but the
/// meta pages, the free ids and the spare runs.
fn tree_pages(shape: &Shape) -> u64 {
    let spare: u64 = shape.spare.iter().map(|&(_, n)| n).sum();
    shape
        .page_count
        .saturating_sub(2 + (shape.free.len() + shape.clean.len()) as u64 + spare)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_pages_leave_out_meta_free_and_spare_ids() {
        let shape = Shape {
            root: 2,
            height: 1,
            page_count: 100,
            free: vec![3, 4],
            clean: vec![9, 8, 7],
            spare: vec![(50, 10)],
            level_runs: Vec::new(),
        };
        assert_eq!(tree_pages(&shape), 100 - 2 - 5 - 10);
    }
}
