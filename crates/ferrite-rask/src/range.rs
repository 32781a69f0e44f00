//! Block ranges: the keys of the index.
//!
//! A [`BlockRange`] is an inclusive `[l, r]` of u64 block numbers with
//! `l <= r`; the constructors refuse anything else, so every range inside
//! the index is non-empty by construction.

use crate::error::{RaskError, Result};

/// An inclusive, non-empty range of block numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockRange {
    l: u64,
    r: u64,
}

impl BlockRange {
    /// `[l, r]`; an inverted range (`l > r`) is an error.
    pub fn new(l: u64, r: u64) -> Result<Self> {
        if l > r {
            return Err(RaskError::InvertedRange { l, r });
        }
        Ok(Self { l, r })
    }

    /// `len` blocks from `start`; zero blocks or a range past `u64::MAX` is an error.
    pub fn with_len(start: u64, len: u64) -> Result<Self> {
        if len == 0 {
            return Err(RaskError::EmptyRange { start });
        }
        let r = start
            .checked_add(len - 1)
            .ok_or(RaskError::RangeOverflow { start, len })?;
        Ok(Self { l: start, r })
    }

    /// The single block `b`.
    pub fn block(b: u64) -> Self {
        Self { l: b, r: b }
    }

    /// Internal constructor for bounds already known to be ordered.
    pub(crate) fn ordered(l: u64, r: u64) -> Self {
        debug_assert!(l <= r);
        Self { l, r }
    }

    pub fn l(&self) -> u64 {
        self.l
    }

    pub fn r(&self) -> u64 {
        self.r
    }

    /// Number of blocks; `u64::MAX + 1` saturates to `u64::MAX`.
    pub fn len(&self) -> u64 {
        (self.r - self.l).saturating_add(1)
    }

    /// Never true; present because `len` is.
    pub fn is_empty(&self) -> bool {
        false
    }

    pub fn contains(&self, b: u64) -> bool {
        self.l <= b && b <= self.r
    }

    /// True if `other` lies inside `self`.
    pub fn covers(&self, other: &BlockRange) -> bool {
        self.l <= other.l && other.r <= self.r
    }

    #[inline]
    pub fn intersect(&self, other: &BlockRange) -> Option<BlockRange> {
        let l = self.l.max(other.l);
        let r = self.r.min(other.r);
        (l <= r).then_some(BlockRange { l, r })
    }

    #[inline]
    pub fn overlaps(&self, other: &BlockRange) -> bool {
        self.l <= other.r && other.l <= self.r
    }
}

impl std::fmt::Display for BlockRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{}, {}]", self.l, self.r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constructors_refuse_bad_ranges() {
        assert!(matches!(
            BlockRange::new(5, 4),
            Err(RaskError::InvertedRange { l: 5, r: 4 })
        ));
        assert!(matches!(
            BlockRange::with_len(9, 0),
            Err(RaskError::EmptyRange { start: 9 })
        ));
        assert!(BlockRange::with_len(u64::MAX, 2).is_err());
        let r = BlockRange::with_len(u64::MAX, 1).unwrap();
        assert_eq!((r.l(), r.r(), r.len()), (u64::MAX, u64::MAX, 1));
        assert_eq!(BlockRange::new(0, u64::MAX).unwrap().len(), u64::MAX);
    }

    #[test]
    fn set_operations() {
        let a = BlockRange::new(3, 10).unwrap();
        let b = BlockRange::new(8, 20).unwrap();
        assert_eq!(a.intersect(&b), Some(BlockRange::new(8, 10).unwrap()));
        assert!(a.overlaps(&b));
        assert!(!a.covers(&b));
        assert!(a.covers(&BlockRange::new(4, 9).unwrap()));
        assert_eq!(a.intersect(&BlockRange::block(11)), None);
    }
}
