//! `MULTI` / `EXEC` / `DISCARD`. Queued commands run at `EXEC` with the
//! keyspace to themselves (`Access::alone`): reads see the store under the
//! transaction's own earlier writes, nothing else writes meanwhile, and
//! all the writes reach the store as one atomic batch. A command refused
//! while queueing (unknown, wrong arity) aborts the transaction, as in
//! Redis; one that fails while running (`INCR` of a non-number) answers
//! its error in its slot and the others still apply.

use super::{execute_queued, Ctx};
use crate::reply::Reply;
use crate::request::Args;

pub fn multi(ctx: &mut Ctx<'_>, _: &Args) -> Reply {
    if ctx.session.in_transaction() {
        return Reply::err("MULTI calls can not be nested");
    }
    ctx.session.begin_transaction();
    Reply::ok()
}

pub fn discard(ctx: &mut Ctx<'_>, _: &Args) -> Reply {
    if ctx.session.take_transaction().is_none() {
        return Reply::err("DISCARD without MULTI");
    }
    Reply::ok()
}

pub fn exec(ctx: &mut Ctx<'_>, _: &Args) -> Reply {
    let Some((queued, aborted)) = ctx.session.take_transaction() else {
        return Reply::err("EXEC without MULTI");
    };
    if aborted {
        return Reply::Error("EXECABORT Transaction discarded because of previous errors.".into());
    }
    let Ctx {
        data,
        session,
        shared,
    } = ctx;
    let r = data.alone(&mut |tx| {
        let mut inner = Ctx {
            data: tx,
            session,
            shared,
        };
        Ok(Reply::Array(
            queued
                .iter()
                .map(|args| execute_queued(&mut inner, args))
                .collect(),
        ))
    });
    r.unwrap_or_else(|e| e)
}
