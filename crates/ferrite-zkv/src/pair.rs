//! The in-memory form of a key-value pair in ZKV's buffers.
//!
//! The merged filter, the batch array, the adaptive delta buffers and the
//! BD-tree's delta chains hold millions of small pairs, so a pair's size is
//! the buffers' capacity: [`Bytes`] keeps up to 15 bytes inline (an 8-byte
//! key or value costs no allocation) and [`Val`] is a stored value, a
//! value-log location or a tombstone. A [`Pair`] of 8-byte key and value is
//! 32 bytes with no heap allocation. `Bytes` holds 14 bytes inline (its
//! tag and length take two) and longer strings behind a thin pointer, so
//! it stays 16 bytes and `Val` can put its own tag in the spare values.
//!
//! [`Pair::mem_bytes`] is what the buffers charge to their budgets: the
//! struct plus any heap bytes, rounded up to the allocator's 16-byte steps.

use std::cmp::Ordering;

const INLINE: usize = 14;

/// A byte string stored inline when short.
#[derive(Clone)]
pub enum Bytes {
    Inline { len: u8, buf: [u8; INLINE] },
    Heap(Box<Box<[u8]>>),
}

impl Bytes {
    pub fn new(b: &[u8]) -> Self {
        if b.len() <= INLINE {
            let mut buf = [0u8; INLINE];
            buf[..b.len()].copy_from_slice(b);
            Bytes::Inline {
                len: b.len() as u8,
                buf,
            }
        } else {
            Bytes::Heap(Box::new(b.into()))
        }
    }

    pub fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Inline { len, buf } => &buf[..usize::from(*len)],
            Bytes::Heap(b) => b,
        }
    }

    /// Heap bytes held beyond the struct itself.
    pub fn heap_bytes(&self) -> usize {
        match self {
            Bytes::Inline { .. } => 0,
            Bytes::Heap(b) => 16 + b.len().div_ceil(16) * 16,
        }
    }
}

impl std::fmt::Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_slice())
    }
}

impl PartialEq for Bytes {
    fn eq(&self, o: &Self) -> bool {
        self.as_slice() == o.as_slice()
    }
}
impl Eq for Bytes {}
impl PartialOrd for Bytes {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Bytes {
    fn cmp(&self, o: &Self) -> Ordering {
        self.as_slice().cmp(o.as_slice())
    }
}
impl std::borrow::Borrow<[u8]> for Bytes {
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

/// What a buffered pair says about its key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Val {
    /// The value itself.
    Put(Bytes),
    /// The value lives in the value log at this device byte address.
    Vlog(u64),
    /// The key is deleted.
    Del,
}

impl Val {
    pub fn heap_bytes(&self) -> usize {
        match self {
            Val::Put(b) => b.heap_bytes(),
            _ => 0,
        }
    }
}

/// A key and what is known of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pair {
    pub key: Bytes,
    pub val: Val,
}

impl Pair {
    pub fn new(key: &[u8], val: Val) -> Self {
        Self {
            key: Bytes::new(key),
            val,
        }
    }

    pub fn key(&self) -> &[u8] {
        self.key.as_slice()
    }

    /// Bytes this pair costs a buffer.
    pub fn mem_bytes(&self) -> usize {
        std::mem::size_of::<Pair>() + self.key.heap_bytes() + self.val.heap_bytes()
    }
}

/// Merges `newer` over `older` (both sorted by key, unique keys), newer
/// winning on equal keys; the result is sorted and unique.
pub fn merge_sorted(older: Vec<Pair>, newer: Vec<Pair>) -> Vec<Pair> {
    merge_over(older, newer, &mut Vec::new())
}

/// As [`merge_sorted`], handing each replaced value to `dead` (the value
/// log counts them).
pub fn merge_over(older: Vec<Pair>, newer: Vec<Pair>, dead: &mut Vec<Val>) -> Vec<Pair> {
    let mut out = Vec::with_capacity(older.len() + newer.len());
    let mut a = older.into_iter().peekable();
    let mut b = newer.into_iter().peekable();
    loop {
        let ord = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => x.key().cmp(y.key()),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => break,
        };
        match ord {
            Ordering::Less => out.extend(a.next()),
            Ordering::Greater => out.extend(b.next()),
            Ordering::Equal => {
                dead.extend(a.next().map(|o| o.val));
                out.extend(b.next());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_pairs_are_compact() {
        assert_eq!(std::mem::size_of::<Bytes>(), 16);
        assert!(std::mem::size_of::<Pair>() <= 40);
        let p = Pair::new(b"12345678", Val::Put(Bytes::new(b"abcdefgh")));
        assert_eq!(p.mem_bytes(), std::mem::size_of::<Pair>());
        let big = Pair::new(&[7u8; 40], Val::Put(Bytes::new(&[1u8; 3])));
        assert_eq!(big.mem_bytes(), std::mem::size_of::<Pair>() + 16 + 48);
        assert_eq!(std::mem::size_of::<Pair>(), 32);
        assert_eq!(big.key(), &[7u8; 40][..]);
    }

    #[test]
    fn merge_prefers_newer() {
        let p = |k: &[u8], v: &[u8]| Pair::new(k, Val::Put(Bytes::new(v)));
        let older = vec![p(b"a", b"1"), p(b"c", b"1"), p(b"e", b"1")];
        let newer = vec![p(b"b", b"2"), p(b"c", b"2"), Pair::new(b"f", Val::Del)];
        let m = merge_sorted(older, newer);
        let keys: Vec<_> = m.iter().map(|p| p.key().to_vec()).collect();
        assert_eq!(
            keys,
            vec![
                b"a".to_vec(),
                b"b".to_vec(),
                b"c".to_vec(),
                b"e".to_vec(),
                b"f".to_vec()
            ]
        );
        assert_eq!(m[2].val, Val::Put(Bytes::new(b"2")));
    }
}
