//! A zoned device emulated on a regular block device.
//!
//! The backing device holds a geometry header, four copies of the zone table
//! (two pairs, written in turn, both copies of a pair at once; two single
//! copies on a device of format 1), then the zones' data (see
//! `docs/format/emulated-zoned-device.md`).
//! Every command is checked against [`ZoneTable`] before any byte moves, so
//! a broken rule is a typed [`ZoneError`] and changes nothing.
//!
//! Durability follows a real drive: written data and write pointers become
//! durable together at [`ZonedDevice::sync`], which first syncs the data and
//! then the table, so a persisted write pointer never covers unsynced data.
//! Resets and finishes are durable when they return. Writers hold a shared
//! gate while they reserve space and write; `sync` takes it exclusively, so
//! it never persists a write pointer past a write still in flight. After a
//! reopen (or a crash, when stacked on [`crate::FaultyDevice`]) open zones
//! come back closed, as after a power cycle. A write that fails after it
//! was admitted leaves its range consumed (the write pointer stays past it),
//! like a drive that accepted the command; what the range holds is undefined.

use std::path::{Path, PathBuf};

use parking_lot::{Mutex, RwLock};

use crate::accounting::{IoCounters, IoStats};
use crate::aligned_buf::AlignedBuf;
use crate::block_device::{check_aligned, BlockDevice, ReadReq};
use crate::direct_file::{DirectFile, DirectFileOptions};
use crate::error::{DeviceError, IoOp, Result, ZoneError};
use crate::zoned::geometry::ZoneGeometry;
use crate::zoned::table_codec as codec;
use crate::zoned::zone_table::{ZoneCondition, ZoneTable};
use crate::zoned::{ZoneInfo, ZonedDevice};

#[derive(Debug)]
struct Meta {
    table: ZoneTable,
    /// Sequence number of the newest persisted table copy.
    seq: u64,
    /// The table changed since it was last persisted.
    dirty: bool,
}

/// A ZNS-like device on top of a [`BlockDevice`] (an O_DIRECT file by default).
#[derive(Debug)]
pub struct EmulatedZonedDevice<D: BlockDevice = DirectFile> {
    dev: D,
    geo: ZoneGeometry,
    /// Zone table copies on the device: 4 (two pairs), or 2 on a device
    /// of format 1.
    copies: u8,
    base: u64,
    meta: Mutex<Meta>,
    gate: RwLock<()>,
    counters: IoCounters,
    label: PathBuf,
}

impl EmulatedZonedDevice<DirectFile> {
    /// Opens the zoned device in file `path`, formatting it with `geo` if the
    /// file is new or empty. An existing device must have the same geometry.
    pub fn open_or_create(path: impl AsRef<Path>, geo: ZoneGeometry) -> Result<Self> {
        let dev = DirectFile::open_with(path.as_ref(), DirectFileOptions::default())?;
        if dev.is_empty() {
            return Self::format(dev, geo);
        }
        let me = Self::load(dev)?;
        if me.geo != geo {
            return Err(DeviceError::InvalidConfig(format!(
                "{} holds a zoned device with geometry {:?}, not the requested {:?}",
                path.as_ref().display(),
                me.geo,
                geo
            )));
        }
        Ok(me)
    }

    /// Opens an existing zoned device file; its geometry comes from the file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let opts = DirectFileOptions {
            create: false,
            ..DirectFileOptions::default()
        };
        Self::load(DirectFile::open_with(path.as_ref(), opts)?)
    }
}

impl<D: BlockDevice> EmulatedZonedDevice<D> {
    /// Writes a fresh device with every zone empty onto `dev`.
    pub fn format(dev: D, geo: ZoneGeometry) -> Result<Self> {
        geo.validate()?;
        if dev.block_size() != geo.block_size as usize {
            return Err(DeviceError::InvalidConfig(format!(
                "backing block size {} differs from the zone geometry's {}",
                dev.block_size(),
                geo.block_size
            )));
        }
        let copies = codec::copies(codec::VERSION);
        let base = codec::data_base(&geo, copies);
        dev.set_len(0)?;
        dev.set_len(base + geo.address_space())?;
        let mut header = AlignedBuf::zeroed(geo.block_size as usize);
        codec::encode_header(&geo, &mut header);
        dev.write_at(&header, 0)?;
        let me = Self::assemble(dev, geo, copies, ZoneTable::new(geo), 0);
        // Both pairs start valid, so either may be overwritten first.
        me.persist_locked(&mut me.meta.lock())?;
        me.persist_locked(&mut me.meta.lock())?;
        Ok(me)
    }

    /// Opens the zoned device stored on `dev`.
    pub fn load(dev: D) -> Result<Self> {
        let label = PathBuf::from(dev.describe());
        let corrupt = |reason: String| DeviceError::CorruptMetadata {
            path: label.clone(),
            reason,
        };
        let mut probe = AlignedBuf::zeroed(dev.block_size());
        if dev.len() < probe.len() as u64 {
            return Err(corrupt("too short to hold a zoned-device header".into()));
        }
        dev.read_at(&mut probe, 0)?;
        let (geo, version) = codec::decode_header(&probe).map_err(&corrupt)?;
        let copies = codec::copies(version);
        if dev.block_size() != geo.block_size as usize {
            return Err(corrupt(format!(
                "header block size {} differs from the backing device's {}",
                geo.block_size,
                dev.block_size()
            )));
        }
        let copy_len = (codec::copy_blocks(&geo) * u64::from(geo.block_size)) as usize;
        let mut best: Option<codec::TableCopy> = None;
        let mut errors = Vec::new();
        for which in 0..copies {
            // Checked before allocating: the header's numbers are untrusted.
            let off = codec::copy_offset(&geo, which);
            if off + copy_len as u64 > dev.len() {
                errors.push(format!("table copy {which} lies past the device end"));
                continue;
            }
            let mut buf = AlignedBuf::zeroed(copy_len);
            dev.read_at(&mut buf, off)?;
            match codec::decode_table(&buf, &geo) {
                Ok(copy) if best.as_ref().is_none_or(|b| copy.seq > b.seq) => best = Some(copy),
                Ok(_) => {}
                Err(e) => errors.push(format!("table copy {which}: {e}")),
            }
        }
        let Some(copy) = best else {
            return Err(corrupt(errors.join("; ")));
        };
        let table = ZoneTable::restore(geo, &copy.entries);
        Ok(Self::assemble(dev, geo, copies, table, copy.seq))
    }

    fn assemble(dev: D, geo: ZoneGeometry, copies: u8, table: ZoneTable, seq: u64) -> Self {
        let label = PathBuf::from(dev.describe());
        Self {
            base: codec::data_base(&geo, copies),
            dev,
            geo,
            copies,
            meta: Mutex::new(Meta {
                table,
                seq,
                dirty: false,
            }),
            gate: RwLock::new(()),
            counters: IoCounters::new(),
            label,
        }
    }

    /// The backing device.
    pub fn inner(&self) -> &D {
        &self.dev
    }

    /// Puts a zone into the read-only or offline condition, as a failing
    /// drive would, so engines can be tested against it.
    pub fn fail_zone(&self, zone: u32, cond: ZoneCondition) -> Result<()> {
        let mut m = self.meta.lock();
        m.table.fail_zone(zone, cond)?;
        m.dirty = true;
        Ok(())
    }

    /// Writes the table where the newest version is not, after syncing
    /// data so the new write pointers only cover durable bytes: both
    /// copies of the pair not holding it, in one write (one copy on a
    /// format-1 device, which has no pairs).
    fn persist_locked(&self, m: &mut Meta) -> Result<()> {
        self.dev.sync()?;
        let seq = m.seq + 1;
        let copy_len = (codec::copy_blocks(&self.geo) * u64::from(self.geo.block_size)) as usize;
        let per_write = if self.copies == 4 { 2 } else { 1 };
        let mut buf = AlignedBuf::zeroed(copy_len * per_write);
        for copy in buf.chunks_mut(copy_len) {
            codec::encode_table(seq, m.table.entries(), self.geo.zone_count, copy);
        }
        let first = (seq % 2) as u8 * per_write as u8;
        self.dev
            .write_at(&buf, codec::copy_offset(&self.geo, first))?;
        self.dev.sync()?;
        m.seq = seq;
        m.dirty = false;
        Ok(())
    }

    fn check_buf(&self, offset: u64, buf: &[u8]) -> Result<()> {
        check_aligned(
            self.geo.block_size as usize,
            offset,
            buf.len(),
            buf.as_ptr() as usize,
        )
    }

    /// Splits a device address into (zone, offset in zone), checking that a
    /// range of `len` bytes stays inside one zone.
    fn locate(&self, offset: u64, len: u64) -> Result<(u32, u64)> {
        let (zone, rel) = self.geo.locate(offset);
        let zone = u32::try_from(zone).unwrap_or(u32::MAX);
        if zone >= self.geo.zone_count {
            return Err(ZoneError::NoSuchZone {
                zone,
                zone_count: self.geo.zone_count,
            }
            .into());
        }
        if rel + len > self.geo.zone_size {
            return Err(ZoneError::CrossesZoneBoundary { zone }.into());
        }
        Ok((zone, rel))
    }

    fn write_reserved(&self, zone: u32, at: Option<u64>, buf: &[u8], op: IoOp) -> Result<u64> {
        let _gate = self.gate.read();
        let rel = {
            let mut m = self.meta.lock();
            let rel = m.table.admit_write(zone, at, buf.len() as u64)?;
            m.dirty = true;
            rel
        };
        let addr = self.geo.zone_start(zone) + rel;
        self.dev
            .write_at(buf, self.base + addr)
            .map_err(|e| match e {
                DeviceError::Os {
                    path,
                    offset,
                    source,
                    ..
                } => DeviceError::Os {
                    op,
                    path,
                    offset,
                    source,
                },
                other => other,
            })?;
        self.counters.record_write(buf.len() as u64);
        Ok(addr)
    }

    /// Applies an open or close, which becomes durable at the next sync.
    fn zone_management(
        &self,
        f: impl FnOnce(&mut ZoneTable) -> Result<(), ZoneError>,
    ) -> Result<()> {
        let mut m = self.meta.lock();
        f(&mut m.table)?;
        m.dirty = true;
        Ok(())
    }
}

impl<D: BlockDevice> ZonedDevice for EmulatedZonedDevice<D> {
    fn geometry(&self) -> &ZoneGeometry {
        &self.geo
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.check_buf(offset, buf)?;
        let (zone, rel) = self.locate(offset, buf.len() as u64)?;
        self.meta
            .lock()
            .table
            .admit_read(zone, rel, buf.len() as u64)?;
        self.dev.read_at(buf, self.base + offset)?;
        self.counters.record_read(buf.len() as u64);
        Ok(())
    }

    fn read_batch(&self, reqs: &mut [ReadReq<'_>]) -> Result<()> {
        {
            let m = self.meta.lock();
            for r in reqs.iter() {
                self.check_buf(r.offset, r.buf)?;
                let (zone, rel) = self.locate(r.offset, r.buf.len() as u64)?;
                m.table.admit_read(zone, rel, r.buf.len() as u64)?;
            }
        }
        let mut moved: Vec<ReadReq<'_>> = reqs
            .iter_mut()
            .map(|r| ReadReq::new(self.base + r.offset, &mut *r.buf))
            .collect();
        self.dev.read_batch(&mut moved)?;
        self.counters.record_read_batch();
        for r in moved.iter() {
            self.counters.record_read(r.buf.len() as u64);
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.check_buf(offset, buf)?;
        let (zone, rel) = self.locate(offset, buf.len() as u64)?;
        self.write_reserved(zone, Some(rel), buf, IoOp::Write)
            .map(|_| ())
    }

    fn append(&self, zone: u32, buf: &[u8]) -> Result<u64> {
        self.check_buf(0, buf)?;
        self.write_reserved(zone, None, buf, IoOp::Append)
    }

    fn open_zone(&self, zone: u32) -> Result<()> {
        self.zone_management(|t| t.open(zone))
    }

    fn close_zone(&self, zone: u32) -> Result<()> {
        self.zone_management(|t| t.close(zone))
    }

    fn finish_zone(&self, zone: u32) -> Result<()> {
        let _gate = self.gate.write();
        let mut m = self.meta.lock();
        m.table.finish(zone)?;
        self.persist_locked(&mut m)
    }

    fn reset_zone(&self, zone: u32) -> Result<()> {
        let _gate = self.gate.write();
        let mut m = self.meta.lock();
        m.table.reset(zone)?;
        // Old data must read as zeros, and its disk space comes back.
        self.dev
            .discard(self.base + self.geo.zone_start(zone), self.geo.zone_size)?;
        self.persist_locked(&mut m)
    }

    fn report_zones(&self, first: u32, count: u32) -> Vec<ZoneInfo> {
        let m = self.meta.lock();
        let end = first.saturating_add(count).min(self.geo.zone_count);
        (first..end)
            .filter_map(|zone| {
                let (condition, wp) = m.table.zone(zone).ok()?;
                let start = self.geo.zone_start(zone);
                Some(ZoneInfo {
                    zone,
                    start,
                    capacity: self.geo.zone_capacity,
                    write_pointer: start + wp,
                    condition,
                })
            })
            .collect()
    }

    fn sync(&self) -> Result<()> {
        let _gate = self.gate.write();
        let mut m = self.meta.lock();
        if m.dirty {
            self.persist_locked(&mut m)?;
        } else {
            self.dev.sync()?;
        }
        self.counters.record_sync();
        Ok(())
    }

    fn io_stats(&self) -> IoStats {
        self.counters.snapshot()
    }

    fn describe(&self) -> String {
        format!(
            "emulated zoned device ({} zones of {} MiB, capacity {} MiB, {} open / {} active) on {}",
            self.geo.zone_count,
            self.geo.zone_size >> 20,
            self.geo.zone_capacity >> 20,
            self.geo.max_open,
            self.geo.max_active,
            self.label.display()
        )
    }
}

impl<D: BlockDevice> Drop for EmulatedZonedDevice<D> {
    fn drop(&mut self) {
        let mut m = self.meta.lock();
        if m.dirty {
            if let Err(e) = self.persist_locked(&mut m) {
                log::warn!("zone table not saved on close: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemDevice;

    /// A device of format 1 (two single table copies, data right after
    /// them) still loads, and keeps its layout as it is written to.
    #[test]
    fn a_format_1_device_loads_and_keeps_its_layout() {
        let geo = ZoneGeometry::small(8, 4, 4);
        let bs = geo.block_size as usize;
        let dev = std::sync::Arc::new(MemDevice::new());
        let base = codec::data_base(&geo, 2);
        dev.set_len(base + geo.address_space()).unwrap();
        let mut header = AlignedBuf::zeroed(bs);
        codec::encode_header(&geo, &mut header);
        header[8..12].copy_from_slice(&1u32.to_le_bytes());
        let body_len = 52;
        let crc = crc32c::crc32c(&header[..body_len]);
        header[body_len..body_len + 4].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(codec::decode_header(&header).map(|h| h.1), Ok(1));
        dev.write_at(&header, 0).unwrap();
        // Zone 0 holds one block; copy 1 (the newer) says so.
        let mut table = ZoneTable::new(geo);
        table.admit_write(0, None, bs as u64).unwrap();
        for (which, seq) in [(0u8, 4u64), (1, 5)] {
            let mut copy = AlignedBuf::zeroed(codec::copy_blocks(&geo) as usize * bs);
            codec::encode_table(seq, table.entries(), geo.zone_count, &mut copy);
            dev.write_at(&copy, codec::copy_offset(&geo, which))
                .unwrap();
        }
        let mut data = AlignedBuf::zeroed(bs);
        data.fill(9);
        dev.write_at(&data, base).unwrap();

        let d = EmulatedZonedDevice::load(dev.clone()).unwrap();
        assert_eq!(d.copies, 2);
        let mut back = AlignedBuf::zeroed(bs);
        d.read_at(&mut back, 0).unwrap();
        assert!(back.iter().all(|&b| b == 9));
        d.append(0, &data).unwrap();
        d.sync().unwrap();
        drop(d);
        let d = EmulatedZonedDevice::load(dev).unwrap();
        assert_eq!(d.report_zones(0, 1)[0].write_pointer, 2 * bs as u64);
    }
}
