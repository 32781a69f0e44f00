//! Adaptive delta buffers: a leaf's small, unsorted buffer of pairs, and
//! the pool that decides which buffers to merge when memory runs short.
//!
//! An ADB comes in three classes, ADB-64 / ADB-128 / ADB-256, holding 4, 8
//! and 16 pairs; it grows a class when a batch brings more pairs than it
//! holds, and a leaf has at most one. Pairs are unsorted (a dozen pairs are
//! scanned faster than they are kept sorted). The ADB-256 keeps a 16-byte
//! array of 1-byte key fingerprints, compared with one SSE2 instruction on
//! x86-64 (a scalar loop elsewhere), so a miss costs one cache line. An
//! ADB is one allocation of whole cache lines holding its count, class,
//! fingerprints and packed entries, so a search touches only its lines.
//!
//! The [`AdbPool`] keeps, per instance (pages are spread over `M`
//! instances by leaf), one FIFO list per class of leaves holding an ADB of
//! that class. When ADB memory passes its threshold, victims come from the
//! heads of the ADB-256 lists first, then 128, then 64: the fullest buffers
//! are merged into pages, so every page write carries many pairs. List
//! entries carry the leaf's ADB generation; an entry whose leaf has since
//! changed its ADB is stale and skipped (no removal from the middle).

use std::collections::VecDeque;

use crate::pair::{Bytes, Pair, Val};

/// ADB size classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum AdbClass {
    B64 = 0,
    B128 = 1,
    B256 = 2,
}

impl AdbClass {
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

/// One cache line; an ADB's storage is a run of them, so it starts on a
/// line boundary and spans whole lines.
#[repr(C, align(64))]
#[derive(Debug, Clone, Copy)]
struct Line([u8; 64]);

const LINE: usize = 64;
/// Inline value lengths up to this; 254 marks a value-log location
/// (8 bytes follow), 255 a tombstone.
const MAX_INLINE: usize = 253;
const TAG_VLOG: u8 = 254;
const TAG_DEL: u8 = 255;

/// One leaf's delta buffer: `count u8 | class u8 | fingerprints [u8; 16]
/// (ADB-256 only) | entries`, each entry `klen u8 | tag u8 | key | value`,
/// in cache lines. An 8-byte key with an 8-byte value takes 18 bytes, so
/// an ADB-64 of four such pairs spans two lines and a full ADB-256 five.
#[derive(Debug, Clone)]
pub struct Adb {
    lines: Box<[Line]>,
}

fn entry_bytes(p: &Pair) -> usize {
    2 + p.key().len()
        + match &p.val {
            Val::Put(b) => b.as_slice().len(),
            Val::Vlog(_) => 8,
            Val::Del => 0,
        }
}

impl Adb {
    pub fn new(class: AdbClass) -> Self {
        Self::encode(class, &[])
    }

    /// Whether `p` can live in an ADB (short key, short or vlog value).
    pub fn fits(p: &Pair) -> bool {
        p.key().len() <= u8::MAX as usize
            && match &p.val {
                Val::Put(b) => b.as_slice().len() <= MAX_INLINE,
                _ => true,
            }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `Line` is a plain 64-byte array with no padding; the
        // boxed slice's memory is `lines.len() * 64` initialised bytes.
        unsafe {
            std::slice::from_raw_parts(self.lines.as_ptr().cast::<u8>(), self.lines.len() * LINE)
        }
    }

    fn encode(class: AdbClass, pairs: &[Pair]) -> Self {
        let fp_len = if class == AdbClass::B256 { 16 } else { 0 };
        let need = 2 + fp_len + pairs.iter().map(entry_bytes).sum::<usize>();
        let mut lines = vec![Line([0; LINE]); need.div_ceil(LINE).max(1)].into_boxed_slice();
        // SAFETY: as in `bytes`, for the exclusively borrowed lines.
        let buf = unsafe {
            std::slice::from_raw_parts_mut(lines.as_mut_ptr().cast::<u8>(), lines.len() * LINE)
        };
        buf[0] = pairs.len() as u8;
        buf[1] = class as u8;
        let mut at = 2 + fp_len;
        for (i, p) in pairs.iter().enumerate() {
            if fp_len > 0 {
                buf[2 + i] = fingerprint(p.key());
            }
            let k = p.key();
            buf[at] = k.len() as u8;
            at += 2;
            buf[at..at + k.len()].copy_from_slice(k);
            at += k.len();
            match &p.val {
                Val::Put(b) => {
                    buf[at - k.len() - 1] = b.as_slice().len() as u8;
                    buf[at..at + b.as_slice().len()].copy_from_slice(b.as_slice());
                    at += b.as_slice().len();
                }
                Val::Vlog(loc) => {
                    buf[at - k.len() - 1] = TAG_VLOG;
                    buf[at..at + 8].copy_from_slice(&loc.to_le_bytes());
                    at += 8;
                }
                Val::Del => buf[at - k.len() - 1] = TAG_DEL,
            }
        }
        Self { lines }
    }

    pub fn class(&self) -> AdbClass {
        match self.bytes()[1] {
            0 => AdbClass::B64,
            1 => AdbClass::B128,
            _ => AdbClass::B256,
        }
    }

    pub fn len(&self) -> usize {
        usize::from(self.bytes()[0])
    }

    /// Entries in slot order: (key, value) as stored.
    fn entries(&self) -> impl Iterator<Item = (&[u8], Val)> + '_ {
        let b = self.bytes();
        let mut at = 2 + if self.class() == AdbClass::B256 {
            16
        } else {
            0
        };
        (0..self.len()).map(move |_| {
            let klen = usize::from(b[at]);
            let tag = b[at + 1];
            let k = &b[at + 2..at + 2 + klen];
            at += 2 + klen;
            let v = match tag {
                TAG_DEL => Val::Del,
                TAG_VLOG => {
                    let mut a = [0u8; 8];
                    a.copy_from_slice(&b[at..at + 8]);
                    at += 8;
                    Val::Vlog(u64::from_le_bytes(a))
                }
                n => {
                    let v = Val::Put(Bytes::new(&b[at..at + usize::from(n)]));
                    at += usize::from(n);
                    v
                }
            };
            (k, v)
        })
    }

    pub fn pairs(&self) -> Vec<Pair> {
        self.entries().map(|(k, v)| Pair::new(k, v)).collect()
    }

    pub fn into_pairs(self) -> Vec<Pair> {
        self.pairs()
    }

    /// Bytes charged for this buffer: its cache lines and the pointer to them.
    pub fn mem_bytes(&self) -> usize {
        self.lines.len() * LINE + std::mem::size_of::<Self>()
    }

    pub fn position(&self, key: &[u8]) -> Option<usize> {
        if self.class() == AdbClass::B256 {
            let mut fps = [0u8; 16];
            fps.copy_from_slice(&self.bytes()[2..18]);
            let m = match_mask(&fps, fingerprint(key)) & mask_for(self.len());
            if m == 0 {
                return None;
            }
            self.entries()
                .enumerate()
                .find(|&(i, (k, _))| m & (1 << i) != 0 && k == key)
                .map(|(i, _)| i)
        } else {
            self.entries().position(|(k, _)| k == key)
        }
    }

    pub fn get(&self, key: &[u8]) -> Option<Val> {
        let i = self.position(key)?;
        self.entries().nth(i).map(|(_, v)| v)
    }

    /// Pairs this ADB would hold after absorbing `incoming` (distinct keys).
    pub fn count_after(&self, incoming: &[Pair]) -> usize {
        self.len()
            + incoming
                .iter()
                .filter(|p| self.position(p.key()).is_none())
                .count()
    }

    /// Adds or replaces pairs (the caller made sure the result holds at most
    /// [`MAX_PAIRS`] and every pair [`Adb::fits`]), growing the class as
    /// needed; returns the replaced pairs, for value-log accounting.
    pub fn absorb(&mut self, incoming: Vec<Pair>) -> Vec<Pair> {
        let mut pairs = self.pairs();
        let mut replaced = Vec::new();
        for p in incoming {
            match pairs.iter().position(|q| q.key() == p.key()) {
                Some(i) => replaced.push(std::mem::replace(&mut pairs[i], p)),
                None => pairs.push(p),
            }
        }
        let class = AdbClass::for_count(pairs.len())
            .unwrap_or(AdbClass::B256)
            .max(self.class());
        *self = Self::encode(class, &pairs);
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
                a.get(&k.to_be_bytes()).unwrap(),
                Val::Put(Bytes::new(&[want]))
            );
        }
        // 16 pairs of 4-byte keys and 1-byte values: 2 + 16 + 16 * 7 bytes.
        assert_eq!(a.mem_bytes(), 3 * 64 + std::mem::size_of::<Adb>());
        let mut b = Adb::new(AdbClass::B64);
        b.absorb(vec![
            Pair::new(b"k", Val::Vlog(77)),
            Pair::new(b"d", Val::Del),
        ]);
        assert_eq!(b.get(b"k"), Some(Val::Vlog(77)));
        assert_eq!(b.get(b"d"), Some(Val::Del));
        assert!(!Adb::fits(&Pair::new(&[0u8; 300], Val::Del)));
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
