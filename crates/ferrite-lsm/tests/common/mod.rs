//! Devices and options shared by the LSM engine's integration tests.
#![allow(dead_code, reason = "each test binary uses part of it")]

use std::sync::Arc;

use ferrite_core::{KeyRange, KvStoreExt, Options, SyncMode};
use ferrite_io::{BlockDevice, FaultyDevice, MemDevice};
use ferrite_lsm::{Devices, IndexKind, LsmOptions, LsmStore, WAL_DEVICES};

pub type Dev = Arc<FaultyDevice<MemDevice>>;
/// Tables, two manifest slots, then the WAL devices.
pub type Devs = [Dev; 3 + WAL_DEVICES];

pub fn fresh() -> Devs {
    std::array::from_fn(|_| Arc::new(FaultyDevice::new(MemDevice::new())))
}

/// Options that make flushes and compactions happen every few writes.
pub fn tiny(index: IndexKind) -> LsmOptions {
    LsmOptions::default()
        .memtable_bytes(4096)
        .max_immutable(2)
        .table_bytes(8192)
        .l0_compaction_trigger(2)
        .l0_slowdown(4)
        .l0_stop(8)
        .l1_bytes(16 << 10)
        .level_multiplier(3)
        .levels(5)
        .bloom_bits_per_key(10)
        .index(index)
        .load_aware(None)
        // Tables of two blocks are too small for a model to beat the
        // separators; these tests are about the learned read path.
        .smaller_index(false)
        .partitions(1)
        .training_threads(2)
}

pub fn open(d: &Devs, lsm: LsmOptions, sync: SyncMode) -> ferrite_core::Result<LsmStore> {
    open_with(d, lsm, sync, ferrite_core::WalRecovery::Refuse)
}

/// [`open`] with the given handling of a damaged WAL.
pub fn open_with(
    d: &Devs,
    lsm: LsmOptions,
    sync: SyncMode,
    wal_recovery: ferrite_core::WalRecovery,
) -> ferrite_core::Result<LsmStore> {
    let opts = Options::default()
        .cache_bytes(64 << 10)
        .sync(sync)
        .wal_recovery(wal_recovery);
    open_opts(d, lsm, &opts)
}

/// A store on `d` with the given store-wide options.
pub fn open_opts(d: &Devs, lsm: LsmOptions, opts: &Options) -> ferrite_core::Result<LsmStore> {
    let dev = |i: usize| d[i].clone() as Arc<dyn BlockDevice>;
    let devices = Devices {
        tables: dev(0),
        manifest: [dev(1), dev(2)],
        wal: std::array::from_fn(|i| dev(3 + i)),
    };
    LsmStore::open_on(devices, opts, lsm)
}

pub fn contents(db: &LsmStore) -> std::collections::BTreeMap<Vec<u8>, Vec<u8>> {
    contents_result(db).expect("scan")
}

pub fn contents_result(
    db: &LsmStore,
) -> ferrite_core::Result<std::collections::BTreeMap<Vec<u8>, Vec<u8>>> {
    Ok(db
        .scan_collect(KeyRange::all(), usize::MAX)?
        .into_iter()
        .collect())
}
