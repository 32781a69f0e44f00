//! The interpreter's contents: compiled scripts by SHA-1 (`EVAL`,
//! `SCRIPT LOAD`), function libraries (`FUNCTION LOAD`), and one run of
//! either inside a command's transaction.
//!
//! Invariants: a script is compiled once per body and named by the SHA-1
//! of its body; `redis.call` inside a run goes to the [`Host`] the run
//! was handed (the command layer: the same command table, checks and
//! transaction as the command that started the run, in a session of the
//! script's own); a storage failure inside a run fails the whole run,
//! whatever the script did with the error.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use mlua::{Function, Lua, MultiValue, Table, Value};

use super::convert::{from_lua, number_text, to_lua};
use super::host::{Host, Stopped};
use super::running::{Running, Stop};
use super::sandbox::{sha1_hex, Sandbox, KILLED, SHUT_DOWN};
use crate::reply::Reply;

/// A run's reply, or why it gave none.
pub type RunResult = Result<Reply, Stopped>;

/// What a script's shebang (`#!lua flags=...`) or a function's
/// registration declares.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flags {
    pub no_writes: bool,
}

struct Script {
    f: Function,
    flags: Flags,
    body: Vec<u8>,
}

/// A function of a loaded library.
pub struct Registered {
    pub f: Function,
    pub flags: Flags,
    pub library: String,
}

/// A library `FUNCTION LOAD` accepted.
pub struct Library {
    pub code: Vec<u8>,
    /// Its functions, by name, with their flags.
    pub functions: Vec<(String, Flags)>,
}

pub struct Vm {
    sandbox: Sandbox,
    /// The interpreter panicked part way through something (mlua refuses
    /// some resource exhaustions by panicking): it is rebuilt before its
    /// next use.
    broken: Cell<bool>,
    running: Arc<Running>,
    scripts: HashMap<String, Script>,
    pub libraries: BTreeMap<String, Library>,
    pub functions: HashMap<String, Registered>,
    /// What `INFO` reports, readable without this interpreter's lock
    /// (which a script calling `INFO` holds).
    counts: Arc<Counts>,
}

/// Scripts cached and functions loaded.
#[derive(Default)]
pub struct Counts {
    pub scripts: AtomicUsize,
    pub libraries: AtomicUsize,
    pub functions: AtomicUsize,
}

/// What a run is: `EVAL`/`EVALSHA` or `FCALL`, and whether read-only.
#[derive(Debug, Clone, Copy)]
pub struct RunKind {
    pub function: bool,
    pub read_only: bool,
}

impl Vm {
    pub fn new(running: Arc<Running>, counts: Arc<Counts>) -> mlua::Result<Self> {
        Ok(Self {
            sandbox: Sandbox::new(running.clone())?,
            broken: Cell::new(false),
            running,
            scripts: HashMap::new(),
            libraries: BTreeMap::new(),
            functions: HashMap::new(),
            counts,
        })
    }

    /// Drops every script and starts a fresh interpreter (`SCRIPT FLUSH`);
    /// loaded functions are loaded again into it.
    pub fn flush_scripts(&mut self) -> Result<(), String> {
        let libraries = std::mem::take(&mut self.libraries);
        self.scripts.clear();
        self.functions.clear();
        self.sandbox = Sandbox::new(self.running.clone()).map_err(|e| e.to_string())?;
        for (_, lib) in libraries {
            self.load_library(&lib.code, false)?;
        }
        self.recount();
        Ok(())
    }

    /// Runs `f`, containing a panic of the interpreter: the caller gets
    /// an error and the interpreter is rebuilt before its next use.
    fn contained<R>(&self, f: impl FnOnce() -> R) -> Result<R, String> {
        catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
            self.broken.set(true);
            let why = p
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| p.downcast_ref::<&str>().copied())
                .unwrap_or("unknown");
            log::error!("the script interpreter failed and is restarted: {why}");
            format!("the script interpreter failed ({why}); it was restarted")
        })
    }

    /// Rebuilds the interpreter after a contained panic.
    fn recover(&mut self) -> Result<(), Reply> {
        if self.broken.replace(false) {
            self.flush_scripts().map_err(Reply::err)?;
        }
        Ok(())
    }

    fn recount(&self) {
        self.counts
            .scripts
            .store(self.scripts.len(), Ordering::Relaxed);
        self.counts
            .libraries
            .store(self.libraries.len(), Ordering::Relaxed);
        self.counts
            .functions
            .store(self.functions.len(), Ordering::Relaxed);
    }

    /// The body of the script named `sha` (`SCRIPT SHOW`).
    pub fn script_body(&self, sha: &str) -> Option<&[u8]> {
        self.scripts
            .get(&sha.to_ascii_lowercase())
            .map(|s| s.body.as_slice())
    }

    pub fn has_script(&self, sha: &str) -> bool {
        self.scripts.contains_key(&sha.to_ascii_lowercase())
    }

    /// Compiles `body` unless it is known; its SHA-1.
    pub fn load_script(&mut self, body: &[u8]) -> Result<String, Reply> {
        self.recover()?;
        let sha = sha1_hex(body);
        if self.scripts.contains_key(&sha) {
            return Ok(sha);
        }
        let (flags, code) = shebang(body)?;
        let f = self
            .sandbox
            .lua
            .load(&*code)
            .set_name("@user_script")
            .set_mode(mlua::ChunkMode::Text)
            .set_environment(self.sandbox.view.clone())
            .into_function()
            .map_err(|e| {
                Reply::err(format!(
                    "Error compiling script (new function): {}",
                    lua_message(&e)
                ))
            })?;
        self.scripts.insert(
            sha.clone(),
            Script {
                f,
                flags,
                body: body.to_vec(),
            },
        );
        self.recount();
        Ok(sha)
    }

    /// Runs the script named `sha` (compiled before).
    pub fn eval(
        &mut self,
        host: &mut dyn Host,
        sha: &str,
        keys: &[&[u8]],
        argv: &[&[u8]],
        read_only: bool,
    ) -> RunResult {
        self.recover()?;
        let sha = sha.to_ascii_lowercase();
        let Some(script) = self.scripts.get(&sha) else {
            return Err(Stopped::Refused(Reply::Error(
                "NOSCRIPT No matching script. Please use EVAL.".into(),
            )));
        };
        let (f, flags) = (script.f.clone(), script.flags);
        let lua = &self.sandbox.lua;
        let g = &self.sandbox.globals;
        let list = |items: &[&[u8]]| -> mlua::Result<Table> {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, k) in items.iter().enumerate() {
                t.raw_set(i + 1, lua.create_string(k)?)?;
            }
            Ok(t)
        };
        let set = list(keys)
            .and_then(|k| g.raw_set("KEYS", k))
            .and_then(|()| list(argv))
            .and_then(|a| g.raw_set("ARGV", a));
        if let Err(e) = set {
            return Err(Stopped::Refused(Reply::err(e)));
        }
        let kind = RunKind {
            function: false,
            read_only: read_only || flags.no_writes,
        };
        self.run(host, &f, MultiValue::new(), kind, &sha)
    }

    /// Runs the function `name` of a loaded library.
    pub fn fcall(
        &mut self,
        host: &mut dyn Host,
        name: &[u8],
        keys: &[&[u8]],
        argv: &[&[u8]],
        read_only: bool,
    ) -> RunResult {
        self.recover()?;
        let name = String::from_utf8_lossy(name);
        let Some(r) = self.functions.get(name.as_ref()) else {
            return Err(Stopped::Refused(Reply::err("Function not found")));
        };
        if read_only && !r.flags.no_writes {
            return Err(Stopped::Refused(Reply::err(
                "Can not execute a script with write flag using *_ro command.",
            )));
        }
        let f = r.f.clone();
        let flags = r.flags;
        let lua = &self.sandbox.lua;
        let args = (|| -> mlua::Result<MultiValue> {
            let k = lua.create_table()?;
            for (i, x) in keys.iter().enumerate() {
                k.raw_set(i + 1, lua.create_string(x)?)?;
            }
            let a = lua.create_table()?;
            for (i, x) in argv.iter().enumerate() {
                a.raw_set(i + 1, lua.create_string(x)?)?;
            }
            Ok(MultiValue::from_iter([Value::Table(k), Value::Table(a)]))
        })()
        .map_err(|e| Stopped::Refused(Reply::err(e)))?;
        let kind = RunKind {
            function: true,
            read_only: read_only || flags.no_writes,
        };
        self.run(host, &f, args, kind, &name)
    }

    /// One run: `f` called with `args` while `redis.call` reaches `host`.
    fn run(
        &self,
        host: &mut dyn Host,
        f: &Function,
        args: MultiValue,
        kind: RunKind,
        name: &str,
    ) -> RunResult {
        let lua = &self.sandbox.lua;
        let hooks = &self.sandbox.hooks;
        host.begin();
        let call = RefCell::new(Call {
            host,
            kind,
            resp3: false,
            failed: false,
            running: &self.running,
        });
        self.running.start(kind.function);
        let outcome = self.contained(|| {
            lua.scope(|scope| {
                hooks.raw_set(
                    "command",
                    scope.create_function(|lua, args: MultiValue| {
                        call.borrow_mut().command(lua, args)
                    })?,
                )?;
                hooks.raw_set(
                    "setresp",
                    scope.create_function(|_, n: Value| {
                        let n = match n {
                            Value::Integer(n) => n,
                            Value::Number(f) => f as i64,
                            _ => 0,
                        };
                        if n != 2 && n != 3 {
                            return Err(mlua::Error::RuntimeError(
                                "RESP version must be 2 or 3.".into(),
                            ));
                        }
                        call.borrow_mut().resp3 = n == 3;
                        Ok(())
                    })?,
                )?;
                let run: Function = hooks.raw_get("run")?;
                let mut all = MultiValue::new();
                all.push_back(Value::Function(f.clone()));
                all.extend(args);
                let out: MultiValue = run.call(all)?;
                let mut it = out.into_iter();
                let ok = matches!(it.next(), Some(Value::Boolean(true)));
                let v = it.next().unwrap_or(Value::Nil);
                let resp3 = call.borrow().resp3;
                Ok(if ok {
                    Ok(from_lua(&v, resp3))
                } else {
                    Err(error_reply(lua, &v, name, kind.function))
                })
            })
        });
        let _ = hooks.raw_set("command", Value::Nil);
        let _ = hooks.raw_set("setresp", Value::Nil);
        let stop = self.running.stop();
        self.running.finish();
        let call = call.into_inner();
        if call.failed {
            return Err(Stopped::Storage);
        }
        match stop {
            Some(Stop::Shutdown) => {
                call.host.roll_back();
                return Err(Stopped::Refused(Reply::Error(SHUT_DOWN.into())));
            }
            Some(Stop::Killed) => return Err(Stopped::Refused(Reply::Error(KILLED.into()))),
            None => {}
        }
        match outcome {
            Ok(Ok(Ok(r))) => Ok(r),
            // A script's error keeps the writes made before it, as in
            // Redis: the run is not rolled back.
            Ok(Ok(Err(r))) => Ok(r),
            Ok(Err(e)) => Ok(Reply::err(lua_message(&e))),
            Err(why) => Ok(Reply::err(why)),
        }
    }

    /// `FUNCTION LOAD [REPLACE] code`: the library's name.
    pub fn load_library(&mut self, code: &[u8], replace: bool) -> Result<String, String> {
        self.recover().map_err(|r| format!("{r:?}"))?;
        let (engine, name) = library_header(code)?;
        if !engine.eq_ignore_ascii_case("lua") {
            return Err(format!("Engine '{engine}' not found"));
        }
        if self.libraries.contains_key(&name) && !replace {
            return Err(format!("Library '{name}' already exists"));
        }
        let lua = &self.sandbox.lua;
        let found: RefCell<Vec<(String, Function, Flags)>> = RefCell::new(Vec::new());
        let result = self.contained(|| lua.scope(|scope| {
            let register = scope.create_function(|_, args: MultiValue| {
                let (fname, f, flags) = registration(args)?;
                if !valid_name(&fname) {
                    return Err(mlua::Error::RuntimeError(
                        "Library names can only contain letters, numbers, or underscores(_) and must be at least one character long".replace("Library", "Function"),
                    ));
                }
                if found.borrow().iter().any(|(n, _, _)| *n == fname) {
                    return Err(mlua::Error::RuntimeError("Function already exists in the library".into()));
                }
                found.borrow_mut().push((fname, f, flags));
                Ok(())
            })?;
            // The loading code (and the functions it registers, when they
            // run) sees `register_function` over the whole `redis` table,
            // in globals as frozen as a script's.
            let r = lua.create_table()?;
            r.raw_set("register_function", register)?;
            let above = lua.create_table()?;
            above.raw_set("__index", self.sandbox.globals.raw_get::<Value>("redis")?)?;
            r.set_metatable(Some(above));
            let freeze: Function = self.sandbox.hooks.raw_get("freeze")?;
            let r: Table = freeze.call(r)?;
            let inner = lua.create_table()?;
            inner.raw_set("redis", r.clone())?;
            inner.raw_set("server", r)?;
            let meta = lua.create_table()?;
            meta.raw_set("__index", self.sandbox.view.clone())?;
            inner.set_metatable(Some(meta));
            let env: Table = freeze.call(inner)?;
            let chunk = lua
                .load(strip_header(code))
                .set_name("@user_function")
                .set_mode(mlua::ChunkMode::Text)
                .set_environment(env)
                .into_function()?;
            chunk.call::<()>(())
        }))?;
        if let Err(e) = result {
            return Err(format!("Error registering functions: {}", lua_message(&e)));
        }
        let found = found.into_inner();
        if found.is_empty() {
            return Err("No functions registered".into());
        }
        for (fname, _, _) in &found {
            if let Some(other) = self.functions.get(fname) {
                if other.library != name {
                    return Err(format!("Function {fname} already exists"));
                }
            }
        }
        self.remove_library(&name);
        let mut listed = Vec::new();
        for (fname, f, flags) in found {
            listed.push((fname.clone(), flags));
            self.functions.insert(
                fname,
                Registered {
                    f,
                    flags,
                    library: name.clone(),
                },
            );
        }
        self.libraries.insert(
            name.clone(),
            Library {
                code: code.to_vec(),
                functions: listed,
            },
        );
        self.recount();
        Ok(name)
    }

    pub fn remove_library(&mut self, name: &str) -> bool {
        let Some(lib) = self.libraries.remove(name) else {
            return false;
        };
        for (f, _) in lib.functions {
            self.functions.remove(&f);
        }
        self.recount();
        true
    }
}

/// The state a run's `redis.call` works through.
struct Call<'a, 'h> {
    host: &'a mut (dyn Host + 'h),
    kind: RunKind,
    resp3: bool,
    /// A call's storage failed: every later call is refused.
    failed: bool,
    running: &'a Running,
}

impl Call<'_, '_> {
    /// `redis.call`/`redis.pcall`: the reply as Lua sees it, and whether
    /// it is an error.
    fn command(&mut self, lua: &Lua, args: MultiValue) -> mlua::Result<(Value, bool)> {
        let fail = |lua: &Lua, text: &str| -> mlua::Result<(Value, bool)> {
            Ok((to_lua(lua, Reply::err(text), false)?, true))
        };
        if self.failed {
            return fail(lua, "storage error: the script's unit of work failed");
        }
        if args.is_empty() {
            return fail(
                lua,
                "Please specify at least one argument for this redis lib call",
            );
        }
        let mut owned: Vec<Vec<u8>> = Vec::with_capacity(args.len());
        for v in args.iter() {
            match v {
                Value::String(s) => owned.push(s.as_bytes().to_vec()),
                Value::Integer(n) => owned.push(n.to_string().into_bytes()),
                Value::Number(f) => owned.push(number_text(*f).into_bytes()),
                _ => return fail(lua, "Command arguments must be strings or integers"),
            }
        }
        let views: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        match self.host.call(&views, self.kind.read_only) {
            Ok(c) => {
                if c.wrote {
                    self.running.note_write();
                }
                let failed = c.reply.is_error();
                Ok((to_lua(lua, c.reply, self.resp3)?, failed))
            }
            Err(_) => {
                self.failed = true;
                fail(lua, "storage error: the script's unit of work failed")
            }
        }
    }
}

/// The error reply of a run that raised `v`: a command's error raised
/// by `redis.call` (with where), an error table, or a runtime error.
fn error_reply(lua: &Lua, v: &Value, name: &str, function: bool) -> Reply {
    let what = if function { "function" } else { "script" };
    if let Value::Table(t) = v {
        if let Ok(Value::String(e)) = t.raw_get::<Value>("err") {
            let text = super::convert::error_text(&e.as_bytes());
            return match t.raw_get::<Value>("where") {
                Ok(Value::String(w)) => {
                    let w = w.to_string_lossy();
                    let line = w.trim_end().trim_end_matches(':');
                    // A tail call (`return redis.call(...)`) leaves no
                    // line to name.
                    let line = line
                        .rsplit(':')
                        .next()
                        .filter(|l| !l.is_empty())
                        .unwrap_or("?");
                    Reply::Error(format!("{text} {what}: {name}, on @user_{what}:{line}."))
                }
                _ => Reply::Error(text),
            };
        }
    }
    let text = match v {
        Value::String(s) => s.to_string_lossy(),
        Value::Error(e) => lua_message(e),
        other => lua
            .coerce_string(other.clone())
            .ok()
            .flatten()
            .map(|s| s.to_string_lossy())
            .unwrap_or_else(|| format!("({})", other.type_name())),
    };
    let line = text
        .strip_prefix(&format!("user_{what}:"))
        .and_then(|r| r.split(':').next())
        .unwrap_or("?");
    let text = text.strip_prefix("ERR ").unwrap_or(&text);
    Reply::err(format!("{text} {what}: {name}, on @user_{what}:{line}."))
}

/// A Lua error's message without mlua's traceback.
fn lua_message(e: &mlua::Error) -> String {
    match e {
        mlua::Error::RuntimeError(s) | mlua::Error::SyntaxError { message: s, .. } => {
            s.lines().next().unwrap_or_default().to_string()
        }
        mlua::Error::CallbackError { cause, .. } => lua_message(cause),
        other => other
            .to_string()
            .lines()
            .next()
            .unwrap_or_default()
            .to_string(),
    }
}

/// A script's `#!lua flags=...` line: its flags, and the code to compile
/// (the line blanked, so line numbers stay).
fn shebang(body: &[u8]) -> Result<(Flags, std::borrow::Cow<'_, [u8]>), Reply> {
    if !body.starts_with(b"#!") {
        return Ok((Flags::default(), body.into()));
    }
    let end = body.iter().position(|&c| c == b'\n').unwrap_or(body.len());
    let line = String::from_utf8_lossy(&body[2..end]);
    let mut words = line.split_whitespace();
    let engine = words.next().unwrap_or("");
    if engine != "lua" {
        return Err(Reply::err(format!(
            "Unexpected engine in script shebang: {engine}"
        )));
    }
    let mut flags = Flags::default();
    for w in words {
        let Some(list) = w.strip_prefix("flags=") else {
            return Err(Reply::err(format!("Unknown lua shebang option: {w}")));
        };
        for f in list.split(',').filter(|f| !f.is_empty()) {
            match f {
                "no-writes" => flags.no_writes = true,
                "allow-oom" | "allow-stale" | "no-cluster" | "allow-cross-slot-keys" => {}
                other => {
                    return Err(Reply::err(format!(
                        "Unexpected flag in script shebang: {other}"
                    )))
                }
            }
        }
    }
    let mut code = body.to_vec();
    code[..end].fill(b' ');
    Ok((flags, code.into()))
}

/// `#!lua name=mylib`: the engine and the library name.
fn library_header(code: &[u8]) -> Result<(String, String), String> {
    if !code.starts_with(b"#!") {
        return Err("Missing library metadata".into());
    }
    let end = code.iter().position(|&c| c == b'\n').unwrap_or(code.len());
    let line = String::from_utf8_lossy(&code[2..end]);
    let mut words = line.split_whitespace();
    let engine = words.next().unwrap_or("").to_string();
    let mut name = None;
    for w in words {
        match w.split_once('=') {
            Some(("name", n)) => name = Some(n.to_string()),
            _ => return Err(format!("Invalid metadata value given: {w}")),
        }
    }
    let name = name.ok_or("Library name was not given")?;
    if !valid_name(&name) {
        return Err("Library names can only contain letters, numbers, or underscores(_) and must be at least one character long".into());
    }
    Ok((engine, name))
}

fn strip_header(code: &[u8]) -> Vec<u8> {
    let end = code.iter().position(|&c| c == b'\n').unwrap_or(code.len());
    let mut c = code.to_vec();
    c[..end].fill(b' ');
    c
}

fn valid_name(n: &str) -> bool {
    !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// `register_function(name, f)` or `register_function{function_name=,
/// callback=, flags=}`.
fn registration(args: MultiValue) -> mlua::Result<(String, Function, Flags)> {
    let bad = |t: &str| mlua::Error::RuntimeError(t.into());
    let mut it = args.into_iter();
    match (it.next(), it.next()) {
        (Some(Value::String(n)), Some(Value::Function(f))) => {
            Ok((n.to_string_lossy(), f, Flags::default()))
        }
        (Some(Value::Table(t)), None) => {
            let mut name = None;
            let mut f = None;
            let mut flags = Flags::default();
            for pair in t.pairs::<String, Value>() {
                let (k, v) = pair?;
                match (k.as_str(), v) {
                    ("function_name", Value::String(s)) => name = Some(s.to_string_lossy()),
                    ("callback", Value::Function(x)) => f = Some(x),
                    ("flags", Value::Table(list)) => {
                        for x in list.sequence_values::<String>() {
                            match x?.as_str() {
                                "no-writes" => flags.no_writes = true,
                                "allow-oom"
                                | "allow-stale"
                                | "no-cluster"
                                | "allow-cross-slot-keys" => {}
                                _ => return Err(bad("unknown flag given")),
                            }
                        }
                    }
                    ("description", _) => {}
                    (k, _) => {
                        return Err(bad(&format!(
                            "unknown argument given to register_function: {k}"
                        )))
                    }
                }
            }
            Ok((
                name.ok_or_else(|| {
                    bad("redis.register_function must get a function name argument")
                })?,
                f.ok_or_else(|| bad("redis.register_function must get a callback argument"))?,
                flags,
            ))
        }
        _ => Err(bad("wrong number of arguments to redis.register_function")),
    }
}
