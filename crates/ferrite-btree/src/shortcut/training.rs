//! Collecting training data: one boundary key per node, per level, from
//! the inner nodes only.
//!
//! A node's boundary is the *lower bound of its subtree*, which its parent
//! (or, for a leftmost child, an ancestor) knows: the separator left of
//! the child pointer. The leftmost node of a level has no lower bound and
//! is given the empty key. So a breadth-first walk of the inner levels
//! yields, for every level below the root, its nodes in key order with
//! their boundaries (the paper's Figure 5), and never reads a leaf.
//!
//! The walk is resumable ([`Walker::step`] reads a bounded number of
//! inner pages), so a background rebuild can take the tree's shared lock
//! for a few pages at a time and let writers in between. Pages are read
//! without entering the buffer pool (see `BufferPool::peek`). A page that
//! is no longer what the walk expects (a split moved children, the root
//! changed) makes the walk [`Progress::Stale`]: it is then restarted later.
//! Splits during a walk can make a level's list miss or repeat a node;
//! that costs prediction accuracy until the next rebuild, never
//! correctness, since every prediction is checked by the descent.

use ferrite_core::Result;
use ferrite_io::AlignedBuf;

use crate::page::{self, PageId, KIND_INNER};
use crate::shape::Shape;
use crate::tree::Tree;

/// One level's nodes in key order, with their lower-bound keys.
#[derive(Debug, Clone, Default)]
pub struct LevelNodes {
    keys: Vec<u8>,
    ends: Vec<u32>,
    pub pages: Vec<PageId>,
}

impl LevelNodes {
    fn push(&mut self, key: &[u8], page: PageId) {
        self.keys.extend_from_slice(key);
        self.ends.push(self.keys.len() as u32);
        self.pages.push(page);
    }

    /// The lower bound of node `i` (empty for the leftmost).
    pub fn key(&self, i: usize) -> &[u8] {
        let start = match i.checked_sub(1) {
            Some(j) => self.ends.get(j).copied().unwrap_or(0) as usize,
            None => 0,
        };
        let end = self.ends.get(i).copied().unwrap_or(0) as usize;
        self.keys.get(start..end).unwrap_or_default()
    }

    pub fn len(&self) -> usize {
        self.pages.len()
    }

    /// Splits into the concatenated keys, their end offsets and the pages.
    pub fn into_parts(self) -> (Vec<u8>, Vec<u32>, Vec<PageId>) {
        (self.keys, self.ends, self.pages)
    }
}

/// What a step achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    More,
    Done,
    /// The tree changed under the walk; start again.
    Stale,
}

/// A breadth-first walk of the inner levels.
pub struct Walker {
    root: PageId,
    height: u32,
    /// Collected levels, indexed by level (0 = leaves); `levels[l]` is
    /// complete for `l > cur - 1`.
    levels: Vec<LevelNodes>,
    /// The level whose nodes are being expanded.
    cur: u32,
    /// The walk ends once the level below `floor + 1` is listed.
    floor: u32,
    pos: usize,
    buf: AlignedBuf,
}

impl Walker {
    pub fn new(shape: &Shape, page_size: usize) -> Self {
        Self::down_to(shape, page_size, 0)
    }

    /// A walk that stops once level `level` is listed (its parents read).
    pub fn down_to(shape: &Shape, page_size: usize, level: u32) -> Self {
        let mut levels = vec![LevelNodes::default(); shape.height as usize + 1];
        if let Some(top) = levels.last_mut() {
            top.push(&[], shape.root);
        }
        Self {
            root: shape.root,
            height: shape.height,
            levels,
            cur: shape.height,
            floor: level,
            pos: 0,
            buf: AlignedBuf::zeroed(page_size),
        }
    }

    /// Reads up to `max_pages` inner pages.
    pub fn step(&mut self, tree: &Tree, shape: &Shape, max_pages: usize) -> Result<Progress> {
        if shape.root != self.root || shape.height != self.height {
            return Ok(Progress::Stale);
        }
        let mut read = 0;
        while self.cur > self.floor {
            let cur = self.cur as usize;
            let Some(level) = self.levels.get(cur) else {
                return Ok(Progress::Stale);
            };
            if self.pos >= level.len() {
                self.cur -= 1;
                self.pos = 0;
                continue;
            }
            if read >= max_pages {
                return Ok(Progress::More);
            }
            let id = level.pages[self.pos];
            let low = level.key(self.pos).to_vec();
            tree.pool.peek(id, &mut self.buf)?;
            read += 1;
            let b = &self.buf[..];
            if page::kind(b) != KIND_INNER || usize::from(page::level(b)) != cur {
                return Ok(Progress::Stale);
            }
            let below = &mut self.levels[cur - 1];
            below.push(&low, page::link(b));
            for i in 0..page::count(b) {
                below.push(page::key(b, i), page::child(b, i));
            }
            self.pos += 1;
        }
        Ok(Progress::Done)
    }

    /// The collected levels below the root, indexed by level.
    pub fn finish(mut self) -> Vec<LevelNodes> {
        self.levels.truncate(self.height as usize);
        self.levels
    }
}
