//! Seeds that are device images of real stores: each engine is opened on
//! memory devices with the options its recovery target uses, written
//! through its public API (a checkpointed part and a WAL tail), dropped,
//! and its devices read back and laid out as the target cuts its input.

use std::sync::Arc;

use ferrite_btree::{BTreeOptions, BTreeStore, Devices as BTreeDevices, ShortcutOptions};
use ferrite_core::{KvStore, Options, Result, SyncMode, WriteBatch};
use ferrite_io::{
    AlignedBuf, BlockDevice, EmulatedZonedDevice, MemDevice, ZoneGeometry, ZonedDevice,
};
use ferrite_lsm::{Devices as LsmDevices, IndexKind, LsmOptions, LsmStore, WAL_DEVICES};
use ferrite_rask::{BlockRange, DurableOptions, DurableRask, PhysicalRun, RaskDevices};
use ferrite_wal::Wal;
use ferrite_zkv::{ZkvOptions, ZkvStore};

use crate::Seeds;

/// What a length byte of a target can say: at most 255 units.
const MAX_UNITS: usize = 255;

pub fn all() -> Result<Vec<Seeds>> {
    let (btree_recovery, btree_pages) = btree()?;
    let (lsm_recovery, lsm_table) = lsm()?;
    Ok(vec![
        btree_recovery,
        btree_pages,
        lsm_recovery,
        lsm_table,
        zkv()?,
        zoned_metadata()?,
        rask()?,
        wal()?,
    ])
}

/// The bytes of `dev`, trailing zeroes dropped (the targets pad with them).
fn image(dev: &dyn BlockDevice) -> Result<Vec<u8>> {
    let mut buf = AlignedBuf::zeroed(dev.len() as usize);
    dev.read_at(&mut buf, 0)?;
    let mut v = buf.to_vec();
    let end = v.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
    v.truncate(end);
    Ok(v)
}

/// A length byte counting `bytes` in `unit`s, and `bytes` padded to it;
/// `None` when the length does not fit the byte.
fn sized(bytes: &[u8], unit: usize) -> Option<(u8, Vec<u8>)> {
    let units = bytes.len().div_ceil(unit);
    let n = u8::try_from(units)
        .ok()
        .filter(|n| usize::from(*n) <= MAX_UNITS)?;
    let mut v = bytes.to_vec();
    v.resize(units * unit, 0);
    Some((n, v))
}

fn mem(block: usize) -> Result<Arc<dyn BlockDevice>> {
    Ok(Arc::new(MemDevice::with_block_size(block)?))
}

/// Keys and values of every size class an engine stores differently:
/// inline, near a page's overflow threshold, and out of line.
fn fill(db: &dyn KvStore, n: u32, salt: u8) -> Result<()> {
    for i in 0..n {
        let key = format!("key{:05}", i * 7 % (n + 3));
        let len = [8, 24, 100, 300, 900, 2000][i as usize % 6];
        db.put(key.as_bytes(), &vec![salt ^ i as u8; len])?;
    }
    let mut batch = WriteBatch::new();
    batch
        .put(b"batch-a", b"one")?
        .put(b"batch-b", b"two")?
        .delete(b"key00007")?;
    db.write_batch(&batch)?;
    db.delete(b"key00014")
}

fn btree() -> Result<(Seeds, Seeds)> {
    const PAGE: usize = 1024;
    let mut recovery = Vec::new();
    let mut pages = Vec::new();
    for (pick, shortcut) in [(0u8, false), (16, true)] {
        let devices = BTreeDevices {
            pages: mem(PAGE)?,
            dwb: mem(PAGE)?,
            wal: mem(PAGE)?,
            spill: mem(PAGE)?,
            carry: [mem(PAGE)?, mem(PAGE)?],
        };
        let keep = devices.clone();
        let opts = Options::default()
            .cache_bytes(256 << 10)
            .sync(SyncMode::Never);
        let mut bt = if shortcut {
            BTreeOptions::with_shortcut(ShortcutOptions::default())
        } else {
            BTreeOptions::default()
        };
        bt.page_size = PAGE;
        bt.checkpoint_wal_bytes = 64 << 10;
        let db = BTreeStore::open_on(devices, &opts, bt)?;
        fill(&db, 60, 1)?;
        db.flush()?;
        db.put(b"tail-1", b"in the wal")?;
        db.delete(b"key00021")?;
        db.sync()?;
        drop(db);
        let file = image(keep.pages.as_ref())?;
        let log = image(keep.wal.as_ref())?;
        // The WAL's tail only, if all of it does not fit the length byte.
        let log = &log[..log.len().min(MAX_UNITS * 8)];
        if let Some((w, log)) = sized(log, 8) {
            let mut input = vec![pick, w];
            input.extend_from_slice(&log);
            input.extend_from_slice(&file);
            recovery.push(input);
        }
        for page in file.chunks(PAGE).skip(2).take(12) {
            pages.push([&[0u8][..], page].concat());
        }
    }
    Ok((
        Seeds {
            target: "btree_recovery",
            inputs: recovery,
        },
        Seeds {
            target: "btree_pages",
            inputs: pages,
        },
    ))
}

fn lsm() -> Result<(Seeds, Seeds)> {
    const BLOCK: usize = 4096;
    let mut recovery = Vec::new();
    let mut table = Vec::new();
    for (pick, index) in [(0u8, IndexKind::Sparse), (4, IndexKind::LEARNED)] {
        let devices = LsmDevices {
            tables: mem(BLOCK)?,
            manifest: [mem(BLOCK)?, mem(BLOCK)?],
            wal: [mem(BLOCK)?, mem(BLOCK)?, mem(BLOCK)?, mem(BLOCK)?],
        };
        let tables = devices.tables.clone();
        let slots = devices.manifest.clone();
        let wals = devices.wal.clone();
        let opts = Options::default()
            .cache_bytes(64 << 10)
            .sync(SyncMode::Never);
        let lsm = LsmOptions::default()
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
            .partitions(1)
            .training_threads(1);
        let db = LsmStore::open_on(devices, &opts, lsm)?;
        fill(&db, 24, 2)?;
        db.flush()?;
        db.put(b"tail-1", b"in the wal")?;
        db.delete_range(b"key00030", b"key00040")?;
        db.sync()?;
        drop(db);
        let tables = image(tables.as_ref())?;
        for slot in &slots {
            let man = image(slot.as_ref())?;
            table.push([&[5u8][..], &man].concat());
            let Some((m, man)) = sized(&man, 8) else {
                continue;
            };
            for w in wals.iter().take(WAL_DEVICES) {
                let log = image(w.as_ref())?;
                let log = &log[..log.len().min(MAX_UNITS * 8)];
                let Some((wn, log)) = sized(log, 8) else {
                    continue;
                };
                let mut input = vec![pick, m, wn];
                input.extend_from_slice(&man);
                input.extend_from_slice(&log);
                input.extend_from_slice(&tables);
                recovery.push(input);
            }
        }
        for block in tables.chunks(BLOCK).take(8) {
            table.push([&[0u8][..], block].concat());
        }
    }
    Ok((
        Seeds {
            target: "lsm_recovery",
            inputs: recovery,
        },
        Seeds {
            target: "lsm_table",
            inputs: table,
        },
    ))
}

/// The written part of zone `z`.
fn written(dev: &dyn ZonedDevice, z: u32) -> Result<Vec<u8>> {
    let Some(info) = dev.report_zones(z, 1).into_iter().next() else {
        return Ok(Vec::new());
    };
    let mut buf = AlignedBuf::zeroed((info.write_pointer - info.start) as usize);
    if !buf.is_empty() {
        dev.read_at(&mut buf, info.start)?;
    }
    Ok(buf.to_vec())
}

fn zkv() -> Result<Seeds> {
    const PAGE: usize = 4096;
    const FRAME: usize = 32;
    let g = ZoneGeometry::small(16, 8, 8);
    let dev = Arc::new(EmulatedZonedDevice::format(MemDevice::new(), g)?);
    let opts = Options::default()
        .sync(SyncMode::Never)
        .cache_bytes(64 << 10);
    let zo = ZkvOptions::default().wal_zones(2).sequencer_bytes(4 * 4096);
    let db = ZkvStore::open_on(dev.clone() as Arc<dyn ZonedDevice>, &opts, zo)?;
    fill(&db, 80, 3)?;
    db.flush()?;
    db.put(b"tail-1", b"in the wal")?;
    db.sync()?;
    drop(db);
    let mut inputs = Vec::new();
    // Leaf pages, wherever they landed.
    let whole = image(dev.inner())?;
    let magic = ferrite_zkv::internals::PAGE_MAGIC.to_le_bytes();
    for block in whole.chunks(PAGE).filter(|b| b.starts_with(&magic)).take(8) {
        inputs.push([&[0u8][..], block].concat());
    }
    // The first MetaLog frame's snapshot body, alone and with the WAL.
    let head = written(dev.as_ref(), 0)?;
    let len = head
        .get(16..24)
        .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or_default())) as usize;
    if let Some(body) = head.get(FRAME..FRAME + len) {
        inputs.push([&[1u8][..], body].concat());
        let mut log = written(dev.as_ref(), 2)?;
        log.resize(body.len(), 0);
        inputs.push([&[3u8][..], body, &log].concat());
    }
    Ok(Seeds {
        target: "zkv_recovery",
        inputs,
    })
}

fn zoned_metadata() -> Result<Seeds> {
    let mut inputs = Vec::new();
    for (zones, appends) in [(4u32, 1usize), (16, 5)] {
        let dev = EmulatedZonedDevice::format(MemDevice::new(), ZoneGeometry::small(zones, 2, 3))?;
        for z in 0..appends as u32 {
            dev.append(z % 2, &AlignedBuf::zeroed(4096))?;
        }
        dev.finish_zone(0)?;
        let whole = image(dev.inner())?;
        // The metadata, up to where the first zone's data starts.
        let meta = &whole[..whole.len().min(8 * 4096)];
        inputs.push([&[0u8][..], meta].concat());
        // The same header fields, sealed by the target.
        let mut sealed = vec![1u8];
        sealed.extend_from_slice(&meta[12..52]);
        sealed.extend_from_slice(meta.get(4096..).unwrap_or_default());
        inputs.push(sealed);
    }
    Ok(Seeds {
        target: "zoned_metadata",
        inputs,
    })
}

fn rask() -> Result<Seeds> {
    let devices = RaskDevices {
        snapshots: [mem(4096)?, mem(4096)?],
        log: mem(4096)?,
    };
    let keep = RaskDevices {
        snapshots: devices.snapshots.clone(),
        log: devices.log.clone(),
    };
    let db = DurableRask::<PhysicalRun>::open_on(devices, DurableOptions::default())?;
    let put = |l: u64, len: u64, at: u64| -> Result<()> {
        let (Ok(r), Some(v)) = (BlockRange::new(l, l + len - 1), PhysicalRun::new(1, at)) else {
            return Ok(());
        };
        Ok(db.put(r, v)?)
    };
    for i in 0..60u64 {
        put(i * 37 % 500, 1 + i % 9, 10_000 + i * 16)?;
    }
    db.snapshot()?;
    for i in 0..20u64 {
        put(i * 11 % 300, 1 + i % 4, 50_000 + i * 8)?;
    }
    db.delete(BlockRange::new(100, 140).unwrap_or(BlockRange::block(100)))?;
    db.sync()?;
    drop(db);
    let [s0, s1] = [
        image(keep.snapshots[0].as_ref())?,
        image(keep.snapshots[1].as_ref())?,
    ];
    let log = image(keep.log.as_ref())?;
    let mut inputs = Vec::new();
    if let (Some((a, s0)), Some((b, s1))) = (sized(&s0, 64), sized(&s1, 64)) {
        for pair in [(a, &s0, b, &s1), (b, &s1, a, &s0)] {
            let mut input = vec![pair.0, pair.2];
            input.extend_from_slice(pair.1);
            input.extend_from_slice(pair.3);
            input.extend_from_slice(&log);
            inputs.push(input);
        }
    }
    Ok(Seeds {
        target: "rask_recovery",
        inputs,
    })
}

fn wal() -> Result<Seeds> {
    let dev = mem(4096)?;
    let wal = Wal::open(dev.clone(), 1, &mut |_| Ok(()))?;
    for i in 0..24u32 {
        let payload = vec![i as u8; [3, 40, 500, 4090, 9000][i as usize % 5]];
        wal.append(&payload)?;
        if i % 7 == 6 {
            wal.sync()?;
        }
    }
    wal.sync()?;
    drop(wal);
    let log = image(dev.as_ref())?;
    let mut inputs = Vec::new();
    for fill in [0u8, 17, 255] {
        inputs.push([&[1u8, fill][..], &log].concat());
    }
    // The target's own sealed form: records of 1 to 63 bytes, one of the
    // next epoch, some claiming a synced offset.
    let mut sealed = vec![0x81u8, 3];
    for i in 0..20u8 {
        let n = if i % 5 == 4 { 0x40 | 8 } else { 1 + i * 3 % 63 };
        sealed.push(n);
        sealed.extend(std::iter::repeat_n(i, usize::from(n & 0x3f)));
    }
    sealed.extend_from_slice(&[0x80 | 4, 9, 9, 9, 9]);
    inputs.push(sealed);
    Ok(Seeds {
        target: "wal_replay",
        inputs,
    })
}
