//! `EVAL EVALSHA EVAL_RO EVALSHA_RO FCALL FCALL_RO SCRIPT FUNCTION`: the
//! commands that load and run Lua (the interpreter is `script`'s).
//! Outside `MULTI` the executor hands the running ones to the script
//! thread; these handlers run there, or inside an `EXEC`.

use super::args::{is, parse_int};
use super::{fail, syntax_error, CmdResult, Ctx, Fail, Kind};
use crate::glob;
use crate::model::{layout, ModelError, Savepoint};
use crate::reply::Reply;
use crate::request::Args;
use crate::script::{Called, Failed, Host, KillRefused, RunResult, Stopped, Vm};
use crate::session::Session;
use crate::shared::Shared;

/// A run's `redis.call`: the command table, its checks and the caller's
/// transaction, in a session of the script's own (its `SELECT` does not
/// reach the caller).
struct ScriptHost<'a, 'c, 't> {
    ctx: &'a mut Ctx<'c, 't>,
    session: Session,
    start: Option<Savepoint>,
    failure: Option<ModelError>,
}

impl<'a, 'c, 't> ScriptHost<'a, 'c, 't> {
    fn new(ctx: &'a mut Ctx<'c, 't>) -> Self {
        let mut session = Session::new(
            ctx.session.id,
            String::new(),
            true,
            ctx.session.mailbox.clone(),
        );
        session.db = ctx.session.db;
        session.scripted = true;
        Self {
            ctx,
            session,
            start: None,
            failure: None,
        }
    }

    /// The command's answer to a run's outcome.
    fn answer(&mut self, run: RunResult) -> CmdResult {
        match run {
            Ok(r) => Ok(r),
            Err(Stopped::Refused(r)) => Err(Fail::Reply(r)),
            Err(Stopped::Storage) => match self.failure.take() {
                Some(e) => Err(Fail::Storage(e)),
                None => Err(fail("storage error: the script's unit of work failed")),
            },
        }
    }
}

impl Host for ScriptHost<'_, '_, '_> {
    fn begin(&mut self) {
        self.start = Some(self.ctx.tx.savepoint());
    }

    fn roll_back(&mut self) {
        if let Some(sp) = self.start.take() {
            self.ctx.tx.rollback(sp);
        }
    }

    fn call(&mut self, views: &[&[u8]], read_only: bool) -> Result<Called, Failed> {
        let refused = |text: &str| {
            Ok(Called {
                reply: Reply::err(text),
                wrote: false,
            })
        };
        let Some((index, spec)) = super::lookup_indexed(views[0]) else {
            return refused("Unknown command called from script");
        };
        if spec.has(super::NOSCRIPT) {
            return refused("This command is not allowed from script");
        }
        if !super::arity_ok(spec, views) {
            return refused("Wrong number of args calling command from script");
        }
        if spec.kind == Kind::Write && read_only {
            return refused("Write commands are not allowed from read-only scripts.");
        }
        if spec.kind == Kind::Write && self.ctx.shared.ks.is_replica() {
            return refused("READONLY You can't write against a read only replica.");
        }
        let shared = self.ctx.shared;
        let t0 = std::time::Instant::now();
        let sp = self.ctx.tx.savepoint();
        let result = {
            let mut inner = Ctx {
                tx: self.ctx.tx,
                session: &mut self.session,
                shared,
                in_exec: true,
            };
            (spec.run)(&mut inner, views)
        };
        let reply = match result {
            Ok(r) => r,
            Err(Fail::Reply(r)) => {
                self.ctx.tx.rollback(sp);
                r
            }
            Err(Fail::Storage(e)) => {
                self.failure = Some(e);
                return Err(Failed);
            }
        };
        let wrote = self.ctx.tx.wrote_since(&sp);
        if wrote {
            shared.stats.count_dirty();
        }
        if let Err(e) = self.ctx.tx.expire_stale() {
            self.failure = Some(e);
            return Err(Failed);
        }
        shared
            .stats
            .count_call(index, t0.elapsed().as_micros() as u64, reply.is_error());
        if let Reply::Error(e) = &reply {
            shared.stats.count_error(e);
        }
        Ok(Called { reply, wrote })
    }
}

/// Runs `run` on the interpreter with `ctx`'s side of `redis.call`.
fn run_script(
    ctx: &mut Ctx<'_, '_>,
    run: impl FnOnce(&mut Vm, &mut dyn Host) -> RunResult,
) -> CmdResult {
    let shared = ctx.shared;
    let mut vm = shared.scripts.vm();
    let mut host = ScriptHost::new(ctx);
    let outcome = run(&mut vm, &mut host);
    host.answer(outcome)
}

/// Keys, then arguments, of a script's call.
type KeysAndArgs<'a> = (&'a [&'a [u8]], &'a [&'a [u8]]);

/// `numkeys key... arg...` from `a[2..]`: the keys and the arguments.
fn split_keys<'a>(a: &'a Args<'a>) -> Result<KeysAndArgs<'a>, Fail> {
    let n = parse_int(a[2]).ok_or_else(super::args::not_an_integer)?;
    if n < 0 {
        return Err(fail("Number of keys can't be negative"));
    }
    let rest = &a[3..];
    if n as usize > rest.len() {
        return Err(fail("Number of keys can't be greater than number of args"));
    }
    Ok(rest.split_at(n as usize))
}

fn eval_body(ctx: &mut Ctx<'_, '_>, a: &Args, read_only: bool) -> CmdResult {
    let (keys, argv) = split_keys(a)?;
    run_script(ctx, |vm, host| {
        let sha = vm.load_script(a[1])?;
        vm.eval(host, &sha, keys, argv, read_only)
    })
}

fn eval_sha(ctx: &mut Ctx<'_, '_>, a: &Args, read_only: bool) -> CmdResult {
    let (keys, argv) = split_keys(a)?;
    let sha = String::from_utf8_lossy(a[1]);
    run_script(ctx, |vm, host| vm.eval(host, &sha, keys, argv, read_only))
}

pub fn eval(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    eval_body(ctx, a, false)
}

pub fn eval_ro(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    eval_body(ctx, a, true)
}

pub fn evalsha(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    eval_sha(ctx, a, false)
}

pub fn evalsha_ro(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    eval_sha(ctx, a, true)
}

fn call_function(ctx: &mut Ctx<'_, '_>, a: &Args, read_only: bool) -> CmdResult {
    let (keys, argv) = split_keys(a)?;
    run_script(ctx, |vm, host| vm.fcall(host, a[1], keys, argv, read_only))
}

pub fn fcall(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    call_function(ctx, a, false)
}

pub fn fcall_ro(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    call_function(ctx, a, true)
}

fn unknown_sub(cmd: &str, a: &Args) -> Fail {
    fail(format!(
        "unknown subcommand or wrong number of arguments for '{}|{}'. Try {} HELP.",
        cmd.to_lowercase(),
        String::from_utf8_lossy(a[1]).to_lowercase(),
        cmd
    ))
}

/// `ASYNC|SYNC` or nothing, as `FLUSH` takes.
fn flush_mode(a: &Args, at: usize) -> Result<(), Fail> {
    match a.len() {
        n if n == at => Ok(()),
        n if n == at + 1 && (is(a[at], "ASYNC") || is(a[at], "SYNC")) => Ok(()),
        _ => Err(syntax_error()),
    }
}

/// `SCRIPT LOAD|EXISTS|FLUSH|KILL|SHOW|HELP`.
pub fn script(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let shared = ctx.shared;
    let sub = a[1].to_ascii_uppercase();
    match sub.as_slice() {
        b"LOAD" if a.len() == 3 => Ok(Reply::bulk(shared.scripts.vm().load_script(a[2])?)),
        b"EXISTS" if a.len() >= 3 => {
            let vm = shared.scripts.vm();
            Ok(Reply::Array(
                a[2..]
                    .iter()
                    .map(|s| Reply::Int(i64::from(vm.has_script(&String::from_utf8_lossy(s)))))
                    .collect(),
            ))
        }
        b"FLUSH" => {
            flush_mode(a, 2)?;
            shared.scripts.vm().flush_scripts().map_err(fail)?;
            Ok(Reply::ok())
        }
        b"KILL" if a.len() == 2 => kill(shared, false),
        b"SHOW" if a.len() == 3 => match shared
            .scripts
            .vm()
            .script_body(&String::from_utf8_lossy(a[2]))
        {
            Some(body) => Ok(Reply::bulk(body)),
            None => Err(Fail::Reply(Reply::Error(
                "NOSCRIPT No matching script".into(),
            ))),
        },
        b"HELP" if a.len() == 2 => Ok(help(&[
            "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "EXISTS <sha1> [<sha1> ...]",
            "    Return information about the existence of the scripts in the script cache.",
            "FLUSH [ASYNC|SYNC]",
            "    Flush the Lua scripts cache.",
            "KILL",
            "    Kill the currently executing Lua script.",
            "LOAD <script>",
            "    Load a script into the scripts cache without executing it.",
            "SHOW <sha1>",
            "    Show the script body of the given SHA1.",
        ])),
        _ => Err(unknown_sub("SCRIPT", a)),
    }
}

fn help(lines: &[&str]) -> Reply {
    Reply::Array(lines.iter().map(|l| Reply::Status(l.to_string())).collect())
}

/// `SCRIPT KILL` (`function` false) or `FUNCTION KILL`.
fn kill(shared: &Shared, function: bool) -> CmdResult {
    match shared.scripts.running.kill(function) {
        Ok(()) => Ok(Reply::ok()),
        Err(KillRefused::NotBusy) => Err(Fail::Reply(Reply::Error(
            "NOTBUSY No scripts in execution right now.".into(),
        ))),
        Err(KillRefused::OtherKind) if function => Err(Fail::Reply(Reply::Error(
            "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.".into(),
        ))),
        Err(KillRefused::OtherKind) => Err(Fail::Reply(Reply::Error(
            "BUSY Redis is busy running a function. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.".into(),
        ))),
        Err(KillRefused::Unkillable) => Err(Fail::Reply(Reply::Error(
            "UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.".into(),
        ))),
    }
}

/// `FUNCTION LOAD|DELETE|FLUSH|LIST|KILL|STATS|HELP`.
pub fn function(ctx: &mut Ctx<'_, '_>, a: &Args) -> CmdResult {
    let shared = ctx.shared;
    let sub = a[1].to_ascii_uppercase();
    match sub.as_slice() {
        b"LOAD" if a.len() == 3 || a.len() == 4 => {
            let replace = a.len() == 4;
            if replace && !is(a[2], "REPLACE") {
                return Err(fail(format!(
                    "Unknown option given: {}",
                    String::from_utf8_lossy(a[2])
                )));
            }
            let code = a[a.len() - 1];
            let name = shared
                .scripts
                .vm()
                .load_library(code, replace)
                .map_err(fail)?;
            // Libraries are data: they live in the store and load again at
            // start, as Redis keeps them in its RDB and AOF.
            ctx.tx.put(layout::library(&name), code.to_vec())?;
            Ok(Reply::bulk(name))
        }
        b"DELETE" if a.len() == 3 => {
            let name = String::from_utf8_lossy(a[2]);
            if shared.scripts.vm().remove_library(&name) {
                ctx.tx.delete(layout::library(&name))?;
                Ok(Reply::ok())
            } else {
                Err(fail("Library not found"))
            }
        }
        b"FLUSH" => {
            flush_mode(a, 2)?;
            let mut vm = shared.scripts.vm();
            let names: Vec<String> = vm.libraries.keys().cloned().collect();
            for n in names {
                vm.remove_library(&n);
                ctx.tx.delete(layout::library(&n))?;
            }
            Ok(Reply::ok())
        }
        b"LIST" => list(ctx.shared, a),
        b"KILL" if a.len() == 2 => kill(shared, true),
        b"STATS" if a.len() == 2 => Ok(stats(shared)),
        b"HELP" if a.len() == 2 => Ok(help(&[
            "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "LOAD [REPLACE] <FUNCTION CODE>",
            "DELETE <LIBRARY NAME>",
            "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
            "FLUSH [ASYNC|SYNC]",
            "KILL",
            "STATS",
        ])),
        b"DUMP" | b"RESTORE" => Err(fail(
            "FUNCTION DUMP and RESTORE are not served: load libraries with FUNCTION LOAD",
        )),
        _ => Err(unknown_sub("FUNCTION", a)),
    }
}

/// `FUNCTION STATS`, from counters (it answers while a script runs).
fn stats(shared: &Shared) -> Reply {
    use std::sync::atomic::Ordering::Relaxed;
    let counts = &shared.scripts.counts;
    let running = if shared.scripts.busy(0) {
        Reply::Map(vec![(
            Reply::bulk("duration_ms"),
            Reply::Int(shared.scripts.running.elapsed_ms() as i64),
        )])
    } else {
        Reply::Null
    };
    Reply::Map(vec![
        (Reply::bulk("running_script"), running),
        (
            Reply::bulk("engines"),
            Reply::Map(vec![(
                Reply::bulk("LUA"),
                Reply::Map(vec![
                    (
                        Reply::bulk("libraries_count"),
                        Reply::Int(counts.libraries.load(Relaxed) as i64),
                    ),
                    (
                        Reply::bulk("functions_count"),
                        Reply::Int(counts.functions.load(Relaxed) as i64),
                    ),
                ]),
            )]),
        ),
    ])
}

/// `FUNCTION LIST [LIBRARYNAME pattern] [WITHCODE]`.
fn list(shared: &Shared, a: &Args) -> CmdResult {
    let mut code = false;
    let mut pattern: Option<&[u8]> = None;
    let mut i = 2;
    while i < a.len() {
        if is(a[i], "WITHCODE") && !code {
            code = true;
            i += 1;
        } else if is(a[i], "LIBRARYNAME") && pattern.is_none() && i + 1 < a.len() {
            pattern = Some(a[i + 1]);
            i += 2;
        } else {
            return Err(fail(format!(
                "Unknown argument {}",
                String::from_utf8_lossy(a[i])
            )));
        }
    }
    let vm = shared.scripts.vm();
    let mut out = Vec::new();
    for (name, lib) in &vm.libraries {
        if pattern.is_some_and(|p| !glob::matches(p, name.as_bytes())) {
            continue;
        }
        let functions = lib
            .functions
            .iter()
            .map(|(f, flags)| {
                let mut fl = Vec::new();
                if flags.no_writes {
                    fl.push(Reply::bulk("no-writes"));
                }
                Reply::Map(vec![
                    (Reply::bulk("name"), Reply::bulk(f.as_str())),
                    (Reply::bulk("description"), Reply::Null),
                    (Reply::bulk("flags"), Reply::Set(fl)),
                ])
            })
            .collect();
        let mut entry = vec![
            (Reply::bulk("library_name"), Reply::bulk(name.as_str())),
            (Reply::bulk("engine"), Reply::bulk("LUA")),
            (Reply::bulk("functions"), Reply::Array(functions)),
        ];
        if code {
            entry.push((Reply::bulk("library_code"), Reply::Bulk(lib.code.clone())));
        }
        out.push(Reply::Map(entry));
    }
    Ok(Reply::Array(out))
}

/// What a connection may do while a script is busy, without the
/// keyspace lock the script holds: `SCRIPT KILL`, `FUNCTION KILL`,
/// `FUNCTION STATS`, `MULTI`, `DISCARD`, and `SHUTDOWN` (which stops the
/// script, dropping its writes). `None`: the
/// command runs as usual.
pub fn lockless(shared: &Shared, session: &mut Session, a: &Args) -> Option<Reply> {
    let name = a[0];
    let sub = a.get(1).copied().unwrap_or_default();
    let reply = |r: CmdResult| match r {
        Ok(r) => r,
        Err(Fail::Reply(r)) => r,
        Err(Fail::Storage(e)) => Reply::err(e),
    };
    if is(name, "SCRIPT") && is(sub, "KILL") && a.len() == 2 {
        return Some(reply(kill(shared, false)));
    }
    if is(name, "FUNCTION") && is(sub, "KILL") && a.len() == 2 {
        return Some(reply(kill(shared, true)));
    }
    if is(name, "FUNCTION") && is(sub, "STATS") && a.len() == 2 {
        return Some(stats(shared));
    }
    let busy = shared.scripts.busy(shared.settings.busy_ms());
    // Opening or dropping a transaction touches the session alone, and
    // goes ahead during a busy script, as in Redis: what is queued
    // meanwhile is refused with BUSY, which aborts the EXEC.
    if busy && is(name, "MULTI") && a.len() == 1 {
        return Some(reply(super::transaction::begin(session)));
    }
    if busy && is(name, "DISCARD") && a.len() == 1 {
        return Some(reply(super::transaction::drop_transaction(shared, session)));
    }
    if is(name, "SHUTDOWN") && busy {
        shared.scripts.running.abort();
        shared.begin_shutdown();
        session.close_after_reply = true;
        session.silent = true;
        return Some(Reply::ok());
    }
    None
}

/// Whether `a` may run while a script is busy (Redis's `allow-busy`).
pub fn allowed_while_busy(a: &Args) -> bool {
    let name = a[0];
    let sub = a.get(1).copied().unwrap_or_default();
    [
        "AUTH", "HELLO", "QUIT", "RESET", "SHUTDOWN", "MULTI", "DISCARD",
    ]
    .iter()
    .any(|n| is(name, n))
        || ((is(name, "SCRIPT") || is(name, "FUNCTION")) && is(sub, "KILL"))
        || (is(name, "FUNCTION") && is(sub, "STATS"))
}

/// The `BUSY` reply while a script or function runs long.
pub fn busy_reply(shared: &Shared) -> Reply {
    if shared.scripts.running.is_function() {
        Reply::Error("BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.".into())
    } else {
        Reply::Error("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.".into())
    }
}
