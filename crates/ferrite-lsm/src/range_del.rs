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
//! entries is left ([`RangeDel::obsolete`]).
//!
//! Reads do not scan tombstones: each set of them (the version's, each
//! memtable's) is cut once into [`Fragments`], disjoint key intervals each
//! with the sequence numbers of the tombstones over it, and cached where
//! the set lives: the version's built with it, a memtable's rebuilt once
//! per 64 range deletes, the newest few meanwhile checked one by one.
//! Whether a key is covered is then a binary search per set, however many
//! tombstones pile up.

use std::sync::Arc;

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

/// A set of tombstones cut into disjoint intervals, sorted by start: the
/// shape in which reads consult them (RocksDB's fragmented tombstone
/// list). Each fragment keeps the sequence numbers of every tombstone
/// over it, so a read at an older sequence number finds the newest one it
/// may see.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fragments {
    frags: Vec<Fragment>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Fragment {
    start: Vec<u8>,
    /// Exclusive.
    end: Vec<u8>,
    /// Ascending, distinct.
    seqs: Vec<u64>,
}

impl Fragments {
    /// Cuts `dels` at every start and end: between two neighbouring
    /// boundaries the same tombstones apply throughout. Neighbouring
    /// fragments with the same tombstones are merged back.
    pub fn build<'d>(dels: impl IntoIterator<Item = &'d RangeDel>) -> Self {
        let mut dels: Vec<&RangeDel> = dels.into_iter().collect();
        if dels.is_empty() {
            return Self::default();
        }
        dels.sort_by(|a, b| a.start.cmp(&b.start));
        let mut bounds: Vec<&[u8]> = dels
            .iter()
            .flat_map(|d| [d.start.as_slice(), d.end.as_slice()])
            .collect();
        bounds.sort_unstable();
        bounds.dedup();
        let mut frags: Vec<Fragment> = Vec::new();
        // The tombstones over the current interval: (end, seq).
        let mut active: Vec<(&[u8], u64)> = Vec::new();
        let mut next = 0;
        for w in bounds.windows(2) {
            let (lo, hi) = (w[0], w[1]);
            while let Some(d) = dels.get(next).filter(|d| d.start.as_slice() <= lo) {
                active.push((d.end.as_slice(), d.seq));
                next += 1;
            }
            // Every end is a boundary, so one past `lo` reaches `hi`.
            active.retain(|&(end, _)| end > lo);
            if active.is_empty() {
                continue;
            }
            let mut seqs: Vec<u64> = active.iter().map(|&(_, s)| s).collect();
            seqs.sort_unstable();
            seqs.dedup();
            match frags.last_mut() {
                Some(f) if f.end.as_slice() == lo && f.seqs == seqs => f.end = hi.to_vec(),
                _ => frags.push(Fragment {
                    start: lo.to_vec(),
                    end: hi.to_vec(),
                    seqs,
                }),
            }
        }
        Self { frags }
    }

    pub fn is_empty(&self) -> bool {
        self.frags.is_empty()
    }

    /// Whether a tombstone a read at `read_seq` sees (sequence number at
    /// or below it) covers `key` and is newer than `seq`.
    pub fn covers(&self, key: &[u8], seq: u64, read_seq: u64) -> bool {
        let i = self.frags.partition_point(|f| f.start.as_slice() <= key);
        let Some(f) = i.checked_sub(1).map(|i| &self.frags[i]) else {
            return false;
        };
        if key >= f.end.as_slice() {
            return false;
        }
        let j = f.seqs.partition_point(|&s| s <= read_seq);
        j > 0 && f.seqs[j - 1] > seq
    }
}

/// The tombstones a read at one sequence number honours: the fragmented
/// sets of its view (the version's and its memtables') and the few newest
/// of each memtable not yet fragmented.
#[derive(Debug, Clone, Default)]
pub struct RangeDels {
    sets: Vec<Arc<Fragments>>,
    loose: Vec<Arc<Vec<RangeDel>>>,
    read_seq: u64,
}

impl RangeDels {
    /// The tombstones of `dels` with sequence numbers at or below
    /// `read_seq`, fragmented for this one use (flushes, compactions,
    /// recovery).
    pub fn visible<'d>(dels: impl IntoIterator<Item = &'d RangeDel>, read_seq: u64) -> Self {
        Self::of_sets(vec![Arc::new(Fragments::build(dels))], Vec::new(), read_seq)
    }

    /// A read at `read_seq` over already fragmented sets, and tombstones
    /// not yet fragmented (`loose`), checked one by one.
    pub fn of_sets(
        sets: Vec<Arc<Fragments>>,
        loose: Vec<Arc<Vec<RangeDel>>>,
        read_seq: u64,
    ) -> Self {
        Self {
            sets: sets.into_iter().filter(|f| !f.is_empty()).collect(),
            loose: loose.into_iter().filter(|l| !l.is_empty()).collect(),
            read_seq,
        }
    }

    /// Whether an entry of `key` written at `seq` (a table entry: at the
    /// table's `max_seq`) is deleted by a tombstone newer than it.
    pub fn covers(&self, key: &[u8], seq: u64) -> bool {
        self.sets.iter().any(|f| f.covers(key, seq, self.read_seq))
            || self.loose.iter().flat_map(|l| l.iter()).any(|d| {
                d.seq <= self.read_seq
                    && d.seq > seq
                    && d.start.as_slice() <= key
                    && key < d.end.as_slice()
            })
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

    /// The definition `Fragments` must agree with: some tombstone over
    /// the key, visible at the read, newer than the entry.
    fn covered_by_definition(dels: &[RangeDel], key: &[u8], seq: u64, read_seq: u64) -> bool {
        dels.iter().any(|d| {
            d.seq <= read_seq && d.seq > seq && d.start.as_slice() <= key && key < d.end.as_slice()
        })
    }

    proptest::proptest! {
        #[test]
        fn fragments_agree_with_the_definition(
            raw in proptest::collection::vec((0u8..40, 1u8..12, 1u64..30), 0..24),
            probes in proptest::collection::vec((0u8..56, 0u64..32, 0u64..32), 1..64),
        ) {
            let dels: Vec<RangeDel> = raw
                .iter()
                .map(|&(s, len, seq)| RangeDel {
                    start: vec![s],
                    end: vec![s + len],
                    seq,
                    mem: 1,
                })
                .collect();
            let frags = Fragments::build(&dels);
            for w in frags.frags.windows(2) {
                proptest::prop_assert!(w[0].end <= w[1].start, "fragments overlap");
            }
            for &(k, seq, read_seq) in &probes {
                // Keys of one and two bytes, so probes fall inside and on
                // the boundaries.
                for key in [vec![k], vec![k, 7]] {
                    proptest::prop_assert_eq!(
                        frags.covers(&key, seq, read_seq),
                        covered_by_definition(&dels, &key, seq, read_seq),
                        "key {:?} seq {} read {}", key, seq, read_seq
                    );
                }
            }
        }
    }

    #[test]
    fn overlapping_tombstones_cut_into_disjoint_fragments() {
        let f = Fragments::build(&[del("a", "m", 5), del("f", "z", 9), del("c", "d", 5)]);
        let cut: Vec<(&[u8], &[u8], &[u64])> = f
            .frags
            .iter()
            .map(|f| (f.start.as_slice(), f.end.as_slice(), f.seqs.as_slice()))
            .collect();
        assert_eq!(
            cut,
            [
                (&b"a"[..], &b"f"[..], &[5][..]),
                (b"f", b"m", &[5, 9]),
                (b"m", b"z", &[9]),
            ],
            "a and c..d merge (same tombstones); the overlap keeps both"
        );
        assert!(f.covers(b"g", 8, 20) && !f.covers(b"g", 9, 20));
        assert!(f.covers(b"g", 4, 8), "a read at 8 sees the tombstone at 5");
        assert!(!f.covers(b"g", 5, 8));
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
