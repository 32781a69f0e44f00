//! List commands. A list is a metadata record (version, size, head) and
//! its items at positions `head..head + size`: while it is small, all in
//! one record (a listpack, rewritten by each change), and past Redis's
//! `list-max-listpack-size` one record per item, so pushing and popping
//! at either end are one write each, and `LINDEX`/`LSET` one point
//! access. `LINSERT` and `LREM` shift the items on the shorter side of
//! the change (`LINSERT`) or after the first removal (`LREM`), one
//! rewrite per item moved; `LTRIM` is two range deletes. Adding asks
//! `Tx::list_grow` first and removing `Tx::list_shrink` after, which
//! move a list between its encodings as Redis converts a listpack to a
//! quicklist and back.

use std::ops::ControlFlow;

use super::args::{int, is, numkeys, parse_int, positive};
use super::{fail, syntax_error, CmdResult, Ctx, Fail};
use crate::model::{Coll, Found, Kind, ListEnd, Meta};
use crate::reply::Reply;
use crate::request::Args;

fn list(ctx: &Ctx<'_, '_>, key: &[u8]) -> Result<(Found, Option<Coll>), Fail> {
    let f = ctx.tx.lookup(ctx.db(), key)?;
    let c = f.coll(Kind::List)?;
    Ok((f, c))
}

fn end_name(end: ListEnd, push: bool) -> &'static str {
    match (end, push) {
        (ListEnd::Left, true) => "lpush",
        (ListEnd::Right, true) => "rpush",
        (ListEnd::Left, false) => "lpop",
        (ListEnd::Right, false) => "rpop",
    }
}

/// Writes a list's header after changes, with the events.
fn finish(ctx: &mut Ctx<'_, '_>, f: &mut Found, m: Meta, event: &'static str) -> Result<(), Fail> {
    let db = f.db;
    let key = f.key.clone();
    let existed = f.exists();
    ctx.tx.set(f, Some(m))?;
    ctx.tx.notify('l', event, db, &key);
    if existed && !f.exists() {
        ctx.tx.notify('g', "del", db, &key);
    }
    Ok(())
}

/// Pushes `items` at `end` of the list at `key` (creating it unless
/// `only_existing`); answers the new length (0 if nothing was there).
pub fn push(
    ctx: &mut Ctx<'_, '_>,
    key: &[u8],
    end: ListEnd,
    items: &[&[u8]],
    only_existing: bool,
) -> Result<i64, Fail> {
    let mut f = ctx.tx.lookup(ctx.db(), key)?;
    let (mut m, new) = match f.typed(Kind::List)? {
        Some(m) => (m.clone(), false),
        None if only_existing => return Ok(0),
        None => (ctx.tx.new_coll(Kind::List)?, true),
    };
    let Some(c) = m.coll_mut() else {
        return Err(fail("list header expected"));
    };
    // A new list starts packed, as Redis creates a listpack.
    c.packed |= new;
    ctx.tx
        .list_grow(f.slot, c, items, ctx.shared.settings.list_pack())?;
    for item in items {
        ctx.tx.push_item(f.slot, c, end, item.to_vec())?;
    }
    let len = c.size as i64;
    finish(ctx, &mut f, m, end_name(end, true))?;
    Ok(len)
}

pub fn lpush(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    Ok(Reply::Int(push(ctx, a[1], ListEnd::Left, &a[2..], false)?))
}

pub fn rpush(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    Ok(Reply::Int(push(ctx, a[1], ListEnd::Right, &a[2..], false)?))
}

pub fn lpushx(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    Ok(Reply::Int(push(ctx, a[1], ListEnd::Left, &a[2..], true)?))
}

pub fn rpushx(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    Ok(Reply::Int(push(ctx, a[1], ListEnd::Right, &a[2..], true)?))
}

/// Pops up to `count` items from `end` of the list `f`.
pub fn pop(
    ctx: &mut Ctx<'_, '_>,
    f: &mut Found,
    end: ListEnd,
    count: u64,
) -> Result<Vec<Vec<u8>>, Fail> {
    let Some(mut m) = f.typed(Kind::List)?.cloned() else {
        return Ok(Vec::new());
    };
    let Some(c) = m.coll_mut() else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    while (out.len() as u64) < count {
        match ctx.tx.pop_item(f.slot, c, end)? {
            Some(v) => out.push(v),
            None => break,
        }
    }
    ctx.tx
        .list_shrink(f.slot, c, ctx.shared.settings.list_pack())?;
    if !out.is_empty() {
        finish(ctx, f, m, end_name(end, false))?;
    }
    Ok(out)
}

fn pop_generic(ctx: &mut Ctx<'_, '_>, a: &Args, end: ListEnd) -> CmdResult {
    if a.len() > 3 {
        return Err(fail(format!(
            "wrong number of arguments for '{}' command",
            String::from_utf8_lossy(a[0]).to_lowercase()
        )));
    }
    let count = match a.get(2) {
        Some(c) if c == b"0" => Some(0),
        Some(c) => Some(positive(c)?),
        None => None,
    };
    let mut f = ctx.tx.lookup(ctx.db(), a[1])?;
    if f.typed(Kind::List)?.is_none() {
        return Ok(if count.is_some() {
            Reply::NullArray
        } else {
            Reply::Null
        });
    }
    if count == Some(0) {
        return Ok(Reply::Array(Vec::new()));
    }
    let items = pop(ctx, &mut f, end, count.unwrap_or(1))?;
    Ok(match count {
        Some(_) => Reply::bulks(items),
        None => Reply::opt(items.into_iter().next()),
    })
}

pub fn lpop(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    pop_generic(ctx, a, ListEnd::Left)
}

pub fn rpop(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    pop_generic(ctx, a, ListEnd::Right)
}

pub fn llen(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let (_, c) = list(ctx, a[1])?;
    Ok(Reply::Int(c.map_or(0, |c| c.size as i64)))
}

/// The position of index `i` (negative from the end) in `c`, if inside.
fn position(c: &Coll, i: i64) -> Option<u64> {
    let size = c.size as i64;
    let i = if i < 0 { size + i } else { i };
    (0..size)
        .contains(&i)
        .then(|| c.head.wrapping_add(i as u64))
}

/// The items at indexes `s..=e` (clamped, Redis's negative indexes).
fn items(
    ctx: &Ctx<'_, '_>,
    f: &Found,
    c: &Coll,
    start: i64,
    stop: i64,
) -> Result<Vec<Vec<u8>>, Fail> {
    let size = c.size as i64;
    let mut s = if start < 0 { size + start } else { start };
    let mut e = if stop < 0 { size + stop } else { stop };
    s = s.max(0);
    if e >= size {
        e = size - 1;
    }
    if s > e || s >= size {
        return Ok(Vec::new());
    }
    let mut out = Vec::with_capacity((e - s + 1).min(1 << 16) as usize);
    let (from, to) = (c.head.wrapping_add(s as u64), c.head.wrapping_add(e as u64));
    ctx.tx.scan_items(f.slot, c, from, to, false, &mut |_, v| {
        out.push(v.to_vec());
        ControlFlow::Continue(())
    })?;
    Ok(out)
}

pub fn lrange(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let (start, stop) = (int(a[2])?, int(a[3])?);
    let (f, c) = list(ctx, a[1])?;
    let Some(c) = c else {
        return Ok(Reply::Array(Vec::new()));
    };
    Ok(Reply::bulks(items(ctx, &f, &c, start, stop)?))
}

pub fn lindex(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let (f, c) = list(ctx, a[1])?;
    let Some(c) = c else {
        return Ok(Reply::Null);
    };
    let i = int(a[2])?;
    Ok(match position(&c, i) {
        Some(p) => Reply::opt(ctx.tx.item(f.slot, &c, p)?),
        None => Reply::Null,
    })
}

pub fn lset(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let mut f = ctx.tx.lookup(ctx.db(), a[1])?;
    let Some(mut m) = f.typed(Kind::List)?.cloned() else {
        return Err(fail("no such key"));
    };
    let Some(c) = m.coll_mut() else {
        return Err(fail("list header expected"));
    };
    let i = int(a[2])?;
    let Some(p) = position(c, i) else {
        return Err(fail("index out of range"));
    };
    ctx.tx
        .list_grow(f.slot, c, &a[3..4], ctx.shared.settings.list_pack())?;
    ctx.tx.put_item(f.slot, c, p, a[3].to_vec())?;
    // The header changes only if the list left its packed record.
    ctx.tx.set(&mut f, Some(m))?;
    ctx.tx.notify('l', "lset", f.db, a[1]);
    Ok(Reply::ok())
}

/// Every item of `c` with its position, in order.
fn all_items(ctx: &Ctx<'_, '_>, f: &Found, c: &Coll) -> Result<Vec<(u64, Vec<u8>)>, Fail> {
    if c.size == 0 {
        return Ok(Vec::new());
    }
    let mut out = Vec::with_capacity(c.size.min(1 << 16) as usize);
    let last = c.head.wrapping_add(c.size - 1);
    ctx.tx
        .scan_items(f.slot, c, c.head, last, false, &mut |p, v| {
            out.push((p, v.to_vec()));
            ControlFlow::Continue(())
        })?;
    Ok(out)
}

/// `LINSERT key BEFORE|AFTER pivot element`.
pub fn linsert(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let after = if is(a[2], "AFTER") {
        true
    } else if is(a[2], "BEFORE") {
        false
    } else {
        return Err(syntax_error());
    };
    let mut f = ctx.tx.lookup(ctx.db(), a[1])?;
    let Some(mut m) = f.typed(Kind::List)?.cloned() else {
        return Ok(Reply::Int(0));
    };
    let Some(c) = m.coll_mut() else {
        return Ok(Reply::Int(0));
    };
    let all = all_items(ctx, &f, c)?;
    let Some(i) = all.iter().position(|(_, v)| *v == a[3]) else {
        return Ok(Reply::Int(-1));
    };
    ctx.tx
        .list_grow(f.slot, c, &a[4..5], ctx.shared.settings.list_pack())?;
    // The new item takes index `at`; the items from `at` on move right,
    // or the items before `at` move left, whichever side is shorter.
    let at = if after { i + 1 } else { i };
    if at <= all.len() / 2 {
        for (k, (_, v)) in all[..at].iter().enumerate() {
            let p = c.head.wrapping_sub(1).wrapping_add(k as u64);
            ctx.tx.put_item(f.slot, c, p, v.clone())?;
        }
        c.head = c.head.wrapping_sub(1);
    } else {
        for (p, v) in all[at..].iter().rev() {
            ctx.tx.put_item(f.slot, c, p.wrapping_add(1), v.clone())?;
        }
    }
    let p = c.head.wrapping_add(at as u64);
    ctx.tx.put_item(f.slot, c, p, a[4].to_vec())?;
    c.size += 1;
    let len = c.size as i64;
    finish(ctx, &mut f, m, "linsert")?;
    Ok(Reply::Int(len))
}

/// Rewrites the list `c` to hold `keep` (its items in order) from its
/// current head, deleting positions left over at the tail.
fn rewrite(
    ctx: &mut Ctx<'_, '_>,
    f: &Found,
    c: &mut Coll,
    all: &[(u64, Vec<u8>)],
    keep: &[bool],
) -> Result<(), Fail> {
    let mut next = c.head;
    let mut moved = false;
    for ((p, v), k) in all.iter().zip(keep) {
        if !*k {
            moved = true;
            continue;
        }
        if moved {
            ctx.tx.put_item(f.slot, c, next, v.clone())?;
        }
        debug_assert!(moved || *p == next);
        next = next.wrapping_add(1);
    }
    // Point deletes from the tail back: a packed list loses each at its
    // end, and an LSM-tree is left no range tombstone to read past.
    let mut p = c.head.wrapping_add(c.size);
    while p != next {
        p = p.wrapping_sub(1);
        ctx.tx.delete_item(f.slot, c, p)?;
    }
    c.size = next.wrapping_sub(c.head);
    ctx.tx
        .list_shrink(f.slot, c, ctx.shared.settings.list_pack())?;
    Ok(())
}

/// `LREM key count element`.
pub fn lrem(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let count = int(a[2])?;
    let mut f = ctx.tx.lookup(ctx.db(), a[1])?;
    let Some(mut m) = f.typed(Kind::List)?.cloned() else {
        return Ok(Reply::Int(0));
    };
    let Some(c) = m.coll_mut() else {
        return Ok(Reply::Int(0));
    };
    let all = all_items(ctx, &f, c)?;
    let mut keep = vec![true; all.len()];
    let limit = if count == 0 {
        u64::MAX
    } else {
        count.unsigned_abs()
    };
    let mut removed = 0u64;
    let order: Box<dyn Iterator<Item = usize>> = if count < 0 {
        Box::new((0..all.len()).rev())
    } else {
        Box::new(0..all.len())
    };
    for i in order {
        if removed == limit {
            break;
        }
        if all[i].1 == a[3] {
            keep[i] = false;
            removed += 1;
        }
    }
    if removed > 0 {
        rewrite(ctx, &f, c, &all, &keep)?;
        finish(ctx, &mut f, m, "lrem")?;
    }
    Ok(Reply::Int(removed as i64))
}

/// `LTRIM key start stop`: two range deletes.
pub fn ltrim(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let (start, stop) = (int(a[2])?, int(a[3])?);
    let mut f = ctx.tx.lookup(ctx.db(), a[1])?;
    let Some(mut m) = f.typed(Kind::List)?.cloned() else {
        return Ok(Reply::ok());
    };
    let Some(c) = m.coll_mut() else {
        return Ok(Reply::ok());
    };
    let size = c.size as i64;
    let mut s = if start < 0 { size + start } else { start };
    let mut e = if stop < 0 { size + stop } else { stop };
    s = s.max(0);
    if e >= size {
        e = size - 1;
    }
    let (keep_from, keep_to) = if s > e || s >= size {
        (size, size - 1)
    } else {
        (s, e)
    };
    let head = c.head;
    let at = |i: i64| head.wrapping_add(i as u64);
    if keep_from > 0 {
        ctx.tx
            .delete_items(f.slot, c, head, at(keep_from.min(size) - 1))?;
    }
    if keep_to < size - 1 {
        ctx.tx
            .delete_items(f.slot, c, at(keep_to.max(keep_from - 1) + 1), at(size - 1))?;
    }
    let new_size = (keep_to - keep_from + 1).max(0) as u64;
    if new_size as i64 != size {
        c.head = head.wrapping_add(keep_from.min(size) as u64);
        c.size = new_size;
        ctx.tx
            .list_shrink(f.slot, c, ctx.shared.settings.list_pack())?;
        finish(ctx, &mut f, m, "ltrim")?;
    }
    Ok(Reply::ok())
}

/// `LPOS key element [RANK r] [COUNT n] [MAXLEN m]`.
pub fn lpos(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let (mut rank, mut count, mut maxlen) = (1i64, None, 0u64);
    let mut j = 3;
    while j < a.len() {
        let more = j + 1 < a.len();
        if is(a[j], "RANK") && more {
            rank = int(a[j + 1])?;
            if rank == i64::MIN {
                return Err(fail(format!(
                    "value is out of range, value must between {} and {}",
                    -i64::MAX,
                    i64::MAX
                )));
            }
            if rank == 0 {
                return Err(fail(
                    "RANK can't be zero: use 1 to start from the first match, 2 from the \
                     second ... or use negative to start from the end of the list",
                ));
            }
        } else if is(a[j], "COUNT") && more {
            count = Some(match parse_int(a[j + 1]) {
                Some(n) if n >= 0 => n as u64,
                _ => return Err(fail("COUNT can't be negative")),
            });
        } else if is(a[j], "MAXLEN") && more {
            maxlen = match parse_int(a[j + 1]) {
                Some(n) if n >= 0 => n as u64,
                _ => return Err(fail("MAXLEN can't be negative")),
            };
        } else {
            return Err(syntax_error());
        }
        j += 2;
    }
    let (f, c) = list(ctx, a[1])?;
    let Some(c) = c else {
        return Ok(if count.is_some() {
            Reply::Array(Vec::new())
        } else {
            Reply::Null
        });
    };
    let from_tail = rank < 0;
    let rank = rank.unsigned_abs();
    let mut found = Vec::new();
    let mut matches = 0u64;
    let mut seen = 0u64;
    let last = c.head.wrapping_add(c.size - 1);
    ctx.tx
        .scan_items(f.slot, &c, c.head, last, from_tail, &mut |p, v| {
            if maxlen > 0 && seen >= maxlen {
                return ControlFlow::Break(());
            }
            seen += 1;
            if v == a[2] {
                matches += 1;
                if matches >= rank {
                    found.push(p.wrapping_sub(c.head) as i64);
                    let enough = match count {
                        None => true,
                        Some(0) => false,
                        Some(n) => found.len() as u64 >= n,
                    };
                    if enough {
                        return ControlFlow::Break(());
                    }
                }
            }
            ControlFlow::Continue(())
        })?;
    Ok(match count {
        Some(_) => Reply::Array(found.into_iter().map(Reply::Int).collect()),
        None => found.first().map_or(Reply::Null, |&i| Reply::Int(i)),
    })
}

pub fn end_arg(b: &[u8]) -> Result<ListEnd, Fail> {
    if is(b, "LEFT") {
        Ok(ListEnd::Left)
    } else if is(b, "RIGHT") {
        Ok(ListEnd::Right)
    } else {
        Err(syntax_error())
    }
}

/// Moves one item from `from` of `src` to `to` of `dst`; `None` when
/// `src` is empty.
pub fn move_item(
    ctx: &mut Ctx<'_, '_>,
    src: &[u8],
    dst: &[u8],
    from: ListEnd,
    to: ListEnd,
) -> Result<Option<Vec<u8>>, Fail> {
    let mut sf = ctx.tx.lookup(ctx.db(), src)?;
    if sf.typed(Kind::List)?.is_none() {
        return Ok(None);
    }
    // The destination's type is checked before anything moves.
    list(ctx, dst)?;
    let Some(item) = pop(ctx, &mut sf, from, 1)?.into_iter().next() else {
        return Ok(None);
    };
    push(ctx, dst, to, &[item.as_slice()], false)?;
    Ok(Some(item))
}

pub fn rpoplpush(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    Ok(Reply::opt(move_item(
        ctx,
        a[1],
        a[2],
        ListEnd::Right,
        ListEnd::Left,
    )?))
}

pub fn lmove(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let (from, to) = (end_arg(a[3])?, end_arg(a[4])?);
    Ok(Reply::opt(move_item(ctx, a[1], a[2], from, to)?))
}

/// Parses `numkeys key... LEFT|RIGHT [COUNT n]` from `a[at..]`.
pub fn mpop_args<'a>(a: &'a Args<'a>, at: usize) -> Result<(&'a [&'a [u8]], ListEnd, u64), Fail> {
    let keys = numkeys(a, at).map_err(|e| match e {
        Fail::Reply(r)
            if r == Reply::err("Number of keys can't be greater than number of args") =>
        {
            syntax_error()
        }
        other => other,
    })?;
    let where_at = at + keys.len() + 1;
    let Some(w) = a.get(where_at) else {
        return Err(syntax_error());
    };
    let end = end_arg(w)?;
    Ok((keys, end, mpop_count(a, where_at + 1)?))
}

/// The optional `COUNT n` closing `LMPOP`/`ZMPOP` and their blocking
/// forms from position `from`: 1 without it.
pub fn mpop_count(a: &Args, from: usize) -> Result<u64, Fail> {
    let mut count = None;
    let mut j = from;
    while j < a.len() {
        if count.is_none() && is(a[j], "COUNT") && j + 1 < a.len() {
            count = Some(match parse_int(a[j + 1]) {
                Some(c) if c > 0 => c as u64,
                _ => return Err(fail("count should be greater than 0")),
            });
            j += 2;
        } else {
            return Err(syntax_error());
        }
    }
    Ok(count.unwrap_or(1))
}

/// Pops from the first non-empty list of `keys`: `None` if all are empty
/// (`serving`: see [`Ctx::first_of_kind`]).
pub fn mpop(
    ctx: &mut Ctx<'_, '_>,
    keys: &[&[u8]],
    end: ListEnd,
    count: u64,
    serving: bool,
) -> Result<Option<Reply>, Fail> {
    let Some((k, mut f)) = ctx.first_of_kind(keys, Kind::List, serving)? else {
        return Ok(None);
    };
    let items = pop(ctx, &mut f, end, count)?;
    Ok(Some(Reply::Array(vec![
        Reply::Bulk(k),
        Reply::bulks(items),
    ])))
}

pub fn lmpop(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let (keys, end, count) = mpop_args(a, 1)?;
    Ok(mpop(ctx, keys, end, count, false)?.unwrap_or(Reply::NullArray))
}
