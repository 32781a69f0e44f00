//! The value log: values above the inline limit, appended to their own
//! zones; the tree holds their 8-byte device address.
//!
//! A location is `address << 24 | length` in 8 bytes (addresses below
//! 1 TiB, values below 16 MiB), so a dead value's bytes are known without
//! reading it. Record: `len u32 | crc32c u32 | value`. Records are packed back to back
//! and leave in whole blocks; the unwritten tail stays in memory and is
//! served from there. A checkpoint pads and writes the tail so every
//! address a MetaLog holds is durable. Liveness is counted per zone in
//! bytes (record header included); a zone whose bytes are all dead is
//! reclaimed without migration.

use std::sync::Arc;

use ferrite_core::{Error, Result};
use ferrite_io::{AlignedBuf, DeviceError, IoOp, ZonedDevice};
use parking_lot::Mutex;

use crate::zone_space::{Role, ZoneSpace};

pub const RECORD_HEADER: u64 = 8;

/// Packs a record's address and value length into a location.
pub fn location(addr: u64, len: u64) -> u64 {
    (addr << 24) | (len & 0xFF_FFFF)
}

pub fn loc_addr(loc: u64) -> u64 {
    loc >> 24
}

pub fn loc_len(loc: u64) -> u64 {
    loc & 0xFF_FFFF
}

pub struct Vlog {
    dev: Arc<dyn ZonedDevice>,
    zone: Option<u32>,
    /// Device address where `tail` starts (block aligned).
    flushed: u64,
    end: u64,
    tail: Vec<u8>,
    pub bytes_written: u64,
}

impl Vlog {
    pub fn new(dev: Arc<dyn ZonedDevice>) -> Self {
        Self {
            dev,
            zone: None,
            flushed: 0,
            end: 0,
            tail: Vec::new(),
            bytes_written: 0,
        }
    }

    fn bs(&self) -> u64 {
        u64::from(self.dev.geometry().block_size)
    }

    /// Appends `value`; returns its location.
    pub fn append(&mut self, value: &[u8], space: &Mutex<ZoneSpace>) -> Result<u64> {
        let need = RECORD_HEADER + value.len() as u64;
        let g = *self.dev.geometry();
        if need > g.zone_capacity {
            return Err(Error::InvalidOptions(format!(
                "a value of {} bytes exceeds a zone's capacity",
                value.len()
            )));
        }
        let at = self.flushed + self.tail.len() as u64;
        if self.zone.is_none() || at + need > self.end {
            self.leave_zone(space)?;
            let z = space
                .lock()
                .take(Role::Vlog)
                .ok_or(Error::Device(DeviceError::NoSpace {
                    op: IoOp::Write,
                    offset: at,
                }))?;
            self.zone = Some(z);
            self.flushed = u64::from(z) * g.zone_size;
            self.end = self.flushed + g.zone_capacity;
        }
        let addr = self.flushed + self.tail.len() as u64;
        self.tail
            .extend_from_slice(&(value.len() as u32).to_le_bytes());
        self.tail
            .extend_from_slice(&crc32c::crc32c(value).to_le_bytes());
        self.tail.extend_from_slice(value);
        if let Some(z) = self.zone {
            let mut s = space.lock();
            s.add_valid(z as usize, need);
            s.touch(z as usize);
        }
        self.write_out(false)?;
        Ok(location(addr, value.len() as u64))
    }

    fn write_out(&mut self, pad: bool) -> Result<()> {
        let n =
            crate::block_tail::write_blocks(self.dev.as_ref(), &mut self.tail, self.flushed, pad)?;
        self.bytes_written += n;
        self.flushed += n;
        Ok(())
    }

    /// Pads and writes the tail (before a MetaLog).
    pub fn flush(&mut self) -> Result<()> {
        self.write_out(true)
    }

    fn leave_zone(&mut self, space: &Mutex<ZoneSpace>) -> Result<()> {
        if let Some(z) = self.zone.take() {
            self.write_out(true)?;
            self.dev.finish_zone(z)?;
            space.lock().close(z as usize);
        }
        Ok(())
    }

    /// Reads the value at location `loc`.
    pub fn read(&self, loc: u64) -> Result<Vec<u8>> {
        let addr = loc_addr(loc);
        let bad = |r: String| Error::corruption(format!("zkv value log at {addr}"), r);
        let mut hdr = [0u8; 8];
        self.read_bytes(addr, &mut hdr)?;
        let len = u32::from_le_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]) as u64;
        let crc = u32::from_le_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]);
        let g = *self.dev.geometry();
        if len != loc_len(loc) || (addr % g.zone_size) + RECORD_HEADER + len > g.zone_capacity {
            return Err(bad(format!("record length {len} runs past its zone")));
        }
        let mut v = vec![0u8; len as usize];
        self.read_bytes(addr + RECORD_HEADER, &mut v)?;
        if crc32c::crc32c(&v) != crc {
            return Err(bad("checksum mismatch".into()));
        }
        Ok(v)
    }

    /// Copies device bytes `[addr, addr + out.len())`, from the unwritten
    /// tail where they are still in memory.
    fn read_bytes(&self, addr: u64, out: &mut [u8]) -> Result<()> {
        let bs = self.bs();
        let end = addr + out.len() as u64;
        let in_tail = self.zone.is_some()
            && end > self.flushed
            && addr < self.flushed + self.tail.len() as u64;
        let dev_end = if in_tail { self.flushed.max(addr) } else { end };
        if dev_end > addr {
            let first = addr / bs * bs;
            let last = dev_end.div_ceil(bs) * bs;
            let mut buf = AlignedBuf::zeroed((last - first) as usize);
            self.dev.read_at(&mut buf, first)?;
            let n = (dev_end - addr) as usize;
            out[..n].copy_from_slice(&buf[(addr - first) as usize..(addr - first) as usize + n]);
        }
        if in_tail {
            let from = dev_end.max(self.flushed);
            let o = (from - addr) as usize;
            let t = (from - self.flushed) as usize;
            let n = out.len() - o;
            let src = self.tail.get(t..t + n).ok_or_else(|| {
                Error::corruption(
                    format!("zkv value log at {addr}"),
                    "address past the log end",
                )
            })?;
            out[o..].copy_from_slice(src);
        }
        Ok(())
    }

    /// The value at `loc` is dead.
    pub fn release(&self, loc: u64, space: &Mutex<ZoneSpace>) {
        let z = (loc_addr(loc) / self.dev.geometry().zone_size) as usize;
        space.lock().sub_valid(z, RECORD_HEADER + loc_len(loc));
    }

    pub fn zone(&self) -> Option<u32> {
        self.zone
    }
}
