//! The command table: which commands exist, their arity, kind and flags,
//! and the context a command runs in. How commands are grouped into
//! transactions and run is `executor`'s.
//!
//! | file | commands |
//! |---|---|
//! | `strings.rs` | GET SET SETNX SETEX PSETEX GETSET GETDEL GETEX MGET MSET MSETNX STRLEN APPEND INCR… INCRBYFLOAT SETRANGE GETRANGE SUBSTR LCS |
//! | `bits.rs` | SETBIT GETBIT BITCOUNT BITPOS BITOP |
//! | `keys.rs` | DEL UNLINK EXISTS TYPE TOUCH RENAME RENAMENX COPY MOVE RANDOMKEY OBJECT SCAN KEYS DBSIZE FLUSHDB FLUSHALL SWAPDB |
//! | `expire.rs` | EXPIRE PEXPIRE EXPIREAT PEXPIREAT EXPIRETIME PEXPIRETIME TTL PTTL PERSIST |
//! | `hashes.rs` | HSET HSETNX HGET HMGET HMSET HGETALL HDEL HLEN HEXISTS HKEYS HVALS HINCRBY HINCRBYFLOAT HSTRLEN HRANDFIELD HSCAN |
//! | `sets.rs` | SADD SREM SMEMBERS SISMEMBER SMISMEMBER SCARD SPOP SRANDMEMBER SMOVE SUNION SINTER SDIFF (+STORE) SINTERCARD SSCAN |
//! | `zsets.rs` | ZADD ZINCRBY ZREM ZSCORE ZMSCORE ZCARD ZCOUNT ZLEXCOUNT ZRANK ZREVRANK ZPOPMIN ZPOPMAX ZMPOP ZRANDMEMBER ZSCAN |
//! | `zranges.rs` | ZRANGE ZRANGESTORE ZRANGEBYSCORE ZREVRANGEBYSCORE ZRANGEBYLEX ZREVRANGEBYLEX ZREVRANGE ZREMRANGEBY* |
//! | `zsetops.rs` | ZUNION ZINTER ZDIFF (+STORE) ZINTERCARD |
//! | `lists.rs` | LPUSH RPUSH LPUSHX RPUSHX LPOP RPOP LLEN LRANGE LINDEX LSET LINSERT LREM LTRIM LPOS RPOPLPUSH LMOVE LMPOP |
//! | `blocking.rs` | BLPOP BRPOP BRPOPLPUSH BLMOVE BLMPOP BZPOPMIN BZPOPMAX BZMPOP |
//! | `pubsub.rs` | SUBSCRIBE UNSUBSCRIBE PSUBSCRIBE PUNSUBSCRIBE PUBLISH PUBSUB |
//! | `transaction.rs` | MULTI DISCARD WATCH UNWATCH (EXEC is the executor's) |
//! | `connection.rs` | PING ECHO HELLO AUTH CLIENT SELECT QUIT RESET |
//! | `server.rs` | INFO COMMAND CONFIG WAITAOF SHUTDOWN TIME LASTSAVE SAVE BGSAVE MEMORY |
//! | `replication.rs` | REPLICAOF SLAVEOF ROLE WAIT REPLCONF PSYNC SYNC |
//! | `sort.rs` | SORT SORT_RO |
//! | `scripting.rs` | EVAL EVALSHA EVAL_RO EVALSHA_RO FCALL FCALL_RO SCRIPT FUNCTION |
//! | `scan.rs` | cursors and options shared by SCAN, HSCAN, SSCAN, ZSCAN |
//! | `args.rs` | numbers and options as Redis parses them |
//! | `longdouble.rs` | the 80-bit long double INCRBYFLOAT and HINCRBYFLOAT compute in, as Redis does |

mod args;
mod bits;
mod blocking;
mod connection;
mod expire;
mod hashes;
mod keys;
mod lists;
mod longdouble;
mod pubsub;
mod replication;
mod scan;
mod scripting;
mod server;
mod sets;
mod sort;
mod strings;
mod transaction;
mod zranges;
mod zsetops;
mod zsets;

use std::collections::HashMap;
use std::sync::OnceLock;

pub use blocking::serve as serve_waiter;
pub use scripting::{allowed_while_busy, busy_reply, lockless};
pub use transaction::unwatch_all;

use crate::model::{ModelError, Tx};
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

/// Runs outside pipeline groups, in a transaction of its own (it changes
/// the session in ways later commands depend on, or may block).
pub const ALONE: u8 = 1;
/// Runs at once inside `MULTI` instead of being queued.
pub const NOQUEUE: u8 = 2;
/// Allowed before `AUTH`.
pub const NOAUTH: u8 = 4;
/// Allowed while a RESP2 connection is subscribed.
pub const PUBSUB: u8 = 8;
/// Refused inside `MULTI`.
pub const NOMULTI: u8 = 16;
/// Refused from a script's `redis.call`.
pub const NOSCRIPT: u8 = 32;
/// Runs Lua: outside `MULTI`, on the script thread (`script::runner`).
pub const SCRIPTED: u8 = 64;

/// The flag sets the table gives more than one command.
const SUBSCRIBING: u8 = ALONE | PUBSUB | NOSCRIPT;
const TX_CONTROL: u8 = ALONE | NOQUEUE | NOSCRIPT;
const LOGIN: u8 = ALONE | NOAUTH | NOSCRIPT;
const CONNECTION: u8 = ALONE | NOQUEUE | NOAUTH | PUBSUB | NOSCRIPT;
/// PSYNC, SYNC, SHUTDOWN, SAVE: alone, and never inside MULTI or a script.
const OUTSIDE_MULTI: u8 = ALONE | NOMULTI | NOSCRIPT;
const CONTROL: u8 = ALONE | NOSCRIPT;
const SCRIPT_RUN: u8 = ALONE | NOSCRIPT | SCRIPTED;

/// Why a command failed: an error reply for the client, or a storage
/// failure that fails the whole unit of work it ran in.
#[derive(Debug)]
pub enum Fail {
    Reply(Reply),
    Storage(ModelError),
}

impl From<Reply> for Fail {
    fn from(r: Reply) -> Self {
        Fail::Reply(r)
    }
}

impl From<ModelError> for Fail {
    fn from(e: ModelError) -> Self {
        match e {
            e if e.is_storage() => Fail::Storage(e),
            ModelError::WrongType => Fail::Reply(Reply::Error(e.to_string())),
            e => Fail::Reply(Reply::err(e)),
        }
    }
}

/// An `ERR` reply as a failure.
pub fn fail(text: impl std::fmt::Display) -> Fail {
    Fail::Reply(Reply::err(text))
}

pub type CmdResult = Result<Reply, Fail>;

/// Where a command runs: the transaction it reads and writes through,
/// the connection's state and the server's.
pub struct Ctx<'c, 't> {
    pub tx: &'c mut Tx<'t>,
    pub session: &'c mut Session,
    pub shared: &'c Shared,
    /// Inside `EXEC`: blocking commands answer at once instead of waiting.
    pub in_exec: bool,
}

impl Ctx<'_, '_> {
    /// The session's database.
    pub fn db(&self) -> u8 {
        self.session.db
    }

    /// The first key of `keys` holding a `kind`, with what was found
    /// there (keys hold no empty collections). A command that first runs
    /// refuses a key of another type met on the way, as Redis does;
    /// serving a blocked waiter passes over it (the key became something
    /// else since the waiter blocked, and the waiter waits on), as Redis
    /// serves only keys of the type waited for.
    pub fn first_of_kind(
        &self,
        keys: &[&[u8]],
        kind: crate::model::Kind,
        serving: bool,
    ) -> Result<Option<(Vec<u8>, crate::model::Found)>, Fail> {
        for k in keys {
            let f = self.tx.lookup(self.db(), k)?;
            match f.typed(kind) {
                Ok(Some(_)) => return Ok(Some((k.to_vec(), f))),
                Ok(None) => {}
                Err(_) if serving => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(None)
    }
}

type Handler = fn(&mut Ctx<'_, '_>, &Args) -> CmdResult;

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
    /// [`ALONE`], [`NOQUEUE`], [`NOAUTH`], [`PUBSUB`], [`NOMULTI`],
    /// [`NOSCRIPT`], [`SCRIPTED`].
    pub flags: u8,
}

impl Spec {
    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

const fn cmd(
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
        flags: 0,
    }
}

const fn flagged(
    name: &'static str,
    arity: i32,
    kind: Kind,
    keys: (i32, i32, i32),
    run: Handler,
    flags: u8,
) -> Spec {
    Spec {
        name,
        arity,
        kind,
        keys,
        run,
        flags,
    }
}

/// A flagged command that reads and writes no key.
const fn admin(name: &'static str, arity: i32, run: Handler, flags: u8) -> Spec {
    flagged(name, arity, Kind::Admin, K0, run, flags)
}

use Kind::{Admin, Read, Write};

const K1: (i32, i32, i32) = (1, 1, 1);
const KALL: (i32, i32, i32) = (1, -1, 1);
const K12: (i32, i32, i32) = (1, 2, 1);
const K0: (i32, i32, i32) = (0, 0, 0);

/// Every command the server knows.
pub static TABLE: &[Spec] = &[
    // Strings.
    cmd("get", 2, Read, K1, strings::get),
    cmd("set", -3, Write, K1, strings::set),
    cmd("setnx", 3, Write, K1, strings::setnx),
    cmd("setex", 4, Write, K1, strings::setex),
    cmd("psetex", 4, Write, K1, strings::psetex),
    cmd("getset", 3, Write, K1, strings::getset),
    cmd("getdel", 2, Write, K1, strings::getdel),
    cmd("getex", -2, Write, K1, strings::getex),
    cmd("mget", -2, Read, KALL, strings::mget),
    cmd("mset", -3, Write, (1, -1, 2), strings::mset),
    cmd("msetnx", -3, Write, (1, -1, 2), strings::msetnx),
    cmd("strlen", 2, Read, K1, strings::strlen),
    cmd("append", 3, Write, K1, strings::append),
    cmd("incr", 2, Write, K1, strings::incr),
    cmd("decr", 2, Write, K1, strings::decr),
    cmd("incrby", 3, Write, K1, strings::incrby),
    cmd("decrby", 3, Write, K1, strings::decrby),
    cmd("incrbyfloat", 3, Write, K1, strings::incrbyfloat),
    cmd("setrange", 4, Write, K1, strings::setrange),
    cmd("getrange", 4, Read, K1, strings::getrange),
    cmd("substr", 4, Read, K1, strings::getrange),
    cmd("lcs", -3, Read, K12, strings::lcs),
    // Bits.
    cmd("setbit", 4, Write, K1, bits::setbit),
    cmd("getbit", 3, Read, K1, bits::getbit),
    cmd("bitcount", -2, Read, K1, bits::bitcount),
    cmd("bitpos", -3, Read, K1, bits::bitpos),
    cmd("bitop", -4, Write, (2, -1, 1), bits::bitop),
    cmd("bitfield", -2, Write, K1, bits::bitfield),
    cmd("bitfield_ro", -2, Read, K1, bits::bitfield_ro),
    // Keys.
    cmd("del", -2, Write, KALL, keys::del),
    cmd("unlink", -2, Write, KALL, keys::del),
    cmd("exists", -2, Read, KALL, keys::exists),
    cmd("touch", -2, Read, KALL, keys::exists),
    cmd("type", 2, Read, K1, keys::type_of),
    cmd("rename", 3, Write, K12, keys::rename),
    cmd("renamenx", 3, Write, K12, keys::renamenx),
    cmd("copy", -3, Write, K12, keys::copy),
    cmd("move", 3, Write, K1, keys::move_key),
    cmd("randomkey", 1, Read, K0, keys::randomkey),
    cmd("object", -2, Read, (2, 2, 1), keys::object),
    cmd("scan", -2, Read, K0, keys::scan),
    cmd("keys", 2, Read, K0, keys::keys),
    cmd("dbsize", 1, Read, K0, keys::dbsize),
    cmd("flushdb", -1, Write, K0, keys::flushdb),
    cmd("flushall", -1, Write, K0, keys::flushall),
    cmd("swapdb", 3, Write, K0, keys::swapdb),
    cmd("sort", -2, Write, K1, sort::sort),
    cmd("sort_ro", -2, Read, K1, sort::sort_ro),
    // Expiry.
    cmd("expire", -3, Write, K1, expire::expire),
    cmd("pexpire", -3, Write, K1, expire::pexpire),
    cmd("expireat", -3, Write, K1, expire::expireat),
    cmd("pexpireat", -3, Write, K1, expire::pexpireat),
    cmd("expiretime", 2, Read, K1, expire::expiretime),
    cmd("pexpiretime", 2, Read, K1, expire::pexpiretime),
    cmd("ttl", 2, Read, K1, expire::ttl),
    cmd("pttl", 2, Read, K1, expire::pttl),
    cmd("persist", 2, Write, K1, expire::persist),
    // Hashes.
    cmd("hset", -4, Write, K1, hashes::hset),
    cmd("hmset", -4, Write, K1, hashes::hmset),
    cmd("hsetnx", 4, Write, K1, hashes::hsetnx),
    cmd("hget", 3, Read, K1, hashes::hget),
    cmd("hmget", -3, Read, K1, hashes::hmget),
    cmd("hgetall", 2, Read, K1, hashes::hgetall),
    cmd("hkeys", 2, Read, K1, hashes::hkeys),
    cmd("hvals", 2, Read, K1, hashes::hvals),
    cmd("hdel", -3, Write, K1, hashes::hdel),
    cmd("hlen", 2, Read, K1, hashes::hlen),
    cmd("hexists", 3, Read, K1, hashes::hexists),
    cmd("hincrby", 4, Write, K1, hashes::hincrby),
    cmd("hincrbyfloat", 4, Write, K1, hashes::hincrbyfloat),
    cmd("hstrlen", 3, Read, K1, hashes::hstrlen),
    cmd("hrandfield", -2, Read, K1, hashes::hrandfield),
    cmd("hscan", -3, Read, K1, hashes::hscan),
    // Sets.
    cmd("sadd", -3, Write, K1, sets::sadd),
    cmd("srem", -3, Write, K1, sets::srem),
    cmd("smembers", 2, Read, K1, sets::smembers),
    cmd("sismember", 3, Read, K1, sets::sismember),
    cmd("smismember", -3, Read, K1, sets::smismember),
    cmd("scard", 2, Read, K1, sets::scard),
    cmd("spop", -2, Write, K1, sets::spop),
    cmd("srandmember", -2, Read, K1, sets::srandmember),
    cmd("smove", 4, Write, K12, sets::smove),
    cmd("sunion", -2, Read, KALL, sets::sunion),
    cmd("sinter", -2, Read, KALL, sets::sinter),
    cmd("sdiff", -2, Read, KALL, sets::sdiff),
    cmd("sunionstore", -3, Write, KALL, sets::sunionstore),
    cmd("sinterstore", -3, Write, KALL, sets::sinterstore),
    cmd("sdiffstore", -3, Write, KALL, sets::sdiffstore),
    cmd("sintercard", -3, Read, (2, 2, 1), sets::sintercard),
    cmd("sscan", -3, Read, K1, sets::sscan),
    // Sorted sets.
    cmd("zadd", -4, Write, K1, zsets::zadd),
    cmd("zincrby", 4, Write, K1, zsets::zincrby),
    cmd("zrem", -3, Write, K1, zsets::zrem),
    cmd("zscore", 3, Read, K1, zsets::zscore),
    cmd("zmscore", -3, Read, K1, zsets::zmscore),
    cmd("zcard", 2, Read, K1, zsets::zcard),
    cmd("zcount", 4, Read, K1, zranges::zcount),
    cmd("zlexcount", 4, Read, K1, zranges::zlexcount),
    cmd("zrank", -3, Read, K1, zsets::zrank),
    cmd("zrevrank", -3, Read, K1, zsets::zrevrank),
    cmd("zpopmin", -2, Write, K1, zsets::zpopmin),
    cmd("zpopmax", -2, Write, K1, zsets::zpopmax),
    cmd("zmpop", -4, Write, (2, 2, 1), zsets::zmpop),
    cmd("zrandmember", -2, Read, K1, zsets::zrandmember),
    cmd("zscan", -3, Read, K1, zsets::zscan),
    cmd("zrange", -4, Read, K1, zranges::zrange),
    cmd("zrangestore", -5, Write, K12, zranges::zrangestore),
    cmd("zrevrange", -4, Read, K1, zranges::zrevrange),
    cmd("zrangebyscore", -4, Read, K1, zranges::zrangebyscore),
    cmd("zrevrangebyscore", -4, Read, K1, zranges::zrevrangebyscore),
    cmd("zrangebylex", -4, Read, K1, zranges::zrangebylex),
    cmd("zrevrangebylex", -4, Read, K1, zranges::zrevrangebylex),
    cmd("zremrangebyrank", 4, Write, K1, zranges::zremrangebyrank),
    cmd("zremrangebyscore", 4, Write, K1, zranges::zremrangebyscore),
    cmd("zremrangebylex", 4, Write, K1, zranges::zremrangebylex),
    cmd("zunion", -3, Read, (2, 2, 1), zsetops::zunion),
    cmd("zinter", -3, Read, (2, 2, 1), zsetops::zinter),
    cmd("zdiff", -3, Read, (2, 2, 1), zsetops::zdiff),
    cmd("zunionstore", -4, Write, K1, zsetops::zunionstore),
    cmd("zinterstore", -4, Write, K1, zsetops::zinterstore),
    cmd("zdiffstore", -4, Write, K1, zsetops::zdiffstore),
    cmd("zintercard", -3, Read, (2, 2, 1), zsetops::zintercard),
    // Lists.
    cmd("lpush", -3, Write, K1, lists::lpush),
    cmd("rpush", -3, Write, K1, lists::rpush),
    cmd("lpushx", -3, Write, K1, lists::lpushx),
    cmd("rpushx", -3, Write, K1, lists::rpushx),
    cmd("lpop", -2, Write, K1, lists::lpop),
    cmd("rpop", -2, Write, K1, lists::rpop),
    cmd("llen", 2, Read, K1, lists::llen),
    cmd("lrange", 4, Read, K1, lists::lrange),
    cmd("lindex", 3, Read, K1, lists::lindex),
    cmd("lset", 4, Write, K1, lists::lset),
    cmd("linsert", 5, Write, K1, lists::linsert),
    cmd("lrem", 4, Write, K1, lists::lrem),
    cmd("ltrim", 4, Write, K1, lists::ltrim),
    cmd("lpos", -3, Read, K1, lists::lpos),
    cmd("rpoplpush", 3, Write, K12, lists::rpoplpush),
    cmd("lmove", 5, Write, K12, lists::lmove),
    cmd("lmpop", -4, Write, (2, 2, 1), lists::lmpop),
    flagged("blpop", -3, Write, (1, -2, 1), blocking::blpop, ALONE),
    flagged("brpop", -3, Write, (1, -2, 1), blocking::brpop, ALONE),
    flagged("brpoplpush", 4, Write, K12, blocking::brpoplpush, ALONE),
    flagged("blmove", 6, Write, K12, blocking::blmove, ALONE),
    flagged("blmpop", -5, Write, (3, 3, 1), blocking::blmpop, ALONE),
    flagged("bzpopmin", -3, Write, (1, -2, 1), blocking::bzpopmin, ALONE),
    flagged("bzpopmax", -3, Write, (1, -2, 1), blocking::bzpopmax, ALONE),
    flagged("bzmpop", -5, Write, (3, 3, 1), blocking::bzmpop, ALONE),
    // Pub/sub.
    admin("subscribe", -2, pubsub::subscribe, SUBSCRIBING),
    admin("unsubscribe", -1, pubsub::unsubscribe, SUBSCRIBING),
    admin("psubscribe", -2, pubsub::psubscribe, SUBSCRIBING),
    admin("punsubscribe", -1, pubsub::punsubscribe, SUBSCRIBING),
    cmd("publish", 3, Admin, K0, pubsub::publish),
    cmd("pubsub", -2, Admin, K0, pubsub::pubsub),
    // Transactions.
    admin("multi", 1, transaction::multi, TX_CONTROL),
    admin("exec", 1, transaction::exec_placeholder, TX_CONTROL),
    admin("discard", 1, transaction::discard, TX_CONTROL),
    flagged("watch", -2, Admin, KALL, transaction::watch, TX_CONTROL),
    admin("unwatch", 1, transaction::unwatch, CONTROL),
    // Connection.
    admin("ping", -1, connection::ping, PUBSUB),
    cmd("echo", 2, Admin, K0, connection::echo),
    cmd("select", 2, Admin, K0, connection::select),
    admin("hello", -1, connection::hello, LOGIN),
    admin("auth", -2, connection::auth, LOGIN),
    admin("client", -2, connection::client, CONTROL),
    admin("quit", -1, connection::quit, CONNECTION),
    admin("reset", 1, connection::reset, CONNECTION),
    // Server.
    cmd("info", -1, Admin, K0, server::info),
    cmd("command", -1, Admin, K0, server::command),
    admin("config", -2, server::config, CONTROL),
    admin("wait", 3, replication::wait, ALONE),
    // Replication.
    admin("replicaof", 3, replication::replicaof, NOSCRIPT),
    admin("slaveof", 3, replication::replicaof, NOSCRIPT),
    cmd("role", 1, Admin, K0, replication::role),
    admin("replconf", -1, replication::replconf, NOSCRIPT),
    admin("psync", 3, replication::psync, OUTSIDE_MULTI),
    admin("sync", 1, replication::sync, OUTSIDE_MULTI),
    cmd("waitaof", 4, Admin, K0, server::waitaof),
    admin("shutdown", -1, server::shutdown, OUTSIDE_MULTI),
    cmd("time", 1, Admin, K0, server::time),
    cmd("lastsave", 1, Admin, K0, server::lastsave),
    admin("save", 1, server::save, OUTSIDE_MULTI),
    cmd("bgsave", -1, Admin, K0, server::bgsave),
    cmd("memory", -2, Read, (2, 2, 1), server::memory),
    // Scripting.
    flagged("eval", -3, Write, K0, scripting::eval, SCRIPT_RUN),
    flagged("evalsha", -3, Write, K0, scripting::evalsha, SCRIPT_RUN),
    flagged("eval_ro", -3, Read, K0, scripting::eval_ro, SCRIPT_RUN),
    flagged(
        "evalsha_ro",
        -3,
        Read,
        K0,
        scripting::evalsha_ro,
        SCRIPT_RUN,
    ),
    flagged("fcall", -3, Write, K0, scripting::fcall, SCRIPT_RUN),
    flagged("fcall_ro", -3, Read, K0, scripting::fcall_ro, SCRIPT_RUN),
    flagged("function", -2, Write, K0, scripting::function, CONTROL),
    admin("script", -2, scripting::script, CONTROL),
];

fn index() -> &'static HashMap<&'static str, usize> {
    static INDEX: OnceLock<HashMap<&'static str, usize>> = OnceLock::new();
    INDEX.get_or_init(|| TABLE.iter().enumerate().map(|(i, s)| (s.name, i)).collect())
}

/// The name of the command at `index` in the table.
pub fn name_of(index: usize) -> Option<&'static str> {
    TABLE.get(index).map(|s| s.name)
}

/// The command named `name` (any case) and its place in the table.
pub fn lookup_indexed(name: &[u8]) -> Option<(usize, &'static Spec)> {
    let mut buf = [0u8; 24];
    let lower = buf.get_mut(..name.len())?;
    for (d, s) in lower.iter_mut().zip(name) {
        *d = s.to_ascii_lowercase();
    }
    let name = std::str::from_utf8(lower).ok()?;
    let i = *index().get(name)?;
    Some((i, &TABLE[i]))
}

/// The command named `name` (any case).
pub fn lookup(name: &[u8]) -> Option<&'static Spec> {
    lookup_indexed(name).map(|(_, s)| s)
}

/// Whether `args` has the number of arguments `spec` takes.
pub fn arity_ok(spec: &Spec, args: &Args) -> bool {
    let n = args.len() as i32;
    if spec.arity >= 0 {
        n == spec.arity
    } else {
        n >= -spec.arity
    }
}

/// Redis's reply to an unknown command.
pub fn unknown(args: &Args) -> Reply {
    let name = String::from_utf8_lossy(args[0]);
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

pub fn wrong_arity(name: &str) -> Reply {
    Reply::err(format!("wrong number of arguments for '{name}' command"))
}

/// A reply that says a string argument is not what a command needs.
pub fn syntax_error() -> Fail {
    fail("syntax error")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_has_its_counters() {
        assert!(TABLE.len() <= crate::stats::COMMAND_SLOTS);
    }

    #[test]
    fn the_table_has_each_name_once_and_lookup_ignores_case() {
        let mut names: Vec<_> = TABLE.iter().map(|s| s.name).collect();
        names.sort();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n);
        assert_eq!(lookup(b"GeT").map(|s| s.name), Some("get"));
        assert!(lookup(b"nosuch").is_none());
        assert!(lookup(&[b'a'; 100]).is_none());
    }

    #[test]
    fn unknown_commands_get_redis_text() {
        let r = unknown(&[b"FOO".as_slice(), b"a".as_slice()]);
        assert_eq!(
            r,
            Reply::Error("ERR unknown command 'FOO', with args beginning with: 'a' ".into())
        );
    }
}
