//! String commands. Single-key read-modify-writes loop on the engine's
//! compare-and-swap (`keyspace::update`); `MSETNX` checks and writes
//! alone (`Access::alone`).

use ferrite::WriteBatch;

use super::{key, reply, syntax_error, Ctx};
use crate::keyspace::{engine_error, update};
use crate::reply::{format_double, Reply};
use crate::request::Args;

pub fn get(ctx: &mut Ctx<'_>, a: &Args) -> Reply {
    reply((|| {
        let k = key(ctx, &a[1])?;
        let v = ctx.data.get(&k)?;
        ctx.shared.stats.count_lookup(v.is_some());
        Ok(Reply::opt(v))
    })())
}

/// `SET key value [NX | XX] [GET]`; expiry options are refused.
pub fn set(ctx: &mut Ctx<'_>, a: &Args) -> Reply {
    reply((|| {
        let k = key(ctx, &a[1])?;
        let v = &a[2];
        let (mut nx, mut xx, mut get) = (false, false, false);
        for opt in &a[3..] {
            match opt.to_ascii_uppercase().as_slice() {
                b"NX" if !xx => nx = true,
                b"XX" if !nx => xx = true,
                b"GET" => get = true,
                b"EX" | b"PX" | b"EXAT" | b"PXAT" | b"KEEPTTL" => {
                    return Err(Reply::err(
                        "this server does not expire keys; SET takes NX, XX and GET only",
                    ))
                }
                _ => return Err(syntax_error()),
            }
        }
        if !(nx || xx || get) {
            ctx.data.put(&k, v)?;
            return Ok(Reply::ok());
        }
        let (old, _) = update(ctx.data, &k, &mut |old| {
            let write = (nx && old.is_none()) || (xx && old.is_some()) || !(nx || xx);
            if !write {
                // Nothing written: the reply ends the command here.
                return Err(if get {
                    Reply::opt(old.map(<[u8]>::to_vec))
                } else {
                    Reply::Null
                });
            }
            Ok(Some(v.clone()))
        })?;
        Ok(if get { Reply::opt(old) } else { Reply::ok() })
    })())
}

pub fn setnx(ctx: &mut Ctx<'_>, a: &Args) -> Reply {
    reply((|| {
        let k = key(ctx, &a[1])?;
        Ok(Reply::Int(ctx.data.cas(&k, None, Some(&a[2]))? as i64))
    })())
}

pub fn getset(ctx: &mut Ctx<'_>, a: &Args) -> Reply {
    reply((|| {
        let k = key(ctx, &a[1])?;
        let (old, _) = update(ctx.data, &k, &mut |_| Ok(Some(a[2].clone())))?;
        Ok(Reply::opt(old))
    })())
}

pub fn getdel(ctx: &mut Ctx<'_>, a: &Args) -> Reply {
    reply((|| {
        let k = key(ctx, &a[1])?;
        let (old, _) = update(ctx.data, &k, &mut |old| match old {
            Some(_) => Ok(None),
            None => Err(Reply::Null),
        })?;
        Ok(Reply::opt(old))
    })())
}

pub fn mget(ctx: &mut Ctx<'_>, a: &Args) -> Reply {
    reply((|| {
        let mut out = Vec::with_capacity(a.len() - 1);
        for k in &a[1..] {
            let v = ctx.data.get(&key(ctx, k)?)?;
            ctx.shared.stats.count_lookup(v.is_some());
            out.push(Reply::opt(v));
        }
        Ok(Reply::Array(out))
    })())
}

/// The pairs of `MSET`-style arguments as one batch.
fn pairs_batch(ctx: &Ctx<'_>, a: &Args) -> Result<(WriteBatch, Vec<Vec<u8>>), Reply> {
    if a.len().is_multiple_of(2) {
        return Err(Reply::err(format!(
            "wrong number of arguments for '{}' command",
            String::from_utf8_lossy(&a[0]).to_lowercase()
        )));
    }
    let mut b = WriteBatch::new();
    let mut keys = Vec::new();
    for pair in a[1..].chunks(2) {
        let k = key(ctx, &pair[0])?;
        b.put(&k, &pair[1]).map_err(|e| engine_error(&e))?;
        keys.push(k);
    }
    Ok((b, keys))
}

pub fn mset(ctx: &mut Ctx<'_>, a: &Args) -> Reply {
    reply((|| {
        let (b, _) = pairs_batch(ctx, a)?;
        ctx.data.write(b)?;
        Ok(Reply::ok())
    })())
}

pub fn msetnx(ctx: &mut Ctx<'_>, a: &Args) -> Reply {
    reply((|| {
        let (b, keys) = pairs_batch(ctx, a)?;
        let mut batch = Some(b);
        ctx.data.alone(&mut |data| {
            for k in &keys {
                if data.get(k)?.is_some() {
                    return Ok(Reply::Int(0));
                }
            }
            if let Some(b) = batch.take() {
                data.write(b)?;
            }
            Ok(Reply::Int(1))
        })
    })())
}

pub fn strlen(ctx: &mut Ctx<'_>, a: &Args) -> Reply {
    reply((|| {
        let k = key(ctx, &a[1])?;
        Ok(Reply::Int(ctx.data.get(&k)?.map_or(0, |v| v.len() as i64)))
    })())
}

pub fn append(ctx: &mut Ctx<'_>, a: &Args) -> Reply {
    reply((|| {
        let k = key(ctx, &a[1])?;
        let (_, new) = update(ctx.data, &k, &mut |old| {
            let mut v = old.map(<[u8]>::to_vec).unwrap_or_default();
            v.extend_from_slice(&a[2]);
            Ok(Some(v))
        })?;
        Ok(Reply::Int(new.map_or(0, |v| v.len() as i64)))
    })())
}

/// Redis's `string2ll`: optional minus, no leading zeros or plus sign,
/// within `i64`.
pub fn parse_int(b: &[u8]) -> Option<i64> {
    let digits = b.strip_prefix(b"-").unwrap_or(b);
    if digits.is_empty() || digits.len() > 20 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if digits[0] == b'0' && (digits.len() > 1 || b.len() > 1) {
        return None;
    }
    std::str::from_utf8(b).ok()?.parse().ok()
}

fn not_an_integer() -> Reply {
    Reply::err("value is not an integer or out of range")
}

fn incr_by(ctx: &mut Ctx<'_>, k: &[u8], by: i64) -> Reply {
    reply((|| {
        let k = key(ctx, k)?;
        let mut result = 0i64;
        update(ctx.data, &k, &mut |old| {
            let now = match old {
                None => 0,
                Some(v) => parse_int(v).ok_or_else(not_an_integer)?,
            };
            result = now
                .checked_add(by)
                .ok_or_else(|| Reply::err("increment or decrement would overflow"))?;
            Ok(Some(result.to_string().into_bytes()))
        })?;
        Ok(Reply::Int(result))
    })())
}

fn arg_int(a: &[u8]) -> Result<i64, Reply> {
    parse_int(a).ok_or_else(not_an_integer)
}

pub fn incr(ctx: &mut Ctx<'_>, a: &Args) -> Reply {
    incr_by(ctx, &a[1], 1)
}

pub fn decr(ctx: &mut Ctx<'_>, a: &Args) -> Reply {
    incr_by(ctx, &a[1], -1)
}

pub fn incrby(ctx: &mut Ctx<'_>, a: &Args) -> Reply {
    match arg_int(&a[2]) {
        Ok(by) => incr_by(ctx, &a[1], by),
        Err(e) => e,
    }
}

pub fn decrby(ctx: &mut Ctx<'_>, a: &Args) -> Reply {
    match arg_int(&a[2]).and_then(|by| {
        by.checked_neg()
            .ok_or_else(|| Reply::err("decrement would overflow"))
    }) {
        Ok(by) => incr_by(ctx, &a[1], by),
        Err(e) => e,
    }
}

/// A float as Redis reads one (`strtold`): decimal or exponent form,
/// `inf`; no spaces, not NaN.
fn parse_float(b: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(b).ok()?;
    if s.is_empty() || s.starts_with(char::is_whitespace) || s.ends_with(char::is_whitespace) {
        return None;
    }
    let v: f64 = s.parse().ok()?;
    (!v.is_nan()).then_some(v)
}

pub fn incrbyfloat(ctx: &mut Ctx<'_>, a: &Args) -> Reply {
    reply((|| {
        let by = parse_float(&a[2]).ok_or_else(|| Reply::err("value is not a valid float"))?;
        let k = key(ctx, &a[1])?;
        let mut text = Vec::new();
        update(ctx.data, &k, &mut |old| {
            let now = match old {
                None => 0.0,
                Some(v) => {
                    parse_float(v).ok_or_else(|| Reply::err("value is not a valid float"))?
                }
            };
            let sum = now + by;
            if !sum.is_finite() {
                return Err(Reply::err("increment would produce NaN or Infinity"));
            }
            text = format_double(sum).into_bytes();
            Ok(Some(text.clone()))
        })?;
        Ok(Reply::Bulk(text))
    })())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_parse_as_redis_parses_them() {
        assert_eq!(parse_int(b"0"), Some(0));
        assert_eq!(parse_int(b"-12"), Some(-12));
        assert_eq!(parse_int(b"9223372036854775807"), Some(i64::MAX));
        for bad in [
            &b""[..],
            b"-",
            b"01",
            b"-0",
            b"+1",
            b" 1",
            b"1.0",
            b"9223372036854775808",
        ] {
            assert_eq!(parse_int(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn floats_parse_as_redis_parses_them() {
        assert_eq!(parse_float(b"10.5"), Some(10.5));
        assert_eq!(parse_float(b"5.0e3"), Some(5000.0));
        assert_eq!(parse_float(b" 1"), None);
        assert_eq!(parse_float(b"nan"), None);
        assert_eq!(parse_float(b"abc"), None);
    }
}
