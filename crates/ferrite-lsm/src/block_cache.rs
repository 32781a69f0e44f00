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

struct Slot {
    key: BlockKey,
    block: Arc<Block>,
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
    map: HashMap<BlockKey, usize, BuildHasherDefault<KeyHasher>>,
    slots: Vec<Option<Slot>>,
    /// CLOCK reference bits, one per slot (what [`clock_victim`] walks).
    refs: Vec<bool>,
    free: Vec<usize>,
    hand: usize,
    bytes: usize,
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

pub struct BlockCache {
    shards: Vec<Mutex<Shard>>,
    budget: usize,
    /// Bytes pinned by open tables' filters and indexes.
    pinned: AtomicUsize,
    hits: AtomicU64,
    misses: AtomicU64,
    evictions: AtomicU64,
}

impl BlockCache {
    pub fn new(budget: u64) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            budget: budget as usize,
            pinned: AtomicUsize::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
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
        let mut s = self.shard(key).lock();
        let found = s.map.get(&key).copied().and_then(|i| {
            let block = s.slots.get(i)?.as_ref()?.block.clone();
            if let Some(r) = s.refs.get_mut(i) {
                *r = true;
            }
            Some(block)
        });
        drop(s);
        match &found {
            Some(_) => self.hits.fetch_add(1, Ordering::Relaxed),
            None => self.misses.fetch_add(1, Ordering::Relaxed),
        };
        found
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
            if let Some(old) = s.slots.get_mut(v).and_then(Option::take) {
                s.map.remove(&old.key);
                s.bytes -= old.block.charge() + SLOT_OVERHEAD;
                s.free.push(v);
                if let Some(r) = s.refs.get_mut(v) {
                    *r = true;
                }
                self.evictions.fetch_add(1, Ordering::Relaxed);
            }
        }
        let slot = Slot { key, block };
        let i = match s.free.pop() {
            Some(i) => {
                if let Some(x) = s.slots.get_mut(i) {
                    *x = Some(slot);
                }
                if let Some(r) = s.refs.get_mut(i) {
                    *r = false;
                }
                i
            }
            None => {
                s.slots.push(Some(slot));
                s.refs.push(false);
                s.slots.len() - 1
            }
        };
        s.map.insert(key, i);
        s.bytes += charge;
    }

    /// Drops every block of `table` (called when the table is deleted).
    pub fn forget_table(&self, table: u64) {
        for shard in &self.shards {
            let mut guard = shard.lock();
            let s = &mut *guard;
            let gone: Vec<(BlockKey, usize)> = s
                .map
                .iter()
                .filter(|(k, _)| k.0 == table)
                .map(|(&k, &i)| (k, i))
                .collect();
            for (k, i) in gone {
                s.map.remove(&k);
                if let Some(old) = s.slots.get_mut(i).and_then(Option::take) {
                    s.bytes -= old.block.charge() + SLOT_OVERHEAD;
                    s.free.push(i);
                    // An empty slot is passed over until it is reused.
                    if let Some(r) = s.refs.get_mut(i) {
                        *r = true;
                    }
                }
            }
        }
    }

    /// Bytes held by blocks, overhead included (pinned bytes apart).
    pub fn bytes(&self) -> usize {
        self.shards.iter().map(|s| s.lock().bytes).sum()
    }

    pub fn counts(&self) -> ferrite_core::CacheCounts {
        ferrite_core::CacheCounts {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
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
}
