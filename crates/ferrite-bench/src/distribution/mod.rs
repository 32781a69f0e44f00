//! Request distributions: which record an operation touches.
//!
//! The four YCSB request distributions, with YCSB's own definitions so
//! results compare with published YCSB numbers:
//! - [`Uniform`] over the records that exist;
//! - [`ScrambledZipfian`]: zipfian popularity (θ = 0.99 by default) with the
//!   popular items spread over the key space by an FNV hash, as YCSB does;
//! - [`Latest`]: zipfian over recency, so the newest inserts are hottest;
//! - [`Hotspot`]: a hot fraction of the records gets a given fraction of
//!   the operations.
//!
//! All choosers are pure functions of their state and an RNG, so tests can
//! check frequencies over millions of draws without any store.

mod hotspot;
mod zipfian;

pub use hotspot::Hotspot;
pub use zipfian::{fnv1a64, zeta, ScrambledZipfian, Zipfian, ZIPFIAN_THETA};

use rand::Rng;

/// Which record (0-based index) an operation targets, given how many exist.
pub trait Chooser: Send {
    /// Draws an index in `0..count`; `count` is at least 1.
    fn next(&mut self, rng: &mut dyn rand::RngCore, count: u64) -> u64;
}

/// Every record equally likely.
#[derive(Debug, Clone, Default)]
pub struct Uniform;

impl Chooser for Uniform {
    fn next(&mut self, rng: &mut dyn rand::RngCore, count: u64) -> u64 {
        rng.gen_range(0..count.max(1))
    }
}

/// YCSB's "latest": the newest record is the most popular, popularity
/// falling off zipfian with age.
#[derive(Debug, Clone)]
pub struct Latest {
    zipf: Zipfian,
}

impl Latest {
    pub fn new(theta: f64) -> Self {
        Self {
            zipf: Zipfian::new(1, theta),
        }
    }
}

impl Chooser for Latest {
    fn next(&mut self, rng: &mut dyn rand::RngCore, count: u64) -> u64 {
        let count = count.max(1);
        let back = self.zipf.next_bounded(rng, count);
        count - 1 - back
    }
}

/// A request distribution by name, as workloads and the command line use.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RequestDistribution {
    Uniform,
    Zipfian,
    Latest,
    Hotspot,
}

impl RequestDistribution {
    /// A fresh chooser for a run over `records` initial records.
    pub fn chooser(self, records: u64) -> Box<dyn Chooser> {
        match self {
            RequestDistribution::Uniform => Box::new(Uniform),
            RequestDistribution::Zipfian => Box::new(ScrambledZipfian::new(records.max(1))),
            RequestDistribution::Latest => Box::new(Latest::new(ZIPFIAN_THETA)),
            RequestDistribution::Hotspot => Box::new(Hotspot::new(0.2, 0.8)),
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "uniform" => Self::Uniform,
            "zipfian" => Self::Zipfian,
            "latest" => Self::Latest,
            "hotspot" => Self::Hotspot,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    #[test]
    fn latest_prefers_recent_records() {
        let mut rng = SmallRng::seed_from_u64(1);
        let mut c = Latest::new(ZIPFIAN_THETA);
        let n = 1_000_000u64;
        let draws = 1_000_000;
        let mut newest_1pct = 0;
        let mut oldest_half = 0;
        for _ in 0..draws {
            let i = c.next(&mut rng, n);
            assert!(i < n);
            if i >= n - n / 100 {
                newest_1pct += 1;
            }
            if i < n / 2 {
                oldest_half += 1;
            }
        }
        let share_new = newest_1pct as f64 / draws as f64;
        let share_old = oldest_half as f64 / draws as f64;
        // With θ = 0.99 over 1M items, the newest 1% take about 71% of the
        // draws and the oldest half about 4%.
        let (h1, h2) = (zipf_mass(n, n / 100), zipf_mass(n, n) - zipf_mass(n, n / 2));
        assert!(
            (share_new - h1).abs() < 0.01,
            "newest 1%: {share_new} vs {h1}"
        );
        assert!(
            (share_old - h2).abs() < 0.01,
            "oldest half: {share_old} vs {h2}"
        );
    }

    /// Probability mass of the first `k` ranks of a zipfian over `n` items.
    fn zipf_mass(n: u64, k: u64) -> f64 {
        zeta(k, ZIPFIAN_THETA) / zeta(n, ZIPFIAN_THETA)
    }

    #[test]
    fn uniform_stays_in_range_and_is_flat() {
        let mut rng = SmallRng::seed_from_u64(2);
        let mut buckets = [0u32; 10];
        for _ in 0..1_000_000 {
            buckets[(Uniform.next(&mut rng, 1000) / 100) as usize] += 1;
        }
        for b in buckets {
            assert!((b as f64 / 100_000.0 - 1.0).abs() < 0.02, "{buckets:?}");
        }
    }
}
