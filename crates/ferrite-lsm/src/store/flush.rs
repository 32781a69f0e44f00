//! The flush thread: moves the oldest immutable memtable out, into one L0
//! table, or with partitions into the partitions' flush buffers, writing
//! each partition whose buffer holds a table's worth (or whose memtables'
//! WAL devices a coming rotation will reset) to L0 as one table.
//!
//! A flush is installed with the log numbers it moves on, so recovery
//! replays an operation only from its partition's first unflushed
//! memtable on.

use std::ops::Bound;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use ferrite_core::Result;

use super::publish::{write_table, Flushed};
use super::{Inner, WAL_DEVICES};
use crate::memtable::Memtable;
use crate::merge::{MemSource, Merge, Source};
use crate::options::LsmOptions;
use crate::partition_buffer::{self, PartitionBuffers, Pending};
use crate::range_del::RangeDels;
use crate::table::block::PAGE;
use crate::table::{BuiltTable, TableBuilder};

/// One table per partition in `due`, from what its flush buffer holds
/// (each key's newest version over the buffered memtables), in one pass
/// over the memtables.
fn build_from_buffers(
    buffers: &PartitionBuffers,
    due: &[usize],
    opts: &LsmOptions,
    dels: &RangeDels,
) -> Result<Vec<(usize, BuiltTable)>> {
    let parts = opts.partitions;
    let mut is_due = vec![false; parts];
    for &p in due {
        if let Some(d) = is_due.get_mut(p) {
            *d = true;
        }
    }
    let sources: Vec<Box<dyn Source>> = buffers
        .memtables()
        .into_iter()
        .map(|m| {
            let wanted: Vec<bool> = (0..parts)
                .map(|p| is_due[p] && buffers.holds(p, m.id()))
                .collect();
            Box::new(buffered_source(
                m,
                u64::MAX,
                Bound::Unbounded,
                wanted,
                false,
            )) as Box<dyn Source>
        })
        .collect();
    let mut merged = Merge::new(sources);
    let mut builders: Vec<Option<TableBuilder>> = (0..parts).map(|_| None).collect();
    let (mut k, mut v) = (Vec::new(), Vec::new());
    while let Some((live, seq)) = merged.next_into(&mut k, &mut v)? {
        // A range delete newer than the entry takes it out of every table
        // from here on (the table's own sequence number would no longer
        // tell it is older).
        if dels.covers(&k, seq) {
            continue;
        }
        if let Some(slot) = builders.get_mut(opts.partition_of(&k)) {
            let b = slot.get_or_insert_with(|| {
                TableBuilder::new(opts.index, opts.bloom_bits_per_key, opts.training_threads)
                    .smaller_index(opts.smaller_index)
                    .compression(opts.compression)
            });
            b.note_seq(seq);
            b.add(&k, live.then_some(v.as_slice()));
        }
    }
    Ok(builders
        .into_iter()
        .enumerate()
        .filter_map(|(p, b)| Some((p, b?.finish()?)))
        .collect())
}

/// A buffered memtable as a merge source from `from` (ascending, or
/// descending with `rev`): only the keys of partitions `wanted` marks (its
/// other partitions' entries are in tables, where newer versions may be).
pub(super) fn buffered_source(
    mem: Arc<Memtable>,
    seq: u64,
    from: Bound<&[u8]>,
    wanted: Vec<bool>,
    rev: bool,
) -> MemSource {
    let keep = move |k: &[u8]| {
        wanted
            .get(crate::options::partition_of(k, wanted.len()))
            .copied()
            .unwrap_or(false)
    };
    if rev {
        MemSource::rev(mem, seq, from, Some(Box::new(keep)))
    } else {
        MemSource::filtered(mem, seq, from, Some(Box::new(keep)))
    }
}

/// A partition's tables from a memtable's newest versions (the shared
/// memtable is split by partition at flush). Entries a range delete newer
/// than them covers are left out. A partition's output is cut into several
/// disjoint tables: at `cuts[p]` (keys no table below may straddle, so a
/// compaction can hand back the space of what it has merged as it goes;
/// see [`crate::compaction::merge`]) and at the target table size.
pub(super) fn build_from_memtable(
    mem: &Memtable,
    opts: &LsmOptions,
    dels: &RangeDels,
    cuts: &[Vec<Vec<u8>>],
) -> Vec<(usize, BuiltTable)> {
    let new_builder = || {
        TableBuilder::new(opts.index, opts.bloom_bits_per_key, opts.training_threads)
            .smaller_index(opts.smaller_index)
            .compression(opts.compression)
    };
    let mut builders: Vec<Option<TableBuilder>> = (0..opts.partitions).map(|_| None).collect();
    let mut next_cut = vec![0usize; opts.partitions];
    let mut out = Vec::new();
    mem.for_each_newest(|k, seq, v| {
        if dels.covers(k, seq) {
            return;
        }
        let p = opts.partition_of(k);
        let (Some(slot), Some(ci)) = (builders.get_mut(p), next_cut.get_mut(p)) else {
            return;
        };
        let part_cuts = cuts.get(p).map_or(&[][..], Vec::as_slice);
        let mut crossed = false;
        while part_cuts.get(*ci).is_some_and(|c| c.as_slice() < k) {
            *ci += 1;
            crossed = true;
        }
        let b = slot.get_or_insert_with(new_builder);
        if !b.is_empty() && (crossed || b.estimated_bytes() >= opts.table_bytes) {
            if let Some(t) = b.finish() {
                out.push((p, t));
            }
        }
        b.note_seq(seq);
        b.add(k, v);
    });
    out.extend(
        builders
            .into_iter()
            .enumerate()
            .filter_map(|(p, b)| Some((p, b?.finish()?))),
    );
    out
}

impl Inner {
    pub(super) fn flush_loop(&self) {
        loop {
            let job = {
                let mut stop = self.bg.lock();
                loop {
                    if *stop || self.poisoned.is_set() {
                        return;
                    }
                    let cur = self.current.read().clone();
                    if let Some(m) = cur.imms.last().cloned() {
                        break Some(m);
                    }
                    if self.drain.load(Ordering::Acquire) {
                        if cur.buffers.bytes() > 0 {
                            break None;
                        }
                        self.drain.store(false, Ordering::Release);
                    }
                    // Not held while asleep: it pins every table it names.
                    drop(cur);
                    self.bg_wake.wait_for(&mut stop, Duration::from_millis(100));
                }
            };
            let r = match &job {
                Some(imm) => self.flush_one(imm),
                None => self.drain_buffers(),
            }
            .and_then(|()| self.retire_flushed_logs());
            if let Err(e) = r {
                log::error!("flush failed: {e}");
                self.poison(&e);
                return;
            }
        }
    }

    /// The options L0 tables are written with.
    pub(super) fn l0_options(&self) -> LsmOptions {
        let mut opts = self.opts.clone();
        if opts.load_aware.is_some() {
            // L0 tables live briefly (SwiftKV builds models from L1 on).
            opts.index = crate::options::IndexKind::Sparse;
        }
        opts
    }

    /// Moves the oldest immutable memtable out: unpartitioned, into one L0
    /// table; partitioned, into the flush buffers, writing the partitions
    /// [`partition_buffer::due`] names to L0.
    fn flush_one(&self, imm: &Arc<Memtable>) -> Result<()> {
        let _work = ferrite_core::background::begin(ferrite_core::background::Work::Flush);
        let opts = self.l0_options();
        let cur = self.current.read().clone();
        let mut buffers = (*cur.buffers).clone();
        // Only durable range deletes drop entries: the version's, and the
        // flushed memtable's own (its WAL is synced); a newer memtable's
        // may yet be lost in a crash.
        let dels = RangeDels::visible(
            cur.version.range_dels.iter().chain(&imm.range_dels()),
            u64::MAX,
        );
        let built = if opts.partitions == 1 {
            let cuts: Vec<Vec<Vec<u8>>> = (0..opts.partitions)
                .map(|p| cur.version.flush_cuts(p, opts.flush_pieces()))
                .collect();
            build_from_memtable(imm, &opts, &dels, &cuts)
        } else {
            for (p, part) in buffers.parts.iter_mut().enumerate() {
                let bytes = imm.partition_bytes(p);
                if bytes > 0 {
                    part.insert(
                        0,
                        Pending {
                            mem: imm.clone(),
                            bytes,
                        },
                    );
                }
            }
            let due = partition_buffer::due(
                &buffers.summary(),
                opts.table_bytes,
                imm.id(),
                partition_buffer::retained(WAL_DEVICES, opts.max_immutable),
            );
            let built = build_from_buffers(&buffers, &due, &opts, &dels)?;
            for p in due {
                if let Some(part) = buffers.parts.get_mut(p) {
                    part.clear();
                }
            }
            built
        };
        let flushed = Flushed {
            mem: Some(imm.clone()),
            buffers: Arc::new(buffers),
            next: imm.id() + 1,
        };
        self.install_l0(built, &flushed)
    }

    /// Writes every partition's flush buffer to L0 (for `flush`).
    fn drain_buffers(&self) -> Result<()> {
        let _work = ferrite_core::background::begin(ferrite_core::background::Work::Flush);
        let opts = self.l0_options();
        let cur = self.current.read().clone();
        let due: Vec<usize> = (0..opts.partitions)
            .filter(|&p| cur.buffers.pending(p).next().is_some())
            .collect();
        let built = build_from_buffers(
            &cur.buffers,
            &due,
            &opts,
            &RangeDels::visible(cur.version.range_dels.iter(), u64::MAX),
        )?;
        let flushed = Flushed {
            mem: None,
            buffers: Arc::new(PartitionBuffers::new(opts.partitions)),
            next: cur.imms.last().map_or(cur.mem.id(), |m| m.id()),
        };
        self.install_l0(built, &flushed)
    }

    /// Writes `built` as L0 tables and installs them with `flushed`.
    fn install_l0(&self, built: Vec<(usize, BuiltTable)>, flushed: &Flushed) -> Result<()> {
        let mut added = Vec::new();
        for (part, built) in &built {
            self.count_build(built);
            let t = write_table(&self.space, &self.cache, self.next_table_id(), built)?;
            added.push((*part, 0, t));
        }
        if !added.is_empty() {
            self.space.sync()?;
        }
        // Cached before the install, so no reader finds the tables cold.
        if self.opts.cache_flushed {
            let bytes = added
                .iter()
                .map(|(_, _, t)| t.logical_pages() as usize * PAGE)
                .sum();
            if self.cache.takes_flush(bytes) {
                for ((_, _, t), (_, b)) in added.iter().zip(&built) {
                    t.cache_from(&b.bytes)?;
                }
            }
        }
        self.install(&[], &added, Some(flushed))?;
        self.counters.flushes.fetch_add(1, Ordering::Relaxed);
        self.counters
            .l0_flushed
            .fetch_add(added.len() as u64, Ordering::Relaxed);
        self.wake();
        Ok(())
    }
}
