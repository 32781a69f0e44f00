//! Sorted-set algebra: `ZUNION ZINTER ZDIFF`, their `STORE` forms and
//! `ZINTERCARD`, over sorted sets and sets (a set member scores 1). The
//! inputs are read whole; an intersection walks the smallest and probes
//! the others.

use std::collections::BTreeMap;

use super::args::{float, is, numkeys, parse_int};
use super::zranges::store_zset;
use super::zsets::scored_reply;
use super::{fail, syntax_error, CmdResult, Ctx, Fail};
use crate::model::{Coll, Found, Kind, ModelError};
use crate::reply::Reply;
use crate::request::Args;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Union,
    Inter,
    Diff,
}

#[derive(Clone, Copy)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

/// One input: a sorted set or a set (or nothing), and its weight.
struct Source {
    found: Found,
    coll: Option<Coll>,
    weight: f64,
}

impl Source {
    fn size(&self) -> u64 {
        self.coll.map_or(0, |c| c.size)
    }
}

fn source(ctx: &Ctx<'_, '_>, key: &[u8]) -> Result<Source, Fail> {
    let found = ctx.tx.lookup(ctx.db(), key)?;
    let coll = match found.live().map(|m| m.kind()) {
        None => None,
        Some(Kind::ZSet) => found.coll(Kind::ZSet)?,
        Some(Kind::Set) => found.coll(Kind::Set)?,
        Some(_) => return Err(ModelError::WrongType.into()),
    };
    Ok(Source {
        found,
        coll,
        weight: 1.0,
    })
}

/// Every member of a source with its (unweighted) score.
fn members(ctx: &Ctx<'_, '_>, s: &Source) -> Result<Vec<(Vec<u8>, f64)>, Fail> {
    let Some(c) = &s.coll else {
        return Ok(Vec::new());
    };
    let fields = ctx.tx.all_fields(s.found.slot, c)?;
    Ok(fields
        .into_iter()
        .map(|(m, v)| {
            let score = match c.kind {
                Kind::ZSet => {
                    <[u8; 8]>::try_from(v.as_slice()).map_or(f64::NAN, crate::model::decode_score)
                }
                _ => 1.0,
            };
            (m, score)
        })
        .collect())
}

/// A member's score in a source, if a member.
fn score_in(ctx: &Ctx<'_, '_>, s: &Source, member: &[u8]) -> Result<Option<f64>, Fail> {
    let Some(c) = &s.coll else {
        return Ok(None);
    };
    match c.kind {
        Kind::ZSet => Ok(ctx.tx.zscore(s.found.slot, c, member)?),
        _ => Ok(ctx.tx.field(s.found.slot, c, member)?.map(|_| 1.0)),
    }
}

fn aggregate(into: &mut f64, v: f64, how: Aggregate) {
    match how {
        Aggregate::Sum => {
            *into += v;
            // inf + -inf: Redis's convention is 0.
            if into.is_nan() {
                *into = 0.0;
            }
        }
        Aggregate::Min => *into = into.min(v),
        Aggregate::Max => *into = into.max(v),
    }
}

fn weighted(score: f64, weight: f64) -> f64 {
    let v = score * weight;
    if v.is_nan() {
        0.0
    } else {
        v
    }
}

/// The result of `op`, sorted by (score, member); an intersection stops
/// at `limit` members (0: no limit).
fn compute(
    ctx: &Ctx<'_, '_>,
    srcs: &mut [Source],
    op: Op,
    how: Aggregate,
    limit: usize,
) -> Result<Vec<(Vec<u8>, f64)>, Fail> {
    let mut out: BTreeMap<Vec<u8>, f64> = BTreeMap::new();
    match op {
        Op::Union => {
            for s in srcs.iter() {
                for (m, score) in members(ctx, s)? {
                    let v = weighted(score, s.weight);
                    match out.get_mut(&m) {
                        Some(t) => aggregate(t, v, how),
                        None => {
                            out.insert(m, v);
                        }
                    }
                }
            }
        }
        Op::Inter => {
            srcs.sort_by_key(Source::size);
            if srcs.first().is_none_or(|s| s.size() == 0) {
                return Ok(Vec::new());
            }
            'each: for (m, score) in members(ctx, &srcs[0])? {
                let mut total = weighted(score, srcs[0].weight);
                for s in &srcs[1..] {
                    match score_in(ctx, s, &m)? {
                        Some(x) => aggregate(&mut total, weighted(x, s.weight), how),
                        None => continue 'each,
                    }
                }
                out.insert(m, total);
                if limit > 0 && out.len() >= limit {
                    break;
                }
            }
        }
        Op::Diff => {
            'each: for (m, score) in members(ctx, &srcs[0])? {
                for s in &srcs[1..] {
                    if score_in(ctx, s, &m)?.is_some() {
                        continue 'each;
                    }
                }
                out.insert(m, score);
            }
        }
    }
    let mut items: Vec<(Vec<u8>, f64)> = out.into_iter().collect();
    items.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
    Ok(items)
}

/// Parses `numkeys key... [WEIGHTS w...] [AGGREGATE SUM|MIN|MAX]
/// [WITHSCORES]` from `a[at..]`; `store` forbids `WITHSCORES`.
fn parse(
    ctx: &Ctx<'_, '_>,
    a: &Args,
    at: usize,
    op: Op,
    store: bool,
) -> Result<(Vec<Source>, Aggregate, bool), Fail> {
    let name = String::from_utf8_lossy(a[0]).to_lowercase();
    let n = match parse_int(a[at]) {
        Some(n) if (0..=i32::MAX as i64).contains(&n) => n as usize,
        Some(_) => {
            return Err(fail(format!(
                "value is out of range, value must between 0 and {}",
                i32::MAX
            )))
        }
        None => return Err(super::args::not_an_integer()),
    };
    if n < 1 {
        return Err(fail(format!(
            "at least 1 input key is needed for '{name}' command"
        )));
    }
    if n > a.len() - at - 1 {
        return Err(syntax_error());
    }
    let mut srcs = Vec::with_capacity(n);
    for k in &a[at + 1..at + 1 + n] {
        srcs.push(source(ctx, k)?);
    }
    let (mut how, mut with_scores) = (Aggregate::Sum, false);
    let mut j = at + 1 + n;
    while j < a.len() {
        let left = a.len() - j;
        if op != Op::Diff && left > n && is(a[j], "WEIGHTS") {
            for (i, s) in srcs.iter_mut().enumerate() {
                s.weight = float(a[j + 1 + i]).map_err(|_| fail("weight value is not a float"))?;
            }
            j += 1 + n;
        } else if op != Op::Diff && left >= 2 && is(a[j], "AGGREGATE") {
            how = if is(a[j + 1], "SUM") {
                Aggregate::Sum
            } else if is(a[j + 1], "MIN") {
                Aggregate::Min
            } else if is(a[j + 1], "MAX") {
                Aggregate::Max
            } else {
                return Err(syntax_error());
            };
            j += 2;
        } else if !store && is(a[j], "WITHSCORES") {
            with_scores = true;
            j += 1;
        } else {
            return Err(syntax_error());
        }
    }
    Ok((srcs, how, with_scores))
}

fn read_op(ctx: &mut Ctx<'_, '_>, a: &Args, op: Op) -> CmdResult {
    let (mut srcs, how, with_scores) = parse(ctx, a, 1, op, false)?;
    let items = compute(ctx, &mut srcs, op, how, 0)?;
    Ok(scored_reply(ctx.session.proto, items, with_scores))
}

fn store_op(ctx: &mut Ctx<'_, '_>, a: &Args, op: Op, event: &'static str) -> CmdResult {
    let (mut srcs, how, _) = parse(ctx, a, 2, op, true)?;
    let items = compute(ctx, &mut srcs, op, how, 0)?;
    store_zset(ctx, a[1], items, event)
}

pub fn zunion(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    read_op(ctx, a, Op::Union)
}

pub fn zinter(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    read_op(ctx, a, Op::Inter)
}

pub fn zdiff(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    read_op(ctx, a, Op::Diff)
}

pub fn zunionstore(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    store_op(ctx, a, Op::Union, "zunionstore")
}

pub fn zinterstore(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    store_op(ctx, a, Op::Inter, "zinterstore")
}

pub fn zdiffstore(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    store_op(ctx, a, Op::Diff, "zdiffstore")
}

/// `ZINTERCARD numkeys key [key ...] [LIMIT limit]`.
pub fn zintercard(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    if parse_int(a[1]).is_some_and(|n| n < 1) {
        return Err(fail(
            "at least 1 input key is needed for 'zintercard' command",
        ));
    }
    let keys = numkeys(a, 1)?;
    let mut limit = 0usize;
    let mut j = 2 + keys.len();
    while j < a.len() {
        if is(a[j], "LIMIT") && j + 1 < a.len() {
            limit = match parse_int(a[j + 1]) {
                Some(n) if n >= 0 => n as usize,
                _ => return Err(fail("LIMIT can't be negative")),
            };
            j += 2;
        } else {
            return Err(syntax_error());
        }
    }
    let mut srcs = Vec::with_capacity(keys.len());
    for k in keys {
        srcs.push(source(ctx, k)?);
    }
    let items = compute(ctx, &mut srcs, Op::Inter, Aggregate::Sum, limit)?;
    Ok(Reply::Int(items.len() as i64))
}
