//! Zipfian choosers with YCSB's parameters and scrambling.
//!
//! [`Zipfian`] draws rank `i` (0-based) with probability proportional to
//! `1 / (i + 1)^θ`, exactly. [`ScrambledZipfian`] draws a rank over a fixed space of
//! 10^10 items and hashes it onto the records, so popular records are
//! scattered over the key space instead of clustered at its start.

use rand_distr::{Distribution, Zipf};

use super::Chooser;

/// YCSB's default skew.
pub const ZIPFIAN_THETA: f64 = 0.99;

/// Item space of the scrambled generator (YCSB's `ITEM_COUNT`).
const SCRAMBLED_ITEMS: u64 = 10_000_000_000;

/// `Σ_{i=1..n} 1/i^θ`: summed exactly for the first 10^6 terms and by the
/// Euler–Maclaurin formula beyond, which is accurate to ~1e-12 there.
pub fn zeta(n: u64, theta: f64) -> f64 {
    const EXACT: u64 = 1_000_000;
    let head = n.min(EXACT);
    let mut sum = 0.0;
    for i in (1..=head).rev() {
        sum += (i as f64).powf(-theta);
    }
    if n > EXACT {
        // Σ_{i=a+1..n} f(i) ≈ ∫_a^n f + (f(n) - f(a))/2 + (f'(n) - f'(a))/12
        let (a, b) = (EXACT as f64, n as f64);
        let f = |x: f64| x.powf(-theta);
        let df = |x: f64| -theta * x.powf(-theta - 1.0);
        let integral = if (theta - 1.0).abs() < 1e-12 {
            (b / a).ln()
        } else {
            (b.powf(1.0 - theta) - a.powf(1.0 - theta)) / (1.0 - theta)
        };
        sum += integral + (f(b) - f(a)) / 2.0 + (df(b) - df(a)) / 12.0;
    }
    sum
}

/// FNV-1a over the 8 little-endian bytes of `x` (YCSB's `fnvhash64`).
pub fn fnv1a64(x: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in x.to_le_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// An exact zipfian over `1..=items` ranks, returned 0-based: rank `i`
/// has probability `(i + 1)^-θ / zeta(items, θ)`. Sampling is
/// rejection-inversion (Hörmann and Derflinger), O(1) per draw for any item
/// count, so it follows the law at every rank; YCSB's own generator (Gray's
/// approximation) overweights ranks 2 and up by several percent.
#[derive(Debug, Clone)]
pub struct Zipfian {
    theta: f64,
    items: u64,
    dist: Zipf<f64>,
}

impl Zipfian {
    pub fn new(items: u64, theta: f64) -> Self {
        let items = items.max(1);
        // θ is a positive constant and items ≥ 1, which Zipf::new accepts.
        let dist = Zipf::new(items, theta).expect("zipf parameters are valid");
        Self { theta, items, dist }
    }

    /// A rank in `0..items`.
    pub fn next_rank(&self, rng: &mut dyn rand::RngCore) -> u64 {
        let r = self.dist.sample(rng) as u64;
        r.clamp(1, self.items) - 1
    }

    /// A rank in `0..count`, re-parameterised for `count` items first.
    pub fn next_bounded(&mut self, rng: &mut dyn rand::RngCore, count: u64) -> u64 {
        let count = count.max(1);
        if count != self.items {
            *self = Self::new(count, self.theta);
        }
        self.next_rank(rng)
    }
}

/// Zipfian popularity scattered over the records by hashing (YCSB's
/// "zipfian" request distribution).
#[derive(Debug, Clone)]
pub struct ScrambledZipfian {
    zipf: Zipfian,
}

impl ScrambledZipfian {
    pub fn new(_records: u64) -> Self {
        Self {
            zipf: Zipfian::new(SCRAMBLED_ITEMS, ZIPFIAN_THETA),
        }
    }
}

impl Chooser for ScrambledZipfian {
    fn next(&mut self, rng: &mut dyn rand::RngCore, count: u64) -> u64 {
        fnv1a64(self.zipf.next_rank(rng)) % count.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    #[test]
    fn zeta_matches_direct_sums_and_ycsb() {
        let direct: f64 = (1..=3_000_000u64).map(|i| (i as f64).powf(-0.99)).sum();
        assert!((zeta(3_000_000, 0.99) - direct).abs() < 1e-9);
        // YCSB's precomputed zeta for its 10^10-item scrambled space.
        assert!((zeta(SCRAMBLED_ITEMS, 0.99) - 26.469_028_201_783_02).abs() < 1e-6);
    }

    #[test]
    fn rank_frequencies_follow_the_law() {
        let n = 1000u64;
        let z = Zipfian::new(n, ZIPFIAN_THETA);
        let mut rng = SmallRng::seed_from_u64(3);
        let draws = 1_000_000;
        let mut counts = vec![0u64; n as usize];
        for _ in 0..draws {
            counts[z.next_rank(&mut rng) as usize] += 1;
        }
        let zn = zeta(n, ZIPFIAN_THETA);
        for rank in [0usize, 1, 2, 4, 9] {
            let expected = ((rank + 1) as f64).powf(-ZIPFIAN_THETA) / zn;
            let got = counts[rank] as f64 / draws as f64;
            assert!(
                (got - expected).abs() < 0.01 * expected.max(0.05),
                "rank {rank}: {got} vs {expected}"
            );
        }
        // The top 10% of ranks take their theoretical share.
        let top: u64 = counts[..100].iter().sum();
        let expected = zeta(100, ZIPFIAN_THETA) / zn;
        assert!((top as f64 / draws as f64 - expected).abs() < 0.01);
    }

    #[test]
    fn scrambled_spreads_hot_items_but_keeps_skew() {
        let mut c = ScrambledZipfian::new(100_000);
        let mut rng = SmallRng::seed_from_u64(4);
        let mut counts = vec![0u32; 100_000];
        for _ in 0..1_000_000 {
            counts[c.next(&mut rng, 100_000) as usize] += 1;
        }
        let hottest = counts
            .iter()
            .enumerate()
            .max_by_key(|&(_, c)| *c)
            .map(|(i, _)| i);
        assert_ne!(
            hottest,
            Some(0),
            "popularity must not cluster at the first record"
        );
        let mut sorted = counts.clone();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        let top1pct: u32 = sorted[..1000].iter().sum();
        // The hottest 1000 records hold at least the mass of the top 1000
        // ranks of the 10^10-item space (hash collisions only add to it).
        let floor = zeta(1000, ZIPFIAN_THETA) / zeta(SCRAMBLED_ITEMS, ZIPFIAN_THETA);
        let share = f64::from(top1pct) / 1e6;
        assert!(
            share > floor - 0.01,
            "skew lost: top 1% got {share}, law says ≥ {floor}"
        );
    }
}
