//! The write path: a batch is logged as one WAL record and applied under
//! the tree's write lock, then committed outside it, so concurrent writers
//! share syncs (group commit). Writers that arrive together form a write
//! group (`ferrite_core::engine::WriteGroup`): one of them logs and
//! applies all their batches under one acquisition of the lock and
//! commits them with one sync.
//!
//! Invariants: a batch is applied in full or the store is poisoned (the
//! tree in memory may be half-changed, and only recovery from disk may
//! follow); a checkpoint taken while a batch is applied carries the batch
//! over (see `checkpoint.rs`), so it stays all-or-nothing across a crash;
//! no write is acknowledged under `SyncMode::Always` before its record is
//! durable.

use std::ops::ControlFlow;
use std::sync::atomic::Ordering::Relaxed;

use ferrite_core::{BatchOp, KeyRange, Result, SyncMode, WriteBatch};

use super::{Shared, State};
use crate::insert_buffer::hook::{self, Accesses, Host, Turbo};
use crate::shape::Shape;
use crate::shortcut::Variant;
use crate::tree::Tree;

/// The store as the write-miss hook sees it, for one logged batch.
struct HookHost<'a> {
    shared: &'a Shared,
    /// The batch's WAL payload, carried over by a checkpoint the hook
    /// triggers halfway through it.
    logged: Option<&'a [u8]>,
}

impl Host for HookHost<'_> {
    type State = State;

    fn tree(&self) -> &Tree {
        &self.shared.tree
    }

    fn accesses(&self) -> &Accesses {
        &self.shared.counters.access
    }

    fn parts<'s>(&self, st: &'s mut State) -> (&'s mut Shape, &'s mut Turbo) {
        (&mut st.shape, &mut st.turbo)
    }

    fn make_room(&self, st: &mut State) -> Result<()> {
        self.shared.make_room(st, self.logged)
    }
}

impl Shared {
    pub(super) fn write(&self, batch: &WriteBatch) -> Result<()> {
        match &self.group {
            Some(g) => g.write(batch, &|batches| self.write_group(batches)),
            None => self.write_if(batch, &mut |_| Ok(true)).map(drop),
        }
    }

    /// Writes a write group's batches: each logged and applied in turn
    /// under one acquisition of the write lock, then one commit (a sync
    /// under `SyncMode::Always`) for all. One result per batch.
    fn write_group(&self, batches: &[&WriteBatch]) -> Vec<Result<()>> {
        if self.check_poison().is_err() {
            return batches.iter().map(|_| self.check_poison()).collect();
        }
        let mut results = Vec::with_capacity(batches.len());
        let mut last = None;
        let mut bytes = 0;
        {
            let mut st = self.state.write();
            for batch in batches {
                let mut payload = Vec::with_capacity(batch.encoded_len());
                batch.encode(&mut payload);
                results.push(self.log_and_apply(&mut st, batch, &payload).map(|lsn| {
                    last = Some(lsn);
                    bytes += batch.payload_bytes() as u64;
                }));
            }
        }
        self.counters.api.add_written(bytes);
        if let Some(lsn) = last {
            if let Err(e) = self.commit(lsn) {
                self.poison(&e);
                for r in &mut results {
                    if r.is_ok() {
                        *r = self.check_poison();
                    }
                }
            }
        }
        results
    }

    /// Makes the log durable up to `lsn` as the sync mode asks.
    fn commit(&self, lsn: ferrite_wal::Lsn) -> Result<()> {
        match self.sync {
            SyncMode::Always => self.wal.commit(lsn, true),
            _ => self.wal.write_if_over(self.wal_buffer),
        }
    }

    /// Logs and applies `batch` if `cond`, which sees the state under the
    /// write lock, says so; returns whether it did. Nothing is logged or
    /// changed when it does not.
    pub(super) fn write_if(
        &self,
        batch: &WriteBatch,
        cond: &mut dyn FnMut(&State) -> Result<bool>,
    ) -> Result<bool> {
        self.check_poison()?;
        let mut payload = Vec::with_capacity(batch.encoded_len());
        batch.encode(&mut payload);
        let lsn = {
            let mut st = self.state.write();
            if !cond(&st)? {
                return Ok(false);
            }
            self.log_and_apply(&mut st, batch, &payload)?
        };
        self.counters.api.add_written(batch.payload_bytes() as u64);
        let r = self.commit(lsn);
        if let Err(e) = &r {
            self.poison(e);
        }
        r.map(|()| true)
    }

    /// Under the write lock: logs `batch` (its encoding is `payload`) and
    /// applies it to the tree; returns its log position. A failure poisons
    /// the store.
    fn log_and_apply(
        &self,
        st: &mut State,
        batch: &WriteBatch,
        payload: &[u8],
    ) -> Result<ferrite_wal::Lsn> {
        self.check_poison()?;
        st.applied += 1;
        // Live snapshots keep what this batch replaces.
        self.capture(st, batch)?;
        let lsn = match self.wal.append(payload) {
            Ok(l) => l,
            Err(e) => {
                self.poison(&e);
                return Err(e);
            }
        };
        let splits_before = self.shortcut.as_ref().map(|sc| sc.stash.len());
        // A batch is atomic to lookups too: one of several writes runs
        // inside a change (a single write is atomic by its leaf latch;
        // a range delete makes its own).
        let change = (batch.len() > 1).then(|| self.tree.version.change());
        let applied = self.apply(st, batch, Some(payload));
        drop(change);
        if let Err(e) = applied {
            // The tree may be half-changed in memory: only recovery
            // from disk can restore a consistent state.
            self.poison(&e);
            return Err(e);
        }
        if let Some(sc) = &self.shortcut {
            if splits_before != Some(sc.stash.len()) {
                if sc.options().variant == Variant::Sync {
                    // SHORTCUT-SYNC: the rebuild runs here, on the
                    // critical path, with every other operation waiting.
                    if sc.needs_rebuild(&st.shape) {
                        if let Err(e) = sc.rebuild_locked(&self.tree, &st.shape) {
                            log::warn!("shortcut: inline rebuild failed: {e}");
                        } else if !sc.levels_to_relocate().is_empty() {
                            if let Err(e) = self.relayout_locked(st, sc) {
                                self.poison(&e);
                                return Err(e);
                            }
                        }
                    }
                } else {
                    sc.poke(&st.shape);
                }
            }
        }
        Ok(lsn)
    }

    /// Records, for the live snapshots, the values `batch` will replace:
    /// each key's current value, and every pair a range delete removes.
    fn capture(&self, st: &State, batch: &WriteBatch) -> Result<()> {
        if !self.snapshots.is_active() {
            return Ok(());
        }
        for op in batch.ops() {
            match op {
                BatchOp::Put { key, .. } | BatchOp::Delete { key } => {
                    self.snapshots.capture(key, || self.get_locked(st, key))?
                }
                BatchOp::DeleteRange { start, end } => self.snapshots.capture_range(|each| {
                    let range = KeyRange::from_bounds(start.as_slice()..end.as_slice());
                    let mut failed = None;
                    self.scan_locked(st, range, &mut |k, v| match each(k, v) {
                        Ok(()) => ControlFlow::Continue(()),
                        Err(e) => {
                            failed = Some(e);
                            ControlFlow::Break(())
                        }
                    })?;
                    failed.map_or(Ok(()), Err)
                })?,
            }
        }
        Ok(())
    }

    /// One round of `SyncMode::Batched`'s background sync.
    pub(super) fn group_sync(&self) -> Result<()> {
        self.poisoned.check()?;
        self.wal.sync().inspect_err(|e| self.poison(e))
    }

    /// Pages one operation may dirty in the worst case (a split at every
    /// level plus a new root), with room to spare.
    fn headroom(&self, st: &State) -> usize {
        4 * (st.shape.height as usize + 2) + 8
    }

    /// A checkpoint is due when the spill file nears its capacity (then
    /// dirty frames could no longer be evicted) or the WAL its size bound.
    pub(super) fn needs_checkpoint(&self, st: &State) -> bool {
        let pool = &self.tree.pool;
        pool.spilled() + self.headroom(st) >= pool.spill_capacity()
            || self.wal.len() >= self.opts.checkpoint_wal_bytes
    }

    /// Applies a logged batch; `logged` is its WAL payload, carried over if
    /// a checkpoint happens halfway through.
    pub(super) fn apply(
        &self,
        st: &mut State,
        batch: &WriteBatch,
        logged: Option<&[u8]>,
    ) -> Result<()> {
        for op in batch.ops() {
            match op {
                BatchOp::Put { key, value } => self.apply_op(st, key, Some(value), logged)?,
                BatchOp::Delete { key } => {
                    self.counters.deleted.fetch_add(1, Relaxed);
                    self.apply_op(st, key, None, logged)?
                }
                BatchOp::DeleteRange { start, end } => {
                    self.counters.deleted.fetch_add(1, Relaxed);
                    self.apply_delete_range(st, start, end, logged)?
                }
            }
        }
        Ok(())
    }

    /// Applies every record the insert buffer holds to its leaf (before a
    /// compaction reads the leaves).
    pub(super) fn drain_buffer(&self, st: &mut State) -> Result<()> {
        let host = HookHost {
            shared: self,
            logged: None,
        };
        hook::drain(&host, st)
    }

    /// Makes room for one operation's dirty pages.
    pub(super) fn make_room(&self, st: &mut State, logged: Option<&[u8]>) -> Result<()> {
        if self.needs_checkpoint(st) {
            self.checkpoint(st, logged)?;
        }
        Ok(())
    }

    /// A range delete: the buffered records of the leaves it reaches are
    /// applied first (they are newer than the pages), then each leaf is
    /// rebuilt once without the range's keys.
    fn apply_delete_range(
        &self,
        st: &mut State,
        start: &[u8],
        end: &[u8],
        logged: Option<&[u8]>,
    ) -> Result<()> {
        self.make_room(st, logged)?;
        if st.turbo.records().is_some() {
            let host = HookHost {
                shared: self,
                logged,
            };
            let mut leaves = Vec::new();
            self.tree.leaves_in(&st.shape, start, end, &mut leaves)?;
            for leaf in leaves {
                if st.turbo.buffer().is_some_and(|ib| ib.has(leaf)) {
                    hook::apply_buffered(&host, st, leaf)?;
                }
            }
        }
        // One change for the whole range, so a lock-free lookup sees it
        // all or none; a checkpoint between leaves carries the batch over,
        // and replaying a range delete over its own half is harmless.
        let _change = self.tree.version.change();
        let mut from = start.to_vec();
        for _ in 0..=st.shape.page_count {
            self.make_room(st, logged)?;
            match self.tree.delete_range_leaf(&mut st.shape, &from, end)? {
                (_, Some(next)) if next > from => from = next,
                (_, Some(_)) => {
                    return Err(ferrite_core::Error::corruption(
                        "leaf fences",
                        "a leaf's high fence is not above the keys it holds",
                    ))
                }
                (_, None) => return Ok(()),
            }
        }
        Err(ferrite_core::Error::corruption(
            "leaf chain",
            "a range delete reached more leaves than the file holds",
        ))
    }

    /// One write: to the tree, or with an insert buffer through the
    /// write-miss hook, which may buffer it instead of loading its leaf.
    fn apply_op(
        &self,
        st: &mut State,
        key: &[u8],
        value: Option<&[u8]>,
        logged: Option<&[u8]>,
    ) -> Result<()> {
        self.make_room(st, logged)?;
        if st.turbo.configured() {
            let host = HookHost {
                shared: self,
                logged,
            };
            return hook::write(&host, st, key, value);
        }
        let mut path = Vec::with_capacity(8);
        let leaf = self.tree.find_leaf(&st.shape, key, &mut path)?;
        self.counters
            .access
            .count_write(self.tree.pool.is_resident(leaf));
        match value {
            Some(v) => self.tree.put_at(&mut st.shape, &path, leaf, key, v),
            None => self.tree.delete(&mut st.shape, key).map(drop),
        }
    }
}
