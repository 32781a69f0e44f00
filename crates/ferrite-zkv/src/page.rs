//! The Z+-tree leaf page: the only tree node that lives on the device.
//!
//! Layout (little-endian; spec in `docs/format/zkv.md`):
//!
//! ```text
//! 0   magic   u32  "ZKVL"
//! 4   crc32c  u32  over bytes 8..page_size
//! 8   count   u16
//! 10  end     u16  first byte past the last cell
//! 12  reserved u32
//! 16  offsets [u16; count]  cell offsets, in key order
//!     cells:  klen u16 | kind u8 | vlen u16 | key | value
//!             kind 0: value inline (vlen bytes); kind 1: value-log address (vlen = 8)
//! ```
//!
//! Pages are immutable once written (leaves are copy-on-write appends), so
//! a page is built whole from sorted entries by [`encode`] and read in place
//! by [`LeafPage`], which checks the checksum and every offset before use:
//! no byte read from the device can make it panic or read out of bounds.

use ferrite_core::{Error, Result};

use crate::pair::{Bytes, Val};

pub const MAGIC: u32 = u32::from_le_bytes(*b"ZKVL");
pub const HEADER: usize = 16;
const CELL_HEADER: usize = 5;

/// A value as stored in a leaf.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stored {
    Inline(Vec<u8>),
    Vlog(u64),
}

impl Stored {
    #[cfg(test)]
    pub fn from_val(v: &Val) -> Option<Stored> {
        match v {
            Val::Put(b) => Some(Stored::Inline(b.as_slice().to_vec())),
            Val::Vlog(a) => Some(Stored::Vlog(*a)),
            Val::Del => None,
        }
    }

    pub fn to_val(&self) -> Val {
        match self {
            Stored::Inline(v) => Val::Put(Bytes::new(v)),
            Stored::Vlog(a) => Val::Vlog(*a),
        }
    }
}

/// Bytes a cell for this entry takes in a page, including its offset slot.
pub fn cell_bytes(key_len: usize, val: &Val) -> usize {
    let v = match val {
        Val::Put(b) => b.as_slice().len(),
        Val::Vlog(_) => 8,
        Val::Del => 0,
    };
    2 + CELL_HEADER + key_len + v
}

/// Writes sorted, unique, live entries into `page` (whose length is the page
/// size). The caller has checked they fit (see [`cell_bytes`]).
pub fn encode(entries: &[(&[u8], &Val)], page: &mut [u8]) -> Result<()> {
    let size = page.len();
    page.fill(0);
    let count = entries.len();
    let mut at = HEADER + 2 * count;
    for (i, (k, v)) in entries.iter().enumerate() {
        let (kind, val): (u8, std::borrow::Cow<'_, [u8]>) = match v {
            Val::Put(b) => (0, b.as_slice().into()),
            Val::Vlog(a) => (1, a.to_le_bytes().to_vec().into()),
            Val::Del => {
                return Err(Error::corruption(
                    "zkv leaf encode",
                    "a tombstone reached a leaf page",
                ))
            }
        };
        let need = CELL_HEADER + k.len() + val.len();
        if at + need > size || at > u16::MAX as usize {
            return Err(Error::corruption(
                "zkv leaf encode",
                format!("{count} entries do not fit a {size}-byte page"),
            ));
        }
        page[HEADER + 2 * i..HEADER + 2 * i + 2].copy_from_slice(&(at as u16).to_le_bytes());
        page[at..at + 2].copy_from_slice(&(k.len() as u16).to_le_bytes());
        page[at + 2] = kind;
        page[at + 3..at + 5].copy_from_slice(&(val.len() as u16).to_le_bytes());
        page[at + 5..at + 5 + k.len()].copy_from_slice(k);
        page[at + 5 + k.len()..at + need].copy_from_slice(&val);
        at += need;
    }
    page[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    page[8..10].copy_from_slice(&(count as u16).to_le_bytes());
    page[10..12].copy_from_slice(&(at as u16).to_le_bytes());
    let crc = crc32c::crc32c(&page[8..]);
    page[4..8].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// A checked, read-only view of a leaf page.
pub struct LeafPage<'a> {
    buf: &'a [u8],
    count: usize,
}

impl<'a> LeafPage<'a> {
    /// Checks magic, checksum and every cell's bounds.
    pub fn parse(buf: &'a [u8], where_: impl Fn() -> String) -> Result<Self> {
        let bad = |r: String| Error::corruption(where_(), r);
        if buf.len() < HEADER || buf.len() > 65536 {
            return Err(bad(format!("page of {} bytes", buf.len())));
        }
        let rd16 = |o: usize| u16::from_le_bytes([buf[o], buf[o + 1]]) as usize;
        let magic = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
        if magic != MAGIC {
            return Err(bad(format!("bad magic {magic:#x}")));
        }
        let crc = u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]);
        if crc32c::crc32c(&buf[8..]) != crc {
            return Err(bad("checksum mismatch".into()));
        }
        let count = rd16(8);
        let end = rd16(10);
        if HEADER + 2 * count > buf.len() || end > buf.len() {
            return Err(bad(format!("count {count} / end {end} overflow the page")));
        }
        let page = Self { buf, count };
        let mut prev: Option<&[u8]> = None;
        for i in 0..count {
            let off = rd16(HEADER + 2 * i);
            if off < HEADER + 2 * count || off + CELL_HEADER > end {
                return Err(bad(format!("cell {i} at {off} outside the cell area")));
            }
            let klen = rd16(off);
            let kind = buf[off + 2];
            let vlen = rd16(off + 3);
            if off + CELL_HEADER + klen + vlen > end || kind > 1 || (kind == 1 && vlen != 8) {
                return Err(bad(format!("cell {i} is malformed")));
            }
            let k = &buf[off + CELL_HEADER..off + CELL_HEADER + klen];
            if prev.is_some_and(|p| p >= k) {
                return Err(bad(format!("cell {i} is out of key order")));
            }
            prev = Some(k);
        }
        Ok(page)
    }

    pub fn len(&self) -> usize {
        self.count
    }

    #[cfg(any(test, feature = "bench-internals"))]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn off(&self, i: usize) -> usize {
        u16::from_le_bytes([self.buf[HEADER + 2 * i], self.buf[HEADER + 2 * i + 1]]) as usize
    }

    /// The key of entry `i` (`i < len`, bounds checked at parse).
    pub fn key(&self, i: usize) -> &'a [u8] {
        let o = self.off(i);
        let klen = u16::from_le_bytes([self.buf[o], self.buf[o + 1]]) as usize;
        &self.buf[o + CELL_HEADER..o + CELL_HEADER + klen]
    }

    pub fn value(&self, i: usize) -> Stored {
        let o = self.off(i);
        let klen = u16::from_le_bytes([self.buf[o], self.buf[o + 1]]) as usize;
        let kind = self.buf[o + 2];
        let vlen = u16::from_le_bytes([self.buf[o + 3], self.buf[o + 4]]) as usize;
        let v = &self.buf[o + CELL_HEADER + klen..o + CELL_HEADER + klen + vlen];
        if kind == 1 {
            let mut a = [0u8; 8];
            a.copy_from_slice(v);
            Stored::Vlog(u64::from_le_bytes(a))
        } else {
            Stored::Inline(v.to_vec())
        }
    }

    /// Index of `key`, or where it would go.
    pub fn search(&self, key: &[u8]) -> std::result::Result<usize, usize> {
        let (mut lo, mut hi) = (0usize, self.count);
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.key(mid).cmp(key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }

    pub fn get(&self, key: &[u8]) -> Option<Stored> {
        self.search(key).ok().map(|i| self.value(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn put(v: &[u8]) -> Val {
        Val::Put(Bytes::new(v))
    }

    #[test]
    fn round_trip_and_damage() {
        let vals = [put(b"one"), Val::Vlog(123456), put(b"")];
        let entries: Vec<(&[u8], &Val)> =
            vec![(b"a", &vals[0]), (b"b", &vals[1]), (b"c", &vals[2])];
        let mut page = vec![0u8; 4096];
        encode(&entries, &mut page).unwrap();
        let p = LeafPage::parse(&page, || "t".into()).unwrap();
        assert_eq!(p.len(), 3);
        assert_eq!(p.get(b"a"), Some(Stored::Inline(b"one".to_vec())));
        assert_eq!(p.get(b"b"), Some(Stored::Vlog(123456)));
        assert_eq!(p.get(b"c"), Some(Stored::Inline(Vec::new())));
        assert_eq!(p.get(b"bb"), None);
        for i in [0usize, 5, 9, 17, 30, 4000] {
            let mut bad = page.clone();
            bad[i] ^= 1;
            assert!(LeafPage::parse(&bad, || "t".into()).is_err(), "flip at {i}");
        }
    }

    #[test]
    fn overfull_is_an_error() {
        let v = put(&[1u8; 15]);
        let keys: Vec<Vec<u8>> = (0..400u32).map(|i| i.to_be_bytes().to_vec()).collect();
        let entries: Vec<(&[u8], &Val)> = keys.iter().map(|k| (k.as_slice(), &v)).collect();
        assert!(encode(&entries, &mut [0u8; 4096]).is_err());
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let mut page = vec![0u8; 512];
            let n = bytes.len().min(512);
            page[..n].copy_from_slice(&bytes[..n]);
            let _ = LeafPage::parse(&page, || "fuzz".into());
            // With a valid checksum the structure checks still hold.
            page[0..4].copy_from_slice(&MAGIC.to_le_bytes());
            let crc = crc32c::crc32c(&page[8..]);
            page[4..8].copy_from_slice(&crc.to_le_bytes());
            if let Ok(p) = LeafPage::parse(&page, || "fuzz".into()) {
                for i in 0..p.len() {
                    let _ = (p.key(i), p.value(i));
                }
            }
        }
    }
}
