//! On-disk form of an emulated zoned device's metadata (spec:
//! `docs/format/emulated-zoned-device.md`).
//!
//! Block 0 holds the geometry; then copies of the zone table, each with a
//! rising sequence number. Format 2 keeps four copies in two pairs: a
//! persist writes both copies of one pair in one write, so a crash while
//! writing leaves the other pair intact, and once written the newest table
//! is in two places, so damage to one copy loses nothing. Format 1 (read
//! only) kept two copies written alternately. Every part carries a
//! CRC-32C. Decoding never panics: any inconsistency is a typed error.

use crate::zoned::geometry::ZoneGeometry;
use crate::zoned::zone_table::ZoneCondition;

pub const MAGIC: &[u8; 8] = b"FZONEMU1";
/// The format new devices get; format 1 is still read.
pub const VERSION: u32 = 2;
const HEADER_LEN: usize = 8 + 4 + 4 + 8 + 8 + 4 + 4 + 4 + 8 + 4;
const ENTRY_LEN: usize = 9;
/// Table copies' sequence numbers stay below this (one per persist: no
/// device gets near it), so the persist after a load never overflows.
const SEQ_LIMIT: u64 = 1 << 62;

/// Blocks taken by one copy of the zone table.
pub fn copy_blocks(geo: &ZoneGeometry) -> u64 {
    let bytes = 8 + 4 + ENTRY_LEN as u64 * u64::from(geo.zone_count) + 4;
    bytes.div_ceil(u64::from(geo.block_size))
}

/// Zone table copies a device of format `version` keeps.
pub fn copies(version: u32) -> u8 {
    if version == 1 {
        2
    } else {
        4
    }
}

/// Device offset of table copy `which` (below [`copies`]); copies are
/// back to back, so pair `p` (copies `2p` and `2p + 1`) is one range.
pub fn copy_offset(geo: &ZoneGeometry, which: u8) -> u64 {
    u64::from(geo.block_size) * (1 + u64::from(which) * copy_blocks(geo))
}

/// Offset of zone 0's first byte on the backing device.
pub fn data_base(geo: &ZoneGeometry, copies: u8) -> u64 {
    u64::from(geo.block_size) * (1 + u64::from(copies) * copy_blocks(geo))
}

/// Encodes the header into `out` (one block, zero padded).
pub fn encode_header(geo: &ZoneGeometry, out: &mut [u8]) {
    let mut v = Vec::with_capacity(HEADER_LEN);
    v.extend_from_slice(MAGIC);
    v.extend_from_slice(&VERSION.to_le_bytes());
    v.extend_from_slice(&geo.block_size.to_le_bytes());
    v.extend_from_slice(&geo.zone_size.to_le_bytes());
    v.extend_from_slice(&geo.zone_capacity.to_le_bytes());
    v.extend_from_slice(&geo.zone_count.to_le_bytes());
    v.extend_from_slice(&geo.max_open.to_le_bytes());
    v.extend_from_slice(&geo.max_active.to_le_bytes());
    v.extend_from_slice(&geo.max_append.to_le_bytes());
    let crc = crc32c::crc32c(&v);
    v.extend_from_slice(&crc.to_le_bytes());
    out.fill(0);
    if let Some(dst) = out.get_mut(..v.len()) {
        dst.copy_from_slice(&v);
    }
}

/// A little-endian cursor that reports running off the end as `None`.
struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let s = self.buf.get(self.at..self.at + N)?;
        self.at += N;
        s.try_into().ok()
    }
    fn u32(&mut self) -> Option<u32> {
        self.take::<4>().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take::<8>().map(u64::from_le_bytes)
    }
}

/// Decodes and checks a header block: the geometry and the format version.
pub fn decode_header(buf: &[u8]) -> Result<(ZoneGeometry, u32), String> {
    let body = buf.get(..HEADER_LEN - 4).ok_or("header block too short")?;
    let mut r = Reader { buf, at: 0 };
    let magic = r.take::<8>().ok_or("header truncated")?;
    if &magic != MAGIC {
        return Err("not an emulated zoned device (bad magic)".into());
    }
    let version = r.u32().ok_or("header truncated")?;
    if !(1..=VERSION).contains(&version) {
        return Err(format!("unsupported format version {version}"));
    }
    let geo = ZoneGeometry {
        block_size: r.u32().ok_or("header truncated")?,
        zone_size: r.u64().ok_or("header truncated")?,
        zone_capacity: r.u64().ok_or("header truncated")?,
        zone_count: r.u32().ok_or("header truncated")?,
        max_open: r.u32().ok_or("header truncated")?,
        max_active: r.u32().ok_or("header truncated")?,
        max_append: r.u64().ok_or("header truncated")?,
    };
    let crc = r.u32().ok_or("header truncated")?;
    if crc != crc32c::crc32c(body) {
        return Err("header checksum mismatch".into());
    }
    geo.validate()
        .map_err(|e| format!("header describes an impossible device: {e}"))?;
    Ok((geo, version))
}

/// Encodes one table copy into `out` (exactly `copy_blocks` blocks).
pub fn encode_table(
    seq: u64,
    entries: impl Iterator<Item = (ZoneCondition, u64)>,
    zone_count: u32,
    out: &mut [u8],
) {
    let mut v = Vec::with_capacity(12 + ENTRY_LEN * zone_count as usize + 4);
    v.extend_from_slice(&seq.to_le_bytes());
    v.extend_from_slice(&zone_count.to_le_bytes());
    for (cond, wp) in entries {
        v.push(cond.code());
        v.extend_from_slice(&wp.to_le_bytes());
    }
    let crc = crc32c::crc32c(&v);
    v.extend_from_slice(&crc.to_le_bytes());
    out.fill(0);
    if let Some(dst) = out.get_mut(..v.len()) {
        dst.copy_from_slice(&v);
    }
}

/// A decoded table copy.
#[derive(Debug, PartialEq, Eq)]
pub struct TableCopy {
    pub seq: u64,
    pub entries: Vec<(ZoneCondition, u64)>,
}

/// Decodes one table copy, checking it against the geometry.
pub fn decode_table(buf: &[u8], geo: &ZoneGeometry) -> Result<TableCopy, String> {
    let n = geo.zone_count as usize;
    let body_len = 12 + ENTRY_LEN * n;
    let body = buf.get(..body_len).ok_or("table copy truncated")?;
    let mut r = Reader { buf, at: 0 };
    let seq = r.u64().ok_or("table copy truncated")?;
    if seq >= SEQ_LIMIT {
        return Err(format!(
            "sequence number {seq} is past any a device reaches"
        ));
    }
    let count = r.u32().ok_or("table copy truncated")?;
    if count != geo.zone_count {
        return Err(format!(
            "table lists {count} zones, header says {}",
            geo.zone_count
        ));
    }
    let mut entries = Vec::with_capacity(n);
    for zone in 0..n {
        let [code] = r.take::<1>().ok_or("table copy truncated")?;
        let wp = r.u64().ok_or("table copy truncated")?;
        let cond = ZoneCondition::from_code(code)
            .ok_or_else(|| format!("zone {zone} has unknown condition code {code}"))?;
        if wp > geo.zone_capacity || wp % u64::from(geo.block_size) != 0 {
            return Err(format!("zone {zone} has impossible write pointer {wp}"));
        }
        entries.push((cond, wp));
    }
    let crc = r.u32().ok_or("table copy truncated")?;
    if crc != crc32c::crc32c(body) {
        return Err("table checksum mismatch".into());
    }
    Ok(TableCopy { seq, entries })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn header_round_trips() {
        let g = ZoneGeometry::default();
        let mut b = vec![0u8; 4096];
        encode_header(&g, &mut b);
        assert_eq!(decode_header(&b), Ok((g, VERSION)));
        // A format-1 header still decodes.
        let mut old = b.clone();
        old[8..12].copy_from_slice(&1u32.to_le_bytes());
        let crc = crc32c::crc32c(&old[..HEADER_LEN - 4]);
        old[HEADER_LEN - 4..HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(decode_header(&old), Ok((g, 1)));
        assert_eq!((copies(1), copies(VERSION)), (2, 4));
        b[20] ^= 1;
        assert!(decode_header(&b).is_err());
    }

    #[test]
    fn table_round_trips_and_detects_damage() {
        let g = ZoneGeometry::small(5, 2, 3);
        let entries = vec![
            (ZoneCondition::Empty, 0),
            (ZoneCondition::Closed, 8192),
            (ZoneCondition::Full, g.zone_capacity),
            (ZoneCondition::ImplicitOpen, 4096),
            (ZoneCondition::Offline, 0),
        ];
        let mut b = vec![0u8; (copy_blocks(&g) * 4096) as usize];
        encode_table(7, entries.clone().into_iter(), 5, &mut b);
        assert_eq!(decode_table(&b, &g), Ok(TableCopy { seq: 7, entries }));
        b[14] ^= 0x10;
        assert!(decode_table(&b, &g).is_err());
    }

    #[test]
    fn a_sequence_number_no_device_reaches_is_refused() {
        let g = ZoneGeometry::small(2, 1, 2);
        let entries = || [(ZoneCondition::Empty, 0), (ZoneCondition::Empty, 0)].into_iter();
        let mut b = vec![0u8; (copy_blocks(&g) * 4096) as usize];
        encode_table(SEQ_LIMIT - 1, entries(), 2, &mut b);
        assert!(decode_table(&b, &g).is_ok());
        // Checksummed, yet the next persist's sequence number would overflow.
        encode_table(u64::MAX, entries(), 2, &mut b);
        assert!(decode_table(&b, &g).is_err());
    }

    proptest! {
        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..8192)) {
            let _ = decode_header(&bytes);
            let _ = decode_table(&bytes, &ZoneGeometry::small(16, 4, 8));
        }
    }
}
