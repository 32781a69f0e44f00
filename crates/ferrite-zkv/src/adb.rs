//! Adaptive delta buffers: a leaf's small, unsorted buffer of pairs, and
//! the pool that decides which buffers to merge when memory runs short.
//!
//! An ADB comes in three classes, ADB-64 / ADB-128 / ADB-256, holding 4, 8
//! and 16 pairs; it grows a class when a batch brings more pairs than it
//! holds, and a leaf has at most one. Pairs are unsorted (a dozen pairs are
//! scanned faster than they are kept sorted). The ADB-256 keeps a 16-byte
//! array of 1-byte key fingerprints, compared with one SSE2 instruction on
//! x86-64 (a scalar loop elsewhere), so a miss costs one cache line. The
//! header (fingerprints and length) is cache-line aligned.
//!
//! The [`AdbPool`] keeps, per instance (pages are spread over `M`
//! instances by leaf), one FIFO list per class of leaves holding an ADB of
//! that class. When ADB memory passes its threshold, victims come from the
//! heads of the ADB-256 lists first, then 128, then 64: the fullest buffers
//! are merged into pages, so every page write carries many pairs. List
//! entries carry the leaf's ADB generation; an entry whose leaf has since
//! changed its ADB is stale and skipped (no removal from the middle).

use std::collections::VecDeque;

use crate::pair::Pair;

/// ADB size classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum AdbClass {
    B64 = 0,
    B128 = 1,
    B256 = 2,
}

impl AdbClass {
    pub fn slots(self) -> usize {
        match self {
            AdbClass::B64 => 4,
            AdbClass::B128 => 8,
            AdbClass::B256 => 16,
        }
    }

    /// The smallest class holding `n` pairs, if any.
    pub fn for_count(n: usize) -> Option<Self> {
        match n {
            0..=4 => Some(AdbClass::B64),
            5..=8 => Some(AdbClass::B128),
            9..=16 => Some(AdbClass::B256),
            _ => None,
        }
    }
}

/// Most pairs an ADB holds.
pub const MAX_PAIRS: usize = 16;

pub fn fingerprint(key: &[u8]) -> u8 {
    xxhash_rust::xxh3::xxh3_64(key) as u8
}

/// Bit `i` set where `fps[i] == fp`.
#[cfg(target_arch = "x86_64")]
fn match_mask(fps: &[u8; 16], fp: u8) -> u16 {
    use std::arch::x86_64::{_mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8};
    // SAFETY: SSE2 is part of the x86-64 baseline; the load reads exactly
    // the 16 bytes of `fps` and tolerates any alignment.
    unsafe {
        let v = _mm_loadu_si128(fps.as_ptr().cast());
        let m = _mm_cmpeq_epi8(v, _mm_set1_epi8(fp as i8));
        _mm_movemask_epi8(m) as u16
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn match_mask(fps: &[u8; 16], fp: u8) -> u16 {
    scalar_mask(fps, fp)
}

#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn scalar_mask(fps: &[u8; 16], fp: u8) -> u16 {
    fps.iter()
        .enumerate()
        .fold(0u16, |m, (i, &f)| if f == fp { m | (1 << i) } else { m })
}

/// One leaf's delta buffer.
#[repr(C, align(64))]
#[derive(Debug, Clone)]
pub struct Adb {
    fps: [u8; 16],
    class: AdbClass,
    pairs: Vec<Pair>,
}

impl Adb {
    pub fn new(class: AdbClass) -> Self {
        Self {
            fps: [0; 16],
            class,
            pairs: Vec::with_capacity(class.slots()),
        }
    }

    pub fn class(&self) -> AdbClass {
        self.class
    }

    pub fn len(&self) -> usize {
        self.pairs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    pub fn pairs(&self) -> &[Pair] {
        &self.pairs
    }

    pub fn into_pairs(self) -> Vec<Pair> {
        self.pairs
    }

    /// Memory charged for this buffer: header, slots of its class, heap
    /// bytes of long keys or values.
    pub fn mem_bytes(&self) -> usize {
        std::mem::size_of::<Adb>()
            + self.class.slots() * std::mem::size_of::<Pair>()
            + self
                .pairs
                .iter()
                .map(|p| p.key.heap_bytes() + p.val.heap_bytes())
                .sum::<usize>()
    }

    pub fn position(&self, key: &[u8]) -> Option<usize> {
        if self.class == AdbClass::B256 {
            let mut m = match_mask(&self.fps, fingerprint(key)) & mask_for(self.pairs.len());
            while m != 0 {
                let i = m.trailing_zeros() as usize;
                if self.pairs.get(i).is_some_and(|p| p.key() == key) {
                    return Some(i);
                }
                m &= m - 1;
            }
            None
        } else {
            self.pairs.iter().position(|p| p.key() == key)
        }
    }

    pub fn get(&self, key: &[u8]) -> Option<&Pair> {
        self.position(key).and_then(|i| self.pairs.get(i))
    }

    /// Pairs this ADB would hold after absorbing `incoming` (distinct keys).
    pub fn count_after(&self, incoming: &[Pair]) -> usize {
        self.pairs.len()
            + incoming
                .iter()
                .filter(|p| self.position(p.key()).is_none())
                .count()
    }

    /// Adds or replaces pairs; the caller made sure the result fits
    /// [`MAX_PAIRS`]. Returns the values replaced (for value-log accounting)
    /// and grows the class as needed.
    pub fn absorb(&mut self, incoming: Vec<Pair>) -> Vec<Pair> {
        let mut replaced = Vec::new();
        for p in incoming {
            match self.position(p.key()) {
                Some(i) => replaced.push(std::mem::replace(&mut self.pairs[i], p)),
                None => {
                    if self.pairs.len() == self.class.slots() {
                        if let Some(c) = AdbClass::for_count(self.pairs.len() + 1) {
                            self.class = c;
                            self.pairs.reserve_exact(c.slots() - self.pairs.len());
                        }
                    }
                    let i = self.pairs.len();
                    if i < 16 {
                        self.fps[i] = fingerprint(p.key());
                    }
                    self.pairs.push(p);
                }
            }
        }
        replaced
    }
}

fn mask_for(n: usize) -> u16 {
    if n >= 16 {
        u16::MAX
    } else {
        (1u16 << n) - 1
    }
}

/// Per-class FIFO lists of leaves holding ADBs, split into instances.
#[derive(Debug)]
pub struct AdbPool {
    lists: Vec<[VecDeque<(u32, u32)>; 3]>,
    cursor: usize,
    /// Bytes held by all ADBs.
    pub bytes: usize,
    pub threshold: usize,
}

impl AdbPool {
    pub fn new(instances: usize, threshold: usize) -> Self {
        Self {
            lists: (0..instances.max(1)).map(|_| Default::default()).collect(),
            cursor: 0,
            bytes: 0,
            threshold,
        }
    }

    /// Records that `leaf` now holds an ADB of `class` at generation `gen`.
    pub fn enlist(&mut self, leaf: u32, gen: u32, class: AdbClass) {
        let n = self.lists.len();
        self.lists[leaf as usize % n][class as usize].push_back((leaf, gen));
    }

    pub fn over(&self) -> bool {
        self.bytes > self.threshold
    }

    /// The next victim candidate `(leaf, generation)`: heads of the ADB-256
    /// lists first, instances taken in turn. The caller checks it is current.
    pub fn next_victim(&mut self) -> Option<(u32, u32)> {
        let n = self.lists.len();
        for class in [2usize, 1, 0] {
            for step in 0..n {
                let i = (self.cursor + step) % n;
                if let Some(v) = self.lists[i][class].pop_front() {
                    self.cursor = (i + 1) % n;
                    return Some(v);
                }
            }
        }
        None
    }

    pub fn clear(&mut self) {
        for l in &mut self.lists {
            for q in l.iter_mut() {
                q.clear();
            }
        }
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pair::{Bytes, Val};

    fn p(k: u32, v: u8) -> Pair {
        Pair::new(&k.to_be_bytes(), Val::Put(Bytes::new(&[v])))
    }

    #[test]
    fn grows_through_classes_and_finds_keys() {
        let mut a = Adb::new(AdbClass::B64);
        a.absorb((0..3).map(|k| p(k, 1)).collect());
        assert_eq!(a.class(), AdbClass::B64);
        a.absorb((3..7).map(|k| p(k, 1)).collect());
        assert_eq!(a.class(), AdbClass::B128);
        let replaced = a.absorb((5..16).map(|k| p(k, 2)).collect());
        assert_eq!(a.class(), AdbClass::B256);
        assert_eq!(replaced.len(), 2);
        assert_eq!(a.len(), 16);
        for k in 0..16u32 {
            let want = if k >= 5 { 2 } else { 1 };
            assert_eq!(
                a.get(&k.to_be_bytes()).unwrap().val,
                Val::Put(Bytes::new(&[want]))
            );
        }
        assert!(a.get(&99u32.to_be_bytes()).is_none());
        assert_eq!(a.count_after(&[p(1, 0), p(40, 0)]), 17);
    }

    #[test]
    fn simd_mask_matches_scalar() {
        let mut fps = [0u8; 16];
        for (i, f) in fps.iter_mut().enumerate() {
            *f = (i as u8).wrapping_mul(37) % 5;
        }
        for fp in 0..6u8 {
            assert_eq!(match_mask(&fps, fp), scalar_mask(&fps, fp));
        }
    }

    #[test]
    fn pool_serves_largest_class_first() {
        let mut pool = AdbPool::new(4, 100);
        pool.enlist(1, 0, AdbClass::B64);
        pool.enlist(2, 0, AdbClass::B256);
        pool.enlist(7, 3, AdbClass::B128);
        assert_eq!(pool.next_victim(), Some((2, 0)));
        assert_eq!(pool.next_victim(), Some((7, 3)));
        assert_eq!(pool.next_victim(), Some((1, 0)));
        assert_eq!(pool.next_victim(), None);
        assert_eq!(AdbClass::for_count(17), None);
    }
}
