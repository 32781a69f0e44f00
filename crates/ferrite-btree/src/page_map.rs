//! Hash maps and sets keyed by page id.
//!
//! Page ids are dense integers, so one multiply spreads them well enough;
//! the default SipHash costs more than the rest of a cached lookup.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

use crate::page::PageId;

#[derive(Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, id: u64) {
        self.0 = id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

pub type PageMap<V> = HashMap<PageId, V, BuildHasherDefault<IdHasher>>;
pub type PageSet = HashSet<PageId, BuildHasherDefault<IdHasher>>;

/// Heap bytes of a hash table holding `capacity` entries of `entry` bytes:
/// the bucket array (a power of two, at most 7/8 full) plus one control
/// byte per bucket and a trailing group.
pub fn table_bytes(capacity: usize, entry: usize) -> usize {
    if capacity == 0 {
        return 0;
    }
    let buckets = if capacity < 8 {
        (capacity + 1).next_power_of_two()
    } else {
        (capacity * 8 / 7).next_power_of_two()
    };
    buckets * (entry + 1) + 16
}
