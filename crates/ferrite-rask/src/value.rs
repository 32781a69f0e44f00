//! Values stored for ranges, and the two user-provided functions of the
//! design: `DivideValue` (the value of a part of a written range) and
//! `MergeRange` (whether two adjacent entries describe one run).
//!
//! Values are small `Copy` records (a location, not data). One value is
//! reserved as the tombstone a delete writes; `put` refuses it.

use crate::error::{RaskError, Result};
use crate::range::BlockRange;

/// What the index stores for a range.
pub trait RangeValue: Copy + Send + Sync + PartialEq + std::fmt::Debug + 'static {
    /// The reserved value a delete writes.
    const TOMBSTONE: Self;

    /// Bytes of [`RangeValue::encode`]'s output (snapshots and the redo log).
    const ENCODED_LEN: usize;

    /// The value for `part` of a range `whole` written with `self`.
    /// `part` always lies inside `whole`.
    fn divide(&self, whole: BlockRange, part: BlockRange) -> Self;

    /// If `left` (ending at block `b`) and `right` (starting at `b + 1`)
    /// describe one continuous run, the value for their union.
    fn merge(left: BlockRange, lv: &Self, right: BlockRange, rv: &Self) -> Option<Self>;

    /// Why `self` cannot be stored for `range`, if it cannot.
    fn check(&self, range: BlockRange) -> Option<&'static str> {
        let _ = range;
        (*self == Self::TOMBSTONE).then_some("it is the reserved tombstone")
    }

    fn is_tombstone(&self) -> bool {
        *self == Self::TOMBSTONE
    }

    /// A 64-bit image of the value, if the type has one, from which
    /// [`RangeValue::from_image`] rebuilds it exactly. A leaf whose values'
    /// images lie within 2^32 - 1 of each other stores each as a 32-bit
    /// offset from the smallest, so values that usually lie close together
    /// (runs one backend allocates) should have images that do too. The
    /// default, `None`, stores values as they are.
    fn to_image(&self) -> Option<u64> {
        None
    }

    /// The value whose image is `image`; only called with images
    /// [`RangeValue::to_image`] returned, so a type without images never
    /// sees it called.
    fn from_image(image: u64) -> Self {
        let _ = image;
        Self::TOMBSTONE
    }

    fn encode(&self, out: &mut Vec<u8>);

    /// Decodes exactly [`RangeValue::ENCODED_LEN`] bytes; `None` if they
    /// cannot be a value.
    fn decode(bytes: &[u8]) -> Option<Self>;
}

/// `Ok` if `value` may be stored for `range`, else the typed refusal.
pub(crate) fn validate<V: RangeValue>(range: BlockRange, value: &V) -> Result<()> {
    match value.check(range) {
        None => Ok(()),
        Some(reason) => Err(RaskError::InvalidValue {
            range,
            value: format!("{value:?}"),
            reason,
        }),
    }
}

/// Where a run of blocks lives: a data file and the first physical block
/// in it, packed in 8 bytes (16-bit file id, 48-bit block).
///
/// The cloud block store case: a range `[l, r]` written as one request is
/// stored contiguously, so block `l + i` lives at `block + i` of `file`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PhysicalRun(u64);

impl PhysicalRun {
    /// Highest usable file id (`u16::MAX` is the tombstone's).
    pub const MAX_FILE: u16 = u16::MAX - 1;
    /// Blocks addressable inside a file.
    pub const BLOCK_SPACE: u64 = 1 << 48;

    /// `None` if `file` is reserved or `block` does not fit 48 bits.
    pub fn new(file: u16, block: u64) -> Option<Self> {
        (file <= Self::MAX_FILE && block < Self::BLOCK_SPACE)
            .then_some(Self(((file as u64) << 48) | block))
    }

    pub fn file(&self) -> u16 {
        (self.0 >> 48) as u16
    }

    pub fn block(&self) -> u64 {
        self.0 & (Self::BLOCK_SPACE - 1)
    }

    /// The packed representation (also what per-block baselines store).
    pub fn to_bits(self) -> u64 {
        self.0
    }

    pub fn from_bits(bits: u64) -> Self {
        Self(bits)
    }

    /// The run shifted `by` blocks forward, within the same file.
    pub fn offset(&self, by: u64) -> Self {
        Self(
            (self.0 & !(Self::BLOCK_SPACE - 1))
                | (self.block().wrapping_add(by) & (Self::BLOCK_SPACE - 1)),
        )
    }
}

impl std::fmt::Debug for PhysicalRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_tombstone() {
            write!(f, "tombstone")
        } else {
            write!(f, "{}:{}", self.file(), self.block())
        }
    }
}

impl RangeValue for PhysicalRun {
    const TOMBSTONE: Self = PhysicalRun(u64::MAX);
    const ENCODED_LEN: usize = 8;

    fn divide(&self, whole: BlockRange, part: BlockRange) -> Self {
        self.offset(part.l() - whole.l())
    }

    fn merge(left: BlockRange, lv: &Self, right: BlockRange, rv: &Self) -> Option<Self> {
        let continuous = left.r().checked_add(1) == Some(right.l())
            && lv.file() == rv.file()
            && lv.block().checked_add(left.len()) == Some(rv.block());
        continuous.then_some(*lv)
    }

    fn check(&self, range: BlockRange) -> Option<&'static str> {
        if self.is_tombstone() {
            return Some("it is the reserved tombstone");
        }
        if self
            .block()
            .checked_add(range.len() - 1)
            .is_none_or(|end| end >= Self::BLOCK_SPACE)
        {
            return Some("the run would pass the 48-bit block space of its file");
        }
        None
    }

    /// The packed bits: runs allocated near each other in one file have
    /// images as close as their blocks.
    fn to_image(&self) -> Option<u64> {
        Some(self.0)
    }

    fn from_image(image: u64) -> Self {
        Self(image)
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0.to_le_bytes());
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        Some(Self(u64::from_le_bytes(bytes.try_into().ok()?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(l: u64, h: u64) -> BlockRange {
        BlockRange::new(l, h).unwrap()
    }

    #[test]
    fn divide_and_merge_are_inverse() {
        let v = PhysicalRun::new(3, 1000).unwrap();
        let whole = r(10, 29);
        let a = v.divide(whole, r(10, 14));
        let b = v.divide(whole, r(15, 29));
        assert_eq!((a.file(), a.block()), (3, 1000));
        assert_eq!((b.file(), b.block()), (3, 1005));
        assert_eq!(PhysicalRun::merge(r(10, 14), &a, r(15, 29), &b), Some(v));
        // A gap in either space is not one run.
        assert_eq!(PhysicalRun::merge(r(10, 14), &a, r(16, 29), &b), None);
        let c = PhysicalRun::new(4, 1005).unwrap();
        assert_eq!(PhysicalRun::merge(r(10, 14), &a, r(15, 29), &c), None);
    }

    #[test]
    fn reserved_and_oversized_values_are_refused() {
        assert!(PhysicalRun::new(u16::MAX, 0).is_none());
        assert!(PhysicalRun::new(0, 1 << 48).is_none());
        assert!(PhysicalRun::TOMBSTONE.check(r(0, 0)).is_some());
        let end = PhysicalRun::new(0, PhysicalRun::BLOCK_SPACE - 2).unwrap();
        assert!(end.check(r(0, 1)).is_none());
        assert!(end.check(r(0, 2)).is_some());
        let mut buf = Vec::new();
        end.encode(&mut buf);
        assert_eq!(PhysicalRun::decode(&buf), Some(end));
        assert_eq!(PhysicalRun::decode(&buf[..7]), None);
    }
}
