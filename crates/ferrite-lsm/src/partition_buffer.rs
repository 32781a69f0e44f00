//! Partition flush buffers (SwiftKV §3.2): with partitions, a flushed
//! memtable's entries wait, partition by partition, until the partition
//! has a table's worth, so L0 tables keep their size however many
//! partitions share the one memtable.
//!
//! A buffer holds no copy: it names the flushed memtables whose entries of
//! its partition are in no table yet (the memtable already keeps them
//! sorted; the partition's share is its keys that route there). Invariants:
//! - `parts[p]` lists, newest first, every flushed memtable with entries of
//!   partition `p` that `p`'s tables do not hold, and no other;
//! - every such memtable is older than every immutable memtable and newer
//!   than every table of `p`, so a lookup reads memtables, then `p`'s
//!   buffer, then `p`'s levels;
//! - a buffered memtable's WAL is not reused: the flush thread writes a
//!   partition out before its oldest memtable's WAL device is needed
//!   ([`due`]), and the manifest records per partition the first memtable
//!   whose entries of it may be in no table (`ManifestState::part_logs`),
//!   which recovery replays from.

use std::sync::Arc;

use crate::memtable::Memtable;

/// One buffered memtable's share of a partition.
#[derive(Clone)]
pub struct Pending {
    pub mem: Arc<Memtable>,
    /// Bytes of the partition's newest versions in `mem` (keys, values,
    /// entry headers): what they will take in a table.
    pub bytes: usize,
}

/// Every partition's buffer; immutable once published (readers hold it in
/// their snapshot), replaced whole when a flush changes it.
#[derive(Clone, Default)]
pub struct PartitionBuffers {
    pub parts: Vec<Vec<Pending>>,
}

impl PartitionBuffers {
    pub fn new(partitions: usize) -> Self {
        Self {
            parts: vec![Vec::new(); partitions],
        }
    }

    /// The memtables buffered for partition `p`, newest first.
    pub fn pending(&self, p: usize) -> impl Iterator<Item = &Arc<Memtable>> {
        self.parts.get(p).into_iter().flatten().map(|x| &x.mem)
    }

    /// Bytes buffered over all partitions.
    pub fn bytes(&self) -> usize {
        self.parts.iter().flatten().map(|x| x.bytes).sum()
    }

    /// Distinct memtables buffered anywhere (memory they keep alive).
    pub fn memtables(&self) -> Vec<Arc<Memtable>> {
        let mut out: Vec<Arc<Memtable>> = Vec::new();
        for x in self.parts.iter().flatten() {
            if !out.iter().any(|m| m.id() == x.mem.id()) {
                out.push(x.mem.clone());
            }
        }
        out.sort_by_key(|m| std::cmp::Reverse(m.id()));
        out
    }

    /// Whether partition `p` still waits for `mem`'s entries.
    pub fn holds(&self, p: usize, mem_id: u64) -> bool {
        self.pending(p).any(|m| m.id() == mem_id)
    }

    /// Per partition: the first memtable whose entries of it may be in no
    /// table (the oldest buffered one, or `next` when none is).
    pub fn part_logs(&self, next: u64) -> Vec<u64> {
        self.parts
            .iter()
            .map(|ps| ps.iter().map(|x| x.mem.id()).min().unwrap_or(next))
            .collect()
    }

    /// `(bytes, oldest memtable id)` per partition, what [`due`] decides by.
    pub fn summary(&self) -> Vec<(usize, Option<u64>)> {
        self.parts
            .iter()
            .map(|ps| {
                (
                    ps.iter().map(|x| x.bytes).sum(),
                    ps.iter().map(|x| x.mem.id()).min(),
                )
            })
            .collect()
    }
}

/// Memtables a buffer may keep besides those waiting in the immutable list:
/// the WAL devices not needed by the active memtable and `max_immutable`
/// immutable ones. Zero means every flush writes every partition out.
pub fn retained(wal_devices: usize, max_immutable: usize) -> u64 {
    wal_devices.saturating_sub(1 + max_immutable) as u64
}

/// The partitions whose buffers go to L0 after memtable `flushed` joined
/// them: those holding a table's worth (`target` bytes), and those holding
/// a memtable older than `flushed + 1 - retained`, whose WAL device a
/// coming rotation will reset. Pure: `summary` is
/// [`PartitionBuffers::summary`].
pub fn due(
    summary: &[(usize, Option<u64>)],
    target: usize,
    flushed: u64,
    retained: u64,
) -> Vec<usize> {
    let oldest_kept = (flushed + 1).saturating_sub(retained);
    summary
        .iter()
        .enumerate()
        .filter(|(_, (bytes, oldest))| oldest.is_some_and(|o| *bytes >= target || o < oldest_kept))
        .map(|(p, _)| p)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_buffer_or_an_old_memtable_is_written() {
        let s = [
            (100, Some(7)),  // small, recent: waits
            (5000, Some(8)), // a table's worth
            (10, Some(5)),   // holds memtable 5, whose WAL comes back soon
            (0, None),       // empty
            (4096, Some(6)), // exactly the target
        ];
        // Memtable 8 just flushed, two may stay: 7 and 8 are kept.
        assert_eq!(due(&s, 4096, 8, 2), vec![1, 2, 4]);
        // Nothing may stay: every non-empty buffer goes.
        assert_eq!(due(&s, 4096, 8, 0), vec![0, 1, 2, 4]);
    }

    #[test]
    fn retention_leaves_the_active_and_immutable_memtables_their_devices() {
        assert_eq!(retained(4, 1), 2);
        assert_eq!(retained(4, 3), 0);
        assert_eq!(retained(4, 5), 0);
    }

    #[test]
    fn part_logs_name_the_oldest_buffered_memtable() {
        let m = |id| Pending {
            mem: Arc::new(Memtable::new(id)),
            bytes: 1,
        };
        let b = PartitionBuffers {
            parts: vec![vec![m(9), m(7)], vec![], vec![m(9)]],
        };
        assert_eq!(b.part_logs(10), vec![7, 10, 9]);
        assert!(b.holds(0, 7) && !b.holds(2, 7));
        let ids: Vec<u64> = b.memtables().iter().map(|m| m.id()).collect();
        assert_eq!(ids, vec![9, 7]);
    }
}
