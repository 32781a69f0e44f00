//! Writing tables and installing versions. Every change of the table set
//! is a new immutable `Version`: the manifest snapshot is written first
//! (on a poisoned store, never), then the `SuperVersion` is swapped in one
//! `Arc`, then the tables that left are marked obsolete, so their extents
//! return to the table space when the last reader drops them.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use ferrite_core::Result;

use super::{Inner, Meta, SuperVersion};
use crate::block_cache::BlockCache;
use crate::manifest::ManifestState;
use crate::memtable::Memtable;
use crate::partition_buffer::PartitionBuffers;
use crate::table::{BuiltTable, Table};
use crate::table_space::TableSpace;
use crate::version::Version;

pub(super) fn write_table(
    space: &Arc<TableSpace>,
    cache: &Arc<BlockCache>,
    id: u64,
    built: &BuiltTable,
) -> Result<Arc<Table>> {
    let extent = space.allocate(built.pages());
    if let Err(e) = space.write(extent, &built.bytes) {
        space.release(extent);
        return Err(e);
    }
    Ok(Arc::new(Table::open(
        id,
        extent,
        space.clone(),
        cache.clone(),
    )?))
}

/// What a flush moves on: the memtable it took from the immutable list
/// (none when it only empties the buffers), the flush buffers after it,
/// and the oldest memtable not yet flushed.
pub(super) struct Flushed {
    pub(super) mem: Option<Arc<Memtable>>,
    pub(super) buffers: Arc<PartitionBuffers>,
    pub(super) next: u64,
}

impl Inner {
    /// Counts what building `built` cost and chose, before it is written.
    pub(super) fn count_build(&self, built: &BuiltTable) {
        let c = &self.counters;
        c.training_micros
            .fetch_add(built.training_micros, Ordering::Relaxed);
        if built.sparse_fallback {
            c.sparse_fallbacks.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(super) fn next_table_id(&self) -> u64 {
        let mut m = self.meta.lock();
        let id = m.state.next_table;
        m.state.next_table += 1;
        id
    }

    /// Writes a new version: manifest first, then the in-memory switch,
    /// then the removed tables may go.
    /// Returns false (installing nothing) when an input is no longer live
    /// (its partition was dropped meanwhile); the caller discards its
    /// outputs.
    pub(super) fn install(
        &self,
        removed: &[Arc<Table>],
        added: &[(usize, usize, Arc<Table>)],
        flushed: Option<&Flushed>,
    ) -> Result<bool> {
        self.install_checked(removed, &[], added, flushed)
    }

    /// [`Inner::install`], installing nothing unless the tables in `kept`
    /// are live too (a compaction installing a slice: its inputs not yet
    /// merged must still be there, or the job is void).
    pub(super) fn install_checked(
        &self,
        removed: &[Arc<Table>],
        kept: &[Arc<Table>],
        added: &[(usize, usize, Arc<Table>)],
        flushed: Option<&Flushed>,
    ) -> Result<bool> {
        let mut meta = self.meta.lock();
        let cur = self.current.read().clone();
        let ids: Vec<u64> = removed.iter().map(|t| t.id).collect();
        let kept_ids: Vec<u64> = kept.iter().map(|t| t.id).collect();
        if !cur.version.contains_all(&ids) || !cur.version.contains_all(&kept_ids) {
            return Ok(false);
        }
        self.publish(&mut meta, cur.version.edit(&ids, added), flushed)?;
        for t in removed {
            t.mark_obsolete();
        }
        Ok(true)
    }

    /// Makes `v` current (the caller holds the meta lock): the manifest
    /// first, with `flushed` advancing the log numbers, then one swap of
    /// the `SuperVersion`, which drops `flushed`'s memtable from the
    /// immutables and adopts its buffers.
    pub(super) fn publish(
        &self,
        meta: &mut Meta,
        v: Version,
        flushed: Option<&Flushed>,
    ) -> Result<()> {
        // A flushed memtable's range deletes move to the version; those no
        // table or memtable needs go.
        let v = match flushed.and_then(|f| f.mem.as_ref()) {
            Some(m) if m.has_range_dels() => v.with_range_dels(m.range_dels()),
            _ => v,
        };
        let v = {
            let c = self.current.read();
            let gone = flushed.and_then(|f| f.mem.as_ref()).map(|m| m.id());
            let buffers = flushed.map_or(&c.buffers, |f| &f.buffers);
            let oldest = std::iter::once(c.mem.id())
                .chain(c.imms.iter().map(|m| m.id()).filter(|&id| Some(id) != gone))
                .chain(buffers.memtables().iter().map(|m| m.id()))
                .min()
                .unwrap_or(u64::MAX);
            v.without_obsolete_range_dels(oldest)
        };
        let mut state = meta.state.clone();
        state.tables = v.records();
        state.range_dels = (*v.range_dels).clone();
        if let Some(f) = flushed {
            state.part_logs = f.buffers.part_logs(f.next);
            state.log_number = state.part_logs.iter().copied().min().unwrap_or(f.next);
            if let Some(m) = &f.mem {
                state.last_seq = state.last_seq.max(m.max_seq());
            }
        }
        self.store_manifest(meta, state)?;
        {
            let mut c = self.current.write();
            let gone = flushed.and_then(|f| f.mem.as_ref()).map(|m| m.id());
            let imms = c
                .imms
                .iter()
                .filter(|m| gone != Some(m.id()))
                .cloned()
                .collect();
            *c = Arc::new(SuperVersion {
                mem: c.mem.clone(),
                imms,
                buffers: flushed.map_or_else(|| c.buffers.clone(), |f| f.buffers.clone()),
                version: Arc::new(v),
            });
        }
        self.room.notify_all();
        Ok(())
    }

    /// Writes `state` as the next generation and adopts it. The in-memory
    /// state changes only once the write is durable, and a poisoned store
    /// writes nothing: a manifest written after a failure could pair the
    /// failed step's counters with a table list that lacks its tables.
    pub(super) fn store_manifest(&self, meta: &mut Meta, mut state: ManifestState) -> Result<()> {
        self.check()?;
        state.generation = meta.state.generation + 1;
        if let Err(e) = self.manifest.store(&state) {
            self.poison(&e);
            return Err(e);
        }
        // Table ids handed out meanwhile stay reserved.
        state.next_table = state.next_table.max(meta.state.next_table);
        // The copy this write replaced was two generations old; the other
        // slot holds the previous state.
        let floor = meta.state.log_number.min(state.log_number);
        self.log_floor.fetch_max(floor, Ordering::AcqRel);
        meta.state = state;
        Ok(())
    }
}
