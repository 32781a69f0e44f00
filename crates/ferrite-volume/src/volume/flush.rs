//! Syncs: the data log, then the map's log up to where it stood before
//! the data sync (see the invariants in `mod.rs`); flushes group-commit,
//! checkpoint the map when its log is long, and free the segments that
//! drained.

use std::sync::atomic::Ordering;

use super::Inner;
use crate::error::Result;

impl Inner {
    /// Syncs the data log, then the map's log (see the module invariants).
    pub(super) fn sync_all(&self) -> Result<()> {
        self.check_poison()?;
        // As in `flush`: the map up to where it ends now, once the data
        // behind those entries is synced; writers go on meanwhile.
        let upto = {
            let _sp = self.space.lock();
            self.map.log_position()
        };
        self.data.sync().map_err(|e| self.poisoned(e.into()))?;
        self.map.sync_to(upto).map_err(|e| self.poisoned(e))
    }

    pub(crate) fn flush(&self) -> Result<()> {
        self.check_poison()?;
        let ticket = self.flush_requests.fetch_add(1, Ordering::SeqCst) + 1;
        let _one = self.flush_lock.lock();
        if self.flushes_cover.load(Ordering::SeqCst) >= ticket {
            // A flush that began after this request arrived covered it.
            return Ok(());
        }
        self.check_poison()?;
        // Every request that arrived so far, this one included.
        let covers = self.flush_requests.load(Ordering::SeqCst);
        self.counters.flushes.fetch_add(1, Ordering::Relaxed);
        // Map entries go in under the space lock, after their data was
        // written: every entry before `upto` has its data on the device,
        // so syncing the data log makes them safe to sync; entries after
        // `upto` (writes landing meanwhile) stay off the device. Writers
        // go on while the two syncs run. The segments draining now lost
        // their last reference in entries before `upto`.
        let (draining, upto) = {
            let sp = self.space.lock();
            (sp.table.draining(), self.map.log_position())
        };
        self.data.sync().map_err(|e| self.poisoned(e.into()))?;
        self.map.sync_to(upto).map_err(|e| self.poisoned(e))?;
        if self.map.log_bytes() > self.opts.checkpoint_log_bytes {
            // A checkpoint writes the whole map: no entry may come in
            // between the data sync and it.
            let _sp = self.space.lock();
            self.data.sync().map_err(|e| self.poisoned(e.into()))?;
            self.map.checkpoint().map_err(|e| self.poisoned(e))?;
        }
        if !draining.is_empty() {
            // No read that found an entry into these segments is still
            // reading them once the write side is ours.
            let _gate = self.reuse_gate.write();
            let mut sp = self.space.lock();
            sp.table.release(&draining);
            // A pass that found no victim while these were draining saw
            // a fuller log than there is now: a writer waiting for room
            // must not take its verdict for "full".
            sp.stuck = false;
            self.counters
                .reclaimed_segments
                .fetch_add(draining.len() as u64, Ordering::Relaxed);
            self.space_changed.notify_all();
        }
        self.flushes_cover.store(covers, Ordering::SeqCst);
        Ok(())
    }
}
