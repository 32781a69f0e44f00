//! Sorted-set ranges: by rank, by score and by member (lex), forwards or
//! reversed, with `LIMIT`; storing a range, and removing one. A range is
//! one ordered scan of the score index (or, by member, of the member
//! records); a rank range near the end scans from the end.

use std::ops::{Bound, ControlFlow};

use super::args::{int, is, parse_float};
use super::zsets::{finish, scored_reply, zset};
use super::{fail, syntax_error, CmdResult, Ctx, Fail};
use crate::model::{Coll, Found, Kind};
use crate::reply::Reply;
use crate::request::Args;

/// A score bound: `1.5`, `(1.5` (exclusive), `-inf`, `+inf`.
fn score_bound(b: &[u8]) -> Option<Bound<f64>> {
    match b.split_first() {
        Some((b'(', rest)) => parse_float(rest).map(Bound::Excluded),
        _ => parse_float(b).map(Bound::Included),
    }
}

/// `min max` as score bounds.
pub fn score_range(min: &[u8], max: &[u8]) -> Result<(Bound<f64>, Bound<f64>), Fail> {
    match (score_bound(min), score_bound(max)) {
        (Some(lo), Some(hi)) => Ok((lo, hi)),
        _ => Err(fail("min or max is not a float")),
    }
}

/// A member bound: `[a` (inclusive), `(a`, `-` (below all), `+` (above
/// all, as the upper bound; as the lower bound it admits nothing).
#[derive(Debug, Clone, PartialEq)]
enum Lex {
    Bound(Bound<Vec<u8>>),
    /// `+` as a lower bound or `-` as an upper one: nothing qualifies.
    Nothing,
}

fn lex_bound(b: &[u8], upper: bool) -> Option<Lex> {
    match b.split_first() {
        Some((b'[', rest)) => Some(Lex::Bound(Bound::Included(rest.to_vec()))),
        Some((b'(', rest)) => Some(Lex::Bound(Bound::Excluded(rest.to_vec()))),
        Some((b'-', [])) if upper => Some(Lex::Nothing),
        Some((b'-', [])) => Some(Lex::Bound(Bound::Unbounded)),
        Some((b'+', [])) if upper => Some(Lex::Bound(Bound::Unbounded)),
        Some((b'+', [])) => Some(Lex::Nothing),
        _ => None,
    }
}

/// Bounds on member bytes, lower then upper.
pub type LexRange = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// `min max` as member bounds; `(Unbounded, Excluded(""))` (an empty
/// range) when nothing can qualify.
pub fn lex_range(min: &[u8], max: &[u8]) -> Result<LexRange, Fail> {
    match (lex_bound(min, false), lex_bound(max, true)) {
        (Some(Lex::Bound(lo)), Some(Lex::Bound(hi))) => Ok((lo, hi)),
        (Some(_), Some(_)) => Ok((Bound::Unbounded, Bound::Excluded(Vec::new()))),
        _ => Err(fail("min or max not valid string range item")),
    }
}

/// What a range selects.
enum By {
    /// Ranks `start..=stop`, Redis's negative indexes allowed.
    Rank(i64, i64),
    Score(Bound<f64>, Bound<f64>),
    Lex(Bound<Vec<u8>>, Bound<Vec<u8>>),
}

/// A range request.
struct Range {
    by: By,
    rev: bool,
    /// `LIMIT offset count` (count < 0: all).
    limit: Option<(i64, i64)>,
    with_scores: bool,
}

/// The members (with scores) a range selects, in reply order.
fn select(ctx: &Ctx<'_, '_>, f: &Found, c: &Coll, r: &Range) -> Result<Vec<(Vec<u8>, f64)>, Fail> {
    let (offset, count) = r.limit.unwrap_or((0, -1));
    if offset < 0 {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    match &r.by {
        By::Rank(start, stop) => {
            let size = c.size as i64;
            let mut s = if *start < 0 { size + start } else { *start };
            let mut e = if *stop < 0 { size + stop } else { *stop };
            s = s.max(0);
            if s > e || s >= size {
                return Ok(out);
            }
            if e >= size {
                e = size - 1;
            }
            // In the index's order, ranks lo..=hi; from the nearer end.
            let (lo, hi) = if r.rev {
                (size - 1 - e, size - 1 - s)
            } else {
                (s, e)
            };
            let from_end = size - 1 - hi < lo;
            let skip = if from_end { size - 1 - hi } else { lo };
            let want = (hi - lo + 1) as usize;
            let mut seen = 0i64;
            ctx.tx.scan_scores(
                f.slot,
                c,
                Bound::Unbounded,
                Bound::Unbounded,
                from_end,
                &mut |score, m| {
                    if seen >= skip {
                        out.push((m.to_vec(), score));
                    }
                    seen += 1;
                    if out.len() >= want {
                        ControlFlow::Break(())
                    } else {
                        ControlFlow::Continue(())
                    }
                },
            )?;
            // The scan ran in index order (or against it); the reply goes
            // in the requested order.
            if from_end != r.rev {
                out.reverse();
            }
        }
        By::Score(..) | By::Lex(..) if count == 0 => {}
        By::Score(lo, hi) => {
            let mut skipped = 0i64;
            ctx.tx
                .scan_scores(f.slot, c, *lo, *hi, r.rev, &mut |score, m| {
                    if skipped < offset {
                        skipped += 1;
                        return ControlFlow::Continue(());
                    }
                    out.push((m.to_vec(), score));
                    if count >= 0 && out.len() as i64 >= count {
                        ControlFlow::Break(())
                    } else {
                        ControlFlow::Continue(())
                    }
                })?;
        }
        By::Lex(lo, hi) => {
            let mut skipped = 0i64;
            let mut bad = None;
            ctx.tx.scan_members(
                f.slot,
                c,
                lo.as_ref().map(Vec::as_slice),
                hi.as_ref().map(Vec::as_slice),
                r.rev,
                &mut |m, v| {
                    if skipped < offset {
                        skipped += 1;
                        return ControlFlow::Continue(());
                    }
                    match <[u8; 8]>::try_from(v) {
                        Ok(b) => out.push((m.to_vec(), crate::model::decode_score(b))),
                        Err(_) => {
                            bad = Some(crate::model::ModelError::Corrupt(
                                "a sorted-set score is not 8 bytes".into(),
                            ));
                            return ControlFlow::Break(());
                        }
                    }
                    if count >= 0 && out.len() as i64 >= count {
                        ControlFlow::Break(())
                    } else {
                        ControlFlow::Continue(())
                    }
                },
            )?;
            if let Some(e) = bad {
                return Err(e.into());
            }
        }
    }
    Ok(out)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Style {
    /// `ZRANGE` (and `ZRANGESTORE`): `BYSCORE`/`BYLEX`/`REV`/`LIMIT`.
    Generic,
    Rank {
        rev: bool,
    },
    Score {
        rev: bool,
    },
    Lex {
        rev: bool,
    },
}

/// Parses a range request from `a[at..]` (`min max` then options).
fn parse(a: &Args, at: usize, style: Style, store: bool) -> Result<Range, Fail> {
    #[derive(PartialEq)]
    enum Mode {
        Rank,
        Score,
        Lex,
    }
    let (mut mode, mut rev) = match style {
        Style::Generic => (Mode::Rank, false),
        Style::Rank { rev } => (Mode::Rank, rev),
        Style::Score { rev } => (Mode::Score, rev),
        Style::Lex { rev } => (Mode::Lex, rev),
    };
    let (mut limit, mut with_scores) = (None, false);
    let mut j = at + 2;
    while j < a.len() {
        let o = &a[j];
        let left = a.len() - j - 1;
        if !store && is(o, "WITHSCORES") && !matches!(style, Style::Lex { .. }) {
            with_scores = true;
        } else if is(o, "LIMIT") && left >= 2 && !matches!(style, Style::Rank { .. }) {
            limit = Some((int(a[j + 1])?, int(a[j + 2])?));
            j += 2;
        } else if style == Style::Generic && is(o, "BYSCORE") && mode == Mode::Rank {
            mode = Mode::Score;
        } else if style == Style::Generic && is(o, "BYLEX") && mode == Mode::Rank {
            mode = Mode::Lex;
        } else if style == Style::Generic && is(o, "REV") {
            rev = true;
        } else {
            return Err(syntax_error());
        }
        j += 1;
    }
    if limit.is_some() && mode == Mode::Rank {
        return Err(fail(
            "syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ));
    }
    if with_scores && mode == Mode::Lex {
        return Err(fail(
            "syntax error, WITHSCORES not supported in combination with BYLEX",
        ));
    }
    // Reversed score and lex ranges name the maximum first.
    let (min, max) = if rev && mode != Mode::Rank {
        (&a[at + 1], &a[at])
    } else {
        (&a[at], &a[at + 1])
    };
    let by = match mode {
        Mode::Rank => By::Rank(int(a[at])?, int(a[at + 1])?),
        Mode::Score => {
            let (lo, hi) = score_range(min, max)?;
            By::Score(lo, hi)
        }
        Mode::Lex => {
            let (lo, hi) = lex_range(min, max)?;
            By::Lex(lo, hi)
        }
    };
    Ok(Range {
        by,
        rev,
        limit,
        with_scores,
    })
}

fn range_reply(ctx: &mut Ctx<'_, '_>, a: &Args, style: Style) -> CmdResult {
    let r = parse(a, 2, style, false)?;
    let (f, c) = zset(ctx, a[1])?;
    let Some(c) = c else {
        return Ok(Reply::Array(Vec::new()));
    };
    let items = select(ctx, &f, &c, &r)?;
    Ok(scored_reply(ctx.session.proto, items, r.with_scores))
}

pub fn zrange(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    range_reply(ctx, a, Style::Generic)
}

pub fn zrevrange(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    range_reply(ctx, a, Style::Rank { rev: true })
}

pub fn zrangebyscore(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    range_reply(ctx, a, Style::Score { rev: false })
}

pub fn zrevrangebyscore(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    range_reply(ctx, a, Style::Score { rev: true })
}

pub fn zrangebylex(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    range_reply(ctx, a, Style::Lex { rev: false })
}

pub fn zrevrangebylex(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    range_reply(ctx, a, Style::Lex { rev: true })
}

/// Replaces `dest` with a sorted set of `items` (deleting it when
/// empty); answers the size.
pub fn store_zset(
    ctx: &mut Ctx<'_, '_>,
    dest: &[u8],
    items: Vec<(Vec<u8>, f64)>,
    event: &'static str,
) -> CmdResult {
    let mut f = ctx.tx.lookup(ctx.db(), dest)?;
    let n = items.len() as i64;
    if items.is_empty() {
        if ctx.tx.remove(&mut f)? {
            ctx.tx.notify('g', "del", f.db, dest);
        }
        return Ok(Reply::Int(0));
    }
    let mut m = ctx.tx.new_coll(Kind::ZSet)?;
    if let Some(c) = m.coll_mut() {
        for (member, s) in &items {
            ctx.tx.zput(f.slot, c, member, None, *s)?;
        }
        c.size = n as u64;
    }
    ctx.tx.set(&mut f, Some(m))?;
    ctx.tx.notify('z', event, f.db, dest);
    Ok(Reply::Int(n))
}

/// `ZRANGESTORE dst src min max [BYSCORE | BYLEX] [REV] [LIMIT o c]`.
pub fn zrangestore(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let r = parse(a, 3, Style::Generic, true)?;
    let (f, c) = zset(ctx, a[2])?;
    let items = match c {
        Some(c) => select(ctx, &f, &c, &r)?,
        None => Vec::new(),
    };
    store_zset(ctx, a[1], items, "zrangestore")
}

fn remove_range(ctx: &mut Ctx<'_, '_>, a: &Args, style: Style, event: &'static str) -> CmdResult {
    let r = match style {
        Style::Rank { .. } => Range {
            by: By::Rank(int(a[2])?, int(a[3])?),
            rev: false,
            limit: None,
            with_scores: false,
        },
        _ => parse(a, 2, style, true)?,
    };
    let mut f = ctx.tx.lookup(ctx.db(), a[1])?;
    let Some(mut m) = f.typed(Kind::ZSet)?.cloned() else {
        return Ok(Reply::Int(0));
    };
    let Some(c) = m.coll_mut() else {
        return Ok(Reply::Int(0));
    };
    let doomed = select(ctx, &f, c, &r)?;
    for (member, s) in &doomed {
        ctx.tx.zdelete(f.slot, c, member, *s)?;
        c.size -= 1;
    }
    if !doomed.is_empty() {
        finish(ctx, &mut f, m, event)?;
    }
    Ok(Reply::Int(doomed.len() as i64))
}

pub fn zremrangebyrank(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    remove_range(ctx, a, Style::Rank { rev: false }, "zremrangebyrank")
}

pub fn zremrangebyscore(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    remove_range(ctx, a, Style::Score { rev: false }, "zremrangebyscore")
}

pub fn zremrangebylex(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    remove_range(ctx, a, Style::Lex { rev: false }, "zremrangebylex")
}

pub fn zcount(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let (lo, hi) = score_range(a[2], a[3])?;
    let (f, c) = zset(ctx, a[1])?;
    let Some(c) = c else {
        return Ok(Reply::Int(0));
    };
    let mut n = 0;
    ctx.tx.scan_scores(f.slot, &c, lo, hi, false, &mut |_, _| {
        n += 1;
        ControlFlow::Continue(())
    })?;
    Ok(Reply::Int(n))
}

pub fn zlexcount(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let (lo, hi) = lex_range(a[2], a[3])?;
    let (f, c) = zset(ctx, a[1])?;
    let Some(c) = c else {
        return Ok(Reply::Int(0));
    };
    let mut n = 0;
    ctx.tx.scan_members(
        f.slot,
        &c,
        lo.as_ref().map(Vec::as_slice),
        hi.as_ref().map(Vec::as_slice),
        false,
        &mut |_, _| {
            n += 1;
            ControlFlow::Continue(())
        },
    )?;
    Ok(Reply::Int(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_parse_as_redis_parses_them() {
        assert_eq!(score_bound(b"(1.5"), Some(Bound::Excluded(1.5)));
        assert_eq!(
            score_bound(b"-inf"),
            Some(Bound::Included(f64::NEG_INFINITY))
        );
        assert_eq!(score_bound(b"(nan"), None);
        assert_eq!(
            lex_bound(b"[a", false),
            Some(Lex::Bound(Bound::Included(b"a".to_vec())))
        );
        assert_eq!(lex_bound(b"-", false), Some(Lex::Bound(Bound::Unbounded)));
        assert_eq!(lex_bound(b"+", false), Some(Lex::Nothing));
        assert_eq!(lex_bound(b"a", false), None);
        assert!(lex_range(b"a", b"+").is_err());
    }
}
