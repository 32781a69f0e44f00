//! Connection commands: the session's protocol, name, database,
//! authentication and reply mode, and `CLIENT`.

use super::args::{is, parse_int};
use super::{fail, syntax_error, CmdResult, Ctx, Fail};
use crate::model::DATABASES;
use crate::reply::Reply;
use crate::request::Args;
use crate::session::ReplyMode;

pub fn ping(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    if a.len() > 2 {
        return Err(fail("wrong number of arguments for 'ping' command"));
    }
    // A subscribed RESP2 connection gets its pong as a message.
    if ctx.session.subscriptions() > 0 && ctx.session.proto == 2 {
        return Ok(Reply::Array(vec![
            Reply::bulk("pong"),
            Reply::Bulk(a.get(1).map(|m| m.to_vec()).unwrap_or_default()),
        ]));
    }
    Ok(match a.get(1) {
        None => Reply::Status("PONG".into()),
        Some(m) => Reply::Bulk(m.to_vec()),
    })
}

pub fn echo(_: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    Ok(Reply::Bulk(a[1].to_vec()))
}

pub fn select(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    match parse_int(a[1]) {
        None => Err(super::args::not_an_integer()),
        Some(n) if !(0..DATABASES as i64).contains(&n) => Err(fail("DB index is out of range")),
        Some(n) => {
            ctx.session.db = n as u8;
            ctx.shared.clients.update(ctx.session);
            Ok(Reply::ok())
        }
    }
}

/// Checks a password against the server's (`AUTH [user] password`).
fn check_password(ctx: &mut Ctx<'_, '_>, user: Option<&[u8]>, pass: &[u8]) -> Result<(), Fail> {
    let Some(want) = ctx.shared.settings.requirepass() else {
        if user.is_none() {
            return Err(fail(
                "AUTH <password> called without any password configured for the default user. \
                 Are you sure your configuration is correct?",
            ));
        }
        if user == Some(b"default".as_slice()) {
            ctx.session.authenticated = true;
            return Ok(());
        }
        return Err(Fail::Reply(Reply::Error(
            "WRONGPASS invalid username-password pair or user is disabled.".into(),
        )));
    };
    if user.is_none_or(|u| u == b"default") && pass == want.as_bytes() {
        ctx.session.authenticated = true;
        Ok(())
    } else {
        Err(Fail::Reply(Reply::Error(
            "WRONGPASS invalid username-password pair or user is disabled.".into(),
        )))
    }
}

pub fn auth(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    match a.len() {
        2 => check_password(ctx, None, a[1])?,
        3 => check_password(ctx, Some(a[1]), a[2])?,
        _ => return Err(syntax_error()),
    }
    Ok(Reply::ok())
}

/// `HELLO [protover [AUTH user pass] [SETNAME name]]`: switches the
/// protocol and answers the server's description.
pub fn hello(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let mut proto = ctx.session.proto;
    if a.len() > 1 {
        match parse_int(a[1]) {
            Some(v @ (2 | 3)) => proto = v as u8,
            Some(_) => {
                return Err(Fail::Reply(Reply::Error(
                    "NOPROTO unsupported protocol version".into(),
                )))
            }
            None => return Err(fail("Protocol version is not an integer or out of range")),
        }
    }
    let mut i = 2;
    let mut name = None;
    while i < a.len() {
        if is(a[i], "AUTH") && i + 2 < a.len() {
            check_password(ctx, Some(a[i + 1]), a[i + 2])?;
            i += 3;
        } else if is(a[i], "SETNAME") && i + 1 < a.len() {
            name = Some(a[i + 1].to_vec());
            i += 2;
        } else {
            return Err(fail(format!(
                "Syntax error in HELLO option '{}'",
                String::from_utf8_lossy(a[i])
            )));
        }
    }
    if !ctx.session.authenticated {
        return Err(Fail::Reply(Reply::Error(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the \
             HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and \
             select the RESP protocol version at the same time"
                .into(),
        )));
    }
    if let Some(n) = name {
        set_name(ctx, n)?;
    }
    ctx.session.set_proto(proto);
    ctx.shared.clients.update(ctx.session);
    let s = |v: &str| Reply::bulk(v.as_bytes());
    Ok(Reply::Map(vec![
        (s("server"), s("ferrite")),
        (s("version"), s(crate::REDIS_VERSION)),
        (s("ferrite_version"), s(env!("CARGO_PKG_VERSION"))),
        (s("proto"), Reply::Int(proto as i64)),
        (s("id"), Reply::Int(ctx.session.id as i64)),
        (s("mode"), s("standalone")),
        (s("role"), s("master")),
        (s("modules"), Reply::Array(Vec::new())),
    ]))
}

fn set_name(ctx: &mut Ctx<'_, '_>, name: Vec<u8>) -> Result<(), Fail> {
    if name.iter().any(|&c| !(b'!'..=b'~').contains(&c)) {
        return Err(fail(
            "Client names cannot contain spaces, newlines or special characters.",
        ));
    }
    ctx.session.name = (!name.is_empty()).then_some(name);
    ctx.shared.clients.update(ctx.session);
    Ok(())
}

pub fn client(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let sub = a[1].to_ascii_uppercase();
    match (sub.as_slice(), a.len()) {
        (b"SETNAME", 3) => set_name(ctx, a[2].to_vec()).map(|()| Reply::ok()),
        (b"GETNAME", 2) => Ok(Reply::opt(ctx.session.name.clone())),
        (b"ID", 2) => Ok(Reply::Int(ctx.session.id as i64)),
        (b"INFO", 2) => Ok(Reply::Verbatim(format!(
            "{}\n",
            ctx.shared.clients.describe(ctx.session, super::name_of)
        ))),
        (b"LIST", _) => Ok(Reply::Verbatim(ctx.shared.clients.list(super::name_of))),
        // Client libraries announce themselves (redis-py does on connect).
        (b"SETINFO", 4) => {
            if !is(a[2], "LIB-NAME") && !is(a[2], "LIB-VER") {
                return Err(fail(format!(
                    "Unrecognized option '{}'",
                    String::from_utf8_lossy(a[2])
                )));
            }
            Ok(Reply::ok())
        }
        (b"REPLY", 3) => {
            let mode = if is(a[2], "ON") {
                ReplyMode::On
            } else if is(a[2], "OFF") {
                ReplyMode::Off
            } else if is(a[2], "SKIP") {
                ReplyMode::Skip
            } else {
                return Err(syntax_error());
            };
            ctx.session.reply_mode = mode;
            // Only ON is answered.
            Ok(if mode == ReplyMode::On {
                Reply::ok()
            } else {
                Reply::Nothing
            })
        }
        (b"UNBLOCK", 3 | 4) => {
            let id = parse_int(a[2]).ok_or_else(super::args::not_an_integer)?;
            let error = match a.get(3) {
                None => false,
                Some(m) if is(m, "TIMEOUT") => false,
                Some(m) if is(m, "ERROR") => true,
                Some(_) => return Err(fail("CLIENT UNBLOCK reason should be TIMEOUT or ERROR")),
            };
            Ok(Reply::Int(ctx.shared.unblock(id as u64, error) as i64))
        }
        (b"KILL", n) if n >= 3 => {
            let killed = if n == 3 {
                // The old form: CLIENT KILL addr:port.
                let k = ctx.shared.clients.kill_addr(&String::from_utf8_lossy(a[2]));
                if k == 0 {
                    return Err(fail("No such client"));
                }
                return Ok(Reply::ok());
            } else {
                let mut j = 2;
                let (mut id, mut addr, mut skipme) = (None, None, true);
                while j + 1 < n {
                    let v = String::from_utf8_lossy(a[j + 1]).to_string();
                    if is(a[j], "ID") {
                        id = Some(
                            v.parse::<u64>()
                                .map_err(|_| fail("client-id should be greater than 0"))?,
                        );
                    } else if is(a[j], "ADDR") {
                        addr = Some(v);
                    } else if is(a[j], "SKIPME") {
                        skipme = v.eq_ignore_ascii_case("yes");
                    } else {
                        return Err(syntax_error());
                    }
                    j += 2;
                }
                if j != n {
                    return Err(syntax_error());
                }
                let me = skipme.then_some(ctx.session.id);
                ctx.shared.clients.kill(id, addr.as_deref(), me)
            };
            Ok(Reply::Int(killed as i64))
        }
        (b"NO-EVICT" | b"NO-TOUCH", 3) => {
            if is(a[2], "ON") || is(a[2], "OFF") {
                Ok(Reply::ok())
            } else {
                Err(syntax_error())
            }
        }
        _ => Err(fail(format!(
            "unknown subcommand or wrong number of arguments for '{}'. Try CLIENT HELP.",
            String::from_utf8_lossy(a[1])
        ))),
    }
}

pub fn quit(ctx: &mut Ctx<'_, '_>, _: &Args) -> CmdResult {
    ctx.session.close_after_reply = true;
    Ok(Reply::ok())
}

pub fn reset(ctx: &mut Ctx<'_, '_>, _: &Args) -> CmdResult {
    super::transaction::unwatch_all(ctx.shared, ctx.session);
    ctx.session.take_transaction();
    for ch in std::mem::take(&mut ctx.session.channels) {
        ctx.shared.pubsub.unsubscribe(ctx.session.id, &ch);
    }
    for p in std::mem::take(&mut ctx.session.patterns) {
        ctx.shared.pubsub.punsubscribe(ctx.session.id, &p);
    }
    ctx.session.name = None;
    ctx.session.db = 0;
    ctx.session.set_proto(2);
    ctx.session.reply_mode = ReplyMode::On;
    ctx.session.authenticated = ctx.shared.settings.requirepass().is_none();
    ctx.shared.clients.update(ctx.session);
    Ok(Reply::Status("RESET".into()))
}
