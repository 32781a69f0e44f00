//! One slot of a log-structured leaf, and one piece of a lookup's answer.

use smallvec::SmallVec;

use crate::range::BlockRange;
use crate::value::RangeValue;

/// Entries being collected, split or merged: two default-sized leaves and
/// a few trimmed pieces fit on the stack, so the write path's collections
/// do not allocate.
pub(crate) type EntryBuf<V> = SmallVec<[Entry<V>; 40]>;

/// A written range and its value; a tombstone value marks a delete.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Entry<V> {
    pub range: BlockRange,
    pub value: V,
}

impl<V: RangeValue> Entry<V> {
    pub fn new(range: BlockRange, value: V) -> Self {
        Self { range, value }
    }

    /// The entry restricted to `part` (inside `self.range`), value divided.
    pub fn part(&self, part: BlockRange) -> Self {
        if part == self.range || self.value.is_tombstone() {
            return Self::new(part, self.value);
        }
        Self::new(part, self.value.divide(self.range, part))
    }
}

/// One piece of a lookup's answer: a subrange and its latest value, or
/// `None` for blocks never written (or deleted).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Segment<V> {
    pub range: BlockRange,
    pub value: Option<V>,
}
