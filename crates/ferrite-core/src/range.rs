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

    /// Keys starting with `prefix`.
    pub fn prefix(prefix: &'a [u8]) -> (Self, Option<Vec<u8>>) {
        // The exclusive end is the prefix with its last non-0xFF byte
        // incremented; returned separately because the range borrows it.
        let mut end = prefix.to_vec();
        while let Some(&last) = end.last() {
            if last == 0xFF {
                end.pop();
            } else {
                if let Some(l) = end.last_mut() {
                    *l += 1;
                }
                break;
            }
        }
        let r = Self {
            start: Bound::Included(prefix),
            end: Bound::Unbounded,
        };
        (r, (!end.is_empty()).then_some(end))
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
    fn prefix_end() {
        assert_eq!(KeyRange::prefix(b"ab").1.as_deref(), Some(&b"ac"[..]));
        assert_eq!(KeyRange::prefix(b"a\xff").1.as_deref(), Some(&b"b"[..]));
        assert_eq!(KeyRange::prefix(b"\xff\xff").1, None);
    }
}
