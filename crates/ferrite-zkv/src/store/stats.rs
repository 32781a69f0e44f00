//! The engine's counters as [`Stats`]: the common ones and ZKV's own
//! (merged-filter and batch-array hits, evictions, reclamation, zone
//! states, value-log relocation), for the store and its baselines alike.

use std::sync::atomic::Ordering;

use ferrite_core::{CacheCounts, DeviceCounts, Stats};

use super::ZkvStore;
use crate::options::Variant;

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
        let extra = vec![
            (
                "variant_zkv".into(),
                f64::from(u8::from(me.opts.variant == Variant::Zkv)),
            ),
            ("leaves".into(), tree.leaf_count() as f64),
            ("index_bytes".into(), tree.index_bytes() as f64),
            ("mf_bytes".into(), mf_bytes as f64),
            ("mf_valid_nodes".into(), mf.valid_nodes as f64),
            ("mf_shadow_removed".into(), mf.shadow_removed as f64),
            (
                "mf_evictions".into(),
                c.evictions.load(Ordering::Relaxed) as f64,
            ),
            ("mf_hits".into(), c.mf_hits.load(Ordering::Relaxed) as f64),
            (
                "batch_hits".into(),
                c.batch_hits.load(Ordering::Relaxed) as f64,
            ),
            ("adb_bytes".into(), tree.pool.bytes as f64),
            ("delta_bytes".into(), tree.delta_bytes as f64),
            ("pages_written".into(), pages_written as f64),
            ("zone_writes".into(), zone_writes as f64),
            ("pairs_to_pages".into(), t.pairs_to_pages as f64),
            ("adb_absorbs".into(), t.adb_absorbs as f64),
            ("direct_merges".into(), t.direct_merges as f64),
            ("pressure_merges".into(), t.pressure_merges as f64),
            ("consolidations".into(), t.consolidations as f64),
            ("splits".into(), t.splits as f64),
            ("removed_leaves".into(), t.removed_leaves as f64),
            ("joined_leaves".into(), t.joined_leaves as f64),
            ("batches".into(), t.batches as f64),
            ("batch_pairs".into(), t.batch_pairs as f64),
            ("traversals".into(), t.traversals as f64),
            ("migrated_pages".into(), t.migrated_pages as f64),
            ("gc_zones".into(), c.gc_zones.load(Ordering::Relaxed) as f64),
            (
                "refused_writes".into(),
                c.refused.load(Ordering::Relaxed) as f64,
            ),
            (
                "relocated_values".into(),
                c.relocated_values.load(Ordering::Relaxed) as f64,
            ),
            (
                "drained_relocations".into(),
                c.drained_relocations.load(Ordering::Relaxed) as f64,
            ),
            (
                "checkpoints".into(),
                c.checkpoints.load(Ordering::Relaxed) as f64,
            ),
            ("wal_bytes".into(), wal_bytes as f64),
            ("leaf_size".into(), me.io.page_size as f64),
            (
                "metalog_bytes".into(),
                me.metalog.lock().bytes_written as f64,
            ),
            ("vlog_bytes".into(), me.vlog.lock().bytes_written as f64),
            (
                "device_page_reads".into(),
                me.io.device_page_reads.load(Ordering::Relaxed) as f64,
            ),
            ("free_zones".into(), free_zones as f64),
        ];
        drop(mf);
        drop(lru);
        drop(tree);
        let mut extra = extra;
        extra.push(("space_amplification".into(), self.space_amplification()));
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
            extra,
        }
    }
}
