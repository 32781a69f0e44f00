//! `SORT` and `SORT_RO` over lists, sets and sorted sets: numerically or
//! (`ALPHA`) by bytes, by the elements or by keys and hash fields named
//! from them (`BY`), returning the elements or values named from them
//! (`GET`), a window (`LIMIT`), or stored as a list (`STORE`). The
//! input is read whole, as Redis does.

use std::cmp::Ordering;
use std::ops::ControlFlow;

use super::args::{int, is};
use super::lists::push;
use super::{fail, syntax_error, CmdResult, Ctx, Fail};
use crate::model::{Kind, ListEnd, ModelError};
use crate::reply::Reply;
use crate::request::Args;

struct Opts {
    by: Option<Vec<u8>>,
    /// `BY` a pattern without `*`: keep the collection's own order.
    dont_sort: bool,
    limit: Option<(i64, i64)>,
    gets: Vec<Vec<u8>>,
    desc: bool,
    alpha: bool,
    store: Option<Vec<u8>>,
}

fn parse(a: &Args, read_only: bool) -> Result<Opts, Fail> {
    let mut o = Opts {
        by: None,
        dont_sort: false,
        limit: None,
        gets: Vec::new(),
        desc: false,
        alpha: false,
        store: None,
    };
    let mut j = 2;
    while j < a.len() {
        let left = a.len() - j - 1;
        let x = &a[j];
        if is(x, "ASC") {
            o.desc = false;
        } else if is(x, "DESC") {
            o.desc = true;
        } else if is(x, "ALPHA") {
            o.alpha = true;
        } else if is(x, "LIMIT") && left >= 2 {
            o.limit = Some((int(a[j + 1])?, int(a[j + 2])?));
            j += 2;
        } else if !read_only && is(x, "STORE") && left >= 1 {
            o.store = Some(a[j + 1].to_vec());
            j += 1;
        } else if is(x, "BY") && left >= 1 {
            let p = a[j + 1].to_vec();
            o.dont_sort = !p.contains(&b'*');
            o.by = Some(p);
            j += 1;
        } else if is(x, "GET") && left >= 1 {
            o.gets.push(a[j + 1].to_vec());
            j += 1;
        } else {
            return Err(syntax_error());
        }
        j += 1;
    }
    Ok(o)
}

/// The value `pattern` names for `elem`: `#` is the element itself;
/// otherwise the first `*` becomes the element, naming a string key or
/// (`key->field`) a hash field.
fn lookup_pattern(ctx: &Ctx<'_, '_>, pattern: &[u8], elem: &[u8]) -> Result<Option<Vec<u8>>, Fail> {
    if pattern == b"#" {
        return Ok(Some(elem.to_vec()));
    }
    let Some(star) = pattern.iter().position(|&c| c == b'*') else {
        return Ok(None);
    };
    let rest = &pattern[star + 1..];
    let (tail, field) = match rest.windows(2).position(|w| w == b"->") {
        Some(i) if i + 2 < rest.len() => (&rest[..i], Some(&rest[i + 2..])),
        _ => (rest, None),
    };
    let mut key = pattern[..star].to_vec();
    key.extend_from_slice(elem);
    key.extend_from_slice(tail);
    if key.len() > crate::model::MAX_USER_KEY {
        return Ok(None);
    }
    let f = ctx.tx.lookup(ctx.db(), &key)?;
    let Some(m) = f.live() else {
        return Ok(None);
    };
    match field {
        None if m.kind() == Kind::String => Ok(f.string()?.map(|v| v.into_owned())),
        Some(field) if m.kind() == Kind::Hash => Ok(ctx.tx.hash_get(f.slot, m, field)?),
        _ => Ok(None),
    }
}

/// The elements of the list, set or sorted set at `key`, in its own
/// order, and whether it is a set.
fn elements(ctx: &Ctx<'_, '_>, key: &[u8]) -> Result<(Vec<Vec<u8>>, bool), Fail> {
    let f = ctx.tx.lookup(ctx.db(), key)?;
    let Some(m) = f.live() else {
        return Ok((Vec::new(), false));
    };
    let Some(c) = m.coll().copied() else {
        return Err(ModelError::WrongType.into());
    };
    let mut out = Vec::with_capacity(c.size.min(1 << 20) as usize);
    match c.kind {
        Kind::List => {
            if c.size > 0 {
                let last = c.head.wrapping_add(c.size - 1);
                ctx.tx
                    .scan_items(f.slot, &c, c.head, last, false, &mut |_, v| {
                        out.push(v.to_vec());
                        ControlFlow::Continue(())
                    })?;
            }
        }
        Kind::Set => out.extend(ctx.tx.all_fields(f.slot, &c)?.into_iter().map(|(m, _)| m)),
        Kind::ZSet => {
            ctx.tx.scan_scores(
                f.slot,
                &c,
                std::ops::Bound::Unbounded,
                std::ops::Bound::Unbounded,
                false,
                &mut |_, m| {
                    out.push(m.to_vec());
                    ControlFlow::Continue(())
                },
            )?;
        }
        _ => return Err(ModelError::WrongType.into()),
    }
    Ok((out, c.kind == Kind::Set))
}

fn sort_generic(ctx: &mut Ctx<'_, '_>, a: &Args, read_only: bool) -> CmdResult {
    let mut o = parse(a, read_only)?;
    let (mut elems, set) = elements(ctx, a[1])?;
    // A set has no order of its own: what is stored, or answered to a
    // script, is sorted so that it is the same everywhere (as Redis).
    if o.dont_sort && set && (o.store.is_some() || ctx.session.scripted) {
        o.dont_sort = false;
        o.alpha = true;
        o.by = None;
    }
    let n = elems.len() as i64;
    if o.dont_sort && o.desc {
        elems.reverse();
    }
    if !o.dont_sort {
        // The sort keys: a number (or bytes, with ALPHA) per element.
        let mut keyed: Vec<(Option<Vec<u8>>, f64, Vec<u8>)> = Vec::with_capacity(elems.len());
        let mut bad = false;
        for e in elems {
            let by = match &o.by {
                Some(p) => lookup_pattern(ctx, p, &e)?,
                None => Some(e.clone()),
            };
            let score = if o.alpha {
                0.0
            } else {
                match &by {
                    Some(b) => match std::str::from_utf8(b)
                        .ok()
                        .and_then(|s| s.parse::<f64>().ok())
                    {
                        Some(x) if !x.is_nan() => x,
                        _ => {
                            bad = true;
                            0.0
                        }
                    },
                    None => 0.0,
                }
            };
            keyed.push((by, score, e));
        }
        if bad {
            return Err(fail("One or more scores can't be converted into double"));
        }
        let by_pattern = o.by.is_some();
        keyed.sort_by(|x, y| {
            let c = if !o.alpha {
                x.1.partial_cmp(&y.1)
                    .unwrap_or(Ordering::Equal)
                    .then_with(|| x.2.cmp(&y.2))
            } else if by_pattern {
                match (&x.0, &y.0) {
                    (None, None) => Ordering::Equal,
                    (None, _) => Ordering::Less,
                    (_, None) => Ordering::Greater,
                    (Some(p), Some(q)) => p.cmp(q),
                }
            } else {
                x.2.cmp(&y.2)
            };
            if o.desc {
                c.reverse()
            } else {
                c
            }
        });
        elems = keyed.into_iter().map(|(_, _, e)| e).collect();
    }
    let (start, count) = o.limit.unwrap_or((0, -1));
    let start = start.clamp(0, n) as usize;
    let count = count.clamp(-1, n);
    let end = if count < 0 {
        elems.len()
    } else {
        (start + count as usize).min(elems.len())
    };
    let window = elems.get(start..end).unwrap_or(&[]);
    let mut out: Vec<Option<Vec<u8>>> = Vec::new();
    for e in window {
        if o.gets.is_empty() {
            out.push(Some(e.clone()));
        }
        for g in &o.gets {
            out.push(lookup_pattern(ctx, g, e)?);
        }
    }
    let Some(dest) = &o.store else {
        return Ok(Reply::Array(out.into_iter().map(Reply::opt).collect()));
    };
    let n = out.len() as i64;
    let mut f = ctx.tx.lookup(ctx.db(), dest)?;
    if ctx.tx.remove(&mut f)? && out.is_empty() {
        ctx.tx.notify('g', "del", f.db, dest);
    }
    if !out.is_empty() {
        let items: Vec<Vec<u8>> = out.into_iter().map(Option::unwrap_or_default).collect();
        push(
            ctx,
            dest,
            ListEnd::Right,
            &crate::request::view(&items),
            false,
        )?;
        ctx.tx.notify('l', "sortstore", ctx.db(), dest);
    }
    Ok(Reply::Int(n))
}

pub fn sort(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    sort_generic(ctx, a, false)
}

pub fn sort_ro(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    sort_generic(ctx, a, true)
}
