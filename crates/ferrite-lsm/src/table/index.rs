//! Index blocks: how a table finds the block (and slot) of a key.
//!
//! Two encodings (spec: `docs/format/sstable.md`):
//! - [`SparseIndex`]: per data block a separator key (≥ the block's last
//!   key, < the next block's first, shortened as LevelDB does) and the
//!   block's first page; a lookup binary-searches the separators, then the
//!   block.
//! - [`LearnedIndex`]: a [`BoundedModel`] from a key's projection to its
//!   entry *ordinal* in the table, plus the map from ordinals to blocks.
//!   When every entry has the same size (fixed-size keys and values) the
//!   map is arithmetic (`ordinal / entries_per_page`) and costs nothing;
//!   otherwise it is one `(first ordinal, first page)` pair per block.
//!   Optional [`Thresholds`] (one byte per block boundary) say which block
//!   of a window that spans several holds a key, so a lookup reads one.
//!   Bourbon's variant has the same encoding under its own kind byte: its
//!   lookups search the predicted block whole.
//!
//! Both give every block's page range, which scans use to walk the table.
//! Decoders never panic and check that the directory is ordered and lies
//! inside the table's data pages.

use ferrite_learned::{BoundedModel, KeyProjection, Window};

use super::thresholds::{Layout, Thresholds};

/// Where a table's data blocks are.
#[derive(Debug, Clone, PartialEq)]
pub enum BlockMap {
    /// Every block is one page holding `per_page` entries (the last may
    /// hold fewer).
    Fixed { per_page: u32, entries: u64 },
    /// Block `b` starts at ordinal `first[b]` and page `page[b]`.
    Variable { first: Vec<u32>, page: Vec<u32> },
}

#[derive(Debug, Clone, PartialEq)]
pub struct SparseIndex {
    pub separators: Vec<Vec<u8>>,
    pub page: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LearnedIndex {
    pub map: BlockMap,
    pub projection: KeyProjection,
    pub model: BoundedModel,
    /// Bourbon's lookup: the model picks the block, a binary search over
    /// the whole block finds the entry (kind [`KIND_BOURBON`]); otherwise
    /// the search stays in the model's window.
    pub whole_block: bool,
    /// Which block of a window holds a key (absent in tables written
    /// before thresholds, and where no window spans two blocks).
    pub thresholds: Option<Thresholds>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Index {
    Sparse(SparseIndex),
    Learned(LearnedIndex),
}

pub const KIND_SPARSE: u8 = 0;
pub const KIND_LEARNED: u8 = 1;
/// The learned encoding, searched Bourbon's way.
pub const KIND_BOURBON: u8 = 2;

impl Index {
    pub fn kind_byte(&self) -> u8 {
        match self {
            Index::Sparse(_) => KIND_SPARSE,
            Index::Learned(l) if l.whole_block => KIND_BOURBON,
            Index::Learned(_) => KIND_LEARNED,
        }
    }

    pub fn is_learned(&self) -> bool {
        matches!(self, Index::Learned(_))
    }

    /// Number of data blocks.
    pub fn block_count(&self, data_pages: u32) -> usize {
        match self {
            Index::Sparse(s) => s.page.len(),
            Index::Learned(l) => l.block_count(data_pages),
        }
    }

    /// First page and page count of block `b`.
    pub fn block_pages(&self, b: usize, data_pages: u32) -> Option<(u32, u32)> {
        let pages: &[u32] = match self {
            Index::Sparse(s) => &s.page,
            Index::Learned(l) => match &l.map {
                BlockMap::Fixed { .. } => {
                    return (b < data_pages as usize).then_some((b as u32, 1));
                }
                BlockMap::Variable { page, .. } => page,
            },
        };
        let start = *pages.get(b)?;
        let end = pages.get(b + 1).copied().unwrap_or(data_pages);
        Some((start, end.checked_sub(start)?))
    }

    /// Segments of the learned model (0 for a sparse index).
    pub fn model_segments(&self) -> usize {
        match self {
            Index::Learned(l) => l.model.segment_count(),
            Index::Sparse(_) => 0,
        }
    }

    /// Bytes the encoded index takes (what a table builder weighs a model
    /// against the sparse index by, and what index-size reports compare).
    pub fn encoded_len(&self) -> usize {
        let mut v = Vec::new();
        self.encode(&mut v);
        v.len()
    }

    /// Bytes held in memory.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + match self {
                Index::Sparse(s) => {
                    s.separators
                        .iter()
                        .map(|k| k.capacity() + 24)
                        .sum::<usize>()
                        + s.separators.capacity() * 24
                        + s.page.capacity() * 4
                }
                Index::Learned(l) => {
                    l.model.memory_bytes()
                        + l.projection.memory_bytes()
                        + l.thresholds.as_ref().map_or(0, Thresholds::memory_bytes)
                        + match &l.map {
                            BlockMap::Fixed { .. } => 0,
                            BlockMap::Variable { first, page } => {
                                (first.capacity() + page.capacity()) * 4
                            }
                        }
                }
            }
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Index::Sparse(s) => {
                out.extend_from_slice(&(s.page.len() as u32).to_le_bytes());
                for (k, p) in s.separators.iter().zip(&s.page) {
                    out.extend_from_slice(&p.to_le_bytes());
                    out.extend_from_slice(&(k.len() as u16).to_le_bytes());
                    out.extend_from_slice(k);
                }
            }
            Index::Learned(l) => {
                match &l.map {
                    BlockMap::Fixed { per_page, entries } => {
                        out.extend_from_slice(&per_page.to_le_bytes());
                        out.extend_from_slice(&entries.to_le_bytes());
                    }
                    BlockMap::Variable { first, page } => {
                        out.extend_from_slice(&0u32.to_le_bytes());
                        out.extend_from_slice(&(page.len() as u64).to_le_bytes());
                        for (f, p) in first.iter().zip(page) {
                            out.extend_from_slice(&f.to_le_bytes());
                            out.extend_from_slice(&p.to_le_bytes());
                        }
                    }
                }
                let prefix = l.projection.prefix();
                out.extend_from_slice(&(prefix.len() as u16).to_le_bytes());
                out.extend_from_slice(prefix);
                l.model.encode(out);
                if let Some(t) = &l.thresholds {
                    t.encode(out);
                }
            }
        }
    }

    /// Decodes an index of kind `kind` for a table of `data_pages` pages.
    pub fn decode(kind: u8, b: &[u8], data_pages: u32) -> Option<Self> {
        let mut r = Reader { b, at: 0 };
        let index = match kind {
            KIND_SPARSE => {
                let n = r.u32()? as usize;
                let mut separators = Vec::with_capacity(n.min(b.len()));
                let mut page = Vec::with_capacity(n.min(b.len()));
                for _ in 0..n {
                    let p = r.u32()?;
                    let len = r.u16()? as usize;
                    let k = r.bytes(len)?.to_vec();
                    if page.last().is_some_and(|&last| last >= p) || p >= data_pages {
                        return None;
                    }
                    if separators.last().is_some_and(|last: &Vec<u8>| *last > k) {
                        return None;
                    }
                    page.push(p);
                    separators.push(k);
                }
                if page.first().is_some_and(|&p| p != 0) {
                    return None;
                }
                Index::Sparse(SparseIndex { separators, page })
            }
            KIND_LEARNED | KIND_BOURBON => {
                let per_page = r.u32()?;
                let map = if per_page > 0 {
                    let entries = r.u64()?;
                    if entries.div_ceil(per_page as u64) != data_pages as u64 {
                        return None;
                    }
                    BlockMap::Fixed { per_page, entries }
                } else {
                    let n = usize::try_from(r.u64()?).ok()?;
                    let mut first = Vec::with_capacity(n.min(b.len()));
                    let mut page = Vec::with_capacity(n.min(b.len()));
                    for _ in 0..n {
                        let (f, p) = (r.u32()?, r.u32()?);
                        if page.last().is_some_and(|&last| last >= p) || p >= data_pages {
                            return None;
                        }
                        if first.last().is_some_and(|&last| last >= f) {
                            return None;
                        }
                        first.push(f);
                        page.push(p);
                    }
                    BlockMap::Variable { first, page }
                };
                let plen = r.u16()? as usize;
                let projection = KeyProjection::from_prefix(r.bytes(plen)?.to_vec());
                let (model, rest) = BoundedModel::decode_prefix(r.rest())?;
                let mut l = LearnedIndex {
                    map,
                    projection,
                    model,
                    whole_block: kind == KIND_BOURBON,
                    thresholds: None,
                };
                if !rest.is_empty() {
                    l.thresholds = Some(Thresholds::decode(rest, l.block_count(data_pages))?);
                }
                Index::Learned(l)
            }
            _ => return None,
        };
        if kind == KIND_SPARSE && !r.rest().is_empty() {
            return None;
        }
        Some(index)
    }
}

impl LearnedIndex {
    /// Number of data blocks of a table of `data_pages` data pages.
    pub fn block_count(&self, data_pages: u32) -> usize {
        match &self.map {
            BlockMap::Fixed { .. } => data_pages as usize,
            BlockMap::Variable { page, .. } => page.len(),
        }
    }

    /// Block and slot of entry `ordinal`.
    pub fn locate(&self, ordinal: u64) -> Option<(usize, usize)> {
        match &self.map {
            BlockMap::Fixed { per_page, entries } => {
                if ordinal >= *entries {
                    return None;
                }
                let pp = *per_page as u64;
                Some(((ordinal / pp) as usize, (ordinal % pp) as usize))
            }
            BlockMap::Variable { first, .. } => {
                let o = u32::try_from(ordinal).ok()?;
                let b = first.partition_point(|&f| f <= o).checked_sub(1)?;
                Some((b, (o - *first.get(b)?) as usize))
            }
        }
    }

    /// The blocks a lookup with window `w` in a table of `entries` entries
    /// may need: `(first, last, predicted)`.
    pub fn window_blocks(&self, w: &Window, entries: u64) -> Option<(usize, usize, usize)> {
        let (at, _) = self.locate(w.at)?;
        Some(self.window_blocks_near(w, entries, at))
    }

    /// [`LearnedIndex::window_blocks`], stepping from block `near` (any
    /// block; the result does not depend on it, only the steps taken).
    pub fn window_blocks_near(
        &self,
        w: &Window,
        entries: u64,
        near: usize,
    ) -> (usize, usize, usize) {
        let last = entries.saturating_sub(1);
        // A window is a fraction of a block: step to its ends rather than
        // locate them afresh.
        let at = self.step_to(near, w.at.min(last));
        let lo = self.step_to(at, w.lo.min(last));
        let hi = self.step_to(at, w.hi.min(last));
        (lo.min(at), hi.max(at), at)
    }

    /// The block holding `ordinal`, found by stepping from block `b`.
    pub fn step_to(&self, mut b: usize, ordinal: u64) -> usize {
        let blocks = match &self.map {
            // Bounded by the ordinal: a block starting at or below it
            // exists when the table holds it.
            BlockMap::Fixed { .. } => usize::MAX,
            BlockMap::Variable { first, .. } => first.len(),
        };
        while b > 0 && self.block_first(b) > ordinal {
            b -= 1;
        }
        while b + 1 < blocks && self.block_first(b + 1) <= ordinal {
            b += 1;
        }
        b
    }

    /// Ordinal of the first entry of block `b`.
    pub fn block_first(&self, b: usize) -> u64 {
        match &self.map {
            BlockMap::Fixed { per_page, .. } => b as u64 * *per_page as u64,
            BlockMap::Variable { first, .. } => first.get(b).copied().unwrap_or(u32::MAX) as u64,
        }
    }
}

impl Layout for LearnedIndex {
    fn model(&self) -> &BoundedModel {
        &self.model
    }

    fn block_first(&self, b: usize) -> u64 {
        LearnedIndex::block_first(self, b)
    }

    fn step_to(&self, b: usize, ordinal: u64) -> usize {
        LearnedIndex::step_to(self, b, ordinal)
    }
}

/// The shortest key `s` with `a <= s < b` that LevelDB's rule finds: `a`'s
/// prefix up to the first differing byte, that byte incremented, when the
/// result is still below `b`; otherwise `a` itself.
pub fn shortest_separator(a: &[u8], b: &[u8]) -> Vec<u8> {
    let l = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    if let (Some(&x), Some(&y)) = (a.get(l), b.get(l)) {
        if x < 0xFF && x + 1 < y {
            let mut s = a[..l].to_vec();
            s.push(x + 1);
            return s;
        }
    }
    a.to_vec()
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.bytes(2)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.bytes(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.bytes(8)?.try_into().ok()?))
    }
    fn rest(&self) -> &'a [u8] {
        self.b.get(self.at..).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separators_are_short_and_between() {
        assert_eq!(shortest_separator(b"abcd", b"abzz"), b"abd".to_vec());
        assert_eq!(shortest_separator(b"abc", b"abd"), b"abc".to_vec());
        assert_eq!(shortest_separator(b"ab", b"abc"), b"ab".to_vec());
        for (a, b) in [(&b"a\xff"[..], &b"b"[..]), (b"x", b"y"), (b"m1", b"m9")] {
            let s = shortest_separator(a, b);
            assert!(a <= &s[..] && &s[..] < b);
        }
    }

    #[test]
    fn fixed_map_locates_by_arithmetic() {
        let l = LearnedIndex {
            map: BlockMap::Fixed {
                per_page: 10,
                entries: 25,
            },
            projection: KeyProjection::default(),
            model: BoundedModel::default(),
            whole_block: false,
            thresholds: None,
        };
        assert_eq!(l.locate(0), Some((0, 0)));
        assert_eq!(l.locate(24), Some((2, 4)));
        assert_eq!(l.locate(25), None);
        let v = LearnedIndex {
            map: BlockMap::Variable {
                first: vec![0, 3, 9],
                page: vec![0, 1, 3],
            },
            ..l
        };
        assert_eq!(v.locate(2), Some((0, 2)));
        assert_eq!(v.locate(3), Some((1, 0)));
        assert_eq!(v.locate(11), Some((2, 2)));
        let idx = Index::Learned(v);
        assert_eq!(idx.block_pages(1, 5), Some((1, 2)));
        assert_eq!(idx.block_pages(2, 5), Some((3, 2)));
        let mut enc = Vec::new();
        idx.encode(&mut enc);
        assert_eq!(Index::decode(KIND_LEARNED, &enc, 5), Some(idx.clone()));
        let Index::Learned(mut b) = idx else {
            unreachable!()
        };
        b.whole_block = true;
        let bourbon = Index::Learned(b);
        assert_eq!(bourbon.kind_byte(), KIND_BOURBON);
        let mut enc = Vec::new();
        bourbon.encode(&mut enc);
        assert_eq!(Index::decode(KIND_BOURBON, &enc, 5), Some(bourbon));
    }
}
