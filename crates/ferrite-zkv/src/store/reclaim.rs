//! Zone reclamation: victims chosen by the pure policy in `gc_policy`
//! among full leaf zones and value-log zones. A leaf zone's live pages
//! are copied through the flushers; a value-log zone's live records are
//! copied to the log's head, and either the leaves pointing at them are
//! rewritten (few leaves: large values) or the copies enter the leaves'
//! buffers and the zone drains as those leaves merge. Victims are reset
//! only after the next MetaLog snapshot, because the durable one still
//! points into them.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use ferrite_core::Result;

use super::Inner;
use crate::batch_array::BatchArray;
use crate::gc_policy::{self, Candidate};
use crate::pair::{Pair, Val};
use crate::vlog::ZoneRecord;
use crate::zone_space::{Role, ZoneSpace};

/// When reclamation runs for space amplification alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bound {
    /// Once fewer than a quarter of the data zones are free (a zoned
    /// device belongs to its store: a free zone costs nothing until it is
    /// needed, and migrating leaves under load costs writes).
    WhenTight,
    /// Whatever is free (a clean close).
    Always,
    /// Whatever is free, while no write has come since the batch count
    /// was `applied` (an idle store settling).
    Idle { applied: u64 },
}

/// What the idle pass remembers between its ticks.
#[derive(Debug, Default)]
pub(super) struct Idle {
    /// Batches applied at the last tick.
    applied: u64,
    /// Ticks since a batch was last applied.
    quiet: u32,
    /// Deletes applied when the store last settled.
    deletes_settled: u64,
    /// The last settling stopped because writes came back.
    unfinished: bool,
}

impl Inner {
    /// Early value-log reclamation: one value-log zone emptied (mostly
    /// through the buffers, which frees it only once it has drained), so
    /// zones drain before the reserve is reached. Skipped while a
    /// collection runs.
    pub(super) fn drain_values(&self) -> Result<()> {
        let Some(_collector) = self.gc_lock.try_lock() else {
            return Ok(());
        };
        let _work = ferrite_core::background::begin(ferrite_core::background::Work::Reclamation);
        if self.zones_for_moves() <= self.opts.gc_reserve_zones as u64 {
            return Ok(()); // no room above the reserve for copies
        }
        // The best candidates in turn, until one is emptied or starts to
        // drain (a few: each costs a zone scan).
        let mut passed = Vec::new();
        for _ in 0..4 {
            let room = self.zones_for_moves();
            let victim = {
                let s = self.io.space.lock();
                let mut cands = self.value_candidates(&s, room);
                cands.retain(|c| !passed.contains(&c.zone));
                gc_policy::choose_victim(self.opts.gc, &cands)
            };
            let Some(z) = victim else {
                break;
            };
            let drains = self.c.drained_relocations.load(Ordering::Relaxed);
            if self.empty_value_zone(z)? {
                // Free at the next checkpoint, like the zones a collection
                // empties.
                self.io.space.lock().mark_pending_reset(z as usize);
                self.deferred.lock().remove(&z);
                self.c.gc_zones.fetch_add(1, Ordering::Relaxed);
                break;
            }
            if self.c.drained_relocations.load(Ordering::Relaxed) != drains {
                break;
            }
            passed.push(z);
        }
        Ok(())
    }

    /// Value-log zones reclamation may look at, with `room` free zones
    /// for moves: those not deferred, or whose deferral is due.
    fn value_candidates(&self, s: &ZoneSpace, room: u64) -> Vec<Candidate> {
        let deferred = self.deferred.lock();
        s.candidates(Role::Vlog, self.dev.geometry().zone_capacity)
            .into_iter()
            .filter(|c| deferred.get(&c.zone).is_none_or(|d| d.due(c.valid, room)))
            .collect()
    }

    /// Whether value-log zones may be emptied through the buffers (and
    /// need time to drain): the store has the merged filter and a value
    /// log.
    pub(super) fn drains_values(&self) -> bool {
        self.opts.buffers_writes()
            && self
                .io
                .space
                .lock()
                .zones
                .iter()
                .any(|z| z.role == Role::Vlog)
    }

    /// Space is tight: fewer than a quarter of the data zones are free.
    /// Only then is reclamation worth running for amplification alone.
    pub(super) fn tight(&self, free: usize) -> bool {
        let g = self.dev.geometry();
        let data = g.zone_count - 2 * self.opts.meta_zones - self.opts.wal_zones;
        free < data as usize / 4
    }

    /// Whether space amplification is above its bound.
    pub(super) fn amp_over(&self, after_resets: bool) -> bool {
        let Some(bound) = self.opts.gc_space_amp else {
            return false;
        };
        let g = self.dev.geometry();
        let s = self.io.space.lock();
        s.used_data_zones() > self.opts.flushers + 1
            && s.amplification(g.zone_capacity, self.io.page_size as u64, after_resets) > bound
    }

    /// Reclaims zones until `want` are free and space amplification is
    /// within its bound (or nothing more can be freed). Emptied zones
    /// become free only at the next checkpoint, so one runs whenever
    /// migration would otherwise eat the last free zones.
    pub(super) fn gc(&self, want: usize) -> Result<usize> {
        self.collect(want, Bound::WhenTight)
    }

    /// At a clean close, before [`Inner::compact_for_space`]: puts every
    /// buffered pair into the leaves, so the closing snapshot (written
    /// twice) carries none: the merged filter evicted into a batch array,
    /// the array inserted, every ADB and delta chain merged into its
    /// page. It goes a slice of leaves at a time while the zones allow
    /// leaf work (as inserting batches does); what is left stays in the
    /// snapshot, as it always could.
    pub(super) fn drain_buffers(&self) -> Result<()> {
        if self.opts.buffers_writes() {
            let mut mf = self.mf.lock();
            if !self.finish_batches()? {
                return Ok(());
            }
            if mf.bytes > 0 {
                let evicted = mf.evict(usize::MAX);
                *self.batches.write() = Arc::new(BatchArray::new(evicted));
                if !self.finish_batches()? {
                    return Ok(());
                }
            }
        }
        const SLICE: usize = 256;
        while self.leaf_work_allowed(false) {
            let left = self.tree.write().merge_buffers(SLICE, &self.ctx())?;
            if left == 0 {
                break;
            }
        }
        Ok(())
    }

    /// One tick of the idle pass (a second): settles the store when
    /// [`gc_policy::settles`] says so.
    pub(super) fn tick_idle(&self, idle: &mut Idle) -> Result<()> {
        if self.poisoned.is_set() {
            // The store reports its failure to its callers; nothing to do.
            return Ok(());
        }
        let applied = self.c.applied.load(Ordering::Relaxed);
        if applied != idle.applied {
            idle.applied = applied;
            idle.quiet = 0;
            return Ok(());
        }
        idle.quiet = idle.quiet.saturating_add(1);
        let deletes = self.c.deletes.load(Ordering::Relaxed);
        let since = deletes.saturating_sub(idle.deletes_settled);
        if !gc_policy::settles(idle.quiet, since, idle.unfinished) {
            return Ok(());
        }
        idle.deletes_settled = deletes;
        let r = self.settle(applied);
        idle.unfinished = match r {
            Ok(done) => !done,
            Err(_) => false,
        };
        self.poison_on(r).map(drop)
    }

    /// Puts what the buffers hold into the leaves, a slice at a time, and
    /// reclaims the zones that leaves garbage, as a close does but while
    /// the store stays open, stopping as soon as a write comes (the
    /// batch count moves off `applied`). True when it finished.
    fn settle(&self, applied: u64) -> Result<bool> {
        // Small enough that a writer arriving meanwhile waits for one
        // slice at most.
        const SLICE_BYTES: usize = 1 << 20;
        const MERGE_SLICE: usize = 64;
        let quiet = || self.c.applied.load(Ordering::Relaxed) == applied;
        self.c.settles.fetch_add(1, Ordering::Relaxed);
        if self.opts.buffers_writes() {
            loop {
                if !quiet() {
                    return Ok(false);
                }
                let arr = self.batches.read().clone();
                self.insert_batches(&arr, false)?;
                if !arr.finished() {
                    // Short of zones, or a writer inserts the last batch.
                    return Ok(false);
                }
                let mut mf = self.mf.lock();
                if mf.bytes == 0 {
                    break;
                }
                if !self.batches.read().finished() {
                    return Ok(false);
                }
                let slice = SLICE_BYTES.min(mf.bytes);
                let evicted = mf.evict(slice);
                if evicted.is_empty() {
                    // Nothing left to move (only shadows hold bytes).
                    break;
                }
                self.c.evictions.fetch_add(1, Ordering::Relaxed);
                *self.batches.write() = Arc::new(BatchArray::new(evicted));
            }
        }
        loop {
            if !quiet() || !self.leaf_work_allowed(false) {
                return Ok(false);
            }
            if self.tree.write().merge_buffers(MERGE_SLICE, &self.ctx())? == 0 {
                break;
            }
        }
        self.collect(0, Bound::Idle { applied })?;
        Ok(quiet())
    }

    /// At a clean close: reclaims every zone whose reclamation lowers space
    /// amplification below its bound, however many zones are free, so a
    /// closed store gives back the garbage its copy-on-write leaves left
    /// (on a device in a file, the file system's blocks) without taxing
    /// writes while it runs.
    pub(super) fn compact_for_space(&self) -> Result<usize> {
        self.collect(0, Bound::Always)
    }

    fn collect(&self, want: usize, bound: Bound) -> Result<usize> {
        // One collector at a time: two could pick the same victim, and the
        // second mark it for reset after it was already reset and reopened.
        let _collector = self.gc_lock.lock();
        let mut total = 0;
        // The checkpoint that frees the emptied zones writes out buffered
        // pages and may take zones itself: go again while that leaves the
        // store short and the last pass got somewhere.
        for _ in 0..4 {
            let n = self.gc_pass(want, bound)?;
            total += n;
            if n == 0 || self.io.space.lock().room() >= want {
                break;
            }
        }
        self.c.gc_zones.fetch_add(total as u64, Ordering::Relaxed);
        Ok(total)
    }

    /// One round of [`Inner::gc`], ending with the checkpoint that frees
    /// what it emptied.
    fn gc_pass(&self, want: usize, bound: Bound) -> Result<usize> {
        let _work = ferrite_core::background::begin(ferrite_core::background::Work::Reclamation);
        let mut reclaimed = 0;
        // Value-log zones that could not be emptied in this pass.
        let mut passed: Vec<u32> = Vec::new();
        loop {
            let (free, pending) = {
                let s = self.io.space.lock();
                (s.free_zones(), s.pending_resets().len())
            };
            let short = free + pending < want;
            let over = match bound {
                Bound::WhenTight => self.tight(free + pending) && self.amp_over(true),
                Bound::Always => self.amp_over(true),
                Bound::Idle { applied } => {
                    self.c.applied.load(Ordering::Relaxed) == applied && self.amp_over(true)
                }
            };
            // For amplification alone, a bounded amount of work per call
            // while writes wait (at close, every zone the bound picks).
            if !short && (!over || (bound == Bound::WhenTight && reclaimed >= 4)) {
                break;
            }
            if pending > 0 && free <= self.opts.flushers {
                self.checkpoint()?;
                continue;
            }
            let room = self.zones_for_moves();
            let victim = {
                let s = self.io.space.lock();
                // A leaf zone's live pages must fit where migration writes.
                let fits = s.movable_pages();
                let mut cands: Vec<Candidate> = s.candidates(Role::Leaf, s.capacity_pages);
                cands.retain(|c| c.valid <= fits);
                cands.extend(self.value_candidates(&s, room));
                cands.retain(|c| !passed.contains(&c.zone));
                if !short {
                    // For amplification alone, only zones emptier than the
                    // bound's utilisation: migrating them lowers it.
                    let bound = self.opts.gc_space_amp.unwrap_or(f64::INFINITY);
                    cands.retain(|c| gc_policy::lowers_amplification(c, bound));
                }
                gc_policy::choose_victim(self.opts.gc, &cands)
            };
            let Some(z) = victim else {
                // Value-log zones that do not pay alone may together
                // (deferred ones too: the group's cost is bounded without
                // scanning them).
                if short {
                    let emptied = self.empty_value_zones_together()?;
                    if !emptied.is_empty() {
                        let mut s = self.io.space.lock();
                        for &z in &emptied {
                            s.mark_pending_reset(z as usize);
                            self.deferred.lock().remove(&z);
                        }
                        reclaimed += emptied.len();
                        passed.clear();
                        continue;
                    }
                }
                break;
            };
            let mut tree = self.tree.write();
            let role = {
                // Still a victim now that writers are held off?
                let s = self.io.space.lock();
                let zs = &s.zones[z as usize];
                (!zs.open && !zs.pending_reset).then_some(zs.role)
            };
            match role {
                Some(Role::Leaf) => {
                    tree.migrate_zone(z, &self.ctx())?;
                    drop(tree);
                }
                Some(Role::Vlog) => {
                    drop(tree);
                    if !self.empty_value_zone(z)? {
                        // Not now: the other candidates may still do.
                        passed.push(z);
                        continue;
                    }
                }
                _ => continue,
            }
            self.io.space.lock().mark_pending_reset(z as usize);
            self.deferred.lock().remove(&z);
            reclaimed += 1;
        }
        if !self.io.space.lock().pending_resets().is_empty() {
            self.checkpoint()?;
        }
        Ok(reclaimed)
    }

    /// Makes value-log zone `z` hold nothing live, moving its live records
    /// if it has any; false when that cannot be done now.
    fn empty_value_zone(&self, z: u32) -> Result<bool> {
        let valid = self.io.space.lock().zones[z as usize].valid;
        if valid == 0 {
            return Ok(true);
        }
        // The copies need free zones, and cannot pay if they alone fill
        // most of a zone (no scan needed to tell).
        let zone_bytes = self.dev.geometry().zone_capacity;
        if !gc_policy::relocation_pays(valid, zone_bytes, self.zones_for_moves()) {
            return Ok(false);
        }
        self.relocate_values(&[z])
    }

    /// Empties the value-log zones of a [`gc_policy::relocation_group`]
    /// with one direct move of all their live records, when none of them
    /// pays alone; returns the zones emptied (none if no group pays).
    fn empty_value_zones_together(&self) -> Result<Vec<u32>> {
        let leaf_bytes = self.tree.read().leaf_count() as u64 * self.io.page_size as u64;
        let room = self.zones_for_moves();
        let zone_bytes = self.dev.geometry().zone_capacity;
        let group = {
            let s = self.io.space.lock();
            let zones: Vec<(u32, u64)> = s
                .candidates(Role::Vlog, zone_bytes)
                .iter()
                .map(|c| (c.zone, c.valid))
                .collect();
            gc_policy::relocation_group(&zones, leaf_bytes, zone_bytes, room)
        };
        let Some(group) = group.filter(|g| g.len() > 1) else {
            return Ok(Vec::new());
        };
        self.relocate_values(&group)?;
        let s = self.io.space.lock();
        Ok(group
            .into_iter()
            .filter(|&z| s.zones[z as usize].valid == 0)
            .collect())
    }

    /// Free zones that moving value-log records may fill: all but those
    /// the admitted writes may take ([`ZoneSpace::movable`]) and those the
    /// checkpoint after the moves may take for the pool's dirty pages
    /// (baselines), so that checkpoint, which frees the emptied zones,
    /// always has room.
    fn zones_for_moves(&self) -> u64 {
        let dirty = self.lru.lock().dirty_frames() as u64 * self.io.page_size as u64;
        let checkpoint = dirty.div_ceil(self.dev.geometry().zone_capacity);
        self.io.space.lock().movable(checkpoint)
    }

    /// Copies the live records of the value-log `zones` to the log's head
    /// and points their pairs at the copies; true when nothing in them is
    /// live afterwards. The zones are scanned beside the writers
    /// ([`Inner::live_records`]); only the moves hold them off. Several
    /// zones are emptied together only the direct way, which rewrites
    /// each leaf pointing into any of them once.
    ///
    /// A record is live while any pair holds its location: the merged
    /// filter's, or the tree's for that key, visible or shadowed by a
    /// newer buffered pair. The merged filter's pair is replaced in place.
    /// For the tree's there are two ways, chosen by what they write:
    ///
    /// - *direct*: a leaf holding such a pair is merged with the copies of
    ///   its visible ones, which drops its shadowed ones, so the zone is
    ///   empty at once; it costs a page per leaf, which pays only when
    ///   few leaves point into the zone (large values);
    /// - *through the buffers*: the visible pairs' copies enter their
    ///   leaves' buffers as a batch and shadow them; the zone keeps counting
    ///   the shadowed pairs until their leaves merge their buffers (the
    ///   write path's own merges, amortised over many pairs), and is
    ///   deferred until then. This is the way for small values, whose
    ///   records are spread over many leaves.
    ///
    /// Each replaced location is released when its pair is dropped, so
    /// the zone's live count reaches zero exactly when no pair refers to
    /// it. The copies are durable with the next checkpoint, which comes
    /// before the zone is reset; a crash before it recovers a state in
    /// which the zone's records are still where its pairs point.
    fn relocate_values(&self, zones: &[u32]) -> Result<bool> {
        let (live, need, copies) = self.live_records(zones)?;
        // Worth it only if what is written takes at most three quarters of
        // the zones it frees, and fits in the free zones but one (a
        // flusher's next).
        let zone_bytes = self.dev.geometry().zone_capacity;
        let free = self.zones_for_moves();
        let use_mf = self.opts.buffers_writes();
        let n = zones.len() as u64;
        let direct = gc_policy::zones_relocation_pays(need, n, zone_bytes, free);
        // Moves through the buffers free nothing until the zone drains, so
        // they may not eat into the reserve that leaf migration, direct
        // moves and checkpoints count on. Zones emptied together go the
        // direct way only.
        let slack = free.saturating_sub(self.opts.gc_reserve_zones as u64);
        let buffered = n == 1 && use_mf && gc_policy::relocation_pays(copies, zone_bytes, u64::MAX);
        let buffered_fits = buffered && gc_policy::relocation_pays(copies, zone_bytes, slack);
        if !(direct || buffered_fits) {
            if let [z] = *zones {
                let valid = self.io.space.lock().zones[z as usize].valid;
                let why = if gc_policy::relocation_pays(need, zone_bytes, u64::MAX) || buffered {
                    // It would pay but does not fit.
                    gc_policy::retry_with_room(valid, free)
                } else {
                    // Too costly either way until more of it dies.
                    gc_policy::retry_below(valid)
                };
                self.deferred.lock().insert(z, why);
            }
            return Ok(false);
        }
        let held = self.wal.enter_all();
        let mut mf = self.mf.lock();
        if !self.finish_batches()? {
            // Not now: the leaves cannot take the rest of the array.
            return Ok(false);
        }
        // The finished array still answers reads ahead of the tree, with
        // the locations about to be replaced: retire it, now that the tree
        // holds all of it.
        *self.batches.write() = Arc::new(BatchArray::default());
        let mut tree = self.tree.write();
        let ctx = self.ctx();
        let mut in_mf = Vec::new();
        let mut to_tree = Vec::new();
        let mut direct_moves: Vec<(ZoneRecord, bool)> = Vec::new();
        let mut groups: std::collections::BTreeMap<u32, Vec<ZoneRecord>> = Default::default();
        for r in live {
            groups.entry(tree.find(&r.key)).or_default().push(r);
        }
        for (id, group) in groups {
            let items: Vec<(&[u8], u64)> = group.iter().map(|r| (&r.key[..], r.loc)).collect();
            let held = tree.holds_all(id, &items, &ctx)?;
            for (r, (visible, anywhere)) in group.into_iter().zip(held) {
                let above = if use_mf { mf.get(&r.key) } else { None };
                if above == Some(Val::Vlog(r.loc)) {
                    in_mf.push((r.key.clone(), r.value.clone()));
                }
                if direct && anywhere {
                    direct_moves.push((r, visible));
                } else if visible && above.is_none() {
                    // Through the buffers: only a pair nothing shadows
                    // needs a copy; a shadowed one dies at its leaf's next
                    // merge.
                    to_tree.push((r.key, r.value));
                }
            }
        }
        let copy = |key: &[u8], value: &[u8]| -> Result<Val> {
            self.c.relocated_values.fetch_add(1, Ordering::Relaxed);
            let mut v = self.vlog.lock();
            v.append(key, value, &self.io.space).map(Val::Vlog)
        };
        for (key, value) in in_mf {
            let old = mf.insert(Pair::new(&key, copy(&key, &value)?));
            self.release(old);
        }
        if !direct_moves.is_empty() {
            // By key, not by the leaves found above: rewriting one leaf may
            // join it with its neighbour or split it.
            let mut keys = Vec::with_capacity(direct_moves.len());
            let mut incoming = Vec::new();
            for (r, visible) in direct_moves {
                if visible {
                    incoming.push(Pair::new(&r.key, copy(&r.key, &r.value)?));
                }
                keys.push(r.key);
            }
            keys.sort();
            incoming.sort_by(|a, b| a.key().cmp(b.key()));
            tree.rewrite_leaves(&keys, incoming, &ctx)?;
        }
        if !to_tree.is_empty() {
            // Nothing above the tree holds these keys (the merged filter
            // was checked, the batch array is empty), so the copies are the
            // newest pairs: they go to the leaves' buffers like a batch.
            let mut batch = Vec::with_capacity(to_tree.len());
            for (key, value) in to_tree {
                batch.push(Pair::new(&key, copy(&key, &value)?));
            }
            batch.sort_by(|a, b| a.key().cmp(b.key()));
            tree.insert_batch(&batch, &ctx)?;
        }
        drop(tree);
        drop(mf);
        drop(held);
        let mut emptied = true;
        for &z in zones {
            let valid = self.io.space.lock().zones[z as usize].valid;
            if valid == 0 {
                continue;
            }
            emptied = false;
            if direct {
                log::warn!("zkv: value-log zone {z} keeps {valid} live bytes after relocation");
            } else {
                // Draining: look again once leaf merges have dropped most
                // of the shadowed pairs, when the direct way is cheap.
                self.c.drained_relocations.fetch_add(1, Ordering::Relaxed);
                self.deferred.lock().insert(z, gc_policy::drain_mark(valid));
            }
        }
        Ok(emptied)
    }

    /// The records of the value-log `zones` that a pair still points to, the
    /// bytes moving them directly would write (copies and rewritten
    /// leaves), and the bytes of the copies alone.
    /// Runs beside writers: a pair only moves down (merged filter → batch
    /// array → tree) or dies, so looking at the levels in that order misses
    /// no live record, and a record found dead stays dead (locations are
    /// never reused while the zone holds them).
    fn live_records(&self, zones: &[u32]) -> Result<(Vec<ZoneRecord>, u64, u64)> {
        let mut records = Vec::new();
        for &z in zones {
            records.extend(crate::vlog::records(self.dev.as_ref(), z)?);
        }
        let use_mf = self.opts.buffers_writes();
        let ctx = self.ctx();
        // By leaf, so that each leaf's page is read once.
        let mut groups: std::collections::BTreeMap<u32, Vec<ZoneRecord>> = Default::default();
        {
            let tree = self.tree.read();
            for r in records {
                groups.entry(tree.find(&r.key)).or_default().push(r);
            }
        }
        let mut live = Vec::new();
        let mut leaves = std::collections::HashSet::new();
        let mut bytes = 0;
        for group in groups.into_values() {
            let above: Vec<bool> = if use_mf {
                let mf = self.mf.lock();
                let arr = self.batches.read().clone();
                group
                    .iter()
                    .map(|r| {
                        let target = Some(Val::Vlog(r.loc));
                        mf.get(&r.key) == target || arr.get(&r.key) == target
                    })
                    .collect()
            } else {
                vec![false; group.len()]
            };
            // The tree after the buffers, under one hold: the leaf each key
            // belongs to now (a split may have moved it since grouping).
            let tree = self.tree.read();
            let mut by_leaf: std::collections::BTreeMap<u32, Vec<usize>> = Default::default();
            for (i, r) in group.iter().enumerate() {
                by_leaf.entry(tree.find(&r.key)).or_default().push(i);
            }
            let mut held = vec![(0u32, false, false); group.len()];
            for (id, idx) in by_leaf {
                let items: Vec<(&[u8], u64)> = idx
                    .iter()
                    .map(|&i| (&group[i].key[..], group[i].loc))
                    .collect();
                for (&i, (visible, anywhere)) in idx.iter().zip(tree.holds_all(id, &items, &ctx)?) {
                    held[i] = (id, visible, anywhere);
                }
            }
            drop(tree);
            for ((r, above), (id, visible, anywhere)) in group.into_iter().zip(above).zip(held) {
                if !(above || anywhere) {
                    continue;
                }
                if above || visible {
                    bytes += crate::vlog::RECORD_HEADER + crate::vlog::loc_len(r.loc);
                }
                leaves.insert(id);
                live.push(r);
            }
        }
        let pages = leaves.len() as u64 * self.io.page_size as u64;
        Ok((live, bytes + pages, bytes))
    }

    /// Inserts the batch array into the tree as far as the zones allow
    /// and waits for batches other writers are inserting; true when the
    /// whole array is in. The caller holds the merged filter, so no new
    /// array replaces it meanwhile.
    pub(super) fn finish_batches(&self) -> Result<bool> {
        let arr = self.batches.read().clone();
        self.insert_batches(&arr, false)?;
        while !arr.settled() {
            std::thread::yield_now();
        }
        Ok(arr.finished())
    }
}
