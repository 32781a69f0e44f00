//! A table's bloom filter over its user keys.
//!
//! Cache-line blocked: a key's probes all fall in one 64-byte line chosen
//! by the high half of its 64-bit xxh3 hash, and within the line double
//! hashing (Kirsch–Mitzenmacher) on the low half picks the bits. A lookup
//! thus costs one cache miss instead of one per probe, for a slightly
//! higher false-positive rate at the same bits per key. The encoding is
//! the bit array (whole lines) followed by the probe count (one byte); an
//! empty filter answers "maybe" to everything, so a table written without
//! a filter is still correct.

use xxhash_rust::xxh3::xxh3_64;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bloom {
    bits: Vec<u8>,
    probes: u8,
}

const LINE_BITS: u64 = 512;
const LINE_BYTES: usize = 64;

impl Bloom {
    /// A filter for `hashes` (from [`Bloom::hash`]) with `bits_per_key`.
    pub fn build(hashes: &[u64], bits_per_key: usize) -> Self {
        if bits_per_key == 0 || hashes.is_empty() {
            return Self::default();
        }
        let lines = (hashes.len() * bits_per_key)
            .div_ceil(LINE_BITS as usize)
            .max(1);
        // ln 2 · bits per key minimises false positives.
        let probes = ((bits_per_key as f64 * 0.69) as u8).clamp(1, 30);
        let mut bits = vec![0u8; lines * LINE_BYTES];
        for &h in hashes {
            for bit in Self::probe_bits(h, lines as u64, probes) {
                if let Some(byte) = bits.get_mut(bit / 8) {
                    *byte |= 1 << (bit % 8);
                }
            }
        }
        Self { bits, probes }
    }

    /// The bits a key with hash `h` sets, all in one line.
    fn probe_bits(h: u64, lines: u64, probes: u8) -> impl Iterator<Item = usize> {
        let line = ((h >> 32) * lines) >> 32;
        let base = line * LINE_BITS;
        let (mut a, b) = (h as u32, ((h as u32).rotate_left(15) | 1));
        (0..probes).map(move |_| {
            let bit = base + (a as u64 % LINE_BITS);
            a = a.wrapping_add(b);
            bit as usize
        })
    }

    pub fn hash(key: &[u8]) -> u64 {
        xxh3_64(key)
    }

    /// False means the key is certainly absent.
    pub fn may_contain(&self, hash: u64) -> bool {
        let lines = (self.bits.len() / LINE_BYTES) as u64;
        if lines == 0 {
            return true;
        }
        Self::probe_bits(hash, lines, self.probes).all(|bit| {
            self.bits
                .get(bit / 8)
                .is_none_or(|byte| byte & (1 << (bit % 8)) != 0)
        })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.bits);
        out.push(self.probes);
    }

    /// `None` for an encoding no filter makes.
    pub fn decode(b: &[u8]) -> Option<Self> {
        let (&probes, bits) = b.split_last()?;
        if bits.is_empty() {
            return Some(Self::default());
        }
        (probes > 0 && probes <= 30 && bits.len().is_multiple_of(LINE_BYTES)).then(|| Self {
            bits: bits.to_vec(),
            probes,
        })
    }

    pub fn memory_bytes(&self) -> usize {
        self.bits.capacity() + std::mem::size_of::<Self>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_false_negatives_and_few_false_positives() {
        let hashes: Vec<u64> = (0..10_000u32)
            .map(|i| Bloom::hash(&i.to_be_bytes()))
            .collect();
        let f = Bloom::build(&hashes, 10);
        assert!(hashes.iter().all(|&h| f.may_contain(h)));
        let fp = (10_000..110_000u32)
            .filter(|i| f.may_contain(Bloom::hash(&i.to_be_bytes())))
            .count();
        assert!(fp < 2_500, "false positive rate {}%", fp as f64 / 1000.0);
        let mut enc = Vec::new();
        f.encode(&mut enc);
        assert_eq!(Bloom::decode(&enc).unwrap(), f);
        assert!(Bloom::build(&hashes, 0).may_contain(12345));
    }
}
