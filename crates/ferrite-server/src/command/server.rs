//! Server commands: `INFO`, `COMMAND` (what `redis-cli` asks at start),
//! `CONFIG` (`settings.rs`), `WAIT`, `WAITAOF`, `SHUTDOWN`, `TIME`, `LASTSAVE`,
//! `SAVE`, `BGSAVE` and `MEMORY`.

use std::fmt::Write;

use super::args::{is, parse_int};
use super::{fail, syntax_error, CmdResult, Ctx, Kind, Spec, TABLE};

use crate::reply::Reply;
use crate::request::Args;

/// The sections `INFO` answers, in order, and whether `INFO` without
/// arguments (`default`) includes each.
const SECTIONS: &[(&str, bool)] = &[
    ("server", true),
    ("clients", true),
    ("memory", true),
    ("persistence", true),
    ("stats", true),
    ("replication", true),
    ("cpu", true),
    ("commandstats", false),
    ("errorstats", false),
    ("keyspace", true),
    ("ferrite", true),
];

/// The process's resident bytes, from `/proc/self/statm`.
pub fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

fn cpu_seconds() -> (f64, f64, f64, f64) {
    let usage = |who| {
        let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: getrusage writes a whole rusage into the buffer it is
        // given; RUSAGE_SELF and RUSAGE_CHILDREN are valid selectors.
        let r = unsafe { libc::getrusage(who, u.as_mut_ptr()) };
        if r != 0 {
            return (0.0, 0.0);
        }
        // SAFETY: initialised by the successful call above (zeroed before).
        let u = unsafe { u.assume_init() };
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        (secs(u.ru_stime), secs(u.ru_utime))
    };
    let (ss, su) = usage(libc::RUSAGE_SELF);
    let (cs, cu) = usage(libc::RUSAGE_CHILDREN);
    (ss, su, cs, cu)
}

/// `INFO [section ...]`.
pub fn info(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let wanted: Vec<String> = a[1..]
        .iter()
        .map(|s| String::from_utf8_lossy(s).to_lowercase())
        .collect();
    let all = wanted.iter().any(|w| w == "all" || w == "everything");
    let default = wanted.is_empty() || wanted.iter().any(|w| w == "default");
    let want =
        |s: &str, in_default: bool| all || (default && in_default) || wanted.iter().any(|w| w == s);
    let sh = ctx.shared;
    let mut out = String::new();
    for &(section, in_default) in SECTIONS {
        if !want(section, in_default) {
            continue;
        }
        match section {
            "server" => {
                let up = sh.started.elapsed().as_secs();
                let _ = write!(
                    out,
                    "# Server\r\nredis_version:{}\r\nredis_git_sha1:00000000\r\nredis_git_dirty:0\r\n\
                     ferrite_version:{}\r\nredis_mode:standalone\r\nos:{} {}\r\narch_bits:{}\r\n\
                     process_id:{}\r\nrun_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{up}\r\nuptime_in_days:{}\r\n\
                     hz:10\r\nengine:{}\r\n\r\n",
                    crate::REDIS_VERSION,
                    env!("CARGO_PKG_VERSION"),
                    std::env::consts::OS,
                    std::env::consts::ARCH,
                    usize::BITS,
                    std::process::id(),
                    sh.run_id,
                    sh.config.listen.port(),
                    up / 86_400,
                    sh.ks.store().engine(),
                );
            }
            "clients" => {
                let _ = write!(
                    out,
                    "# Clients\r\nconnected_clients:{}\r\nmaxclients:{}\r\nblocked_clients:{}\r\n\
                     pubsub_clients:{}\r\n\r\n",
                    sh.clients.count(),
                    sh.settings.max_clients(),
                    sh.blocked.count(),
                    sh.clients.subscribed(),
                );
            }
            "memory" => {
                let rss = rss_bytes();
                let counts = &sh.scripts.counts;
                let scripts = counts.scripts.load(std::sync::atomic::Ordering::Relaxed);
                let functions = counts.functions.load(std::sync::atomic::Ordering::Relaxed);
                let _ = write!(
                    out,
                    "# Memory\r\nused_memory:{rss}\r\nused_memory_rss:{rss}\r\nmaxmemory:{}\r\n\
                     maxmemory_policy:noeviction\r\nnumber_of_cached_scripts:{scripts}\r\n\
                     number_of_functions:{functions}\r\n\r\n",
                    sh.config.cache_bytes,
                );
            }
            "persistence" => {
                let _ = write!(
                    out,
                    "# Persistence\r\nloading:0\r\naof_enabled:1\r\naof_rewrite_in_progress:0\r\n\
                     rdb_changes_since_last_save:{}\r\nrdb_bgsave_in_progress:{}\r\n\
                     rdb_last_save_time:{}\r\nsync:{}\r\n\r\n",
                    sh.stats.dirty(),
                    sh.save_pending() as u8,
                    sh.last_save(),
                    sh.config.sync
                );
            }
            "stats" => {
                let s = &sh.stats;
                let m = sh.ks.stats().counts();
                let syncs = sh.repl.syncs();
                let _ = write!(
                    out,
                    "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\n\
                     rejected_connections:{}\r\nexpired_keys:{}\r\nevicted_keys:0\r\n\
                     keyspace_hits:{}\r\nkeyspace_misses:{}\r\npubsub_channels:{}\r\n\
                     pubsub_patterns:{}\r\ntotal_error_replies:{}\r\nscan_cursors:{}\r\n\
                     sync_full:{}\r\nsync_partial_ok:{}\r\nsync_partial_err:{}\r\n\
                     reader_threads:{}\r\nreads_on_readers:{}\r\nreads_offloaded:{}\r\n\r\n",
                    s.connections(),
                    s.commands(),
                    s.rejected(),
                    m.expired_keys,
                    s.hits(),
                    s.misses(),
                    sh.pubsub.channels(None).len(),
                    sh.pubsub.numpat(),
                    s.errors(),
                    sh.cursors.len(),
                    syncs.0,
                    syncs.1,
                    syncs.2,
                    sh.route.readers(),
                    u8::from(sh.route.offloading()),
                    sh.route.offloaded(),
                );
            }
            "replication" => {
                out.push_str(&sh.repl.info());
            }
            "cpu" => {
                let (ss, su, cs, cu) = cpu_seconds();
                let _ = write!(
                    out,
                    "# CPU\r\nused_cpu_sys:{ss:.6}\r\nused_cpu_user:{su:.6}\r\n\
                     used_cpu_sys_children:{cs:.6}\r\nused_cpu_user_children:{cu:.6}\r\n\r\n"
                );
            }
            "commandstats" => {
                out.push_str("# Commandstats\r\n");
                for (index, c) in sh.stats.command_stats() {
                    let Some(name) = super::name_of(index) else {
                        continue;
                    };
                    let per = if c.calls > 0 {
                        c.usec as f64 / c.calls as f64
                    } else {
                        0.0
                    };
                    let _ = write!(
                        out,
                        "cmdstat_{name}:calls={},usec={},usec_per_call={per:.2},rejected_calls={},failed_calls={}\r\n",
                        c.calls, c.usec, c.rejected, c.failed
                    );
                }
                out.push_str("\r\n");
            }
            "errorstats" => {
                out.push_str("# Errorstats\r\n");
                for (code, n) in sh.stats.error_stats() {
                    let _ = write!(out, "errorstat_{code}:count={n}\r\n");
                }
                out.push_str("\r\n");
            }
            "keyspace" => {
                out.push_str("# Keyspace\r\n");
                for db in 0..crate::model::DATABASES {
                    let (keys, expires) = ctx.tx.db_size(db);
                    if keys > 0 {
                        let _ = write!(out, "db{db}:keys={keys},expires={expires},avg_ttl=0\r\n");
                    }
                }
                out.push_str("\r\n");
            }
            _ => {
                let st = sh.ks.store().stats();
                let m = sh.ks.stats().counts();
                out.push_str("# Ferrite\r\n");
                let _ = write!(
                    out,
                    "engine:{}\r\nexpire_cycles:{}\r\nswept_elements:{}\r\nswept_collections:{}\r\n\
                     sweep_passes:{}\r\nsweep_backlog:{}\r\n",
                    sh.ks.store().engine(),
                    m.expire_cycles,
                    m.swept_elements,
                    m.swept_collections,
                    m.sweep_passes,
                    m.sweep_backlog,
                );
                for (name, v) in st.fields() {
                    let _ = write!(out, "{name}:{v}\r\n");
                }
                out.push_str("\r\n");
            }
        }
    }
    Ok(Reply::Verbatim(out.trim_end().to_string() + "\r\n"))
}

fn command_info(s: &Spec) -> Reply {
    let mut flags = Vec::new();
    match s.kind {
        Kind::Read => flags.push("readonly"),
        Kind::Write => flags.push("write"),
        Kind::Admin => flags.push("fast"),
    }
    if s.has(super::ALONE) && s.name.starts_with('b') {
        flags.push("blocking");
    }
    Reply::Array(vec![
        Reply::bulk(s.name.as_bytes()),
        Reply::Int(s.arity as i64),
        Reply::Set(flags.into_iter().map(|f| Reply::Status(f.into())).collect()),
        Reply::Int(s.keys.0 as i64),
        Reply::Int(s.keys.1 as i64),
        Reply::Int(s.keys.2 as i64),
        Reply::Array(Vec::new()),
        Reply::Array(Vec::new()),
        Reply::Array(Vec::new()),
        Reply::Array(Vec::new()),
    ])
}

pub fn command(_: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let Some(sub) = a.get(1).map(|s| s.to_ascii_uppercase()) else {
        return Ok(Reply::Array(TABLE.iter().map(command_info).collect()));
    };
    Ok(match sub.as_slice() {
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
                .map(|n| super::lookup(n).map_or(Reply::Null, command_info))
                .collect(),
        ),
        // Documentation is not served; clients fall back to none.
        b"DOCS" => Reply::Map(Vec::new()),
        b"GETKEYS" if a.len() >= 3 => {
            let args = &a[2..];
            let Some(spec) = super::lookup(args[0]) else {
                return Err(fail("Invalid command specified"));
            };
            if !super::arity_ok(spec, args) {
                return Err(fail("Invalid number of arguments specified for command"));
            }
            let keys = key_positions(spec, args);
            if keys.is_empty() {
                return Err(fail("The command has no key arguments"));
            }
            Reply::Array(keys.into_iter().map(|i| Reply::bulk(args[i])).collect())
        }
        _ => {
            return Err(fail(format!(
                "unknown subcommand '{}'. Try COMMAND HELP.",
                String::from_utf8_lossy(a[1])
            )))
        }
    })
}

/// Where the keys of `args` (a whole command) are: by the table's
/// first/last/step, or, for commands that count their keys or name one
/// by an option, as Redis's key specs say.
fn key_positions(spec: &Spec, args: &Args) -> Vec<usize> {
    let n = args.len();
    let counted = |at: usize| -> Vec<usize> {
        let count = args.get(at).and_then(|b| parse_int(b)).unwrap_or(0).max(0) as usize;
        (at + 1..(at + 1 + count).min(n)).collect()
    };
    match spec.name {
        "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall" | "fcall_ro" => counted(2),
        "zunionstore" | "zinterstore" | "zdiffstore" => {
            let mut k = vec![1];
            k.extend(counted(2));
            k
        }
        "zunion" | "zinter" | "zdiff" | "zintercard" | "sintercard" | "lmpop" | "zmpop" => {
            counted(1)
        }
        "blmpop" | "bzmpop" => counted(2),
        "sort" | "sort_ro" => {
            let mut k = vec![1];
            // The last STORE names the destination.
            let store = (2..n.saturating_sub(1)).rfind(|&i| is(args[i], "STORE"));
            if let (Some(i), "sort") = (store, spec.name) {
                k.push(i + 1);
            }
            k
        }
        _ => {
            let (first, last, step) = spec.keys;
            if first <= 0 {
                return Vec::new();
            }
            let last = if last < 0 { n as i32 + last } else { last };
            (first..=last.min(n as i32 - 1))
                .step_by(step.max(1) as usize)
                .map(|i| i as usize)
                .collect()
        }
    }
}

/// `CONFIG GET pattern ...`, `CONFIG SET name value ...`,
/// `CONFIG RESETSTAT`.
pub fn config(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let sh = ctx.shared;
    let sub = a[1].to_ascii_uppercase();
    match sub.as_slice() {
        b"GET" if a.len() >= 3 => Ok(Reply::Map(
            sh.settings
                .get(&a[2..])
                .into_iter()
                .map(|(k, v)| (Reply::bulk(k), Reply::bulk(v)))
                .collect(),
        )),
        b"SET" if a.len() >= 4 && a.len().is_multiple_of(2) => {
            let pairs: Vec<(Vec<u8>, Vec<u8>)> = a[2..]
                .chunks(2)
                .map(|p| (p[0].to_vec(), p[1].to_vec()))
                .collect();
            sh.settings.set(&sh.ks, &pairs).map_err(fail)?;
            Ok(Reply::ok())
        }
        b"RESETSTAT" if a.len() == 2 => {
            sh.stats.reset();
            sh.ks.stats().reset();
            Ok(Reply::ok())
        }
        b"REWRITE" if a.len() == 2 => Err(fail(
            "The server is running without a config file (its settings are its command line)",
        )),
        _ => Err(fail(format!(
            "unknown subcommand or wrong number of arguments for '{}'. Try CONFIG HELP.",
            String::from_utf8_lossy(a[1])
        ))),
    }
}

/// `WAITAOF numlocal numreplicas timeout`: every write acknowledged so
/// far is made durable here (the store's sync stands for Redis's AOF
/// fsync), so the local count is 1; there are no replicas to wait for.
pub fn waitaof(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let ok = |b: &[u8]| parse_int(b).is_some_and(|n| n >= 0);
    if !ok(a[1]) || !ok(a[2]) || !ok(a[3]) {
        return Err(super::args::not_an_integer());
    }
    if parse_int(a[1]).unwrap_or(0) > 1 {
        return Err(fail("WAITAOF numlocal cannot be greater than 1"));
    }
    ctx.shared
        .ks
        .sync_seen()
        .map_err(|e| fail(format!("storage error: {e}")))?;
    Ok(Reply::Array(vec![Reply::Int(1), Reply::Int(0)]))
}

/// Stops the server as a signal does: no new connections, in-flight
/// commands finish, the store is synced and closed. Like Redis, it sends
/// no reply when it goes ahead.
pub fn shutdown(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    for opt in &a[1..] {
        if is(opt, "ABORT") {
            return Err(fail("No shutdown in progress."));
        }
        if !(is(opt, "NOSAVE") || is(opt, "SAVE") || is(opt, "NOW") || is(opt, "FORCE")) {
            return Err(syntax_error());
        }
    }
    ctx.shared.begin_shutdown();
    ctx.session.close_after_reply = true;
    ctx.session.silent = true;
    Ok(Reply::ok())
}

pub fn time(_: &mut Ctx<'_, '_>, _: &Args) -> CmdResult {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Ok(Reply::Array(vec![
        Reply::bulk(now.as_secs().to_string()),
        Reply::bulk(now.subsec_micros().to_string()),
    ]))
}

/// When the last `SAVE` (or `BGSAVE`) finished; the start before any.
pub fn lastsave(ctx: &mut Ctx<'_, '_>, _: &Args) -> CmdResult {
    Ok(Reply::Int(ctx.shared.last_save() as i64))
}

/// `SAVE`: writes what the engine holds in memory to its files and
/// syncs, so every write so far is durable and recovery replays
/// nothing (Redis writes a snapshot; ferrite's data is its files).
pub fn save(ctx: &mut Ctx<'_, '_>, _: &Args) -> CmdResult {
    ctx.shared
        .save()
        .map_err(|e| fail(format!("storage error: {e}")))?;
    Ok(Reply::ok())
}

/// `BGSAVE [SCHEDULE]`: `SAVE` on the background thread.
pub fn bgsave(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    if a.len() == 2 && !is(a[1], "SCHEDULE") {
        return Err(syntax_error());
    }
    ctx.shared.request_save();
    Ok(Reply::Status("Background saving started".into()))
}

/// `MEMORY USAGE key [SAMPLES n]`: the bytes of the key's records in
/// the store (keys and values, metadata and elements; a sorted set's
/// score index too), from `n` sampled elements of a larger collection
/// (5 by default, 0 for all), as Redis estimates from samples.
pub fn memory(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let sub = a[1].to_ascii_uppercase();
    match sub.as_slice() {
        b"USAGE" if a.len() == 3 || a.len() == 5 => {
            let samples = match a.get(3) {
                None => 5,
                Some(o) if is(o, "SAMPLES") => match parse_int(a[4]) {
                    Some(n) if n >= 0 => n as u64,
                    _ => return Err(super::args::not_an_integer()),
                },
                Some(_) => return Err(syntax_error()),
            };
            let f = ctx.tx.lookup(ctx.db(), a[2])?;
            let Some(m) = f.live() else {
                return Ok(Reply::Null);
            };
            let mut bytes = 1 + a[2].len() as u64 + m.encode().len() as u64;
            if let Some(c) = m.coll() {
                let mut seen = 0u64;
                let mut sum = 0u64;
                let limit = if samples == 0 { u64::MAX } else { samples };
                ctx.tx.scan_positions(f.slot, c, None, &mut |pos, _, v| {
                    seen += 1;
                    sum += pos.len() as u64 + v.len() as u64;
                    if seen >= limit {
                        std::ops::ControlFlow::Break(())
                    } else {
                        std::ops::ControlFlow::Continue(())
                    }
                })?;
                if c.kind == crate::model::Kind::List && c.size > 0 {
                    let last = c
                        .head
                        .wrapping_add(c.size - 1)
                        .min(c.head.wrapping_add(limit.saturating_sub(1)));
                    ctx.tx
                        .scan_items(f.slot, c, c.head, last, false, &mut |_, v| {
                            seen += 1;
                            sum += 8 + v.len() as u64;
                            std::ops::ControlFlow::Continue(())
                        })?;
                }
                // Every element record carries its collection's prefix.
                let per = sum.checked_div(seen).map_or(0, |p| p + 11);
                let mut elems = per * c.size;
                if c.kind == crate::model::Kind::ZSet {
                    // The score index repeats each member with its score.
                    elems += elems;
                }
                bytes += elems;
            }
            Ok(Reply::Int(bytes as i64))
        }
        b"DOCTOR" if a.len() == 2 => Ok(Reply::Verbatim(
            "ferrite keeps its data in the store's files; memory here is the store's cache \
             (maxmemory) and the server's buffers. INFO memory and INFO ferrite report them.\n"
                .into(),
        )),
        b"HELP" if a.len() == 2 => Ok(Reply::Array(
            [
                "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "DOCTOR",
                "    Return memory problems reports.",
                "USAGE <key> [SAMPLES <count>]",
                "    Return the bytes of the key's records in the store.",
                "HELP",
                "    Print this help.",
            ]
            .iter()
            .map(|s| Reply::Status((*s).into()))
            .collect(),
        )),
        _ => Err(fail(format!(
            "unknown subcommand or wrong number of arguments for '{}'. Try MEMORY HELP.",
            String::from_utf8_lossy(a[1])
        ))),
    }
}
