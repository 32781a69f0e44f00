//! The hot-page detector: a LIRS-style LRU stack of pages written while
//! not in the buffer pool (and of resident pages whose write hits were
//! logged), deciding which pages are worth loading.
//!
//! Owns the stack and each page's type and reuse score, plus an opaque
//! payload per node (the insert buffer keeps a page's records there, the
//! paper's "hash map integrated within the nodes of the LRU stack"); it
//! does no I/O and is tested as a pure state machine. Its node slots and
//! index are allocated once, for `max_nodes`, so its memory is fixed.
//! Invariants:
//! - at most `l_quota` nodes are of type L (low inter-reference recency);
//!   new nodes are L while the quota is not reached, H after;
//! - `last_l` is the bottom-most L node; the stack from the top down to it
//!   is the *DB-buffer locality*. Every node carries the stamp of its last
//!   move to the top, so "above `last_l`" is a stamp comparison;
//! - an access to a node inside the locality adds one to its reuse score
//!   and, if the node is H, promotes it to L and demotes `last_l` (the
//!   least recently used L node) to keep the quota; an access outside it
//!   takes one from the score (never below zero). Either way the node
//!   moves to the top (the paper's Algorithm 1);
//! - H nodes below `last_l` are LIRS's pruned region: the owner removes
//!   those without buffered records ([`HotPageDetector::prune`]);
//! - the stack never holds more than `max_nodes` nodes; the L quota is at
//!   most three quarters of that, so H nodes can always be made room for.

use hashbrown::HashTable;

use crate::page::PageId;

const NIL: u32 = u32::MAX;

fn hash(page: PageId) -> u64 {
    page.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// A page's inter-reference recency class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recency {
    /// Low inter-reference recency: hot, inside the locality.
    L,
    /// High inter-reference recency: cold.
    H,
}

/// A stack node: 40 bytes with a 16-byte payload. Free slots are chained
/// through `down`.
#[derive(Debug, Clone)]
struct Node<T> {
    page: PageId,
    /// Toward the top (more recent).
    up: u32,
    /// Toward the bottom (less recent).
    down: u32,
    stamp: u32,
    kind: Recency,
    reuse: u8,
    payload: T,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DetectorCounters {
    pub accesses: u64,
    pub promotions: u64,
    pub demotions: u64,
    pub pruned: u64,
}

/// The stack. Nodes live in one vector allocated up front; the index is a
/// table of node numbers (4 bytes a bucket) hashed by their page id.
pub struct HotPageDetector<T> {
    nodes: Vec<Node<T>>,
    free: u32,
    index: HashTable<u32>,
    top: u32,
    bottom: u32,
    last_l: u32,
    l_count: usize,
    l_quota: usize,
    max_nodes: usize,
    clock: u32,
    pub counters: DetectorCounters,
}

impl<T: Default> HotPageDetector<T> {
    /// A detector of at most `max_nodes` (at least 4) nodes keeping at
    /// most `l_quota` L nodes (at least one, at most 3/4 of `max_nodes`).
    pub fn new(l_quota: usize, max_nodes: usize) -> Self {
        let max_nodes = max_nodes.clamp(4, NIL as usize - 1);
        Self {
            nodes: Vec::with_capacity(max_nodes),
            free: NIL,
            index: HashTable::with_capacity(max_nodes),
            top: NIL,
            bottom: NIL,
            last_l: NIL,
            l_count: 0,
            l_quota: l_quota.clamp(1, max_nodes * 3 / 4),
            max_nodes,
            clock: 0,
            counters: DetectorCounters::default(),
        }
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    fn find(&self, page: PageId) -> Option<u32> {
        let nodes = &self.nodes;
        self.index
            .find(hash(page), |&i| nodes[i as usize].page == page)
            .copied()
    }

    pub fn l_count(&self) -> usize {
        self.l_count
    }

    #[cfg(test)]
    pub fn l_quota(&self) -> usize {
        self.l_quota
    }

    /// Whether a page not yet in the stack needs room made first.
    pub fn is_full(&self) -> bool {
        self.index.len() >= self.max_nodes
    }

    /// Heap bytes held by the stack itself (node slots and the page index,
    /// by allocation size; payloads' own heap memory is the owner's).
    pub fn heap_bytes(&self) -> usize {
        self.nodes.capacity() * std::mem::size_of::<Node<T>>() + self.index.allocation_size()
    }

    /// Heap bytes a detector of `max_nodes` nodes holds.
    pub fn bytes_for(max_nodes: usize) -> usize {
        max_nodes * std::mem::size_of::<Node<T>>()
            + HashTable::<u32>::with_capacity(max_nodes).allocation_size()
    }

    fn node(&self, i: u32) -> &Node<T> {
        &self.nodes[i as usize]
    }

    fn node_mut(&mut self, i: u32) -> &mut Node<T> {
        &mut self.nodes[i as usize]
    }

    /// Starts `page`'s reuse score over (its records were just applied:
    /// the page must earn another load).
    pub fn reset_reuse(&mut self, page: PageId) {
        if let Some(i) = self.find(page) {
            self.node_mut(i).reuse = 0;
        }
    }

    pub fn payload(&self, page: PageId) -> Option<&T> {
        self.find(page).map(|i| &self.node(i).payload)
    }

    pub fn payload_mut(&mut self, page: PageId) -> Option<&mut T> {
        let i = self.find(page)?;
        Some(&mut self.node_mut(i).payload)
    }

    #[cfg(test)]
    pub fn reuse(&self, page: PageId) -> Option<u8> {
        self.find(page).map(|i| self.node(i).reuse)
    }

    pub fn recency(&self, page: PageId) -> Option<Recency> {
        self.find(page).map(|i| self.node(i).kind)
    }

    #[cfg(test)]
    /// Whether `page` lies in the DB-buffer locality (at or above the
    /// bottom-most L node).
    pub fn in_locality(&self, page: PageId) -> bool {
        self.find(page).is_some_and(|i| self.within(i))
    }

    fn within(&self, i: u32) -> bool {
        let n = self.node(i);
        n.kind == Recency::L || (self.last_l != NIL && n.stamp > self.node(self.last_l).stamp)
    }

    fn unlink(&mut self, i: u32) {
        let (up, down) = (self.node(i).up, self.node(i).down);
        if up == NIL {
            self.top = down;
        } else {
            self.node_mut(up).down = down;
        }
        if down == NIL {
            self.bottom = up;
        } else {
            self.node_mut(down).up = up;
        }
    }

    fn push_top(&mut self, i: u32) {
        if self.clock == u32::MAX {
            self.renumber();
        }
        self.clock += 1;
        let (top, clock) = (self.top, self.clock);
        let n = self.node_mut(i);
        n.up = NIL;
        n.down = top;
        n.stamp = clock;
        if top == NIL {
            self.bottom = i;
        } else {
            self.node_mut(top).up = i;
        }
        self.top = i;
    }

    /// Gives the stack stamps 1..=len from the bottom up, once the clock
    /// would wrap (every four billion accesses), keeping their order.
    fn renumber(&mut self) {
        let mut i = self.bottom;
        let mut stamp = 0;
        while i != NIL {
            stamp += 1;
            self.node_mut(i).stamp = stamp;
            i = self.node(i).up;
        }
        self.clock = stamp;
    }

    /// The nearest L node above `i`, or `NIL`.
    fn l_above(&self, i: u32) -> u32 {
        let mut j = self.node(i).up;
        while j != NIL && self.node(j).kind != Recency::L {
            j = self.node(j).up;
        }
        j
    }

    /// Records a write miss on `page` (Algorithm 1) and returns its reuse
    /// score. A page new to a full stack is not added (the caller makes
    /// room first; see [`HotPageDetector::is_full`]) and scores 0.
    pub fn access(&mut self, page: PageId) -> u8 {
        self.touch(page, true)
    }

    /// Records a logged write hit on `page`: recency and type change as
    /// for a miss, the reuse score does not — it counts reuse while the
    /// page is out of the pool, which decides when to load it.
    pub fn access_hit(&mut self, page: PageId) {
        self.touch(page, false);
    }

    fn touch(&mut self, page: PageId, score: bool) -> u8 {
        self.counters.accesses += 1;
        let Some(i) = self.find(page) else {
            if self.is_full() {
                return 0;
            }
            let kind = if self.l_count < self.l_quota {
                self.l_count += 1;
                Recency::L
            } else {
                Recency::H
            };
            let node = Node {
                page,
                up: NIL,
                down: NIL,
                stamp: 0,
                kind,
                reuse: 0,
                payload: T::default(),
            };
            let i = if self.free != NIL {
                let i = self.free;
                self.free = self.node(i).down;
                self.nodes[i as usize] = node;
                i
            } else {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            };
            let nodes = &self.nodes;
            self.index
                .insert_unique(hash(page), i, |&j| hash(nodes[j as usize].page));
            self.push_top(i);
            if kind == Recency::L && self.last_l == NIL {
                self.last_l = i;
            }
            return 0;
        };
        let mut last_l = self.last_l;
        if self.within(i) {
            let n = self.node_mut(i);
            if score {
                n.reuse = n.reuse.saturating_add(1);
            }
            if n.kind == Recency::H {
                n.kind = Recency::L;
                self.l_count += 1;
                self.counters.promotions += 1;
                if self.l_count > self.l_quota && last_l != NIL {
                    // Demote the least recently used L node; the new
                    // bottom-most L lies above it (at worst, node `i`).
                    self.node_mut(last_l).kind = Recency::H;
                    self.l_count -= 1;
                    self.counters.demotions += 1;
                    last_l = self.l_above(last_l);
                }
            }
        } else if score {
            let n = self.node_mut(i);
            n.reuse = n.reuse.saturating_sub(1);
        }
        if last_l == i {
            // The bottom-most L node is going to the top: the next L above
            // it takes its place, or it stays the only one.
            last_l = self.l_above(i);
            if last_l == NIL {
                last_l = i;
            }
        }
        self.unlink(i);
        self.push_top(i);
        self.last_l = last_l;
        self.node(i).reuse
    }

    /// Removes H nodes from the bottom of the stack that lie below the
    /// locality (or, while the stack holds more than `max_nodes`, anywhere)
    /// and for which `keep` is false (their payload holds records). Looks
    /// at no more than `scan` nodes, so one call costs a bounded amount.
    pub fn prune(&mut self, keep: &dyn Fn(&T) -> bool, max_nodes: usize, scan: usize) {
        let mut i = self.bottom;
        let last_stamp = if self.last_l == NIL {
            u32::MAX
        } else {
            self.node(self.last_l).stamp
        };
        for _ in 0..scan {
            if i == NIL {
                break;
            }
            let n = self.node(i);
            let up = n.up;
            let below = n.stamp < last_stamp;
            if n.kind == Recency::H && (below || self.index.len() > max_nodes) && !keep(&n.payload)
            {
                let page = n.page;
                self.unlink(i);
                let nodes = &self.nodes;
                if let Ok(e) = self
                    .index
                    .find_entry(hash(page), |&j| nodes[j as usize].page == page)
                {
                    e.remove();
                }
                self.node_mut(i).payload = T::default();
                self.node_mut(i).down = self.free;
                self.free = i;
                self.counters.pruned += 1;
            } else if !below && self.index.len() <= max_nodes {
                break;
            }
            i = up;
        }
    }

    /// Pages from the bottom of the stack up (coldest first), as long as
    /// `take` says to continue.
    pub fn coldest(&self, take: &mut dyn FnMut(PageId, &T) -> bool) {
        let mut i = self.bottom;
        while i != NIL {
            let n = self.node(i);
            if !take(n.page, &n.payload) {
                return;
            }
            i = n.up;
        }
    }

    /// Every node's page and payload, in no particular order.
    pub fn for_each(&self, f: &mut dyn FnMut(PageId, &T)) {
        for &i in &self.index {
            let n = self.node(i);
            f(n.page, &n.payload);
        }
    }

    /// Checks the stack's invariants (for tests and `verify`).
    pub fn check(&self) -> Result<(), String> {
        let mut seen = 0usize;
        let mut l = 0usize;
        let mut i = self.top;
        let mut prev = NIL;
        let mut bottom_l = NIL;
        let mut last_stamp = u32::MAX;
        while i != NIL {
            let n = self.node(i);
            if n.up != prev {
                return Err(format!("node of page {} has a broken up link", n.page));
            }
            if n.stamp >= last_stamp {
                return Err("stamps do not decrease toward the bottom".into());
            }
            last_stamp = n.stamp;
            if self.find(n.page) != Some(i) {
                return Err(format!("page {} is not indexed at its node", n.page));
            }
            if n.kind == Recency::L {
                l += 1;
                bottom_l = i;
            }
            seen += 1;
            if seen > self.index.len() {
                return Err("the stack has a cycle".into());
            }
            prev = i;
            i = n.down;
        }
        if prev != self.bottom {
            return Err("bottom pointer is stale".into());
        }
        if seen != self.index.len()
            || l != self.l_count
            || l > self.l_quota
            || seen > self.max_nodes
        {
            return Err(format!(
                "{seen} nodes for {} pages, {l} L nodes counted as {} (quota {})",
                self.index.len(),
                self.l_count,
                self.l_quota
            ));
        }
        if bottom_l != self.last_l {
            return Err("last_l is not the bottom-most L node".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_pages_fill_the_l_quota_then_come_in_as_h() {
        let mut d = HotPageDetector::<()>::new(2, 64);
        for p in 1..=4 {
            assert_eq!(d.access(p), 0);
        }
        assert_eq!(d.recency(1), Some(Recency::L));
        assert_eq!(d.recency(2), Some(Recency::L));
        assert_eq!(d.recency(3), Some(Recency::H));
        assert_eq!(d.recency(4), Some(Recency::H));
        d.check().unwrap();
    }

    #[test]
    fn an_h_page_reused_inside_the_locality_is_promoted_and_demotes_the_oldest_l() {
        let mut d = HotPageDetector::<()>::new(2, 64);
        // Stack after: 3(H) 2(L) 1(L): 3 is above the bottom-most L (1).
        for p in [1, 2, 3] {
            d.access(p);
        }
        assert!(d.in_locality(3));
        assert_eq!(d.access(3), 1);
        assert_eq!(d.recency(3), Some(Recency::L));
        assert_eq!(d.recency(1), Some(Recency::H), "LRU L node demoted");
        assert_eq!(d.l_count(), 2);
        d.check().unwrap();
        // Page 1 now lies below the bottom-most L (2): outside the locality.
        assert!(!d.in_locality(1));
        assert_eq!(d.access(1), 0, "score never goes below zero");
        assert_eq!(d.recency(1), Some(Recency::H));
        d.check().unwrap();
    }

    #[test]
    fn reuse_grows_inside_and_shrinks_outside_the_locality() {
        let mut d = HotPageDetector::<()>::new(1, 64);
        d.access(10); // L
        d.access(20); // H, above 10
        assert_eq!(d.access(20), 1); // promoted, 10 demoted
        d.access(30); // H on top
                      // 30 is above the bottom-most L (20): inside.
        assert_eq!(d.access(30), 1);
        // 20 was demoted by 30's promotion and sits below it: outside.
        assert!(!d.in_locality(20));
        assert_eq!(d.access(20), 0);
        d.check().unwrap();
    }

    #[test]
    fn a_loop_longer_than_the_locality_never_earns_reuse_for_h_pages() {
        // LRU anomaly 2 in miniature: 10 pages written in a loop, quota 4.
        let mut d = HotPageDetector::<()>::new(4, 64);
        let mut max_h_reuse = 0;
        for _round in 0..5 {
            for p in 0..10 {
                let r = d.access(p);
                if d.recency(p) == Some(Recency::H) {
                    max_h_reuse = max_h_reuse.max(r);
                }
            }
            d.check().unwrap();
        }
        assert_eq!(max_h_reuse, 0);
    }

    #[test]
    fn pruning_removes_cold_recordless_h_nodes_only() {
        let mut d = HotPageDetector::<bool>::new(1, 64);
        for p in 1..=5 {
            d.access(p);
        }
        // 1 is the only L, at the bottom; nothing lies below it.
        d.prune(&|_| false, usize::MAX, 100);
        assert_eq!(d.len(), 5);
        *d.payload_mut(2).unwrap() = true;
        // Promote 5: 1 is demoted and everything below 5 is outside.
        d.access(5);
        d.prune(&|&held| held, usize::MAX, 100);
        let mut left = Vec::new();
        d.coldest(&mut |p, _| {
            left.push(p);
            true
        });
        assert_eq!(left, vec![2, 5], "page 2 holds records and stays");
        d.check().unwrap();
        // Over the node cap, record-less H nodes go even inside the locality.
        let mut d = HotPageDetector::<bool>::new(1, 64);
        for p in 1..=6 {
            d.access(p);
        }
        d.prune(&|_| false, 3, 100);
        assert!(d.len() <= 3);
        d.check().unwrap();
    }

    #[test]
    fn logged_hits_move_pages_but_leave_the_score() {
        let mut d = HotPageDetector::<()>::new(2, 64);
        d.access(1);
        d.access(2);
        d.access_hit(1);
        d.access_hit(1);
        assert_eq!(d.reuse(1), Some(0), "hits while resident do not score");
        d.access(3); // H, on top
        d.access_hit(3); // inside the locality: promoted all the same
        assert_eq!(d.recency(3), Some(Recency::L));
        assert_eq!(d.reuse(3), Some(0));
        assert_eq!(d.access(1), 1, "a miss inside the locality scores");
        d.check().unwrap();
    }

    #[test]
    fn a_full_stack_admits_no_new_page() {
        let mut d = HotPageDetector::<()>::new(100, 4);
        assert_eq!(d.l_quota(), 3);
        for p in 0..4 {
            d.access(p);
        }
        assert!(d.is_full());
        assert_eq!(d.access(99), 0);
        assert!(d.recency(99).is_none());
        d.check().unwrap();
    }

    #[test]
    fn random_accesses_keep_the_invariants() {
        let mut d = HotPageDetector::<u64>::new(16, 1000);
        let mut x = 1u64;
        for step in 0..20_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let page = if x >> 63 == 0 {
                (x >> 40) % 24
            } else {
                (x >> 40) % 200
            };
            d.access(page);
            if let Some(p) = d.payload_mut(page) {
                *p = page;
            }
            if step % 97 == 0 {
                d.prune(&|p| p % 3 == 0, 120, 64);
                d.check().unwrap();
            }
        }
        d.check().unwrap();
        assert!(d.counters.promotions > 0 && d.counters.demotions > 0);
    }
}
