//! Set commands. A set is a metadata record (version, size) and one
//! empty record per member, in member order: membership is one point
//! read, `SMEMBERS` one scan. Intersections and differences walk one set
//! and probe the others member by member.

use std::collections::BTreeSet;

use super::args::{int, is, numkeys, positive};
use super::hashes::{draws, no_random_members, random_args, scan_fields};
use super::{fail, syntax_error, CmdResult, Ctx, Fail};
use crate::model::{Coll, Found, Kind, Meta};
use crate::reply::Reply;
use crate::request::Args;

fn set(ctx: &Ctx<'_, '_>, key: &[u8]) -> Result<(Found, Option<Coll>), Fail> {
    let f = ctx.tx.lookup(ctx.db(), key)?;
    let c = f.coll(Kind::Set)?;
    Ok((f, c))
}

fn members(ctx: &Ctx<'_, '_>, f: &Found, c: &Coll) -> Result<Vec<Vec<u8>>, Fail> {
    Ok(ctx
        .tx
        .all_fields(f.slot, c)?
        .into_iter()
        .map(|(m, _)| m)
        .collect())
}

/// Adds `new` members to the set at `key`; answers how many were new.
fn add(ctx: &mut Ctx<'_, '_>, key: &[u8], new: &[&[u8]]) -> Result<i64, Fail> {
    let mut f = ctx.tx.lookup(ctx.db(), key)?;
    let mut m = match f.typed(Kind::Set)? {
        Some(m) => m.clone(),
        None => ctx.tx.new_coll(Kind::Set)?,
    };
    let mut added = 0;
    if let Some(c) = m.coll_mut() {
        for member in new {
            if ctx.tx.field(f.slot, c, member)?.is_none() {
                ctx.tx.put_field(f.slot, c, member, Vec::new())?;
                c.size += 1;
                added += 1;
            }
        }
    }
    if added > 0 {
        ctx.tx.set(&mut f, Some(m))?;
        ctx.tx.notify('s', "sadd", f.db, key);
    }
    Ok(added)
}

pub fn sadd(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    Ok(Reply::Int(add(ctx, a[1], &a[2..])?))
}

/// Removes members from the set `f`; answers how many were members.
fn remove(
    ctx: &mut Ctx<'_, '_>,
    f: &mut Found,
    gone: &[&[u8]],
    event: &'static str,
) -> Result<i64, Fail> {
    let Some(mut m) = f.typed(Kind::Set)?.cloned() else {
        return Ok(0);
    };
    let mut n = 0;
    if let Some(c) = m.coll_mut() {
        for member in gone {
            if ctx.tx.field(f.slot, c, member)?.is_some() {
                ctx.tx.delete_field(f.slot, c, member)?;
                c.size -= 1;
                n += 1;
            }
        }
    }
    if n > 0 {
        finish_removal(ctx, f, m, event)?;
    }
    Ok(n)
}

/// Writes a set's header after removals, with their events.
fn finish_removal(
    ctx: &mut Ctx<'_, '_>,
    f: &mut Found,
    m: Meta,
    event: &'static str,
) -> Result<(), Fail> {
    let db = f.db;
    let key = f.key.clone();
    ctx.tx.set(f, Some(m))?;
    ctx.tx.notify('s', event, db, &key);
    if !f.exists() {
        ctx.tx.notify('g', "del", db, &key);
    }
    Ok(())
}

pub fn srem(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let mut f = ctx.tx.lookup(ctx.db(), a[1])?;
    Ok(Reply::Int(remove(ctx, &mut f, &a[2..], "srem")?))
}

pub fn smembers(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let (f, c) = set(ctx, a[1])?;
    let all = match c {
        Some(c) => members(ctx, &f, &c)?,
        None => Vec::new(),
    };
    Ok(Reply::Set(all.into_iter().map(Reply::Bulk).collect()))
}

fn is_member(ctx: &Ctx<'_, '_>, f: &Found, c: Option<&Coll>, m: &[u8]) -> Result<bool, Fail> {
    match c {
        Some(c) => Ok(ctx.tx.field(f.slot, c, m)?.is_some()),
        None => Ok(false),
    }
}

pub fn sismember(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let (f, c) = set(ctx, a[1])?;
    Ok(Reply::Int(is_member(ctx, &f, c.as_ref(), a[2])? as i64))
}

pub fn smismember(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let (f, c) = set(ctx, a[1])?;
    let mut out = Vec::with_capacity(a.len() - 2);
    for m in &a[2..] {
        out.push(Reply::Int(is_member(ctx, &f, c.as_ref(), m)? as i64));
    }
    Ok(Reply::Array(out))
}

pub fn scard(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let (_, c) = set(ctx, a[1])?;
    Ok(Reply::Int(c.map_or(0, |c| c.size as i64)))
}

/// `SPOP key [count]`.
pub fn spop(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    if a.len() > 3 {
        return Err(syntax_error());
    }
    let count = a.get(2).map(|c| positive_or_zero(c)).transpose()?;
    let mut f = ctx.tx.lookup(ctx.db(), a[1])?;
    let Some(c) = f.coll(Kind::Set)? else {
        return Ok(if count.is_some() {
            Reply::Set(Vec::new())
        } else {
            Reply::Null
        });
    };
    if count == Some(0) {
        return Ok(Reply::Set(Vec::new()));
    }
    let n = count.unwrap_or(1);
    let mut rng = rand::thread_rng();
    let picks: Vec<Vec<u8>> = ctx
        .tx
        .pop_members(f.slot, &c, n, &mut rng)?
        .into_iter()
        .map(|(m, _)| m)
        .collect();
    remove(ctx, &mut f, &crate::request::view(&picks), "spop")?;
    Ok(match count {
        None => Reply::opt(picks.into_iter().next()),
        Some(_) => Reply::Set(picks.into_iter().map(Reply::Bulk).collect()),
    })
}

fn positive_or_zero(b: &[u8]) -> Result<u64, Fail> {
    if b == b"0" {
        return Ok(0);
    }
    positive(b)
}

/// `SRANDMEMBER key [count]`.
pub fn srandmember(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let (count, _) = random_args(a, None)?;
    let (f, c) = set(ctx, a[1])?;
    let Some(c) = c else {
        return Ok(no_random_members(count));
    };
    let mut rng = rand::thread_rng();
    let (n, repeat) = draws(count);
    let picks = ctx.tx.random_fields(f.slot, &c, n, repeat, &mut rng)?;
    let mut picks = picks.into_iter().map(|(m, _)| m);
    Ok(match count {
        None => Reply::opt(picks.next()),
        Some(_) => Reply::bulks(picks),
    })
}

pub fn smove(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    // As Redis: a missing source answers 0 before any type is checked.
    if !ctx.tx.lookup(ctx.db(), a[1])?.exists() {
        return Ok(Reply::Int(0));
    }
    let (mut src, sc) = set(ctx, a[1])?;
    let (_, _) = set(ctx, a[2])?;
    let member = &a[3];
    if !is_member(ctx, &src, sc.as_ref(), member)? {
        return Ok(Reply::Int(0));
    }
    if a[1] == a[2] {
        return Ok(Reply::Int(1));
    }
    remove(ctx, &mut src, std::slice::from_ref(member), "srem")?;
    add(ctx, a[2], std::slice::from_ref(member))?;
    Ok(Reply::Int(1))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Union,
    Inter,
    Diff,
}

/// The members of `op` over the sets at `keys`, in member order; stops
/// an intersection at `limit` members (0: no limit).
fn combine(ctx: &Ctx<'_, '_>, keys: &[&[u8]], op: Op, limit: usize) -> Result<Vec<Vec<u8>>, Fail> {
    let mut sets = Vec::with_capacity(keys.len());
    for k in keys {
        sets.push(set(ctx, k)?);
    }
    match op {
        Op::Union => {
            let mut out = BTreeSet::new();
            for (f, c) in &sets {
                if let Some(c) = c {
                    out.extend(members(ctx, f, c)?);
                }
            }
            Ok(out.into_iter().collect())
        }
        Op::Inter => {
            if sets.iter().any(|(_, c)| c.is_none()) {
                return Ok(Vec::new());
            }
            // Walk the smallest, probe the rest.
            sets.sort_by_key(|(_, c)| c.map_or(0, |c| c.size));
            let (f0, c0) = &sets[0];
            let Some(c0) = c0 else {
                return Ok(Vec::new());
            };
            let mut out = Vec::new();
            'next: for m in members(ctx, f0, c0)? {
                for (f, c) in &sets[1..] {
                    if !is_member(ctx, f, c.as_ref(), &m)? {
                        continue 'next;
                    }
                }
                out.push(m);
                if limit > 0 && out.len() >= limit {
                    break;
                }
            }
            Ok(out)
        }
        Op::Diff => {
            let (f0, c0) = &sets[0];
            let Some(c0) = c0 else {
                return Ok(Vec::new());
            };
            let mut out = Vec::new();
            'each: for m in members(ctx, f0, c0)? {
                for (f, c) in &sets[1..] {
                    if is_member(ctx, f, c.as_ref(), &m)? {
                        continue 'each;
                    }
                }
                out.push(m);
            }
            Ok(out)
        }
    }
}

/// Replaces `dest` with a set of `members` (deleting it when empty);
/// answers the size.
pub fn store_set(
    ctx: &mut Ctx<'_, '_>,
    dest: &[u8],
    members: Vec<Vec<u8>>,
    event: &'static str,
) -> CmdResult {
    let mut f = ctx.tx.lookup(ctx.db(), dest)?;
    let n = members.len() as i64;
    if members.is_empty() {
        if ctx.tx.remove(&mut f)? {
            ctx.tx.notify('g', "del", f.db, dest);
        }
        return Ok(Reply::Int(0));
    }
    let mut m = ctx.tx.new_coll(Kind::Set)?;
    if let Some(c) = m.coll_mut() {
        for member in &members {
            ctx.tx.put_field(f.slot, c, member, Vec::new())?;
        }
        c.size = n as u64;
    }
    ctx.tx.set(&mut f, Some(m))?;
    ctx.tx.notify('s', event, f.db, dest);
    Ok(Reply::Int(n))
}

fn to_set(v: Vec<Vec<u8>>) -> Reply {
    Reply::Set(v.into_iter().map(Reply::Bulk).collect())
}

pub fn sunion(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    Ok(to_set(combine(ctx, &a[1..], Op::Union, 0)?))
}

pub fn sinter(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    Ok(to_set(combine(ctx, &a[1..], Op::Inter, 0)?))
}

pub fn sdiff(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    Ok(to_set(combine(ctx, &a[1..], Op::Diff, 0)?))
}

pub fn sunionstore(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let r = combine(ctx, &a[2..], Op::Union, 0)?;
    store_set(ctx, a[1], r, "sunionstore")
}

pub fn sinterstore(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let r = combine(ctx, &a[2..], Op::Inter, 0)?;
    store_set(ctx, a[1], r, "sinterstore")
}

pub fn sdiffstore(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let r = combine(ctx, &a[2..], Op::Diff, 0)?;
    store_set(ctx, a[1], r, "sdiffstore")
}

/// `SINTERCARD numkeys key [key ...] [LIMIT limit]`.
pub fn sintercard(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let keys = numkeys(a, 1)?;
    let mut limit = 0usize;
    let mut j = 2 + keys.len();
    while j < a.len() {
        if is(a[j], "LIMIT") && j + 1 < a.len() {
            limit = match int(a[j + 1]) {
                Ok(n) if n >= 0 => n as usize,
                _ => return Err(fail("LIMIT can't be negative")),
            };
            j += 2;
        } else {
            return Err(syntax_error());
        }
    }
    Ok(Reply::Int(
        combine(ctx, keys, Op::Inter, limit)?.len() as i64
    ))
}

/// `SSCAN key cursor [MATCH p] [COUNT n]`.
pub fn sscan(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    scan_fields(ctx, a, Kind::Set, &[], &mut |_, m, _, items| {
        items.push(Reply::Bulk(m.to_vec()));
    })
}
