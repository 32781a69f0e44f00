//! The baselines' buffer pool: leaf page images under LRU, dirty images
//! written back copy-on-write when evicted.
//!
//! Frames are keyed by leaf (a leaf's page id changes at every write), and
//! recency is kept in a lazy queue of `(leaf, stamp)`: a touch pushes a new
//! stamp, eviction pops until it meets a frame's current stamp. The pool
//! only chooses; the caller writes dirty victims, holding the pool's lock
//! so a reader never misses both the dirty image and its new page id.
//!
//! Invariant: at most `capacity` frames.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use ferrite_io::AlignedBuf;

#[derive(Debug)]
struct Frame {
    buf: Arc<AlignedBuf>,
    dirty: bool,
    stamp: u64,
}

#[derive(Debug)]
pub struct LruPool {
    capacity: usize,
    frames: HashMap<u32, Frame>,
    queue: VecDeque<(u32, u64)>,
    stamp: u64,
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
}

impl LruPool {
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            frames: HashMap::new(),
            queue: VecDeque::new(),
            stamp: 0,
            hits: 0,
            misses: 0,
            evictions: 0,
        }
    }

    fn touch(&mut self, leaf: u32) {
        self.stamp += 1;
        if let Some(f) = self.frames.get_mut(&leaf) {
            f.stamp = self.stamp;
            self.queue.push_back((leaf, self.stamp));
        }
        if self.queue.len() > 4 * self.capacity.max(16) {
            let mut live: Vec<(u64, u32)> =
                self.frames.iter().map(|(&l, f)| (f.stamp, l)).collect();
            live.sort_unstable();
            self.queue = live.into_iter().map(|(s, l)| (l, s)).collect();
        }
    }

    pub fn get(&mut self, leaf: u32) -> Option<Arc<AlignedBuf>> {
        let buf = self.frames.get(&leaf).map(|f| f.buf.clone());
        if buf.is_some() {
            self.hits += 1;
            self.touch(leaf);
        } else {
            self.misses += 1;
        }
        buf
    }

    pub fn contains(&self, leaf: u32) -> bool {
        self.frames.contains_key(&leaf)
    }

    /// Puts an image in; returns the dirty victims `(leaf, image)` the
    /// caller must write. A clean insert never replaces a dirty image.
    pub fn insert(
        &mut self,
        leaf: u32,
        buf: Arc<AlignedBuf>,
        dirty: bool,
    ) -> Vec<(u32, Arc<AlignedBuf>)> {
        if self.capacity == 0 {
            return if dirty { vec![(leaf, buf)] } else { Vec::new() };
        }
        match self.frames.get_mut(&leaf) {
            Some(f) if f.dirty && !dirty => {}
            Some(f) => {
                f.buf = buf;
                f.dirty = dirty;
            }
            None => {
                self.frames.insert(
                    leaf,
                    Frame {
                        buf,
                        dirty,
                        stamp: 0,
                    },
                );
            }
        }
        self.touch(leaf);
        let mut out = Vec::new();
        while self.frames.len() > self.capacity {
            let Some((l, s)) = self.queue.pop_front() else {
                break;
            };
            if l == leaf || self.frames.get(&l).is_none_or(|f| f.stamp != s) {
                if l == leaf && self.frames.get(&l).is_some_and(|f| f.stamp == s) {
                    self.queue.push_back((l, s));
                }
                continue;
            }
            if let Some(f) = self.frames.remove(&l) {
                self.evictions += 1;
                if f.dirty {
                    out.push((l, f.buf));
                }
            }
        }
        out
    }

    pub fn remove(&mut self, leaf: u32) {
        self.frames.remove(&leaf);
    }

    /// Images a checkpoint would write.
    pub fn dirty_frames(&self) -> usize {
        self.frames.values().filter(|f| f.dirty).count()
    }

    /// Every dirty image, now marked clean (a checkpoint writes them).
    pub fn take_dirty(&mut self) -> Vec<(u32, Arc<AlignedBuf>)> {
        let mut out: Vec<_> = self
            .frames
            .iter_mut()
            .filter(|(_, f)| f.dirty)
            .map(|(&l, f)| {
                f.dirty = false;
                (l, f.buf.clone())
            })
            .collect();
        out.sort_by_key(|(l, _)| *l);
        out
    }

    pub fn mem_bytes(&self, page_size: usize) -> usize {
        self.frames.len() * (page_size + 64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b() -> Arc<AlignedBuf> {
        Arc::new(AlignedBuf::zeroed(0))
    }

    #[test]
    fn evicts_least_recent_and_returns_dirty_victims() {
        let mut p = LruPool::new(2);
        assert!(p.insert(1, b(), true).is_empty());
        assert!(p.insert(2, b(), false).is_empty());
        p.get(1);
        let v = p.insert(3, b(), false);
        assert!(v.is_empty(), "2 was clean and least recent");
        assert!(p.contains(1) && p.contains(3) && !p.contains(2));
        p.get(3);
        let v = p.insert(4, b(), false);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].0, 1);
        assert_eq!(p.len(), 2);
        p.insert(4, b(), true);
        assert_eq!(p.take_dirty().len(), 1);
        assert!(p.take_dirty().is_empty());
    }

    #[test]
    fn a_zero_pool_writes_through() {
        let mut p = LruPool::new(0);
        assert_eq!(p.insert(9, b(), true).len(), 1);
        assert!(p.is_empty());
    }
}
