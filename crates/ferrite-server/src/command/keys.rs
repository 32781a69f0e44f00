//! Key-space commands: deleting and testing keys, iterating them (`SCAN`
//! with server-side cursors, `KEYS` with a bound), counting and flushing
//! databases. Keys never expire here, so `TTL` answers -1 or -2.

use std::ops::{Bound, ControlFlow};

use ferrite::WriteBatch;

use super::{key, reply, syntax_error, Ctx};
use crate::glob;
use crate::keyspace::{db_range, engine_error, update, DATABASES};
use crate::reply::Reply;
use crate::request::Args;

/// `KEYS` answers at most this many keys; past it, `SCAN` is the way.
pub const KEYS_LIMIT: usize = 100_000;

pub fn del(ctx: &mut Ctx<'_>, a: &Args) -> Reply {
    reply((|| {
        if a.len() == 2 {
            let k = key(ctx, &a[1])?;
            let gone = update(ctx.data, &k, &mut |old| match old {
                Some(_) => Ok(None),
                None => Err(Reply::Int(0)),
            });
            return gone.map(|_| Reply::Int(1));
        }
        // Several keys: removed together, counted exactly.
        let keys = a[1..]
            .iter()
            .map(|k| key(ctx, k))
            .collect::<Result<Vec<_>, _>>()?;
        ctx.data.alone(&mut |data| {
            let mut b = WriteBatch::new();
            let mut n = 0;
            let mut seen = std::collections::HashSet::new();
            for k in &keys {
                if seen.insert(k.clone()) && data.get(k)?.is_some() {
                    b.delete(k).map_err(|e| engine_error(&e))?;
                    n += 1;
                }
            }
            if n > 0 {
                data.write(b)?;
            }
            Ok(Reply::Int(n))
        })
    })())
}

pub fn exists(ctx: &mut Ctx<'_>, a: &Args) -> Reply {
    reply((|| {
        let mut n = 0;
        for k in &a[1..] {
            n += ctx.data.get(&key(ctx, k)?)?.is_some() as i64;
        }
        Ok(Reply::Int(n))
    })())
}

pub fn type_of(ctx: &mut Ctx<'_>, a: &Args) -> Reply {
    reply((|| {
        let k = key(ctx, &a[1])?;
        Ok(Reply::Status(
            if ctx.data.get(&k)?.is_some() {
                "string"
            } else {
                "none"
            }
            .into(),
        ))
    })())
}

pub fn ttl(ctx: &mut Ctx<'_>, a: &Args) -> Reply {
    reply((|| {
        let k = key(ctx, &a[1])?;
        Ok(Reply::Int(if ctx.data.get(&k)?.is_some() {
            -1
        } else {
            -2
        }))
    })())
}

/// `SCAN`'s options: the pattern, the count hint, the type filter.
type ScanOptions = (Option<Vec<u8>>, usize, Option<Vec<u8>>);

/// Parses `[MATCH pattern] [COUNT n] [TYPE t]` from `opts`.
fn scan_options(opts: &[Vec<u8>]) -> Result<ScanOptions, Reply> {
    let (mut pattern, mut count, mut ty) = (None, 10usize, None);
    let mut it = opts.iter();
    while let Some(o) = it.next() {
        let value = it.next().ok_or_else(syntax_error)?;
        match o.to_ascii_uppercase().as_slice() {
            b"MATCH" => pattern = Some(value.clone()),
            b"COUNT" => {
                count = super::strings::parse_int(value)
                    .filter(|&n| n >= 1)
                    .ok_or_else(syntax_error)? as usize;
            }
            b"TYPE" => ty = Some(value.to_ascii_lowercase()),
            _ => return Err(syntax_error()),
        }
    }
    Ok((pattern, count.min(100_000), ty))
}

/// `SCAN cursor [MATCH pattern] [COUNT n] [TYPE t]`. Cursors are numbers
/// the server hands out, each naming where the next call resumes (kept
/// in `Shared::cursors`); 0 starts and ends an iteration. Every key
/// present from the first call to the last is returned once.
pub fn scan(ctx: &mut Ctx<'_>, a: &Args) -> Reply {
    reply((|| {
        let cursor = std::str::from_utf8(&a[1])
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or_else(|| Reply::err("invalid cursor"))?;
        let (pattern, count, ty) = scan_options(&a[2..])?;
        let db = ctx.session.db;
        let prefix = pattern
            .as_deref()
            .map(glob::literal_prefix)
            .unwrap_or_default();
        let (start, end) = db_range(db, &prefix);
        let start = if cursor == 0 {
            start
        } else {
            match ctx.shared.cursors.resume(cursor, db) {
                Some(from) => Bound::Included(from),
                None => return Err(Reply::err("invalid cursor")),
            }
        };
        let mut keys = Vec::new();
        let mut next: Option<Vec<u8>> = None;
        let mut seen = 0usize;
        let wants_strings = ty.as_deref().is_none_or(|t| t == b"string");
        ctx.data.scan((start, end), &mut |k, _| {
            if seen == count {
                next = Some(k.to_vec());
                return ControlFlow::Break(());
            }
            seen += 1;
            let user = &k[1..];
            if wants_strings && pattern.as_deref().is_none_or(|p| glob::matches(p, user)) {
                keys.push(Reply::Bulk(user.to_vec()));
            }
            ControlFlow::Continue(())
        })?;
        let cursor = match next {
            Some(from) => ctx.shared.cursors.issue(db, from),
            None => 0,
        };
        Ok(Reply::Array(vec![
            Reply::Bulk(cursor.to_string().into_bytes()),
            Reply::Array(keys),
        ]))
    })())
}

pub fn keys(ctx: &mut Ctx<'_>, a: &Args) -> Reply {
    reply((|| {
        let pattern = &a[1];
        let range = db_range(ctx.session.db, &glob::literal_prefix(pattern));
        let mut out = Vec::new();
        let mut over = false;
        ctx.data.scan(range, &mut |k, _| {
            if glob::matches(pattern, &k[1..]) {
                if out.len() == KEYS_LIMIT {
                    over = true;
                    return ControlFlow::Break(());
                }
                out.push(Reply::Bulk(k[1..].to_vec()));
            }
            ControlFlow::Continue(())
        })?;
        if over {
            return Err(Reply::err(format!(
                "KEYS would answer more than {KEYS_LIMIT} keys; iterate with SCAN instead"
            )));
        }
        Ok(Reply::Array(out))
    })())
}

/// Keys in the session's database (a scan: this costs what the database
/// holds).
pub fn dbsize(ctx: &mut Ctx<'_>, _: &Args) -> Reply {
    reply((|| {
        let mut n = 0i64;
        ctx.data.scan(db_range(ctx.session.db, b""), &mut |_, _| {
            n += 1;
            ControlFlow::Continue(())
        })?;
        Ok(Reply::Int(n))
    })())
}

fn flush_mode(a: &Args) -> Result<(), Reply> {
    match a.get(1).map(|m| m.to_ascii_uppercase()) {
        None => Ok(()),
        Some(m) if a.len() == 2 && (m == b"ASYNC" || m == b"SYNC") => Ok(()),
        Some(_) => Err(syntax_error()),
    }
}

fn flush(ctx: &mut Ctx<'_>, from: u8, to: u8) -> Result<Reply, Reply> {
    let mut b = WriteBatch::new();
    b.delete_range(&[from], &[to])
        .map_err(|e| engine_error(&e))?;
    ctx.data.write(b)?;
    Ok(Reply::ok())
}

pub fn flushdb(ctx: &mut Ctx<'_>, a: &Args) -> Reply {
    reply(flush_mode(a).and_then(|()| {
        let db = ctx.session.db;
        flush(ctx, db, db + 1)
    }))
}

pub fn flushall(ctx: &mut Ctx<'_>, a: &Args) -> Reply {
    reply(flush_mode(a).and_then(|()| flush(ctx, 0, DATABASES)))
}
