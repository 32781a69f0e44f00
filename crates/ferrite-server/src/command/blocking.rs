//! Blocking pops: `BLPOP BRPOP BRPOPLPUSH BLMOVE BLMPOP BZPOPMIN BZPOPMAX
//! BZMPOP`. Each first tries its non-blocking form; if every key is
//! empty it registers the client as a waiter (while its transaction
//! still holds the keyspace lock, so no push can slip in between) and
//! the connection waits on its mailbox. A later command that gives one
//! of the keys elements serves the waiters through [`serve`], inside its
//! own transaction. Inside `MULTI` nothing blocks: an empty key answers
//! as a timeout would.

use std::time::{Duration, Instant};

use super::args::timeout_ms;
use super::lists::{self, move_item};
use super::zsets::{self};
use super::{CmdResult, Ctx, Fail};
use crate::blocked::Waiter;
use crate::model::{Kind, ListEnd, ModelError};
use crate::reply::Reply;
use crate::request::Args;
use crate::session::Block;

/// Makes the session wait on `keys`; `in_multi` is what it answers
/// instead inside `MULTI`.
fn block(
    ctx: &mut Ctx<'_, '_>,
    a: &Args,
    keys: &[&[u8]],
    timeout: u64,
    in_multi: Reply,
) -> CmdResult {
    if ctx.in_exec {
        return Ok(in_multi);
    }
    let deadline = (timeout > 0).then(|| Instant::now() + Duration::from_millis(timeout));
    ctx.shared.block(Waiter {
        client: ctx.session.id,
        db: ctx.db(),
        args: crate::request::to_owned(a),
        keys: keys.iter().map(|k| k.to_vec()).collect(),
        mailbox: ctx.session.mailbox.clone(),
    });
    ctx.session.blocked = Some(Block {
        deadline,
        timeout_reply: Reply::NullArray,
        wait: false,
    });
    Ok(Reply::Nothing)
}

/// `BLPOP`/`BRPOP` without blocking: `[key, item]` from the first
/// non-empty list.
fn try_pop(
    ctx: &mut Ctx<'_, '_>,
    keys: &[&[u8]],
    end: ListEnd,
    serving: bool,
) -> Result<Option<Reply>, Fail> {
    let Some((k, mut f)) = ctx.first_of_kind(keys, Kind::List, serving)? else {
        return Ok(None);
    };
    Ok(lists::pop(ctx, &mut f, end, 1)?
        .into_iter()
        .next()
        .map(|v| Reply::Array(vec![Reply::Bulk(k), Reply::Bulk(v)])))
}

fn try_zpop(
    ctx: &mut Ctx<'_, '_>,
    keys: &[&[u8]],
    max: bool,
    serving: bool,
) -> Result<Option<Reply>, Fail> {
    let Some((k, mut f)) = ctx.first_of_kind(keys, Kind::ZSet, serving)? else {
        return Ok(None);
    };
    Ok(zsets::pop(ctx, &mut f, max, 1)?
        .into_iter()
        .next()
        .map(|(m, s)| Reply::Array(vec![Reply::Bulk(k), Reply::Bulk(m), Reply::Double(s)])))
}

fn try_move(
    ctx: &mut Ctx<'_, '_>,
    a: &Args,
    from: ListEnd,
    to: ListEnd,
    serving: bool,
) -> Result<Option<Reply>, Fail> {
    if ctx.first_of_kind(&a[1..2], Kind::List, serving)?.is_none() {
        return Ok(None);
    }
    Ok(move_item(ctx, a[1], a[2], from, to)?.map(Reply::Bulk))
}

/// What the blocking command `a` answers now without blocking: `None`
/// if it would wait. `serving`: a waiter is being served (its arguments
/// were checked when it blocked).
pub fn answer(ctx: &mut Ctx<'_, '_>, a: &Args, serving: bool) -> Result<Option<Reply>, Fail> {
    let name = a[0].to_ascii_lowercase();
    let n = a.len();
    match name.as_slice() {
        b"blpop" => try_pop(ctx, &a[1..n - 1], ListEnd::Left, serving),
        b"brpop" => try_pop(ctx, &a[1..n - 1], ListEnd::Right, serving),
        b"bzpopmin" => try_zpop(ctx, &a[1..n - 1], false, serving),
        b"bzpopmax" => try_zpop(ctx, &a[1..n - 1], true, serving),
        b"brpoplpush" => try_move(ctx, a, ListEnd::Right, ListEnd::Left, serving),
        b"blmove" => {
            let (from, to) = (lists::end_arg(a[3])?, lists::end_arg(a[4])?);
            try_move(ctx, a, from, to, serving)
        }
        b"blmpop" => {
            let (keys, end, count) = lists::mpop_args(a, 2)?;
            lists::mpop(ctx, keys, end, count, serving)
        }
        b"bzmpop" => {
            let (keys, max, count) = zsets::mpop_args(a, 2)?;
            zsets::mpop(ctx, keys, max, count, serving)
        }
        _ => Err(ModelError::Corrupt(format!(
            "a blocked command of unknown kind '{}'",
            String::from_utf8_lossy(&name)
        ))
        .into()),
    }
}

/// Serves a waiter whose key gained elements: its answer, or `None` if
/// it still waits.
pub fn serve(ctx: &mut Ctx<'_, '_>, a: &Args) -> Result<Option<Reply>, Fail> {
    answer(ctx, a, true)
}

/// A blocking command: tries, then blocks on `keys`.
fn run(
    ctx: &mut Ctx<'_, '_>,
    a: &Args,
    keys: &[&[u8]],
    timeout: u64,
    in_multi: Reply,
) -> CmdResult {
    match answer(ctx, a, false)? {
        Some(r) => Ok(r),
        None => block(ctx, a, keys, timeout, in_multi),
    }
}

pub fn blpop(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let t = timeout_ms(a[a.len() - 1])?;
    run(ctx, a, &a[1..a.len() - 1], t, Reply::NullArray)
}

pub fn brpop(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    blpop(ctx, a)
}

pub fn bzpopmin(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    blpop(ctx, a)
}

pub fn bzpopmax(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    blpop(ctx, a)
}

pub fn brpoplpush(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let t = timeout_ms(a[3])?;
    run(ctx, a, &a[1..2], t, Reply::Null)
}

pub fn blmove(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    lists::end_arg(a[3])?;
    lists::end_arg(a[4])?;
    let t = timeout_ms(a[5])?;
    run(ctx, a, &a[1..2], t, Reply::Null)
}

pub fn blmpop(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let t = timeout_ms(a[1])?;
    let (keys, _, _) = lists::mpop_args(a, 2)?;
    run(ctx, a, keys, t, Reply::NullArray)
}

pub fn bzmpop(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let t = timeout_ms(a[1])?;
    let (keys, _, _) = zsets::mpop_args(a, 2)?;
    run(ctx, a, keys, t, Reply::NullArray)
}

/// After `SWAPDB`: the keys waited on in `dbs` that now hold a list or a
/// sorted set may serve their waiters.
pub fn wake_swapped(ctx: &mut Ctx<'_, '_>, dbs: &[u8]) -> Result<(), Fail> {
    for &db in dbs {
        for k in ctx.shared.blocked.keys_in(db) {
            let f = ctx.tx.lookup(db, &k)?;
            if f.live()
                .is_some_and(|m| matches!(m.kind(), Kind::List | Kind::ZSet))
            {
                ctx.tx.mark_ready(db, &k);
            }
        }
    }
    Ok(())
}
