//! Range tombstones: what `delete_range` leaves in the tree instead of a
//! delete per key.
//!
//! A [`RangeDel`] deletes every key in `start..end` written before it: an
//! entry is covered when a tombstone over its key has a larger sequence
//! number than the entry. Memtable entries carry their own sequence
//! numbers; a table's entries are all at or below the table's `max_seq`,
//! and a table never holds an entry that a tombstone newer than the entry
//! but not newer than the table covers (flushes and compactions drop
//! those), so a table entry is covered exactly when a tombstone over its
//! key is newer than the whole table.
//!
//! Tombstones live in the memtable they were written to until it is
//! flushed, then in the version (and its manifest) until no table older
//! than them overlaps their range and no memtable that could hold older
//! entries is left ([`RangeDel::obsolete`]). Reads gather every tombstone
//! of their view; range deletes are rare, so a lookup scans the few whose
//! start is at or below its key.

/// One range delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeDel {
    pub start: Vec<u8>,
    /// Exclusive.
    pub end: Vec<u8>,
    pub seq: u64,
    /// The memtable it was written to.
    pub mem: u64,
}

impl RangeDel {
    /// Whether the tombstone can go: no table older than it (`max_seq`
    /// below its sequence number) overlaps its range, and every memtable
    /// still in memory is newer than the one it was written to.
    pub fn obsolete<'t>(
        &self,
        tables: impl IntoIterator<Item = (u64, &'t [u8], &'t [u8])>,
        oldest_mem: u64,
    ) -> bool {
        oldest_mem > self.mem
            && !tables.into_iter().any(|(max_seq, lo, hi)| {
                max_seq < self.seq && lo < self.end.as_slice() && self.start.as_slice() <= hi
            })
    }
}

/// The tombstones a read sees, sorted by start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeDels {
    dels: Vec<RangeDel>,
}

impl RangeDels {
    /// The tombstones of `dels` with sequence numbers at or below
    /// `read_seq` (those a read at `read_seq` must honour).
    pub fn visible<'d>(dels: impl IntoIterator<Item = &'d RangeDel>, read_seq: u64) -> Self {
        let mut v: Vec<RangeDel> = dels
            .into_iter()
            .filter(|d| d.seq <= read_seq)
            .cloned()
            .collect();
        v.sort_by(|a, b| a.start.cmp(&b.start).then(a.seq.cmp(&b.seq)));
        Self { dels: v }
    }

    /// Whether an entry of `key` written at `seq` (a table entry: at the
    /// table's `max_seq`) is deleted by a tombstone newer than it.
    pub fn covers(&self, key: &[u8], seq: u64) -> bool {
        if self.dels.is_empty() {
            return false;
        }
        let upto = self.dels.partition_point(|d| d.start.as_slice() <= key);
        self.dels[..upto]
            .iter()
            .any(|d| d.seq > seq && key < d.end.as_slice())
    }
}

/// Encodes tombstones: `count: u32`, then per tombstone `start_len: u16`,
/// start, `end_len: u16`, end, `seq: u64`, `mem: u64` (little-endian).
pub fn encode(dels: &[RangeDel], out: &mut Vec<u8>) {
    out.extend_from_slice(&(dels.len() as u32).to_le_bytes());
    for d in dels {
        for k in [&d.start, &d.end] {
            out.extend_from_slice(&(k.len() as u16).to_le_bytes());
            out.extend_from_slice(k);
        }
        out.extend_from_slice(&d.seq.to_le_bytes());
        out.extend_from_slice(&d.mem.to_le_bytes());
    }
}

/// Decodes what [`encode`] wrote from the front of `b`; returns the
/// tombstones and the bytes read, or `None` if `b` is not such an
/// encoding (a key out of limits, an empty range, truncation).
pub fn decode(b: &[u8]) -> Option<(Vec<RangeDel>, usize)> {
    let mut r = ferrite_core::engine::ByteReader::new(b);
    let n = r.u32()? as usize;
    let mut dels = Vec::with_capacity(n.min(b.len() / 20));
    for _ in 0..n {
        let mut key = || -> Option<Vec<u8>> {
            let len = r.u16()? as usize;
            let k = r.bytes(len)?;
            (1..=ferrite_core::MAX_KEY_LEN)
                .contains(&k.len())
                .then(|| k.to_vec())
        };
        let start = key()?;
        let end = key()?;
        let seq = r.counter()?;
        let mem = r.counter()?;
        if start >= end {
            return None;
        }
        dels.push(RangeDel {
            start,
            end,
            seq,
            mem,
        });
    }
    Some((dels, b.len() - r.remaining()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn del(s: &str, e: &str, seq: u64) -> RangeDel {
        RangeDel {
            start: s.as_bytes().to_vec(),
            end: e.as_bytes().to_vec(),
            seq,
            mem: 1,
        }
    }

    #[test]
    fn a_tombstone_covers_older_entries_in_its_range_only() {
        let d = RangeDels::visible(&[del("b", "d", 10), del("x", "z", 5)], 10);
        assert!(d.covers(b"b", 9) && d.covers(b"c", 0) && d.covers(b"cz", 9));
        assert!(
            !d.covers(b"b", 10),
            "an entry as new as the tombstone stays"
        );
        assert!(
            !d.covers(b"d", 0) && !d.covers(b"a", 0),
            "the end is exclusive"
        );
        assert!(d.covers(b"y", 4) && !d.covers(b"y", 5));
        // A read below a tombstone's sequence number does not see it.
        let old = RangeDels::visible(&[del("b", "d", 10)], 9);
        assert!(!old.covers(b"c", 0));
    }

    #[test]
    fn obsolete_when_no_older_table_overlaps_and_its_memtable_is_gone() {
        let d = del("c", "f", 10);
        let t = |max_seq: u64, lo: &'static str, hi: &'static str| {
            (max_seq, lo.as_bytes(), hi.as_bytes())
        };
        assert!(!d.obsolete([t(9, "a", "d")], 2), "an older table overlaps");
        assert!(d.obsolete([t(12, "a", "d"), t(3, "f", "z")], 2));
        assert!(!d.obsolete([], 1), "its memtable is still in memory");
    }

    #[test]
    fn encoding_round_trips_and_refuses_damage() {
        let dels = vec![del("a", "b", 1), del("k", "kk", 99)];
        let mut b = Vec::new();
        encode(&dels, &mut b);
        b.push(7);
        assert_eq!(decode(&b), Some((dels, b.len() - 1)));
        for cut in 0..b.len() - 1 {
            assert!(decode(&b[..cut]).is_none(), "cut at {cut}");
        }
        let mut empty = Vec::new();
        encode(&[del("b", "b", 1)], &mut empty);
        assert!(decode(&empty).is_none(), "an empty range is damage");
    }
}
