//! Replication's commands: `REPLICAOF` (`SLAVEOF`), `ROLE`, `WAIT`, and
//! what a replica sends its master (`REPLCONF`, `PSYNC`; `SYNC`, which
//! asks for Redis's RDB stream, is refused).

use std::time::{Duration, Instant};

use super::args::{int, is, parse_int};
use super::{fail, CmdResult, Ctx};
use crate::replication::{self, Handoff, Sync};
use crate::reply::Reply;
use crate::request::Args;
use crate::session::Block;

/// `REPLICAOF host port | NO ONE`.
pub fn replicaof(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let sh = ctx.shared;
    if is(a[1], "no") && is(a[2], "one") {
        if replication::follower::unfollow(sh)? {
            log::info!("no longer a replica: taking writes as a master");
        }
        return Ok(Reply::ok());
    }
    let port = parse_int(a[2])
        .filter(|p| (1..=65535).contains(p))
        .ok_or_else(|| fail("Invalid master port"))?;
    let host = std::str::from_utf8(a[1]).map_err(|_| fail("Invalid master host"))?;
    if replication::follower::follow(sh, host, port as u16)? {
        log::info!("replicating {host}:{port}");
        Ok(Reply::ok())
    } else {
        Ok(Reply::Status(
            "OK Already connected to specified master".into(),
        ))
    }
}

/// `ROLE`.
pub fn role(ctx: &mut Ctx<'_, '_>, _: &Args) -> CmdResult {
    Ok(ctx.shared.repl.role())
}

/// `REPLCONF option value ...`: what a replica says of itself before
/// `PSYNC`.
pub fn replconf(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    if a.len().is_multiple_of(2) {
        return Err(super::syntax_error());
    }
    for pair in a[1..].chunks(2) {
        let (opt, val) = (pair[0], pair[1]);
        if is(opt, "listening-port") {
            ctx.session.repl_port = parse_int(val)
                .filter(|p| (0..=65535).contains(p))
                .ok_or_else(|| fail("Invalid listening port"))?
                as u16;
        } else if is(opt, "capa") {
            ctx.session.repl_capa |= is(val, "ferrite");
        } else if is(opt, "ack") || is(opt, "getack") {
            // Acknowledgements travel on the replica's link, not here.
            return Ok(Reply::Nothing);
        } else if !(is(opt, "ip-address") || is(opt, "rdb-only") || is(opt, "rdb-filter-only")) {
            return Err(fail(format!(
                "Unrecognized REPLCONF option: {}",
                String::from_utf8_lossy(opt)
            )));
        }
    }
    Ok(Reply::ok())
}

/// `PSYNC replid offset`: attaches the connection as a replica. It runs
/// inside a read transaction, so no commit lands between the answer and
/// the copy taken for a full sync.
pub fn psync(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    if !ctx.session.repl_capa {
        return Err(fail(
            "this server streams its changes only to ferrite replicas \
             (REPLCONF capa ferrite); a Redis replica cannot follow it",
        ));
    }
    if ctx.shared.ks.is_loading() {
        return Err(fail("the replica is loading its own copy; try again"));
    }
    let offset = int(a[2])?;
    let replid = String::from_utf8_lossy(a[1]).into_owned();
    let ip = ctx
        .session
        .addr
        .rsplit_once(':')
        .map_or(ctx.session.addr.clone(), |(ip, _)| ip.to_string());
    let (sync, attached) =
        ctx.shared
            .repl
            .attach(ctx.session.id, ip, ctx.session.repl_port, &replid, offset);
    let (reply, copy) = match sync {
        Sync::Continue(id) => (format!("CONTINUE {id}"), None),
        Sync::Full(id, off) => match ctx.shared.ks.store().snapshot() {
            Ok(s) => (format!("FULLRESYNC {id} {off}"), Some(s)),
            Err(e) => {
                ctx.shared.repl.detach(&attached);
                return Err(fail(format!("cannot take a copy of the store: {e}")));
            }
        },
    };
    ctx.shared
        .repl
        .leave_handoff(ctx.session.id, Handoff { attached, copy });
    ctx.session.handoff = true;
    Ok(Reply::Status(reply))
}

/// `SYNC`: Redis's RDB stream, which this server does not produce.
pub fn sync(_: &mut Ctx<'_, '_>, _: &Args) -> CmdResult {
    Err(fail(
        "this server streams its changes only to ferrite replicas (PSYNC after REPLCONF capa ferrite)",
    ))
}

/// `WAIT numreplicas timeout`: blocks until that many replicas
/// acknowledged every write made so far, or the timeout (ms, 0 =
/// forever) passes; answers how many did.
pub fn wait(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let ok = |b: &[u8]| parse_int(b).filter(|n| *n >= 0);
    let (Some(n), Some(ms)) = (ok(a[1]), ok(a[2])) else {
        return Err(super::args::not_an_integer());
    };
    let repl = &ctx.shared.repl;
    if repl.is_replica() {
        return Err(fail("WAIT cannot be used with replica instances."));
    }
    let target = repl.offset();
    let have = repl.acked(target);
    if have >= n as usize || ctx.in_exec || ctx.session.scripted {
        return Ok(Reply::Int(have as i64));
    }
    repl.request_acks();
    repl.wait(
        ctx.session.id,
        target,
        n as usize,
        ctx.session.mailbox.clone(),
    );
    ctx.session.blocked = Some(Block {
        deadline: (ms > 0).then(|| Instant::now() + Duration::from_millis(ms as u64)),
        timeout_reply: Reply::Nothing,
        wait: true,
    });
    Ok(Reply::Nothing)
}
