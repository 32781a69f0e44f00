//! Sorted-set commands on members: adding, scoring, ranking, popping and
//! sampling. A sorted set is a metadata record (version, size), one
//! record per member holding its score, and one score-index record per
//! member ordered by (score, member): `ZSCORE` is one point read, a pop
//! one step of an ordered scan, `ZRANK` a count along the index.

use std::ops::{Bound, ControlFlow};

use super::args::{float, is, parse_int};
use super::hashes::{draws, no_random_members, pairs_reply, random_args, scan_fields};
use super::{fail, syntax_error, CmdResult, Ctx, Fail};
use crate::model::{Coll, Found, Kind, Meta};
use crate::reply::{format_score, Reply};
use crate::request::Args;

/// The sorted set at `key`, if any (`WRONGTYPE` for another type).
pub fn zset(ctx: &Ctx<'_, '_>, key: &[u8]) -> Result<(Found, Option<Coll>), Fail> {
    let f = ctx.tx.lookup(ctx.db(), key)?;
    let c = f.coll(Kind::ZSet)?;
    Ok((f, c))
}

/// Members with scores as a range reply: flat in RESP2, pairs in RESP3;
/// members alone without scores.
pub fn scored_reply(proto: u8, items: Vec<(Vec<u8>, f64)>, with_scores: bool) -> Reply {
    pairs_reply(
        proto,
        items
            .into_iter()
            .map(|(m, s)| (m, Reply::Double(s)))
            .collect(),
        with_scores,
    )
}

/// Writes a sorted set's header after changes, with the events.
pub fn finish(
    ctx: &mut Ctx<'_, '_>,
    f: &mut Found,
    m: Meta,
    event: &'static str,
) -> Result<(), Fail> {
    let db = f.db;
    let key = f.key.clone();
    let existed = f.exists();
    ctx.tx.set(f, Some(m))?;
    ctx.tx.notify('z', event, db, &key);
    if existed && !f.exists() {
        ctx.tx.notify('g', "del", db, &key);
    }
    Ok(())
}

#[derive(Default)]
struct AddFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
    ch: bool,
    incr: bool,
}

fn zadd_generic(ctx: &mut Ctx<'_, '_>, a: &Args, mut fl: AddFlags) -> CmdResult {
    let mut i = 2;
    while i < a.len() {
        let o = &a[i];
        if is(o, "NX") {
            fl.nx = true;
        } else if is(o, "XX") {
            fl.xx = true;
        } else if is(o, "CH") {
            fl.ch = true;
        } else if is(o, "INCR") {
            fl.incr = true;
        } else if is(o, "GT") {
            fl.gt = true;
        } else if is(o, "LT") {
            fl.lt = true;
        } else {
            break;
        }
        i += 1;
    }
    let rest = &a[i..];
    if rest.is_empty() || !rest.len().is_multiple_of(2) {
        return Err(syntax_error());
    }
    if fl.nx && fl.xx {
        return Err(fail(
            "XX and NX options at the same time are not compatible",
        ));
    }
    if (fl.nx && (fl.gt || fl.lt)) || (fl.gt && fl.lt) {
        return Err(fail(
            "GT, LT, and/or NX options at the same time are not compatible",
        ));
    }
    if fl.incr && rest.len() > 2 {
        return Err(fail("INCR option supports a single increment-element pair"));
    }
    let mut pairs = Vec::with_capacity(rest.len() / 2);
    for p in rest.chunks(2) {
        pairs.push((float(p[0])?, &p[1]));
    }
    let mut f = ctx.tx.lookup(ctx.db(), a[1])?;
    let mut m = match f.typed(Kind::ZSet)? {
        Some(m) => m.clone(),
        None if fl.xx => {
            return Ok(if fl.incr { Reply::Null } else { Reply::Int(0) });
        }
        None => ctx.tx.new_coll(Kind::ZSet)?,
    };
    let (mut added, mut updated, mut processed) = (0i64, 0i64, 0);
    let mut last = 0.0;
    {
        let Some(c) = m.coll_mut() else {
            return Err(fail("sorted set header expected"));
        };
        for (score, member) in pairs {
            let old = ctx.tx.zscore(f.slot, c, member)?;
            match old {
                Some(o) => {
                    if fl.nx {
                        continue;
                    }
                    let new = if fl.incr { o + score } else { score };
                    if new.is_nan() {
                        return Err(fail("resulting score is not a number (NaN)"));
                    }
                    if (fl.gt && new <= o) || (fl.lt && new >= o) {
                        continue;
                    }
                    last = new;
                    processed += 1;
                    if new != o {
                        ctx.tx.zput(f.slot, c, member, Some(o), new)?;
                        updated += 1;
                    }
                }
                None => {
                    if fl.xx {
                        continue;
                    }
                    ctx.tx.zput(f.slot, c, member, None, score)?;
                    c.size += 1;
                    added += 1;
                    processed += 1;
                    last = score;
                }
            }
        }
    }
    if added + updated > 0 {
        finish(ctx, &mut f, m, if fl.incr { "zincr" } else { "zadd" })?;
    }
    if fl.incr {
        return Ok(if processed > 0 {
            Reply::Double(last)
        } else {
            Reply::Null
        });
    }
    Ok(Reply::Int(if fl.ch { added + updated } else { added }))
}

pub fn zadd(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    zadd_generic(ctx, a, AddFlags::default())
}

pub fn zincrby(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    zadd_generic(
        ctx,
        a,
        AddFlags {
            incr: true,
            ..AddFlags::default()
        },
    )
}

pub fn zrem(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let mut f = ctx.tx.lookup(ctx.db(), a[1])?;
    let Some(mut m) = f.typed(Kind::ZSet)?.cloned() else {
        return Ok(Reply::Int(0));
    };
    let mut n = 0;
    if let Some(c) = m.coll_mut() {
        for member in &a[2..] {
            if let Some(s) = ctx.tx.zscore(f.slot, c, member)? {
                ctx.tx.zdelete(f.slot, c, member, s)?;
                c.size -= 1;
                n += 1;
            }
        }
    }
    if n > 0 {
        finish(ctx, &mut f, m, "zrem")?;
    }
    Ok(Reply::Int(n))
}

pub fn zscore(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let (f, c) = zset(ctx, a[1])?;
    let s = match c {
        Some(c) => ctx.tx.zscore(f.slot, &c, a[2])?,
        None => None,
    };
    Ok(s.map_or(Reply::Null, Reply::Double))
}

pub fn zmscore(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let (f, c) = zset(ctx, a[1])?;
    let mut out = Vec::with_capacity(a.len() - 2);
    for member in &a[2..] {
        let s = match &c {
            Some(c) => ctx.tx.zscore(f.slot, c, member)?,
            None => None,
        };
        out.push(s.map_or(Reply::Null, Reply::Double));
    }
    Ok(Reply::Array(out))
}

pub fn zcard(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let (_, c) = zset(ctx, a[1])?;
    Ok(Reply::Int(c.map_or(0, |c| c.size as i64)))
}

pub fn zrank(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    zrank_generic(ctx, a, false)
}

pub fn zrevrank(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    zrank_generic(ctx, a, true)
}

/// Removes up to `count` members from the low (or, with `max`, high)
/// end of the sorted set `f`; answers them with their scores.
pub fn pop(
    ctx: &mut Ctx<'_, '_>,
    f: &mut Found,
    max: bool,
    count: u64,
) -> Result<Vec<(Vec<u8>, f64)>, Fail> {
    let Some(mut m) = f.typed(Kind::ZSet)?.cloned() else {
        return Ok(Vec::new());
    };
    let Some(c) = m.coll_mut() else {
        return Ok(Vec::new());
    };
    let out = ctx.tx.pop_scores(f.slot, c, max, count)?;
    c.size = c.size.saturating_sub(out.len() as u64);
    if !out.is_empty() {
        finish(ctx, f, m, if max { "zpopmax" } else { "zpopmin" })?;
    }
    Ok(out)
}

fn zpop_generic(ctx: &mut Ctx<'_, '_>, a: &Args, max: bool) -> CmdResult {
    if a.len() > 3 {
        return Err(syntax_error());
    }
    let count = match a.get(2) {
        Some(c) => match parse_int(c) {
            Some(n) if n >= 0 => Some(n as u64),
            Some(_) => return Err(fail("value is out of range, must be positive")),
            None => return Err(super::args::not_an_integer()),
        },
        None => None,
    };
    let mut f = ctx.tx.lookup(ctx.db(), a[1])?;
    f.typed(Kind::ZSet)?;
    if count == Some(0) {
        return Ok(Reply::Array(Vec::new()));
    }
    let items = pop(ctx, &mut f, max, count.unwrap_or(1))?;
    let nested = ctx.session.proto >= 3 && count.is_some();
    Ok(if nested {
        scored_reply(3, items, true)
    } else {
        Reply::Array(
            items
                .into_iter()
                .flat_map(|(m, s)| [Reply::Bulk(m), Reply::Double(s)])
                .collect(),
        )
    })
}

pub fn zpopmin(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    zpop_generic(ctx, a, false)
}

pub fn zpopmax(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    zpop_generic(ctx, a, true)
}

/// Parses `numkeys key... MIN|MAX [COUNT n]` from `a[at..]`.
pub fn mpop_args<'a>(a: &'a Args<'a>, at: usize) -> Result<(&'a [&'a [u8]], bool, u64), Fail> {
    let n = match parse_int(a[at]) {
        Some(n) if n > 0 => n as usize,
        _ => return Err(fail("numkeys should be greater than 0")),
    };
    let where_at = at + n + 1;
    if where_at >= a.len() {
        return Err(syntax_error());
    }
    let max = if is(a[where_at], "MIN") {
        false
    } else if is(a[where_at], "MAX") {
        true
    } else {
        return Err(syntax_error());
    };
    let count = super::lists::mpop_count(a, where_at + 1)?;
    Ok((&a[at + 1..at + 1 + n], max, count))
}

/// Pops from the first non-empty sorted set of `keys`: `None` if all
/// are empty (`serving`: see [`Ctx::first_of_kind`]).
pub fn mpop(
    ctx: &mut Ctx<'_, '_>,
    keys: &[&[u8]],
    max: bool,
    count: u64,
    serving: bool,
) -> Result<Option<Reply>, Fail> {
    let Some((k, mut f)) = ctx.first_of_kind(keys, Kind::ZSet, serving)? else {
        return Ok(None);
    };
    let items = pop(ctx, &mut f, max, count)?;
    Ok(Some(Reply::Array(vec![
        Reply::Bulk(k),
        scored_reply(3, items, true),
    ])))
}

pub fn zmpop(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let (keys, max, count) = mpop_args(a, 1)?;
    Ok(mpop(ctx, keys, max, count, false)?.unwrap_or(Reply::NullArray))
}

/// `ZRANDMEMBER key [count [WITHSCORES]]`.
pub fn zrandmember(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let (count, with_scores) = random_args(a, Some("WITHSCORES"))?;
    let (f, c) = zset(ctx, a[1])?;
    let Some(c) = c else {
        return Ok(no_random_members(count));
    };
    let mut rng = rand::thread_rng();
    let (n, repeat) = draws(count);
    let picks = ctx.tx.random_fields(f.slot, &c, n, repeat, &mut rng)?;
    if count.is_none() {
        return Ok(Reply::opt(picks.into_iter().next().map(|(m, _)| m)));
    }
    let picks = picks
        .into_iter()
        .map(|(m, v)| (m, Reply::Double(decode_score(&v))))
        .collect();
    Ok(pairs_reply(ctx.session.proto, picks, with_scores))
}

fn decode_score(v: &[u8]) -> f64 {
    <[u8; 8]>::try_from(v).map_or(f64::NAN, crate::model::decode_score)
}

/// `ZSCAN key cursor [MATCH p] [COUNT n] [NOSCORES]`.
pub fn zscan(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    scan_fields(ctx, a, Kind::ZSet, &["NOSCORES"], &mut |o, m, v, items| {
        items.push(Reply::Bulk(m.to_vec()));
        if !o.noscores {
            items.push(Reply::Bulk(format_score(decode_score(v)).into_bytes()));
        }
    })
}

fn zrank_generic(ctx: &mut Ctx<'_, '_>, a: &Args, rev: bool) -> CmdResult {
    let with_score = match a.len() {
        3 => false,
        4 if is(a[3], "WITHSCORE") => true,
        _ => return Err(syntax_error()),
    };
    let none = if with_score {
        Reply::NullArray
    } else {
        Reply::Null
    };
    let (f, c) = zset(ctx, a[1])?;
    let Some(c) = c else {
        return Ok(none);
    };
    let Some(score) = ctx.tx.zscore(f.slot, &c, a[2])? else {
        return Ok(none);
    };
    // Members before (score, member) in the index.
    let mut rank = 0i64;
    let member = a[2];
    ctx.tx.scan_scores(
        f.slot,
        &c,
        Bound::Unbounded,
        Bound::Included(score),
        false,
        &mut |s, m| {
            if s == score && m >= member {
                return ControlFlow::Break(());
            }
            rank += 1;
            ControlFlow::Continue(())
        },
    )?;
    if rev {
        rank = c.size as i64 - 1 - rank;
    }
    Ok(if with_score {
        Reply::Array(vec![Reply::Int(rank), Reply::Double(score)])
    } else {
        Reply::Int(rank)
    })
}
