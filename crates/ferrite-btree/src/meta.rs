//! The meta page: which checkpoint the page file holds and where its tree
//! starts. Pages 0 and 1 hold two copies; checkpoint `e` writes copy
//! `e mod 2`, so a torn meta write leaves the previous one intact.

use ferrite_core::ByteReader;

use crate::page::PageId;

const MAGIC: &[u8; 8] = b"FBTMETA1";
const VERSION: u32 = 1;
const LEN: usize = 8 + 4 + 4 + 8 + 8 + 4 + 4 + 8;

/// The durable root of the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    pub page_size: u32,
    /// Checkpoint number; the WAL's epoch is the same number.
    pub epoch: u64,
    pub root: PageId,
    pub height: u32,
    /// Pages in the file (ids `0..page_count` exist).
    pub page_count: u64,
}

impl Meta {
    pub fn encode(&self, out: &mut [u8]) {
        let mut v = Vec::with_capacity(LEN + 4);
        v.extend_from_slice(MAGIC);
        v.extend_from_slice(&VERSION.to_le_bytes());
        v.extend_from_slice(&self.page_size.to_le_bytes());
        v.extend_from_slice(&self.epoch.to_le_bytes());
        v.extend_from_slice(&self.root.to_le_bytes());
        v.extend_from_slice(&self.height.to_le_bytes());
        v.extend_from_slice(&0u32.to_le_bytes());
        v.extend_from_slice(&self.page_count.to_le_bytes());
        let crc = crc32c::crc32c(&v);
        v.extend_from_slice(&crc.to_le_bytes());
        out.fill(0);
        if let Some(d) = out.get_mut(..v.len()) {
            d.copy_from_slice(&v);
        }
    }

    /// Decodes a meta page; `None` if it is not a valid one.
    pub fn decode(b: &[u8]) -> Option<Self> {
        let body = b.get(..LEN)?;
        let crc = u32::from_le_bytes(b.get(LEN..LEN + 4)?.try_into().ok()?);
        if crc != crc32c::crc32c(body) {
            return None;
        }
        let mut r = ByteReader::new(body);
        if r.bytes(8)? != MAGIC || r.u32()? != VERSION {
            return None;
        }
        let page_size = r.u32()?;
        let epoch = r.u64()?;
        let root = r.u64()?;
        let height = r.u32()?;
        let _pad = r.u32()?;
        let page_count = r.u64()?;
        Some(Self {
            page_size,
            epoch,
            root,
            height,
            page_count,
        })
    }

    /// The meta page slot this checkpoint is written to.
    pub fn slot(&self) -> PageId {
        self.epoch % 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let m = Meta {
            page_size: 4096,
            epoch: 9,
            root: 5,
            height: 3,
            page_count: 77,
        };
        let mut b = vec![0u8; 4096];
        m.encode(&mut b);
        assert_eq!(Meta::decode(&b), Some(m));
        b[20] ^= 4;
        assert_eq!(Meta::decode(&b), None);
        assert_eq!(Meta::decode(&[0u8; 10]), None);
    }
}
