//! [`Backlog`]: the last bytes of the replication stream, so a replica
//! that lost its link for a while continues from its offset instead of
//! copying the whole store again (Redis's `repl-backlog-size`).
//!
//! Invariants: the backlog holds exactly the stream's bytes
//! `[start, end)` in offset space, `end - start <= capacity`; appending
//! drops the oldest bytes first; [`Backlog::since`] answers every
//! offset in `[start, end]` and no other.

use std::collections::VecDeque;

pub struct Backlog {
    bytes: VecDeque<u8>,
    capacity: usize,
    /// The stream offset of `bytes[0]`.
    start: u64,
}

impl Backlog {
    /// An empty backlog whose stream stands at `offset`.
    pub fn new(capacity: usize, offset: u64) -> Self {
        Self {
            bytes: VecDeque::new(),
            capacity,
            start: offset,
        }
    }

    /// The offset after the last byte.
    pub fn end(&self) -> u64 {
        self.start + self.bytes.len() as u64
    }

    pub fn start(&self) -> u64 {
        self.start
    }

    pub fn append(&mut self, b: &[u8]) {
        self.bytes.extend(b);
        let over = self.bytes.len().saturating_sub(self.capacity);
        if over > 0 {
            self.bytes.drain(..over);
            self.start += over as u64;
        }
    }

    /// The bytes from `offset` to the end, if the backlog still has them.
    pub fn since(&self, offset: u64) -> Option<Vec<u8>> {
        if offset < self.start || offset > self.end() {
            return None;
        }
        let skip = (offset - self.start) as usize;
        Some(self.bytes.range(skip..).copied().collect())
    }

    /// Empties it, the stream standing at `offset` (after a full sync).
    pub fn reset(&mut self, offset: u64) {
        self.bytes.clear();
        self.start = offset;
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_keeps_the_last_capacity_bytes_and_answers_only_what_it_has() {
        let mut b = Backlog::new(4, 10);
        assert_eq!(b.since(10), Some(vec![]));
        b.append(b"abc");
        assert_eq!((b.start(), b.end()), (10, 13));
        b.append(b"def");
        assert_eq!((b.start(), b.end()), (12, 16));
        assert_eq!(b.since(12), Some(b"cdef".to_vec()));
        assert_eq!(b.since(15), Some(b"f".to_vec()));
        assert_eq!(b.since(16), Some(vec![]));
        assert_eq!(b.since(11), None);
        assert_eq!(b.since(17), None);
        b.reset(100);
        assert_eq!((b.start(), b.end(), b.len()), (100, 100, 0));
    }
}
