//! A piecewise linear model with a *guaranteed* search window per segment,
//! for sorted arrays on disk (SSTable index blocks).
//!
//! Unlike [`crate::PiecewiseModel`], which aims at exact hits and may be
//! wrong by any amount, a [`BoundedModel`] stores for each segment how far
//! its line over- and undershoots on the points it was fitted to, so a
//! lookup of a fitted key searches only `[p - below, p + above]`.
//!
//! Points are `(x, pos)` with strictly increasing `x` and strictly
//! increasing `pos`: the first position of each distinct projected key, so
//! a run of entries sharing a projection is one point and a lookup finds
//! the run's start in the window and walks on from there.
//!
//! Three fits, for the comparison the SwiftKV paper makes (§4.4):
//! - [`FitKind::Linear`]: one least-squares line over everything;
//! - [`FitKind::Piecewise`]: Greedy-PLR segments (shrinking cone, every
//!   point within ±ε of its segment's line), each keeping its cone line;
//! - [`FitKind::TwoLevel`]: the same segments, each refitted by least
//!   squares (the paper's second-level LR); a segment keeps whichever of
//!   the two lines has the narrower window on its own points.
//!
//! Invariants: segments are ordered by `first_x`; line parameters are
//! `f32` values (what the encoding stores) *before* the bounds are
//! measured, so every fitted point lies inside its window in the decoded
//! model too; [`BoundedModel::decode`] never panics and rejects trailing
//! bytes.

/// Most bytes one segment takes in the encoded form (varint key delta,
/// two `f32`s, two varint bounds); typical segments take 12 to 16.
pub const BOUNDED_SEGMENT_BYTES: usize = 10 + 4 + 4 + 3 + 3;

/// Which model to fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FitKind {
    Linear,
    Piecewise,
    TwoLevel,
}

impl FitKind {
    pub fn name(self) -> &'static str {
        match self {
            FitKind::Linear => "linear",
            FitKind::Piecewise => "piecewise",
            FitKind::TwoLevel => "two-level",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Line {
    slope: f64,
    /// Position predicted at the segment's `first_x`.
    intercept: f64,
    below: u16,
    above: u16,
}

/// The window a lookup searches: positions `lo..=hi`, and the predicted
/// position `at` inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub lo: u64,
    pub hi: u64,
    pub at: u64,
}

/// A prediction before rounding: `p`, and the window's ends `p - above`
/// and `p + below` as the segment's line and bounds give them
/// (`lo <= p <= hi`). Its window rounds `lo` down and `hi` up and clamps
/// both to the model's positions, so for integers `a <= b` with `a` a
/// position, the window lies inside `a..=b` when `lo >= a` (or `a == 0`)
/// and `hi <= b` (or `b` is the last position or beyond): callers may test
/// that without rounding.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    pub p: f64,
    pub lo: f64,
    pub hi: f64,
}

/// A fitted model; see the module docs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BoundedModel {
    first_x: Vec<u64>,
    lines: Vec<Line>,
    /// One past the last position the model may answer.
    len: u64,
}

impl BoundedModel {
    /// Fits `(xs[i], pos[i])`; `len` bounds every answer (`pos < len`).
    /// `xs` and `pos` must be strictly increasing and of equal length.
    /// Windows wider than `u16::MAX` on either side are clamped by
    /// splitting: a segment whose bound would not fit is cut in two.
    pub fn fit(xs: &[u64], pos: &[u64], len: u64, kind: FitKind, eps: f64) -> Self {
        let n = xs.len().min(pos.len());
        let (xs, pos) = (&xs[..n], &pos[..n]);
        if spans_signed(xs) && spans_signed(pos) {
            Self::fit_with::<true>(xs, pos, len, kind, eps)
        } else {
            Self::fit_with::<false>(xs, pos, len, kind, eps)
        }
    }

    /// [`fit`](BoundedModel::fit) of `n` points; `S`: every difference of
    /// two `xs` and of two `pos` is below `2^63`.
    fn fit_with<const S: bool>(xs: &[u64], pos: &[u64], len: u64, kind: FitKind, eps: f64) -> Self {
        let n = xs.len();
        let mut m = Self {
            first_x: Vec::new(),
            lines: Vec::new(),
            len,
        };
        let mut start = 0;
        while start < n {
            let (end, slope, sums) = match kind {
                FitKind::Linear => (n, 0.0, None),
                FitKind::Piecewise => {
                    let (end, slope, _) = cone::<S>(xs, pos, start, n, eps);
                    (end, slope, None)
                }
                FitKind::TwoLevel => {
                    let (end, slope, sums) = cone::<S>(xs, pos, start, n, eps);
                    (end, slope, Some(sums))
                }
            };
            m.push_segment::<S>(xs, pos, start, end, kind, slope, sums);
            start = end;
        }
        m
    }

    /// Fits `[start, end)` as one or more segments (more only when a
    /// window would overflow the stored bound). `sums` are the segment's
    /// least-squares sums if the cone pass gathered them.
    #[allow(clippy::too_many_arguments)]
    fn push_segment<const S: bool>(
        &mut self,
        xs: &[u64],
        pos: &[u64],
        start: usize,
        end: usize,
        kind: FitKind,
        cone_slope: f64,
        sums: Option<Sums>,
    ) {
        let (xs_s, pos_s) = (&xs[start..end], &pos[start..end]);
        let cone = Line {
            slope: cone_slope,
            intercept: pos_s[0] as f64,
            below: 0,
            above: 0,
        };
        // Bounds are measured on the parameters the encoding keeps, once
        // per candidate line.
        let measured = |l: Line| {
            let q = quantized(l);
            (q, bounds::<S>(xs_s, pos_s, q))
        };
        let (line, measured_bounds) = match kind {
            FitKind::Piecewise => measured(cone),
            FitKind::Linear => measured(least_squares(xs_s, pos_s)),
            FitKind::TwoLevel => {
                let ls = quantized(sums.map_or_else(|| least_squares(xs_s, pos_s), |s| s.line()));
                let cone = quantized(cone);
                // Both candidates measured in one pass over the points.
                let (ls_bounds, cone_bounds) = bounds_of_two::<S>(xs_s, pos_s, ls, cone);
                if window_width(ls_bounds) <= window_width(cone_bounds) {
                    (ls, ls_bounds)
                } else {
                    (cone, cone_bounds)
                }
            }
        };
        match measured_bounds {
            Some((below, above)) => {
                self.first_x.push(xs_s[0]);
                self.lines.push(Line {
                    below,
                    above,
                    ..line
                });
            }
            None if end - start > 1 => {
                let mid = start + (end - start) / 2;
                // The halves' least squares are refitted from their points.
                self.push_segment::<S>(xs, pos, start, mid, kind, cone_slope, None);
                self.push_segment::<S>(xs, pos, mid, end, kind, cone_slope, None);
            }
            None => {
                // One point: its own line hits it exactly.
                self.first_x.push(xs_s[0]);
                self.lines.push(Line {
                    slope: 0.0,
                    intercept: pos_s[0] as f64,
                    below: 0,
                    above: 0,
                });
            }
        }
    }

    /// Fits the points in `pieces` contiguous pieces on as many threads
    /// and joins the pieces' segments (SwiftKV's parallel training, §3.5).
    /// A piece boundary always starts a segment, so more pieces can only
    /// add segments; the windows stay guaranteed.
    pub fn fit_parallel(
        xs: &[u64],
        pos: &[u64],
        len: u64,
        kind: FitKind,
        eps: f64,
        pieces: usize,
    ) -> Self {
        let n = xs.len().min(pos.len());
        let pieces = pieces.clamp(1, n.max(1));
        if pieces == 1 {
            return Self::fit(xs, pos, len, kind, eps);
        }
        let step = n.div_ceil(pieces);
        let parts: Vec<Self> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..n)
                .step_by(step)
                .map(|start| {
                    let end = (start + step).min(n);
                    let (x, p) = (&xs[start..end], &pos[start..end]);
                    s.spawn(move || Self::fit(x, p, len, kind, eps))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_default())
                .collect()
        });
        let mut m = Self {
            first_x: Vec::new(),
            lines: Vec::new(),
            len,
        };
        for part in parts {
            m.first_x.extend(part.first_x);
            m.lines.extend(part.lines);
        }
        m
    }

    /// The positions to search for `x`. For a fitted `x` the window holds
    /// its position; for any other `x` it is a hint (callers search on
    /// past its ends when the answer is not inside).
    pub fn window(&self, x: u64) -> Option<Window> {
        self.predict(x).map(|(w, _)| w)
    }

    /// [`BoundedModel::window`] and the unrounded prediction `p` it is
    /// built around. `p` is a pure function of `x` and the model as
    /// encoded, so a decoded model predicts exactly what the fitted one
    /// did: callers may store thresholds on `p` measured at build time.
    /// `p` is not monotone across segments.
    pub fn predict(&self, x: u64) -> Option<(Window, f64)> {
        let i = self.first_x.partition_point(|&f| f <= x).checked_sub(1);
        self.predict_in(i, x)
    }

    /// The [`Estimate`] of every `x` of an ascending sequence, finding
    /// segments by walking forward rather than by search;
    /// [`BoundedModel::window_of`] turns one into what
    /// [`BoundedModel::predict`] returns for its `x`.
    pub fn estimate_ascending<'a, I>(&'a self, xs: I) -> impl Iterator<Item = Estimate> + 'a
    where
        I: IntoIterator<Item = u64>,
        I::IntoIter: 'a,
    {
        // Index of the first segment starting above the last `x`.
        let mut next = 0usize;
        xs.into_iter().map(move |x| {
            if next > 0 && self.first_x.get(next - 1).is_some_and(|&f| f > x) {
                // Not ascending after all: search.
                next = self.first_x.partition_point(|&f| f <= x);
            }
            while self.first_x.get(next).is_some_and(|&f| f <= x) {
                next += 1;
            }
            self.estimate_in(next.checked_sub(1), x)
        })
    }

    /// The estimate for `x` by segment `i` (`None`: below every segment).
    #[inline]
    fn estimate_in(&self, i: Option<usize>, x: u64) -> Estimate {
        let line = i.and_then(|i| Some((*self.first_x.get(i)?, *self.lines.get(i)?)));
        match line {
            Some((first, line)) => {
                let p = line.intercept + line.slope * (x - first) as f64;
                Estimate {
                    p,
                    lo: p - line.above as f64,
                    hi: p + line.below as f64,
                }
            }
            // Below every fitted key: the answer is the first position.
            None => Estimate {
                p: 0.0,
                lo: 0.0,
                hi: 0.0,
            },
        }
    }

    /// The window an estimate stands for: its ends rounded outwards and
    /// clamped to the model's positions (`None` for an empty model).
    #[inline]
    pub fn window_of(&self, e: Estimate) -> Option<Window> {
        if self.len == 0 {
            return None;
        }
        let last = (self.len - 1) as f64;
        let lo = e.lo.floor().clamp(0.0, last) as u64;
        let hi = (e.hi.ceil().clamp(0.0, last) as u64).max(lo);
        let at = (e.p.round().clamp(0.0, last) as u64).clamp(lo, hi);
        Some(Window { lo, hi, at })
    }

    fn predict_in(&self, i: Option<usize>, x: u64) -> Option<(Window, f64)> {
        let e = self.estimate_in(i, x);
        Some((self.window_of(e)?, e.p))
    }

    /// The widest window any segment gives, `below + above` positions:
    /// a fitted point's window lies within this of the point's position
    /// on either side.
    pub fn max_window(&self) -> u64 {
        self.lines
            .iter()
            .map(|l| l.below as u64 + l.above as u64)
            .max()
            .unwrap_or(0)
    }

    /// Each segment's first key, ascending: segment `s` answers the keys
    /// from its first up to the next segment's.
    pub fn segment_starts(&self) -> &[u64] {
        &self.first_x
    }

    pub fn segment_count(&self) -> usize {
        self.first_x.len()
    }

    /// Mean window width (positions) over segments, for reports.
    pub fn mean_window(&self) -> f64 {
        if self.lines.is_empty() {
            return 0.0;
        }
        let sum: f64 = self
            .lines
            .iter()
            .map(|l| (l.below as f64) + (l.above as f64) + 1.0)
            .sum();
        sum / self.lines.len() as f64
    }

    /// Bytes the model takes in memory.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.first_x.capacity() * std::mem::size_of::<u64>()
            + self.lines.capacity() * std::mem::size_of::<Line>()
    }

    /// Bytes [`BoundedModel::encode`] writes.
    pub fn encoded_len(&self) -> usize {
        let mut v = Vec::new();
        self.encode(&mut v);
        v.len()
    }

    /// `len: u64 | count: u64 | per segment: varint(first_x − previous
    /// first_x) | slope f32 | intercept f32 | varint(above) |
    /// varint(below)`, little-endian; the first segment's delta is from 0.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&(self.first_x.len() as u64).to_le_bytes());
        let mut prev = 0u64;
        for (&x, l) in self.first_x.iter().zip(&self.lines) {
            put_varint(out, x - prev);
            prev = x;
            out.extend_from_slice(&(l.slope as f32).to_le_bytes());
            out.extend_from_slice(&(l.intercept as f32).to_le_bytes());
            put_varint(out, l.above as u64);
            put_varint(out, l.below as u64);
        }
    }

    /// Decodes what [`BoundedModel::encode`] wrote; `None` on any damage
    /// (wrong length, unordered segments, non-finite parameters).
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let (m, rest) = Self::decode_prefix(bytes)?;
        rest.is_empty().then_some(m)
    }

    /// [`BoundedModel::decode`] of a model followed by other bytes, which
    /// it returns.
    pub fn decode_prefix(bytes: &[u8]) -> Option<(Self, &[u8])> {
        let mut at = 0usize;
        let mut take = |n: usize| -> Option<&[u8]> {
            let s = bytes.get(at..at.checked_add(n)?)?;
            at += n;
            Some(s)
        };
        let len = u64::from_le_bytes(take(8)?.try_into().ok()?);
        let count = usize::try_from(u64::from_le_bytes(take(8)?.try_into().ok()?)).ok()?;
        // Every segment takes at least 11 bytes.
        if count > bytes.len() / 11 {
            return None;
        }
        let mut m = Self {
            first_x: Vec::with_capacity(count),
            lines: Vec::with_capacity(count),
            len,
        };
        let mut rest = bytes.get(16..)?;
        let mut prev = 0u64;
        for i in 0..count {
            let delta = get_varint(&mut rest)?;
            if i > 0 && delta == 0 {
                return None;
            }
            let x = prev.checked_add(delta)?;
            prev = x;
            let (f, tail) = rest.split_first_chunk::<8>()?;
            rest = tail;
            let slope = f32::from_le_bytes([f[0], f[1], f[2], f[3]]) as f64;
            let intercept = f32::from_le_bytes([f[4], f[5], f[6], f[7]]) as f64;
            let above = u16::try_from(get_varint(&mut rest)?).ok()?;
            let below = u16::try_from(get_varint(&mut rest)?).ok()?;
            if !slope.is_finite() || !intercept.is_finite() {
                return None;
            }
            m.first_x.push(x);
            m.lines.push(Line {
                slope,
                intercept,
                below,
                above,
            });
        }
        Some((m, rest))
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get_varint(b: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = b.split_first()?;
        *b = rest;
        v |= ((byte & 0x7f) as u64).checked_shl(shift)?;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// Points the cone takes in one step (see [`cone`]).
const CONE_LANES: usize = 4;
// The step's reductions below are written out for four lanes.
const _: () = assert!(CONE_LANES == 4);

/// The longest run from `start` that one line through the first point
/// covers within ±`eps` (the shrinking cone): its end (exclusive), the
/// middle slope of the cone that remains, and the run's least-squares sums
/// (gathered in the same pass, so the second-level line costs no extra
/// pass over the keys).
///
/// The cone is the intersection of every point's slope interval
/// `[(dy - eps) / dx, (dy + eps) / dx]`, and the run ends at the first
/// point whose interval would leave it empty. An intersection is a running
/// maximum and minimum, so the points' intervals are computed apart from
/// it, [`CONE_LANES`] at a time: the chain from one step to the next is a
/// single max and min rather than a compare and select per point, whose
/// latency would bound the fit. A step whose points empty the cone is redone
/// point by point to find where the run ends; since the intersection of a
/// prefix contains the whole step's, a step that keeps the cone non-empty
/// keeps every point of it.
fn cone<const S: bool>(
    xs: &[u64],
    pos: &[u64],
    start: usize,
    n: usize,
    eps: f64,
) -> (usize, f64, Sums) {
    let (x0, y0) = (xs[start], pos[start]);
    let (mut lo, mut hi) = (f64::NEG_INFINITY, f64::INFINITY);
    let mut lanes = [Sums::default(); CONE_LANES];
    lanes[0].add(0.0, 0.0);
    let mut j = start + 1;
    while j + CONE_LANES <= n {
        let (xs_j, pos_j) = (&xs[j..j + CONE_LANES], &pos[j..j + CONE_LANES]);
        let mut d = [(0.0, 0.0); CONE_LANES];
        let mut iv = [(0.0, 0.0); CONE_LANES];
        let mut rising = true;
        for k in 0..CONE_LANES {
            d[k] = (diff_f64::<S>(xs_j[k], x0), diff_f64::<S>(pos_j[k], y0));
            iv[k] = slope_interval(d[k].0, d[k].1, eps);
            rising &= d[k].0 > 0.0;
        }
        let step_lo = max(max(iv[0].0, iv[1].0), max(iv[2].0, iv[3].0));
        let step_hi = min(min(iv[0].1, iv[1].1), min(iv[2].1, iv[3].1));
        let (next_lo, next_hi) = (max(lo, step_lo), min(hi, step_hi));
        if !(rising && next_lo <= next_hi) {
            break;
        }
        (lo, hi) = (next_lo, next_hi);
        for (s, &(dx, dy)) in lanes.iter_mut().zip(&d) {
            s.add(dx, dy);
        }
        j += CONE_LANES;
    }
    let mut end = n;
    while j < n {
        let (dx, dy) = (diff_f64::<S>(xs[j], x0), diff_f64::<S>(pos[j], y0));
        let (l, h) = slope_interval(dx, dy, eps);
        let (next_lo, next_hi) = (max(lo, l), min(hi, h));
        if !(dx > 0.0 && next_lo <= next_hi) {
            end = j;
            break;
        }
        (lo, hi) = (next_lo, next_hi);
        lanes[0].add(dx, dy);
        j += 1;
    }
    let slope = match (lo.is_finite(), hi.is_finite()) {
        (true, true) => (lo + hi) / 2.0,
        (true, false) => lo,
        _ => 0.0,
    };
    let mut sums = lanes[0];
    for l in &lanes[1..] {
        sums.merge(l);
    }
    sums.y0 = y0 as f64;
    (end, slope.max(0.0), sums)
}

/// The larger of `a` and `b`: one instruction, where `f64::max`, which
/// ignores a NaN, takes several. A NaN `b` is returned, so a NaN error
/// poisons a measured bound (which then fails [`rounded_bounds`] and splits
/// the segment) instead of being skipped; the cone never keeps a NaN slope
/// (`dx > 0` is checked first).
#[inline(always)]
fn max(a: f64, b: f64) -> f64 {
    if a > b {
        a
    } else {
        b
    }
}

/// The smaller of `a` and `b`; see [`max`].
#[inline(always)]
fn min(a: f64, b: f64) -> f64 {
    if a < b {
        a
    } else {
        b
    }
}

/// The slopes of the lines from the first point that pass within ±`eps`
/// of a point `(dx, dy)` from it (`dx > 0`).
#[inline(always)]
fn slope_interval(dx: f64, dy: f64, eps: f64) -> (f64, f64) {
    let inv = 1.0 / dx;
    ((dy - eps) * inv, (dy + eps) * inv)
}

/// `v as f64`. With `SIGNED` (the caller knows `v < 2^63`) through the
/// one-instruction signed conversion, where the unsigned one takes
/// several: the same value either way.
#[inline(always)]
fn as_f64<const SIGNED: bool>(v: u64) -> f64 {
    if SIGNED {
        v as i64 as f64
    } else {
        v as f64
    }
}

/// `a - b` as `f64` for `a >= b` (0 if not). With `SIGNED` (the caller
/// knows the difference is below `2^63`) the difference wraps and converts
/// as signed: a saturated difference is known non-negative, and the
/// compiler would convert it by the unsigned sequence.
#[inline(always)]
fn diff_f64<const SIGNED: bool>(a: u64, b: u64) -> f64 {
    if SIGNED {
        a.wrapping_sub(b) as i64 as f64
    } else {
        a.saturating_sub(b) as f64
    }
}

/// Whether every difference between two of the ascending `vs` is below
/// `2^63`, so [`as_f64`] may take its signed path.
fn spans_signed(vs: &[u64]) -> bool {
    match (vs.first(), vs.last()) {
        (Some(&a), Some(&b)) => b.wrapping_sub(a) >> 63 == 0,
        _ => true,
    }
}

/// Running sums for a least-squares line over points `(dx, dy)` taken
/// relative to a segment's first point `(x0, y0)`.
#[derive(Debug, Clone, Copy, Default)]
struct Sums {
    n: f64,
    sx: f64,
    sy: f64,
    sxx: f64,
    sxy: f64,
    y0: f64,
}

impl Sums {
    fn add(&mut self, dx: f64, dy: f64) {
        self.n += 1.0;
        self.sx += dx;
        self.sy += dy;
        self.sxx += dx * dx;
        self.sxy += dx * dy;
    }

    fn merge(&mut self, o: &Sums) {
        self.n += o.n;
        self.sx += o.sx;
        self.sy += o.sy;
        self.sxx += o.sxx;
        self.sxy += o.sxy;
    }

    /// The least-squares line (slope clamped at zero, as positions never
    /// fall). Its bounds are measured afterwards, so rounding here can
    /// only widen a window, never lose a key.
    fn line(&self) -> Line {
        let (mx, my) = (self.sx / self.n, self.sy / self.n);
        let vxx = self.sxx - self.sx * mx;
        let cxy = self.sxy - self.sx * my;
        let slope = if vxx > 0.0 { (cxy / vxx).max(0.0) } else { 0.0 };
        Line {
            slope,
            intercept: self.y0 + my - slope * mx,
            below: 0,
            above: 0,
        }
    }
}

/// Ordinary least squares of `pos` on `x - first_x`.
fn least_squares(xs: &[u64], pos: &[u64]) -> Line {
    let x0 = xs[0];
    let n = xs.len() as f64;
    let (mut sx, mut sy) = (0.0, 0.0);
    for (&x, &p) in xs.iter().zip(pos) {
        sx += (x - x0) as f64;
        sy += p as f64;
    }
    let (mx, my) = (sx / n, sy / n);
    let (mut sxx, mut sxy) = (0.0, 0.0);
    for (&x, &p) in xs.iter().zip(pos) {
        let dx = (x - x0) as f64 - mx;
        sxx += dx * dx;
        sxy += dx * (p as f64 - my);
    }
    let slope = if sxx > 0.0 { (sxy / sxx).max(0.0) } else { 0.0 };
    Line {
        slope,
        intercept: my - slope * mx,
        below: 0,
        above: 0,
    }
}

/// `(below, above)`: how far the line's predictions fall short of / pass
/// the true positions, rounded up; `None` if either exceeds `u16::MAX`.
fn bounds<const S: bool>(xs: &[u64], pos: &[u64], line: Line) -> Option<(u16, u16)> {
    let x0 = xs[0];
    let (mut below, mut above) = (0.0f64, 0.0f64);
    for (&x, &p) in xs.iter().zip(pos) {
        let pred = line.intercept + line.slope * as_f64::<S>(x - x0);
        let err = as_f64::<S>(p) - pred;
        below = max(below, err);
        above = max(above, -err);
    }
    rounded_bounds(below, above)
}

fn rounded_bounds(below: f64, above: f64) -> Option<(u16, u16)> {
    // One extra position absorbs floating-point rounding at lookup time.
    let b = below.ceil() + 1.0;
    let a = above.ceil() + 1.0;
    (b <= u16::MAX as f64 && a <= u16::MAX as f64).then_some((b as u16, a as u16))
}

/// `(below, above)` of a line, `None` when either overflows `u16`.
type Bounds = Option<(u16, u16)>;

/// [`bounds`] of two lines over the same points, in one pass.
fn bounds_of_two<const S: bool>(xs: &[u64], pos: &[u64], a: Line, b: Line) -> (Bounds, Bounds) {
    let x0 = xs[0];
    let (mut a_below, mut a_above, mut b_below, mut b_above) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    for (&x, &p) in xs.iter().zip(pos) {
        let dx = as_f64::<S>(x - x0);
        let p = as_f64::<S>(p);
        let ea = p - (a.intercept + a.slope * dx);
        let eb = p - (b.intercept + b.slope * dx);
        a_below = max(a_below, ea);
        a_above = max(a_above, -ea);
        b_below = max(b_below, eb);
        b_above = max(b_above, -eb);
    }
    (
        rounded_bounds(a_below, a_above),
        rounded_bounds(b_below, b_above),
    )
}

fn quantized(l: Line) -> Line {
    Line {
        slope: l.slope as f32 as f64,
        intercept: l.intercept as f32 as f64,
        ..l
    }
}

fn window_width(bounds: Option<(u16, u16)>) -> f64 {
    bounds.map_or(f64::INFINITY, |(b, a)| b as f64 + a as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn check_all_inside(xs: &[u64], pos: &[u64], m: &BoundedModel) {
        for (&x, &p) in xs.iter().zip(pos) {
            let w = m.window(x).unwrap();
            assert!(w.lo <= p && p <= w.hi, "x {x} pos {p} window {w:?}");
        }
    }

    #[test]
    fn sequential_keys_need_one_segment() {
        let xs: Vec<u64> = (0..10_000).map(|i| 1000 + 3 * i).collect();
        let pos: Vec<u64> = (0..10_000).collect();
        for kind in [FitKind::Linear, FitKind::Piecewise, FitKind::TwoLevel] {
            let m = BoundedModel::fit(&xs, &pos, 10_000, kind, 8.0);
            assert_eq!(m.segment_count(), 1, "{kind:?}");
            check_all_inside(&xs, &pos, &m);
            assert!(m.mean_window() <= 5.0);
        }
    }

    #[test]
    fn piecewise_windows_respect_eps() {
        let mut x = 0u64;
        let xs: Vec<u64> = (0..5000u64)
            .map(|i| {
                x += 1 + (i * 7919 % 97) * (i % 13);
                x
            })
            .collect();
        let pos: Vec<u64> = (0..5000).map(|i| i * 2).collect();
        let m = BoundedModel::fit(&xs, &pos, 10_000, FitKind::Piecewise, 8.0);
        check_all_inside(&xs, &pos, &m);
        // Cone lines keep every point within ε (+1 for rounding) on each side.
        for l in &m.lines {
            assert!(l.below <= 10 && l.above <= 10, "{l:?}");
        }
        let two = BoundedModel::fit(&xs, &pos, 10_000, FitKind::TwoLevel, 8.0);
        assert_eq!(two.segment_count(), m.segment_count());
        assert!(two.mean_window() <= m.mean_window());
    }

    #[test]
    fn the_signed_conversion_fits_what_the_unsigned_one_does() {
        let mut x = 1u64 << 40;
        let xs: Vec<u64> = (0..5000u64)
            .map(|i| {
                x += 1 + (i * 7919 % 997) * (i % 13);
                x
            })
            .collect();
        let pos: Vec<u64> = (0..5000).collect();
        for kind in [FitKind::Linear, FitKind::Piecewise, FitKind::TwoLevel] {
            let signed = BoundedModel::fit_with::<true>(&xs, &pos, 5000, kind, 8.0);
            let unsigned = BoundedModel::fit_with::<false>(&xs, &pos, 5000, kind, 8.0);
            assert_eq!(signed, unsigned, "{kind:?}");
        }
    }

    #[test]
    fn keys_spanning_more_than_half_the_key_space_fit_within_eps() {
        // Differences past 2^63 take the unsigned conversion.
        let step = u64::MAX / 5000;
        let xs: Vec<u64> = (0..5000u64)
            .map(|i| i * step + (i * 7919 % 997) * (step / 4000))
            .collect();
        let pos: Vec<u64> = (0..5000).collect();
        assert!(!spans_signed(&xs));
        let m = BoundedModel::fit(&xs, &pos, 5000, FitKind::Piecewise, 8.0);
        check_all_inside(&xs, &pos, &m);
        for l in &m.lines {
            assert!(l.below <= 10 && l.above <= 10, "{l:?}");
        }
    }

    #[test]
    fn encode_round_trips_and_rejects_damage() {
        let xs: Vec<u64> = (0..300u64).map(|i| i * i).collect();
        let pos: Vec<u64> = (0..300).collect();
        let m = BoundedModel::fit(&xs, &pos, 300, FitKind::TwoLevel, 2.0);
        let mut b = Vec::new();
        m.encode(&mut b);
        assert_eq!(b.len(), m.encoded_len());
        assert_eq!(BoundedModel::decode(&b).unwrap(), m);
        assert!(BoundedModel::decode(&b[..b.len() - 1]).is_none());
        let mut extra = b.clone();
        extra.push(0);
        assert!(BoundedModel::decode(&extra).is_none());
    }

    /// The cone as its definition reads, one point at a time: the end of
    /// the run from `start` whose slope intervals all meet.
    fn cone_reference(xs: &[u64], pos: &[u64], start: usize, eps: f64) -> usize {
        let (mut lo, mut hi) = (f64::NEG_INFINITY, f64::INFINITY);
        for j in start + 1..xs.len() {
            let dx = (xs[j] - xs[start]) as f64;
            let dy = (pos[j] - pos[start]) as f64;
            let (l, h) = slope_interval(dx, dy, eps);
            lo = max(lo, l);
            hi = min(hi, h);
            if !(dx > 0.0 && lo <= hi) {
                return j;
            }
        }
        xs.len()
    }

    proptest! {
        #[test]
        fn every_fitted_point_is_inside_its_window(
            mut xs in proptest::collection::vec(any::<u64>(), 1..400),
            gaps in proptest::collection::vec(1u64..50, 400),
            eps in 0.0f64..32.0,
        ) {
            xs.sort_unstable();
            xs.dedup();
            let mut p = 0u64;
            let pos: Vec<u64> = xs.iter().zip(&gaps).map(|(_, g)| { p += g; p }).collect();
            for kind in [FitKind::Linear, FitKind::Piecewise, FitKind::TwoLevel] {
                let m = BoundedModel::fit(&xs, &pos, p + 1, kind, eps);
                check_all_inside(&xs, &pos, &m);
            }
        }

        #[test]
        fn the_cone_ends_where_the_slope_intervals_stop_meeting(
            gaps in proptest::collection::vec(1u64..1000, 2..300),
            steps in proptest::collection::vec(1u64..4, 300),
            eps in 0.0f64..16.0,
            start_at in 0.0f64..1.0,
        ) {
            let mut x = 1u64 << 20;
            let xs: Vec<u64> = gaps.iter().map(|g| { x += g; x }).collect();
            let mut p = 0u64;
            let pos: Vec<u64> = steps.iter().take(xs.len()).map(|s| { p += s; p }).collect();
            let n = xs.len();
            let start = ((n - 1) as f64 * start_at) as usize;
            let want = cone_reference(&xs, &pos, start, eps);
            for (end, _, sums) in [cone::<true>(&xs, &pos, start, n, eps), cone::<false>(&xs, &pos, start, n, eps)] {
                prop_assert_eq!(end, want);
                // The lanes' sums add up to the run's.
                prop_assert_eq!(sums.n, (end - start) as f64);
                let sx: f64 = xs[start..end].iter().map(|&x| (x - xs[start]) as f64).sum();
                let sy: f64 = pos[start..end].iter().map(|&q| (q - pos[start]) as f64).sum();
                prop_assert!((sums.sx - sx).abs() <= 1e-9 * sx.max(1.0));
                prop_assert!((sums.sy - sy).abs() <= 1e-9 * sy.max(1.0));
            }
        }

        #[test]
        fn parallel_fits_keep_every_point_inside(
            mut xs in proptest::collection::vec(any::<u64>(), 1..400),
            pieces in 1usize..6,
        ) {
            xs.sort_unstable();
            xs.dedup();
            let pos: Vec<u64> = (0..xs.len() as u64).collect();
            let m = BoundedModel::fit_parallel(&xs, &pos, xs.len() as u64, FitKind::TwoLevel, 4.0, pieces);
            check_all_inside(&xs, &pos, &m);
        }

        #[test]
        fn estimates_round_to_what_predict_returns(
            mut xs in proptest::collection::vec(any::<u64>(), 1..300),
            mut probes in proptest::collection::vec(any::<u64>(), 0..300),
            eps in 0.0f64..32.0,
        ) {
            xs.sort_unstable();
            xs.dedup();
            let pos: Vec<u64> = (0..xs.len() as u64).map(|i| 3 * i).collect();
            let m = BoundedModel::fit(&xs, &pos, 3 * xs.len() as u64, FitKind::TwoLevel, eps);
            // Fitted keys and others, ascending, then out of order.
            probes.extend_from_slice(&xs);
            probes.sort_unstable();
            let reversed: Vec<u64> = probes.iter().rev().copied().collect();
            for seq in [&probes, &reversed] {
                for (e, &x) in m.estimate_ascending(seq.iter().copied()).zip(seq) {
                    prop_assert!(e.lo <= e.p && e.p <= e.hi);
                    prop_assert_eq!(m.window_of(e).map(|w| (w, e.p)), m.predict(x));
                }
            }
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = BoundedModel::decode(&bytes);
        }
    }
}
