//! The write-ahead log area: a ring of zones written only at their write
//! pointers.
//!
//! Records use `ferrite-wal`'s checksummed framing with the record's
//! sequence number in the epoch field. Records are buffered and leave in
//! whole 4 KiB blocks (the paper's 4 KiB flush unit); a commit that must be
//! durable pads the partial block with zeros and writes it, so the next
//! record starts on a fresh block (a zone cannot rewrite a block). Replay
//! starts at the position a MetaLog recorded, decodes records in sequence,
//! skips zero padding to the next block, follows the ring into the next
//! zone, and stops at the first record whose sequence is not the next one.
//!
//! Invariants: records are written in sequence order; nothing is reported
//! durable before the device sync that covers it returned; after a failed
//! write or sync the log is poisoned. A WAL zone other than the one the
//! newest MetaLog points into is reset after that MetaLog is durable.

use std::sync::Arc;
use std::time::Instant;

use ferrite_core::{Error, Result};
use ferrite_io::{AlignedBuf, ZonedDevice};
use ferrite_wal::{decode_record, encode_record, HEADER_LEN};

/// Where replay starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalPosition {
    /// Index into the WAL ring.
    pub ring: u32,
    /// Device byte address (block aligned).
    pub addr: u64,
    /// Sequence number of the first record at `addr`.
    pub seq: u64,
}

pub struct ZoneWal {
    dev: Arc<dyn ZonedDevice>,
    ring: Vec<u32>,
    cur: usize,
    /// Device address where `buf` will be written.
    at: u64,
    buf: Vec<u8>,
    next_seq: u64,
    /// Records with a smaller sequence are durable.
    durable: u64,
    pub bytes_since_checkpoint: u64,
    pub bytes_written: u64,
    poisoned: Option<String>,
    last_sync: Instant,
}

impl ZoneWal {
    pub fn new(dev: Arc<dyn ZonedDevice>, ring: Vec<u32>, pos: WalPosition) -> Self {
        Self {
            dev,
            cur: pos.ring as usize % ring.len().max(1),
            ring,
            at: pos.addr,
            buf: Vec::new(),
            next_seq: pos.seq,
            durable: pos.seq,
            bytes_since_checkpoint: 0,
            bytes_written: 0,
            poisoned: None,
            last_sync: Instant::now(),
        }
    }

    fn bs(&self) -> u64 {
        u64::from(self.dev.geometry().block_size)
    }

    fn zone_end(&self) -> u64 {
        let g = self.dev.geometry();
        u64::from(self.ring[self.cur]) * g.zone_size + g.zone_capacity
    }

    pub fn check(&self) -> Result<()> {
        match &self.poisoned {
            Some(c) => Err(Error::Poisoned { cause: c.clone() }),
            None => Ok(()),
        }
    }

    fn poison<T>(&mut self, e: Error) -> Result<T> {
        self.poisoned = Some(format!("WAL: {e}"));
        Err(e)
    }

    /// Appends one record; returns its sequence number.
    pub fn append(&mut self, payload: &[u8]) -> Result<u64> {
        self.check()?;
        let bs = self.bs();
        let need = (HEADER_LEN + payload.len()) as u64;
        let cap = self.dev.geometry().zone_capacity;
        if need > cap / 2 {
            return Err(Error::InvalidOptions(format!(
                "a WAL record of {need} bytes exceeds half a zone ({cap} bytes); use larger zones"
            )));
        }
        if self.at + (self.buf.len() as u64 + need).div_ceil(bs) * bs > self.zone_end() {
            self.write_out(true)?;
            self.advance_zone()?;
        }
        let seq = self.next_seq;
        encode_record(seq, payload, &mut self.buf);
        self.next_seq += 1;
        if self.buf.len() as u64 >= bs {
            self.write_out(false)?;
        }
        Ok(seq)
    }

    fn advance_zone(&mut self) -> Result<()> {
        let dev = self.dev.clone();
        let z = self.ring[self.cur];
        if let Err(e) = dev.finish_zone(z) {
            return self.poison(e.into());
        }
        let next = (self.cur + 1) % self.ring.len();
        let nz = self.ring[next];
        let info = dev.report_zones(nz, 1);
        let g = *dev.geometry();
        if info
            .first()
            .is_none_or(|i| i.write_pointer != u64::from(nz) * g.zone_size)
        {
            return Err(Error::InvalidOptions(
                "the WAL ring is full: a checkpoint must free a WAL zone first".into(),
            ));
        }
        self.cur = next;
        self.at = u64::from(nz) * g.zone_size;
        Ok(())
    }

    /// Writes whole blocks of the buffer; with `pad`, the partial block too.
    fn write_out(&mut self, pad: bool) -> Result<()> {
        let n =
            match crate::block_tail::write_blocks(self.dev.as_ref(), &mut self.buf, self.at, pad) {
                Ok(n) => n,
                Err(e) => return self.poison(e.into()),
            };
        self.bytes_written += n;
        // Ring space consumed, padding included: what the checkpoint
        // threshold must bound.
        self.bytes_since_checkpoint += n;
        self.at += n;
        Ok(())
    }

    /// Whether a record of `payload_len` bytes can be appended without
    /// moving into a WAL zone that a checkpoint has not yet freed.
    pub fn has_room(&self, payload_len: usize) -> bool {
        let bs = self.bs();
        let need = (HEADER_LEN + payload_len) as u64;
        if self.at + (self.buf.len() as u64 + need).div_ceil(bs) * bs <= self.zone_end() {
            return true;
        }
        let g = self.dev.geometry();
        let nz = self.ring[(self.cur + 1) % self.ring.len()];
        self.dev
            .report_zones(nz, 1)
            .first()
            .is_some_and(|i| i.write_pointer == u64::from(nz) * g.zone_size)
    }

    /// Makes every record up to `seq` durable (writes and syncs), unless an
    /// earlier call already did.
    pub fn commit(&mut self, seq: u64) -> Result<()> {
        self.check()?;
        if seq < self.durable {
            return Ok(());
        }
        self.write_out(true)?;
        if let Err(e) = self.dev.sync() {
            return self.poison(e.into());
        }
        self.durable = self.next_seq;
        self.last_sync = Instant::now();
        Ok(())
    }

    pub fn since_last_sync(&self) -> std::time::Duration {
        self.last_sync.elapsed()
    }

    /// Writes out the partial block; the position the next record will
    /// take. A MetaLog taken now replays from here.
    pub fn position(&mut self) -> Result<WalPosition> {
        self.write_out(true)?;
        Ok(WalPosition {
            ring: self.cur as u32,
            addr: self.at,
            seq: self.next_seq,
        })
    }

    /// Ring zones other than the current one (free them after a MetaLog).
    pub fn retired_zones(&self) -> Vec<u32> {
        self.ring
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != self.cur)
            .map(|(_, &z)| z)
            .collect()
    }

    pub fn mark_durable(&mut self) {
        self.durable = self.next_seq;
    }
}

/// Replays records from `pos` into `apply(seq, payload)`; returns the next
/// sequence number and the ring index of the zone the log continues in.
pub fn replay(
    dev: &dyn ZonedDevice,
    ring: &[u32],
    pos: WalPosition,
    apply: &mut dyn FnMut(u64, &[u8]) -> Result<()>,
) -> Result<(u64, u32)> {
    let g = *dev.geometry();
    let bs = u64::from(g.block_size) as usize;
    let n = ring.len().max(1);
    let mut cur = pos.ring as usize % n;
    let mut addr = pos.addr;
    let mut seq = pos.seq;
    let mut tail = cur as u32;
    for step in 0..n {
        let z = ring[cur];
        let start = u64::from(z) * g.zone_size;
        if step > 0 {
            addr = start;
        }
        let wp = dev
            .report_zones(z, 1)
            .first()
            .map_or(start, |i| i.write_pointer);
        if wp <= addr {
            if step > 0 {
                break;
            }
        } else {
            let mut buf = AlignedBuf::zeroed((wp - addr) as usize);
            dev.read_at(&mut buf, addr)?;
            let mut at = 0usize;
            while at < buf.len() {
                match decode_record(&buf[at..]) {
                    Some((h, payload)) if h.epoch == seq => {
                        apply(seq, payload)?;
                        seq += 1;
                        at += HEADER_LEN + payload.len();
                        tail = cur as u32;
                    }
                    Some(_) => return Ok((seq, tail)),
                    // Zero padding or a torn tail: records resume on a block.
                    None => at = (at / bs + 1) * bs,
                }
            }
        }
        cur = (cur + 1) % n;
    }
    Ok((seq, tail))
}
