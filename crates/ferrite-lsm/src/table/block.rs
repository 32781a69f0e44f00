//! Data blocks: one 4 KiB page of entries with an offset array, or an
//! oversize block of several pages holding a single entry.
//!
//! Layout (spec: `docs/format/sstable.md`), all little-endian:
//! `entries… | zero padding | offsets: u16 × n | n: u16 | crc32c: u32`,
//! the trailer at the very end of the block's pages and the checksum over
//! every byte before it. An entry is `key_len: u16 | value_len: u32 | key |
//! value`, with `value_len = u32::MAX` and no value bytes for a delete.
//!
//! The offset array makes every entry addressable by its slot, which is
//! what lets a learned index jump to a predicted position. [`Block::parse`]
//! checks the checksum and every offset, so a parsed block answers any
//! slot without panicking.

use ferrite_core::{Error, Result};

pub const PAGE: usize = 4096;
const TRAILER: usize = 2 + 4;
const ENTRY_HEADER: usize = 2 + 4;
const TOMBSTONE: u32 = u32::MAX;

/// Encoded size of an entry.
pub fn entry_len(key: &[u8], value: Option<&[u8]>) -> usize {
    ENTRY_HEADER + key.len() + value.map_or(0, <[u8]>::len)
}

/// Entries a one-page block holds when every entry is `len` bytes.
pub fn entries_per_page(len: usize) -> usize {
    (PAGE - TRAILER) / (len + 2)
}

/// Accumulates one block.
#[derive(Default)]
pub struct BlockBuilder {
    buf: Vec<u8>,
    offsets: Vec<u16>,
}

impl BlockBuilder {
    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// Bytes the block would take finished (nothing when empty).
    pub fn bytes(&self) -> usize {
        if self.is_empty() {
            0
        } else {
            self.buf.len() + 2 * self.offsets.len() + TRAILER
        }
    }

    /// Whether an entry of `len` bytes still fits in this one-page block.
    pub fn fits(&self, len: usize) -> bool {
        self.buf.len() + len + 2 * (self.offsets.len() + 1) + TRAILER <= PAGE
    }

    /// Adds an entry; the caller checked [`BlockBuilder::fits`] or the
    /// block is empty (an entry that fits no page makes an oversize block).
    pub fn add(&mut self, key: &[u8], value: Option<&[u8]>) {
        self.offsets
            .push(self.buf.len().min(u16::MAX as usize) as u16);
        self.buf
            .extend_from_slice(&(key.len() as u16).to_le_bytes());
        let vlen = value.map_or(TOMBSTONE, |v| v.len() as u32);
        self.buf.extend_from_slice(&vlen.to_le_bytes());
        self.buf.extend_from_slice(key);
        if let Some(v) = value {
            self.buf.extend_from_slice(v);
        }
    }

    /// Appends the finished block (whole pages) to `out` and resets.
    /// Returns the number of pages.
    pub fn finish_into(&mut self, out: &mut Vec<u8>) -> usize {
        let body = self.buf.len() + 2 * self.offsets.len() + TRAILER;
        let pages = body.div_ceil(PAGE).max(1);
        let start = out.len();
        out.extend_from_slice(&self.buf);
        out.resize(start + pages * PAGE - 2 * self.offsets.len() - TRAILER, 0);
        for o in &self.offsets {
            out.extend_from_slice(&o.to_le_bytes());
        }
        out.extend_from_slice(&(self.offsets.len() as u16).to_le_bytes());
        let crc = crc32c::crc32c(&out[start..]);
        out.extend_from_slice(&crc.to_le_bytes());
        self.buf.clear();
        self.offsets.clear();
        pages
    }
}

/// A parsed, checked block.
pub struct Block {
    data: ferrite_io::AlignedBuf,
    offsets_at: usize,
    n: usize,
}

impl Block {
    /// Checks and wraps a block read from the device; `location` names it
    /// in errors.
    pub fn parse(data: ferrite_io::AlignedBuf, location: &dyn Fn() -> String) -> Result<Self> {
        let bad = |why: &str| Error::corruption(location(), why.to_string());
        let len = data.len();
        if len < PAGE || !len.is_multiple_of(PAGE) {
            return Err(bad("block is not a whole number of pages"));
        }
        let crc_at = len - 4;
        let stored = u32::from_le_bytes(read4(&data, crc_at).ok_or_else(|| bad("short"))?);
        if crc32c::crc32c(&data[..crc_at]) != stored {
            return Err(bad("data block checksum mismatch"));
        }
        let n = u16::from_le_bytes(read2(&data, crc_at - 2).ok_or_else(|| bad("short"))?) as usize;
        let offsets_at = (crc_at - 2)
            .checked_sub(2 * n)
            .ok_or_else(|| bad("offset array larger than the block"))?;
        if n == 0 {
            return Err(bad("empty data block"));
        }
        let block = Self {
            data,
            offsets_at,
            n,
        };
        // Every entry must lie before the offset array.
        let mut prev = None;
        for i in 0..n {
            let off = block.offset(i).ok_or_else(|| bad("offset"))?;
            if prev.is_some_and(|p| p >= off) {
                return Err(bad("offsets not increasing"));
            }
            prev = Some(off);
            block
                .decode_at(off)
                .ok_or_else(|| bad("entry overruns its block"))?;
        }
        Ok(block)
    }

    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Bytes held (for the cache's budget).
    pub fn charge(&self) -> usize {
        self.data.len() + std::mem::size_of::<Self>()
    }

    fn offset(&self, i: usize) -> Option<usize> {
        let at = self.offsets_at + 2 * i;
        Some(u16::from_le_bytes(read2(&self.data, at)?) as usize)
    }

    /// The key of the entry at `off`.
    fn key_at(&self, off: usize) -> Option<&[u8]> {
        let klen = u16::from_le_bytes(read2(&self.data, off)?) as usize;
        let kstart = off + ENTRY_HEADER;
        self.data.get(kstart..kstart + klen)
    }

    fn decode_at(&self, off: usize) -> Option<(&[u8], Option<&[u8]>)> {
        let key = self.key_at(off)?;
        let klen = key.len();
        let vlen = u32::from_le_bytes(read4(&self.data, off + 2)?);
        let kstart = off + ENTRY_HEADER;
        let (value, end) = if vlen == TOMBSTONE {
            (None, kstart + klen)
        } else {
            let vs = kstart + klen;
            let ve = vs.checked_add(vlen as usize)?;
            (Some(self.data.get(vs..ve)?), ve)
        };
        (end <= self.offsets_at).then_some((key, value))
    }

    /// The entry in `slot`: its key and value (`None` for a delete).
    pub fn entry(&self, slot: usize) -> Option<(&[u8], Option<&[u8]>)> {
        if slot >= self.n {
            return None;
        }
        self.decode_at(self.offset(slot)?)
    }

    /// The key in `slot` (empty past the end). Reads the key alone: a
    /// search probes keys only, and [`Block::parse`] checked every entry.
    pub fn key(&self, slot: usize) -> &[u8] {
        if slot >= self.n {
            return &[];
        }
        self.offset(slot)
            .and_then(|off| self.key_at(off))
            .unwrap_or(&[])
    }

    /// The first slot whose key is `>= key` (`len()` if none) within
    /// `lo..hi`.
    pub fn lower_bound_in(&self, key: &[u8], mut lo: usize, mut hi: usize) -> usize {
        hi = hi.min(self.n);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.key(mid) < key {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }
}

fn read2(b: &[u8], at: usize) -> Option<[u8; 2]> {
    b.get(at..at.checked_add(2)?)?.try_into().ok()
}

fn read4(b: &[u8], at: usize) -> Option<[u8; 4]> {
    b.get(at..at.checked_add(4)?)?.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_io::AlignedBuf;

    fn build(entries: &[(&[u8], Option<&[u8]>)]) -> Block {
        let mut b = BlockBuilder::default();
        for (k, v) in entries {
            b.add(k, *v);
        }
        let mut out = Vec::new();
        b.finish_into(&mut out);
        Block::parse(AlignedBuf::from_slice(&out), &|| "test".into()).unwrap()
    }

    #[test]
    fn a_key_alone_is_the_key_of_its_entry() {
        let b = build(&[
            (b"a", Some(b"1")),
            (b"bb", None),
            (b"ccc", Some(b"")),
            (b"", Some(b"x")),
        ]);
        for slot in 0..b.len() {
            assert_eq!(Some(b.key(slot)), b.entry(slot).map(|(k, _)| k));
        }
        assert_eq!(b.key(b.len()), b"");
    }

    #[test]
    fn entries_round_trip_and_search() {
        let b = build(&[(b"a", Some(b"1")), (b"c", None), (b"e", Some(b""))]);
        assert_eq!(b.len(), 3);
        assert_eq!(b.entry(0), Some((&b"a"[..], Some(&b"1"[..]))));
        assert_eq!(b.entry(1), Some((&b"c"[..], None)));
        assert_eq!(b.entry(2), Some((&b"e"[..], Some(&b""[..]))));
        assert_eq!(b.entry(3), None);
        assert_eq!(b.lower_bound_in(b"b", 0, 3), 1);
        assert_eq!(b.lower_bound_in(b"c", 0, 3), 1);
        assert_eq!(b.lower_bound_in(b"f", 0, 3), 3);
    }

    #[test]
    fn oversize_entry_spans_pages() {
        let big = vec![7u8; 10_000];
        let b = build(&[(b"k", Some(&big))]);
        assert_eq!(b.entry(0).unwrap().1.unwrap().len(), 10_000);
    }

    #[test]
    fn fixed_entries_fill_a_page_exactly() {
        let len = entry_len(&[0; 16], Some(&[0; 100]));
        let mut b = BlockBuilder::default();
        let mut n = 0;
        while b.fits(len) {
            b.add(&[0; 16], Some(&[0; 100]));
            n += 1;
        }
        assert_eq!(n, entries_per_page(len));
    }

    #[test]
    fn damage_is_detected() {
        let mut b = BlockBuilder::default();
        b.add(b"key", Some(b"value"));
        let mut out = Vec::new();
        b.finish_into(&mut out);
        for i in [0, 5, 100, PAGE - 7, PAGE - 1] {
            let mut bad = out.clone();
            bad[i] ^= 1;
            assert!(Block::parse(AlignedBuf::from_slice(&bad), &|| "t".into()).is_err());
        }
    }
}
