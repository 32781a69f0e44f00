//! How the crash test opens each engine: small caches, logs and devices,
//! so background work (flushes, compactions, checkpoints, SHORTCUT
//! rebuilds, TurboIndex loads, ZKV reclamation) runs every few hundred
//! operations and kills land on it.

use std::path::Path;

use anyhow::{Context, Result};
use ferrite::{Config, EngineKind, Store, SyncMode};

/// `partitions`: the LSM's (SwiftKV's) partitions; other engines ignore it.
pub fn open_store(
    engine: EngineKind,
    path: &Path,
    sync: SyncMode,
    partitions: usize,
) -> Result<Store> {
    let b = Config::builder(engine)
        .sync(sync)
        .cache_bytes(1 << 20)
        .direct_io(false);
    let b = match engine {
        EngineKind::Btree | EngineKind::Shortcut | EngineKind::TurboIndex => {
            b.btree(ferrite::btree::BTreeOptions::default().checkpoint_wal_bytes(1 << 20))
        }
        EngineKind::Lsm => b.lsm(
            ferrite::lsm::LsmOptions::default()
                .memtable_bytes(256 << 10)
                .table_bytes(128 << 10)
                .l1_bytes(1 << 20)
                .l0_compaction_trigger(2)
                .l0_slowdown(8)
                .l0_stop(16)
                .partitions(partitions),
        ),
        EngineKind::Zkv => b.zkv(
            ferrite::zkv::ZkvOptions::default()
                .geometry(ferrite::zkv::ZoneGeometry::small(48, 8, 8))
                .checkpoint_wal_bytes(Some(1 << 20)),
        ),
        _ => b,
    };
    b.open(path)
        .with_context(|| format!("opening {} as {engine}", path.display()))
}
