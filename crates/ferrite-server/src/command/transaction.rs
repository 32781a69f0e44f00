//! `MULTI`, `DISCARD`, `WATCH` and `UNWATCH`. Queued commands wait in the
//! session; `EXEC` runs them as one transaction (the executor's part,
//! `executor.rs`), aborting if a queued command was refused or, after
//! `WATCH`, a watched key changed or expired.

use super::{fail, CmdResult, Ctx};
use crate::reply::Reply;
use crate::request::Args;
use crate::session::Session;
use crate::shared::Shared;

pub fn multi(ctx: &mut Ctx<'_, '_>, _: &Args) -> CmdResult {
    begin(ctx.session)
}

/// `MULTI` on the session alone (it also runs while a script is busy).
pub fn begin(session: &mut Session) -> CmdResult {
    if session.in_transaction() {
        session.flag_transaction_error();
        return Err(fail("MULTI calls can not be nested"));
    }
    session.begin_transaction();
    Ok(Reply::ok())
}

pub fn discard(ctx: &mut Ctx<'_, '_>, _: &Args) -> CmdResult {
    drop_transaction(ctx.shared, ctx.session)
}

/// `DISCARD` on the session alone (it also runs while a script is busy).
pub fn drop_transaction(shared: &Shared, session: &mut Session) -> CmdResult {
    if session.take_transaction().is_none() {
        return Err(fail("DISCARD without MULTI"));
    }
    unwatch_all(shared, session);
    Ok(Reply::ok())
}

/// `EXEC` runs in the executor; the table's entry answers if it is ever
/// reached another way.
pub fn exec_placeholder(ctx: &mut Ctx<'_, '_>, _: &Args) -> CmdResult {
    if !ctx.session.in_transaction() {
        return Err(fail("EXEC without MULTI"));
    }
    Err(fail("EXEC inside a script or transaction is not allowed"))
}

pub fn watch(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    if ctx.session.in_transaction() {
        return Err(fail("WATCH inside MULTI is not allowed"));
    }
    let db = ctx.db();
    for k in &a[1..] {
        if ctx.session.watched.iter().any(|(d, w)| *d == db && w == k) {
            continue;
        }
        let stale = ctx.tx.lookup(db, k)?.stale();
        ctx.shared
            .ks
            .watches()
            .watch(ctx.session.id, &ctx.session.dirty, db, k.to_vec(), stale);
        ctx.session.watched.push((db, k.to_vec()));
    }
    Ok(Reply::ok())
}

pub fn unwatch(ctx: &mut Ctx<'_, '_>, _: &Args) -> CmdResult {
    unwatch_all(ctx.shared, ctx.session);
    Ok(Reply::ok())
}

/// Forgets every watched key of the session and its dirty flag.
pub fn unwatch_all(shared: &Shared, session: &mut Session) {
    if !session.watched.is_empty() {
        shared.ks.watches().unwatch(session.id, &session.watched);
        session.watched.clear();
    }
    session
        .dirty
        .store(false, std::sync::atomic::Ordering::Release);
}
