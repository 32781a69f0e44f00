//! The engine's counters as [`Stats`]: the common ones (operations, user
//! and device bytes, the pool's hits and misses, memory against the
//! budget) and the B+tree's own in [`BTreeStats`], with TurboIndex's and
//! SHORTCUT's when they are on.
//!
//! Memory counts every allocation charged to the budget: the pool, the
//! working buffers, the insert buffer and the companion. Snapshot bytes
//! (old versions kept for live snapshots) are reported apart.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use ferrite_core::engine::ChainStats;
use ferrite_core::{CacheCounts, DeviceCounts, EngineStats, Footprint, SpaceKind, Stats};

use super::Shared;
use crate::insert_buffer::BufferCounters;
use crate::shortcut::ShortcutReport;
use crate::tree::LevelFill;

/// The B+tree's own counters.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct BTreeStats {
    /// Levels, leaves included.
    pub height: u32,
    pub pool_frames: u64,
    /// Page ids allocated in the page file.
    pub pages: u64,
    /// Ids free for reuse.
    pub free_pages: u64,
    pub dirty_pages: u64,
    /// Dirty pages evicted to the spill file since the last checkpoint.
    pub spilled_pages: u64,
    pub spill_log_slots: u64,
    /// Page hits found through a parent's route, without the page table
    /// (also counted in the cache's hits), and the frames with route
    /// tables.
    pub routed_hits: u64,
    pub routed_frames: u64,
    /// Frames the pool gave up to hold the spill log's map and route
    /// tables (see `buffer_pool`).
    pub retired_frames: u64,
    /// Working buffers (WAL, checkpoint chunk) charged to the budget.
    pub working_bytes: u64,
    pub spills: u64,
    pub spill_batches: u64,
    pub spill_requests: u64,
    pub checkpoints: u64,
    /// Pages checkpoints installed, and those of them written to the
    /// double-write file: a page spilled since the last checkpoint is
    /// protected by its spilled image, not copied.
    pub checkpoint_pages: u64,
    pub double_written_pages: u64,
    /// Trees rebuilt smaller once mostly empty (see `compaction`).
    pub compactions: u64,
    pub wal_bytes: u64,
    /// Writes and lookups whose leaf was in the pool, or was not; lookups
    /// the insert buffer answered.
    pub write_hits: u64,
    pub write_misses: u64,
    pub read_hits: u64,
    pub read_misses: u64,
    pub buffer_reads: u64,
    /// Pages per level, leaves first (counted from the inner pages).
    pub pages_per_level: Vec<u64>,
    /// Per level, how full the last `verify` found the pages.
    pub fill_per_level: Vec<LevelFill>,
    pub insert_buffer: Option<InsertBufferStats>,
    pub shortcut: Option<ShortcutReport>,
    pub snapshots: ChainStats,
    /// The common device counts split by file.
    pub files: FileCounts,
}

/// Device counts per file of the store; their sum is [`Stats::device`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[non_exhaustive]
pub struct FileCounts {
    pub pages: DeviceCounts,
    pub wal: DeviceCounts,
    /// The double-write file.
    pub dwb: DeviceCounts,
    pub spill: DeviceCounts,
    /// Both carry-over files.
    pub carry: DeviceCounts,
}

impl FileCounts {
    pub fn total(&self) -> DeviceCounts {
        self.pages + self.wal + self.dwb + self.spill + self.carry
    }

    /// Each file's name and counts, in a fixed order.
    pub fn named(&self) -> [(&'static str, DeviceCounts); 5] {
        [
            ("pages", self.pages),
            ("wal", self.wal),
            ("dwb", self.dwb),
            ("spill", self.spill),
            ("carry", self.carry),
        ]
    }
}

/// TurboIndex's insert buffer.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct InsertBufferStats {
    /// Whether the adaptive buffer is on now, and how often it switched.
    pub on: bool,
    pub switches: u64,
    /// Running counters (they go on while an adaptive buffer is off).
    pub counters: BufferCounters,
    pub bytes: u64,
    pub budget_bytes: u64,
    pub records: u64,
    pub pages: u64,
    pub stack_nodes: u64,
    pub l_nodes: u64,
    pub promotions: u64,
}

impl EngineStats for BTreeStats {
    fn fields(&self) -> Vec<(String, f64)> {
        let mut out: Vec<(String, f64)> = [
            ("height", u64::from(self.height)),
            ("pool_frames", self.pool_frames),
            ("pages", self.pages),
            ("free_pages", self.free_pages),
            ("dirty_pages", self.dirty_pages),
            ("spilled_pages", self.spilled_pages),
            ("spill_log_slots", self.spill_log_slots),
            ("routed_hits", self.routed_hits),
            ("routed_frames", self.routed_frames),
            ("retired_frames", self.retired_frames),
            ("working_bytes", self.working_bytes),
            ("spills", self.spills),
            ("spill_batches", self.spill_batches),
            ("spill_requests", self.spill_requests),
            ("checkpoints", self.checkpoints),
            ("checkpoint_pages", self.checkpoint_pages),
            ("double_written_pages", self.double_written_pages),
            ("compactions", self.compactions),
            ("wal_bytes", self.wal_bytes),
            ("write_hits", self.write_hits),
            ("write_misses", self.write_misses),
            ("read_hits", self.read_hits),
            ("read_misses", self.read_misses),
            ("buffer_reads", self.buffer_reads),
            ("snapshot_retained_keys", self.snapshots.retained_keys),
        ]
        .into_iter()
        .map(|(n, v)| (n.to_string(), v as f64))
        .collect();
        for (file, c) in self.files.named() {
            out.extend([
                (format!("{file}_read_bytes"), c.read_bytes as f64),
                (format!("{file}_write_bytes"), c.write_bytes as f64),
            ]);
        }
        for (i, n) in self.pages_per_level.iter().enumerate() {
            out.push((format!("pages_level_{i}"), *n as f64));
        }
        for (i, f) in self.fill_per_level.iter().enumerate() {
            out.extend([
                (format!("fill_level_{i}"), f.mean_fill()),
                (format!("min_fill_level_{i}"), f.min_fill),
                (format!("under_half_level_{i}"), f.under_half as f64),
                (format!("plain_pages_level_{i}"), f.plain_slots as f64),
            ]);
        }
        if let Some(ib) = &self.insert_buffer {
            let k = &ib.counters;
            out.extend(
                [
                    ("ib_on", u64::from(ib.on)),
                    ("ib_switches", ib.switches),
                    ("ib_refused_writes", k.refused),
                    ("ib_buffered_writes", k.buffered),
                    ("ib_hot_loads", k.promoted_loads),
                    ("ib_full_loads", k.full_loads),
                    ("ib_pressure_loads", k.pressure_loads),
                    ("ib_applied_records", k.applied_records),
                    ("ib_bytes", ib.bytes),
                    ("ib_budget_bytes", ib.budget_bytes),
                    ("ib_records", ib.records),
                    ("ib_pages", ib.pages),
                    ("ib_stack_nodes", ib.stack_nodes),
                    ("ib_l_nodes", ib.l_nodes),
                    ("ib_promotions", ib.promotions),
                ]
                .into_iter()
                .map(|(n, v)| (n.to_string(), v as f64)),
            );
        }
        if let Some(r) = &self.shortcut {
            let (mut p, mut h) = (0u64, 0u64);
            for (l, (&n, &k)) in r.level_predictions.iter().zip(&r.level_hits).enumerate() {
                p += n;
                h += k;
                if n > 0 {
                    out.push((format!("sc_accuracy_level_{l}"), k as f64 / n as f64));
                }
            }
            out.extend([
                ("sc_predictions".to_string(), p as f64),
                ("sc_hits".to_string(), h as f64),
                ("sc_prefetched".to_string(), r.prefetched as f64),
                ("sc_prefetch_used".to_string(), r.prefetch_used as f64),
                ("sc_prefetch_wasted".to_string(), r.prefetch_wasted as f64),
                ("sc_rebuilds".to_string(), r.rebuilds as f64),
                ("sc_rebuild_seconds".to_string(), r.rebuild_seconds_total),
                ("sc_relayouts".to_string(), r.relayouts as f64),
                ("sc_relocated".to_string(), r.relocated as f64),
                ("sc_relocation_skips".to_string(), r.relocation_skips as f64),
                ("sc_lookups".to_string(), r.lookups as f64),
                ("sc_prefetch_failed".to_string(), r.prefetch_failed as f64),
                ("sc_stale_walks".to_string(), r.stale_walks as f64),
                ("sc_disabled_levels".to_string(), r.disabled_levels as f64),
                ("sc_relayout_seconds".to_string(), r.relayout_seconds_total),
                ("sc_companion_bytes".to_string(), r.companion_bytes as f64),
                ("sc_segments".to_string(), r.segments as f64),
                ("sc_discontinuities".to_string(), r.discontinuities as f64),
                ("sc_stash_entries".to_string(), r.stash_entries as f64),
            ]);
        }
        out
    }
}

impl Shared {
    pub(super) fn stats(&self) -> Stats {
        let s = self;
        let c = &s.counters;
        let pool = &s.tree.pool;
        let of = |d: &Arc<dyn ferrite_io::BlockDevice>| DeviceCounts::from(d.io_stats());
        let files = FileCounts {
            pages: of(&s.devices.pages),
            wal: of(&s.devices.wal),
            dwb: of(&s.devices.dwb),
            spill: of(&s.devices.spill),
            carry: of(&s.devices.carry[0]) + of(&s.devices.carry[1]),
        };
        let st = s.state.read();
        let ld = |a: &std::sync::atomic::AtomicU64| a.load(Relaxed);
        let insert_buffer = s.opts.insert_buffer.map(|_| {
            let ib = st.turbo.buffer();
            InsertBufferStats {
                on: ib.is_some(),
                switches: st.turbo.switches(),
                counters: st.turbo.counters(),
                bytes: ib.map_or(0, |ib| ib.memory_bytes() as u64),
                budget_bytes: st.turbo.budget() as u64,
                records: ib.map_or(0, |ib| ib.records() as u64),
                pages: ib.map_or(0, |ib| ib.pages() as u64),
                stack_nodes: ib.map_or(0, |ib| ib.detector().len() as u64),
                l_nodes: ib.map_or(0, |ib| ib.detector().l_count() as u64),
                promotions: ib.map_or(0, |ib| ib.detector().counters.promotions),
            }
        });
        let snapshots = s.snapshots.stats();
        let fill = s.fill.lock().clone();
        let footprint = s.footprint(st.shape.free.len() as u64, &fill);
        let detail = BTreeStats {
            height: st.shape.height + 1,
            pool_frames: pool.capacity() as u64,
            pages: st.shape.page_count,
            free_pages: (st.shape.free.len() + st.shape.clean.len()) as u64,
            dirty_pages: pool.dirty_count() as u64,
            spilled_pages: pool.spilled() as u64,
            spill_log_slots: pool.spill_log_slots(),
            routed_hits: ld(&pool.counters.routed),
            routed_frames: pool.routed_frames() as u64,
            retired_frames: pool.retired_frames() as u64,
            working_bytes: s.reserve,
            spills: ld(&pool.counters.spills),
            spill_batches: ld(&pool.counters.spill_batches),
            spill_requests: ld(&pool.counters.spill_requests),
            checkpoints: ld(&c.checkpoints),
            checkpoint_pages: ld(&c.checkpoint_pages),
            double_written_pages: ld(&c.double_written_pages),
            compactions: ld(&c.compactions),
            wal_bytes: s.wal.len(),
            write_hits: ld(&c.access.write_hits),
            write_misses: ld(&c.access.write_misses),
            read_hits: ld(&c.access.read_hits),
            read_misses: ld(&c.access.read_misses),
            buffer_reads: ld(&c.access.buffer_reads),
            // Pages per level (0 = leaves), found by walking the inner
            // pages only; empty if a page cannot be read.
            pages_per_level: s.tree.level_pages(&st.shape).unwrap_or_default(),
            fill_per_level: fill,
            insert_buffer,
            shortcut: s.shortcut.as_ref().map(|sc| sc.report(false)),
            snapshots,
            files,
        };
        Stats {
            ops: c.api.ops(),
            user_bytes_written: c.api.bytes_written(),
            user_bytes_read: c.api.bytes_read(),
            device: files.total(),
            cache: CacheCounts {
                hits: ld(&pool.counters.hits) + ld(&pool.counters.routed),
                misses: ld(&pool.counters.misses),
                evictions: ld(&pool.counters.evictions),
            },
            memory_bytes: pool.memory_bytes()
                + s.reserve
                + st.turbo.buffer().map_or(0, |ib| ib.memory_bytes() as u64)
                + s.shortcut.as_ref().map_or(0, |sc| sc.memory_bytes()),
            snapshots: snapshots.live_snapshots,
            snapshot_bytes: snapshots.retained_bytes,
            detail: Some(Arc::new(detail)),
            footprint,
        }
    }

    /// The store's bytes by kind: the page file split into meta pages,
    /// free pages that still hold bytes (clean ones are holes), the slack inside tree pages (as the last verify walk
    /// measured it; none before one) and the rest, which is data (tree
    /// and overflow pages); then the double-write, spill, WAL and
    /// carry-over files as allocated.
    fn footprint(&self, free_pages: u64, fill: &[LevelFill]) -> Footprint {
        let d = &self.devices;
        let ps = self.tree.page_size as u64;
        let meta = 2 * ps;
        let free = free_pages * ps;
        let slack: u64 = fill
            .iter()
            .map(|l| l.usable_bytes.saturating_sub(l.used_bytes))
            .sum();
        let mut f = Footprint::default();
        f.add(
            SpaceKind::Data,
            d.pages.allocated().saturating_sub(meta + free + slack),
        );
        f.add(SpaceKind::Slack, slack);
        f.add(SpaceKind::Free, free);
        f.add(SpaceKind::DoubleWrite, d.dwb.allocated());
        f.add(SpaceKind::Spill, d.spill.allocated());
        f.add(SpaceKind::Log, d.wal.allocated());
        f.add(
            SpaceKind::Metadata,
            meta + d.carry[0].allocated() + d.carry[1].allocated(),
        );
        f
    }
}
