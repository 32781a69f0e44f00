//! Merging sorted sources into one sorted stream, newest version first.
//!
//! A [`Source`] yields each of its keys once, ascending, with a value or a
//! delete. [`Merge`] takes sources ordered newest first and yields every
//! key once with the version of the newest source holding it; scans and
//! compactions are both built on it. Sources: a memtable at a sequence
//! number ([`MemSource`]), one table ([`crate::table::TableIter`]), or a
//! level's tables end to end ([`LevelIter`]).

use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::Arc;

use ferrite_core::Result;

use crate::memtable::Memtable;
use crate::table::{Table, TableIter};

/// A key and its newest version (`None`: deleted).
pub type Entry = (Vec<u8>, Option<Vec<u8>>);

pub trait Source {
    fn peek(&self) -> Option<(&[u8], Option<&[u8]>)>;
    fn advance(&mut self) -> Result<()>;
}

impl Source for TableIter {
    fn peek(&self) -> Option<(&[u8], Option<&[u8]>)> {
        TableIter::peek(self)
    }
    fn advance(&mut self) -> Result<()> {
        TableIter::advance(self)
    }
}

/// Which of a memtable's keys a source yields.
pub type KeyFilter = Box<dyn Fn(&[u8]) -> bool + Send>;

/// A memtable's newest versions at a sequence number, fetched in chunks so
/// the source owns what it yields; optionally only the keys a filter keeps
/// (a flush buffer's memtable, whose other partitions are in tables).
pub struct MemSource {
    mem: Arc<Memtable>,
    seq: u64,
    buf: VecDeque<Entry>,
    /// The last key fetched, kept or not: where the next chunk starts.
    last: Option<Vec<u8>>,
    done: bool,
    keep: Option<KeyFilter>,
}

const MEM_CHUNK: usize = 256;

impl MemSource {
    pub fn new(mem: Arc<Memtable>, seq: u64, start: Bound<&[u8]>) -> Self {
        Self::filtered(mem, seq, start, None)
    }

    /// A source yielding only the keys `keep` accepts.
    pub fn filtered(
        mem: Arc<Memtable>,
        seq: u64,
        start: Bound<&[u8]>,
        keep: Option<KeyFilter>,
    ) -> Self {
        let mut s = Self {
            mem,
            seq,
            buf: VecDeque::new(),
            last: None,
            done: false,
            keep,
        };
        s.fill(start);
        s
    }

    /// Fetches chunks from `from` until one yields a kept key or the
    /// memtable ends.
    fn fill(&mut self, from: Bound<&[u8]>) {
        let mut out = Vec::with_capacity(MEM_CHUNK);
        self.mem.collect_from(from, self.seq, MEM_CHUNK, &mut out);
        loop {
            self.done = out.len() < MEM_CHUNK;
            self.last = out.last().map(|(k, _)| k.clone());
            match &self.keep {
                Some(keep) => self.buf.extend(out.drain(..).filter(|(k, _)| keep(k))),
                None => self.buf.extend(out.drain(..)),
            }
            if !self.buf.is_empty() || self.done {
                return;
            }
            let Some(last) = self.last.take() else {
                return;
            };
            self.mem
                .collect_from(Bound::Excluded(&last), self.seq, MEM_CHUNK, &mut out);
        }
    }
}

impl Source for MemSource {
    fn peek(&self) -> Option<(&[u8], Option<&[u8]>)> {
        self.buf.front().map(|(k, v)| (k.as_slice(), v.as_deref()))
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

/// A level's tables (disjoint, ascending) read end to end.
pub struct LevelIter {
    tables: Vec<Arc<Table>>,
    next: usize,
    cur: Option<TableIter>,
    /// Tables are read with readahead, around the block cache
    /// ([`TableIter::sequential`]).
    sequential: bool,
}

impl LevelIter {
    /// From the first entry `>= start`, through the block cache.
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
        };
        it.open_next(start)?;
        Ok(it)
    }

    /// Every entry, each table read once with readahead (compactions).
    pub fn sequential(tables: Vec<Arc<Table>>) -> Result<Self> {
        let mut it = Self {
            tables,
            next: 0,
            cur: None,
            sequential: true,
        };
        it.open_next(None)?;
        Ok(it)
    }

    /// Opens tables from `next` until one has an entry.
    fn open_next(&mut self, start: Option<&[u8]>) -> Result<()> {
        self.cur = None;
        while let Some(t) = self.tables.get(self.next) {
            self.next += 1;
            let it = if self.sequential {
                TableIter::sequential(t.clone())?
            } else {
                TableIter::new(t.clone(), start)?
            };
            if it.peek().is_some() {
                self.cur = Some(it);
                return Ok(());
            }
        }
        Ok(())
    }
}

impl Source for LevelIter {
    fn peek(&self) -> Option<(&[u8], Option<&[u8]>)> {
        self.cur.as_ref()?.peek()
    }
    fn advance(&mut self) -> Result<()> {
        if let Some(c) = &mut self.cur {
            c.advance()?;
            if c.peek().is_none() {
                self.open_next(None)?;
            }
        }
        Ok(())
    }
}

/// Sources merged; index 0 is the newest. A binary heap of source indices,
/// ordered by each source's current key (ties by index, so the newest
/// comes first), keeps a merge over many partitions and levels
/// logarithmic per entry. Each source's current key is copied into a
/// buffer of the merge's, reused from key to key, so the heap compares
/// plain byte strings and moving an entry through the merge allocates
/// nothing.
///
/// Invariants: `heap` holds exactly the sources with a current key;
/// `keys[i]` is source `i`'s current key while `i` is in the heap; every
/// parent's `(key, index)` is below its children's.
pub struct Merge {
    sources: Vec<Box<dyn Source>>,
    keys: Vec<Vec<u8>>,
    heap: Vec<usize>,
}

impl Merge {
    pub fn new(sources: Vec<Box<dyn Source>>) -> Self {
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
        };
        for at in (0..m.heap.len() / 2).rev() {
            m.sift_down(at);
        }
        m
    }

    /// Source `i`'s current key (meaningful while `i` is in the heap).
    fn key(&self, i: usize) -> &[u8] {
        self.keys.get(i).map_or(&[], Vec::as_slice)
    }

    /// Whether source `a`'s current key comes before source `b`'s.
    fn before(&self, a: usize, b: usize) -> bool {
        match self.key(a).cmp(self.key(b)) {
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

    /// Moves the source at the top of the heap past its key. Its next key
    /// is usually still the smallest (sources hold runs), so the sift
    /// mostly stops at the first comparison with the children.
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

    /// The smallest key any source holds, with the newest source's version
    /// of it, copied into `key` and `value`; every source is moved past
    /// that key. `Some(false)`: the newest version is a delete (`value` is
    /// left empty); `None`: every source is done.
    pub fn next_into(&mut self, key: &mut Vec<u8>, value: &mut Vec<u8>) -> Result<Option<bool>> {
        let Some((k, v)) = self
            .heap
            .first()
            .and_then(|&top| self.sources.get(top))
            .and_then(|s| s.peek())
        else {
            return Ok(None);
        };
        key.clear();
        key.extend_from_slice(k);
        value.clear();
        let live = v.is_some();
        value.extend_from_slice(v.unwrap_or_default());
        self.advance_top()?;
        // Older versions of the key sit at the top now, newest first.
        while let Some(&top) = self.heap.first() {
            if self.key(top) != key.as_slice() {
                break;
            }
            self.advance_top()?;
        }
        Ok(Some(live))
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

    #[test]
    fn newest_source_wins_and_keys_come_once() {
        let mut m = Merge::new(vec![
            src(&[("b", Some("new")), ("d", None)]),
            src(&[("a", Some("1")), ("b", Some("old")), ("d", Some("4"))]),
            src(&[("c", Some("3"))]),
        ]);
        let mut got = Vec::new();
        let (mut k, mut v) = (Vec::new(), Vec::new());
        while let Some(live) = m.next_into(&mut k, &mut v).unwrap() {
            got.push((
                String::from_utf8(k.clone()).unwrap(),
                live.then(|| String::from_utf8(v.clone()).unwrap()),
            ));
        }
        let want: Vec<(String, Option<String>)> = vec![
            ("a".into(), Some("1".into())),
            ("b".into(), Some("new".into())),
            ("c".into(), Some("3".into())),
            ("d".into(), None),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn a_filtered_source_skips_whole_chunks_it_does_not_keep() {
        let mem = Arc::new(Memtable::new(0));
        for i in 0..3000u32 {
            mem.insert(&i.to_be_bytes(), i as u64 + 1, Some(b"v"));
        }
        // Kept keys are far apart: most chunks of MEM_CHUNK keys hold none.
        let keep: KeyFilter =
            Box::new(|k: &[u8]| u32::from_be_bytes(k.try_into().unwrap_or([0; 4])) % 700 == 3);
        let mut s = MemSource::filtered(mem, u64::MAX, Bound::Unbounded, Some(keep));
        let mut got = Vec::new();
        while let Some((k, _)) = s.peek() {
            got.push(u32::from_be_bytes(k.try_into().unwrap()));
            s.advance().unwrap();
        }
        assert_eq!(got, vec![3, 703, 1403, 2103, 2803]);
    }

    #[test]
    fn memtable_source_pages_through_chunks() {
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
            n += 1;
            s.advance().unwrap();
        }
        assert_eq!(n, 1000);
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
            let mut m = Merge::new(
                sources
                    .into_iter()
                    .map(|s| Box::new(VecSource(s.into_iter().collect())) as Box<dyn Source>)
                    .collect(),
            );
            let mut got = std::collections::BTreeMap::new();
            let (mut k, mut v) = (Vec::new(), Vec::new());
            let mut last: Option<Vec<u8>> = None;
            while let Some(live) = m.next_into(&mut k, &mut v).unwrap() {
                proptest::prop_assert!(last.as_ref().is_none_or(|l| *l < k), "keys ascend, each once");
                last = Some(k.clone());
                got.insert(k.clone(), live.then(|| v.clone()));
            }
            proptest::prop_assert_eq!(got, want);
        }
    }
}
