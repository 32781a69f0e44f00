//! The command table and dispatch: which commands exist, their arity
//! and kind, and how a command runs in and out of `MULTI`.
//!
//! | file | commands |
//! |---|---|
//! | `strings.rs` | GET SET SETNX GETSET GETDEL MGET MSET MSETNX STRLEN APPEND INCR… INCRBYFLOAT |
//! | `keys.rs` | DEL UNLINK EXISTS TYPE TTL PTTL SCAN KEYS DBSIZE FLUSHDB FLUSHALL |
//! | `connection.rs` | PING ECHO HELLO AUTH CLIENT SELECT QUIT RESET |
//! | `server.rs` | INFO COMMAND CONFIG WAIT SHUTDOWN |
//! | `transaction.rs` | MULTI EXEC DISCARD |

mod connection;
mod keys;
mod server;
mod strings;
mod transaction;

use crate::keyspace::{Access, Direct};
use crate::reply::Reply;
use crate::request::Args;
use crate::session::Session;
use crate::shared::Shared;

/// What a command may touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Reads the keyspace only.
    Read,
    /// Writes the keyspace.
    Write,
    /// Connection and server state, no keys.
    Admin,
}

/// Where a command runs: the keyspace it reads and writes (the store, or
/// a transaction's overlay), the connection's state and the server's.
pub struct Ctx<'a> {
    pub data: &'a mut dyn Access,
    pub session: &'a mut Session,
    pub shared: &'a Shared,
}

type Handler = fn(&mut Ctx<'_>, &Args) -> Reply;

/// One command of the table.
pub struct Spec {
    pub name: &'static str,
    /// Redis's convention: `n` exactly `n` arguments with the name, `-n`
    /// at least `n`.
    pub arity: i32,
    pub kind: Kind,
    /// Positions of the first and last key argument and the step (for
    /// `COMMAND INFO`); 0 for none.
    pub keys: (i32, i32, i32),
    pub run: Handler,
    /// Allowed between MULTI and EXEC (queued).
    pub queueable: bool,
}

const fn spec(
    name: &'static str,
    arity: i32,
    kind: Kind,
    keys: (i32, i32, i32),
    run: Handler,
) -> Spec {
    Spec {
        name,
        arity,
        kind,
        keys,
        run,
        queueable: true,
    }
}

const fn direct(name: &'static str, arity: i32, run: Handler) -> Spec {
    Spec {
        name,
        arity,
        kind: Kind::Admin,
        keys: (0, 0, 0),
        run,
        queueable: false,
    }
}

use Kind::*;

/// Every command the server knows, by lowercase name.
pub static TABLE: &[Spec] = &[
    spec("get", 2, Read, (1, 1, 1), strings::get),
    spec("set", -3, Write, (1, 1, 1), strings::set),
    spec("setnx", 3, Write, (1, 1, 1), strings::setnx),
    spec("getset", 3, Write, (1, 1, 1), strings::getset),
    spec("getdel", 2, Write, (1, 1, 1), strings::getdel),
    spec("mget", -2, Read, (1, -1, 1), strings::mget),
    spec("mset", -3, Write, (1, -1, 2), strings::mset),
    spec("msetnx", -3, Write, (1, -1, 2), strings::msetnx),
    spec("strlen", 2, Read, (1, 1, 1), strings::strlen),
    spec("append", 3, Write, (1, 1, 1), strings::append),
    spec("incr", 2, Write, (1, 1, 1), strings::incr),
    spec("decr", 2, Write, (1, 1, 1), strings::decr),
    spec("incrby", 3, Write, (1, 1, 1), strings::incrby),
    spec("decrby", 3, Write, (1, 1, 1), strings::decrby),
    spec("incrbyfloat", 3, Write, (1, 1, 1), strings::incrbyfloat),
    spec("del", -2, Write, (1, -1, 1), keys::del),
    spec("unlink", -2, Write, (1, -1, 1), keys::del),
    spec("exists", -2, Read, (1, -1, 1), keys::exists),
    spec("type", 2, Read, (1, 1, 1), keys::type_of),
    spec("ttl", 2, Read, (1, 1, 1), keys::ttl),
    spec("pttl", 2, Read, (1, 1, 1), keys::ttl),
    spec("scan", -2, Read, (0, 0, 0), keys::scan),
    spec("keys", 2, Read, (0, 0, 0), keys::keys),
    spec("dbsize", 1, Read, (0, 0, 0), keys::dbsize),
    spec("flushdb", -1, Write, (0, 0, 0), keys::flushdb),
    spec("flushall", -1, Write, (0, 0, 0), keys::flushall),
    spec("ping", -1, Admin, (0, 0, 0), connection::ping),
    spec("echo", 2, Admin, (0, 0, 0), connection::echo),
    spec("select", 2, Admin, (0, 0, 0), connection::select),
    direct("hello", -1, connection::hello),
    direct("auth", -2, connection::auth),
    direct("client", -2, connection::client),
    direct("quit", -1, connection::quit),
    direct("reset", 1, connection::reset),
    spec("info", -1, Admin, (0, 0, 0), server::info),
    spec("command", -1, Admin, (0, 0, 0), server::command),
    direct("config", -2, server::config),
    direct("wait", 3, server::wait),
    direct("shutdown", -1, server::shutdown),
    direct("multi", 1, transaction::multi),
    direct("exec", 1, transaction::exec),
    direct("discard", 1, transaction::discard),
];

/// The command named `name` (any case).
pub fn lookup(name: &[u8]) -> Option<&'static Spec> {
    if name.len() > 16 {
        return None;
    }
    let lower = name.to_ascii_lowercase();
    TABLE.iter().find(|s| s.name.as_bytes() == lower.as_slice())
}

/// Whether `args` has the number of arguments `spec` takes.
fn arity_ok(spec: &Spec, args: &Args) -> bool {
    let n = args.len() as i32;
    if spec.arity >= 0 {
        n == spec.arity
    } else {
        n >= -spec.arity
    }
}

/// Redis's reply to an unknown command.
pub fn unknown(args: &Args) -> Reply {
    let name = String::from_utf8_lossy(&args[0]);
    // As Redis: each argument quoted and followed by a space, up to 128
    // characters in all.
    let mut rest = String::new();
    for a in &args[1..] {
        if rest.len() >= 128 {
            break;
        }
        let a = String::from_utf8_lossy(a);
        let room = 128 - rest.len();
        rest.push_str(&format!("'{}' ", a.chars().take(room).collect::<String>()));
    }
    Reply::err(format!(
        "unknown command '{}', with args beginning with: {rest}",
        name.chars().take(128).collect::<String>(),
    ))
}

fn wrong_arity(spec: &Spec) -> Reply {
    Reply::err(format!(
        "wrong number of arguments for '{}' command",
        spec.name
    ))
}

/// Runs one command for `session` (queueing it inside `MULTI`).
pub fn execute(shared: &Shared, session: &mut Session, args: &Args) -> Reply {
    let Some(spec) = lookup(&args[0]) else {
        session.flag_transaction_error();
        return unknown(args);
    };
    if !arity_ok(spec, args) {
        session.flag_transaction_error();
        return wrong_arity(spec);
    }
    if !session.authenticated && !matches!(spec.name, "auth" | "hello" | "quit" | "reset") {
        return Reply::Error("NOAUTH Authentication required.".into());
    }
    if session.in_transaction() && spec.queueable {
        session.queue(args.clone());
        return Reply::Status("QUEUED".into());
    }
    if session.in_transaction()
        && !matches!(spec.name, "exec" | "discard" | "multi" | "quit" | "reset")
    {
        session.flag_transaction_error();
        return Reply::err(format!(
            "Command not allowed inside a transaction: '{}'",
            spec.name
        ));
    }
    let mut direct = Direct(&shared.db);
    let mut ctx = Ctx {
        data: &mut direct,
        session,
        shared,
    };
    shared.stats.count_command();
    (spec.run)(&mut ctx, args)
}

/// Runs a queued command inside `EXEC` against the transaction's view.
pub fn execute_queued(ctx: &mut Ctx<'_>, args: &Args) -> Reply {
    match lookup(&args[0]) {
        Some(spec) => {
            ctx.shared.stats.count_command();
            (spec.run)(ctx, args)
        }
        None => unknown(args),
    }
}

/// A reply that says a string argument is not what a command needs.
pub fn syntax_error() -> Reply {
    Reply::err("syntax error")
}

/// The stored key of argument `k` in the session's database.
pub fn key(ctx: &Ctx<'_>, k: &[u8]) -> Result<Vec<u8>, Reply> {
    crate::keyspace::stored(ctx.session.db, k)
}

/// Turns a handler's `Result` into its reply.
pub fn reply(r: Result<Reply, Reply>) -> Reply {
    r.unwrap_or_else(|e| e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_each_name_once_and_lookup_ignores_case() {
        let mut names: Vec<_> = TABLE.iter().map(|s| s.name).collect();
        names.sort();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n);
        assert_eq!(lookup(b"GeT").map(|s| s.name), Some("get"));
        assert!(lookup(b"nosuch").is_none());
    }

    #[test]
    fn unknown_commands_get_redis_text() {
        let r = unknown(&vec![b"FOO".to_vec(), b"a".to_vec()]);
        assert_eq!(
            r,
            Reply::Error("ERR unknown command 'FOO', with args beginning with: 'a' ".into())
        );
    }
}
