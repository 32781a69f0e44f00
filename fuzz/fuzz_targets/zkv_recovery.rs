//! ZKV decoders and recovery: leaf pages, MetaLog snapshots, value-log
//! zone scans (in chunks of any size) and whole recoveries never panic.
//! Leaf pages are also fed sealed with a valid checksum, so the cell
//! checks behind it see arbitrary bytes too.
//!
//! Two kinds of device are opened. One holds the input as it is in its
//! MetaLog frame (checksummed) and its first WAL zone. The other is a
//! store image built from the input: a snapshot encoded from input-drawn
//! zone roles and counts, leaves, buffered pairs and a replay position;
//! leaf pages encoded from input-drawn entries (or input bytes sealed as
//! pages); value-log records and WAL records with valid checksums, a
//! checkpoint mark among them at times. A
//! store that opens answers reads, takes writes, checkpoints and
//! verifies; if all of that succeeds, a reopen finds the same contents.
#![no_main]

use std::sync::Arc;

use ferrite_core::{KeyRange, KvStore, KvStoreExt, Options, SyncMode};
use ferrite_io::{AlignedBuf, EmulatedZonedDevice, MemDevice, ZoneGeometry, ZonedDevice};
use ferrite_zkv::internals::{
    loc_addr, loc_len, location, scan_vlog as scan, LeafPage, MetaSnapshot as Snapshot, Role,
    WalPosition,
};
use ferrite_zkv::internals::{Bytes, Pair, Val};
use ferrite_zkv::{ZkvOptions, ZkvStore};
use libfuzzer_sys::fuzz_target;

mod image;

const ZONES: u32 = 16;
/// MetaLog zones (two slots of one), then the WAL ring.
const META: u32 = 2;
const WAL: u32 = 2;
const PAGE: usize = 4096;

fn geometry() -> ZoneGeometry {
    ZoneGeometry::small(ZONES, 8, 8)
}

fn options() -> (Options, ZkvOptions) {
    let opts = Options::default().sync(SyncMode::Never).cache_bytes(64 << 10);
    let zo = ZkvOptions::default().wal_zones(WAL).sequencer_bytes(4 * 4096);
    (opts, zo)
}

/// Writes `bytes` from the start of zone `z`, padded to whole blocks.
fn fill_zone(dev: &dyn ZonedDevice, z: u32, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    let g = dev.geometry();
    let len = (bytes.len().div_ceil(PAGE) * PAGE).min(g.zone_capacity as usize);
    let mut buf = AlignedBuf::zeroed(len);
    let n = bytes.len().min(len);
    buf[..n].copy_from_slice(&bytes[..n]);
    let _ = dev.write_at(&buf, u64::from(z) * g.zone_size);
}

/// A key and value from `chunk`: the first `1 + (n >> 6)` bytes are the key.
fn split(n: u8, chunk: &[u8]) -> (&[u8], &[u8]) {
    chunk.split_at(chunk.len().min(1 + (n as usize >> 6)))
}

/// A value drawn from `v`: a reference to one of the value-log records
/// written (`0xfe` first), a delete (empty), or the bytes as they are.
fn val(v: &[u8], locs: &[u64]) -> Val {
    match v {
        [] => Val::Del,
        [0xfe, i, ..] if !locs.is_empty() => Val::Vlog(locs[usize::from(*i) % locs.len()]),
        _ => Val::Put(Bytes::new(v)),
    }
}

/// A store image drawn from `data` (see the module docs).
fn structured(data: &[u8]) {
    let [flags, w, roles @ ..] = data else {
        return;
    };
    let (roles, rest) = roles.split_at(roles.len().min(ZONES as usize));
    let g = geometry();
    let Ok(dev) = EmulatedZonedDevice::format(MemDevice::new(), g) else {
        return;
    };
    // Zone roles: as the layout has them, or (top bit) any role.
    let mut zones = Vec::new();
    for z in 0..ZONES {
        let r = roles.get(z as usize).copied().unwrap_or(0);
        let role = if r & 0x80 != 0 {
            [Role::Meta, Role::Wal, Role::Free, Role::Leaf, Role::Vlog][usize::from(r) % 5]
        } else if z < META {
            Role::Meta
        } else if z < META + WAL {
            Role::Wal
        } else {
            [Role::Free, Role::Leaf, Role::Vlog][usize::from(r) % 3]
        };
        let valid = if role == Role::Vlog {
            u64::from(r & 0x7f) * 4096
        } else {
            u64::from(r)
        };
        zones.push((role, valid));
    }
    let first = |want: Role| (META + WAL..ZONES).find(|&z| zones[z as usize].0 == want);
    let pieces = image::pieces(rest);
    let of = |k: usize| pieces.iter().skip(k).step_by(4).copied();
    // Value-log records in the first value-log zone.
    let mut locs = Vec::new();
    if let Some(z) = first(Role::Vlog) {
        let mut log = Vec::new();
        for (n, chunk) in of(3) {
            let (key, value) = split(n, chunk);
            let mut body = (key.len() as u16).to_le_bytes().to_vec();
            body.extend_from_slice(key);
            body.extend_from_slice(value);
            locs.push(location(
                u64::from(z) * g.zone_size + log.len() as u64,
                body.len() as u64,
            ));
            log.extend_from_slice(&(body.len() as u32).to_le_bytes());
            log.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
            log.extend_from_slice(&body);
        }
        fill_zone(&dev, z, &log);
    }
    // Leaf pages in the first leaf zone, one per piece, and the leaves
    // that point at them, low keys in order.
    let mut leaves: Vec<(Vec<u8>, u64)> = Vec::new();
    let leaf_zone = first(Role::Leaf);
    let mut pages = Vec::new();
    for (i, (n, chunk)) in of(0).enumerate() {
        let (a, b) = chunk.split_at(chunk.len() / 2);
        let (k1, v1) = split(n, a);
        let (k2, v2) = split(n, b);
        let mut entries = vec![(k1, val(v1, &locs)), (k2, val(v2, &locs))];
        entries.retain(|(k, v)| !k.is_empty() && *v != Val::Del);
        entries.sort_by(|x, y| x.0.cmp(y.0));
        entries.dedup_by(|x, y| x.0 == y.0);
        let mut page = vec![0u8; PAGE];
        if n & 0x80 != 0 {
            // Input bytes sealed as a page.
            page[..chunk.len()].copy_from_slice(chunk);
            page[..4].copy_from_slice(&ferrite_zkv::internals::PAGE_MAGIC.to_le_bytes());
            let crc = crc32c::crc32c(&page[8..]);
            page[4..8].copy_from_slice(&crc.to_le_bytes());
        } else {
            let cells: Vec<(&[u8], &Val)> = entries.iter().map(|(k, v)| (*k, v)).collect();
            if ferrite_zkv::internals::encode_page(&cells, &mut page).is_err() {
                continue;
            }
        }
        let id = leaf_zone.map_or(u64::MAX, |z| {
            u64::from(z) * (g.zone_size / PAGE as u64) + pages.len() as u64
        });
        pages.extend_from_slice(&page);
        let low = if i == 0 {
            Vec::new()
        } else {
            entries.first().map_or(chunk.to_vec(), |e| e.0.to_vec())
        };
        leaves.push((low, id));
    }
    leaves.sort();
    leaves.dedup_by(|x, y| x.0 == y.0);
    if let Some(z) = leaf_zone {
        fill_zone(&dev, z, &pages);
    }
    // Buffered pairs: sorted, one per key.
    let mut buffered: Vec<Pair> = of(1)
        .map(|(n, chunk)| {
            let (k, v) = split(n, chunk);
            Pair::new(k, val(v, &locs))
        })
        .filter(|p| !p.key().is_empty())
        .collect();
    buffered.sort_by(|x, y| x.key().cmp(y.key()));
    buffered.dedup_by(|x, y| x.key() == y.key());
    // The WAL: records from the replay position on, in sequence order or
    // with neighbours swapped.
    let ring = u32::from(*w % 3);
    let skip = usize::from(*w >> 2) % 4;
    let seq = 1 + u64::from(*flags >> 4);
    let mut batches: Vec<Vec<u8>> = of(2)
        .filter_map(|(n, chunk)| image::batch(n, chunk))
        .map(|b| {
            let mut p = Vec::new();
            b.encode(&mut p);
            p
        })
        .collect();
    // A checkpoint mark among them, naming the snapshot's version or a
    // later one (which, stranded past a gap, refuses the open).
    let version = 1 + u64::from(*flags >> 1 & 7);
    if w & 0x10 != 0 {
        let at = usize::from(*w >> 6) % (batches.len() + 1);
        let marked = version + u64::from(*w >> 5 & 1);
        batches.insert(at, ferrite_zkv::internals::wal_mark(marked));
    }
    if flags & 1 != 0 && batches.len() > 1 {
        batches.swap(0, 1);
    }
    let mut log = vec![0u8; skip * PAGE];
    // Records claim what was durable when they were appended: nothing
    // past the replay start, or (with the flag) everything before them,
    // which makes a gap in front of them damage.
    for (i, b) in batches.iter().enumerate() {
        let claim = if flags & 0x40 != 0 { seq + i as u64 } else { seq };
        ferrite_wal::encode_claiming_record(seq + i as u64, claim, false, b, &mut log);
    }
    fill_zone(&dev, META + ring.min(WAL - 1), &log);
    let snap = Snapshot {
        version,
        leaf_size: PAGE as u32,
        wal: WalPosition {
            ring,
            addr: u64::from(META + ring) * g.zone_size + (skip * PAGE) as u64,
            seq,
        },
        zones,
        leaves,
        buffered,
    };
    let _ = dev.write_at(
        &ferrite_zkv::internals::encode_frame(snap.version, &snap.encode(), PAGE),
        0,
    );
    let dev: Arc<dyn ZonedDevice> = Arc::new(dev);
    let (opts, zo) = options();
    let Ok(db) = ZkvStore::open_on(dev.clone(), &opts, zo.clone()) else {
        return;
    };
    let victim = image::first_key(&db.scan_collect(KeyRange::all(), 64));
    image::check_durable(db, &victim, || ZkvStore::open_on(dev, &opts, zo));
}

fn frame(body: &[u8]) -> AlignedBuf {
    ferrite_zkv::internals::encode_frame(1, body, 4096)
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    match selector % 6 {
        5 => structured(rest),
        0 | 4 => {
            let mut page = rest.to_vec();
            page.resize(4096, 0);
            if selector % 6 == 4 {
                // Magic, then the checksum over everything after it.
                page[..4].copy_from_slice(&ferrite_zkv::internals::PAGE_MAGIC.to_le_bytes());
                let crc = crc32c::crc32c(&page[8..]);
                page[4..8].copy_from_slice(&crc.to_le_bytes());
            }
            if let Ok(p) = LeafPage::parse(&page, || "fuzz".into()) {
                for i in 0..p.len() {
                    let _ = (p.key(i), p.value(i));
                }
                let _ = p.get(b"key");
            }
        }
        1 => {
            let _ = Snapshot::decode(1, rest);
        }
        2 => {
            // Scan as the reclaimer does: a chunk at a time, carrying over
            // what a cut-off record left.
            let cut = usize::from(rest.first().copied().unwrap_or(0)) * 16 + 1;
            let limit = rest.len() as u64;
            let mut at = 0u64;
            let mut buf: Vec<u8> = Vec::new();
            let mut fed = 0;
            loop {
                let s = scan(&buf, at, 512, limit);
                for r in &s.records {
                    assert!(!r.key.is_empty() && loc_addr(r.loc) >= at);
                    assert_eq!(
                        loc_len(r.loc) as usize,
                        2 + r.key.len() + r.value.len(),
                        "a record's location counts its key and value"
                    );
                }
                buf.drain(..s.consumed);
                at += s.consumed as u64;
                if s.end || fed >= rest.len() {
                    break;
                }
                let n = cut.min(rest.len() - fed);
                buf.extend_from_slice(&rest[fed..fed + n]);
                fed += n;
            }
        }
        _ => {
            let geo = ZoneGeometry::small(16, 8, 8);
            let Ok(dev) = EmulatedZonedDevice::format(MemDevice::new(), geo) else {
                return;
            };
            let half = rest.len() / 2;
            let _ = dev.write_at(&frame(&rest[..half]), 0);
            let mut wal = AlignedBuf::zeroed(rest[half..].len().div_ceil(4096).max(1) * 4096);
            wal[..rest.len() - half].copy_from_slice(&rest[half..]);
            let _ = dev.write_at(&wal, 2 * geo.zone_size);
            let opts = Options::default().sync(SyncMode::Never).cache_bytes(64 << 10);
            let zo = ZkvOptions::default().wal_zones(2).sequencer_bytes(4 * 4096);
            let dev: Arc<dyn ZonedDevice> = Arc::new(dev);
            if let Ok(db) = ZkvStore::open_on(dev, &opts, zo) {
                let _ = db.get(b"key");
                let _ = db.verify();
            }
        }
    }
});
