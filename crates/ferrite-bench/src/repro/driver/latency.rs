//! Latency histograms: nanoseconds recorded into an HDR histogram (three
//! significant digits, 1 ns to 60 s), read back as microseconds.

use std::time::Duration;

use hdrhistogram::Histogram;

pub use crate::report::LatencySummary;

/// One series of latencies.
#[derive(Clone)]
pub struct Latencies(Histogram<u64>);

impl Default for Latencies {
    fn default() -> Self {
        Self::new()
    }
}

impl Latencies {
    pub fn new() -> Self {
        Self(
            Histogram::new_with_bounds(1, 60_000_000_000, 3)
                .expect("constant histogram bounds are valid"),
        )
    }

    /// Records one operation (below 1 ns counts as 1 ns; past the bound,
    /// as the bound).
    pub fn record(&mut self, d: Duration) {
        self.record_ns(d.as_nanos().min(u128::from(u64::MAX)) as u64);
    }

    pub fn record_ns(&mut self, ns: u64) {
        self.0.saturating_record(ns.max(1));
    }

    pub fn add(&mut self, other: &Latencies) {
        let _ = self.0.add(&other.0);
    }

    pub fn count(&self) -> u64 {
        self.0.len()
    }

    /// The latency at quantile `q` (0..=1), in microseconds.
    pub fn quantile_us(&self, q: f64) -> f64 {
        self.0.value_at_quantile(q) as f64 / 1e3
    }

    /// (quantile, µs) at each of `quantiles`.
    pub fn curve(&self, quantiles: &[f64]) -> Vec<(f64, f64)> {
        quantiles
            .iter()
            .map(|&q| (q, self.quantile_us(q)))
            .collect()
    }

    pub fn summary(&self) -> LatencySummary {
        LatencySummary::of(&self.0)
    }
}

/// The quantiles a latency curve is drawn at: dense in the body, then
/// out into the tail.
pub const CURVE: [f64; 16] = [
    0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9999,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_read_in_microseconds() {
        let mut l = Latencies::new();
        for us in 1..=100u64 {
            l.record(Duration::from_micros(us));
        }
        let s = l.summary();
        assert_eq!(s.count, 100);
        assert!((s.p50_us - 50.0).abs() < 0.1, "{s:?}");
        assert!((s.p99_us - 99.0).abs() < 0.1, "{s:?}");
        assert!(l.curve(&CURVE).windows(2).all(|w| w[0].1 <= w[1].1));
    }
}
