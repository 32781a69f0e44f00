//! Devices, modes and helpers shared by the B+tree's integration tests.
#![allow(dead_code, reason = "each test binary uses part of it")]

use std::collections::BTreeMap;
use std::sync::Arc;

use ferrite_btree::{BTreeOptions, BTreeStore, Devices};
use ferrite_core::{KeyRange, KvStoreExt, Options, SyncMode};
use ferrite_io::{BlockDevice, FaultyDevice, MemDevice};

pub type Dev = Arc<FaultyDevice<MemDevice>>;
/// Devices: pages, double-write file, WAL, spill file, then the two
/// carry-over slots.
pub type Devs = [Dev; 6];

/// The six devices in memory, in [`Devs`] order: the page, double-write
/// and spill devices in blocks of `page_size` (at most 4 KiB), so pages
/// that small fit them; the rest in 4 KiB blocks.
fn mem_devices_with(page_size: usize) -> [MemDevice; 6] {
    std::array::from_fn(|i| {
        let block = if i < 2 || i == 3 {
            page_size.min(4096)
        } else {
            4096
        };
        MemDevice::with_block_size(block).unwrap()
    })
}

pub fn mem_devices(page_size: usize) -> [Arc<MemDevice>; 6] {
    mem_devices_with(page_size).map(Arc::new)
}

/// Fault-injecting devices for pages of up to 1 KiB.
pub fn fresh() -> Devs {
    mem_devices_with(1024).map(|d| Arc::new(FaultyDevice::new(d)))
}

/// The store's devices from six in [`Devs`] order.
pub fn wire<D: BlockDevice + 'static>(d: &[Arc<D>; 6]) -> Devices {
    Devices {
        pages: d[0].clone(),
        dwb: d[1].clone(),
        wal: d[2].clone(),
        spill: d[3].clone(),
        carry: [d[4].clone(), d[5].clone()],
    }
}

/// A store on `d` with durability `never`.
pub fn open_unsynced<D: BlockDevice + 'static>(
    d: &[Arc<D>; 6],
    cache_bytes: u64,
    bt: BTreeOptions,
) -> ferrite_core::Result<BTreeStore> {
    // Plain: 4 KiB pages, about sixty frames.
    let opts = Options::default()
        .cache_bytes(cache_bytes)
        .sync(SyncMode::Never);
    BTreeStore::open_on(wire(d), &opts, bt)
}

/// SHORTCUT with thresholds low enough that companions are rebuilt and
/// levels re-laid out every few splits, on 1 KiB pages.
pub fn restless_shortcut() -> BTreeOptions {
    BTreeOptions::with_shortcut(
        ferrite_btree::ShortcutOptions::default()
            .stash_threshold(0.02)
            .relocate_threshold(0.02)
            .walk_chunk(2),
    )
    .page_size(1024)
}

/// Which engine configuration a crash loop runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Plain,
    /// The insert buffer on, small pages and a pool far smaller than the
    /// data, so most writes are buffered and snapshots carry records
    /// across checkpoints.
    Turbo,
    /// SHORTCUT on, small pages and a low rebuild threshold, so companions
    /// are rebuilt in the background while writes (and crashes) happen.
    Shortcut,
}

pub fn open_as(d: &Devs, mode: Mode) -> ferrite_core::Result<BTreeStore> {
    open_with(d, mode, SyncMode::Always)
}

pub fn open_with(d: &Devs, mode: Mode, sync: SyncMode) -> ferrite_core::Result<BTreeStore> {
    let turbo = mode == Mode::Turbo;
    let opts = Options::default()
        .cache_bytes(if turbo { 100 << 10 } else { 320 << 10 })
        .sync(sync);
    let bt = if mode == Mode::Shortcut {
        restless_shortcut().checkpoint_wal_bytes(64 << 10)
    } else if turbo {
        BTreeOptions::default()
            .page_size(1024)
            .checkpoint_wal_bytes(64 << 10)
            .insert_buffer(Some(
                ferrite_btree::InsertBufferOptions::default().share(0.3),
            ))
            .shortcut(None)
    } else {
        BTreeOptions::default()
            .page_size(4096)
            .checkpoint_wal_bytes(64 << 10)
            .insert_buffer(None)
            .shortcut(None)
    };
    BTreeStore::open_on(wire(d), &opts, bt)
}

pub fn open(d: &Devs) -> ferrite_core::Result<BTreeStore> {
    open_as(d, Mode::Plain)
}

pub fn contents(db: &BTreeStore) -> BTreeMap<Vec<u8>, Vec<u8>> {
    db.scan_collect(KeyRange::all(), usize::MAX)
        .unwrap()
        .into_iter()
        .collect()
}
