//! The merged filter: ZKV's tree-level buffer of recent pairs.
//!
//! An ordered two-level structure: an index from each node's low key to
//! the node (the inner level; `BTreeMap`, itself an in-memory B-tree), and
//! nodes holding up to `node_pairs` sorted pairs with an access counter.
//! Writes and reads of a node add one to its counter.
//!
//! When the pairs' memory passes the budget, [`MergedFilter::evict`] does
//! the paper's LFU-like eviction: it ranks the valid nodes by counter,
//! takes the coldest until enough bytes leave, halves every counter (so
//! the ranking follows a changing workload), and hands the evicted nodes'
//! pairs out as sorted batches. Evicted nodes are *shadow deleted*: their
//! pairs are taken and the node is marked, but the index keeps its entry;
//! the next write that lands on a shadow node removes the entry (so an
//! eviction never restructures the index), and the left neighbour's range
//! takes over. The first node (low key empty) is revived instead.
//!
//! Invariants: index entries are node low keys in order; a valid node's
//! pairs are sorted, unique and within `[low, next low)`; a shadow node
//! holds no pairs; `bytes` is the sum of the pairs' `mem_bytes`.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::pair::{Bytes, Pair, Val};

#[derive(Debug)]
struct Node {
    counter: AtomicU32,
    pairs: Vec<Pair>,
    shadow: bool,
}

/// The tree-level write buffer.
#[derive(Debug)]
pub struct MergedFilter {
    index: BTreeMap<Bytes, usize>,
    nodes: Vec<Node>,
    free: Vec<usize>,
    node_pairs: usize,
    /// Bytes of pairs held.
    pub bytes: usize,
    /// Nodes holding pairs.
    pub valid_nodes: usize,
    pub shadow_removed: u64,
}

impl MergedFilter {
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.nodes
            .iter()
            .filter(|n| !n.shadow)
            .map(|n| n.pairs.len())
            .sum()
    }

    pub fn new(node_pairs: usize) -> Self {
        let mut me = Self {
            index: BTreeMap::new(),
            nodes: Vec::new(),
            free: Vec::new(),
            node_pairs: node_pairs.max(4),
            bytes: 0,
            valid_nodes: 0,
            shadow_removed: 0,
        };
        let n = me.alloc(Vec::new());
        me.index.insert(Bytes::new(&[]), n);
        me.valid_nodes = 1;
        me
    }

    fn alloc(&mut self, pairs: Vec<Pair>) -> usize {
        let node = Node {
            counter: AtomicU32::new(0),
            pairs,
            shadow: false,
        };
        match self.free.pop() {
            Some(i) => {
                self.nodes[i] = node;
                i
            }
            None => {
                self.nodes.push(node);
                self.nodes.len() - 1
            }
        }
    }

    fn find(&self, key: &[u8]) -> Option<(&Bytes, usize)> {
        self.index
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(key)))
            .next_back()
            .map(|(k, &n)| (k, n))
    }

    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// What the filter knows of `key`: `Some(Val::Del)` is a deletion.
    pub fn get(&self, key: &[u8]) -> Option<Val> {
        let (_, n) = self.find(key)?;
        let node = &self.nodes[n];
        node.counter.fetch_add(1, Ordering::Relaxed);
        let i = node.pairs.binary_search_by(|p| p.key().cmp(key)).ok()?;
        Some(node.pairs[i].val.clone())
    }

    /// Inserts or replaces; returns the replaced value.
    pub fn insert(&mut self, pair: Pair) -> Option<Val> {
        let n = loop {
            let Some((low, n)) = self.find(pair.key()) else {
                return None; // the first node's entry is never removed
            };
            if !self.nodes[n].shadow {
                break n;
            }
            if low.as_slice().is_empty() {
                self.nodes[n].shadow = false;
                self.valid_nodes += 1;
                break n;
            }
            // Shadow deletion, completed lazily: drop the index entry and
            // let the left neighbour cover the range.
            let low = low.clone();
            self.index.remove(&low);
            self.free.push(n);
            self.shadow_removed += 1;
        };
        let node = &mut self.nodes[n];
        node.counter.fetch_add(1, Ordering::Relaxed);
        self.bytes += pair.mem_bytes();
        let replaced = match node.pairs.binary_search_by(|p| p.key().cmp(pair.key())) {
            Ok(i) => {
                let old = std::mem::replace(&mut node.pairs[i], pair);
                self.bytes -= old.mem_bytes();
                Some(old.val)
            }
            Err(i) => {
                node.pairs.insert(i, pair);
                None
            }
        };
        if node.pairs.len() > self.node_pairs {
            let upper = node.pairs.split_off(node.pairs.len() / 2);
            let counter = node.counter.load(Ordering::Relaxed) / 2;
            node.counter.store(counter, Ordering::Relaxed);
            let low = upper[0].key.clone();
            let m = self.alloc(upper);
            self.nodes[m].counter.store(counter, Ordering::Relaxed);
            self.index.insert(low, m);
            self.valid_nodes += 1;
        }
        replaced
    }

    /// Takes the coldest nodes until at least `target` bytes left; returns
    /// their pairs as batches sorted by first key.
    pub fn evict(&mut self, target: usize) -> Vec<Vec<Pair>> {
        let mut ranked: Vec<(u32, usize)> = self
            .index
            .values()
            .filter(|&&n| !self.nodes[n].shadow && !self.nodes[n].pairs.is_empty())
            .map(|&n| (self.nodes[n].counter.load(Ordering::Relaxed), n))
            .collect();
        ranked.sort_unstable();
        let mut out = Vec::new();
        let mut freed = 0usize;
        for (_, n) in ranked {
            if freed >= target {
                break;
            }
            let node = &mut self.nodes[n];
            let pairs = std::mem::take(&mut node.pairs);
            node.shadow = true;
            self.valid_nodes -= 1;
            freed += pairs.iter().map(Pair::mem_bytes).sum::<usize>();
            out.push(pairs);
        }
        self.bytes -= freed.min(self.bytes);
        for node in &self.nodes {
            let c = node.counter.load(Ordering::Relaxed);
            node.counter.store(c / 2, Ordering::Relaxed);
        }
        out.sort_by(|a, b| a[0].key().cmp(b[0].key()));
        out
    }

    /// Up to `limit` pairs with keys within the bounds, sorted.
    pub fn range(&self, start: Bound<&[u8]>, end: Bound<&[u8]>, limit: usize) -> Vec<Pair> {
        let first = match start {
            Bound::Included(k) | Bound::Excluded(k) => self.find(k).map(|(l, _)| l.clone()),
            Bound::Unbounded => None,
        };
        let lower = first.map_or(Bound::Unbounded, Bound::Included);
        let mut out = Vec::new();
        for (_, &n) in self.index.range::<Bytes, _>((lower, Bound::Unbounded)) {
            let node = &self.nodes[n];
            if let Some(p) = node.pairs.first() {
                if !before_end(p.key(), end) {
                    break;
                }
            }
            let from = node.pairs.partition_point(|p| !after_start(p.key(), start));
            for p in &node.pairs[from..] {
                if !before_end(p.key(), end) || out.len() >= limit {
                    return out;
                }
                out.push(p.clone());
            }
        }
        out
    }

    /// Up to `limit` pairs of `start..end` from the top down, in
    /// descending key order.
    pub fn range_rev(&self, start: Bound<&[u8]>, end: Bound<&[u8]>, limit: usize) -> Vec<Pair> {
        let upper = match end {
            Bound::Included(k) | Bound::Excluded(k) => Bound::Included(k),
            Bound::Unbounded => Bound::Unbounded,
        };
        let mut out = Vec::new();
        for (_, &n) in self.index.range::<[u8], _>((Bound::Unbounded, upper)).rev() {
            let node = &self.nodes[n];
            if node
                .pairs
                .last()
                .is_some_and(|p| !after_start(p.key(), start))
            {
                break;
            }
            for p in node.pairs.iter().rev() {
                if !before_end(p.key(), end) {
                    continue;
                }
                if !after_start(p.key(), start) || out.len() >= limit {
                    return out;
                }
                out.push(p.clone());
            }
        }
        out
    }

    /// Every pair, sorted (for a MetaLog snapshot).
    pub fn all(&self) -> Vec<Pair> {
        self.range(Bound::Unbounded, Bound::Unbounded, usize::MAX)
    }

    /// Checks the invariants; the first violation as text.
    pub fn check(&self) -> Result<(), String> {
        let mut prev: Option<&[u8]> = None;
        let mut bytes = 0;
        let lows: Vec<(&Bytes, usize)> = self.index.iter().map(|(k, &n)| (k, n)).collect();
        for (i, &(low, n)) in lows.iter().enumerate() {
            let next = lows.get(i + 1).map(|(k, _)| k.as_slice());
            let node = &self.nodes[n];
            if node.shadow && !node.pairs.is_empty() {
                return Err("a shadow node holds pairs".into());
            }
            for p in &node.pairs {
                if prev.is_some_and(|q| q >= p.key()) {
                    return Err("merged filter pairs out of order".into());
                }
                if p.key() < low.as_slice() || next.is_some_and(|nx| p.key() >= nx) {
                    return Err("a merged filter pair lies outside its node".into());
                }
                prev = Some(p.key());
                bytes += p.mem_bytes();
            }
        }
        if bytes != self.bytes {
            return Err(format!(
                "merged filter counts {} bytes, holds {bytes}",
                self.bytes
            ));
        }
        Ok(())
    }
}

pub fn after_start(k: &[u8], start: Bound<&[u8]>) -> bool {
    match start {
        Bound::Included(s) => k >= s,
        Bound::Excluded(s) => k > s,
        Bound::Unbounded => true,
    }
}

pub fn before_end(k: &[u8], end: Bound<&[u8]>) -> bool {
    match end {
        Bound::Included(e) => k <= e,
        Bound::Excluded(e) => k < e,
        Bound::Unbounded => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(k: u32) -> Pair {
        Pair::new(&k.to_be_bytes(), Val::Put(Bytes::new(b"v")))
    }

    #[test]
    fn evicts_cold_nodes_and_shadow_deletes() {
        let mut mf = MergedFilter::new(8);
        for k in 0..64u32 {
            mf.insert(put(k));
        }
        // Make the high keys hot.
        for _ in 0..5 {
            for k in 48..64u32 {
                mf.insert(put(k));
            }
        }
        mf.check().unwrap();
        let before = mf.bytes;
        let batches = mf.evict(before / 2);
        assert!(!batches.is_empty());
        let evicted: Vec<u32> = batches
            .iter()
            .flatten()
            .map(|p| u32::from_be_bytes(p.key().try_into().unwrap()))
            .collect();
        assert!(
            evicted.iter().all(|&k| k < 48),
            "hot keys stay: {evicted:?}"
        );
        assert!(batches.windows(2).all(|w| w[0][0].key() < w[1][0].key()));
        mf.check().unwrap();
        for &k in &evicted {
            assert_eq!(mf.get(&k.to_be_bytes()), None);
        }
        // Writing into a shadow node's range removes its index entry.
        mf.insert(put(evicted[evicted.len() - 1]));
        assert!(mf.shadow_removed >= 1);
        mf.check().unwrap();
        assert_eq!(
            mf.get(&63u32.to_be_bytes()),
            Some(Val::Put(Bytes::new(b"v")))
        );
    }

    #[test]
    fn range_is_ordered_and_bounded() {
        let mut mf = MergedFilter::new(4);
        for k in (0..100u32).rev() {
            mf.insert(put(k));
        }
        let s = 10u32.to_be_bytes();
        let e = 20u32.to_be_bytes();
        let r = mf.range(Bound::Included(&s), Bound::Excluded(&e), usize::MAX);
        assert_eq!(r.len(), 10);
        let r = mf.range(Bound::Excluded(&s), Bound::Unbounded, 5);
        let keys: Vec<u32> = r
            .iter()
            .map(|p| u32::from_be_bytes(p.key().try_into().unwrap()))
            .collect();
        assert_eq!(keys, vec![11, 12, 13, 14, 15]);
        assert_eq!(mf.all().len(), 100);
        assert_eq!(mf.len(), 100);
    }
}
