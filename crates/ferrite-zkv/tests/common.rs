//! Shared set-up: small zoned devices and tiny budgets, so buffering,
//! evictions, merges, splits, checkpoints and reclamation happen often.
#![allow(dead_code, reason = "each test binary uses part of it")]

use std::sync::Arc;

use ferrite_core::{Options, SyncMode};
use ferrite_io::{EmulatedZonedDevice, MemDevice, ZoneGeometry, ZonedDevice};
use ferrite_zkv::{Variant, ZkvOptions};

pub const VARIANTS: [Variant; 3] = [Variant::Zkv, Variant::BPlusTree, Variant::BdTree];

pub fn geometry(zones: u32) -> ZoneGeometry {
    ZoneGeometry::small(zones, 8, 8)
}

pub fn small_opts(variant: Variant) -> ZkvOptions {
    ZkvOptions::default()
        .variant(variant)
        .geometry(geometry(24))
        .wal_zones(2)
        .flushers(2)
        .sequencer_bytes(4 * 4096)
        .group_pages(4)
        .mf_node_pairs(8)
        .adb_instances(4)
        .gc_reserve_zones(4)
        .checkpoint_wal_bytes(Some(96 << 10))
        .bd_chain(8)
        .inline_value_max(64)
}

pub fn options(sync: SyncMode) -> Options {
    Options::default().sync(sync).cache_bytes(64 << 10)
}

pub fn mem_device(zones: u32) -> Arc<dyn ZonedDevice> {
    Arc::new(EmulatedZonedDevice::format(MemDevice::new(), geometry(zones)).expect("format"))
}
