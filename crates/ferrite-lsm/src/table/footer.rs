//! A table's meta region: `filter | index | properties | zero padding |
//! footer`, whole pages at the end of the table's extent, one checksum
//! over all of it (spec: `docs/format/sstable.md`).
//!
//! The footer is the region's last [`FOOTER_LEN`] bytes, so a reader finds
//! it by reading the table's last page; it says how many pages the region
//! spans and where its parts are. [`Footer::decode`] and
//! [`Properties::decode`] never panic.

use super::packing::Packing;

pub const FOOTER_LEN: usize = 48;
pub const MAGIC: u64 = 0x4652_5254_4c53_4d31; // "FRRTLSM1"
/// Version 2 tables may end a learned index with block-boundary
/// thresholds, which version 1 readers would take for damage; version 3
/// properties end with the table's largest sequence number, which range
/// deletes are judged against; version 4 properties of a compressed table
/// end with its packing (`packing`). Older tables are read as they are
/// (their sequence numbers count as 0: older than any range delete).
pub const VERSION: u8 = 4;
/// The oldest table version this build reads.
pub const OLDEST_VERSION: u8 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footer {
    pub data_pages: u32,
    pub meta_pages: u32,
    pub entries: u64,
    pub filter_len: u32,
    pub index_len: u32,
    pub props_len: u32,
    pub index_kind: u8,
    pub deletes: u32,
}

impl Footer {
    /// Appends the footer; the checksum (last 4 bytes) covers `region`
    /// (everything before the footer) and the footer's first 44 bytes.
    pub fn encode_into(&self, region: &mut Vec<u8>) {
        region.extend_from_slice(&self.data_pages.to_le_bytes());
        region.extend_from_slice(&self.meta_pages.to_le_bytes());
        region.extend_from_slice(&self.entries.to_le_bytes());
        region.extend_from_slice(&self.filter_len.to_le_bytes());
        region.extend_from_slice(&self.index_len.to_le_bytes());
        region.extend_from_slice(&self.props_len.to_le_bytes());
        region.push(self.index_kind);
        region.push(VERSION);
        region.extend_from_slice(&[0, 0]);
        region.extend_from_slice(&MAGIC.to_le_bytes());
        region.extend_from_slice(&self.deletes.to_le_bytes());
        let crc = crc32c::crc32c(region);
        region.extend_from_slice(&crc.to_le_bytes());
    }

    /// The footer at the end of `page` (the table's last page), without
    /// the checksum, which needs the whole region.
    pub fn decode(page: &[u8]) -> Result<Self, &'static str> {
        let f = page
            .get(page.len().saturating_sub(FOOTER_LEN)..)
            .filter(|f| f.len() == FOOTER_LEN)
            .ok_or("table shorter than a footer")?;
        let u32_at = |i: usize| u32::from_le_bytes([f[i], f[i + 1], f[i + 2], f[i + 3]]);
        let u64_at = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&f[i..i + 8]);
            u64::from_le_bytes(b)
        };
        if u64_at(32) != MAGIC {
            return Err("no table footer (bad magic)");
        }
        if !(OLDEST_VERSION..=VERSION).contains(&f[29]) {
            return Err("unknown table format version");
        }
        Ok(Self {
            data_pages: u32_at(0),
            meta_pages: u32_at(4),
            entries: u64_at(8),
            filter_len: u32_at(16),
            index_len: u32_at(20),
            props_len: u32_at(24),
            index_kind: f[28],
            deletes: u32_at(40),
        })
    }
}

/// Checks the region's checksum (the region ends with the footer).
pub fn region_intact(region: &[u8]) -> bool {
    let Some(split) = region.len().checked_sub(4) else {
        return false;
    };
    let (body, crc) = region.split_at(split);
    crc.try_into()
        .is_ok_and(|c: [u8; 4]| crc32c::crc32c(body) == u32::from_le_bytes(c))
}

/// What a table knows about itself beyond its index and filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Properties {
    pub smallest: Vec<u8>,
    pub largest: Vec<u8>,
    /// Microseconds spent fitting the learned index (0 for sparse).
    pub training_micros: u64,
    /// The largest sequence number among the entries (0 in tables older
    /// than version 3).
    pub max_seq: u64,
    /// Where the compressed blocks are (version 4); `None`: whole pages.
    pub packing: Option<Packing>,
}

impl Properties {
    pub fn encode(&self, out: &mut Vec<u8>) {
        for k in [&self.smallest, &self.largest] {
            out.extend_from_slice(&(k.len() as u16).to_le_bytes());
            out.extend_from_slice(k);
        }
        out.extend_from_slice(&self.training_micros.to_le_bytes());
        out.extend_from_slice(&self.max_seq.to_le_bytes());
        if let Some(p) = &self.packing {
            p.encode(out);
        }
    }

    /// The properties of a table with `data_pages` stored data pages.
    pub fn decode(b: &[u8], data_pages: u32) -> Option<Self> {
        let mut at = 0usize;
        let mut key = || -> Option<Vec<u8>> {
            let len = u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?) as usize;
            let k = b.get(at + 2..at + 2 + len)?.to_vec();
            at += 2 + len;
            Some(k)
        };
        let smallest = key()?;
        let largest = key()?;
        let training_micros = u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?);
        let at = at + 8;
        // Version 3 adds the largest sequence number; older tables end
        // before it.
        let max_seq = match b.len().checked_sub(at)? {
            0 => 0,
            _ => ferrite_core::engine::check_counter(u64::from_le_bytes(
                b.get(at..at + 8)?.try_into().ok()?,
            ))?,
        };
        // Version 4: a compressed table's packing follows.
        let packing = match b.get(at + 8..) {
            None | Some([]) => None,
            Some(rest) => Some(Packing::decode(rest, data_pages)?),
        };
        (smallest <= largest && !smallest.is_empty()).then_some(Self {
            smallest,
            largest,
            training_micros,
            max_seq,
            packing,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FOOTER: Footer = Footer {
        data_pages: 9,
        meta_pages: 1,
        entries: 1234,
        filter_len: 100,
        index_len: 50,
        props_len: 12,
        index_kind: 1,
        deletes: 3,
    };

    #[test]
    fn footer_and_properties_round_trip() {
        let f = FOOTER;
        let mut region = vec![5u8; 4096 - FOOTER_LEN];
        f.encode_into(&mut region);
        assert_eq!(region.len(), 4096);
        assert!(region_intact(&region));
        assert_eq!(Footer::decode(&region), Ok(f));
        region[10] ^= 1;
        assert!(!region_intact(&region));
        let p = Properties {
            smallest: b"a".to_vec(),
            largest: b"zz".to_vec(),
            training_micros: 7,
            max_seq: 41,
            packing: None,
        };
        let mut b = Vec::new();
        p.encode(&mut b);
        assert_eq!(Properties::decode(&b, 1), Some(p.clone()));
        assert_eq!(Properties::decode(&b[..b.len() - 1], 1), None);
        // A version-2 table's properties have no sequence number.
        assert_eq!(
            Properties::decode(&b[..b.len() - 8], 1),
            Some(Properties {
                max_seq: 0,
                ..p.clone()
            })
        );
        // A compressed table's end with its packing, which must fit the
        // table's data pages.
        let packed = Properties {
            packing: Some(Packing {
                codec: super::super::packing::CODEC_LZ4,
                logical_pages: 3,
                ends: vec![900, 5000],
            }),
            ..p
        };
        let mut b = Vec::new();
        packed.encode(&mut b);
        assert_eq!(Properties::decode(&b, 2), Some(packed));
        assert_eq!(Properties::decode(&b, 1), None);
        assert_eq!(Properties::decode(&b[..b.len() - 1], 2), None);
    }

    #[test]
    fn older_table_versions_are_read_and_newer_ones_refused() {
        let f = Footer {
            data_pages: 1,
            entries: 1,
            ..FOOTER
        };
        let mut region = vec![0u8; 4096 - FOOTER_LEN];
        f.encode_into(&mut region);
        let at = region.len() - FOOTER_LEN + 29;
        assert_eq!(region[at], VERSION);
        for v in OLDEST_VERSION..=VERSION {
            region[at] = v;
            assert_eq!(Footer::decode(&region), Ok(f), "version {v}");
        }
        for v in [0, VERSION + 1] {
            region[at] = v;
            assert!(Footer::decode(&region).is_err(), "version {v}");
        }
    }
}
