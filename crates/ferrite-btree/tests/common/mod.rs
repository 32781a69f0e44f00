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

pub fn fresh() -> Devs {
    // Page, double-write and spill devices take 1 KiB blocks, for 1 KiB pages.
    std::array::from_fn(|i| {
        let dev = if i < 2 || i == 3 {
            MemDevice::with_block_size(1024).unwrap()
        } else {
            MemDevice::new()
        };
        Arc::new(FaultyDevice::new(dev))
    })
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
    let devs = Devices {
        pages: d[0].clone() as Arc<dyn BlockDevice>,
        dwb: d[1].clone(),
        wal: d[2].clone(),
        spill: d[3].clone(),
        carry: [d[4].clone(), d[5].clone()],
    };
    let opts = Options {
        // Plain: 4 KiB pages, about sixty frames.
        cache_bytes: if turbo { 100 << 10 } else { 320 << 10 },
        sync,
        ..Options::default()
    };
    let bt = if mode == Mode::Shortcut {
        BTreeOptions {
            page_size: 1024,
            checkpoint_wal_bytes: 64 << 10,
            ..BTreeOptions::shortcut(ferrite_btree::ShortcutOptions {
                stash_threshold: 0.02,
                relocate_threshold: 0.02,
                walk_chunk: 2,
                ..Default::default()
            })
        }
    } else if turbo {
        BTreeOptions {
            page_size: 1024,
            checkpoint_wal_bytes: 64 << 10,
            insert_buffer: Some(ferrite_btree::InsertBufferOptions {
                share: 0.3,
                ..Default::default()
            }),
            shortcut: None,
        }
    } else {
        BTreeOptions {
            page_size: 4096,
            checkpoint_wal_bytes: 64 << 10,
            insert_buffer: None,
            shortcut: None,
        }
    };
    BTreeStore::open_on(devs, &opts, bt)
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
