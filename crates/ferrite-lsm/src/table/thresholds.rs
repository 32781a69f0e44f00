//! Block-boundary thresholds of a learned index: which block of a model's
//! window holds a key, decided before any block is read.
//!
//! A model's window often reaches across a block boundary (its error bound
//! is a sizeable part of a block's entries). Without more information a
//! lookup must read every block the window touches, or read one and risk a
//! second read. A sparse index never faces this, since its separators name
//! one block; the price is a key per block.
//!
//! Here each boundary gets one byte: a threshold on the model's unrounded
//! prediction `p` (which is a pure function of the key, see
//! `BoundedModel::predict`). Boundary `b` lies between blocks `b - 1` and
//! `b`; its threshold is `first ordinal of b + offset · step`, `step` one
//! per table. Invariant, checked at build time over every key of the
//! table: a key whose window's blocks include both sides of boundary `b`
//! lies in block `b` or later exactly when `p >= threshold(b)`. A boundary
//! no threshold separates that way (keys sharing a projection across it,
//! a segment change that reorders predictions, an offset out of range)
//! gets [`NONE`], and lookups whose windows reach across it read the
//! window's blocks as before. Keys absent from the table may be sent to
//! the wrong block; the lookup's walk to neighbouring blocks corrects
//! that, as it does for a model's prediction.

use ferrite_learned::BoundedModel;

/// The offset of a boundary no threshold separates.
pub const NONE: i8 = i8::MIN;

/// Largest offset magnitude a threshold may use.
const MAX_OFFSET: f64 = 126.0;

/// What thresholds read of the learned index they belong to: its model
/// and where its blocks begin (`table::index` implements it).
pub trait Layout {
    fn model(&self) -> &BoundedModel;
    /// Ordinal of the first entry of block `b`.
    fn block_first(&self, b: usize) -> u64;
    /// The block holding `ordinal`, found by stepping from block `b`.
    fn step_to(&self, b: usize, ordinal: u64) -> usize;
}

#[derive(Debug, Clone, PartialEq)]
pub struct Thresholds {
    /// Entries per unit of offset.
    step: f32,
    /// Per boundary `b = 1..blocks`, at `b - 1`.
    offsets: Vec<i8>,
}

impl Thresholds {
    /// Fits thresholds for a table of `blocks` blocks (each holding an
    /// entry at least) whose keys project to `xs` (one per entry, in
    /// order, so ascending) and whose index (without thresholds) is
    /// `index`. `distinct` says that no two keys share a projection (`xs`
    /// strictly ascending), which the builder knows already. `None` when no
    /// window reaches across a boundary, or no boundary can be given a
    /// threshold.
    pub fn fit(index: &impl Layout, xs: &[u64], distinct: bool, blocks: usize) -> Option<Self> {
        if blocks < 2 {
            return None;
        }
        debug_assert_eq!(distinct, xs.windows(2).all(|w| w[0] < w[1]));
        let n = xs.len() as u64;
        // When no two keys share a projection, only a few keys per
        // boundary need estimating (see `extremes`); otherwise every key.
        let near: Vec<std::ops::Range<u64>> = if distinct {
            let mut near: Vec<std::ops::Range<u64>> = Vec::new();
            for i in extremes(index, xs, blocks) {
                match near.last_mut() {
                    Some(last) if last.end == i => last.end = i + 1,
                    _ => near.push(i..i + 1),
                }
            }
            near
        } else {
            std::iter::once(0..n).collect()
        };
        let ordinals = near.into_iter().flatten();
        let estimates = index.model().estimate_ascending(
            ordinals
                .clone()
                .map(|i| xs.get(i as usize).copied().unwrap_or(0)),
        );
        // Per boundary: the largest prediction of a key before it and the
        // smallest of a key after it, among keys whose window reaches
        // across it.
        let mut below = vec![f64::NEG_INFINITY; blocks];
        let mut above = vec![f64::INFINITY; blocks];
        let mut crossed = false;
        let mut home = 0;
        let mut next = index.block_first(1);
        // Boundary `b` (its block's first ordinal `f`, `1 <= f <=` the
        // last ordinal) lies inside the rounded, clamped window exactly
        // when `lo < f` and `hi > f - 1`, so no window need be rounded.
        // A window with `lo >= low_edge` and `hi <= high_edge` crosses
        // none of its key's block's boundaries, nor any beyond them: most
        // keys cost these two tests.
        let mut low_edge = f64::NEG_INFINITY;
        let mut high_edge = (next - 1) as f64;
        for (i, e) in ordinals.zip(estimates) {
            if i >= next {
                home = index.step_to(home, i);
                next = index.block_first(home + 1);
                low_edge = index.block_first(home) as f64;
                high_edge = if home + 1 < blocks {
                    (next - 1) as f64
                } else {
                    f64::INFINITY
                };
            }
            let (p, lo, hi) = (e.p, e.lo, e.hi);
            if lo >= low_edge && hi <= high_edge {
                continue;
            }
            let mut b = home;
            while b >= 1 && lo < index.block_first(b) as f64 {
                if hi > (index.block_first(b) - 1) as f64 {
                    above[b] = above[b].min(p);
                    crossed = true;
                }
                b -= 1;
            }
            let mut b = home + 1;
            while b < blocks && hi > (index.block_first(b) - 1) as f64 {
                if lo < index.block_first(b) as f64 {
                    below[b] = below[b].max(p);
                    crossed = true;
                }
                b += 1;
            }
        }
        if !crossed {
            return None;
        }
        Self::from_bounds(index, &below, &above)
    }

    /// Thresholds for the bounds a fit gathered: per boundary `b`, the
    /// largest prediction `below[b]` of a key before it and the smallest
    /// `above[b]` of a key after it.
    fn from_bounds(index: &impl Layout, below: &[f64], above: &[f64]) -> Option<Self> {
        let blocks = below.len().min(above.len());
        // The unit: the farthest any bound lies from its boundary, over
        // the offsets available.
        let reach = (1..blocks)
            .flat_map(|b| {
                let at = index.block_first(b) as f64;
                [below[b] - at, above[b] - at]
            })
            .filter(|d| d.is_finite())
            .fold(0.0f64, |m, d| m.max(d.abs()));
        let step = ((reach + 1.0) / MAX_OFFSET).max(1.0 / 64.0) as f32;
        let offsets: Vec<i8> = (1..blocks)
            .map(|b| separate(index.block_first(b), below[b], above[b], step))
            .collect();
        offsets
            .iter()
            .any(|&o| o != NONE)
            .then_some(Self { step, offsets })
    }

    /// The threshold of boundary `b`, whose block starts at ordinal
    /// `first`.
    fn at(&self, b: usize, first: u64) -> Option<f64> {
        let o = *self.offsets.get(b.checked_sub(1)?)?;
        (o != NONE).then(|| threshold(first, o, self.step))
    }

    /// The block among `first..=last` that holds a key the table holds,
    /// predicted at `p`; `None` when a boundary between them has no
    /// threshold.
    pub fn block(&self, index: &impl Layout, p: f64, first: usize, last: usize) -> Option<usize> {
        let mut b = first;
        for boundary in first + 1..=last {
            if p >= self.at(boundary, index.block_first(boundary))? {
                b = boundary;
            }
        }
        Some(b)
    }

    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.offsets.capacity()
    }

    /// `step: f32 | count: u32 | count × offset: i8`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.step.to_le_bytes());
        out.extend_from_slice(&(self.offsets.len() as u32).to_le_bytes());
        out.extend(self.offsets.iter().map(|&o| o as u8));
    }

    /// Decodes what [`Thresholds::encode`] wrote for a table of `blocks`
    /// blocks: exactly the encoding, one offset per boundary, and a
    /// positive finite step.
    pub fn decode(b: &[u8], blocks: usize) -> Option<Self> {
        let (step, rest) = b.split_first_chunk::<4>()?;
        let (count, rest) = rest.split_first_chunk::<4>()?;
        let step = f32::from_le_bytes(*step);
        let count = u32::from_le_bytes(*count) as usize;
        if !(step.is_finite() && step > 0.0) || count != blocks.checked_sub(1)? {
            return None;
        }
        (rest.len() == count).then(|| Self {
            step,
            offsets: rest.iter().map(|&o| o as i8).collect(),
        })
    }
}

/// The ordinals, ascending, whose estimates decide every boundary's
/// bounds, for a table whose keys' projections `xs` are all distinct.
///
/// Then every key is one of the model's points and lies strictly inside
/// its own window, so a window lies within `reach` (the widest window) of
/// its key, and only keys that near a boundary can reach across it. Among
/// one segment's keys, the prediction and both window ends never fall as
/// the key rises (a segment's slope is at least zero). So of a segment's
/// keys before boundary `f` (all of whose windows start below `f`), those
/// reaching across are a suffix, and the last of them has the largest
/// prediction; of its keys from `f` on (all of whose windows end above
/// `f - 1`), those reaching back are a prefix, and the first has the
/// smallest. Per boundary that leaves, for each segment within reach, its
/// last key before `f` and its first from `f`: usually `f - 1` and `f`.
fn extremes(index: &impl Layout, xs: &[u64], blocks: usize) -> Vec<u64> {
    let n = xs.len() as u64;
    let reach = index.model().max_window() + 1;
    // Segment `s` holds ordinals `starts[s]..starts[s + 1]` (then `n`).
    let mut starts: Vec<u64> = index
        .model()
        .segment_starts()
        .iter()
        .map(|&first| xs.partition_point(|&x| x < first) as u64)
        .collect();
    // Keys below the first segment (none, for a model fitted to them)
    // share one estimate: a segment of their own.
    if starts.first() != Some(&0) {
        starts.insert(0, 0);
    }
    let mut out = Vec::new();
    for b in 1..blocks {
        let f = index.block_first(b);
        let (lo, hi) = (f.saturating_sub(reach), (f + reach).min(n));
        let mut s = starts.partition_point(|&st| st <= lo).saturating_sub(1);
        while let Some(&start) = starts.get(s) {
            if start >= hi {
                break;
            }
            let end = starts.get(s + 1).copied().unwrap_or(n);
            if start < f && end > lo {
                out.push(end.min(f) - 1);
            }
            if end > f {
                out.push(start.max(f));
            }
            s += 1;
        }
    }
    out.sort_unstable();
    out.dedup();
    out.retain(|&i| i < n);
    out
}

/// The threshold an offset stands for; the one formula fitting and
/// lookups share, so both compute the same `f64`.
fn threshold(first: u64, offset: i8, step: f32) -> f64 {
    first as f64 + offset as f64 * step as f64
}

/// The offset of a threshold `t` with `below < t <= above` for the
/// boundary whose block starts at ordinal `first`, or [`NONE`].
fn separate(first: u64, below: f64, above: f64, step: f32) -> i8 {
    if below == f64::NEG_INFINITY && above == f64::INFINITY {
        // No window reaches across: never consulted.
        return NONE;
    }
    let unit = step as f64;
    let at = first as f64;
    let start = if below.is_finite() {
        ((below - at) / unit).floor()
    } else {
        ((above - at) / unit).floor()
    };
    // Rounding may put the first candidate a unit off either way.
    for q in [start - 1.0, start, start + 1.0, start + 2.0] {
        if q.abs() > MAX_OFFSET {
            continue;
        }
        let t = threshold(first, q as i8, step);
        if below < t && t <= above {
            return q as i8;
        }
    }
    NONE
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::index::{BlockMap, LearnedIndex};
    use ferrite_learned::{BoundedModel, FitKind, KeyProjection};
    use proptest::prelude::*;

    /// The bounds [`Thresholds::fit`] gathers, found the long way: every
    /// key's window rounded and located block by block.
    fn reference(
        index: &LearnedIndex,
        xs: &[u64],
        entries: u64,
        blocks: usize,
    ) -> Option<Thresholds> {
        let mut below = vec![f64::NEG_INFINITY; blocks];
        let mut above = vec![f64::INFINITY; blocks];
        for (i, &x) in xs.iter().enumerate() {
            let (w, p) = index.model.predict(x)?;
            let (home, _) = index.locate(i as u64)?;
            let (first, last, _) = index.window_blocks(&w, entries)?;
            for b in first + 1..=last.min(blocks - 1) {
                if b <= home {
                    above[b] = above[b].min(p);
                } else {
                    below[b] = below[b].max(p);
                }
            }
        }
        Thresholds::from_bounds(index, &below, &above)
    }

    fn index_over(
        xs: &[u64],
        block_sizes: &[u32],
        fixed: bool,
        kind: FitKind,
        eps: f64,
    ) -> (LearnedIndex, usize) {
        let entries = xs.len() as u64;
        let (mut px, mut pos) = (Vec::new(), Vec::new());
        for (i, &x) in xs.iter().enumerate() {
            if px.last().is_none_or(|&l| l < x) {
                px.push(x);
                pos.push(i as u64);
            }
        }
        let model = BoundedModel::fit(&px, &pos, entries, kind, eps);
        let (map, blocks) = if fixed {
            let per_page = block_sizes[0];
            (
                BlockMap::Fixed { per_page, entries },
                entries.div_ceil(per_page as u64) as usize,
            )
        } else {
            let mut first = Vec::new();
            let mut at = 0u64;
            for &size in block_sizes.iter().cycle() {
                if at >= entries {
                    break;
                }
                first.push(at as u32);
                at += size as u64;
            }
            let blocks = first.len();
            let page = (0..blocks as u32).collect();
            (BlockMap::Variable { first, page }, blocks)
        };
        let index = LearnedIndex {
            map,
            projection: KeyProjection::for_keys([&[0u8; 8][..], &[0xFF; 8][..]]),
            model,
            whole_block: false,
            thresholds: None,
        };
        (index, blocks)
    }

    proptest! {
        #[test]
        fn fitting_from_unrounded_windows_matches_rounded_ones(
            gaps in proptest::collection::vec(
                prop_oneof![4 => 0u64..3, 4 => 1u64..1_000, 1 => 1u64..1_000_000_000],
                2..3_000,
            ),
            block_sizes in proptest::collection::vec(1u32..300, 1..20),
            fixed in any::<bool>(),
            kind in prop_oneof![Just(FitKind::Linear), Just(FitKind::Piecewise), Just(FitKind::TwoLevel)],
            eps in 1.0f64..80.0,
            distinct in any::<bool>(),
        ) {
            // Distinct projections take the path that estimates only keys
            // near a boundary.
            let xs: Vec<u64> = gaps
                .iter()
                .scan(0u64, |x, &g| { *x += if distinct { g.max(1) } else { g }; Some(*x) })
                .collect();
            let (index, blocks) = index_over(&xs, &block_sizes, fixed, kind, eps);
            prop_assume!(blocks >= 2);
            let fitted = Thresholds::fit(&index, &xs, xs.windows(2).all(|w| w[0] < w[1]), blocks);
            prop_assert_eq!(fitted, reference(&index, &xs, xs.len() as u64, blocks));
        }
    }

    #[test]
    fn a_separating_offset_lies_between_the_bounds() {
        for (first, below, above) in [
            (100u64, 99.2, 100.4),
            (100, 100.9, 101.0),
            (100, f64::NEG_INFINITY, 98.5),
            (100, 101.0, f64::INFINITY),
            (7, 6.999, 7.001),
        ] {
            let step = 1.0 / 64.0;
            let o = separate(first, below, above, step);
            assert_ne!(o, NONE, "{first} {below} {above}");
            let t = threshold(first, o, step);
            assert!(below < t && t <= above, "{t} not in ({below}, {above}]");
        }
    }

    #[test]
    fn bounds_in_the_wrong_order_or_out_of_reach_have_no_threshold() {
        assert_eq!(separate(100, 101.0, 100.5, 0.25), NONE);
        assert_eq!(separate(100, 101.0, 101.0, 0.25), NONE);
        assert_eq!(separate(100, 200.0, 300.0, 0.25), NONE);
        assert_eq!(separate(100, f64::NEG_INFINITY, f64::INFINITY, 0.25), NONE);
    }

    #[test]
    fn decoding_takes_exactly_one_offset_per_boundary() {
        let t = Thresholds {
            step: 0.125,
            offsets: vec![3, NONE, -7],
        };
        let mut enc = Vec::new();
        t.encode(&mut enc);
        assert_eq!(Thresholds::decode(&enc, 4), Some(t.clone()));
        assert_eq!(Thresholds::decode(&enc, 3), None);
        assert_eq!(Thresholds::decode(&enc[..enc.len() - 1], 4), None);
        let mut long = enc.clone();
        long.push(0);
        assert_eq!(Thresholds::decode(&long, 4), None);
        for bad in [0.0f32, -1.0, f32::NAN, f32::INFINITY] {
            let mut e = enc.clone();
            e[..4].copy_from_slice(&bad.to_le_bytes());
            assert_eq!(Thresholds::decode(&e, 4), None, "{bad}");
        }
    }
}
