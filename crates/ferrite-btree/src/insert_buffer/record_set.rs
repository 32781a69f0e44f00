//! The buffered records of one page: a compact record cache.
//!
//! Owns the newest buffered version of each key of one leaf: a value or a
//! tombstone. Records live back to back in one exactly sized allocation,
//! `[key len u16][value len u16][key][value]` each, value length
//! `u16::MAX` for a tombstone, so a 16-byte record costs 20 bytes and an
//! empty set (the many stack nodes without records) costs none. A set is
//! applied to its page (and emptied) long before it holds a page's worth of
//! records, so a probe scans a short, bounded run of bytes: constant time
//! per page, without a per-key hash table costing more than the records it
//! would index.
//!
//! Invariants: at most one record per key; records are parseable back to
//! back to the end of the allocation (a replaced record is removed, not
//! left behind).

const TOMBSTONE: u16 = u16::MAX;
const HEAD: usize = 4;

/// A buffered record: key and value, `None` for a buffered delete.
pub type Record<'a> = (&'a [u8], Option<&'a [u8]>);

/// The largest key or value a record can hold.
pub const MAX_PART: usize = TOMBSTONE as usize - 1;

#[derive(Debug, Default, Clone)]
pub struct RecordSet(Option<Box<[u8]>>);

fn encoded_len(key: &[u8], value: Option<&[u8]>) -> usize {
    HEAD + key.len() + value.map_or(0, <[u8]>::len)
}

fn encode(out: &mut Vec<u8>, key: &[u8], value: Option<&[u8]>) {
    out.extend_from_slice(&(key.len() as u16).to_le_bytes());
    out.extend_from_slice(&value.map_or(TOMBSTONE, |v| v.len() as u16).to_le_bytes());
    out.extend_from_slice(key);
    if let Some(v) = value {
        out.extend_from_slice(v);
    }
}

/// The records of `bytes` with their offsets and encoded lengths.
fn records(bytes: &[u8]) -> impl Iterator<Item = (usize, usize, Record<'_>)> {
    let mut at = 0;
    std::iter::from_fn(move || {
        let head = bytes.get(at..at + HEAD)?;
        let klen = usize::from(u16::from_le_bytes([head[0], head[1]]));
        let vlen = u16::from_le_bytes([head[2], head[3]]);
        let key = bytes.get(at + HEAD..at + HEAD + klen)?;
        let (value, len) = if vlen == TOMBSTONE {
            (None, HEAD + klen)
        } else {
            let v0 = at + HEAD + klen;
            let v = bytes.get(v0..v0 + usize::from(vlen))?;
            (Some(v), HEAD + klen + v.len())
        };
        let item = (at, len, (key, value));
        at += len;
        Some(item)
    })
}

impl RecordSet {
    fn bytes(&self) -> &[u8] {
        self.0.as_deref().unwrap_or_default()
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        records(self.bytes()).count()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes().is_empty()
    }

    /// Bytes this set has allocated on the heap.
    pub fn heap_bytes(&self) -> usize {
        self.bytes().len()
    }

    /// The buffered version of `key`: `Some(None)` is a buffered delete.
    pub fn get(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        records(self.bytes())
            .find(|(_, _, (k, _))| *k == key)
            .map(|(_, _, (_, v))| v)
    }

    /// Buffers `value` (a put) or `None` (a delete) for `key`, replacing any
    /// earlier version; returns the change in record count (0 or 1). Keys
    /// and values longer than [`MAX_PART`] are the caller's error (such
    /// records are never buffered).
    pub fn put(&mut self, key: &[u8], value: Option<&[u8]>) -> usize {
        debug_assert!(key.len() <= MAX_PART && value.is_none_or(|v| v.len() <= MAX_PART));
        let old = self.bytes();
        let found = records(old).find(|(_, _, (k, _))| *k == key);
        let mut out = Vec::with_capacity(old.len() + encoded_len(key, value));
        let added = match found {
            Some((at, len, _)) => {
                out.extend_from_slice(&old[..at]);
                out.extend_from_slice(&old[at + len..]);
                0
            }
            None => {
                out.extend_from_slice(old);
                1
            }
        };
        encode(&mut out, key, value);
        self.0 = Some(out.into_boxed_slice());
        added
    }

    /// The records in key order.
    pub fn sorted(&self) -> Vec<Record<'_>> {
        let mut out: Vec<_> = records(self.bytes()).map(|(_, _, r)| r).collect();
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
        assert_eq!(s.heap_bytes(), 0);
        assert_eq!(s.put(b"a", Some(b"1")), 1);
        s.put(b"b", Some(b"22"));
        assert_eq!(s.put(b"a", Some(b"3")), 0);
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
        // Exactly the encoded records: 4+1+1, 4+1, 4+1+1.
        assert_eq!(s.heap_bytes(), 17);
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
        let live: usize = want
            .iter()
            .map(|(k, v)| 4 + k.len() + v.as_ref().map_or(0, Vec::len))
            .sum();
        assert_eq!(got, want);
        assert_eq!(s.heap_bytes(), live, "no space is left behind by rewrites");
    }
}
