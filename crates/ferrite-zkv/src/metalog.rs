//! The MetaLog: versioned snapshots of everything recovery needs besides
//! the WAL, appended to two dedicated zones in turn.
//!
//! A snapshot holds the WAL position to replay from, every zone's role and
//! liveness, every leaf's low key and page id, and every buffered pair
//! (merged filter, batch array, delta buffers), newest version per key, so
//! buffering survives a checkpoint without being forced to pages.
//!
//! Frame (block aligned, little-endian): `magic u32 "ZKVM" | crc32c u32 |
//! version u64 | len u64 | pad to 32 | payload`, padded to a whole block.
//! Recovery reads both zones up to their write pointers and takes the
//! highest version whose frame checks; a snapshot that does not fit the
//! active zone goes to the other after it is reset (the active one keeps
//! the newest complete snapshot meanwhile).

use std::sync::Arc;

use ferrite_core::{ByteReader, Error, Result};
use ferrite_io::{AlignedBuf, ZonedDevice};

use crate::pair::{Bytes, Pair, Val};
use crate::zone_space::Role;
use crate::zone_wal::WalPosition;

const MAGIC: u32 = u32::from_le_bytes(*b"ZKVM");
const FRAME: usize = 32;

/// What a snapshot records.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub version: u64,
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
        let mut r = ByteReader::new(buf);
        let ring = r.u32().ok_or_else(|| bad("short header"))?;
        let addr = r.u64().ok_or_else(|| bad("short header"))?;
        let seq = r.u64().ok_or_else(|| bad("short header"))?;
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
            wal: WalPosition { ring, addr, seq },
            zones,
            leaves,
            buffered,
        })
    }
}

/// Appends snapshots to the two MetaLog zones.
pub struct MetaLog {
    dev: Arc<dyn ZonedDevice>,
    /// The zone holding the newest snapshot (0 or 1).
    active: u32,
    pub bytes_written: u64,
}

impl MetaLog {
    /// Reads the newest valid snapshot of zones 0 and 1.
    pub fn load(dev: Arc<dyn ZonedDevice>) -> Result<(Self, Option<Snapshot>)> {
        let g = *dev.geometry();
        let bs = g.block_size as usize;
        let mut best: Option<(u64, u32, Vec<u8>)> = None;
        for z in 0..2u32 {
            let start = u64::from(z) * g.zone_size;
            let wp = dev
                .report_zones(z, 1)
                .first()
                .map_or(start, |i| i.write_pointer);
            if wp <= start {
                continue;
            }
            let mut buf = AlignedBuf::zeroed((wp - start) as usize);
            dev.read_at(&mut buf, start)?;
            let mut at = 0usize;
            while at + FRAME <= buf.len() {
                let h = &buf[at..at + FRAME];
                let rd32 = |o: usize| u32::from_le_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]);
                let rd64 = |o: usize| {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(&h[o..o + 8]);
                    u64::from_le_bytes(b)
                };
                let (magic, crc, version, len) = (rd32(0), rd32(4), rd64(8), rd64(16));
                let end = (at as u64).saturating_add(FRAME as u64).saturating_add(len);
                if magic != MAGIC || end > buf.len() as u64 {
                    at += bs;
                    continue;
                }
                let body = &buf[at + FRAME..end as usize];
                if crc32c::crc32c(body) == crc && best.as_ref().is_none_or(|b| version > b.0) {
                    best = Some((version, z, body.to_vec()));
                }
                at = (end as usize).div_ceil(bs) * bs;
            }
        }
        let (active, snap) = match best {
            Some((v, z, body)) => (z, Some(Snapshot::decode(v, &body)?)),
            None => (0, None),
        };
        Ok((
            Self {
                dev,
                active,
                bytes_written: 0,
            },
            snap,
        ))
    }

    /// Appends `snap` durably (the caller synced the data it refers to).
    pub fn write(&mut self, snap: &Snapshot) -> Result<()> {
        let g = *self.dev.geometry();
        let bs = g.block_size as usize;
        let body = snap.encode();
        let total = (FRAME + body.len()).div_ceil(bs) * bs;
        if total as u64 > g.zone_capacity {
            return Err(Error::InvalidOptions(format!(
                "a MetaLog snapshot of {total} bytes exceeds a zone ({} bytes); use larger zones",
                g.zone_capacity
            )));
        }
        let mut z = self.active;
        let wp = self
            .dev
            .report_zones(z, 1)
            .first()
            .map_or(0, |i| i.write_pointer);
        if wp + total as u64 > u64::from(z) * g.zone_size + g.zone_capacity {
            z = 1 - z;
            self.dev.reset_zone(z)?;
        }
        let mut out = AlignedBuf::zeroed(total);
        out[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        out[4..8].copy_from_slice(&crc32c::crc32c(&body).to_le_bytes());
        out[8..16].copy_from_slice(&snap.version.to_le_bytes());
        out[16..24].copy_from_slice(&(body.len() as u64).to_le_bytes());
        out[FRAME..FRAME + body.len()].copy_from_slice(&body);
        self.dev.append(z, &out)?;
        self.dev.sync()?;
        self.active = z;
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
        let (mut log, none) = MetaLog::load(dev.clone()).unwrap();
        assert!(none.is_none());
        for v in 1..40 {
            log.write(&snap(v, 3000)).unwrap();
        }
        let (_, got) = MetaLog::load(dev).unwrap();
        assert_eq!(got.unwrap(), snap(39, 3000));
    }

    #[test]
    fn damaged_payloads_are_errors_not_panics() {
        let body = snap(1, 10).encode();
        for cut in [0, 5, 30, body.len() - 1] {
            assert!(Snapshot::decode(1, &body[..cut]).is_err());
        }
    }
}
