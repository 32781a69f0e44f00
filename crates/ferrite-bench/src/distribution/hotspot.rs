//! YCSB's hotspot distribution: a hot set of the records receives a fixed
//! share of the operations, uniformly within each set.

use rand::Rng;

use super::Chooser;

#[derive(Debug, Clone)]
pub struct Hotspot {
    /// Fraction of the records that are hot (at the start of the key order).
    hot_set: f64,
    /// Fraction of the operations that go to the hot set.
    hot_ops: f64,
}

impl Hotspot {
    pub fn new(hot_set: f64, hot_ops: f64) -> Self {
        Self {
            hot_set: hot_set.clamp(0.0, 1.0),
            hot_ops: hot_ops.clamp(0.0, 1.0),
        }
    }
}

impl Chooser for Hotspot {
    fn next(&mut self, rng: &mut dyn rand::RngCore, count: u64) -> u64 {
        let count = count.max(1);
        let hot = ((count as f64 * self.hot_set) as u64).clamp(1, count);
        if hot == count || rng.gen_bool(self.hot_ops) {
            rng.gen_range(0..hot)
        } else {
            rng.gen_range(hot..count)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    #[test]
    fn hot_set_gets_its_share() {
        let mut h = Hotspot::new(0.2, 0.8);
        let mut rng = SmallRng::seed_from_u64(5);
        let hot = (0..1_000_000)
            .filter(|_| h.next(&mut rng, 10_000) < 2000)
            .count();
        assert!((hot as f64 / 1e6 - 0.8).abs() < 0.01, "{hot}");
    }
}
