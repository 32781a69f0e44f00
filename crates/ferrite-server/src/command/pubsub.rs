//! Pub/sub commands. Subscriptions are the connection's (the registry in
//! `pubsub.rs` delivers to its mailbox); confirmations are out-of-band
//! pushes, one per channel, as Redis sends them.

use super::{fail, CmdResult, Ctx};
use crate::reply::Reply;
use crate::request::Args;

fn confirm(kind: &str, name: Option<&[u8]>, count: usize) -> Reply {
    Reply::Push(vec![
        Reply::bulk(kind),
        name.map_or(Reply::Null, Reply::bulk),
        Reply::Int(count as i64),
    ])
}

pub fn subscribe(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let mut out = Vec::with_capacity(a.len() - 1);
    for ch in &a[1..] {
        ctx.shared
            .pubsub
            .subscribe(ctx.session.id, &ctx.session.mailbox, ch);
        ctx.session.channels.insert(ch.to_vec());
        out.push(confirm("subscribe", Some(ch), ctx.session.subscriptions()));
    }
    ctx.shared.clients.update(ctx.session);
    Ok(Reply::Several(out))
}

pub fn psubscribe(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let mut out = Vec::with_capacity(a.len() - 1);
    for p in &a[1..] {
        ctx.shared
            .pubsub
            .psubscribe(ctx.session.id, &ctx.session.mailbox, p);
        ctx.session.patterns.insert(p.to_vec());
        out.push(confirm("psubscribe", Some(p), ctx.session.subscriptions()));
    }
    ctx.shared.clients.update(ctx.session);
    Ok(Reply::Several(out))
}

pub fn unsubscribe(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let names: Vec<Vec<u8>> = if a.len() > 1 {
        a[1..].iter().map(|c| c.to_vec()).collect()
    } else {
        ctx.session.channels.iter().cloned().collect()
    };
    if names.is_empty() {
        return Ok(confirm("unsubscribe", None, ctx.session.subscriptions()));
    }
    let mut out = Vec::with_capacity(names.len());
    for ch in names {
        ctx.shared.pubsub.unsubscribe(ctx.session.id, &ch);
        ctx.session.channels.remove(&ch);
        out.push(confirm(
            "unsubscribe",
            Some(&ch),
            ctx.session.subscriptions(),
        ));
    }
    ctx.shared.clients.update(ctx.session);
    Ok(Reply::Several(out))
}

pub fn punsubscribe(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let names: Vec<Vec<u8>> = if a.len() > 1 {
        a[1..].iter().map(|c| c.to_vec()).collect()
    } else {
        ctx.session.patterns.iter().cloned().collect()
    };
    if names.is_empty() {
        return Ok(confirm("punsubscribe", None, ctx.session.subscriptions()));
    }
    let mut out = Vec::with_capacity(names.len());
    for p in names {
        ctx.shared.pubsub.punsubscribe(ctx.session.id, &p);
        ctx.session.patterns.remove(&p);
        out.push(confirm(
            "punsubscribe",
            Some(&p),
            ctx.session.subscriptions(),
        ));
    }
    ctx.shared.clients.update(ctx.session);
    Ok(Reply::Several(out))
}

pub fn publish(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    Ok(Reply::Int(ctx.shared.pubsub.publish(a[1], a[2])))
}

/// `PUBSUB CHANNELS [pattern] | NUMSUB [channel ...] | NUMPAT | HELP`.
pub fn pubsub(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let sub = a[1].to_ascii_uppercase();
    let ps = &ctx.shared.pubsub;
    match (sub.as_slice(), a.len()) {
        (b"CHANNELS", 2 | 3) => Ok(Reply::bulks(ps.channels(a.get(2).copied()))),
        (b"NUMSUB", _) => Ok(Reply::Array(
            a[2..]
                .iter()
                .flat_map(|ch| [Reply::Bulk(ch.to_vec()), Reply::Int(ps.numsub(ch) as i64)])
                .collect(),
        )),
        (b"NUMPAT", 2) => Ok(Reply::Int(ps.numpat() as i64)),
        // Sharded channels (cluster mode) are never subscribed here.
        (b"SHARDCHANNELS", 2 | 3) => Ok(Reply::Array(Vec::new())),
        (b"SHARDNUMSUB", _) => Ok(Reply::Array(
            a[2..]
                .iter()
                .flat_map(|ch| [Reply::Bulk(ch.to_vec()), Reply::Int(0)])
                .collect(),
        )),
        (b"HELP", 2) => Ok(Reply::Array(
            [
                "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "CHANNELS [<pattern>]",
                "NUMPAT",
                "NUMSUB [<channel> ...]",
                "HELP",
            ]
            .iter()
            .map(|s| Reply::Status((*s).into()))
            .collect(),
        )),
        _ => Err(fail(format!(
            "unknown subcommand or wrong number of arguments for '{}'. Try PUBSUB HELP.",
            String::from_utf8_lossy(a[1])
        ))),
    }
}
