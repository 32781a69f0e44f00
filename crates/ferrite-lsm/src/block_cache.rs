//! The block cache: parsed data blocks under a byte budget, shared by
//! every table.
//!
//! The budget also pays for what every open table pins in memory (its
//! filter and index block): [`BlockCache::pin`] moves bytes from the
//! blocks' share to the tables', as RocksDB does with index and filter
//! blocks charged to its cache. A smaller index therefore leaves more room
//! for data blocks.
//!
//! Sixteen shards, each a CLOCK over its slots (a hit sets the slot's
//! reference bit; the hand clears bits until it finds a clear one). The
//! budget counts each block's bytes and the slot's own overhead; a shard
//! never holds more than its sixteenth. Blocks are `Arc`s, so evicting a
//! block a reader still holds only drops the cache's reference.
//!
//! A hit costs one hash probe: the map entry holds the block and its slot
//! number, and the slots hold only keys, which the hand needs to evict.
//! Hit and miss counts are kept per shard under its lock, so a lookup
//! writes no shared counter.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::table::block::Block;

const SHARDS: usize = 16;
/// Bytes of bookkeeping per cached block (slot, map entry, Arc header).
const SLOT_OVERHEAD: usize = 96;

/// (table id, block number).
pub type BlockKey = (u64, u32);

/// A cached block and the slot the CLOCK tracks it in.
struct Cached {
    block: Arc<Block>,
    slot: usize,
}

/// A multiplicative hash for block keys: they are two small integers, and
/// SipHash's resistance to chosen keys buys nothing here.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64);
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(29) ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 31)
    }
}

#[derive(Default)]
struct Shard {
    map: HashMap<BlockKey, Cached, BuildHasherDefault<KeyHasher>>,
    /// The key each slot holds, `None` for a free slot.
    slots: Vec<Option<BlockKey>>,
    /// CLOCK reference bits, one per slot (what [`clock_victim`] walks).
    refs: Vec<bool>,
    free: Vec<usize>,
    hand: usize,
    bytes: usize,
    hits: u64,
    misses: u64,
}

impl Shard {
    /// Removes `key`'s block, freeing its slot; returns the bytes freed.
    fn remove(&mut self, key: &BlockKey) -> Option<usize> {
        let c = self.map.remove(key)?;
        if let Some(s) = self.slots.get_mut(c.slot) {
            *s = None;
        }
        self.free.push(c.slot);
        // An empty slot is passed over until it is reused.
        if let Some(r) = self.refs.get_mut(c.slot) {
            *r = true;
        }
        let freed = c.block.charge() + SLOT_OVERHEAD;
        self.bytes -= freed;
        Some(freed)
    }
}

/// The CLOCK choice: from `hand`, the first slot whose bit is clear,
/// clearing set bits on the way. Pure, so it is tested without blocks.
pub fn clock_victim(bits: &mut [bool], hand: usize) -> Option<usize> {
    let n = bits.len();
    if n == 0 {
        return None;
    }
    for step in 0..2 * n {
        let i = (hand + step) % n;
        if let Some(b) = bits.get_mut(i) {
            if !*b {
                return Some(i);
            }
            *b = false;
        }
    }
    None
}

/// Whether a flush's `bytes` of blocks are put in a cache whose blocks
/// may take `block_budget`: only up to half of it, because a flush larger
/// than that would push out the blocks readers come back to for blocks
/// they may never read.
pub fn flush_fits(bytes: usize, block_budget: usize) -> bool {
    bytes <= block_budget / 2
}

pub struct BlockCache {
    shards: Vec<Mutex<Shard>>,
    budget: usize,
    /// Bytes pinned by open tables' filters and indexes.
    pinned: AtomicUsize,
    evictions: AtomicU64,
}

impl BlockCache {
    pub fn new(budget: u64) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            budget: budget as usize,
            pinned: AtomicUsize::new(0),
            evictions: AtomicU64::new(0),
        }
    }

    /// Charges `bytes` of table metadata to the budget.
    pub fn pin(&self, bytes: usize) {
        self.pinned.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Returns bytes charged by [`BlockCache::pin`].
    pub fn unpin(&self, bytes: usize) {
        self.pinned.fetch_sub(bytes, Ordering::Relaxed);
    }

    pub fn pinned(&self) -> usize {
        self.pinned.load(Ordering::Relaxed)
    }

    /// Whether a flush's `bytes` of blocks may enter the cache (see
    /// [`flush_fits`]).
    pub fn takes_flush(&self, bytes: usize) -> bool {
        flush_fits(bytes, self.budget.saturating_sub(self.pinned()))
    }

    /// What one shard may hold in blocks now.
    fn shard_budget(&self) -> usize {
        self.budget.saturating_sub(self.pinned()) / SHARDS
    }

    fn shard(&self, key: BlockKey) -> &Mutex<Shard> {
        let h = key.0.wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ (key.1 as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
        let i = (h >> 59) as usize % SHARDS;
        &self.shards[i]
    }

    pub fn get(&self, key: BlockKey) -> Option<Arc<Block>> {
        let mut guard = self.shard(key).lock();
        let s = &mut *guard;
        match s.map.get(&key) {
            Some(c) => {
                if let Some(r) = s.refs.get_mut(c.slot) {
                    *r = true;
                }
                s.hits += 1;
                Some(c.block.clone())
            }
            None => {
                s.misses += 1;
                None
            }
        }
    }

    /// Caches `block` (if it fits the shard at all), evicting by CLOCK.
    pub fn insert(&self, key: BlockKey, block: Arc<Block>) {
        let charge = block.charge() + SLOT_OVERHEAD;
        let shard_budget = self.shard_budget();
        if charge > shard_budget {
            return;
        }
        let mut guard = self.shard(key).lock();
        let s = &mut *guard;
        if s.map.contains_key(&key) {
            return;
        }
        while s.bytes + charge > shard_budget {
            let Some(v) = clock_victim(&mut s.refs, s.hand) else {
                break;
            };
            s.hand = (v + 1) % s.slots.len().max(1);
            if let Some(old) = s.slots.get(v).copied().flatten() {
                if s.remove(&old).is_some() {
                    self.evictions.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        let slot = match s.free.pop() {
            Some(i) => {
                if let Some(x) = s.slots.get_mut(i) {
                    *x = Some(key);
                }
                if let Some(r) = s.refs.get_mut(i) {
                    *r = false;
                }
                i
            }
            None => {
                s.slots.push(Some(key));
                s.refs.push(false);
                s.slots.len() - 1
            }
        };
        s.map.insert(key, Cached { block, slot });
        s.bytes += charge;
    }

    /// Drops every block of `table` (called when the table is deleted).
    pub fn forget_table(&self, table: u64) {
        for shard in &self.shards {
            let mut guard = shard.lock();
            let s = &mut *guard;
            let gone: Vec<BlockKey> = s.map.keys().filter(|k| k.0 == table).copied().collect();
            for k in gone {
                s.remove(&k);
            }
        }
    }

    /// Bytes held by blocks, overhead included (pinned bytes apart).
    pub fn bytes(&self) -> usize {
        self.shards.iter().map(|s| s.lock().bytes).sum()
    }

    pub fn counts(&self) -> ferrite_core::CacheCounts {
        let (mut hits, mut misses) = (0, 0);
        for shard in &self.shards {
            let s = shard.lock();
            hits += s.hits;
            misses += s.misses;
        }
        ferrite_core::CacheCounts {
            hits,
            misses,
            evictions: self.evictions.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_gives_referenced_slots_a_second_chance() {
        let mut bits = vec![true, false, true];
        assert_eq!(clock_victim(&mut bits, 0), Some(1));
        assert_eq!(bits, vec![false, false, true]);
        let mut all = vec![true, true];
        assert_eq!(clock_victim(&mut all, 1), Some(1));
        assert_eq!(clock_victim(&mut [], 0), None);
    }

    #[test]
    fn a_flush_enters_the_cache_only_up_to_half_of_it() {
        assert!(flush_fits(0, 0));
        assert!(flush_fits(50 << 20, 100 << 20));
        assert!(!flush_fits((50 << 20) + 1, 100 << 20));
        assert!(
            !flush_fits(16 << 20, 11 << 20),
            "a flush larger than the cache"
        );
    }

    fn block(tag: u8) -> Arc<Block> {
        let mut b = crate::table::block::BlockBuilder::default();
        b.add(&[tag], Some(b"v"));
        let mut data = Vec::new();
        b.finish_into(&mut data);
        let buf = ferrite_io::AlignedBuf::from_slice(&data);
        Arc::new(Block::parse(buf, &|| "test".into()).unwrap())
    }

    #[test]
    fn hits_misses_eviction_and_forgetting() {
        let charge = block(0).charge() + SLOT_OVERHEAD;
        // Room for three blocks per shard.
        let cache = BlockCache::new((3 * charge * SHARDS) as u64);
        // Keys of one table that land in one shard, so the budget bites.
        let shard_of = |k: BlockKey| cache.shard(k) as *const _;
        let first = shard_of((7, 0));
        let keys: Vec<BlockKey> = (0u32..10_000)
            .map(|b| (7, b))
            .filter(|&k| shard_of(k) == first)
            .take(5)
            .collect();
        assert_eq!(keys.len(), 5);
        for (i, &k) in keys.iter().enumerate() {
            cache.insert(k, block(i as u8));
        }
        assert!(cache.bytes() <= 3 * charge);
        let held: Vec<bool> = keys.iter().map(|&k| cache.get(k).is_some()).collect();
        assert_eq!(held.iter().filter(|&&h| h).count(), 3);
        // The newest block is always kept, and a hit returns its own block.
        let newest = cache.get(keys[4]).unwrap();
        assert_eq!(newest.entry(0).map(|(k, _)| k.to_vec()), Some(vec![4u8]));
        let c = cache.counts();
        assert_eq!((c.hits, c.misses, c.evictions), (4, 2, 2));
        cache.forget_table(7);
        assert_eq!(cache.bytes(), 0);
        assert!(keys.iter().all(|&k| cache.get(k).is_none()));
        // Freed slots are reused without growing the shard.
        cache.insert(keys[0], block(9));
        assert!(cache.get(keys[0]).is_some());
        assert_eq!(cache.bytes(), charge);
    }
}
