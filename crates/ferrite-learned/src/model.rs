//! A piecewise linear model: the two fitting phases put together, and
//! prediction.
//!
//! Invariants: segments are ordered by `first_key` and cover consecutive
//! position ranges `first_pos..=last_pos` starting at 0; a prediction is
//! always a position of the segment that answered (clamped), so it lies in
//! `0..len`. The model keeps [`SEGMENT_BYTES`] per segment and nothing per
//! key: segments are stored as two arrays (first keys, and a 16-byte line
//! each: the slope, and the intercept as an `f32` relative to the
//! segment's first position, precise to far below a position), and a
//! segment's last position is the next one's first minus one.

use crate::refinement::refine;
use crate::segmentation::segment;

/// Fitting parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FitOptions {
    /// Phase 1's error bound, in positions.
    pub eps: f64,
}

impl Default for FitOptions {
    fn default() -> Self {
        Self { eps: 1.0 }
    }
}

/// One linear piece, as [`PiecewiseModel::segment`] describes it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Segment {
    pub first_key: u64,
    pub slope: f64,
    /// Position predicted at `first_key`.
    pub intercept: f64,
    pub first_pos: u32,
    pub last_pos: u32,
}

/// A segment's line as stored.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Line {
    slope: f64,
    /// Intercept minus `first_pos`.
    offset: f32,
    first_pos: u32,
}

/// Bytes one segment takes in memory.
pub const SEGMENT_BYTES: usize = std::mem::size_of::<u64>() + std::mem::size_of::<Line>();

/// Which segment answered and what it predicted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prediction {
    pub segment: usize,
    pub position: u64,
    /// The neighbour of `position` on the side the line leans to (the
    /// second most likely position), if it lies in the segment.
    pub runner_up: Option<u64>,
    /// How far the line's value lies from the boundary with the runner-up,
    /// in positions (0 to 0.5): the smaller, the likelier the runner-up.
    pub margin: f64,
}

/// Added before rounding a prediction down, in positions.
const BOUNDARY_BIAS: f64 = 1e-6;

/// Keyless model of a sorted key array.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PiecewiseModel {
    first_keys: Vec<u64>,
    lines: Vec<Line>,
    len: u64,
    /// Mean exact-hit coverage of the training buckets.
    coverage: f64,
}

impl PiecewiseModel {
    /// Fits `keys` (non-decreasing; position = index). At most `u32::MAX`
    /// keys: positions beyond that are not modelled (the model then
    /// covers only the first `u32::MAX` positions).
    pub fn fit(keys: &[u64], opts: FitOptions) -> Self {
        let keys = &keys[..keys.len().min(u32::MAX as usize)];
        let (mut first_keys, mut lines) = (Vec::new(), Vec::new());
        let mut weighted = 0.0;
        for r in segment(keys, opts.eps) {
            let (line, cov) = refine(keys, r.clone());
            weighted += cov * r.len() as f64;
            first_keys.push(keys[r.start]);
            lines.push(Line {
                slope: line.slope,
                offset: (line.intercept - r.start as f64) as f32,
                first_pos: r.start as u32,
            });
        }
        first_keys.shrink_to_fit();
        lines.shrink_to_fit();
        Self {
            first_keys,
            lines,
            len: keys.len() as u64,
            coverage: if keys.is_empty() {
                0.0
            } else {
                weighted / keys.len() as f64
            },
        }
    }

    /// Predicts the position of `x`; `None` for an empty model.
    pub fn predict(&self, x: u64) -> Option<Prediction> {
        let idx = self
            .first_keys
            .partition_point(|&k| k <= x)
            .saturating_sub(1);
        let s = self.segment(idx)?;
        let dx = x.saturating_sub(s.first_key) as f64;
        // A key at a bucket's lower bound lies exactly on a position
        // boundary; the bias keeps rounding error from dropping it into
        // the bucket below.
        let v = s.intercept + s.slope * dx + BOUNDARY_BIAS;
        let p = v.floor();
        let (first, last) = (f64::from(s.first_pos), f64::from(s.last_pos));
        let (pos, runner_up, margin) = if p.is_nan() || p < first {
            (
                s.first_pos,
                (s.last_pos > s.first_pos).then_some(s.first_pos + 1),
                0.5,
            )
        } else if p > last {
            (
                s.last_pos,
                (s.last_pos > s.first_pos).then(|| s.last_pos - 1),
                0.5,
            )
        } else {
            let pos = p as u32;
            let frac = v - p;
            let (other, margin) = if frac < 0.5 {
                (pos.checked_sub(1).filter(|&o| o >= s.first_pos), frac)
            } else {
                (Some(pos + 1).filter(|&o| o <= s.last_pos), 1.0 - frac)
            };
            (pos, other, margin)
        };
        Some(Prediction {
            segment: idx,
            position: u64::from(pos),
            runner_up: runner_up.map(u64::from),
            margin,
        })
    }

    /// Segment `i`.
    pub fn segment(&self, i: usize) -> Option<Segment> {
        let line = self.lines.get(i)?;
        let last_pos = match self.lines.get(i + 1) {
            Some(next) => next.first_pos.saturating_sub(1),
            None => self.len.saturating_sub(1).min(u64::from(u32::MAX)) as u32,
        };
        Some(Segment {
            first_key: *self.first_keys.get(i)?,
            slope: line.slope,
            intercept: f64::from(line.first_pos) + f64::from(line.offset),
            first_pos: line.first_pos,
            last_pos,
        })
    }

    /// Segments in the model.
    pub fn segment_count(&self) -> usize {
        self.lines.len()
    }

    /// Positions modelled.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Expected exact-hit rate on the training buckets (each bucket
    /// weighted equally).
    pub fn training_coverage(&self) -> f64 {
        self.coverage
    }

    /// Bytes the model holds.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.first_keys.capacity() * std::mem::size_of::<u64>()
            + self.lines.capacity() * std::mem::size_of::<Line>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn uniform_random_keys_reach_the_papers_accuracy() {
        // Leaf boundaries of a tree over uniform random keys: every 180th
        // of 2M sorted random keys.
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let mut all: Vec<u64> = (0..2_000_000).map(|_| rng.gen()).collect();
        all.sort_unstable();
        let bounds: Vec<u64> = all.iter().step_by(180).copied().collect();
        let m = PiecewiseModel::fit(&bounds, FitOptions::default());
        // Query with the stored keys themselves: which bucket holds each.
        let mut hits = 0u64;
        for (j, &k) in all.iter().enumerate() {
            let truth = (j / 180) as u64;
            if m.predict(k).map(|p| p.position) == Some(truth) {
                hits += 1;
            }
        }
        let acc = hits as f64 / all.len() as f64;
        assert!(acc > 0.5, "accuracy {acc}");
        // Far smaller than a key array (8 B per bound).
        assert!(
            m.memory_bytes() < bounds.len() * 8 / 2,
            "{} B",
            m.memory_bytes()
        );
    }

    #[test]
    fn empty_model_predicts_nothing() {
        let m = PiecewiseModel::fit(&[], FitOptions::default());
        assert!(m.is_empty());
        assert_eq!(m.predict(5), None);
    }

    proptest! {
        #[test]
        fn predictions_stay_in_range(
            mut keys in proptest::collection::vec(any::<u64>(), 1..300),
            probes in proptest::collection::vec(any::<u64>(), 1..50),
            eps in 0.0f64..6.0,
        ) {
            keys.sort_unstable();
            let m = PiecewiseModel::fit(&keys, FitOptions { eps });
            prop_assert_eq!(m.len(), keys.len() as u64);
            let segs: Vec<Segment> = (0..m.segment_count()).filter_map(|i| m.segment(i)).collect();
            prop_assert_eq!(segs[0].first_pos, 0);
            prop_assert_eq!(segs.last().map(|s| s.last_pos as usize), Some(keys.len() - 1));
            for w in segs.windows(2) {
                prop_assert_eq!(w[0].last_pos + 1, w[1].first_pos);
                prop_assert!(w[0].first_key <= w[1].first_key);
            }
            for x in probes.iter().chain(keys.iter()) {
                let p = m.predict(*x).unwrap();
                prop_assert!(p.position < keys.len() as u64);
                prop_assert!(p.segment < segs.len());
                if let Some(r) = p.runner_up {
                    prop_assert!(r < keys.len() as u64 && r.abs_diff(p.position) == 1);
                }
            }
        }

        #[test]
        fn linear_keys_are_predicted_exactly(start in 0u64..1 << 40, step in 1u64..1 << 20, n in 1usize..500) {
            let keys: Vec<u64> = (0..n as u64).map(|i| start + step * i).collect();
            let m = PiecewiseModel::fit(&keys, FitOptions::default());
            for (i, &k) in keys.iter().enumerate() {
                prop_assert_eq!(m.predict(k).unwrap().position, i as u64);
            }
        }
    }
}
