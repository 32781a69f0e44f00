//! Merging sorted sources into one sorted stream, newest version first.
//!
//! A [`Source`] yields each of its keys once, in one direction (ascending,
//! or descending for reverse scans), with a value or a delete and the
//! sequence number range deletes judge it by (a memtable entry's own; a
//! table's largest). [`Merge`] takes sources ordered newest first and
//! yields every key once with the version of the newest source holding
//! it; scans and compactions are both built on it. Sources: a memtable at
//! a sequence number ([`MemSource`]), one table
//! ([`crate::table::TableIter`]), or a level's tables end to end
//! ([`LevelIter`]).

use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::Arc;

use ferrite_core::Result;

use crate::memtable::Memtable;
use crate::table::{Table, TableIter};

/// A key, the sequence number of its newest version, and the version
/// (`None`: deleted).
pub type Entry = (Vec<u8>, u64, Option<Vec<u8>>);

pub trait Source {
    fn peek(&self) -> Option<(&[u8], Option<&[u8]>)>;
    /// The sequence number of the entry `peek` shows.
    fn seq(&self) -> u64;
    fn advance(&mut self) -> Result<()>;
}

impl Source for TableIter {
    fn peek(&self) -> Option<(&[u8], Option<&[u8]>)> {
        TableIter::peek(self)
    }
    fn seq(&self) -> u64 {
        TableIter::seq(self)
    }
    fn advance(&mut self) -> Result<()> {
        TableIter::advance(self)
    }
}

/// Keeps a key (with partitions: whether the key's partition is wanted).
pub type KeyFilter = Box<dyn Fn(&[u8]) -> bool + Send>;

/// A memtable as seen at one sequence number: each key's newest version
/// at or below it, read a chunk at a time so the skip list is never held
/// across a merge step. Chunks start small and double: a scan that stops
/// after a few keys (a seek, a short range) copies a few, and a long one
/// soon copies [`MEM_CHUNK`] at a time.
pub struct MemSource {
    mem: Arc<Memtable>,
    seq: u64,
    /// Keys the next chunk copies.
    chunk: usize,
    buf: VecDeque<Entry>,
    last: Option<Vec<u8>>,
    done: bool,
    keep: Option<KeyFilter>,
    rev: bool,
}

/// Keys a memtable source copies out at a time, at most.
const MEM_CHUNK: usize = 256;

/// Keys a memtable source's first chunk copies.
const FIRST_CHUNK: usize = 4;

impl MemSource {
    /// Ascending from `start`.
    pub fn new(mem: Arc<Memtable>, seq: u64, start: Bound<&[u8]>) -> Self {
        Self::filtered(mem, seq, start, None)
    }

    /// Ascending from `start`, only the keys `keep` keeps.
    pub fn filtered(
        mem: Arc<Memtable>,
        seq: u64,
        start: Bound<&[u8]>,
        keep: Option<KeyFilter>,
    ) -> Self {
        Self::with_direction(mem, seq, start, keep, false)
    }

    /// Descending from `end`, only the keys `keep` keeps.
    pub fn rev(mem: Arc<Memtable>, seq: u64, end: Bound<&[u8]>, keep: Option<KeyFilter>) -> Self {
        Self::with_direction(mem, seq, end, keep, true)
    }

    fn with_direction(
        mem: Arc<Memtable>,
        seq: u64,
        from: Bound<&[u8]>,
        keep: Option<KeyFilter>,
        rev: bool,
    ) -> Self {
        let mut s = Self {
            mem,
            seq,
            chunk: FIRST_CHUNK,
            buf: VecDeque::new(),
            last: None,
            done: false,
            keep,
            rev,
        };
        s.fill(from);
        s
    }

    /// Copies the next chunk; the chunk after it is twice as large.
    fn collect(&mut self, from: Bound<&[u8]>, out: &mut Vec<Entry>) -> usize {
        let n = self.chunk;
        self.chunk = (self.chunk * 2).min(MEM_CHUNK);
        if self.rev {
            self.mem.collect_before(from, self.seq, n, out);
        } else {
            self.mem.collect_from(from, self.seq, n, out);
        }
        n
    }

    /// Refills the buffer from `from` on; chunks whose keys the filter
    /// drops are skipped until one holds a kept key or the memtable ends.
    fn fill(&mut self, from: Bound<&[u8]>) {
        let mut out = Vec::with_capacity(self.chunk);
        let mut asked = self.collect(from, &mut out);
        loop {
            self.done = out.len() < asked;
            self.last = out.last().map(|(k, _, _)| k.clone());
            match &self.keep {
                Some(keep) => self.buf.extend(out.drain(..).filter(|(k, _, _)| keep(k))),
                None => self.buf.extend(out.drain(..)),
            }
            if !self.buf.is_empty() || self.done {
                return;
            }
            let Some(last) = self.last.take() else {
                return;
            };
            asked = self.collect(Bound::Excluded(&last), &mut out);
        }
    }
}

impl Source for MemSource {
    fn peek(&self) -> Option<(&[u8], Option<&[u8]>)> {
        self.buf
            .front()
            .map(|(k, _, v)| (k.as_slice(), v.as_deref()))
    }
    fn seq(&self) -> u64 {
        self.buf.front().map_or(0, |e| e.1)
    }
    fn advance(&mut self) -> Result<()> {
        self.buf.pop_front();
        if self.buf.is_empty() && !self.done {
            if let Some(last) = self.last.take() {
                self.fill(Bound::Excluded(&last));
            }
        }
        Ok(())
    }
}

/// A level's tables (sorted, disjoint) end to end, each opened when the
/// walk reaches it. A sequential walk (a compaction's) lets go of each
/// table as it leaves it, so a compaction that installs as it goes frees
/// the inputs it has passed.
pub struct LevelIter {
    /// Sequential: the tables not yet opened, last first (taken with
    /// `pop`). Otherwise: the level's tables in key order.
    tables: Vec<Arc<Table>>,
    /// The next table to open: an index into `tables`, counted from the
    /// end when walking downwards (unused when sequential).
    next: usize,
    cur: Option<TableIter>,
    sequential: bool,
    rev: bool,
}

impl LevelIter {
    /// Ascending from `start`, through the block cache.
    pub fn new(tables: Vec<Arc<Table>>, start: Option<&[u8]>) -> Result<Self> {
        let first = match start {
            Some(k) => tables.partition_point(|t| t.largest() < k),
            None => 0,
        };
        let mut it = Self {
            tables,
            next: first,
            cur: None,
            sequential: false,
            rev: false,
        };
        it.open_next(start.map_or(Bound::Unbounded, Bound::Included))?;
        Ok(it)
    }

    /// Descending from `end`, through the block cache.
    pub fn new_rev(tables: Vec<Arc<Table>>, end: Bound<&[u8]>) -> Result<Self> {
        // Tables wholly above `end` are skipped.
        let above = match end {
            Bound::Included(k) | Bound::Excluded(k) => {
                tables.len() - tables.partition_point(|t| t.smallest() <= k)
            }
            Bound::Unbounded => 0,
        };
        let mut it = Self {
            tables,
            next: above,
            cur: None,
            sequential: false,
            rev: true,
        };
        it.open_next(end)?;
        Ok(it)
    }

    /// Every entry, ascending, with readahead (compactions).
    pub fn sequential(mut tables: Vec<Arc<Table>>) -> Result<Self> {
        tables.reverse();
        let mut it = Self {
            tables,
            next: 0,
            cur: None,
            sequential: true,
            rev: false,
        };
        it.open_next(Bound::Unbounded)?;
        Ok(it)
    }

    /// Opens the next table holding an entry from `from` on.
    fn open_next(&mut self, from: Bound<&[u8]>) -> Result<()> {
        self.cur = None;
        loop {
            if self.sequential {
                let Some(t) = self.tables.pop() else {
                    return Ok(());
                };
                let it = TableIter::sequential(t)?;
                if it.peek().is_some() {
                    self.cur = Some(it);
                    return Ok(());
                }
                continue;
            }
            let at = if self.rev {
                self.tables.len().checked_sub(self.next + 1)
            } else {
                Some(self.next)
            };
            let Some(t) = at.and_then(|i| self.tables.get(i)) else {
                return Ok(());
            };
            self.next += 1;
            let it = if self.rev {
                TableIter::new_rev(t.clone(), from)?
            } else {
                let start = match from {
                    Bound::Included(k) | Bound::Excluded(k) => Some(k),
                    Bound::Unbounded => None,
                };
                TableIter::new(t.clone(), start)?
            };
            if it.peek().is_some() {
                self.cur = Some(it);
                return Ok(());
            }
        }
    }
}

impl Source for LevelIter {
    fn peek(&self) -> Option<(&[u8], Option<&[u8]>)> {
        self.cur.as_ref()?.peek()
    }
    fn seq(&self) -> u64 {
        self.cur.as_ref().map_or(0, TableIter::seq)
    }
    fn advance(&mut self) -> Result<()> {
        if let Some(c) = &mut self.cur {
            c.advance()?;
            if c.peek().is_none() {
                self.open_next(Bound::Unbounded)?;
            }
        }
        Ok(())
    }
}

/// Sources merged newest first: a heap of source indexes by their current
/// key (ascending, or descending for a reverse merge), ties to the newer.
pub struct Merge {
    sources: Vec<Box<dyn Source>>,
    /// Each source's current key, copied so the heap compares without
    /// borrowing the sources.
    keys: Vec<Vec<u8>>,
    heap: Vec<usize>,
    rev: bool,
}

impl Merge {
    /// Ascending: `sources` newest first, each ascending.
    pub fn new(sources: Vec<Box<dyn Source>>) -> Self {
        Self::with_direction(sources, false)
    }

    /// Descending: `sources` newest first, each descending.
    pub fn new_rev(sources: Vec<Box<dyn Source>>) -> Self {
        Self::with_direction(sources, true)
    }

    fn with_direction(sources: Vec<Box<dyn Source>>, rev: bool) -> Self {
        let keys: Vec<Vec<u8>> = sources
            .iter()
            .map(|s| s.peek().map_or_else(Vec::new, |(k, _)| k.to_vec()))
            .collect();
        let heap = (0..sources.len())
            .filter(|&i| sources.get(i).is_some_and(|s| s.peek().is_some()))
            .collect();
        let mut m = Self {
            sources,
            keys,
            heap,
            rev,
        };
        for at in (0..m.heap.len() / 2).rev() {
            m.sift_down(at);
        }
        m
    }

    fn key(&self, i: usize) -> &[u8] {
        self.keys.get(i).map_or(&[], Vec::as_slice)
    }

    /// Whether source `a`'s entry comes out before source `b`'s.
    fn before(&self, a: usize, b: usize) -> bool {
        let ord = self.key(a).cmp(self.key(b));
        let ord = if self.rev { ord.reverse() } else { ord };
        match ord {
            std::cmp::Ordering::Less => true,
            std::cmp::Ordering::Greater => false,
            std::cmp::Ordering::Equal => a < b,
        }
    }

    fn sift_down(&mut self, mut at: usize) {
        let n = self.heap.len();
        loop {
            let left = 2 * at + 1;
            if left >= n {
                return;
            }
            let right = left + 1;
            let child = if right < n && self.before(self.heap[right], self.heap[left]) {
                right
            } else {
                left
            };
            if !self.before(self.heap[child], self.heap[at]) {
                return;
            }
            self.heap.swap(child, at);
            at = child;
        }
    }

    fn advance_top(&mut self) -> Result<()> {
        let Some(&i) = self.heap.first() else {
            return Ok(());
        };
        let mut more = false;
        if let (Some(s), Some(key)) = (self.sources.get_mut(i), self.keys.get_mut(i)) {
            s.advance()?;
            if let Some((k, _)) = s.peek() {
                key.clear();
                key.extend_from_slice(k);
                more = true;
            }
        }
        if !more {
            self.heap.swap_remove(0);
        }
        self.sift_down(0);
        Ok(())
    }

    /// The next key and its newest version into `key` and `value`;
    /// `Some((live, seq))`: whether it is a value (not a delete), and its
    /// sequence number (see [`Source::seq`]); `None` at the end.
    pub fn next_into(
        &mut self,
        key: &mut Vec<u8>,
        value: &mut Vec<u8>,
    ) -> Result<Option<(bool, u64)>> {
        let Some(top) = self.heap.first().copied() else {
            return Ok(None);
        };
        let Some(s) = self.sources.get(top) else {
            return Ok(None);
        };
        let Some((k, v)) = s.peek() else {
            return Ok(None);
        };
        let seq = s.seq();
        key.clear();
        key.extend_from_slice(k);
        value.clear();
        let live = v.is_some();
        value.extend_from_slice(v.unwrap_or_default());
        self.advance_top()?;
        while let Some(&top) = self.heap.first() {
            if self.key(top) != key.as_slice() {
                break;
            }
            self.advance_top()?;
        }
        Ok(Some((live, seq)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct VecSource(VecDeque<(Vec<u8>, Option<Vec<u8>>)>);

    impl Source for VecSource {
        fn peek(&self) -> Option<(&[u8], Option<&[u8]>)> {
            self.0.front().map(|(k, v)| (k.as_slice(), v.as_deref()))
        }
        fn seq(&self) -> u64 {
            0
        }
        fn advance(&mut self) -> Result<()> {
            self.0.pop_front();
            Ok(())
        }
    }

    fn src(items: &[(&str, Option<&str>)]) -> Box<dyn Source> {
        Box::new(VecSource(
            items
                .iter()
                .map(|(k, v)| (k.as_bytes().to_vec(), v.map(|v| v.as_bytes().to_vec())))
                .collect(),
        ))
    }

    fn drain(mut m: Merge) -> Vec<(String, Option<String>)> {
        let mut got = Vec::new();
        let (mut k, mut v) = (Vec::new(), Vec::new());
        while let Some((live, _)) = m.next_into(&mut k, &mut v).unwrap() {
            got.push((
                String::from_utf8(k.clone()).unwrap(),
                live.then(|| String::from_utf8(v.clone()).unwrap()),
            ));
        }
        got
    }

    #[test]
    fn newest_source_wins_and_keys_come_once() {
        let m = Merge::new(vec![
            src(&[("b", Some("new")), ("d", None)]),
            src(&[("a", Some("1")), ("b", Some("old")), ("d", Some("4"))]),
            src(&[("c", Some("3"))]),
        ]);
        let want: Vec<(String, Option<String>)> = vec![
            ("a".into(), Some("1".into())),
            ("b".into(), Some("new".into())),
            ("c".into(), Some("3".into())),
            ("d".into(), None),
        ];
        assert_eq!(drain(m), want);
        let m = Merge::new_rev(vec![
            src(&[("d", None), ("b", Some("new"))]),
            src(&[("d", Some("4")), ("b", Some("old")), ("a", Some("1"))]),
            src(&[("c", Some("3"))]),
        ]);
        let mut rev = want;
        rev.reverse();
        assert_eq!(drain(m), rev);
    }

    #[test]
    fn a_filtered_source_skips_whole_chunks_it_does_not_keep() {
        let mem = Arc::new(Memtable::new(0));
        for i in 0..3000u32 {
            mem.insert(&i.to_be_bytes(), i as u64 + 1, Some(b"v"));
        }
        // Kept keys are far apart: most chunks of MEM_CHUNK keys hold none.
        let keep = || -> KeyFilter {
            Box::new(|k: &[u8]| u32::from_be_bytes(k.try_into().unwrap_or([0; 4])) % 700 == 3)
        };
        let mut s = MemSource::filtered(mem.clone(), u64::MAX, Bound::Unbounded, Some(keep()));
        let mut got = Vec::new();
        while let Some((k, _)) = s.peek() {
            got.push(u32::from_be_bytes(k.try_into().unwrap()));
            s.advance().unwrap();
        }
        assert_eq!(got, vec![3, 703, 1403, 2103, 2803]);
        let mut s = MemSource::rev(mem, u64::MAX, Bound::Unbounded, Some(keep()));
        let mut got = Vec::new();
        while let Some((k, _)) = s.peek() {
            got.push(u32::from_be_bytes(k.try_into().unwrap()));
            s.advance().unwrap();
        }
        assert_eq!(got, vec![2803, 2103, 1403, 703, 3]);
    }

    #[test]
    fn memtable_source_pages_through_chunks_both_ways() {
        let mem = Arc::new(Memtable::new(0));
        for i in 0..1000u32 {
            mem.insert(&i.to_be_bytes(), i as u64 + 1, Some(b"v"));
        }
        mem.insert(&5u32.to_be_bytes(), 5000, None);
        let mut s = MemSource::new(mem.clone(), 1000, Bound::Unbounded);
        let mut n = 0u32;
        while let Some((k, v)) = s.peek() {
            assert_eq!(k, n.to_be_bytes());
            assert!(
                v.is_some(),
                "the delete is newer than the source's sequence"
            );
            assert_eq!(s.seq(), u64::from(n) + 1);
            n += 1;
            s.advance().unwrap();
        }
        assert_eq!(n, 1000);
        let mut s = MemSource::rev(mem, u64::MAX, Bound::Excluded(&500u32.to_be_bytes()), None);
        let mut n = 500u32;
        while let Some((k, v)) = s.peek() {
            n -= 1;
            assert_eq!(k, n.to_be_bytes());
            assert_eq!(v.is_none(), n == 5, "the newest version, the delete");
            s.advance().unwrap();
        }
        assert_eq!(n, 0);
    }

    proptest::proptest! {
        #[test]
        fn every_key_comes_once_with_its_newest_version(
            sources in proptest::collection::vec(
                proptest::collection::btree_map(
                    proptest::collection::vec(0u8..4, 0..4),
                    proptest::option::of(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..3)),
                    0..12,
                ),
                0..7,
            ),
        ) {
            let mut want = std::collections::BTreeMap::new();
            for s in sources.iter().rev() {
                want.extend(s.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            let boxed = |rev: bool| -> Vec<Box<dyn Source>> {
                sources
                    .iter()
                    .map(|s| {
                        let mut v: VecDeque<_> = s.clone().into_iter().collect();
                        if rev {
                            v = v.into_iter().rev().collect();
                        }
                        Box::new(VecSource(v)) as Box<dyn Source>
                    })
                    .collect()
            };
            for rev in [false, true] {
                let mut m = if rev { Merge::new_rev(boxed(true)) } else { Merge::new(boxed(false)) };
                let mut got = Vec::new();
                let (mut k, mut v) = (Vec::new(), Vec::new());
                while let Some((live, _)) = m.next_into(&mut k, &mut v).unwrap() {
                    got.push((k.clone(), live.then(|| v.clone())));
                }
                let mut expect: Vec<_> = want.clone().into_iter().collect();
                if rev {
                    expect.reverse();
                }
                proptest::prop_assert_eq!(got, expect);
            }
        }
    }
}
