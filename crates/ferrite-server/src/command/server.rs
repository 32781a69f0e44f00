//! Server commands: `INFO`, `COMMAND` (what `redis-cli` asks at start),
//! `CONFIG GET` (what `redis-benchmark` asks), `WAIT` and `SHUTDOWN`.

use std::fmt::Write;
use std::ops::ControlFlow;

use super::{Ctx, TABLE};
use crate::glob;
use crate::keyspace::{db_range, DATABASES};
use crate::reply::Reply;
use crate::request::Args;

/// `INFO [section ...]`: server, clients, stats, persistence, keyspace,
/// and `ferrite` (the engine's own counters). `keyspace` counts keys with
/// a scan, so it costs what the databases hold.
pub fn info(ctx: &mut Ctx<'_>, a: &Args) -> Reply {
    let wanted: Vec<String> = a[1..]
        .iter()
        .map(|s| String::from_utf8_lossy(s).to_lowercase())
        .collect();
    let all = wanted.iter().any(|w| w == "all" || w == "everything");
    let default = wanted.is_empty() || wanted.iter().any(|w| w == "default");
    let want = |s: &str| all || default || wanted.iter().any(|w| w == s);
    let sh = ctx.shared;
    let mut out = String::new();
    if want("server") {
        let up = sh.started.elapsed().as_secs();
        let _ = write!(
            out,
            "# Server\r\nredis_version:{}\r\nferrite_version:{}\r\nredis_mode:standalone\r\n\
             os:{} {}\r\narch_bits:{}\r\nprocess_id:{}\r\ntcp_port:{}\r\n\
             uptime_in_seconds:{up}\r\nuptime_in_days:{}\r\nengine:{}\r\n\r\n",
            crate::REDIS_VERSION,
            env!("CARGO_PKG_VERSION"),
            std::env::consts::OS,
            std::env::consts::ARCH,
            usize::BITS,
            std::process::id(),
            sh.config.listen.port(),
            up / 86_400,
            sh.db.store.engine(),
        );
    }
    if want("clients") {
        let _ = write!(
            out,
            "# Clients\r\nconnected_clients:{}\r\nmaxclients:{}\r\nblocked_clients:0\r\n\r\n",
            sh.clients.count(),
            sh.config.max_clients,
        );
    }
    if want("stats") {
        let s = &sh.stats;
        let _ = write!(
            out,
            "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\n\
             rejected_connections:{}\r\nkeyspace_hits:{}\r\nkeyspace_misses:{}\r\n\
             scan_cursors:{}\r\n\r\n",
            s.connections(),
            s.commands(),
            s.rejected(),
            s.hits(),
            s.misses(),
            sh.cursors.len(),
        );
    }
    if want("persistence") {
        let _ = write!(
            out,
            "# Persistence\r\nloading:0\r\naof_enabled:1\r\nsync:{}\r\n\r\n",
            sh.config.sync
        );
    }
    if want("keyspace") {
        out.push_str("# Keyspace\r\n");
        for db in 0..DATABASES {
            let mut n = 0u64;
            let r = ctx.data.scan(db_range(db, b""), &mut |_, _| {
                n += 1;
                ControlFlow::Continue(())
            });
            if let Err(e) = r {
                return e;
            }
            if n > 0 {
                let _ = write!(out, "db{db}:keys={n},expires=0,avg_ttl=0\r\n");
            }
        }
        out.push_str("\r\n");
    }
    if want("ferrite") {
        let st = sh.db.store.stats();
        out.push_str("# Ferrite\r\n");
        let _ = write!(out, "engine:{}\r\n", sh.db.store.engine());
        for (name, v) in st.fields() {
            let _ = write!(out, "{name}:{v}\r\n");
        }
        out.push_str("\r\n");
    }
    Reply::Verbatim(out.trim_end().to_string() + "\r\n")
}

fn command_info(s: &super::Spec) -> Reply {
    let mut flags = Vec::new();
    match s.kind {
        super::Kind::Read => flags.push("readonly"),
        super::Kind::Write => flags.push("write"),
        super::Kind::Admin => flags.push("fast"),
    }
    Reply::Array(vec![
        Reply::bulk(s.name.as_bytes()),
        Reply::Int(s.arity as i64),
        Reply::Array(flags.into_iter().map(|f| Reply::Status(f.into())).collect()),
        Reply::Int(s.keys.0 as i64),
        Reply::Int(s.keys.1 as i64),
        Reply::Int(s.keys.2 as i64),
        Reply::Array(Vec::new()),
        Reply::Array(Vec::new()),
        Reply::Array(Vec::new()),
        Reply::Array(Vec::new()),
    ])
}

pub fn command(_: &mut Ctx<'_>, a: &Args) -> Reply {
    let Some(sub) = a.get(1).map(|s| s.to_ascii_uppercase()) else {
        return Reply::Array(TABLE.iter().map(command_info).collect());
    };
    match sub.as_slice() {
        b"COUNT" => Reply::Int(TABLE.len() as i64),
        b"LIST" => Reply::Array(
            TABLE
                .iter()
                .map(|s| Reply::bulk(s.name.as_bytes()))
                .collect(),
        ),
        b"INFO" => Reply::Array(
            a[2..]
                .iter()
                .map(|n| super::lookup(n).map_or(Reply::NullArray, command_info))
                .collect(),
        ),
        // Documentation is not served; clients fall back to none.
        b"DOCS" => Reply::Map(Vec::new()),
        _ => Reply::err(format!(
            "unknown subcommand '{}'. Try COMMAND HELP.",
            String::from_utf8_lossy(&a[1])
        )),
    }
}

/// `CONFIG GET pattern ...` answers the server's settings under Redis's
/// names; `CONFIG RESETSTAT` clears the counters; settings are fixed at
/// start, so `CONFIG SET` is refused.
pub fn config(ctx: &mut Ctx<'_>, a: &Args) -> Reply {
    let sh = ctx.shared;
    match a[1].to_ascii_uppercase().as_slice() {
        b"GET" if a.len() >= 3 => {
            let c = &sh.config;
            let settings = [
                ("appendonly", "yes".to_string()),
                ("appendfsync", c.sync.to_string()),
                ("save", String::new()),
                ("databases", DATABASES.to_string()),
                ("maxclients", c.max_clients.to_string()),
                ("maxmemory", c.cache_bytes.to_string()),
                ("proto-max-bulk-len", c.limits.max_bulk.to_string()),
                ("timeout", "0".to_string()),
                ("port", c.listen.port().to_string()),
            ];
            let mut pairs = Vec::new();
            for (name, value) in &settings {
                if a[2..]
                    .iter()
                    .any(|p| glob::matches(&p.to_ascii_lowercase(), name.as_bytes()))
                {
                    pairs.push((Reply::bulk(name.as_bytes()), Reply::bulk(value.as_bytes())));
                }
            }
            Reply::Map(pairs)
        }
        b"RESETSTAT" if a.len() == 2 => {
            sh.stats.reset();
            Reply::ok()
        }
        b"SET" => {
            Reply::err("CONFIG SET is not supported: settings are fixed when the server starts")
        }
        _ => Reply::err(format!(
            "unknown subcommand or wrong number of arguments for '{}'. Try CONFIG HELP.",
            String::from_utf8_lossy(&a[1])
        )),
    }
}

/// No replicas: zero acknowledge, at once.
pub fn wait(_: &mut Ctx<'_>, a: &Args) -> Reply {
    let ok = |b: &[u8]| super::strings::parse_int(b).is_some_and(|n| n >= 0);
    if !ok(&a[1]) || !ok(&a[2]) {
        return Reply::err("value is not an integer or out of range");
    }
    Reply::Int(0)
}

/// Stops the server as a signal does: no new connections, in-flight
/// commands finish, the store is synced and closed. Like Redis, it sends
/// no reply when it goes ahead.
pub fn shutdown(ctx: &mut Ctx<'_>, a: &Args) -> Reply {
    for opt in &a[1..] {
        match opt.to_ascii_uppercase().as_slice() {
            b"NOSAVE" | b"SAVE" | b"NOW" | b"FORCE" => {}
            b"ABORT" => return Reply::err("No shutdown in progress."),
            _ => return super::syntax_error(),
        }
    }
    ctx.shared.begin_shutdown();
    ctx.session.close_after_reply = true;
    ctx.session.silent = true;
    Reply::ok()
}
