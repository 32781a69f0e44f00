//! Key ranges for scans.
//!
//! [`KeyRange`] is the concrete, object-safe form of `RangeBounds<&[u8]>`
//! that [`crate::KvStore::scan`] takes; build one from any Rust range of
//! byte slices with [`KeyRange::from_bounds`], e.g. `&b"a"[..]..&b"m"[..]`.

use std::ops::{Bound, RangeBounds};

/// A range of keys, each end included, excluded or unbounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRange<'a> {
    pub start: Bound<&'a [u8]>,
    pub end: Bound<&'a [u8]>,
}

impl<'a> KeyRange<'a> {
    /// Every key.
    pub fn all() -> Self {
        Self {
            start: Bound::Unbounded,
            end: Bound::Unbounded,
        }
    }

    /// From any `RangeBounds<&[u8]>` (`a..b`, `a..=b`, `a..`, `..`).
    pub fn from_bounds<R: RangeBounds<&'a [u8]>>(r: R) -> Self {
        Self {
            start: r.start_bound().cloned(),
            end: r.end_bound().cloned(),
        }
    }

    /// Whether the bounds leave no key between them (start past end, or
    /// meeting where one excludes the other). Scans of such a range visit
    /// nothing.
    pub fn is_empty(&self) -> bool {
        match (self.start, self.end) {
            (Bound::Included(s), Bound::Included(e)) => s > e,
            (Bound::Included(s) | Bound::Excluded(s), Bound::Included(e) | Bound::Excluded(e)) => {
                s >= e
            }
            _ => false,
        }
    }

    /// Whether `key` lies in the range.
    pub fn contains(&self, key: &[u8]) -> bool {
        self.after_start(key) && self.before_end(key)
    }

    /// Whether `key` is at or past the start bound.
    pub fn after_start(&self, key: &[u8]) -> bool {
        match self.start {
            Bound::Included(s) => key >= s,
            Bound::Excluded(s) => key > s,
            Bound::Unbounded => true,
        }
    }

    /// Whether `key` is before the end bound.
    pub fn before_end(&self, key: &[u8]) -> bool {
        match self.end {
            Bound::Included(e) => key <= e,
            Bound::Excluded(e) => key < e,
            Bound::Unbounded => true,
        }
    }
}

/// A key range that owns its bounds (what a prefix's range needs: its
/// end is computed, not borrowed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedKeyRange {
    pub start: Bound<Vec<u8>>,
    pub end: Bound<Vec<u8>>,
}

impl OwnedKeyRange {
    /// Every key.
    pub fn all() -> Self {
        Self {
            start: Bound::Unbounded,
            end: Bound::Unbounded,
        }
    }

    /// From any range of keys (`a..b`, `a..=b`, `a..`, `..`).
    pub fn new<K: AsRef<[u8]>>(r: impl RangeBounds<K>) -> Self {
        let own = |b: Bound<&K>| b.map(|k| k.as_ref().to_vec());
        Self {
            start: own(r.start_bound()),
            end: own(r.end_bound()),
        }
    }

    /// Exactly the keys that start with `prefix`: from `prefix` up to,
    /// not including, the shortest key above every key it begins
    /// (`prefix` with its last byte below 0xFF incremented and what follows
    /// dropped); unbounded above when every byte is 0xFF.
    pub fn prefix(prefix: &[u8]) -> Self {
        let mut end = prefix.to_vec();
        while end.last() == Some(&0xFF) {
            end.pop();
        }
        if let Some(l) = end.last_mut() {
            *l += 1;
        }
        Self {
            start: Bound::Included(prefix.to_vec()),
            end: if end.is_empty() {
                Bound::Unbounded
            } else {
                Bound::Excluded(end)
            },
        }
    }

    /// The borrowed form scans take.
    pub fn as_range(&self) -> KeyRange<'_> {
        KeyRange {
            start: self.start.as_ref().map(Vec::as_slice),
            end: self.end.as_ref().map(Vec::as_slice),
        }
    }
}

/// So a `BTreeMap<Vec<u8>, _>` can be ranged over with one
/// (`map.range::<[u8], _>(r)`).
impl RangeBounds<[u8]> for KeyRange<'_> {
    fn start_bound(&self) -> Bound<&[u8]> {
        self.start
    }
    fn end_bound(&self) -> Bound<&[u8]> {
        self.end
    }
}

impl<'a> RangeBounds<&'a [u8]> for KeyRange<'a> {
    fn start_bound(&self) -> Bound<&&'a [u8]> {
        self.start.as_ref()
    }
    fn end_bound(&self) -> Bound<&&'a [u8]> {
        self.end.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds() {
        let r = KeyRange::from_bounds(&b"b"[..]..&b"d"[..]);
        assert!(!r.contains(b"a") && r.contains(b"b") && r.contains(b"cz") && !r.contains(b"d"));
        let r = KeyRange::from_bounds(&b"b"[..]..=&b"d"[..]);
        assert!(r.contains(b"d") && !r.contains(b"d\0"));
        assert!(KeyRange::all().contains(b"\xff\xff"));
    }

    #[test]
    fn a_prefix_range_holds_exactly_the_keys_with_the_prefix() {
        let p = OwnedKeyRange::prefix(b"ab");
        assert_eq!(p.end, Bound::Excluded(b"ac".to_vec()));
        let r = p.as_range();
        assert!(r.contains(b"ab") && r.contains(b"ab\xff\xff") && r.contains(b"abz"));
        assert!(!r.contains(b"aa\xff") && !r.contains(b"ac") && !r.contains(b"b"));
        assert_eq!(
            OwnedKeyRange::prefix(b"a\xff").end,
            Bound::Excluded(b"b".to_vec())
        );
        let top = OwnedKeyRange::prefix(b"\xff\xff");
        assert_eq!(top.end, Bound::Unbounded);
        assert!(top.as_range().contains(b"\xff\xff\x01") && !top.as_range().contains(b"\xff"));
        let r = OwnedKeyRange::new(b"b".to_vec()..b"d".to_vec());
        assert!(r.as_range().contains(b"c") && !r.as_range().contains(b"d"));
    }
}
