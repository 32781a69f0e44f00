//! The memtable: recent writes in a lock-free skip list, ordered by user
//! key and, within a key, newest sequence number first.
//!
//! A point lookup first asks a filter of the keys inserted (RocksDB's
//! memtable whole-key filter): most lookups are for keys the memtable
//! does not hold, and the filter answers those without a skip-list
//! search, whose every step is a cache miss.
//!
//! Invariants: an entry is never changed or removed once inserted (a newer
//! write is a new entry with a higher sequence number); readers at
//! sequence `s` see exactly the entries with `seq <= s`; `bytes` only
//! grows and approximates the memory held (keys, values, node overhead);
//! a key's filter bits are set before its entry is inserted, so a reader
//! that can find the entry passes the filter.

use std::cmp::Reverse;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_skiplist::SkipMap;
use parking_lot::Mutex;
use smallvec::SmallVec;

use crate::range_del::{Fragments, RangeDel};
use crate::table::bloom::Bloom;

/// A memtable key: the user key, then the sequence number, newest first.
/// The key's first 24 bytes are kept inline as three big-endian numbers
/// (zero-padded), which order keys as their bytes do wherever they
/// differ: most comparisons of a skip-list search end there, without
/// following the key's pointer to the heap. Twenty-four, not eight: keys
/// often share a long prefix (a Redis server's `\x00key:000000nnnnnn`, a
/// tenant's name, and a named keyspace's 7-byte prefix before a key that
/// has its own), and a comparison that ties on the inline words would
/// otherwise always miss the cache once more.
///
/// Keys up to [`INLINE_KEY`] bytes are kept in the skip-list node itself,
/// so a comparison that ties on the three words reads the rest from the
/// node's own cache lines rather than from a separate allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemKey {
    head: [u64; 3],
    key: SmallVec<[u8; INLINE_KEY]>,
    seq: Reverse<u64>,
}

impl MemKey {
    fn new(key: &[u8], seq: u64) -> Self {
        Self {
            head: [0, 8, 16]
                .map(|at| ferrite_core::engine::key_to_u64(key.get(at..).unwrap_or_default())),
            key: SmallVec::from_slice(key),
            seq: Reverse(seq),
        }
    }
}

impl Ord for MemKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.head
            .cmp(&other.head)
            .then_with(|| self.key.cmp(&other.key))
            .then_with(|| self.seq.cmp(&other.seq))
    }
}

impl PartialOrd for MemKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Key bytes a memtable node holds without an allocation of its own.
const INLINE_KEY: usize = 40;

/// Approximate bytes of one skip-list node beyond its key and value.
const NODE_OVERHEAD: usize = 104;

/// One memtable; `id` numbers memtables (and their WAL epochs) in order.
pub struct Memtable {
    id: u64,
    map: SkipMap<MemKey, Option<Vec<u8>>>,
    /// The keys inserted, as a bloom filter of two probes (a power of two
    /// of bits, about sixteen per key a full memtable holds).
    filter: Box<[AtomicU64]>,
    /// Range deletes written to this memtable (rare; see `range_del`).
    range_dels: Mutex<MemDels>,
    /// Whether `range_dels` holds any, read without its lock by lookups.
    any_range_dels: AtomicBool,
    bytes: AtomicUsize,
    max_seq: AtomicU64,
    /// Point deletes inserted (an idle memtable holding any is flushed, so
    /// the space of what they delete can come back).
    deletes: AtomicU64,
    /// Per partition (keys routed by [`crate::options::partition_of`]), the
    /// bytes its entries would take in a table, counting every
    /// version written (an overwritten key counts twice: an upper bound,
    /// which is what a flush threshold needs).
    part_bytes: Vec<AtomicUsize>,
}

/// Most range deletes a memtable keeps outside its fragments: a read
/// checks these one by one.
const LOOSE_RANGE_DELS: usize = 64;

/// A memtable's range deletes: all of them, as fragments plus the newest
/// few not yet fragmented. Re-fragmenting on every range delete would
/// cost the next read a sort of them all; this way a range delete costs
/// a rebuild only once per [`LOOSE_RANGE_DELS`], and a read a binary
/// search plus at most that many comparisons.
#[derive(Default)]
struct MemDels {
    all: Vec<RangeDel>,
    base: Arc<Fragments>,
    loose: Arc<Vec<RangeDel>>,
}

impl MemDels {
    fn push(&mut self, d: RangeDel) {
        self.all.push(d.clone());
        if self.loose.len() >= LOOSE_RANGE_DELS {
            self.base = Arc::new(Fragments::build(&self.all));
            self.loose = Arc::new(Vec::new());
        } else {
            let mut loose = Vec::with_capacity(self.loose.len() + 1);
            loose.extend(self.loose.iter().cloned());
            loose.push(d);
            self.loose = Arc::new(loose);
        }
    }
}

/// A key, the sequence number of its version, and the value (`None`: deleted).
pub type Entry = (Vec<u8>, u64, Option<Vec<u8>>);

impl Memtable {
    #[cfg(test)]
    pub fn new(id: u64) -> Self {
        Self::with_partitions(id, 1, 64 << 10)
    }

    /// A memtable shared by `partitions` partitions, to be rotated once
    /// it holds about `budget` bytes (which sizes its filter).
    pub fn with_partitions(id: u64, partitions: usize, budget: usize) -> Self {
        // Entries take ~128 bytes or more with their node: sixteen bits of
        // filter per 128 bytes of budget.
        let words = (budget / 8 / 64).next_power_of_two().clamp(8, 1 << 20);
        Self {
            id,
            map: SkipMap::new(),
            filter: (0..words).map(|_| AtomicU64::new(0)).collect(),
            range_dels: Mutex::new(MemDels::default()),
            any_range_dels: AtomicBool::new(false),
            bytes: AtomicUsize::new(0),
            max_seq: AtomicU64::new(0),
            deletes: AtomicU64::new(0),
            part_bytes: (0..partitions.max(1))
                .map(|_| AtomicUsize::new(0))
                .collect(),
        }
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// Adds a put (`Some`) or a delete (`None`) at `seq`.
    pub fn insert(&self, key: &[u8], seq: u64, value: Option<&[u8]>) {
        let size = key.len() + value.map_or(0, <[u8]>::len) + NODE_OVERHEAD;
        if value.is_none() {
            self.deletes.fetch_add(1, Ordering::Relaxed);
        }
        let part = crate::options::partition_of(key, self.part_bytes.len());
        if let Some(b) = self.part_bytes.get(part) {
            b.fetch_add(
                crate::table::block::entry_len(key, value),
                Ordering::Relaxed,
            );
        }
        for (w, bit) in self.probes(Bloom::hash(key)) {
            if let Some(word) = self.filter.get(w) {
                word.fetch_or(bit, Ordering::Release);
            }
        }
        self.map
            .insert(MemKey::new(key, seq), value.map(<[u8]>::to_vec));
        self.bytes.fetch_add(size, Ordering::Relaxed);
        self.max_seq.fetch_max(seq, Ordering::Relaxed);
    }

    /// Table bytes of partition `p`'s entries (see `part_bytes`).
    /// Records a delete of every key in `start..end` older than `seq`.
    pub fn delete_range(&self, start: &[u8], end: &[u8], seq: u64) {
        self.range_dels.lock().push(RangeDel {
            start: start.to_vec(),
            end: end.to_vec(),
            seq,
            mem: self.id,
        });
        self.any_range_dels.store(true, Ordering::Release);
        self.bytes
            .fetch_add(start.len() + end.len() + NODE_OVERHEAD, Ordering::Relaxed);
        self.max_seq.fetch_max(seq, Ordering::Relaxed);
    }

    /// The range deletes written here.
    pub fn range_dels(&self) -> Vec<RangeDel> {
        self.range_dels.lock().all.clone()
    }

    /// The range deletes written here in the shape reads consult them
    /// (`None` if there are none).
    pub fn range_fragments(&self) -> Option<(Arc<Fragments>, Arc<Vec<RangeDel>>)> {
        if !self.has_range_dels() {
            return None;
        }
        let d = self.range_dels.lock();
        Some((d.base.clone(), d.loose.clone()))
    }

    pub fn has_range_dels(&self) -> bool {
        self.any_range_dels.load(Ordering::Acquire)
    }

    pub fn partition_bytes(&self, p: usize) -> usize {
        self.part_bytes
            .get(p)
            .map_or(0, |b| b.load(Ordering::Relaxed))
    }

    #[cfg(test)]
    /// The newest version of `key` visible at `seq`: `Some(Some(v))` for a
    /// value, `Some(None)` for a delete, `None` if the key is not here.
    pub fn get(&self, key: &[u8], seq: u64) -> Option<Option<Vec<u8>>> {
        self.get_entry(key, Bloom::hash(key), seq).map(|(_, v)| v)
    }

    /// The newest version of `key` at or below `seq`, with its sequence
    /// number (`None` for the value: a delete). `hash` is the key's
    /// [`Bloom::hash`], which a lookup computes once for every memtable
    /// and table it asks.
    pub fn get_entry(&self, key: &[u8], hash: u64, seq: u64) -> Option<(u64, Option<Vec<u8>>)> {
        if !self.may_hold(hash) {
            return None;
        }
        let from = MemKey::new(key, seq);
        let e = self.map.range(from..).next()?;
        (e.key().key.as_slice() == key).then(|| (e.key().seq.0, e.value().clone()))
    }

    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// The filter's two bits for a key of [`Bloom::hash`] `h`: (word,
    /// mask) each.
    fn probes(&self, h: u64) -> [(usize, u64); 2] {
        let words = self.filter.len() as u64;
        let bit = |x: u64| (((x >> 6) % words) as usize, 1u64 << (x & 63));
        [
            bit(h),
            bit(h.rotate_left(32).wrapping_mul(0x9E37_79B9_7F4A_7C15)),
        ]
    }

    /// False when no entry of the key hashing to `hash` was ever inserted.
    fn may_hold(&self, hash: u64) -> bool {
        self.probes(hash).iter().all(|&(w, bit)| {
            self.filter
                .get(w)
                .is_none_or(|word| word.load(Ordering::Acquire) & bit != 0)
        })
    }

    /// Bytes the filter takes (part of the memtable's memory).
    pub fn filter_bytes(&self) -> usize {
        self.filter.len() * 8
    }

    /// No entry and no range delete.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty() && !self.has_range_dels()
    }

    /// Point and range deletes written here.
    pub fn deletes(&self) -> u64 {
        self.deletes.load(Ordering::Relaxed) + u64::from(self.has_range_dels())
    }

    pub fn max_seq(&self) -> u64 {
        self.max_seq.load(Ordering::Relaxed)
    }

    /// Appends to `out` the newest version (at `seq`) of up to `limit`
    /// keys from `start` on, in key order; deletes are `None`.
    pub fn collect_from(&self, start: Bound<&[u8]>, seq: u64, limit: usize, out: &mut Vec<Entry>) {
        let lower = match start {
            Bound::Included(k) => Bound::Included(MemKey::new(k, u64::MAX)),
            Bound::Excluded(k) => Bound::Excluded(MemKey::new(k, 0)),
            Bound::Unbounded => Bound::Unbounded,
        };
        let mut taken = 0;
        for e in self.map.range((lower, Bound::Unbounded)) {
            let MemKey {
                key: k,
                seq: Reverse(s),
                ..
            } = e.key();
            if *s > seq
                || out
                    .last()
                    .is_some_and(|(last, _, _)| last.as_slice() == k.as_slice())
            {
                continue;
            }
            if taken == limit {
                return;
            }
            out.push((k.to_vec(), *s, e.value().clone()));
            taken += 1;
        }
    }

    /// As [`Memtable::collect_from`], downwards from `end`: up to `limit`
    /// keys below (or at) it, each with its newest version at or below
    /// `seq`, in descending key order.
    pub fn collect_before(&self, end: Bound<&[u8]>, seq: u64, limit: usize, out: &mut Vec<Entry>) {
        let upper = match end {
            Bound::Included(k) => Bound::Included(MemKey::new(k, 0)),
            Bound::Excluded(k) => Bound::Excluded(MemKey::new(k, u64::MAX)),
            Bound::Unbounded => Bound::Unbounded,
        };
        // Backwards, a key's versions come oldest first: the last one at
        // or below `seq` is the one to keep.
        let mut pending: Option<(Vec<u8>, u64, Option<Vec<u8>>)> = None;
        let mut taken = 0;
        for e in self.map.range((Bound::Unbounded, upper)).rev() {
            let MemKey {
                key: k,
                seq: Reverse(s),
                ..
            } = e.key();
            if pending
                .as_ref()
                .is_some_and(|(p, _, _)| p.as_slice() != k.as_slice())
            {
                if let Some(p) = pending.take() {
                    out.push(p);
                    taken += 1;
                    if taken == limit {
                        return;
                    }
                }
            }
            if *s <= seq {
                pending = Some((k.to_vec(), *s, e.value().clone()));
            }
        }
        if let Some(p) = pending {
            out.push(p);
        }
    }

    /// Calls `visit` with every key's newest version, in order (for a
    /// flush; the memtable is immutable by then, so `seq` is unlimited).
    /// Keys and values are lent where the skip list holds them: a flush
    /// copies each once, into the table it builds.
    /// Each key's newest version, with its sequence number, in key order.
    pub fn for_each_newest(&self, mut visit: impl FnMut(&[u8], u64, Option<&[u8]>)) {
        let mut last = Vec::new();
        let mut first = true;
        for e in self.map.iter() {
            let k = e.key().key.as_slice();
            if !first && last.as_slice() == k {
                continue;
            }
            first = false;
            last.clear();
            last.extend_from_slice(k);
            visit(k, e.key().seq.0, e.value().as_deref());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Fragments plus the loose newest answer as the tombstones
        /// themselves would, across several re-fragmentations.
        #[test]
        fn range_deletes_read_as_written(
            raw in proptest::collection::vec((0u8..200, 1u8..20), 1..300),
            probes in proptest::collection::vec((0u8..230, 0u64..320, 0u64..320), 1..100),
        ) {
            let m = Memtable::new(1);
            for (seq, &(s, len)) in raw.iter().enumerate() {
                m.delete_range(&[s], &[s.saturating_add(len)], seq as u64 + 1);
            }
            let (base, loose) = m.range_fragments().expect("written");
            prop_assert!(loose.len() < LOOSE_RANGE_DELS + 1);
            for &(k, seq, read_seq) in &probes {
                let dels = crate::range_del::RangeDels::of_sets(
                    vec![base.clone()],
                    vec![loose.clone()],
                    read_seq,
                );
                let want = m.range_dels().iter().any(|d| {
                    d.seq <= read_seq && d.seq > seq && d.start.as_slice() <= &[k][..] && &[k][..] < d.end.as_slice()
                });
                prop_assert_eq!(dels.covers(&[k], seq), want, "key {} seq {} read {}", k, seq, read_seq);
            }
        }

        /// The inline heads order keys exactly as (key bytes, newest
        /// first), zero bytes and lengths on both sides of each word's end
        /// included.
        #[test]
        fn key_order_is_byte_order_then_newest_first(
            a in proptest::collection::vec(0u8..3, 0..20),
            b in proptest::collection::vec(0u8..3, 0..20),
            sa in 0u64..3,
            sb in 0u64..3,
        ) {
            let want = (a.clone(), Reverse(sa)).cmp(&(b.clone(), Reverse(sb)));
            prop_assert_eq!(MemKey::new(&a, sa).cmp(&MemKey::new(&b, sb)), want);
        }
    }

    #[test]
    fn versions_are_seen_by_sequence() {
        let m = Memtable::new(1);
        m.insert(b"a", 1, Some(b"1"));
        m.insert(b"a", 3, Some(b"3"));
        m.insert(b"b", 2, None);
        assert_eq!(m.get(b"a", 2), Some(Some(b"1".to_vec())));
        assert_eq!(m.get(b"a", 5), Some(Some(b"3".to_vec())));
        assert_eq!(m.get(b"a", 0), None);
        assert_eq!(m.get(b"b", 2), Some(None));
        assert_eq!(m.get(b"c", 9), None);
        let mut out = Vec::new();
        m.collect_from(Bound::Unbounded, 9, 10, &mut out);
        assert_eq!(
            out,
            vec![
                (b"a".to_vec(), 3, Some(b"3".to_vec())),
                (b"b".to_vec(), 2, None)
            ]
        );
        out.clear();
        m.collect_from(Bound::Excluded(b"a"), 9, 10, &mut out);
        assert_eq!(out, vec![(b"b".to_vec(), 2, None)]);
        out.clear();
        m.collect_before(Bound::Unbounded, 2, 10, &mut out);
        assert_eq!(
            out,
            vec![
                (b"b".to_vec(), 2, None),
                (b"a".to_vec(), 1, Some(b"1".to_vec()))
            ]
        );
        out.clear();
        m.collect_before(Bound::Excluded(b"b"), 9, 10, &mut out);
        assert_eq!(out, vec![(b"a".to_vec(), 3, Some(b"3".to_vec()))]);
        out.clear();
        m.collect_before(Bound::Included(b"b"), 9, 1, &mut out);
        assert_eq!(out, vec![(b"b".to_vec(), 2, None)]);
        let mut all = Vec::new();
        m.for_each_newest(|k, _, v| all.push((k.to_vec(), v.map(<[u8]>::to_vec))));
        assert_eq!(
            all,
            vec![(b"a".to_vec(), Some(b"3".to_vec())), (b"b".to_vec(), None)]
        );
        assert_eq!(m.max_seq(), 3);
    }
}
