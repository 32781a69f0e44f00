//! The engine's counters as [`Stats`], and [`LsmReport`], the shape of
//! its levels (tables, bytes, learned tables, index sizes) for `ferrite
//! inspect` and the harness.
//!
//! Memory counts the block cache, the memtables (flush buffers' included)
//! and open tables' filters, indexes and handles.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ferrite_core::{EngineStats, Footprint, SpaceKind, Stats};

use super::LsmStore;
use crate::table::block::PAGE;
use crate::table::Table;

/// The LSM-tree's own counters.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct LsmStats {
    pub flushes: u64,
    /// L0 tables written by flushes (of memtables or flush buffers).
    pub l0_flushed_tables: u64,
    pub compactions: u64,
    /// Slices of compactions installed before their job ended, each
    /// freeing the inputs the merge had passed.
    pub compaction_slices: u64,
    /// Compactions that moved a table down without rewriting it.
    pub trivial_moves: u64,
    pub compaction_bytes_read: u64,
    pub compaction_bytes_written: u64,
    /// Writes that waited for room, for how long in all, and the longest.
    pub write_stalls: u64,
    pub write_stall_micros: u64,
    pub max_write_stall_micros: u64,
    /// Writes delayed past the L0 slowdown mark.
    pub write_slowdowns: u64,
    /// Time spent fitting learned indexes.
    pub training_micros: u64,
    /// Load-aware choices of a compaction output's index.
    pub load_aware_learned: u64,
    pub load_aware_sparse: u64,
    /// Tables that got the sparse index because their model was larger.
    pub sparse_fallbacks: u64,
    pub partition_drops: u64,
    /// WAL devices emptied once both manifest copies were past them.
    pub retired_logs: u64,
    /// The most table-space bytes in use at once since open (live tables,
    /// a compaction's outputs, inputs a reader still pins): the tables'
    /// peak on disk, since freed extents are discarded.
    pub table_space_peak_bytes: u64,
    /// Range deletes the version keeps (until no table holds what they cover).
    pub range_deletes: u64,
    /// Filters, indexes and table handles in memory.
    pub table_memory_bytes: u64,
    /// The shape of the tree when the stats were taken.
    pub report: LsmReport,
}

impl EngineStats for LsmStats {
    fn fields(&self) -> Vec<(String, f64)> {
        let r = &self.report;
        let mut out: Vec<(String, f64)> = [
            ("flushes", self.flushes),
            ("l0_flushed_tables", self.l0_flushed_tables),
            ("compactions", self.compactions),
            ("compaction_slices", self.compaction_slices),
            ("trivial_moves", self.trivial_moves),
            ("compaction_bytes_read", self.compaction_bytes_read),
            ("compaction_bytes_written", self.compaction_bytes_written),
            ("write_stalls", self.write_stalls),
            ("write_stall_micros", self.write_stall_micros),
            ("max_write_stall_micros", self.max_write_stall_micros),
            ("write_slowdowns", self.write_slowdowns),
            ("training_micros", self.training_micros),
            ("load_aware_learned", self.load_aware_learned),
            ("load_aware_sparse", self.load_aware_sparse),
            ("sparse_fallbacks", self.sparse_fallbacks),
            ("partition_drops", self.partition_drops),
            ("retired_logs", self.retired_logs),
            ("table_space_peak_bytes", self.table_space_peak_bytes),
            ("range_deletes", self.range_deletes),
            ("index_bytes", r.index_bytes()),
            ("table_memory_bytes", self.table_memory_bytes),
            ("memtable_bytes", r.memtable_bytes),
            ("flush_buffer_bytes", r.buffered_bytes),
            ("compressed_tables", r.compressed_tables() as u64),
            ("table_data_bytes", r.data_bytes()),
            ("table_uncompressed_data_bytes", r.uncompressed_data_bytes()),
        ]
        .into_iter()
        .map(|(n, v)| (n.to_string(), v as f64))
        .collect();
        for (l, lr) in r.levels.iter().enumerate() {
            out.extend([
                (format!("l{l}_tables"), lr.tables as f64),
                (format!("l{l}_bytes"), lr.bytes as f64),
                (format!("l{l}_learned_tables"), lr.learned_tables as f64),
                (
                    format!("l{l}_sparse_tables"),
                    (lr.tables - lr.learned_tables) as f64,
                ),
                (format!("l{l}_index_bytes"), lr.index_bytes as f64),
                (format!("l{l}_model_segments"), lr.model_segments as f64),
            ]);
        }
        out
    }
}

impl LsmStore {
    /// The common counters and the engine's own.
    pub(super) fn collect_stats(&self) -> Stats {
        let inner = &self.inner;
        let c = &inner.counters;
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let device = inner
            .devices
            .all()
            .map(|d| ferrite_core::DeviceCounts::from(d.io_stats()))
            .fold(Default::default(), |a, b| a + b);
        let report = self.report();
        let table_memory: u64 = report.levels.iter().map(|l| l.index_memory).sum();
        let current = inner.current.read().clone();
        let pinned = inner.snapshots.measure(&current);
        let memory_bytes = report.cache_bytes + report.memtable_bytes + table_memory;
        let footprint = self.footprint(report.levels.iter().map(|l| l.bytes).sum());
        let detail = LsmStats {
            flushes: ld(&c.flushes),
            l0_flushed_tables: ld(&c.l0_flushed),
            compactions: ld(&c.compactions),
            compaction_slices: ld(&c.partial_installs),
            trivial_moves: ld(&c.moves),
            compaction_bytes_read: ld(&c.compaction_read),
            compaction_bytes_written: ld(&c.compaction_written),
            write_stalls: ld(&c.stalls),
            write_stall_micros: ld(&c.stall_micros),
            max_write_stall_micros: ld(&c.max_stall_micros),
            write_slowdowns: ld(&c.slowdowns),
            training_micros: ld(&c.training_micros),
            load_aware_learned: ld(&c.learned_builds),
            load_aware_sparse: ld(&c.sparse_builds),
            sparse_fallbacks: ld(&c.sparse_fallbacks),
            partition_drops: ld(&c.partition_drops),
            retired_logs: ld(&c.retired_logs),
            table_space_peak_bytes: inner.space.peak_pages() * PAGE as u64,
            range_deletes: current.version.range_dels.len() as u64,
            table_memory_bytes: table_memory,
            report,
        };
        Stats {
            ops: c.api.ops(),
            user_bytes_written: c.api.bytes_written(),
            user_bytes_read: c.api.bytes_read(),
            device,
            cache: inner.cache.counts(),
            memory_bytes,
            snapshots: pinned.snapshots,
            snapshot_bytes: pinned.bytes,
            detail: Some(Arc::new(detail)),
            footprint,
        }
    }

    /// The store's bytes by kind: the live tables (`live_tables` bytes)
    /// are data; the rest of the tables file is free extents, which
    /// include obsolete tables a reader still pins; then the WALs and the
    /// manifest slots as allocated.
    fn footprint(&self, live_tables: u64) -> Footprint {
        let d = &self.inner.devices;
        let tables = d.tables.allocated();
        let mut f = Footprint::default();
        f.add(SpaceKind::Data, live_tables.min(tables));
        f.add(SpaceKind::Free, tables.saturating_sub(live_tables));
        for w in &d.wal {
            f.add(SpaceKind::Log, w.allocated());
        }
        for m in &d.manifest {
            f.add(SpaceKind::Metadata, m.allocated());
        }
        f
    }

    /// Levels, tables and index blocks, for `ferrite inspect` and reports.
    pub fn report(&self) -> LsmReport {
        let sv = self.inner.current.read().clone();
        let levels = (0..self.inner.opts.levels)
            .map(|l| {
                let ts: Vec<&Arc<Table>> = sv
                    .version
                    .tables()
                    .filter(|(_, tl, _)| *tl == l)
                    .map(|(_, _, t)| t)
                    .collect();
                ts
            })
            .enumerate()
            .map(|(l, ts)| LevelReport {
                tables: ts.len(),
                runs: if l == 0 {
                    (0..sv.version.parts.len())
                        .map(|p| sv.version.l0_run_count(p))
                        .sum()
                } else {
                    (0..sv.version.parts.len())
                        .filter(|&p| sv.version.levels(p).get(l).is_some_and(|t| !t.is_empty()))
                        .count()
                },
                bytes: ts.iter().map(|t| t.bytes()).sum(),
                data_bytes: ts
                    .iter()
                    .map(|t| t.footer.data_pages as u64 * PAGE as u64)
                    .sum(),
                uncompressed_data_bytes: ts
                    .iter()
                    .map(|t| t.logical_pages() as u64 * PAGE as u64)
                    .sum(),
                compressed_tables: ts.iter().filter(|t| t.compressed()).count(),
                entries: ts.iter().map(|t| t.footer.entries).sum(),
                learned_tables: ts.iter().filter(|t| t.index.is_learned()).count(),
                index_bytes: ts.iter().map(|t| t.footer.index_len as u64).sum(),
                model_segments: ts.iter().map(|t| t.index.model_segments() as u64).sum(),
                index_memory: ts.iter().map(|t| t.memory_bytes() as u64).sum(),
            })
            .collect();
        LsmReport {
            levels,
            memtable_bytes: (sv.mem.bytes() + sv.mem.filter_bytes()) as u64
                + sv.imms
                    .iter()
                    .map(|m| (m.bytes() + m.filter_bytes()) as u64)
                    .sum::<u64>()
                + sv.buffers
                    .memtables()
                    .iter()
                    .map(|m| (m.bytes() + m.filter_bytes()) as u64)
                    .sum::<u64>(),
            buffered_bytes: sv.buffers.bytes() as u64,
            cache_bytes: self.inner.cache.bytes() as u64,
        }
    }
}

/// One level in an [`LsmReport`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LevelReport {
    pub tables: usize,
    /// Sorted runs: in L0 a flush's pieces are one (summed over
    /// partitions); in every deeper level each partition's level is one.
    pub runs: usize,
    /// Table bytes on the device (data and meta regions).
    pub bytes: u64,
    /// Of them, data blocks as stored.
    pub data_bytes: u64,
    /// The same data blocks uncompressed (equal to `data_bytes` for
    /// tables without compression).
    pub uncompressed_data_bytes: u64,
    pub compressed_tables: usize,
    pub entries: u64,
    pub learned_tables: usize,
    /// Encoded index-block bytes of the level's tables.
    pub index_bytes: u64,
    pub model_segments: u64,
    /// Filters, indexes and table handles in memory.
    pub index_memory: u64,
}

/// The shape of the tree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LsmReport {
    pub levels: Vec<LevelReport>,
    /// Memtables in memory: the active one, the immutable ones and those
    /// flush buffers still hold.
    pub memtable_bytes: u64,
    /// Table bytes the partitions' flush buffers hold.
    pub buffered_bytes: u64,
    pub cache_bytes: u64,
}

impl LsmReport {
    pub fn index_bytes(&self) -> u64 {
        self.levels.iter().map(|l| l.index_bytes).sum()
    }

    pub fn compressed_tables(&self) -> usize {
        self.levels.iter().map(|l| l.compressed_tables).sum()
    }

    /// Data blocks as stored, in every level.
    pub fn data_bytes(&self) -> u64 {
        self.levels.iter().map(|l| l.data_bytes).sum()
    }

    /// The same data blocks uncompressed.
    pub fn uncompressed_data_bytes(&self) -> u64 {
        self.levels.iter().map(|l| l.uncompressed_data_bytes).sum()
    }
}
