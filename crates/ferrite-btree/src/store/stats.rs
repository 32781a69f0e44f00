//! The engine's counters as [`Stats`]: the common ones (operations, user
//! and device bytes, the pool's hits and misses, memory against the
//! budget) and the B+tree's own, TurboIndex's and SHORTCUT's.
//!
//! Memory counts every allocation charged to the budget: the pool, the
//! working buffers, the insert buffer and the companion.

use std::sync::atomic::Ordering::Relaxed;

use ferrite_core::{CacheCounts, DeviceCounts, Stats};

use super::Shared;

impl Shared {
    pub(super) fn stats(&self) -> Stats {
        let s = self;
        let c = &s.counters;
        let pool = &s.tree.pool;
        let dev = DeviceCounts::from(s.devices.pages.io_stats())
            + DeviceCounts::from(s.devices.wal.io_stats())
            + DeviceCounts::from(s.devices.dwb.io_stats())
            + DeviceCounts::from(s.devices.spill.io_stats())
            + DeviceCounts::from(s.devices.carry[0].io_stats())
            + DeviceCounts::from(s.devices.carry[1].io_stats());
        let st = s.state.read();
        Stats {
            ops: c.api.ops(),
            user_bytes_written: c.api.bytes_written(),
            user_bytes_read: c.api.bytes_read(),
            device: dev,
            cache: CacheCounts {
                hits: pool.counters.hits.load(Relaxed),
                misses: pool.counters.misses.load(Relaxed),
                evictions: pool.counters.evictions.load(Relaxed),
            },
            memory_bytes: pool.memory_bytes()
                + s.reserve
                + st.turbo.buffer().map_or(0, |ib| ib.memory_bytes() as u64)
                + s.shortcut.as_ref().map_or(0, |sc| sc.memory_bytes()),
            extra: {
                let mut extra = vec![
                    ("height".into(), f64::from(st.shape.height + 1)),
                    ("pool_frames".into(), pool.capacity() as f64),
                    ("pages".into(), st.shape.page_count as f64),
                    (
                        "free_pages".into(),
                        (st.shape.free.len() + st.shape.clean.len()) as f64,
                    ),
                    ("dirty_pages".into(), pool.dirty_count() as f64),
                    ("spilled_pages".into(), pool.spilled() as f64),
                    ("spill_log_slots".into(), pool.spill_log_slots() as f64),
                    ("working_bytes".into(), s.reserve as f64),
                    ("spills".into(), pool.counters.spills.load(Relaxed) as f64),
                    (
                        "spill_batches".into(),
                        pool.counters.spill_batches.load(Relaxed) as f64,
                    ),
                    (
                        "spill_requests".into(),
                        pool.counters.spill_requests.load(Relaxed) as f64,
                    ),
                    ("checkpoints".into(), c.checkpoints.load(Relaxed) as f64),
                    ("wal_bytes".into(), s.wal.len() as f64),
                    (
                        "write_hits".into(),
                        c.access.write_hits.load(Relaxed) as f64,
                    ),
                    (
                        "write_misses".into(),
                        c.access.write_misses.load(Relaxed) as f64,
                    ),
                    ("read_hits".into(), c.access.read_hits.load(Relaxed) as f64),
                    (
                        "read_misses".into(),
                        c.access.read_misses.load(Relaxed) as f64,
                    ),
                    (
                        "buffer_reads".into(),
                        c.access.buffer_reads.load(Relaxed) as f64,
                    ),
                ];
                if s.opts.insert_buffer.is_some() {
                    extra.extend([
                        (
                            "ib_on".into(),
                            f64::from(u8::from(st.turbo.buffer().is_some())),
                        ),
                        ("ib_switches".into(), st.turbo.switches() as f64),
                    ]);
                }
                if s.opts.insert_buffer.is_some() {
                    // Counters run on while an adaptive buffer is off, so
                    // differences between two snapshots stay meaningful.
                    let k = st.turbo.counters();
                    extra.extend([
                        ("ib_refused_writes".into(), k.refused as f64),
                        ("ib_buffered_writes".into(), k.buffered as f64),
                        ("ib_hot_loads".into(), k.promoted_loads as f64),
                        ("ib_full_loads".into(), k.full_loads as f64),
                        ("ib_pressure_loads".into(), k.pressure_loads as f64),
                        ("ib_applied_records".into(), k.applied_records as f64),
                        (
                            "ib_bytes".into(),
                            st.turbo.buffer().map_or(0.0, |ib| ib.memory_bytes() as f64),
                        ),
                        ("ib_budget_bytes".into(), st.turbo.budget() as f64),
                    ]);
                }
                if let Some(ib) = st.turbo.buffer() {
                    let d = ib.detector();
                    extra.extend([
                        ("ib_records".into(), ib.records() as f64),
                        ("ib_pages".into(), ib.pages() as f64),
                        ("ib_stack_nodes".into(), d.len() as f64),
                        ("ib_l_nodes".into(), d.l_count() as f64),
                        ("ib_promotions".into(), d.counters.promotions as f64),
                    ]);
                }
                if let Some(sc) = &s.shortcut {
                    let r = sc.report(false);
                    let (mut p, mut h) = (0u64, 0u64);
                    for (l, (&n, &k)) in r.level_predictions.iter().zip(&r.level_hits).enumerate() {
                        p += n;
                        h += k;
                        if n > 0 {
                            extra.push((format!("sc_accuracy_level_{l}"), k as f64 / n as f64));
                        }
                    }
                    extra.extend([
                        ("sc_predictions".into(), p as f64),
                        ("sc_hits".into(), h as f64),
                        ("sc_prefetched".into(), r.prefetched as f64),
                        ("sc_prefetch_used".into(), r.prefetch_used as f64),
                        ("sc_prefetch_wasted".into(), r.prefetch_wasted as f64),
                        ("sc_rebuilds".into(), r.rebuilds as f64),
                        ("sc_rebuild_seconds".into(), r.rebuild_seconds_total),
                        ("sc_relayouts".into(), r.relayouts as f64),
                        ("sc_relocated".into(), r.relocated as f64),
                        ("sc_relocation_skips".into(), r.relocation_skips as f64),
                        ("sc_lookups".into(), r.lookups as f64),
                        ("sc_prefetch_failed".into(), r.prefetch_failed as f64),
                        ("sc_stale_walks".into(), r.stale_walks as f64),
                        ("sc_disabled_levels".into(), r.disabled_levels as f64),
                        ("sc_relayout_seconds".into(), r.relayout_seconds_total),
                        ("sc_companion_bytes".into(), r.companion_bytes as f64),
                        ("sc_segments".into(), r.segments as f64),
                        ("sc_discontinuities".into(), r.discontinuities as f64),
                        ("sc_stash_entries".into(), r.stash_entries as f64),
                    ]);
                }
                // Pages per level (0 = leaves), found by walking the inner
                // pages only; skipped if a page cannot be read.
                if let Ok(levels) = s.tree.level_pages(&st.shape) {
                    for (i, n) in levels.iter().enumerate() {
                        extra.push((format!("pages_level_{i}"), *n as f64));
                    }
                }
                for (i, f) in s.fill.lock().iter().enumerate() {
                    extra.extend([
                        (format!("fill_level_{i}"), f.mean_fill()),
                        (format!("min_fill_level_{i}"), f.min_fill),
                        (format!("under_half_level_{i}"), f.under_half as f64),
                        (format!("plain_pages_level_{i}"), f.plain_slots as f64),
                    ]);
                }
                extra
            },
        }
    }
}
