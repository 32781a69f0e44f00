//! # ferrite-learned: keyless learned models
//!
//! Models that map a sorted set of `u64` keys to their positions and keep
//! nothing but their own parameters: no key array, no position array. An
//! engine uses them where a wrong answer costs time, never correctness
//! (SHORTCUT's per-level path predictions), so the goal is the largest
//! number of *exact* hits, not the smallest search window.
//!
//! Fitting has two phases:
//! 1. [`segmentation`]: greedy piecewise linear segmentation with error
//!    bound ε (the shrinking-cone method: each segment is the longest run
//!    from its first point that one line through that point covers within
//!    ±ε). Greedy rather than PGM's optimal convex-hull method: it may use
//!    a few more segments, but phase 2 refits every line anyway.
//! 2. [`refinement`]: per segment, a least-squares line through the
//!    *centres* of the position buckets, then an intercept shift chosen to
//!    maximise exact hits on the segment's own training points (the
//!    discrete objective, Eq. 2 of the SHORTCUT paper).
//!
//! [`PiecewiseModel`] holds the result and answers `predict(key)`.
//!
//! [`BoundedModel`] (`bounded`) is the other kind: every segment stores
//! its error bounds, so a lookup searches a guaranteed window. SSTable
//! index blocks use it, where a position must be found, not guessed.

pub mod bounded;
pub mod model;
pub mod projection;
pub mod refinement;
pub mod segmentation;

pub use bounded::{BoundedModel, Estimate, FitKind, Window, BOUNDED_SEGMENT_BYTES};
pub use model::{FitOptions, PiecewiseModel, Prediction, Segment, SEGMENT_BYTES};
pub use projection::KeyProjection;
