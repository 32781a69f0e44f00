//! Hash commands. A small hash is packed whole in its metadata record
//! (a listpack: `HGET` is the key's one lookup, `HSET` rewrites the
//! record); a larger one is a metadata record (version, field count)
//! and one record per field, `[version][field] -> value`: `HGET` is two
//! point reads, `HGETALL` one ordered scan, `HSET` of a new field three
//! writes. `model::hash` keeps the two apart from the commands.

use std::ops::ControlFlow;

use super::args::{int, is, parse_int};
use super::longdouble::LongDouble;
use super::scan::{self, key_scope};
use super::{fail, syntax_error, CmdResult, Ctx, Fail};
use crate::model::{Found, Kind, Meta, Pairs};
use crate::reply::Reply;
use crate::request::Args;

/// The hash at `key`, if any (`WRONGTYPE` for another type).
fn hash(ctx: &Ctx<'_, '_>, key: &[u8]) -> Result<Found, Fail> {
    let f = ctx.tx.lookup(ctx.db(), key)?;
    f.typed(Kind::Hash)?;
    Ok(f)
}

/// A field of the hash `f` found, if both are there.
fn get(ctx: &Ctx<'_, '_>, f: &Found, field: &[u8]) -> Result<Option<Vec<u8>>, Fail> {
    match f.live() {
        Some(m) => Ok(ctx.tx.hash_get(f.slot, m, field)?),
        None => Ok(None),
    }
}

/// The hash at `key` for writing: what it holds, or a new empty one.
fn hash_for_write(ctx: &mut Ctx<'_, '_>, key: &[u8]) -> Result<(Found, Meta), Fail> {
    let f = ctx.tx.lookup(ctx.db(), key)?;
    let m = match f.typed(Kind::Hash)? {
        Some(m) => m.clone(),
        None => ctx.tx.new_hash(ctx.shared.settings.hash_pack())?,
    };
    Ok((f, m))
}

/// Sets fields; answers how many are new.
fn set_fields(ctx: &mut Ctx<'_, '_>, key: &[u8], pairs: &[&[u8]]) -> Result<i64, Fail> {
    let (mut f, mut m) = hash_for_write(ctx, key)?;
    let limits = ctx.shared.settings.hash_pack();
    let mut added = 0;
    for p in pairs.chunks(2) {
        if ctx
            .tx
            .hash_put(f.slot, &mut m, p[0], p[1].to_vec(), limits)?
        {
            added += 1;
        }
    }
    ctx.tx.set(&mut f, Some(m))?;
    ctx.tx.notify('h', "hset", f.db, key);
    Ok(added)
}

fn check_pairs(a: &Args) -> Result<(), Fail> {
    if !a.len().is_multiple_of(2) {
        return Err(fail(format!(
            "wrong number of arguments for '{}' command",
            String::from_utf8_lossy(a[0]).to_lowercase()
        )));
    }
    Ok(())
}

pub fn hset(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    check_pairs(a)?;
    Ok(Reply::Int(set_fields(ctx, a[1], &a[2..])?))
}

pub fn hmset(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    check_pairs(a)?;
    set_fields(ctx, a[1], &a[2..])?;
    Ok(Reply::ok())
}

pub fn hsetnx(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let f = hash(ctx, a[1])?;
    if get(ctx, &f, a[2])?.is_some() {
        return Ok(Reply::Int(0));
    }
    set_fields(ctx, a[1], &a[2..4])?;
    Ok(Reply::Int(1))
}

pub fn hget(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let f = hash(ctx, a[1])?;
    let v = get(ctx, &f, a[2])?;
    ctx.shared.stats.count_lookup(v.is_some());
    Ok(Reply::opt(v))
}

pub fn hmget(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let f = hash(ctx, a[1])?;
    let mut out = Vec::with_capacity(a.len() - 2);
    for field in &a[2..] {
        out.push(Reply::opt(get(ctx, &f, field)?));
    }
    Ok(Reply::Array(out))
}

fn all(ctx: &Ctx<'_, '_>, key: &[u8]) -> Result<Pairs, Fail> {
    let f = hash(ctx, key)?;
    match f.live() {
        Some(m) => Ok(ctx.tx.hash_all(f.slot, m)?),
        None => Ok(Vec::new()),
    }
}

pub fn hgetall(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    Ok(Reply::Map(
        all(ctx, a[1])?
            .into_iter()
            .map(|(k, v)| (Reply::Bulk(k), Reply::Bulk(v)))
            .collect(),
    ))
}

pub fn hkeys(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    Ok(Reply::bulks(all(ctx, a[1])?.into_iter().map(|(k, _)| k)))
}

pub fn hvals(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    Ok(Reply::bulks(all(ctx, a[1])?.into_iter().map(|(_, v)| v)))
}

pub fn hdel(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let mut f = hash(ctx, a[1])?;
    let Some(mut m) = f.live().cloned() else {
        return Ok(Reply::Int(0));
    };
    let mut n = 0;
    for field in &a[2..] {
        if ctx.tx.hash_delete(f.slot, &mut m, field)? {
            n += 1;
        }
    }
    if n > 0 {
        let db = f.db;
        ctx.tx.set(&mut f, Some(m))?;
        ctx.tx.notify('h', "hdel", db, a[1]);
        if !f.exists() {
            ctx.tx.notify('g', "del", db, a[1]);
        }
    }
    Ok(Reply::Int(n))
}

pub fn hlen(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let f = hash(ctx, a[1])?;
    Ok(Reply::Int(
        f.live().and_then(Meta::elements).unwrap_or(0) as i64
    ))
}

pub fn hexists(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let f = hash(ctx, a[1])?;
    Ok(Reply::Int(get(ctx, &f, a[2])?.is_some() as i64))
}

pub fn hstrlen(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let f = hash(ctx, a[1])?;
    Ok(Reply::Int(get(ctx, &f, a[2])?.map_or(0, |v| v.len()) as i64))
}

/// An increment's step: the field's new value from its old one.
type Step<'a> = dyn FnMut(Option<&[u8]>) -> Result<Vec<u8>, Fail> + 'a;

/// Reads a field for an increment and writes its new value.
fn incr_field(
    ctx: &mut Ctx<'_, '_>,
    key: &[u8],
    field: &[u8],
    step: &mut Step<'_>,
    event: &'static str,
) -> Result<Vec<u8>, Fail> {
    let (mut f, mut m) = hash_for_write(ctx, key)?;
    let old = ctx.tx.hash_get(f.slot, &m, field)?;
    let new = step(old.as_deref())?;
    let limits = ctx.shared.settings.hash_pack();
    ctx.tx
        .hash_put(f.slot, &mut m, field, new.clone(), limits)?;
    ctx.tx.set(&mut f, Some(m))?;
    ctx.tx.notify('h', event, f.db, key);
    Ok(new)
}

pub fn hincrby(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let by = int(a[3])?;
    let mut result = 0;
    incr_field(
        ctx,
        a[1],
        a[2],
        &mut |old| {
            let now = match old {
                None => 0,
                Some(v) => parse_int(v).ok_or_else(|| fail("hash value is not an integer"))?,
            };
            result = now
                .checked_add(by)
                .ok_or_else(|| fail("increment or decrement would overflow"))?;
            Ok(result.to_string().into_bytes())
        },
        "hincrby",
    )?;
    Ok(Reply::Int(result))
}

pub fn hincrbyfloat(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let by = LongDouble::parse(a[3]).ok_or_else(|| fail("value is not a valid float"))?;
    if by.is_infinite() {
        return Err(fail("value is NaN or Infinity"));
    }
    let new = incr_field(
        ctx,
        a[1],
        a[2],
        &mut |old| {
            let now = match old {
                None => LongDouble::ZERO,
                Some(v) => LongDouble::parse(v).ok_or_else(|| fail("hash value is not a float"))?,
            };
            let sum = now.add(by);
            if !sum.is_finite() {
                return Err(fail("increment would produce NaN or Infinity"));
            }
            Ok(sum.to_human().into_bytes())
        },
        "hincrbyfloat",
    )?;
    Ok(Reply::Bulk(new))
}

/// `HRANDFIELD key [count [WITHVALUES]]`.
pub fn hrandfield(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let (count, with_values) = random_args(a, Some("WITHVALUES"))?;
    let f = hash(ctx, a[1])?;
    let Some(m) = f.live() else {
        return Ok(no_random_members(count));
    };
    let mut rng = rand::thread_rng();
    let Some(n) = count else {
        let got = ctx.tx.hash_random(f.slot, m, 1, false, &mut rng)?;
        return Ok(Reply::opt(got.into_iter().next().map(|(k, _)| k)));
    };
    let picks = ctx
        .tx
        .hash_random(f.slot, m, n.unsigned_abs(), n < 0, &mut rng)?;
    let picks = picks
        .into_iter()
        .map(|(k, v)| (k, Reply::Bulk(v)))
        .collect();
    Ok(pairs_reply(ctx.session.proto, picks, with_values))
}

/// Most draws one random-member reply makes: past it the reply would
/// not fit in memory.
pub const MAX_DRAWS: u64 = 1 << 24;

/// The count of `HRANDFIELD`, `SRANDMEMBER`, `ZRANDMEMBER`: negative
/// draws may repeat.
fn random_count(b: &[u8]) -> Result<i64, Fail> {
    let n = int(b)?;
    if n == i64::MIN {
        return Err(fail(format!(
            "value is out of range, value must between {} and {}",
            -i64::MAX,
            i64::MAX
        )));
    }
    Ok(n)
}

/// The count and the `flag` (`WITHVALUES`, `WITHSCORES`; none for
/// `SRANDMEMBER`) of a random-member command, checked as Redis checks
/// them.
pub fn random_args(a: &Args, flag: Option<&str>) -> Result<(Option<i64>, bool), Fail> {
    if flag.is_none() && a.len() > 3 {
        return Err(syntax_error());
    }
    let count = a.get(2).map(|c| random_count(c)).transpose()?;
    let with = match flag {
        Some(flag) => {
            if a.len() > 4 || (a.len() == 4 && !is(a[3], flag)) {
                return Err(syntax_error());
            }
            a.len() == 4
        }
        None => false,
    };
    if with && count.is_some_and(|n| n.unsigned_abs() > (i64::MAX / 2) as u64) {
        return Err(fail("value is out of range"));
    }
    if let Some(n) = count {
        check_draws(n)?;
    }
    Ok((count, with))
}

/// A random-member command's answer on a missing key: an empty array
/// when a count was given, else null.
pub fn no_random_members(count: Option<i64>) -> Reply {
    if count.is_some() {
        Reply::Array(Vec::new())
    } else {
        Reply::Null
    }
}

/// How many draws a count asks for, and whether they may repeat.
pub fn draws(count: Option<i64>) -> (u64, bool) {
    match count {
        None => (1, false),
        Some(n) => (n.unsigned_abs(), n < 0),
    }
}

/// Refuses repeating draws past [`MAX_DRAWS`].
fn check_draws(n: i64) -> Result<(), Fail> {
    if n < 0 && n.unsigned_abs() > MAX_DRAWS {
        return Err(fail(format!(
            "count is out of range: one reply draws at most {MAX_DRAWS} random elements"
        )));
    }
    Ok(())
}

/// Member-value picks as `HRANDFIELD`/`ZRANDMEMBER` answer them: flat in
/// RESP2, pairs in RESP3, or the members alone.
pub fn pairs_reply(proto: u8, picks: Vec<(Vec<u8>, Reply)>, with_values: bool) -> Reply {
    if !with_values {
        return Reply::bulks(picks.into_iter().map(|(k, _)| k));
    }
    if proto >= 3 {
        return Reply::Array(
            picks
                .into_iter()
                .map(|(k, v)| Reply::Array(vec![Reply::Bulk(k), v]))
                .collect(),
        );
    }
    Reply::Array(
        picks
            .into_iter()
            .flat_map(|(k, v)| [Reply::Bulk(k), v])
            .collect(),
    )
}

/// Turns a scanned member (and value) into reply items.
pub type Emit<'a> = dyn FnMut(&scan::ScanOpts, &[u8], &[u8], &mut Vec<Reply>) + 'a;

/// Scans a collection's fields from a cursor: the items `emit` makes of
/// each matching field, and where the next call resumes.
pub fn scan_fields(
    ctx: &mut Ctx<'_, '_>,
    a: &Args,
    kind: Kind,
    extra: &[&str],
    emit: &mut Emit<'_>,
) -> CmdResult {
    let o = scan::options(&a[3..], extra)?;
    let db = ctx.db();
    let scope = key_scope(db, a[1]);
    let from = scan::resume(ctx, a[2], &scope)?;
    let f = ctx.tx.lookup(db, a[1])?;
    let mut items = Vec::new();
    let c = match f.typed(kind)? {
        None => return Ok(scan::reply(ctx, scope, None, Vec::new())),
        Some(m) => match m.coll() {
            Some(c) => *c,
            None => {
                // Packed whole: one call returns it all, as Redis scans
                // a listpack.
                for (field, v) in ctx.tx.hash_all(f.slot, m)? {
                    if o.matches(&field) {
                        emit(&o, &field, &v, &mut items);
                    }
                }
                return Ok(scan::reply(ctx, scope, None, items));
            }
        },
    };
    let mut next = None;
    let mut seen = 0;
    ctx.tx
        .scan_positions(f.slot, &c, from.as_deref(), &mut |pos, m, v| {
            if seen == o.count {
                next = Some(pos.to_vec());
                return ControlFlow::Break(());
            }
            seen += 1;
            if o.matches(m) {
                emit(&o, m, v, &mut items);
            }
            ControlFlow::Continue(())
        })?;
    Ok(scan::reply(ctx, scope, next, items))
}

/// `HSCAN key cursor [MATCH p] [COUNT n] [NOVALUES]`.
pub fn hscan(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    scan_fields(ctx, a, Kind::Hash, &["NOVALUES"], &mut |o, m, v, items| {
        items.push(Reply::Bulk(m.to_vec()));
        if !o.novalues {
            items.push(Reply::Bulk(v.to_vec()));
        }
    })
}
