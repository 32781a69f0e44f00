//! What the facade's integration tests share.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]
#![allow(dead_code, reason = "each test file uses its part")]

use ferrite::{Config, EngineKind, SyncMode};

/// A store whose background work happens every few operations (tiny
/// memtables and levels, a small pool and checkpoint interval, small
/// zones), without syncs or O_DIRECT.
pub fn small_config(kind: EngineKind) -> Config {
    let b = Config::builder(kind)
        .cache_bytes(64 << 10)
        .sync(SyncMode::Never)
        .direct_io(false);
    let b = match kind {
        EngineKind::Btree | EngineKind::Shortcut | EngineKind::TurboIndex => b.btree(
            ferrite::btree::BTreeOptions::default()
                .page_size(1024)
                .checkpoint_wal_bytes(16 << 10),
        ),
        EngineKind::Lsm => b.lsm(
            ferrite::lsm::LsmOptions::default()
                .memtable_bytes(4 << 10)
                .max_immutable(2)
                .table_bytes(4 << 10)
                .l0_compaction_trigger(2)
                .l0_slowdown(4)
                .l0_stop(8)
                .l1_bytes(16 << 10)
                .level_multiplier(3)
                .levels(4),
        ),
        EngineKind::Zkv => b.zkv(
            ferrite::zkv::ZkvOptions::default()
                .geometry(ferrite::zkv::ZoneGeometry::small(24, 8, 8))
                .wal_zones(2)
                .sequencer_bytes(4 * 4096)
                .mf_node_pairs(8)
                .adb_instances(4)
                .checkpoint_wal_bytes(Some(96 << 10))
                .inline_value_max(64),
        ),
        _ => b,
    };
    b.build().unwrap()
}
