//! The engine's counters as [`Stats`], and [`LsmReport`], the shape of
//! its levels (tables, bytes, learned tables, index sizes) for `ferrite
//! inspect` and the harness.
//!
//! Memory counts the block cache, the memtables (flush buffers' included)
//! and open tables' filters, indexes and handles.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ferrite_core::Stats;

use super::LsmStore;
use crate::table::Table;

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
        let mut extra = vec![
            ("flushes".to_string(), ld(&c.flushes) as f64),
            ("l0_flushed_tables".to_string(), ld(&c.l0_flushed) as f64),
            ("compactions".to_string(), ld(&c.compactions) as f64),
            ("trivial_moves".to_string(), ld(&c.moves) as f64),
            (
                "compaction_bytes_read".to_string(),
                ld(&c.compaction_read) as f64,
            ),
            (
                "compaction_bytes_written".to_string(),
                ld(&c.compaction_written) as f64,
            ),
            ("write_stalls".to_string(), ld(&c.stalls) as f64),
            ("write_stall_micros".to_string(), ld(&c.stall_micros) as f64),
            (
                "max_write_stall_micros".to_string(),
                ld(&c.max_stall_micros) as f64,
            ),
            ("write_slowdowns".to_string(), ld(&c.slowdowns) as f64),
            ("training_micros".to_string(), ld(&c.training_micros) as f64),
            (
                "load_aware_learned".to_string(),
                ld(&c.learned_builds) as f64,
            ),
            ("load_aware_sparse".to_string(), ld(&c.sparse_builds) as f64),
            ("partition_drops".to_string(), ld(&c.partition_drops) as f64),
            ("index_bytes".to_string(), report.index_bytes() as f64),
            ("table_memory_bytes".to_string(), table_memory as f64),
            ("memtable_bytes".to_string(), report.memtable_bytes as f64),
            (
                "flush_buffer_bytes".to_string(),
                report.buffered_bytes as f64,
            ),
        ];
        for (l, lr) in report.levels.iter().enumerate() {
            extra.push((format!("l{l}_tables"), lr.tables as f64));
            extra.push((format!("l{l}_bytes"), lr.bytes as f64));
            extra.push((format!("l{l}_learned_tables"), lr.learned_tables as f64));
            extra.push((format!("l{l}_index_bytes"), lr.index_bytes as f64));
            extra.push((format!("l{l}_model_segments"), lr.model_segments as f64));
        }
        Stats {
            ops: c.api.ops(),
            user_bytes_written: c.api.bytes_written(),
            user_bytes_read: c.api.bytes_read(),
            device,
            cache: inner.cache.counts(),
            memory_bytes: report.cache_bytes + report.memtable_bytes + table_memory,
            extra,
        }
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
            .map(|ts| LevelReport {
                tables: ts.len(),
                bytes: ts.iter().map(|t| t.bytes()).sum(),
                entries: ts.iter().map(|t| t.footer.entries).sum(),
                learned_tables: ts.iter().filter(|t| t.index.is_learned()).count(),
                index_bytes: ts.iter().map(|t| t.footer.index_len as u64).sum(),
                model_segments: ts.iter().map(|t| t.index.model_segments() as u64).sum(),
                index_memory: ts.iter().map(|t| t.memory_bytes() as u64).sum(),
            })
            .collect();
        LsmReport {
            levels,
            memtable_bytes: sv.mem.bytes() as u64
                + sv.imms.iter().map(|m| m.bytes() as u64).sum::<u64>()
                + sv.buffers
                    .memtables()
                    .iter()
                    .map(|m| m.bytes() as u64)
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
    pub bytes: u64,
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
}
