//! The buffered records of one page: a compact record cache.
//!
//! Owns the newest buffered version of each key of one leaf: a value or a
//! tombstone. Records live back to back in one byte arena
//! (`[key len u16][value len u16][key][value]`, value length `u16::MAX` for
//! a tombstone); a slot per live record holds its offset (low 24 bits) and
//! a one-byte key fingerprint (high 8), so a probe compares keys only on a
//! fingerprint match. A set is applied to its page (and dropped) long
//! before it holds a page's worth of records, so a probe scans a short,
//! bounded array: constant time per page, without a per-key hash table
//! costing more than the 16-byte records it indexes.
//!
//! Invariants: at most one live record per key; `garbage` counts arena
//! bytes of replaced records, and the arena is compacted when they
//! outweigh the live ones.

const TOMBSTONE: u16 = u16::MAX;
const HEAD: usize = 4;

/// A buffered record: key and value, `None` for a buffered delete.
pub type Record<'a> = (&'a [u8], Option<&'a [u8]>);

/// The largest key or value a record can hold.
pub const MAX_PART: usize = TOMBSTONE as usize - 1;

#[derive(Debug, Default, Clone)]
pub struct RecordSet {
    arena: Vec<u8>,
    slots: Vec<u32>,
    garbage: u32,
}

const OFFSET_MASK: u32 = (1 << 24) - 1;

fn slot(off: u32, tag: u8) -> u32 {
    off | (u32::from(tag) << 24)
}

fn tag(key: &[u8]) -> u8 {
    let mut h: u32 = 0x811c_9dc5;
    for &b in key {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    (h ^ (h >> 16) ^ (h >> 8)) as u8
}

impl RecordSet {
    /// Number of live records.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Bytes this set has allocated on the heap (by capacity).
    pub fn heap_bytes(&self) -> usize {
        self.arena.capacity() + self.slots.capacity() * 4
    }

    fn record_at(&self, slot: u32) -> (&[u8], Option<&[u8]>) {
        let at = (slot & OFFSET_MASK) as usize;
        let head = self.arena.get(at..at + HEAD).unwrap_or(&[0; HEAD]);
        let klen = usize::from(u16::from_le_bytes([head[0], head[1]]));
        let vlen = u16::from_le_bytes([head[2], head[3]]);
        let key = self.arena.get(at + HEAD..at + HEAD + klen).unwrap_or(&[]);
        if vlen == TOMBSTONE {
            return (key, None);
        }
        let v0 = at + HEAD + klen;
        let value = self.arena.get(v0..v0 + usize::from(vlen)).unwrap_or(&[]);
        (key, Some(value))
    }

    fn find(&self, key: &[u8]) -> Option<usize> {
        let t = u32::from(tag(key));
        self.slots
            .iter()
            .position(|&s| s >> 24 == t && self.record_at(s).0 == key)
    }

    /// The buffered version of `key`: `Some(None)` is a buffered delete.
    pub fn get(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        self.find(key).map(|i| self.record_at(self.slots[i]).1)
    }

    fn encoded_len(key: &[u8], value: Option<&[u8]>) -> usize {
        HEAD + key.len() + value.map_or(0, <[u8]>::len)
    }

    /// Buffers `value` (a put) or `None` (a delete) for `key`, replacing any
    /// earlier version. Keys and values longer than [`MAX_PART`] are the
    /// caller's error (such records are never buffered).
    pub fn put(&mut self, key: &[u8], value: Option<&[u8]>) {
        debug_assert!(key.len() <= MAX_PART && value.is_none_or(|v| v.len() <= MAX_PART));
        let len = Self::encoded_len(key, value);
        let t = tag(key);
        if let Some(i) = self.find(key) {
            let off = (self.slots[i] & OFFSET_MASK) as usize;
            let old = {
                let (k, v) = self.record_at(self.slots[i]);
                Self::encoded_len(k, v)
            };
            if old == len {
                // Same size: overwrite in place.
                self.write_record(off, key, value);
                return;
            }
            self.garbage += old as u32;
            self.slots[i] = slot(self.append(key, value), t);
        } else {
            let off = self.append(key, value);
            self.slots.push(slot(off, t));
        }
        if self.garbage as usize > self.arena.len() / 2 {
            self.compact();
        }
    }

    fn write_record(&mut self, off: usize, key: &[u8], value: Option<&[u8]>) {
        let vlen = value.map_or(TOMBSTONE, |v| v.len() as u16);
        let end = off + Self::encoded_len(key, value);
        if let Some(dst) = self.arena.get_mut(off..end) {
            dst[0..2].copy_from_slice(&(key.len() as u16).to_le_bytes());
            dst[2..4].copy_from_slice(&vlen.to_le_bytes());
            dst[HEAD..HEAD + key.len()].copy_from_slice(key);
            if let Some(v) = value {
                dst[HEAD + key.len()..].copy_from_slice(v);
            }
        }
    }

    fn append(&mut self, key: &[u8], value: Option<&[u8]>) -> u32 {
        let off = self.arena.len();
        self.arena.resize(off + Self::encoded_len(key, value), 0);
        self.write_record(off, key, value);
        off as u32
    }

    fn compact(&mut self) {
        let mut fresh = RecordSet {
            arena: Vec::with_capacity(self.arena.len() - self.garbage as usize),
            slots: Vec::with_capacity(self.slots.len()),
            garbage: 0,
        };
        for &s in &self.slots {
            let (k, v) = self.record_at(s);
            let o = fresh.append(k, v);
            fresh.slots.push(slot(o, (s >> 24) as u8));
        }
        *self = fresh;
    }

    /// The live records in key order.
    pub fn sorted(&self) -> Vec<Record<'_>> {
        let mut out: Vec<_> = self.slots.iter().map(|&o| self.record_at(o)).collect();
        out.sort_unstable_by(|a, b| a.0.cmp(b.0));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn newest_version_wins_and_deletes_are_kept() {
        let mut s = RecordSet::default();
        s.put(b"a", Some(b"1"));
        s.put(b"b", Some(b"22"));
        s.put(b"a", Some(b"3"));
        s.put(b"b", None);
        s.put(b"c", Some(b"long value"));
        s.put(b"c", Some(b"x"));
        assert_eq!(s.len(), 3);
        assert_eq!(s.get(b"a"), Some(Some(&b"3"[..])));
        assert_eq!(s.get(b"b"), Some(None));
        assert_eq!(s.get(b"c"), Some(Some(&b"x"[..])));
        assert_eq!(s.get(b"d"), None);
        let keys: Vec<_> = s.sorted().into_iter().map(|(k, _)| k.to_vec()).collect();
        assert_eq!(keys, vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
    }

    #[test]
    fn matches_a_map_under_many_rewrites() {
        let mut s = RecordSet::default();
        let mut m: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
        let mut x = 7u64;
        for _ in 0..5_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let k = vec![(x >> 60) as u8, (x >> 56) as u8 & 3];
            let v = if x & 7 == 0 {
                None
            } else {
                Some(vec![1u8; ((x >> 20) % 30) as usize])
            };
            s.put(&k, v.as_deref());
            m.insert(k, v);
        }
        let got: Vec<_> = s
            .sorted()
            .into_iter()
            .map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec)))
            .collect();
        let want: Vec<_> = m.into_iter().collect();
        assert_eq!(got, want);
        // Compaction keeps the arena near the live size.
        let live: usize = s
            .sorted()
            .iter()
            .map(|(k, v)| 4 + k.len() + v.map_or(0, <[u8]>::len))
            .sum();
        assert!(s.arena.len() <= 2 * live + 64);
    }
}
