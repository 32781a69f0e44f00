//! Expiry commands. Expiry times are absolute (ms since the Unix epoch)
//! in the key's metadata, so they survive a restart as they are; a time
//! already past deletes the key at once, as in Redis.

use super::args::{int, is};
use super::{fail, CmdResult, Ctx, Fail};
use crate::reply::Reply;
use crate::request::Args;

#[derive(Default)]
struct Conditions {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
}

fn conditions(opts: &[&[u8]]) -> Result<Conditions, Fail> {
    let mut c = Conditions::default();
    for o in opts {
        if is(o, "NX") {
            c.nx = true;
        } else if is(o, "XX") {
            c.xx = true;
        } else if is(o, "GT") {
            c.gt = true;
        } else if is(o, "LT") {
            c.lt = true;
        } else {
            return Err(fail(format!(
                "Unsupported option {}",
                String::from_utf8_lossy(o)
            )));
        }
    }
    if c.nx && (c.xx || c.gt || c.lt) {
        return Err(fail(
            "NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if c.gt && c.lt {
        return Err(fail(
            "GT and LT options at the same time are not compatible",
        ));
    }
    Ok(c)
}

/// `EXPIRE`-family: `seconds` scales the argument; `relative` adds the
/// current time.
fn expire_generic(ctx: &mut Ctx<'_, '_>, a: &Args, seconds: bool, relative: bool) -> CmdResult {
    let cond = conditions(&a[3..])?;
    let name = String::from_utf8_lossy(a[0]).to_lowercase();
    let bad = || fail(format!("invalid expire time in '{name}' command"));
    let mut when = int(a[2])?;
    if seconds {
        if !(i64::MIN / 1000..=i64::MAX / 1000).contains(&when) {
            return Err(bad());
        }
        when *= 1000;
    }
    if relative {
        let base = ctx.tx.now as i64;
        if when > i64::MAX - base {
            return Err(bad());
        }
        when += base;
    }
    let mut f = ctx.tx.lookup(ctx.db(), a[1])?;
    let Some(mut m) = f.live().cloned() else {
        return Ok(Reply::Int(0));
    };
    let current = m.expire_at.map(|t| t as i64);
    let refused = (cond.nx && current.is_some())
        || (cond.xx && current.is_none())
        || (cond.gt && current.is_none_or(|c| when <= c))
        || (cond.lt && current.is_some_and(|c| when >= c));
    if refused {
        return Ok(Reply::Int(0));
    }
    let db = f.db;
    if when <= ctx.tx.now as i64 {
        ctx.tx.remove(&mut f)?;
        ctx.tx.notify('g', "del", db, a[1]);
    } else {
        m.expire_at = Some(when as u64);
        ctx.tx.set(&mut f, Some(m))?;
        ctx.tx.notify('g', "expire", db, a[1]);
    }
    Ok(Reply::Int(1))
}

pub fn expire(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    expire_generic(ctx, a, true, true)
}

pub fn pexpire(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    expire_generic(ctx, a, false, true)
}

pub fn expireat(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    expire_generic(ctx, a, true, false)
}

pub fn pexpireat(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    expire_generic(ctx, a, false, false)
}

/// `TTL`-family: `ms` for milliseconds, `absolute` for the time itself.
fn ttl_generic(ctx: &mut Ctx<'_, '_>, a: &Args, ms: bool, absolute: bool) -> CmdResult {
    let f = ctx.tx.lookup(ctx.db(), a[1])?;
    let Some(m) = f.live() else {
        return Ok(Reply::Int(-2));
    };
    let Some(at) = m.expire_at else {
        return Ok(Reply::Int(-1));
    };
    let t = if absolute {
        at as i64
    } else {
        (at as i64 - ctx.tx.now as i64).max(0)
    };
    Ok(Reply::Int(if ms { t } else { (t + 500) / 1000 }))
}

pub fn ttl(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    ttl_generic(ctx, a, false, false)
}

pub fn pttl(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    ttl_generic(ctx, a, true, false)
}

pub fn expiretime(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    ttl_generic(ctx, a, false, true)
}

pub fn pexpiretime(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    ttl_generic(ctx, a, true, true)
}

pub fn persist(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let mut f = ctx.tx.lookup(ctx.db(), a[1])?;
    match f.live().cloned() {
        Some(mut m) if m.expire_at.is_some() => {
            m.expire_at = None;
            ctx.tx.set(&mut f, Some(m))?;
            ctx.tx.notify('g', "persist", f.db, a[1]);
            Ok(Reply::Int(1))
        }
        _ => Ok(Reply::Int(0)),
    }
}
