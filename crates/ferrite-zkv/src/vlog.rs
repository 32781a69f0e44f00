//! The value log: values above the inline limit, appended to their own
//! zones; the tree holds their 8-byte device address.
//!
//! Record: `len u32 | crc32c u32 | key_len u16 | key | value`, where `len`
//! counts the bytes after the 8-byte header and the checksum covers them.
//! Bit 15 of `key_len` marks a compressed value: the value bytes are then
//! `value length u32 | lz4 block`, written only when that is at least an
//! eighth shorter than the value (`with_compression`); readers and
//! reclamation see the value itself either way, and locations and
//! liveness count the bytes as stored.
//! The key lets reclamation find the pair a record belongs to ([`scan`]).
//! A location is `address << 24 | len` in 8 bytes (addresses below 1 TiB,
//! records below 16 MiB), so a dead record's bytes are known without
//! reading it. Records are packed back to back and leave in whole blocks;
//! the unwritten tail stays in memory and is served from there. A
//! checkpoint pads the tail with zeros to a block boundary and writes it,
//! so every address a MetaLog holds is durable. Liveness is counted per
//! zone in bytes (headers included); a zone whose bytes are all dead is
//! reclaimed without migration, others by moving their live records.

use std::sync::Arc;

use ferrite_core::{Error, Result};
use ferrite_io::{AlignedBuf, DeviceError, IoOp, ZonedDevice};
use parking_lot::Mutex;

use crate::zone_space::{Role, ZoneSpace};

pub const RECORD_HEADER: u64 = 8;
/// The key length field at the front of a record's body.
const KEY_LEN_BYTES: usize = 2;
/// The longest record body: a key and a value at their limits.
const MAX_BODY: usize = KEY_LEN_BYTES + ferrite_core::MAX_KEY_LEN + ferrite_core::MAX_VALUE_LEN;
/// In the key length field: the value is compressed.
const COMPRESSED: u16 = 0x8000;

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
    compress: bool,
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
            compress: false,
        }
    }

    /// Stores values compressed where that saves an eighth or more.
    pub fn with_compression(mut self, on: bool) -> Self {
        self.compress = on;
        self
    }

    fn bs(&self) -> u64 {
        u64::from(self.dev.geometry().block_size)
    }

    /// Appends `key`'s `value`; returns its location.
    pub fn append(&mut self, key: &[u8], value: &[u8], space: &Mutex<ZoneSpace>) -> Result<u64> {
        let key_len = u16::try_from(key.len())
            .ok()
            .filter(|&l| l & COMPRESSED == 0)
            .ok_or_else(|| Error::InvalidOptions(format!("a key of {} bytes", key.len())))?;
        let packed = if self.compress { compress(value) } else { None };
        let (key_len, value) = match &packed {
            Some(p) => (key_len | COMPRESSED, p.as_slice()),
            None => (key_len, value),
        };
        let body = KEY_LEN_BYTES + key.len() + value.len();
        let need = RECORD_HEADER + body as u64;
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
        let key_len = key_len.to_le_bytes();
        let crc =
            crc32c::crc32c_append(crc32c::crc32c_append(crc32c::crc32c(&key_len), key), value);
        self.tail.extend_from_slice(&(body as u32).to_le_bytes());
        self.tail.extend_from_slice(&crc.to_le_bytes());
        self.tail.extend_from_slice(&key_len);
        self.tail.extend_from_slice(key);
        self.tail.extend_from_slice(value);
        if let Some(z) = self.zone {
            let mut s = space.lock();
            s.add_valid(z as usize, need);
            s.touch(z as usize);
        }
        self.write_out(false)?;
        Ok(location(addr, body as u64))
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
        let g = *self.dev.geometry();
        let len = loc_len(loc);
        if (addr % g.zone_size) + RECORD_HEADER + len > g.zone_capacity {
            return Err(Error::corruption(
                format!("zkv value log at {addr}"),
                format!("a record of {len} bytes runs past its zone"),
            ));
        }
        let mut rec = vec![0u8; (RECORD_HEADER + len) as usize];
        self.read_bytes(addr, &mut rec)?;
        match decode(&rec) {
            Decoded::Record {
                body,
                key_len,
                compressed,
            } if body == len as usize => {
                let mut v = rec;
                v.drain(..RECORD_HEADER as usize + KEY_LEN_BYTES + key_len);
                if !compressed {
                    return Ok(v);
                }
                decompress(&v)
                    .map_err(|why| Error::corruption(format!("zkv value log at {addr}"), why))
            }
            _ => Err(Error::corruption(
                format!("zkv value log at {addr}"),
                "the record does not match its location (length or checksum)",
            )),
        }
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

    /// The record at `loc` is dead. Only a value-log zone's count moves:
    /// a location from a damaged page that names another zone must not
    /// lower a leaf zone's count of live pages.
    pub fn release(&self, loc: u64, space: &Mutex<ZoneSpace>) {
        let z = (loc_addr(loc) / self.dev.geometry().zone_size) as usize;
        let mut s = space.lock();
        if s.zones.get(z).is_some_and(|zs| zs.role == Role::Vlog) {
            s.sub_valid(z, RECORD_HEADER + loc_len(loc));
        }
    }
}

/// A record found by [`scan`]: where it is, and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneRecord {
    pub loc: u64,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
}

/// The records of `zone` on `dev` (a zone the log no longer writes), in
/// log order. Needs no lock on the log.
pub fn records(dev: &dyn ZonedDevice, zone: u32) -> Result<Vec<ZoneRecord>> {
    let g = *dev.geometry();
    let start = u64::from(zone) * g.zone_size;
    let info = dev.report_zones(zone, 1).first().copied();
    let readable = info.map_or(0, |i| match i.condition {
        ferrite_io::ZoneCondition::Full | ferrite_io::ZoneCondition::ReadOnly => g.zone_capacity,
        _ => i.write_pointer.saturating_sub(start),
    });
    let bs = u64::from(g.block_size);
    // Read in chunks; a record may straddle two.
    let chunk = (1u64 << 20).max(bs) / bs * bs;
    let mut out = Vec::new();
    let mut buf: Vec<u8> = Vec::new();
    let (mut buf_at, mut read_to) = (start, start);
    loop {
        let s = scan(&buf, buf_at, bs, start + readable);
        out.extend(s.records);
        buf.drain(..s.consumed);
        buf_at += s.consumed as u64;
        if s.end || read_to >= start + readable {
            return Ok(out);
        }
        let n = chunk.min(start + readable - read_to);
        let mut b = AlignedBuf::zeroed(n as usize);
        dev.read_at(&mut b, read_to)?;
        buf.extend_from_slice(&b);
        read_to += n;
    }
}

/// What the bytes at a record boundary hold.
#[derive(Debug, PartialEq, Eq)]
enum Decoded {
    /// A whole record with a good checksum: its body length, key length,
    /// and whether its value is compressed.
    Record {
        body: usize,
        key_len: usize,
        compressed: bool,
    },
    /// A zero header: padding up to the next block, or the end of the log.
    Zero,
    /// Too few bytes to tell.
    Short,
    /// Not a record (torn, stale or foreign bytes).
    Bad,
}

fn decode(b: &[u8]) -> Decoded {
    let Some(hdr) = b.get(..RECORD_HEADER as usize) else {
        return Decoded::Short;
    };
    let body = u32::from_le_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]) as usize;
    let crc = u32::from_le_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]);
    if body == 0 && crc == 0 {
        return Decoded::Zero;
    }
    if !(KEY_LEN_BYTES + 1..=MAX_BODY).contains(&body) {
        return Decoded::Bad;
    }
    let Some(rec) = b.get(RECORD_HEADER as usize..RECORD_HEADER as usize + body) else {
        return Decoded::Short;
    };
    let field = u16::from_le_bytes([rec[0], rec[1]]);
    let key_len = (field & !COMPRESSED) as usize;
    if crc32c::crc32c(rec) != crc || key_len == 0 || KEY_LEN_BYTES + key_len > body {
        return Decoded::Bad;
    }
    Decoded::Record {
        body,
        key_len,
        compressed: field & COMPRESSED != 0,
    }
}

/// `value` as `length u32 | lz4 block`, if that is at least an eighth
/// shorter.
fn compress(value: &[u8]) -> Option<Vec<u8>> {
    let mut out = vec![0u8; 4 + lz4_flex::block::get_maximum_output_size(value.len())];
    out[..4].copy_from_slice(&(value.len() as u32).to_le_bytes());
    let n = lz4_flex::block::compress_into(value, &mut out[4..]).ok()?;
    out.truncate(4 + n);
    (out.len() <= value.len() - value.len() / 8).then_some(out)
}

/// The value a compressed one holds, never longer than a put stores.
fn decompress(stored: &[u8]) -> std::result::Result<Vec<u8>, String> {
    let (len, block) = stored
        .split_first_chunk::<4>()
        .ok_or("compressed value shorter than its length")?;
    let len = u32::from_le_bytes(*len) as usize;
    if len > ferrite_core::MAX_VALUE_LEN {
        return Err(format!("compressed value claims {len} bytes"));
    }
    let mut out = vec![0u8; len];
    match lz4_flex::block::decompress_into(block, &mut out) {
        Ok(n) if n == len => Ok(out),
        _ => Err("compressed value does not decompress to its length".into()),
    }
}

/// What [`scan`] found in a stretch of a zone.
#[derive(Debug, Default)]
pub struct Scan {
    /// Each whole record, in order.
    pub records: Vec<ZoneRecord>,
    /// Bytes of the input accounted for (records and padding).
    pub consumed: usize,
    /// The zone's log ends here: nothing after `consumed` is a record.
    pub end: bool,
}

/// Parses the records at the front of `bytes`, which start at device
/// address `at`, a record boundary, in a zone whose readable bytes end at
/// `limit`; `block` is the device block size. Stops before a record cut
/// off by the end of `bytes` (call again with more), and ends at a zero
/// header on a block boundary (padding runs only to the next boundary, so
/// the log stops there), at `limit`, or at bytes that are not a record:
/// what follows the last write of a zone reused after a reset may be
/// anything, and a stale record there is unreferenced. Never panics.
pub fn scan(bytes: &[u8], at: u64, block: u64, limit: u64) -> Scan {
    let mut s = Scan::default();
    let block = block.max(1);
    loop {
        let addr = at + s.consumed as u64;
        if addr >= limit {
            s.end = true;
            return s;
        }
        let rest = bytes.get(s.consumed..).unwrap_or_default();
        match decode(rest) {
            Decoded::Record {
                body,
                key_len,
                compressed,
            } => {
                let len = RECORD_HEADER as usize + body;
                if addr + len as u64 > limit {
                    s.end = true;
                    return s;
                }
                let from = RECORD_HEADER as usize + KEY_LEN_BYTES;
                let key = rest.get(from..from + key_len).unwrap_or_default();
                let stored = rest.get(from + key_len..len).unwrap_or_default();
                let value = if compressed {
                    match decompress(stored) {
                        Ok(v) => v,
                        // A checksummed record that does not decompress
                        // was not written by this log: the log ends.
                        Err(_) => {
                            s.end = true;
                            return s;
                        }
                    }
                } else {
                    stored.to_vec()
                };
                s.records.push(ZoneRecord {
                    loc: location(addr, body as u64),
                    key: key.to_vec(),
                    value,
                });
                s.consumed += len;
            }
            Decoded::Zero if addr.is_multiple_of(block) => {
                s.end = true;
                return s;
            }
            Decoded::Zero => {
                let pad = (block - addr % block) as usize;
                if rest.len() < pad {
                    return s;
                }
                s.consumed += pad;
            }
            Decoded::Short => {
                // A cut-off record at the zone's end is not a record.
                s.end = addr + rest.len() as u64 >= limit;
                return s;
            }
            Decoded::Bad => {
                s.end = true;
                return s;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(key: &[u8], value: &[u8]) -> Vec<u8> {
        let body = (KEY_LEN_BYTES + key.len() + value.len()) as u32;
        let mut rest = (key.len() as u16).to_le_bytes().to_vec();
        rest.extend_from_slice(key);
        rest.extend_from_slice(value);
        let mut r = body.to_le_bytes().to_vec();
        r.extend_from_slice(&crc32c::crc32c(&rest).to_le_bytes());
        r.extend_from_slice(&rest);
        r
    }

    #[test]
    fn scan_finds_records_across_padding_and_stops_at_the_log_end() {
        let a = record(b"alpha", &[1; 100]);
        let b = record(b"b", &[2; 300]);
        let mut log = a.clone();
        log.extend_from_slice(&b);
        log.resize(512, 0); // a checkpoint's padding
        let c = record(b"gamma", &[3; 40]);
        log.extend_from_slice(&c);
        log.resize(1536, 0); // the rest of the block, then a zero block
        log.extend_from_slice(&record(b"stale", &[4; 10])); // past the end
        let base = 7 << 20;
        let s = scan(&log, base, 512, base + 4096);
        assert!(s.end);
        let got: Vec<(u64, &[u8], &[u8])> = s
            .records
            .iter()
            .map(|r| (r.loc, &r.key[..], &r.value[..]))
            .collect();
        assert_eq!(
            got,
            [
                (
                    location(base, a.len() as u64 - 8),
                    &b"alpha"[..],
                    &[1; 100][..]
                ),
                (
                    location(base + a.len() as u64, b.len() as u64 - 8),
                    b"b",
                    &[2; 300]
                ),
                (location(base + 512, c.len() as u64 - 8), b"gamma", &[3; 40]),
            ]
        );
    }

    #[test]
    fn scan_resumes_after_a_record_cut_off_by_the_chunk() {
        let a = record(b"k1", &[1; 50]);
        let b = record(b"k2", &[2; 50]);
        let mut log = a.clone();
        log.extend_from_slice(&b);
        let first = scan(&log[..a.len() + 10], 0, 512, 4096);
        assert_eq!(
            (first.records.len(), first.consumed, first.end),
            (1, a.len(), false)
        );
        let rest = scan(&log[first.consumed..], first.consumed as u64, 512, 4096);
        assert_eq!(rest.records.len(), 1);
        assert_eq!(rest.records[0].key, b"k2");
        assert_eq!(rest.records[0].value, [2; 50]);
    }

    /// A record whose value is stored compressed (`stored`), as `append`
    /// writes it.
    fn compressed_record(key: &[u8], stored: &[u8]) -> Vec<u8> {
        let body = (KEY_LEN_BYTES + key.len() + stored.len()) as u32;
        let mut rest = (key.len() as u16 | COMPRESSED).to_le_bytes().to_vec();
        rest.extend_from_slice(key);
        rest.extend_from_slice(stored);
        let mut r = body.to_le_bytes().to_vec();
        r.extend_from_slice(&crc32c::crc32c(&rest).to_le_bytes());
        r.extend_from_slice(&rest);
        r
    }

    #[test]
    fn compressed_values_scan_as_the_values_and_damage_ends_the_log() {
        let value: Vec<u8> = b"Description: a library\n".repeat(40);
        let stored = compress(&value).unwrap();
        assert!(stored.len() * 4 < value.len());
        assert!(compress(&[7u8, 1, 200, 3, 9]).is_none(), "too short to pay");
        let mut log = compressed_record(b"k", &stored);
        log.extend_from_slice(&record(b"k2", &[5; 30]));
        let s = scan(&log, 0, 512, 4096);
        assert_eq!(s.records.len(), 2);
        assert_eq!(s.records[0].value, value);
        assert_eq!(
            loc_len(s.records[0].loc),
            (KEY_LEN_BYTES + 1 + stored.len()) as u64,
            "locations count stored bytes"
        );
        // A checksummed record whose payload does not decompress is not
        // one this log wrote.
        let mut bad = stored.clone();
        bad[..4].copy_from_slice(&(value.len() as u32 + 1).to_le_bytes());
        let mut log = compressed_record(b"k", &bad);
        log.extend_from_slice(&record(b"k2", &[5; 30]));
        let s = scan(&log, 0, 512, 4096);
        assert!(s.end && s.records.is_empty());
        assert!(decompress(&stored[..3]).is_err());
        let mut huge = stored;
        huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decompress(&huge).is_err());
    }

    #[test]
    fn scan_ends_at_bytes_that_are_not_a_record() {
        let mut log = record(b"k", &[9; 20]);
        let mut torn = record(b"k2", &[8; 20]);
        torn[12] ^= 1;
        log.extend_from_slice(&torn);
        log.extend_from_slice(&record(b"k3", &[7; 20]));
        let s = scan(&log, 0, 512, 4096);
        assert!(s.end);
        assert_eq!(s.records.len(), 1);
        // A length running past the zone ends it too.
        let s = scan(&log, 0, 512, 20);
        assert!(s.end && s.records.is_empty());
    }
}
