//! Phase 2: refitting one segment's line for exact hits.
//!
//! Position `i` owns the *bucket* of keys `[keys[i], keys[i + 1])`: a query
//! anywhere in it should be predicted as `i`, and a prediction is
//! `floor(line(x))`. So the line is fitted by least squares through the
//! bucket centres `(middle of bucket i, i + 0.5)`, which puts every bucket's
//! predictions, in the ideal case, half a position away from either
//! neighbour. Least squares minimises squared error, not misses, so the
//! intercept is then shifted within ±0.5 to the value that maximises the
//! segment's exact-hit coverage: the mean over buckets of the fraction of
//! each bucket the line maps to its own position (each bucket weighs the
//! same, as lookups of stored keys reach every node about equally often).

use std::ops::Range;

/// Intercept shifts tried, in steps of 1/`SHIFT_STEPS` of a position.
const SHIFT_STEPS: i32 = 32;

/// A fitted line: `position(x) = intercept + slope × (x − first_key)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Line {
    pub slope: f64,
    pub intercept: f64,
}

/// The bucket bounds of positions `r`, relative to `keys[r.start]`: the
/// upper bound of the last is the next key, or (for the level's last
/// position) one mean gap past it.
fn buckets(keys: &[u64], r: &Range<usize>) -> Vec<(f64, f64)> {
    let x0 = keys[r.start];
    let last = keys[r.end - 1];
    let mean_gap = if r.len() > 1 {
        ((last - x0) as f64 / (r.len() - 1) as f64).max(1.0)
    } else {
        1.0
    };
    r.clone()
        .map(|i| {
            let lo = (keys[i] - x0) as f64;
            let hi = match keys.get(i + 1) {
                Some(&k) => (k - x0) as f64,
                None => lo + mean_gap,
            };
            (lo, hi)
        })
        .collect()
}

/// Mean fraction of the buckets that `line` maps to their own positions.
fn coverage(line: &Line, first_pos: usize, b: &[(f64, f64)]) -> f64 {
    if b.is_empty() {
        return 0.0;
    }
    let mut sum = 0.0;
    for (j, &(lo, hi)) in b.iter().enumerate() {
        let i = (first_pos + j) as f64;
        if hi <= lo || line.slope <= 0.0 {
            // A zero-width bucket (equal keys), or a flat line: only the
            // prediction at the bucket's key counts.
            let p = (line.intercept + line.slope * lo).floor();
            if p == i {
                sum += 1.0;
            }
            continue;
        }
        let a = (i - line.intercept) / line.slope;
        let z = (i + 1.0 - line.intercept) / line.slope;
        let overlap = (hi.min(z) - lo.max(a)).max(0.0);
        sum += overlap / (hi - lo);
    }
    sum / b.len() as f64
}

/// Fits the line for segment `r` of `keys` (non-decreasing). Returns the
/// line (relative to `keys[r.start]`) and its exact-hit coverage.
pub fn refine(keys: &[u64], r: Range<usize>) -> (Line, f64) {
    if r.is_empty() || r.end > keys.len() {
        return (
            Line {
                slope: 0.0,
                intercept: r.start as f64 + 0.5,
            },
            0.0,
        );
    }
    let b = buckets(keys, &r);
    let n = b.len() as f64;
    let (mut sx, mut sy) = (0.0, 0.0);
    for (j, &(lo, hi)) in b.iter().enumerate() {
        sx += (lo + hi) / 2.0;
        sy += (r.start + j) as f64 + 0.5;
    }
    let (mx, my) = (sx / n, sy / n);
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for (j, &(lo, hi)) in b.iter().enumerate() {
        let dx = (lo + hi) / 2.0 - mx;
        sxy += dx * ((r.start + j) as f64 + 0.5 - my);
        sxx += dx * dx;
    }
    let slope = if sxx > 0.0 { (sxy / sxx).max(0.0) } else { 0.0 };
    let base = Line {
        slope,
        intercept: my - slope * mx,
    };
    let mut best = (base, coverage(&base, r.start, &b));
    for t in -SHIFT_STEPS / 2..=SHIFT_STEPS / 2 {
        if t == 0 {
            continue;
        }
        let line = Line {
            slope,
            intercept: base.intercept + f64::from(t) / f64::from(SHIFT_STEPS),
        };
        let c = coverage(&line, r.start, &b);
        if c > best.1 + 1e-12 {
            best = (line, c);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evenly_spaced_keys_are_hit_exactly() {
        let keys: Vec<u64> = (0..500).map(|i| 1000 + 64 * i).collect();
        let (line, cov) = refine(&keys, 0..500);
        assert!(cov > 0.999, "coverage {cov}");
        for (i, &k) in keys.iter().enumerate() {
            for x in [k, k + 31, k + 63] {
                let p = (line.intercept + line.slope * (x - 1000) as f64).floor();
                assert_eq!(p as usize, i, "key {x}");
            }
        }
    }

    #[test]
    fn a_segment_not_at_zero_predicts_its_own_positions() {
        let keys: Vec<u64> = (0..300).map(|i| 10 * i).collect();
        let (line, cov) = refine(&keys, 100..200);
        assert!(cov > 0.999);
        let p = (line.intercept + line.slope * (keys[150] - keys[100]) as f64).floor();
        assert_eq!(p, 150.0);
    }

    #[test]
    fn shift_never_lowers_coverage() {
        // Jittered keys: the refined line is at least as good as the plain
        // least-squares one.
        let keys: Vec<u64> = (0..400u64).map(|i| 1000 * i + (i * 7919) % 600).collect();
        let r = 0..400;
        let b = buckets(&keys, &r);
        let (line, cov) = refine(&keys, r.clone());
        let plain = Line {
            slope: line.slope,
            intercept: line.intercept,
        };
        assert!((coverage(&plain, 0, &b) - cov).abs() < 1e-9);
        assert!(cov > 0.5, "coverage {cov}");
    }

    #[test]
    fn single_point_and_duplicates() {
        let (line, cov) = refine(&[42], 0..1);
        assert_eq!((line.intercept + line.slope * 0.0).floor(), 0.0);
        assert!(cov > 0.99);
        let (_, cov) = refine(&[5, 5, 5], 0..3);
        // Two of three buckets are empty: one of them and the last can be hit.
        assert!(cov <= 2.0 / 3.0 + 1e-9);
    }
}
