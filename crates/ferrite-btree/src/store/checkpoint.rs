//! Checkpoints: the in-memory tree installed on the page file through the
//! double-write and spill files (see `crate::checkpoint`), then the WAL
//! reset to the new epoch.
//!
//! A checkpoint may fall between two records of a batch, or between two
//! applied records of the insert buffer: what is not yet in the pages it
//! installs (the buffered records, the batch in flight, and during
//! recovery the batches not yet replayed) goes to the epoch's carry-over
//! slot first, and recovery replays it on top.
//!
//! Clean page ids (free, and used by no durable checkpoint) are holes in
//! the page file: a checkpoint punches the ids it frees for good, and
//! opening a store punches the clean ids it finds, so freed pages cost no
//! disk.

use std::sync::atomic::Ordering::Relaxed;

use ferrite_core::Result;

use super::{Shared, State};
use crate::carry_over;
use crate::checkpoint;
use crate::free_space;
use crate::meta::{Carried, Meta};
use crate::page::PageId;

impl Shared {
    /// Gives the space of clean page ids back to the file system (a hole
    /// punched in the page file; zeros on a device that cannot punch), so
    /// that every clean id is a hole and a store that shrank takes less
    /// disk. Best effort: a failed punch costs space, never data, since no
    /// checkpoint uses a clean id.
    pub(super) fn hollow(&self, mut ids: Vec<PageId>) {
        ids.sort_unstable();
        let ps = self.tree.page_size as u64;
        let mut i = 0;
        while i < ids.len() {
            let first = ids[i];
            let mut n = 1;
            while ids.get(i + n) == Some(&(first + n as u64)) {
                n += 1;
            }
            i += n;
            if let Err(e) = self.devices.pages.discard(first * ps, n as u64 * ps) {
                log::warn!("btree: giving back {n} free pages failed: {e}");
                return;
            }
        }
    }

    /// The page, double-write and spill files, as a checkpoint uses them.
    pub(super) fn checkpoint_files(&self) -> checkpoint::Files<'_> {
        checkpoint::Files {
            pages: self.devices.pages.as_ref(),
            dwb: self.devices.dwb.as_ref(),
            spill: self.devices.spill.as_ref(),
        }
    }

    /// Writes what checkpoint `epoch` carries over — the insert buffer's
    /// records, then the batch in flight, then (during recovery) the
    /// batches not yet replayed — to its slot, and says whether there was
    /// anything to write.
    fn carry_over(&self, st: &State, epoch: u64, inflight: Option<&[u8]>) -> Result<Carried> {
        let buffered = st.turbo.carried_records()?;
        let mut parts: Vec<&[u8]> = Vec::new();
        if let Some(b) = &buffered {
            parts.push(b);
        }
        if let Some(p) = inflight {
            parts.push(p);
        }
        parts.extend(st.unreplayed.iter().map(Vec::as_slice));
        if parts.is_empty() {
            return Ok(Carried::Nothing);
        }
        let slot = &self.devices.carry[(epoch % 2) as usize];
        carry_over::write(slot.as_ref(), epoch, &parts)?;
        Ok(Carried::Written)
    }

    /// Installs the in-memory tree as a new checkpoint and resets the WAL.
    /// Refused once the store is poisoned: the tree in memory may then be
    /// half-changed (a batch that failed while being applied), and only
    /// recovery from disk may follow. Background work (SHORTCUT's
    /// re-layouts) checkpoints too, and must never persist such a state.
    pub(super) fn checkpoint(&self, st: &mut State, inflight: Option<&[u8]>) -> Result<()> {
        let _work = ferrite_core::background::begin(ferrite_core::background::Work::Checkpoint);
        self.check_poison()?;
        let pool = &self.tree.pool;
        // The free-list chain lives in free ids: any stale frame or spilled
        // image of those ids is garbage, and the chain's image replaces it.
        let (free, chain) = free_space::chain(&mut st.shape, self.tree.page_size);
        self.tree.note_growth(&st.shape);
        let mut ids = pool.checkpoint_ids();
        ids.retain(|id| chain.binary_search_by_key(id, |(c, _)| *c).is_err());
        ids.extend(chain.iter().map(|(id, _)| *id));
        ids.sort_unstable();
        let mut meta = Meta {
            page_size: self.tree.page_size as u32,
            epoch: st.epoch + 1,
            root: st.shape.root,
            height: st.shape.height,
            page_count: st.shape.page_count,
            free,
            carried: Carried::Nothing,
        };
        let result = meta
            .check_persistable()
            .and_then(|()| self.carry_over(st, meta.epoch, inflight))
            .and_then(|carried| {
                meta.carried = carried;
                // The free list's pages are given from memory; every other
                // page not dirty in a frame is named where it was spilled.
                let dirty = pool.dirty_ids();
                let place = |id: PageId| {
                    if chain.binary_search_by_key(&id, |(c, _)| *c).is_ok() {
                        return Ok(checkpoint::Source::HERE);
                    }
                    pool.checkpoint_place(&dirty, id)
                };
                checkpoint::install(
                    self.checkpoint_files(),
                    &ids,
                    &place,
                    &mut |group, images| {
                        let ps = self.tree.page_size;
                        let mut from_pool = Vec::with_capacity(group.len());
                        for (&id, buf) in group.iter().zip(images.chunks_mut(ps)) {
                            match chain.binary_search_by_key(&id, |(c, _)| *c) {
                                Ok(i) => buf.copy_from_slice(&chain[i].1),
                                Err(_) => from_pool.push((id, buf)),
                            }
                        }
                        pool.copy_pages(&mut from_pool)
                    },
                    &meta,
                    self.chunk_pages,
                )
            })
            .and_then(|held| {
                self.counters
                    .checkpoint_pages
                    .fetch_add(ids.len() as u64, Relaxed);
                self.counters
                    .double_written_pages
                    .fetch_add(held as u64, Relaxed);
                pool.checkpoint_done()?;
                // The ids this checkpoint frees for good: free before it,
                // and not holding its free list.
                let freed: Vec<PageId> = st
                    .shape
                    .free
                    .iter()
                    .copied()
                    .filter(|id| chain.binary_search_by_key(id, |(c, _)| *c).is_err())
                    .collect();
                free_space::settle(&mut st.shape, &chain);
                self.hollow(freed);
                st.epoch = meta.epoch;
                self.wal.reset(meta.epoch)
            });
        if let Err(e) = &result {
            self.poison(e);
        }
        self.counters.checkpoints.fetch_add(1, Relaxed);
        result
    }
}
