//! ZFlusher's read cache: SIEVE over leaf pages, sharded by page id.
//!
//! SIEVE keeps a FIFO queue and one "visited" bit per entry; a hit only
//! sets the bit (no list movement, so no write under contention beyond the
//! bit), and the eviction hand walks from the oldest entry towards the
//! newest, clearing bits, and evicts the first unvisited entry. Retained
//! entries keep their queue position; new entries enter at the head.
//!
//! Invariant: each shard holds at most its capacity of pages; a page id
//! maps to one immutable image (pages are never rewritten in place, so a
//! cached image can never be stale, only dead).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ferrite_io::AlignedBuf;
use parking_lot::Mutex;

const NIL: usize = usize::MAX;

/// One SIEVE queue.
#[derive(Debug)]
pub struct Sieve {
    cap: usize,
    map: HashMap<u64, usize>,
    keys: Vec<u64>,
    vals: Vec<Option<Arc<AlignedBuf>>>,
    visited: Vec<bool>,
    newer: Vec<usize>,
    older: Vec<usize>,
    head: usize,
    tail: usize,
    hand: usize,
    free: Vec<usize>,
}

impl Sieve {
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn new(cap: usize) -> Self {
        Self {
            cap,
            map: HashMap::new(),
            keys: Vec::new(),
            vals: Vec::new(),
            visited: Vec::new(),
            newer: Vec::new(),
            older: Vec::new(),
            head: NIL,
            tail: NIL,
            hand: NIL,
            free: Vec::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn get(&mut self, key: u64) -> Option<Arc<AlignedBuf>> {
        let &i = self.map.get(&key)?;
        self.visited[i] = true;
        self.vals[i].clone()
    }

    fn unlink(&mut self, i: usize) {
        let (n, o) = (self.newer[i], self.older[i]);
        if n != NIL {
            self.older[n] = o;
        } else {
            self.head = o;
        }
        if o != NIL {
            self.newer[o] = n;
        } else {
            self.tail = n;
        }
    }

    /// The key evicted to make room, if any.
    fn evict(&mut self) -> Option<u64> {
        let mut h = if self.hand == NIL {
            self.tail
        } else {
            self.hand
        };
        if h == NIL {
            return None;
        }
        while self.visited[h] {
            self.visited[h] = false;
            h = if self.newer[h] == NIL {
                self.tail
            } else {
                self.newer[h]
            };
        }
        self.hand = self.newer[h];
        self.unlink(h);
        let k = self.keys[h];
        self.map.remove(&k);
        self.vals[h] = None;
        self.free.push(h);
        Some(k)
    }

    pub fn insert(&mut self, key: u64, val: Arc<AlignedBuf>) {
        if self.cap == 0 {
            return;
        }
        if let Some(&i) = self.map.get(&key) {
            self.vals[i] = Some(val);
            return;
        }
        if self.map.len() >= self.cap {
            self.evict();
        }
        let i = match self.free.pop() {
            Some(i) => {
                self.keys[i] = key;
                self.vals[i] = Some(val);
                self.visited[i] = false;
                i
            }
            None => {
                self.keys.push(key);
                self.vals.push(Some(val));
                self.visited.push(false);
                self.newer.push(NIL);
                self.older.push(NIL);
                self.keys.len() - 1
            }
        };
        self.newer[i] = NIL;
        self.older[i] = self.head;
        if self.head != NIL {
            self.newer[self.head] = i;
        }
        self.head = i;
        if self.tail == NIL {
            self.tail = i;
        }
        self.map.insert(key, i);
    }

    pub fn remove(&mut self, key: u64) {
        if let Some(i) = self.map.remove(&key) {
            if self.hand == i {
                self.hand = self.newer[i];
            }
            self.unlink(i);
            self.vals[i] = None;
            self.free.push(i);
        }
    }
}

/// Sharded SIEVE cache of leaf pages.
#[derive(Debug)]
pub struct ReadCache {
    shards: Vec<Mutex<Sieve>>,
    pub hits: AtomicU64,
    pub misses: AtomicU64,
}

impl ReadCache {
    pub fn new(pages: usize, shards: usize) -> Self {
        let shards = shards.max(1);
        Self {
            shards: (0..shards)
                .map(|i| Mutex::new(Sieve::new(pages / shards + usize::from(i < pages % shards))))
                .collect(),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    fn shard(&self, page: u64) -> &Mutex<Sieve> {
        let i = (page.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % self.shards.len();
        &self.shards[i]
    }

    pub fn get(&self, page: u64) -> Option<Arc<AlignedBuf>> {
        let r = self.shard(page).lock().get(page);
        let c = if r.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        c.fetch_add(1, Ordering::Relaxed);
        r
    }

    pub fn insert(&self, page: u64, buf: Arc<AlignedBuf>) {
        self.shard(page).lock().insert(page, buf);
    }

    pub fn remove(&self, page: u64) {
        self.shard(page).lock().remove(page);
    }

    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b() -> Arc<AlignedBuf> {
        Arc::new(AlignedBuf::zeroed(0))
    }

    #[test]
    fn visited_entries_survive_a_pass() {
        let mut s = Sieve::new(3);
        s.insert(1, b());
        s.insert(2, b());
        s.insert(3, b());
        assert!(s.get(1).is_some());
        s.insert(4, b()); // 1 is visited: the hand clears it and evicts 2
        assert!(s.get(2).is_none());
        assert!(s.get(1).is_some() && s.get(3).is_some() && s.get(4).is_some());
        assert_eq!(s.len(), 3);
    }

    #[test]
    fn one_hit_wonders_leave_first() {
        let mut s = Sieve::new(4);
        for k in 0..4 {
            s.insert(k, b());
        }
        for _ in 0..3 {
            assert!(s.get(0).is_some());
        }
        for k in 10..30 {
            s.insert(k, b());
            assert!(s.len() <= 4);
        }
        assert!(s.get(0).is_some(), "a reused page outlives a scan");
    }

    #[test]
    fn remove_and_reinsert() {
        let mut s = Sieve::new(2);
        s.insert(1, b());
        s.remove(1);
        assert!(s.is_empty());
        s.insert(2, b());
        s.insert(3, b());
        s.insert(4, b());
        assert_eq!(s.len(), 2);
        let c = ReadCache::new(10, 3);
        c.insert(7, b());
        assert!(c.get(7).is_some() && c.get(8).is_none());
        assert_eq!(c.hits.load(Ordering::Relaxed), 1);
    }
}
