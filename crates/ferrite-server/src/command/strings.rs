//! String commands. A string is its key's metadata record: every read is
//! one lookup, every write one record (with its expiry, if any). What
//! `SET` and the `INCR` family store that is the canonical decimal of an
//! `i64` is kept as the number (an integer string, `OBJECT ENCODING`
//! `int`, as in Redis); `APPEND`, `SETRANGE`, the bit commands and
//! `INCRBYFLOAT` store bytes (`raw`), also as Redis does.

use super::args::{int, is, not_an_integer, parse_int};
use super::longdouble::LongDouble;
use super::{fail, syntax_error, CmdResult, Ctx, Fail};
use crate::model::{Body, Found, Kind, Meta};
use crate::reply::Reply;
use crate::request::Args;

/// Longest string value: the engine's value limit less the metadata
/// header (type byte and expiry).
pub const MAX_STRING: usize = ferrite::MAX_VALUE_LEN - 9;

/// The string a key holds (`WRONGTYPE` for another type).
pub fn read(ctx: &mut Ctx<'_, '_>, key: &[u8]) -> Result<(Found, Option<Vec<u8>>), Fail> {
    let f = ctx.tx.lookup(ctx.db(), key)?;
    let v = f.string()?.map(|v| v.into_owned());
    Ok((f, v))
}

/// Stores `value` as `f`'s string: keeping its expiry when `keep_ttl`,
/// else with `expire_at`.
pub fn write(
    ctx: &mut Ctx<'_, '_>,
    f: &mut Found,
    value: Vec<u8>,
    keep_ttl: bool,
    expire_at: Option<u64>,
) -> Result<(), Fail> {
    write_body(ctx, f, Body::String(value), keep_ttl, expire_at)
}

/// As [`write`], for a value `SET` gives: an integer string when it is
/// the canonical decimal of an `i64`.
pub fn write_set(
    ctx: &mut Ctx<'_, '_>,
    f: &mut Found,
    value: Vec<u8>,
    keep_ttl: bool,
    expire_at: Option<u64>,
) -> Result<(), Fail> {
    let body = match parse_int(&value) {
        Some(n) => Body::Int(n),
        None => Body::String(value),
    };
    write_body(ctx, f, body, keep_ttl, expire_at)
}

fn write_body(
    ctx: &mut Ctx<'_, '_>,
    f: &mut Found,
    body: Body,
    keep_ttl: bool,
    expire_at: Option<u64>,
) -> Result<(), Fail> {
    if matches!(&body, Body::String(v) if v.len() > MAX_STRING) {
        return Err(too_big());
    }
    let mut m = Meta {
        expire_at: None,
        body,
    };
    m.expire_at = if keep_ttl {
        f.live().and_then(|m| m.expire_at)
    } else {
        expire_at
    };
    ctx.tx.set(f, Some(m))?;
    Ok(())
}

pub fn too_big() -> Fail {
    fail("string exceeds maximum allowed size (proto-max-bulk-len)")
}

pub fn get(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let (_, v) = read(ctx, a[1])?;
    ctx.shared.stats.count_lookup(v.is_some());
    Ok(Reply::opt(v))
}

/// How an expiry option gives its time.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Unit {
    /// Seconds from now (`EX`).
    Ex,
    Px,
    /// An absolute Unix time in seconds (`EXAT`).
    ExAt,
    PxAt,
}

/// Options of `SET` and `GETEX`.
#[derive(Default)]
struct StringOpts {
    nx: bool,
    xx: bool,
    get: bool,
    keep_ttl: bool,
    persist: bool,
    expire: Option<(Unit, Vec<u8>)>,
}

/// Parses `SET`'s options (`set`) or `GETEX`'s, from `a[from..]`.
fn parse_opts(a: &Args, from: usize, set: bool) -> Result<StringOpts, Fail> {
    let mut o = StringOpts::default();
    let mut j = from;
    while j < a.len() {
        let opt = &a[j];
        let next = a.get(j + 1);
        let has_expire = o.expire.is_some();
        if set && is(opt, "NX") && !o.xx {
            o.nx = true;
        } else if set && is(opt, "XX") && !o.nx {
            o.xx = true;
        } else if set && is(opt, "GET") {
            o.get = true;
        } else if set && is(opt, "KEEPTTL") && !has_expire {
            o.keep_ttl = true;
        } else if !set && is(opt, "PERSIST") && !has_expire {
            o.persist = true;
        } else if let (Some(unit), Some(v)) = (expire_unit(opt), next) {
            if has_expire || o.keep_ttl || o.persist {
                return Err(syntax_error());
            }
            o.expire = Some((unit, v.to_vec()));
            j += 1;
        } else {
            return Err(syntax_error());
        }
        j += 1;
    }
    Ok(o)
}

fn expire_unit(opt: &[u8]) -> Option<Unit> {
    Some(if is(opt, "EX") {
        Unit::Ex
    } else if is(opt, "PX") {
        Unit::Px
    } else if is(opt, "EXAT") {
        Unit::ExAt
    } else if is(opt, "PXAT") {
        Unit::PxAt
    } else {
        return None;
    })
}

/// The absolute expiry (ms) an option gives, as Redis computes it; the
/// error names the command.
fn expire_time(cmd: &str, unit: Unit, v: &[u8], now: u64) -> Result<u64, Fail> {
    let bad = || fail(format!("invalid expire time in '{cmd}' command"));
    let n = int(v)?;
    let seconds = matches!(unit, Unit::Ex | Unit::ExAt);
    if n <= 0 || (seconds && n > i64::MAX / 1000) {
        return Err(bad());
    }
    let mut ms = if seconds { n * 1000 } else { n };
    if matches!(unit, Unit::Ex | Unit::Px) {
        ms = ms.checked_add(now as i64).ok_or_else(bad)?;
    }
    Ok(ms as u64)
}

fn command_name(a: &Args) -> String {
    String::from_utf8_lossy(a[0]).to_lowercase()
}

/// `SET key value [NX | XX] [GET] [EX s | PX ms | EXAT t | PXAT t | KEEPTTL]`.
pub fn set(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let o = parse_opts(a, 3, true)?;
    let expire = match &o.expire {
        Some((unit, v)) => Some(expire_time("set", *unit, v, ctx.tx.now)?),
        None => None,
    };
    set_value(ctx, a[1], a[2].to_vec(), &o, expire)
}

fn set_value(
    ctx: &mut Ctx<'_, '_>,
    key: &[u8],
    value: Vec<u8>,
    o: &StringOpts,
    expire: Option<u64>,
) -> CmdResult {
    let mut f = ctx.tx.lookup(ctx.db(), key)?;
    let old = if o.get {
        f.string()?.map(|v| v.into_owned())
    } else {
        None
    };
    let found = f.exists();
    if (o.nx && found) || (o.xx && !found) {
        return Ok(if o.get { Reply::opt(old) } else { Reply::Null });
    }
    write_set(ctx, &mut f, value, o.keep_ttl, expire)?;
    ctx.tx.notify('$', "set", f.db, key);
    if expire.is_some() {
        ctx.tx.notify('g', "expire", f.db, key);
    }
    Ok(if o.get { Reply::opt(old) } else { Reply::ok() })
}

pub fn setnx(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let o = StringOpts {
        nx: true,
        ..StringOpts::default()
    };
    let r = set_value(ctx, a[1], a[2].to_vec(), &o, None)?;
    Ok(Reply::Int((r == Reply::ok()) as i64))
}

fn set_with_expiry(ctx: &mut Ctx<'_, '_>, a: &Args, unit: Unit) -> CmdResult {
    let expire = expire_time(&command_name(a), unit, a[2], ctx.tx.now)?;
    set_value(
        ctx,
        a[1],
        a[3].to_vec(),
        &StringOpts::default(),
        Some(expire),
    )
}

pub fn setex(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    set_with_expiry(ctx, a, Unit::Ex)
}

pub fn psetex(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    set_with_expiry(ctx, a, Unit::Px)
}

pub fn getset(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let o = StringOpts {
        get: true,
        ..StringOpts::default()
    };
    set_value(ctx, a[1], a[2].to_vec(), &o, None)
}

pub fn getdel(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let (mut f, v) = read(ctx, a[1])?;
    if v.is_some() {
        ctx.tx.remove(&mut f)?;
        ctx.tx.notify('g', "del", f.db, a[1]);
    }
    Ok(Reply::opt(v))
}

/// `GETEX key [EX s | PX ms | EXAT t | PXAT t | PERSIST]`.
pub fn getex(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let o = parse_opts(a, 2, false)?;
    let (mut f, v) = read(ctx, a[1])?;
    let Some(v) = v else {
        return Ok(Reply::Null);
    };
    let db = f.db;
    if let Some((unit, t)) = &o.expire {
        let at = expire_time("getex", *unit, t, ctx.tx.now)?;
        let mut m = f.live().cloned().ok_or_else(|| fail("no such key"))?;
        if at <= ctx.tx.now {
            ctx.tx.remove(&mut f)?;
            ctx.tx.notify('g', "del", db, a[1]);
        } else {
            m.expire_at = Some(at);
            ctx.tx.set(&mut f, Some(m))?;
            ctx.tx.notify('g', "expire", db, a[1]);
        }
    } else if o.persist {
        if let Some(mut m) = f.live().cloned().filter(|m| m.expire_at.is_some()) {
            m.expire_at = None;
            ctx.tx.set(&mut f, Some(m))?;
            ctx.tx.notify('g', "persist", db, a[1]);
        }
    }
    Ok(Reply::Bulk(v))
}

pub fn mget(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let mut out = Vec::with_capacity(a.len() - 1);
    for k in &a[1..] {
        let f = ctx.tx.lookup(ctx.db(), k)?;
        // MGET answers nil for a key of another type.
        let v = f.string().ok().flatten().map(|v| v.into_owned());
        ctx.shared.stats.count_lookup(v.is_some());
        out.push(Reply::opt(v));
    }
    Ok(Reply::Array(out))
}

fn pairs<'a>(a: &'a Args<'a>) -> Result<&'a [&'a [u8]], Fail> {
    if a.len().is_multiple_of(2) {
        return Err(fail(format!(
            "wrong number of arguments for '{}' command",
            command_name(a)
        )));
    }
    Ok(&a[1..])
}

pub fn mset(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    for p in pairs(a)?.chunks(2) {
        let mut f = ctx.tx.lookup(ctx.db(), p[0])?;
        write_set(ctx, &mut f, p[1].to_vec(), false, None)?;
        ctx.tx.notify('$', "set", f.db, p[0]);
    }
    Ok(Reply::ok())
}

pub fn msetnx(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let ps = pairs(a)?;
    for p in ps.chunks(2) {
        if ctx.tx.lookup(ctx.db(), p[0])?.exists() {
            return Ok(Reply::Int(0));
        }
    }
    mset(ctx, a)?;
    Ok(Reply::Int(1))
}

pub fn strlen(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let (_, v) = read(ctx, a[1])?;
    Ok(Reply::Int(v.map_or(0, |v| v.len() as i64)))
}

pub fn append(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let (mut f, v) = read(ctx, a[1])?;
    let existed = v.is_some();
    let mut v = v.unwrap_or_default();
    if v.len() + a[2].len() > MAX_STRING {
        return Err(too_big());
    }
    v.extend_from_slice(a[2]);
    let len = v.len();
    // A new key is stored as `SET` would store it; an appended one is
    // bytes (as Redis does).
    if existed {
        write(ctx, &mut f, v, true, None)?;
    } else {
        write_set(ctx, &mut f, v, true, None)?;
    }
    ctx.tx.notify('$', "append", f.db, a[1]);
    Ok(Reply::Int(len as i64))
}

fn incr_by(ctx: &mut Ctx<'_, '_>, key: &[u8], by: i64) -> CmdResult {
    let (mut f, v) = read(ctx, key)?;
    let now = match v {
        None => 0,
        Some(v) => parse_int(&v).ok_or_else(not_an_integer)?,
    };
    let n = now
        .checked_add(by)
        .ok_or_else(|| fail("increment or decrement would overflow"))?;
    write_body(ctx, &mut f, Body::Int(n), true, None)?;
    ctx.tx.notify('$', "incrby", f.db, key);
    Ok(Reply::Int(n))
}

pub fn incr(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    incr_by(ctx, a[1], 1)
}

pub fn decr(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    incr_by(ctx, a[1], -1)
}

pub fn incrby(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let by = int(a[2])?;
    incr_by(ctx, a[1], by)
}

pub fn decrby(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let by = int(a[2])?
        .checked_neg()
        .ok_or_else(|| fail("decrement would overflow"))?;
    incr_by(ctx, a[1], by)
}

pub fn incrbyfloat(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let not_float = || fail("value is not a valid float");
    let (mut f, v) = read(ctx, a[1])?;
    let now = match v {
        None => LongDouble::ZERO,
        Some(v) => LongDouble::parse(&v).ok_or_else(not_float)?,
    };
    let by = LongDouble::parse(a[2]).ok_or_else(not_float)?;
    let sum = now.add(by);
    if !sum.is_finite() {
        return Err(fail("increment would produce NaN or Infinity"));
    }
    let text = sum.to_human().into_bytes();
    write(ctx, &mut f, text.clone(), true, None)?;
    ctx.tx.notify('$', "incrbyfloat", f.db, a[1]);
    Ok(Reply::Bulk(text))
}

pub fn setrange(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let offset = int(a[2])?;
    if offset < 0 {
        return Err(fail("offset is out of range"));
    }
    let patch = &a[3];
    let (mut f, v) = read(ctx, a[1])?;
    let mut v = match v {
        Some(v) => v,
        None if patch.is_empty() => return Ok(Reply::Int(0)),
        None => Vec::new(),
    };
    if patch.is_empty() {
        return Ok(Reply::Int(v.len() as i64));
    }
    let end = (offset as u64).saturating_add(patch.len() as u64);
    if end > MAX_STRING as u64 {
        return Err(too_big());
    }
    let (offset, end) = (offset as usize, end as usize);
    if v.len() < end {
        v.resize(end, 0);
    }
    v[offset..end].copy_from_slice(patch);
    let len = v.len();
    write(ctx, &mut f, v, true, None)?;
    ctx.tx.notify('$', "setrange", f.db, a[1]);
    Ok(Reply::Int(len as i64))
}

/// Redis's index rules for a range of a string of `len` bytes: negative
/// from the end, clamped; `None` when empty.
pub fn clamp_range(start: i64, end: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let mut s = if start < 0 { len + start } else { start };
    let mut e = if end < 0 { len + end } else { end };
    if s < 0 {
        s = 0;
    }
    if e < 0 {
        e = 0;
    }
    if e >= len {
        e = len - 1;
    }
    if s > e || len == 0 {
        return None;
    }
    Some((s as usize, e as usize))
}

pub fn getrange(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let (start, end) = (int(a[2])?, int(a[3])?);
    let (_, v) = read(ctx, a[1])?;
    let v = v.unwrap_or_default();
    if start < 0 && end < 0 && start > end {
        return Ok(Reply::bulk(""));
    }
    Ok(match clamp_range(start, end, v.len()) {
        Some((s, e)) => Reply::Bulk(v[s..=e].to_vec()),
        None => Reply::bulk(""),
    })
}

/// `LCS key1 key2 [LEN] [IDX] [MINMATCHLEN n] [WITHMATCHLEN]`.
pub fn lcs(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let (mut len_only, mut idx, mut min_len, mut with_len) = (false, false, 0i64, false);
    let mut j = 3;
    while j < a.len() {
        if is(a[j], "LEN") {
            len_only = true;
        } else if is(a[j], "IDX") {
            idx = true;
        } else if is(a[j], "WITHMATCHLEN") {
            with_len = true;
        } else if is(a[j], "MINMATCHLEN") && j + 1 < a.len() {
            min_len = int(a[j + 1])?.max(0);
            j += 1;
        } else {
            return Err(syntax_error());
        }
        j += 1;
    }
    if len_only && idx {
        return Err(fail(
            "If you want both the length and indexes, please just use IDX.",
        ));
    }
    let get = |k: &[u8]| -> Result<Vec<u8>, Fail> {
        let f = ctx.tx.lookup(ctx.db(), k)?;
        match f.typed(Kind::String) {
            Ok(_) => Ok(f.string()?.map(|v| v.into_owned()).unwrap_or_default()),
            Err(_) => Err(fail("The specified keys must contain string values")),
        }
    };
    let (x, y) = (get(a[1])?, get(a[2])?);
    if (x.len() as u64) * (y.len() as u64) > 1 << 28 {
        return Err(fail(
            "Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len",
        ));
    }
    let table = lcs_table(&x, &y);
    let n = table[x.len() * (y.len() + 1) + y.len()];
    if len_only {
        return Ok(Reply::Int(n as i64));
    }
    // Walk back from the end, collecting the common string and ranges.
    let (mut i, mut k) = (x.len(), y.len());
    let w = y.len() + 1;
    let mut common = Vec::with_capacity(n as usize);
    let mut matches: Vec<Reply> = Vec::new();
    let mut run: Option<(usize, usize, usize, usize)> = None;
    let flush = |run: &mut Option<(usize, usize, usize, usize)>, matches: &mut Vec<Reply>| {
        if let Some((a0, a1, b0, b1)) = run.take() {
            let len = (a1 - a0 + 1) as i64;
            if len >= min_len {
                let mut m = vec![
                    Reply::Array(vec![Reply::Int(a0 as i64), Reply::Int(a1 as i64)]),
                    Reply::Array(vec![Reply::Int(b0 as i64), Reply::Int(b1 as i64)]),
                ];
                if with_len {
                    m.push(Reply::Int(len));
                }
                matches.push(Reply::Array(m));
            }
        }
    };
    while i > 0 && k > 0 {
        if x[i - 1] == y[k - 1] {
            common.push(x[i - 1]);
            let (pi, pk) = (i - 1, k - 1);
            run = match run {
                Some((a0, a1, b0, b1)) if a0 == pi + 1 && b0 == pk + 1 => Some((pi, a1, pk, b1)),
                other => {
                    let mut other = other;
                    flush(&mut other, &mut matches);
                    Some((pi, pi, pk, pk))
                }
            };
            i -= 1;
            k -= 1;
        } else if table[(i - 1) * w + k] > table[i * w + k - 1] {
            i -= 1;
        } else {
            k -= 1;
        }
    }
    flush(&mut run, &mut matches);
    common.reverse();
    if idx {
        return Ok(Reply::Map(vec![
            (Reply::bulk("matches"), Reply::Array(matches)),
            (Reply::bulk("len"), Reply::Int(n as i64)),
        ]));
    }
    Ok(Reply::Bulk(common))
}

/// The dynamic-programming table of common-subsequence lengths, row
/// major, `(x.len() + 1) * (y.len() + 1)`.
fn lcs_table(x: &[u8], y: &[u8]) -> Vec<u32> {
    let w = y.len() + 1;
    let mut t = vec![0u32; (x.len() + 1) * w];
    for i in 1..=x.len() {
        for k in 1..=y.len() {
            t[i * w + k] = if x[i - 1] == y[k - 1] {
                t[(i - 1) * w + k - 1] + 1
            } else {
                t[(i - 1) * w + k].max(t[i * w + k - 1])
            };
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_clamp_as_redis_clamps() {
        assert_eq!(clamp_range(0, -1, 5), Some((0, 4)));
        assert_eq!(clamp_range(-3, -1, 5), Some((2, 4)));
        assert_eq!(clamp_range(3, 100, 5), Some((3, 4)));
        assert_eq!(clamp_range(4, 2, 5), None);
        assert_eq!(clamp_range(0, 0, 0), None);
    }

    #[test]
    fn lcs_of_redis_example() {
        let t = lcs_table(b"ohmytext", b"mynewtext");
        assert_eq!(t[8 * 10 + 9], 6);
    }
}
