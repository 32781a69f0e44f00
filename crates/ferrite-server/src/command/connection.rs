//! Connection commands: the session's protocol, name, database and
//! authentication.

use super::Ctx;
use crate::keyspace::DATABASES;
use crate::reply::Reply;
use crate::request::Args;

pub fn ping(_: &mut Ctx<'_>, a: &Args) -> Reply {
    match a.len() {
        1 => Reply::Status("PONG".into()),
        2 => Reply::Bulk(a[1].clone()),
        _ => Reply::err("wrong number of arguments for 'ping' command"),
    }
}

pub fn echo(_: &mut Ctx<'_>, a: &Args) -> Reply {
    Reply::Bulk(a[1].clone())
}

pub fn select(ctx: &mut Ctx<'_>, a: &Args) -> Reply {
    match super::strings::parse_int(&a[1]) {
        None => Reply::err("value is not an integer or out of range"),
        Some(n) if !(0..DATABASES as i64).contains(&n) => Reply::err("DB index is out of range"),
        Some(n) => {
            ctx.session.db = n as u8;
            Reply::ok()
        }
    }
}

/// Checks a password against the server's (`AUTH [user] password`).
fn check_password(ctx: &mut Ctx<'_>, user: Option<&[u8]>, pass: &[u8]) -> Result<(), Reply> {
    let Some(want) = ctx.shared.config.requirepass.as_deref() else {
        return Err(Reply::err(
            "AUTH <password> called without any password configured for the default user. \
             Are you sure your configuration is correct?",
        ));
    };
    if user.is_none_or(|u| u == b"default") && pass == want.as_bytes() {
        ctx.session.authenticated = true;
        Ok(())
    } else {
        Err(Reply::Error(
            "WRONGPASS invalid username-password pair or user is disabled.".into(),
        ))
    }
}

pub fn auth(ctx: &mut Ctx<'_>, a: &Args) -> Reply {
    let r = match a.len() {
        2 => check_password(ctx, None, &a[1]),
        3 => check_password(ctx, Some(&a[1]), &a[2]),
        _ => Err(super::syntax_error()),
    };
    r.map_or_else(|e| e, |()| Reply::ok())
}

/// `HELLO [protover [AUTH user pass] [SETNAME name]]`: switches the
/// protocol and answers the server's description.
pub fn hello(ctx: &mut Ctx<'_>, a: &Args) -> Reply {
    let mut proto = ctx.session.proto;
    if a.len() > 1 {
        match super::strings::parse_int(&a[1]) {
            Some(v @ (2 | 3)) => proto = v as u8,
            Some(_) => {
                return Reply::Error("NOPROTO unsupported protocol version".into());
            }
            None => return Reply::err("Protocol version is not an integer or out of range"),
        }
    }
    let mut i = 2;
    let mut name = None;
    while i < a.len() {
        match a[i].to_ascii_uppercase().as_slice() {
            b"AUTH" if i + 2 < a.len() => {
                if let Err(e) = check_password(ctx, Some(&a[i + 1]), &a[i + 2]) {
                    return e;
                }
                i += 3;
            }
            b"SETNAME" if i + 1 < a.len() => {
                name = Some(a[i + 1].clone());
                i += 2;
            }
            _ => {
                return Reply::err(format!(
                    "Syntax error in HELLO option '{}'",
                    String::from_utf8_lossy(&a[i])
                ))
            }
        }
    }
    if !ctx.session.authenticated {
        return Reply::Error(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the \
             HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and \
             select the RESP protocol version at the same time"
                .into(),
        );
    }
    if let Some(n) = name {
        if let Err(e) = set_name(ctx, n) {
            return e;
        }
    }
    ctx.session.proto = proto;
    let s = |v: &str| Reply::bulk(v.as_bytes());
    Reply::Map(vec![
        (s("server"), s("ferrite")),
        (s("version"), s(crate::REDIS_VERSION)),
        (s("ferrite_version"), s(env!("CARGO_PKG_VERSION"))),
        (s("proto"), Reply::Int(proto as i64)),
        (s("id"), Reply::Int(ctx.session.id as i64)),
        (s("mode"), s("standalone")),
        (s("role"), s("master")),
        (s("modules"), Reply::Array(Vec::new())),
    ])
}

fn set_name(ctx: &mut Ctx<'_>, name: Vec<u8>) -> Result<(), Reply> {
    if name.iter().any(|&c| !(b'!'..=b'~').contains(&c)) {
        return Err(Reply::err(
            "Client names cannot contain spaces, newlines or special characters.",
        ));
    }
    ctx.session.name = (!name.is_empty()).then_some(name);
    ctx.shared.clients.update(ctx.session);
    Ok(())
}

pub fn client(ctx: &mut Ctx<'_>, a: &Args) -> Reply {
    let sub = a[1].to_ascii_uppercase();
    match (sub.as_slice(), a.len()) {
        (b"SETNAME", 3) => set_name(ctx, a[2].clone()).map_or_else(|e| e, |()| Reply::ok()),
        (b"GETNAME", 2) => Reply::opt(ctx.session.name.clone()),
        (b"ID", 2) => Reply::Int(ctx.session.id as i64),
        (b"INFO", 2) => Reply::Verbatim(format!("{}\n", ctx.shared.clients.describe(ctx.session))),
        (b"LIST", 2) => Reply::Verbatim(ctx.shared.clients.list()),
        // Client libraries announce themselves (redis-py does on connect).
        (b"SETINFO", 4) => {
            let attr = a[2].to_ascii_uppercase();
            if attr != b"LIB-NAME" && attr != b"LIB-VER" {
                return Reply::err(format!(
                    "Unrecognized option '{}'",
                    String::from_utf8_lossy(&a[2])
                ));
            }
            Reply::ok()
        }
        _ => Reply::err(format!(
            "unknown subcommand or wrong number of arguments for '{}'. Try CLIENT HELP.",
            String::from_utf8_lossy(&a[1])
        )),
    }
}

pub fn quit(ctx: &mut Ctx<'_>, _: &Args) -> Reply {
    ctx.session.close_after_reply = true;
    Reply::ok()
}

pub fn reset(ctx: &mut Ctx<'_>, _: &Args) -> Reply {
    ctx.session.reset();
    ctx.session.authenticated = ctx.shared.config.requirepass.is_none();
    ctx.shared.clients.update(ctx.session);
    Reply::Status("RESET".into())
}
