//! The members a transaction has read ahead for popping a sorted set from
//! one end: the next live entries of its score index past the
//! collection's mark, in pop order.
//!
//! A pipeline of `ZPOPMIN`s runs as one transaction, and without this each
//! pop seeks the store anew (a merge over the memtable and every level of
//! an LSM-tree, a descent of a B+tree) to read one entry. The second pop
//! of a collection in a transaction reads a run of entries instead, and
//! the pops after it take theirs from the queue.
//!
//! Invariants: a queue lives only in its transaction, which holds the
//! keyspace lock exclusively, so only its own writes can change what it
//! read. It is valid while the collection's mark, as the transaction sees
//! it, is the `anchor` it was left at: the pop that took from it moved the
//! mark there, and a rollback moves the mark back. Any other write of a
//! score-index key of the collection, and any range delete, drops it
//! (see [`PopQueues::written`]). When `complete`, the queue holds every
//! live entry past the anchor.

use std::collections::VecDeque;

use super::hints::{CollId, Mark};

/// Entries read beyond a pop's own count once a collection is popped a
/// second time in one transaction.
pub const READ_AHEAD: u64 = 64;

/// One collection's queue at one end.
pub struct PopQueue {
    pub id: CollId,
    pub which: Mark,
    /// The mark the queue follows (the score-index key of the last entry
    /// popped).
    pub anchor: Vec<u8>,
    /// (score, member), in pop order.
    pub entries: VecDeque<(f64, Vec<u8>)>,
    /// Whether nothing live lies past the queue's entries.
    pub complete: bool,
}

/// A transaction's queues, and the collections it has popped.
#[derive(Default)]
pub struct PopQueues {
    queues: Vec<PopQueue>,
    /// Collection ends popped in this transaction (a first pop reads only
    /// what it takes).
    popped: Vec<(CollId, Mark)>,
}

impl PopQueues {
    /// Takes the queue of `id`'s `which` end out, if there is one.
    pub fn take(&mut self, id: CollId, which: Mark) -> Option<PopQueue> {
        let i = self
            .queues
            .iter()
            .position(|q| q.id == id && q.which == which)?;
        Some(self.queues.swap_remove(i))
    }

    /// Puts a queue (back).
    pub fn put(&mut self, q: PopQueue) {
        self.queues.push(q);
    }

    /// Notes a pop of `id`'s `which` end; whether one came before it in
    /// this transaction.
    pub fn note_pop(&mut self, id: CollId, which: Mark) -> bool {
        if self.popped.contains(&(id, which)) {
            return true;
        }
        self.popped.push((id, which));
        false
    }

    /// A score-index key of `id` is written (or deleted): its queues no
    /// longer hold the truth.
    pub fn written(&mut self, id: CollId) {
        if !self.queues.is_empty() {
            self.queues.retain(|q| q.id != id);
        }
    }

    /// A range of keys is deleted, or the transaction rolls back: every
    /// queue is dropped.
    pub fn clear(&mut self) {
        self.queues.clear();
    }

    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(id: CollId, which: Mark) -> PopQueue {
        PopQueue {
            id,
            which,
            anchor: vec![1],
            entries: VecDeque::from(vec![(1.0, b"a".to_vec())]),
            complete: false,
        }
    }

    #[test]
    fn a_write_drops_only_its_collections_queues() {
        let mut q = PopQueues::default();
        q.put(queue((0, 1), Mark::Low));
        q.put(queue((0, 1), Mark::High));
        q.put(queue((0, 2), Mark::Low));
        q.written((0, 1));
        assert!(q.take((0, 1), Mark::Low).is_none());
        assert!(q.take((0, 1), Mark::High).is_none());
        assert!(q.take((0, 2), Mark::Low).is_some());
        assert!(q.is_empty());
    }

    #[test]
    fn a_second_pop_is_known() {
        let mut q = PopQueues::default();
        assert!(!q.note_pop((3, 9), Mark::Low));
        assert!(q.note_pop((3, 9), Mark::Low));
        assert!(!q.note_pop((3, 9), Mark::High));
    }
}
