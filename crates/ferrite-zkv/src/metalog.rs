//! The MetaLog: versioned snapshots of everything recovery needs besides
//! the WAL, appended to two dedicated zones in turn.
//!
//! A snapshot holds the leaf page size, the WAL position to replay from, every zone's role and
//! liveness, every leaf's low key and page id, and every buffered pair
//! (merged filter, batch array, delta buffers), newest version per key, so
//! buffering survives a checkpoint without being forced to pages.
//!
//! Frame (block aligned, little-endian): `magic u32 "ZKVM" | crc32c u32 |
//! version u64 | len u64 | pad to 32 | payload`, padded to a whole block;
//! the checksum covers the version, the length and the payload.
//! Versions and the WAL sequence number are below
//! `ferrite_core::engine::COUNTER_LIMIT`.
//! Two slots of one or more zones each take snapshots in turn: recovery
//! reads both up to their write pointers and takes the highest version
//! whose frame checks; a snapshot that does not fit the active slot goes
//! to the other after its zones are reset (the active one keeps the newest
//! complete snapshot meanwhile).

use std::sync::Arc;

use ferrite_core::engine::{check_counter, ByteReader};
use ferrite_core::{Error, Result};
use ferrite_io::{AlignedBuf, ZoneGeometry, ZonedDevice};

use crate::pair::{Bytes, Pair, Val};
use crate::zone_space::Role;
use crate::zone_wal::WalPosition;

const MAGIC: u32 = u32::from_le_bytes(*b"ZKVM");
const FRAME: usize = 32;

/// What a snapshot records.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub version: u64,
    /// Bytes of a leaf page; fixed when the store is created.
    pub leaf_size: u32,
    pub wal: WalPosition,
    /// Per zone: role and valid count.
    pub zones: Vec<(Role, u64)>,
    /// Leaves in key order: low key and page id (`u64::MAX` = no page).
    pub leaves: Vec<(Vec<u8>, u64)>,
    /// Buffered pairs, sorted, newest per key.
    pub buffered: Vec<Pair>,
}

fn role_code(r: Role) -> u8 {
    match r {
        Role::Meta => 0,
        Role::Wal => 1,
        Role::Free => 2,
        Role::Leaf => 3,
        Role::Vlog => 4,
    }
}

fn role_from(c: u8) -> Option<Role> {
    Some(match c {
        0 => Role::Meta,
        1 => Role::Wal,
        2 => Role::Free,
        3 => Role::Leaf,
        4 => Role::Vlog,
        _ => return None,
    })
}

impl Snapshot {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&self.leaf_size.to_le_bytes());
        out.extend_from_slice(&self.wal.ring.to_le_bytes());
        out.extend_from_slice(&self.wal.addr.to_le_bytes());
        out.extend_from_slice(&self.wal.seq.to_le_bytes());
        out.extend_from_slice(&(self.zones.len() as u32).to_le_bytes());
        for &(r, v) in &self.zones {
            out.push(role_code(r));
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&(self.leaves.len() as u64).to_le_bytes());
        for (k, p) in &self.leaves {
            out.extend_from_slice(&(k.len() as u16).to_le_bytes());
            out.extend_from_slice(k);
            out.extend_from_slice(&p.to_le_bytes());
        }
        out.extend_from_slice(&(self.buffered.len() as u64).to_le_bytes());
        for p in &self.buffered {
            out.extend_from_slice(&(p.key().len() as u16).to_le_bytes());
            out.extend_from_slice(p.key());
            match &p.val {
                Val::Put(v) => {
                    out.push(0);
                    out.extend_from_slice(&(v.as_slice().len() as u32).to_le_bytes());
                    out.extend_from_slice(v.as_slice());
                }
                Val::Vlog(a) => {
                    out.push(1);
                    out.extend_from_slice(&a.to_le_bytes());
                }
                Val::Del => out.push(2),
            }
        }
        out
    }

    pub fn decode(version: u64, buf: &[u8]) -> Result<Self> {
        let bad = |r: &str| Error::corruption("zkv MetaLog", r.to_string());
        // Versions and WAL sequence numbers are raised after recovery; one
        // past the limit is damage, not a store's history.
        check_counter(version).ok_or_else(|| bad("version past any a store reaches"))?;
        let mut r = ByteReader::new(buf);
        let leaf_size = r.u32().ok_or_else(|| bad("short header"))?;
        let ring = r.u32().ok_or_else(|| bad("short header"))?;
        let addr = r.u64().ok_or_else(|| bad("short header"))?;
        let seq = r.counter().ok_or_else(|| {
            bad("short header, or a WAL sequence number past any a store reaches")
        })?;
        let nz = r.u32().ok_or_else(|| bad("short zone table"))? as usize;
        let mut zones = Vec::with_capacity(nz.min(1 << 20));
        for _ in 0..nz {
            let role = r
                .u8()
                .and_then(role_from)
                .ok_or_else(|| bad("bad zone role"))?;
            let v = r.u64().ok_or_else(|| bad("short zone table"))?;
            zones.push((role, v));
        }
        let nl = r.u64().ok_or_else(|| bad("short leaf list"))? as usize;
        let mut leaves = Vec::with_capacity(nl.min(1 << 20));
        for _ in 0..nl {
            let kl = r.u16().ok_or_else(|| bad("short leaf"))? as usize;
            let k = r.bytes(kl).ok_or_else(|| bad("short leaf key"))?.to_vec();
            let p = r.u64().ok_or_else(|| bad("short leaf page"))?;
            leaves.push((k, p));
        }
        let nb = r.u64().ok_or_else(|| bad("short buffered list"))? as usize;
        let mut buffered = Vec::with_capacity(nb.min(1 << 20));
        for _ in 0..nb {
            let kl = r.u16().ok_or_else(|| bad("short pair"))? as usize;
            let k = r.bytes(kl).ok_or_else(|| bad("short pair key"))?.to_vec();
            let val = match r.u8().ok_or_else(|| bad("short pair"))? {
                0 => {
                    let vl = r.u32().ok_or_else(|| bad("short value"))? as usize;
                    Val::Put(Bytes::new(r.bytes(vl).ok_or_else(|| bad("short value"))?))
                }
                1 => Val::Vlog(r.u64().ok_or_else(|| bad("short vlog address"))?),
                2 => Val::Del,
                _ => return Err(bad("bad pair kind")),
            };
            buffered.push(Pair::new(&k, val));
        }
        Ok(Self {
            version,
            leaf_size,
            wal: WalPosition { ring, addr, seq },
            zones,
            leaves,
            buffered,
        })
    }
}

/// Where a store keeps what on its device: `meta` MetaLog zones first,
/// then `wal` zones of WAL ring, then data zones.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    pub geometry: ZoneGeometry,
    pub meta: u32,
    pub wal: u32,
}

impl Layout {
    /// The role a zone has before the store uses it.
    fn fixed_role(&self, zone: u32) -> Option<Role> {
        if zone < self.meta {
            Some(Role::Meta)
        } else if zone < self.meta + self.wal {
            Some(Role::Wal)
        } else {
            None
        }
    }
}

impl Snapshot {
    /// Checks what only the device's layout can judge, so a damaged
    /// snapshot that passed its checksum is refused before recovery
    /// trusts it: the zone table names every zone, the MetaLog and WAL
    /// zones keep their roles and data zones are free, leaf or value-log
    /// zones (a MetaLog zone counted free would be handed to a flusher);
    /// a value-log zone counts no more live bytes than it holds; replay
    /// starts on a block boundary inside the ring zone it names; and every
    /// buffered value-log location lies in a value-log zone.
    pub fn check_layout(&self, layout: &Layout) -> Result<()> {
        let bad = |r: String| Error::corruption("zkv MetaLog", r);
        let g = &layout.geometry;
        if self.zones.len() != g.zone_count as usize {
            return Err(bad(format!(
                "{} zones recorded, device has {}",
                self.zones.len(),
                g.zone_count
            )));
        }
        for (z, &(role, valid)) in (0u32..).zip(&self.zones) {
            let fits = match layout.fixed_role(z) {
                Some(fixed) => role == fixed,
                None => matches!(role, Role::Free | Role::Leaf | Role::Vlog),
            };
            if !fits {
                return Err(bad(format!("zone {z} recorded as {role:?}")));
            }
            if role == Role::Vlog && valid > g.zone_capacity {
                return Err(bad(format!(
                    "value-log zone {z} counts {valid} live bytes, more than it holds"
                )));
            }
        }
        let wal = self.wal;
        let start = (wal.ring < layout.wal)
            .then(|| u64::from(layout.meta + wal.ring) * g.zone_size)
            .ok_or_else(|| {
                bad(format!(
                    "replay starts in WAL zone {} of {}",
                    wal.ring, layout.wal
                ))
            })?;
        if !(start..=start + g.zone_capacity).contains(&wal.addr)
            || !wal.addr.is_multiple_of(u64::from(g.block_size))
        {
            return Err(bad(format!(
                "replay starts at byte {}, not a block of WAL zone {}",
                wal.addr, wal.ring
            )));
        }
        for p in &self.buffered {
            if let Val::Vlog(loc) = p.val {
                let z = crate::vlog::loc_addr(loc) / g.zone_size;
                let role = usize::try_from(z).ok().and_then(|z| self.zones.get(z));
                if !matches!(role, Some((Role::Vlog, _))) {
                    return Err(bad(format!(
                        "a buffered value points into zone {z}, not a value-log zone"
                    )));
                }
            }
        }
        Ok(())
    }
}

impl Snapshot {
    /// Refuses a snapshot that names bytes its device no longer holds: a
    /// leaf page, a buffered value-log record or the replay start past
    /// its zone's write pointer. Such a zone was reset after a newer
    /// checkpoint made it obsolete, so this snapshot is not the newest one
    /// committed (that one is damaged), and opening from it would serve
    /// errors or lose the log after it.
    pub fn check_written(&self, dev: &dyn ZonedDevice) -> Result<()> {
        let g = *dev.geometry();
        let wps: Vec<u64> = dev
            .report_zones(0, g.zone_count)
            .iter()
            .map(|z| z.write_pointer)
            .collect();
        let bad = |what: String| {
            Error::corruption(
                "zkv MetaLog",
                format!("snapshot {} names {what}, past its zone's write pointer: the zone was reset after a newer snapshot, which is damaged", self.version),
            )
        };
        let written = |end: u64| {
            let zone = usize::try_from(end.saturating_sub(1) / g.zone_size).ok();
            zone.and_then(|z| wps.get(z)).is_some_and(|&wp| end <= wp)
        };
        let ps = u64::from(self.leaf_size);
        for (_, page) in &self.leaves {
            if *page != u64::MAX {
                let end = page.saturating_add(1).saturating_mul(ps);
                if !written(end) {
                    return Err(bad(format!("leaf page {page}")));
                }
            }
        }
        for p in &self.buffered {
            if let Val::Vlog(loc) = p.val {
                let end = crate::vlog::loc_addr(loc)
                    .saturating_add(crate::vlog::RECORD_HEADER)
                    .saturating_add(crate::vlog::loc_len(loc));
                if !written(end) {
                    return Err(bad(format!(
                        "the value-log record at byte {}",
                        crate::vlog::loc_addr(loc)
                    )));
                }
            }
        }
        // The replay start may sit at its zone's write pointer (nothing
        // logged since), never past it.
        let zone = usize::try_from(self.wal.addr / g.zone_size).ok();
        let at_or_below = zone
            .and_then(|z| wps.get(z))
            .is_some_and(|&wp| self.wal.addr <= wp);
        if !at_or_below {
            return Err(bad(format!(
                "the WAL replay start at byte {}",
                self.wal.addr
            )));
        }
        Ok(())
    }
}

/// One MetaLog frame around `body`, padded to whole blocks of `block`.
pub fn encode_frame(version: u64, body: &[u8], block: usize) -> AlignedBuf {
    let total = (FRAME + body.len()).div_ceil(block) * block;
    let mut out = AlignedBuf::zeroed(total);
    out[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    out[8..16].copy_from_slice(&version.to_le_bytes());
    out[16..24].copy_from_slice(&(body.len() as u64).to_le_bytes());
    let crc = frame_crc(&out[..FRAME], body);
    out[4..8].copy_from_slice(&crc.to_le_bytes());
    out[FRAME..FRAME + body.len()].copy_from_slice(body);
    out
}

/// The checksum of a frame: its version and length fields, then its
/// payload (a flipped version would otherwise let a stale snapshot win).
fn frame_crc(header: &[u8], body: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&header[8..24]), body)
}

/// Appends snapshots to two slots of `per_slot` zones each (zones
/// `[0, per_slot)` and `[per_slot, 2 * per_slot)`). A slot is one stream:
/// its zones are filled in order, so concatenating their written parts
/// gives back the frames.
pub struct MetaLog {
    dev: Arc<dyn ZonedDevice>,
    per_slot: u32,
    /// The slot holding the newest snapshot (0 or 1).
    active: u32,
    pub bytes_written: u64,
}

/// Largest single write issued.
const PIECE: u64 = 1 << 20;

impl MetaLog {
    fn slot_zones(&self, slot: u32) -> std::ops::Range<u32> {
        slot * self.per_slot..(slot + 1) * self.per_slot
    }

    /// Written bytes of each zone of `slot`, in order.
    fn written(dev: &dyn ZonedDevice, zones: std::ops::Range<u32>) -> Vec<(u32, u64, u64)> {
        let g = *dev.geometry();
        zones
            .map(|z| {
                let start = u64::from(z) * g.zone_size;
                let wp = dev
                    .report_zones(z, 1)
                    .first()
                    .map_or(start, |i| i.write_pointer);
                (z, start, wp.saturating_sub(start))
            })
            .collect()
    }

    /// Reads the newest valid snapshot of either slot.
    pub fn load(dev: Arc<dyn ZonedDevice>, per_slot: u32) -> Result<(Self, Option<Snapshot>)> {
        let g = *dev.geometry();
        let bs = g.block_size as usize;
        let mut best: Option<(u64, u32, Vec<u8>)> = None;
        for slot in 0..2u32 {
            let mut stream = Vec::new();
            for (_, start, len) in
                Self::written(dev.as_ref(), slot * per_slot..(slot + 1) * per_slot)
            {
                if len == 0 {
                    break;
                }
                let mut buf = AlignedBuf::zeroed(len as usize);
                dev.read_at(&mut buf, start)?;
                stream.extend_from_slice(&buf);
                if len < g.zone_capacity {
                    break;
                }
            }
            let mut at = 0usize;
            while at + FRAME <= stream.len() {
                let h = &stream[at..at + FRAME];
                let rd32 = |o: usize| u32::from_le_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]);
                let rd64 = |o: usize| {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(&h[o..o + 8]);
                    u64::from_le_bytes(b)
                };
                let (magic, crc, version, len) = (rd32(0), rd32(4), rd64(8), rd64(16));
                let end = (at as u64).saturating_add(FRAME as u64).saturating_add(len);
                if magic != MAGIC || end > stream.len() as u64 {
                    at += bs;
                    continue;
                }
                let body = &stream[at + FRAME..end as usize];
                if frame_crc(h, body) == crc && best.as_ref().is_none_or(|b| version > b.0) {
                    best = Some((version, slot, body.to_vec()));
                }
                at = (end as usize).div_ceil(bs) * bs;
            }
        }
        let (active, snap) = match best {
            Some((v, slot, body)) => (slot, Some(Snapshot::decode(v, &body)?)),
            None => (0, None),
        };
        Ok((
            Self {
                dev,
                per_slot,
                active,
                bytes_written: 0,
            },
            snap,
        ))
    }

    /// Appends `snap` durably (the caller synced the data it refers to).
    pub fn write(&mut self, snap: &Snapshot) -> Result<()> {
        let out = self.frame(snap)?;
        let slot_cap = u64::from(self.per_slot) * self.dev.geometry().zone_capacity;
        let used: u64 = Self::written(self.dev.as_ref(), self.slot_zones(self.active))
            .iter()
            .map(|z| z.2)
            .sum();
        let mut slot = self.active;
        if used + out.len() as u64 > slot_cap {
            slot = 1 - slot;
            self.reset_slot(slot)?;
        }
        self.append(slot, &out)
    }

    /// Writes `snap` durably as the only snapshot of both slots, so the
    /// MetaLog at rest holds two copies of one snapshot rather than every
    /// snapshot since its slots were last reset (a clean close). The other
    /// slot is reset and written first: until it is synced, the active one
    /// keeps its newest snapshot, and once it is, it holds `snap` while the
    /// active one is rewritten.
    pub fn write_alone(&mut self, snap: &Snapshot) -> Result<()> {
        let out = self.frame(snap)?;
        let other = 1 - self.active;
        self.reset_slot(other)?;
        self.append(other, &out)?;
        let first = 1 - other;
        self.reset_slot(first)?;
        self.append(first, &out)
    }

    /// `snap`'s frame, checked to fit a slot.
    fn frame(&self, snap: &Snapshot) -> Result<AlignedBuf> {
        // Recovery would take a snapshot with a counter at the limit for
        // damage and fall back to an older one: refuse it unwritten.
        ferrite_core::engine::persistable_counter(snap.version, "zkv MetaLog version")?;
        ferrite_core::engine::persistable_counter(snap.wal.seq, "zkv MetaLog WAL position")?;
        let g = *self.dev.geometry();
        let bs = g.block_size as usize;
        let body = snap.encode();
        let total = (FRAME + body.len()).div_ceil(bs) * bs;
        let slot_cap = u64::from(self.per_slot) * g.zone_capacity;
        if total as u64 > slot_cap {
            return Err(Error::InvalidOptions(format!(
                "a MetaLog snapshot of {total} bytes exceeds a slot ({slot_cap} bytes); use larger or more MetaLog zones"
            )));
        }
        Ok(encode_frame(snap.version, &body, bs))
    }

    fn reset_slot(&self, slot: u32) -> Result<()> {
        for z in self.slot_zones(slot) {
            self.dev.reset_zone(z)?;
        }
        Ok(())
    }

    /// Appends the frame `out` at `slot`'s write position (it fits: the
    /// caller reset the slot or measured its room) and syncs.
    fn append(&mut self, slot: u32, out: &[u8]) -> Result<()> {
        let g = *self.dev.geometry();
        let total = out.len();
        let mut done = 0u64;
        for (z, start, len) in Self::written(self.dev.as_ref(), self.slot_zones(slot)) {
            let mut wp = start + len;
            let end = start + g.zone_capacity;
            while done < total as u64 && wp < end {
                let n = (end - wp).min(total as u64 - done).min(PIECE);
                let piece = AlignedBuf::from_slice(&out[done as usize..(done + n) as usize]);
                self.dev.write_at(&piece, wp)?;
                wp += n;
                done += n;
            }
            let _ = z;
            if done == total as u64 {
                break;
            }
        }
        self.dev.sync()?;
        self.active = slot;
        self.bytes_written += total as u64;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_io::{EmulatedZonedDevice, MemDevice, ZoneGeometry};

    fn snap(version: u64, nleaves: usize) -> Snapshot {
        Snapshot {
            version,
            leaf_size: 8192,
            wal: WalPosition {
                ring: 1,
                addr: 4096 * 300,
                seq: 77,
            },
            zones: vec![(Role::Meta, 0), (Role::Leaf, 12), (Role::Vlog, 900)],
            leaves: (0..nleaves)
                .map(|i| ((i as u32).to_be_bytes().to_vec(), i as u64))
                .collect(),
            buffered: vec![
                Pair::new(b"a", Val::Put(Bytes::new(b"x"))),
                Pair::new(b"b", Val::Vlog(99)),
                Pair::new(b"c", Val::Del),
            ],
        }
    }

    #[test]
    fn newest_snapshot_wins_across_zone_switches() {
        let dev: Arc<dyn ZonedDevice> = Arc::new(
            EmulatedZonedDevice::format(MemDevice::new(), ZoneGeometry::small(8, 4, 4)).unwrap(),
        );
        let (mut log, none) = MetaLog::load(dev.clone(), 1).unwrap();
        assert!(none.is_none());
        for v in 1..40 {
            log.write(&snap(v, 3000)).unwrap();
        }
        let (_, got) = MetaLog::load(dev, 1).unwrap();
        assert_eq!(got.unwrap(), snap(39, 3000));
    }

    #[test]
    fn snapshots_span_the_zones_of_a_slot() {
        let dev: Arc<dyn ZonedDevice> = Arc::new(
            EmulatedZonedDevice::format(MemDevice::new(), ZoneGeometry::small(12, 4, 4)).unwrap(),
        );
        let (mut log, _) = MetaLog::load(dev.clone(), 3).unwrap();
        // About 1.3 zones each: slots fill, switch and are reset in turn.
        for v in 1..12 {
            log.write(&snap(v, 70_000)).unwrap();
            let (_, got) = MetaLog::load(dev.clone(), 3).unwrap();
            assert_eq!(got.unwrap().version, v);
        }
        assert!(log.write(&snap(99, 200_000)).is_err(), "larger than a slot");
    }

    #[test]
    fn counters_no_store_reaches_are_errors() {
        let limit = ferrite_core::engine::COUNTER_LIMIT;
        let body = snap(limit - 1, 4).encode();
        assert_eq!(
            Snapshot::decode(limit - 1, &body).unwrap(),
            snap(limit - 1, 4)
        );
        assert!(Snapshot::decode(u64::MAX, &body).is_err());
        let mut s = snap(1, 4);
        s.wal.seq = limit;
        assert!(Snapshot::decode(1, &s.encode()).is_err());
    }

    #[test]
    fn snapshots_with_counters_at_the_limit_are_not_written() {
        let dev: Arc<dyn ZonedDevice> = Arc::new(
            EmulatedZonedDevice::format(MemDevice::new(), ZoneGeometry::small(8, 4, 4)).unwrap(),
        );
        let (mut log, _) = MetaLog::load(dev.clone(), 1).unwrap();
        let limit = ferrite_core::engine::COUNTER_LIMIT;
        log.write(&snap(limit - 1, 4)).unwrap();
        let mut over = snap(limit, 4);
        assert!(matches!(log.write(&over), Err(Error::Corruption { .. })));
        over.version = limit - 1;
        over.wal.seq = limit;
        assert!(matches!(log.write(&over), Err(Error::Corruption { .. })));
        let (_, got) = MetaLog::load(dev, 1).unwrap();
        assert_eq!(got.unwrap(), snap(limit - 1, 4));
    }

    #[test]
    fn the_frame_checksum_covers_version_and_length() {
        let body = snap(5, 4).encode();
        let mut f = encode_frame(5, &body, 4096);
        let stored = u32::from_le_bytes(f[4..8].try_into().unwrap());
        assert_eq!(frame_crc(&f[..FRAME], &body), stored);
        for byte in [8, 15, 16] {
            f[byte] ^= 0x40;
            assert_ne!(frame_crc(&f[..FRAME], &body), stored, "byte {byte}");
            f[byte] ^= 0x40;
        }
    }

    #[test]
    fn a_snapshot_must_fit_the_device_layout() {
        // Two MetaLog zones, two WAL zones, four data zones.
        let layout = Layout {
            geometry: ZoneGeometry::small(8, 4, 4),
            meta: 2,
            wal: 2,
        };
        let zone = layout.geometry.zone_size;
        let good = Snapshot {
            wal: WalPosition {
                ring: 1,
                addr: 3 * zone + 8192,
                seq: 77,
            },
            zones: vec![
                (Role::Meta, 0),
                (Role::Meta, 0),
                (Role::Wal, 0),
                (Role::Wal, 0),
                (Role::Leaf, 0),
                (Role::Vlog, 900),
                (Role::Free, 0),
                (Role::Free, 0),
            ],
            buffered: vec![Pair::new(
                b"b",
                Val::Vlog(crate::vlog::location(5 * zone, 30)),
            )],
            ..snap(3, 2)
        };
        good.check_layout(&layout).unwrap();
        let edits: [fn(&mut Snapshot, u64); 9] = [
            |s, _| s.zones.truncate(7),
            |s, _| s.zones[0].0 = Role::Free,
            |s, _| s.zones[2].0 = Role::Leaf,
            |s, _| s.zones[6].0 = Role::Meta,
            |s, _| s.zones[5].1 = u64::MAX,
            |s, _| s.wal.ring = 2,
            |s, z| s.wal.addr = 2 * z,
            |s, _| s.wal.addr += 100,
            |s, z| s.buffered[0].val = Val::Vlog(crate::vlog::location(4 * z, 30)),
        ];
        for (i, edit) in edits.iter().enumerate() {
            let mut s = good.clone();
            edit(&mut s, zone);
            assert!(
                matches!(s.check_layout(&layout), Err(Error::Corruption { .. })),
                "edit {i}"
            );
        }
    }

    #[test]
    fn a_snapshot_naming_bytes_past_a_write_pointer_is_refused() {
        let geo = ZoneGeometry::small(8, 8, 8);
        let dev = EmulatedZonedDevice::format(MemDevice::new(), geo).unwrap();
        let zone = geo.zone_size;
        let ps = 4096u64;
        // Zone 2 (the WAL) holds one block, zone 4 three leaf pages and
        // zone 5 one value-log block.
        let block = AlignedBuf::zeroed(4096);
        dev.write_at(&block, 2 * zone).unwrap();
        for i in 0..3 {
            dev.write_at(&block, 4 * zone + i * ps).unwrap();
        }
        dev.write_at(&block, 5 * zone).unwrap();
        let first_leaf = 4 * zone / ps;
        let mut s = Snapshot {
            version: 3,
            leaf_size: ps as u32,
            wal: WalPosition {
                ring: 0,
                addr: 2 * zone + 4096,
                seq: 10,
            },
            zones: Vec::new(),
            leaves: vec![(Vec::new(), first_leaf), (b"m".to_vec(), first_leaf + 2)],
            buffered: vec![Pair::new(
                b"v",
                Val::Vlog(crate::vlog::location(5 * zone, 100)),
            )],
        };
        s.check_written(&dev).unwrap();
        s.leaves.push((b"z".to_vec(), first_leaf + 3));
        assert!(matches!(
            s.check_written(&dev),
            Err(Error::Corruption { .. })
        ));
        s.leaves.pop();
        s.buffered = vec![Pair::new(
            b"v",
            Val::Vlog(crate::vlog::location(5 * zone + 4000, 200)),
        )];
        assert!(
            s.check_written(&dev).is_err(),
            "a record running past the pointer"
        );
        s.buffered.clear();
        s.wal.addr += 4096;
        assert!(
            s.check_written(&dev).is_err(),
            "a replay start past the pointer"
        );
        s.wal.addr -= 4096;
        dev.reset_zone(4).unwrap();
        assert!(
            s.check_written(&dev).is_err(),
            "leaves in a zone reset since"
        );
    }

    #[test]
    fn damaged_payloads_are_errors_not_panics() {
        let body = snap(1, 10).encode();
        for cut in [0, 5, 30, body.len() - 1] {
            assert!(Snapshot::decode(1, &body[..cut]).is_err());
        }
    }
}
