//! The companion: one predictor per level below the root, built from a
//! walk of the inner nodes and replaced whole by the next rebuild.
//!
//! A learned level ([`LevelIndex::Learned`], SHORTCUT) keeps a key
//! projection, a keyless piecewise linear model of boundary key → ordinal,
//! and the phantom map of ordinal → page: no key and no page per node. An
//! exact level ([`LevelIndex::Exact`], SHORTCUT-BASE) keeps every node's
//! boundary key and page, and predicts by binary search: perfect right
//! after a rebuild, at the memory cost the paper attributes to the key and
//! mapping arrays. Per-segment hit counters of learned levels feed the
//! accuracy report. A companion never changes after it is built, so
//! lookups read it without locks; only its counters are atomic.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

use ferrite_learned::{FitOptions, KeyProjection, PiecewiseModel};

use super::phantom::PhantomMap;
use super::training::LevelNodes;
use crate::page::PageId;

/// One level's predictor.
pub enum LevelIndex {
    Learned {
        projection: KeyProjection,
        model: PiecewiseModel,
        map: PhantomMap,
        /// Whether predictions name their runner-up too (see
        /// `ShortcutOptions::runner_up_below`).
        runner_up: bool,
        /// Per segment: lookups it predicted and hits among them, 16 bits
        /// each in one word (see [`SegmentCounter`]).
        seg_stats: Box<[AtomicU32]>,
    },
    Exact {
        keys: Vec<u8>,
        ends: Vec<u32>,
        pages: Vec<PageId>,
    },
}

/// How a companion is built.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Build {
    /// Keyless models; levels whose expected hit rate on their training
    /// data is below `runner_up_below` also name a runner-up.
    Learned {
        fit: FitOptions,
        runner_up_below: f64,
    },
    Exact,
}

/// A level's prediction: the page, the segment that made it, and the
/// second most likely page where the level names one.
pub type Predicted = (PageId, Option<usize>, Option<PageId>);

impl LevelIndex {
    fn build(nodes: LevelNodes, how: Build) -> Self {
        match how {
            Build::Exact => {
                let (mut keys, mut ends, mut pages) = nodes.into_parts();
                keys.shrink_to_fit();
                ends.shrink_to_fit();
                pages.shrink_to_fit();
                LevelIndex::Exact { keys, ends, pages }
            }
            Build::Learned {
                fit,
                runner_up_below,
            } => {
                // The leftmost node's bound is empty (−∞); the prefix is
                // common to the others.
                let projection = KeyProjection::for_keys((1..nodes.len()).map(|i| nodes.key(i)));
                let xs: Vec<u64> = (0..nodes.len())
                    .map(|i| match i {
                        0 => 0,
                        _ => projection.project(nodes.key(i)),
                    })
                    .collect();
                let model = PiecewiseModel::fit(&xs, fit);
                let map = PhantomMap::from_pages(&nodes.pages);
                let n = model.segment_count();
                LevelIndex::Learned {
                    runner_up: model.training_coverage() < runner_up_below,
                    projection,
                    model,
                    map,
                    seg_stats: (0..n).map(|_| AtomicU32::new(0)).collect(),
                }
            }
        }
    }

    /// The predicted page for `key`, the segment that predicted it, and
    /// the runner-up page if this level names one.
    fn predict(&self, key: &[u8]) -> Option<Predicted> {
        match self {
            LevelIndex::Learned {
                projection,
                model,
                map,
                runner_up,
                ..
            } => {
                let p = model.predict(projection.project(key))?;
                let second = match (runner_up, p.runner_up) {
                    (true, Some(r)) => map.locate(r),
                    _ => None,
                };
                Some((map.locate(p.position)?, Some(p.segment), second))
            }
            LevelIndex::Exact { keys, ends, pages } => {
                let key_at = |i: usize| {
                    let s = i
                        .checked_sub(1)
                        .and_then(|j| ends.get(j))
                        .copied()
                        .unwrap_or(0) as usize;
                    let e = ends.get(i).copied().unwrap_or(0) as usize;
                    keys.get(s..e).unwrap_or_default()
                };
                // The last node whose lower bound is ≤ key.
                let (mut lo, mut hi) = (0usize, pages.len());
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    if key_at(mid) <= key {
                        lo = mid + 1;
                    } else {
                        hi = mid;
                    }
                }
                Some((*pages.get(lo.checked_sub(1)?)?, None, None))
            }
        }
    }

    fn nodes(&self) -> u64 {
        match self {
            LevelIndex::Learned { map, .. } => map.len(),
            LevelIndex::Exact { pages, .. } => pages.len() as u64,
        }
    }

    fn memory_bytes(&self) -> usize {
        let own = std::mem::size_of::<Self>();
        own + match self {
            LevelIndex::Learned {
                projection,
                model,
                map,
                seg_stats,
                ..
            } => {
                projection.memory_bytes()
                    + model.memory_bytes()
                    + map.memory_bytes()
                    + 4 * seg_stats.len()
            }
            LevelIndex::Exact { keys, ends, pages } => {
                keys.capacity() + 4 * ends.capacity() + 8 * pages.capacity()
            }
        }
    }
}

/// A segment's runtime accuracy in one 32-bit word: lookups in the high
/// 16 bits, hits in the low 16. When the lookups would overflow, both
/// halve, so the word keeps the recent hit rate (an exponentially decaying
/// average) in 4 bytes per segment.
pub struct SegmentCounter;

impl SegmentCounter {
    pub fn add(word: u32, hit: bool) -> u32 {
        let (mut t, mut h) = (word >> 16, word & 0xFFFF);
        if t == 0xFFFF {
            t /= 2;
            h /= 2;
        }
        t += 1;
        if hit {
            h += 1;
        }
        (t << 16) | h.min(t)
    }

    /// (lookups, hits).
    pub fn read(word: u32) -> (u64, u64) {
        (u64::from(word >> 16), u64::from(word & 0xFFFF))
    }
}

/// Per-segment accuracy of one level, for the report.
#[derive(Debug, Clone, PartialEq)]
pub struct SegmentAccuracy {
    pub level: u8,
    pub segment: usize,
    /// Nodes the segment covers.
    pub nodes: u64,
    pub lookups: u64,
    pub hits: u64,
}

/// The per-level predictors of one tree shape.
pub struct Companion {
    pub root: PageId,
    pub height: u32,
    /// Indexed by level (0 = leaves), `height` entries.
    levels: Vec<LevelIndex>,
}

impl Companion {
    pub fn build(root: PageId, height: u32, levels: Vec<LevelNodes>, how: Build) -> Self {
        Self {
            root,
            height,
            levels: levels
                .into_iter()
                .map(|n| LevelIndex::build(n, how))
                .collect(),
        }
    }

    /// The predicted page at `level` (below the root) for `key`.
    pub fn predict(&self, level: usize, key: &[u8]) -> Option<Predicted> {
        self.levels.get(level)?.predict(key)
    }

    /// Counts one checked prediction of `segment` at `level`.
    pub fn note(&self, level: usize, segment: Option<usize>, hit: bool) {
        if let (Some(LevelIndex::Learned { seg_stats, .. }), Some(s)) =
            (self.levels.get(level), segment)
        {
            if let Some(c) = seg_stats.get(s) {
                let _ = c.fetch_update(Relaxed, Relaxed, |w| Some(SegmentCounter::add(w, hit)));
            }
        }
    }

    /// Nodes per level when built.
    pub fn nodes_per_level(&self) -> Vec<u64> {
        self.levels.iter().map(LevelIndex::nodes).collect()
    }

    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self
                .levels
                .iter()
                .map(LevelIndex::memory_bytes)
                .sum::<usize>()
    }

    /// Segments (learned) per level.
    pub fn segments(&self) -> usize {
        self.levels
            .iter()
            .map(|l| match l {
                LevelIndex::Learned { model, .. } => model.segment_count(),
                LevelIndex::Exact { .. } => 0,
            })
            .sum()
    }

    /// Discontinuities of the phantom maps, all levels.
    pub fn discontinuities(&self) -> usize {
        self.levels
            .iter()
            .map(|l| match l {
                LevelIndex::Learned { map, .. } => map.discontinuities(),
                LevelIndex::Exact { .. } => 0,
            })
            .sum()
    }

    /// Per level: discontinuities of its phantom map and its nodes (an
    /// exact level maps any placement and reports none).
    pub fn level_layout(&self) -> Vec<(usize, u64)> {
        self.levels
            .iter()
            .map(|l| match l {
                LevelIndex::Learned { map, .. } => (map.discontinuities(), map.len()),
                LevelIndex::Exact { pages, .. } => (0, pages.len() as u64),
            })
            .collect()
    }

    /// Accuracy of every segment of every learned level.
    pub fn segment_accuracy(&self) -> Vec<SegmentAccuracy> {
        let mut out = Vec::new();
        for (l, level) in self.levels.iter().enumerate() {
            if let LevelIndex::Learned {
                model, seg_stats, ..
            } = level
            {
                for s in 0..model.segment_count() {
                    let Some(seg) = model.segment(s) else {
                        continue;
                    };
                    let (lookups, hits) =
                        SegmentCounter::read(seg_stats.get(s).map_or(0, |c| c.load(Relaxed)));
                    out.push(SegmentAccuracy {
                        level: l as u8,
                        segment: s,
                        nodes: u64::from(seg.last_pos - seg.first_pos) + 1,
                        lookups,
                        hits,
                    });
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_counters_keep_the_rate_when_they_halve() {
        let mut w = 0u32;
        for i in 0..200_000u32 {
            w = SegmentCounter::add(w, i % 4 != 0);
        }
        let (t, h) = SegmentCounter::read(w);
        assert!((0x7FFF..=0xFFFF).contains(&t), "{t}");
        let rate = h as f64 / t as f64;
        assert!((rate - 0.75).abs() < 0.01, "{rate}");
        assert_eq!(SegmentCounter::read(SegmentCounter::add(0, true)), (1, 1));
        assert_eq!(SegmentCounter::read(SegmentCounter::add(0, false)), (1, 0));
    }
}
