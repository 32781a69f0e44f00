//! The engine's counters as [`Stats`]: the common ones and ZKV's own
//! (merged-filter and batch-array hits, evictions, reclamation, zone
//! states, value-log relocation), for the store and its baselines alike.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use ferrite_core::engine::ChainStats;
use ferrite_core::{CacheCounts, DeviceCounts, EngineStats, Footprint, SpaceKind, Stats};

use super::ZkvStore;
use crate::options::Variant;
use crate::zone_space::Role;

/// ZKV's own counters (and its baselines').
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct ZkvStats {
    /// ZKV itself rather than a baseline.
    pub variant_zkv: bool,
    /// Leaves in the tree.
    pub leaves: u64,
    /// Inner nodes and leaf metadata in memory (outside the budget).
    pub index_bytes: u64,
    /// The merged filter's bytes.
    pub mf_bytes: u64,
    pub mf_valid_nodes: u64,
    pub mf_shadow_removed: u64,
    pub mf_evictions: u64,
    /// Lookups the merged filter answered.
    pub mf_hits: u64,
    /// Lookups the batch array answered.
    pub batch_hits: u64,
    pub adb_bytes: u64,
    pub delta_bytes: u64,
    pub pages_written: u64,
    pub zone_writes: u64,
    pub pairs_to_pages: u64,
    pub adb_absorbs: u64,
    pub direct_merges: u64,
    pub pressure_merges: u64,
    pub consolidations: u64,
    pub splits: u64,
    pub removed_leaves: u64,
    pub joined_leaves: u64,
    pub shared_leaves: u64,
    pub batches: u64,
    pub batch_pairs: u64,
    pub traversals: u64,
    pub migrated_pages: u64,
    /// Zones reclamation emptied.
    pub gc_zones: u64,
    /// Writes refused for want of zones.
    pub refused_writes: u64,
    pub relocated_values: u64,
    pub drained_relocations: u64,
    /// Times the store settled once writes stopped (buffers into the
    /// leaves, garbage zones reclaimed).
    pub idle_settles: u64,
    pub checkpoints: u64,
    pub wal_bytes: u64,
    pub leaf_size: u64,
    pub metalog_bytes: u64,
    pub vlog_bytes: u64,
    pub device_page_reads: u64,
    pub free_zones: u64,
    /// Bytes of zones holding data over live bytes.
    pub space_amplification: f64,
    pub snapshots: ChainStats,
}

impl EngineStats for ZkvStats {
    fn fields(&self) -> Vec<(String, f64)> {
        let mut out: Vec<(String, f64)> = [
            ("variant_zkv", u64::from(self.variant_zkv)),
            ("leaves", self.leaves),
            ("index_bytes", self.index_bytes),
            ("mf_bytes", self.mf_bytes),
            ("mf_valid_nodes", self.mf_valid_nodes),
            ("mf_shadow_removed", self.mf_shadow_removed),
            ("mf_evictions", self.mf_evictions),
            ("mf_hits", self.mf_hits),
            ("batch_hits", self.batch_hits),
            ("adb_bytes", self.adb_bytes),
            ("delta_bytes", self.delta_bytes),
            ("pages_written", self.pages_written),
            ("zone_writes", self.zone_writes),
            ("pairs_to_pages", self.pairs_to_pages),
            ("adb_absorbs", self.adb_absorbs),
            ("direct_merges", self.direct_merges),
            ("pressure_merges", self.pressure_merges),
            ("consolidations", self.consolidations),
            ("splits", self.splits),
            ("removed_leaves", self.removed_leaves),
            ("joined_leaves", self.joined_leaves),
            ("shared_leaves", self.shared_leaves),
            ("batches", self.batches),
            ("batch_pairs", self.batch_pairs),
            ("traversals", self.traversals),
            ("migrated_pages", self.migrated_pages),
            ("gc_zones", self.gc_zones),
            ("refused_writes", self.refused_writes),
            ("relocated_values", self.relocated_values),
            ("drained_relocations", self.drained_relocations),
            ("idle_settles", self.idle_settles),
            ("checkpoints", self.checkpoints),
            ("wal_bytes", self.wal_bytes),
            ("leaf_size", self.leaf_size),
            ("metalog_bytes", self.metalog_bytes),
            ("vlog_bytes", self.vlog_bytes),
            ("device_page_reads", self.device_page_reads),
            ("free_zones", self.free_zones),
            ("snapshot_retained_keys", self.snapshots.retained_keys),
        ]
        .into_iter()
        .map(|(n, v)| (n.to_string(), v as f64))
        .collect();
        out.push(("space_amplification".into(), self.space_amplification));
        out
    }
}

impl ZkvStore {
    /// The common counters and the engine's own.
    pub(super) fn collect_stats(&self) -> Stats {
        let me = &self.inner;
        let c = &me.c;
        let tree = me.tree.read();
        let t = tree.c.clone();
        let (zone_writes, pages_written) = me.io.write_counts();
        let lru = me.lru.lock();
        let (hits, misses, evictions) = if me.opts.variant == Variant::Zkv {
            (
                me.io.cache.hits.load(Ordering::Relaxed),
                me.io.cache.misses.load(Ordering::Relaxed),
                0,
            )
        } else {
            (lru.hits, lru.misses, lru.evictions)
        };
        let mf = me.mf.lock();
        let mf_bytes = mf.bytes;
        let batch_bytes = me.batches.read().mem_bytes();
        let (wal_bytes, free_zones) = (me.wal.bytes_written(), me.io.space.lock().free_zones());
        let memory = mf_bytes
            + batch_bytes
            + tree.pool.bytes
            + tree.delta_bytes
            + me.io.cache.len() * (me.io.page_size + 64)
            + me.io.waiting_pages() * (me.io.page_size + 64)
            + lru.mem_bytes(me.io.page_size);
        let mut detail = ZkvStats {
            variant_zkv: me.opts.variant == Variant::Zkv,
            leaves: tree.leaf_count() as u64,
            index_bytes: tree.index_bytes() as u64,
            mf_bytes: mf_bytes as u64,
            mf_valid_nodes: mf.valid_nodes as u64,
            mf_shadow_removed: mf.shadow_removed,
            mf_evictions: c.evictions.load(Ordering::Relaxed),
            mf_hits: c.mf_hits.load(Ordering::Relaxed),
            batch_hits: c.batch_hits.load(Ordering::Relaxed),
            adb_bytes: tree.pool.bytes as u64,
            delta_bytes: tree.delta_bytes as u64,
            pages_written,
            zone_writes,
            pairs_to_pages: t.pairs_to_pages,
            adb_absorbs: t.adb_absorbs,
            direct_merges: t.direct_merges,
            pressure_merges: t.pressure_merges,
            consolidations: t.consolidations,
            splits: t.splits,
            removed_leaves: t.removed_leaves,
            joined_leaves: t.joined_leaves,
            shared_leaves: t.shared_leaves,
            batches: t.batches,
            batch_pairs: t.batch_pairs,
            traversals: t.traversals,
            migrated_pages: t.migrated_pages,
            gc_zones: c.gc_zones.load(Ordering::Relaxed),
            refused_writes: c.refused.load(Ordering::Relaxed),
            relocated_values: c.relocated_values.load(Ordering::Relaxed),
            drained_relocations: c.drained_relocations.load(Ordering::Relaxed),
            idle_settles: c.settles.load(Ordering::Relaxed),
            checkpoints: c.checkpoints.load(Ordering::Relaxed),
            wal_bytes,
            leaf_size: me.io.page_size as u64,
            metalog_bytes: me.metalog.lock().bytes_written,
            vlog_bytes: me.vlog.lock().bytes_written,
            device_page_reads: me.io.device_page_reads.load(Ordering::Relaxed),
            free_zones: free_zones as u64,
            space_amplification: 0.0,
            snapshots: me.snapshots.stats(),
        };
        drop(mf);
        drop(lru);
        drop(tree);
        detail.space_amplification = self.space_amplification();
        Stats {
            ops: c.api.ops(),
            user_bytes_written: c.api.bytes_written(),
            user_bytes_read: c.api.bytes_read(),
            device: DeviceCounts::from(me.dev.io_stats()),
            cache: CacheCounts {
                hits,
                misses,
                evictions,
            },
            memory_bytes: memory as u64,
            snapshots: detail.snapshots.live_snapshots,
            snapshot_bytes: detail.snapshots.retained_bytes,
            detail: Some(Arc::new(detail)),
            footprint: self.footprint(),
        }
    }

    /// The store's bytes by kind, zone by zone from the device's write
    /// pointers: MetaLog zones are metadata, WAL zones log; of a data
    /// zone's written bytes, the live leaf pages (or live value bytes) are
    /// data and the rest garbage, as is anything written in a zone that
    /// waits for its reset.
    pub fn footprint(&self) -> Footprint {
        let me = &self.inner;
        let geo = me.dev.geometry();
        let ps = me.io.page_size as u64;
        let zones = me.dev.report_zones(0, geo.zone_count);
        let space = me.io.space.lock();
        let mut f = Footprint::default();
        for (info, stat) in zones.iter().zip(&space.zones) {
            let written = info.write_pointer.saturating_sub(info.start);
            let live = match stat.role {
                Role::Meta => {
                    f.add(SpaceKind::Metadata, written);
                    continue;
                }
                Role::Wal => {
                    f.add(SpaceKind::Log, written);
                    continue;
                }
                Role::Free => 0,
                Role::Leaf => stat.valid.saturating_mul(ps),
                Role::Vlog => stat.valid,
            };
            let live = if stat.pending_reset {
                0
            } else {
                live.min(written)
            };
            f.add(SpaceKind::Data, live);
            f.add(SpaceKind::Garbage, written - live);
        }
        f
    }
}
