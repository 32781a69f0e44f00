//! Copying a live store into another directory from its own files: the
//! LSM's online checkpoint.
//!
//! The copy is the store at one sequence number `S`, taken as a snapshot
//! takes it (`snapshot.rs`): the version current then, whose tables hold
//! only writes at or below `S`, and the memtables, of which only entries
//! at or below `S` count. Tables are immutable, so each live table's
//! extent is copied to the same offset of the copy's table space: cloned
//! where the file system shares blocks (a reflink, what a hard link to a
//! table file is to a store of many files), copied by the kernel
//! otherwise, and never decoded. The memtables' entries are written as
//! new L0 tables, newer than every copied one. A manifest naming all of
//! them, with `S` as its last sequence number, is written last.
//!
//! Invariants:
//! - the destination is a store of this engine with these options that
//!   was never written; its write-ahead logs stay empty, so the copy
//!   recovers from its manifest alone;
//! - while the copy runs, the snapshot pins the version, so no table it
//!   copies is compacted away and its extent reused;
//! - a memtable entry a range delete newer than it covers is left out
//!   (as a flush does), since the table it joins is judged by its newest
//!   sequence number; the range deletes themselves go into the manifest,
//!   marked as written before every memtable the copy will have;
//! - nothing reaches the copy's manifest before its tables are synced.

use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use ferrite_core::{Error, FileCopy, Result};
use ferrite_io::{BlockDevice, RangeCopy};

use super::devices::Devices;
use super::flush::buffered_source;
use super::publish::write_table;
use super::{Inner, SuperVersion};
use crate::block_cache::BlockCache;
use crate::manifest::{Manifest, ManifestState, TableRecord};
use crate::merge::{MemSource, Merge, Source};
use crate::range_del::{RangeDel, RangeDels};
use crate::table::block::PAGE;
use crate::table::{BuiltTable, TableBuilder};
use crate::table_space::{Extent, TableSpace};

/// Cache for the tables the copy writes (only their footers are read).
const COPY_CACHE_BYTES: u64 = 1 << 20;

impl Inner {
    /// Fills the never-written store in `dir` with this store as of
    /// sequence number `seq` in `sv` (see the module docs).
    pub(super) fn copy_into(
        &self,
        sv: &SuperVersion,
        seq: u64,
        next_id: u64,
        dir: &Path,
    ) -> Result<FileCopy> {
        let devices = Devices::open_dir(dir, false)?;
        let manifest = Manifest::new(devices.manifest.clone());
        let fresh = manifest
            .load()?
            .ok_or_else(|| not_fresh(dir, "it has no manifest"))?;
        if !fresh.tables.is_empty() || !fresh.range_dels.is_empty() || fresh.last_seq != 0 {
            return Err(not_fresh(dir, "it holds data"));
        }
        if fresh.partitions as usize != self.opts.partitions {
            return Err(not_fresh(
                dir,
                &format!(
                    "it has {} partitions, this store {}",
                    fresh.partitions, self.opts.partitions
                ),
            ));
        }

        let mut records: Vec<TableRecord> = sv
            .version
            .tables()
            .map(|(part, level, t)| TableRecord {
                id: t.id,
                partition: part as u16,
                level: level as u8,
                start: t.extent.start,
                pages: t.extent.pages,
            })
            .collect();
        let copied = copy_extents(&*self.devices.tables, &*devices.tables, &records)?;

        let extents: Vec<Extent> = records
            .iter()
            .map(|r| Extent {
                start: r.start,
                pages: r.pages,
            })
            .collect();
        let space = Arc::new(TableSpace::open(devices.tables.clone(), &extents)?);
        let cache = Arc::new(BlockCache::new(COPY_CACHE_BYTES));
        let dels = range_dels_at(sv, seq);
        let mut written = 0u64;
        let mut id = next_id;
        for (part, built) in self.build_memtables(sv, seq, &dels)? {
            written += built.bytes.len() as u64;
            let t = write_table(&space, &cache, id, &built)?;
            records.push(TableRecord {
                id,
                partition: part as u16,
                level: 0,
                start: t.extent.start,
                pages: t.extent.pages,
            });
            id += 1;
        }
        space.sync()?;

        let state = ManifestState {
            generation: fresh.generation + 1,
            next_table: id,
            log_number: fresh.log_number,
            last_seq: seq,
            partitions: fresh.partitions,
            tables: records,
            part_logs: fresh.part_logs.clone(),
            range_dels: dels,
        };
        written += state.encode().len() as u64;
        manifest.store(&state)?;
        Ok(FileCopy {
            shared_bytes: copied.shared,
            copied_bytes: copied.kernel + copied.buffered,
            written_bytes: written,
        })
    }

    /// The memtables' entries at or below `seq`, each key's newest, as L0
    /// tables per partition, cut at the target table size; entries a
    /// range delete of `dels` covers are left out, deletes kept (older
    /// tables may hold the key).
    fn build_memtables(
        &self,
        sv: &SuperVersion,
        seq: u64,
        dels: &[RangeDel],
    ) -> Result<Vec<(usize, BuiltTable)>> {
        let opts = self.l0_options();
        let parts = opts.partitions;
        // Newest first, as the merge breaks ties: the live memtable, the
        // immutable ones, then those the flush buffers still hold (only
        // for the partitions that wait for them; their other entries are
        // in tables already).
        let mut sources: Vec<Box<dyn Source>> = Vec::new();
        for m in std::iter::once(&sv.mem).chain(&sv.imms) {
            sources.push(Box::new(MemSource::new(m.clone(), seq, Bound::Unbounded)));
        }
        for m in sv.buffers.memtables() {
            let wanted = (0..parts).map(|p| sv.buffers.holds(p, m.id())).collect();
            sources.push(Box::new(buffered_source(
                m,
                seq,
                Bound::Unbounded,
                wanted,
                false,
            )));
        }
        let covering = RangeDels::visible(dels, seq);
        let mut merged = Merge::new(sources);
        let mut builders: Vec<Option<TableBuilder>> = (0..parts).map(|_| None).collect();
        let mut out = Vec::new();
        let (mut k, mut v) = (Vec::new(), Vec::new());
        while let Some((live, entry_seq)) = merged.next_into(&mut k, &mut v)? {
            if covering.covers(&k, entry_seq) {
                continue;
            }
            let part = opts.partition_of(&k);
            let Some(slot) = builders.get_mut(part) else {
                continue;
            };
            let b = slot.get_or_insert_with(|| {
                TableBuilder::new(opts.index, opts.bloom_bits_per_key, opts.training_threads)
                    .smaller_index(opts.smaller_index)
                    .compression(opts.compression)
            });
            if !b.is_empty() && b.estimated_bytes() >= opts.table_bytes {
                if let Some(t) = b.finish() {
                    out.push((part, t));
                }
            }
            b.note_seq(entry_seq);
            b.add(&k, live.then_some(v.as_slice()));
        }
        out.extend(
            builders
                .into_iter()
                .enumerate()
                .filter_map(|(p, b)| Some((p, b?.finish()?))),
        );
        Ok(out)
    }
}

/// The range deletes a read at `seq` of `sv` honours: the version's and
/// the live and immutable memtables' (a buffered memtable's moved to the
/// version when it was flushed), each marked as written before any
/// memtable, since the copy holds none of this store's.
fn range_dels_at(sv: &SuperVersion, seq: u64) -> Vec<RangeDel> {
    let in_mem = std::iter::once(&sv.mem)
        .chain(&sv.imms)
        .flat_map(|m| m.range_dels());
    sv.version
        .range_dels
        .iter()
        .cloned()
        .chain(in_mem)
        .filter(|d| d.seq <= seq)
        .map(|d| RangeDel { mem: 0, ..d })
        .collect()
}

/// Copies each table's extent from `src` to the same offset of `dst`,
/// neighbouring extents as one range, in offset order.
fn copy_extents(
    src: &dyn BlockDevice,
    dst: &dyn BlockDevice,
    tables: &[TableRecord],
) -> Result<RangeCopy> {
    let mut runs: Vec<(u64, u64)> = tables.iter().map(|t| (t.start, t.pages)).collect();
    runs.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(runs.len());
    for (start, pages) in runs {
        match merged.last_mut() {
            Some((s, p)) if *s + *p == start => *p += pages,
            _ => merged.push((start, pages)),
        }
    }
    let mut total = RangeCopy::default();
    let page = PAGE as u64;
    for (start, pages) in merged {
        total += dst.copy_range_from(src, start * page, pages * page)?;
    }
    Ok(total)
}

fn not_fresh(dir: &Path, why: &str) -> Error {
    Error::InvalidOptions(format!(
        "{} is not a new, never written LSM store ({why})",
        dir.display()
    ))
}
