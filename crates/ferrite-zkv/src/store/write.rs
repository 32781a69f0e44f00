//! The write path: admission (a write takes zones only while reclamation
//! can keep the floor free), the WAL append and the merged filter under
//! the WAL instance, so log order is apply order; the commit per
//! `SyncMode`; then maintenance: inserting evicted batches into the tree
//! while the zones allow, evicting the filter's coldest nodes, checkpoints
//! when the WAL has grown, reclamation when free zones run short. Under
//! `SyncMode::Always` writers that arrive together form a write group
//! (`ferrite_core::engine::WriteGroup`): one of them admits, logs and
//! applies all their batches, then commits them with one sync and runs
//! maintenance once.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use ferrite_core::{BatchOp, Error, KeyRange, Result, SyncMode, WriteBatch};

use super::read::{CheckView, Cond, Locked};
use super::Inner;
use crate::batch_array::BatchArray;
use crate::gc_policy::{self};
use crate::options::Variant;
use crate::pair::{Bytes, Pair, Val};
use crate::zone_wal::Commit;

impl Inner {
    pub(super) fn value_of(&self, key: &[u8], value: &[u8]) -> Result<Val> {
        if value.len() > self.opts.inline_value_max {
            let loc = self.vlog.lock().append(key, value, &self.io.space)?;
            Ok(Val::Vlog(loc))
        } else {
            Ok(Val::Put(Bytes::new(value)))
        }
    }

    pub(super) fn release(&self, v: Option<Val>) {
        if let Some(Val::Vlog(loc)) = v {
            self.vlog.lock().release(loc, &self.io.space);
        }
    }

    /// Applies one buffered pair to the first buffer of this variant.
    pub(super) fn apply_pair(&self, pair: Pair) -> Result<()> {
        if self.opts.buffers_writes() {
            let old = self.mf.lock().insert(pair);
            self.release(old);
            Ok(())
        } else if self.opts.variant == Variant::Zkv {
            // Without the merged filter every write is a batch of one.
            self.tree
                .write()
                .insert_batch(std::slice::from_ref(&pair), &self.ctx())
        } else {
            self.tree.write().apply_baseline(pair, &self.ctx())
        }
    }

    /// Applies a batch under one hold of the first buffer's lock (the
    /// tree's, for the baselines), so a reader sees all of it or none of
    /// it, if `cond`, which reads the state under that lock, says so;
    /// returns whether it did. `order` runs under the lock (it takes the
    /// batch's WAL sequence number), so the log orders every key's writes
    /// as memory does; it does not run when `cond` refuses. A range delete
    /// becomes a delete of every key the range holds then; live snapshots
    /// get the values the batch replaces first.
    pub(super) fn apply_batch(
        &self,
        batch: &WriteBatch,
        cond: &mut Cond<'_>,
        order: &mut dyn FnMut(),
    ) -> Result<bool> {
        let mut pairs = Vec::with_capacity(batch.len());
        for op in batch.ops() {
            match op {
                BatchOp::Put { key, value } => {
                    pairs.push(Some(Pair::new(key, self.value_of(key, value)?)))
                }
                BatchOp::Delete { key } => pairs.push(Some(Pair::new(key, Val::Del))),
                // Expanded under the lock, where the keys it holds are known.
                BatchOp::DeleteRange { .. } => pairs.push(None),
            }
        }
        let unused = |pairs: Vec<Option<Pair>>| {
            for p in pairs.into_iter().flatten() {
                self.release(Some(p.val));
            }
        };
        if self.opts.buffers_writes() {
            let replaced: Vec<Option<Val>> = {
                let mut mf = self.mf.lock();
                let view = Locked::Buffers(&mf);
                if !cond(&CheckView {
                    inner: self,
                    view: &view,
                })? {
                    drop(mf);
                    unused(pairs);
                    return Ok(false);
                }
                let pairs = self.expand(batch, pairs, &view)?;
                order();
                self.count_applied(&pairs);
                pairs.into_iter().map(|p| mf.insert(p)).collect()
            };
            replaced.into_iter().for_each(|v| self.release(v));
            return Ok(true);
        }
        let mut tree = self.tree.write();
        let pairs = {
            let view = Locked::Tree(&tree);
            if !cond(&CheckView {
                inner: self,
                view: &view,
            })? {
                drop(tree);
                unused(pairs);
                return Ok(false);
            }
            self.expand(batch, pairs, &view)?
        };
        order();
        self.count_applied(&pairs);
        let ctx = self.ctx();
        for p in pairs {
            if self.opts.variant == Variant::Zkv {
                tree.insert_batch(std::slice::from_ref(&p), &ctx)?;
            } else {
                tree.apply_baseline(p, &ctx)?;
            }
        }
        Ok(true)
    }

    /// Counts a batch about to apply, for the idle pass.
    fn count_applied(&self, pairs: &[Pair]) {
        let deletes = pairs.iter().filter(|p| matches!(p.val, Val::Del)).count();
        self.c.applied.fetch_add(1, Ordering::Relaxed);
        self.c.deletes.fetch_add(deletes as u64, Ordering::Relaxed);
    }

    /// The batch's pairs with each range delete replaced by deletes of the
    /// keys its range holds: those in `view`, and those the batch put
    /// before it. Captures, for live snapshots, the values the pairs
    /// replace.
    fn expand(
        &self,
        batch: &WriteBatch,
        pairs: Vec<Option<Pair>>,
        view: &Locked<'_>,
    ) -> Result<Vec<Pair>> {
        let mut out = Vec::with_capacity(pairs.len());
        for (op, pair) in batch.ops().iter().zip(pairs) {
            match (op, pair) {
                (_, Some(p)) => {
                    self.snapshots
                        .capture(p.key(), || self.get_locked(view, p.key()))?;
                    out.push(p);
                }
                (BatchOp::DeleteRange { start, end }, None) => {
                    let inside = |k: &[u8]| start.as_slice() <= k && k < end.as_slice();
                    let earlier: Vec<Vec<u8>> = out
                        .iter()
                        .filter(|p| inside(p.key()) && !matches!(p.val, Val::Del))
                        .map(|p| p.key().to_vec())
                        .collect();
                    let range = KeyRange::from_bounds(start.as_slice()..end.as_slice());
                    for p in self.pairs_locked(view, range)? {
                        self.snapshots
                            .capture(p.key(), || self.resolve(p.val.clone()))?;
                        out.push(Pair::new(p.key(), Val::Del));
                    }
                    out.extend(earlier.iter().map(|k| Pair::new(k, Val::Del)));
                }
                (_, None) => {}
            }
        }
        Ok(out)
    }

    /// Refuses, before anything changes, a write the device may not have
    /// the zones for (see [`gc_policy::admission_floor`] and
    /// [`ZoneSpace::admit`]), once reclamation has had its chance to free
    /// them. An admitted write must end with [`ZoneSpace::finish`].
    fn admit(&self, adds: bool) -> Result<()> {
        let floor =
            gc_policy::admission_floor(adds, self.opts.gc_reserve_zones, self.opts.flushers);
        let need = {
            let mut space = self.io.space.lock();
            if space.admit(floor) {
                return Ok(());
            }
            space.admission_need(floor)
        };
        let r = self.gc(need);
        self.poison_on(r)?;
        let mut space = self.io.space.lock();
        if space.admit(floor) {
            return Ok(());
        }
        let room = space.room();
        drop(space);
        self.c.refused.fetch_add(1, Ordering::Relaxed);
        Err(Error::StoreFull {
            reason: format!(
                "{room} data zones are free and {floor} are kept for reclamation{}; \
                 delete data to make room",
                if adds { " and deletes" } else { "" }
            ),
        })
    }

    pub(super) fn write(&self, batch: &WriteBatch) -> Result<()> {
        match &self.group {
            Some(g) => g.write(batch, &|batches| self.write_group(batches)),
            None => self.write_if(batch, &mut |_| Ok(true)).map(drop),
        }
    }

    /// Writes a write group's batches: each admitted, logged and applied
    /// in turn, then one commit (one sync under `SyncMode::Always`) and
    /// one round of maintenance for all. One result per batch.
    fn write_group(&self, batches: &[&WriteBatch]) -> Vec<Result<()>> {
        if self.check().is_err() {
            return batches.iter().map(|_| self.check()).collect();
        }
        let mut results = Vec::with_capacity(batches.len());
        let mut last = None;
        let mut admitted = 0;
        for batch in batches {
            let adds = adds(batch);
            if gc_policy::takes_zones(adds, self.opts.buffers_writes()) {
                if let Err(e) = self.admit(adds) {
                    results.push(Err(e));
                    continue;
                }
                admitted += 1;
            }
            let r = self
                .check()
                .and_then(|()| self.log_and_apply(batch, &mut |_| Ok(true)));
            results.push(r.map(|seq| last = seq.or(last)));
        }
        let r = last.map_or(Ok(()), |seq| self.commit_per_mode(seq));
        let r = self.poison_on(r);
        // Every batch is in memory: the group's maintenance stands for
        // all its admitted writes, as one admitted writer's would.
        {
            let mut space = self.io.space.lock();
            for _ in 1..admitted {
                space.finish();
            }
        }
        let r = r.and_then(|()| {
            let m = self.maintain(admitted > 0);
            self.poison_on(m)
        });
        if admitted > 0 {
            self.io.space.lock().finish();
        }
        if r.is_err() {
            for res in &mut results {
                if res.is_ok() {
                    *res = self.check();
                }
            }
        }
        results
    }

    /// Writes `batch` if `cond`, reading the state at the instant the
    /// batch would apply, says so; returns whether it did.
    pub(super) fn write_if(&self, batch: &WriteBatch, cond: &mut Cond<'_>) -> Result<bool> {
        self.check()?;
        let adds = adds(batch);
        let admitted = gc_policy::takes_zones(adds, self.opts.buffers_writes());
        if admitted {
            self.admit(adds)?;
        }
        let r = self.admitted_write(batch, admitted, cond);
        if admitted {
            self.io.space.lock().finish();
        }
        r
    }

    /// The part of [`Self::write`] after admission (`admitted`: the write
    /// counts among the admitted ones; one that takes no zone does not).
    fn admitted_write(
        &self,
        batch: &WriteBatch,
        admitted: bool,
        cond: &mut Cond<'_>,
    ) -> Result<bool> {
        let Some(seq) = self.log_and_apply(batch, cond)? else {
            return Ok(false);
        };
        let r = self.commit_per_mode(seq);
        self.poison_on(r)?;
        let r = self.maintain(admitted);
        self.poison_on(r).map(|()| true)
    }

    /// Logs and applies `batch` if `cond` says so: its sequence number
    /// (0 when it logged nothing), or `None` when `cond` refused it.
    fn log_and_apply(&self, batch: &WriteBatch, cond: &mut Cond<'_>) -> Result<Option<u64>> {
        let mut payload = Vec::with_capacity(batch.encoded_len());
        batch.encode(&mut payload);
        if !self.wal.has_room(payload.len()) {
            // The ring is short of empty zones: free WAL zones first.
            let r = self.checkpoint();
            self.poison_on(r)?;
        }
        let seq = {
            let mut inst = self.wal.enter();
            let mut seq = None;
            let r = self.apply_batch(batch, cond, &mut || seq = Some(self.wal.next_seq()));
            if let Ok(false) = r {
                return Ok(None);
            }
            if let Some(seq) = seq {
                // Logged even if the apply failed (the store is poisoned
                // then): a handed-out sequence number must not leave a gap.
                let a = self.wal.append(&mut inst, seq, &payload);
                self.poison_on(a)?;
            }
            self.poison_on(r)?;
            seq.unwrap_or(0)
        };
        Ok(Some(seq))
    }

    /// Commits up to `seq` as the sync mode asks.
    fn commit_per_mode(&self, seq: u64) -> Result<()> {
        match self.sync {
            SyncMode::Always => self.commit(seq),
            SyncMode::Batched(d) if self.wal.since_last_sync() >= d => self.commit(seq),
            SyncMode::Batched(_) | SyncMode::Never => Ok(()),
        }
    }

    /// Makes the WAL durable up to `seq` (a checkpoint when the ring is full).
    pub(super) fn commit(&self, seq: u64) -> Result<()> {
        match self.wal.commit(seq)? {
            Commit::Durable => Ok(()),
            Commit::NeedsCheckpoint => self.checkpoint(),
        }
    }

    /// Helps insert the batch array; evicts the merged filter when over
    /// budget. Batches are inserted only while the zones allow it
    /// ([`Inner::leaf_work_allowed`]); the rest wait in the array, which
    /// keeps answering reads, and the filter is not evicted again until
    /// they are in. `admitted`: the caller is an admitted write.
    pub(super) fn maintain_buffers(&self, admitted: bool) -> Result<()> {
        if !self.opts.buffers_writes() {
            return Ok(());
        }
        loop {
            let arr = self.batches.read().clone();
            self.insert_batches(&arr, admitted)?;
            if !arr.finished() {
                // Short of zones, or another writer is inserting the last.
                return Ok(());
            }
            let mut mf = self.mf.lock();
            if mf.bytes <= self.budget.mf {
                return Ok(());
            }
            if !self.batches.read().finished() {
                return Ok(());
            }
            let target = mf.bytes - self.budget.mf * 3 / 4;
            let evicted = mf.evict(target);
            self.c.evictions.fetch_add(1, Ordering::Relaxed);
            *self.batches.write() = Arc::new(BatchArray::new(evicted));
        }
    }

    /// Claims and inserts batches of `arr` while the zones allow it.
    pub(super) fn insert_batches(&self, arr: &BatchArray, admitted: bool) -> Result<()> {
        while self.leaf_work_allowed(admitted) && self.insert_next(arr)? {}
        Ok(())
    }

    /// Claims the next batch of `arr` and inserts it; false when none is
    /// left to claim.
    pub(super) fn insert_next(&self, arr: &BatchArray) -> Result<bool> {
        let Some((i, batch)) = arr.claim() else {
            return Ok(false);
        };
        let r = {
            let mut tree = self.tree.write();
            let r = tree.insert_batch(batch, &self.ctx());
            // Under the tree's lock (see `BatchArray::not_inserted`).
            arr.mark_inserted(i);
            r
        };
        arr.finish_one();
        r.map(|()| true)
    }

    /// Whether deferred leaf writes may take pages now: the free zones
    /// and the flushers' room cover the deletes' admission floor beside
    /// the admitted writes ([`ZoneSpace::admits_leaf_work`]). A batch
    /// writes far less than a zone, so checking before each keeps those
    /// zones for reclamation, which needs them to free more.
    pub(super) fn leaf_work_allowed(&self, admitted: bool) -> bool {
        let floor =
            gc_policy::admission_floor(false, self.opts.gc_reserve_zones, self.opts.flushers);
        self.io.space.lock().admits_leaf_work(floor, admitted)
    }

    fn maintain(&self, admitted: bool) -> Result<()> {
        self.maintain_buffers(admitted)?;
        if self.wal.bytes_since_checkpoint() >= self.opts.checkpoint_bytes() {
            self.checkpoint()?;
        }
        let n = self.c.maintenance.fetch_add(1, Ordering::Relaxed);
        let free = self.io.space.lock().free_zones();
        let over = n.is_multiple_of(64) && self.tight(free) && self.amp_over(false);
        if gc_policy::should_collect(free, self.opts.gc_reserve_zones) || over {
            self.gc(self.opts.gc_reserve_zones)?;
        } else if n.is_multiple_of(8)
            && gc_policy::drain_early(free, self.opts.gc_reserve_zones)
            && self.drains_values()
        {
            self.drain_values()?;
        }
        Ok(())
    }
}

/// Whether `batch` adds anything (a write that only deletes is admitted
/// below the floor kept for reclamation).
fn adds(batch: &WriteBatch) -> bool {
    batch
        .ops()
        .iter()
        .any(|op| matches!(op, BatchOp::Put { .. }))
}
