//! The interpreter scripts run in: Lua 5.1 (the version Redis embeds)
//! with the base, `string`, `table` and `math` libraries, Redis's `bit`,
//! `cjson` and `cmsgpack`, `os.clock`, and the `redis` (alias `server`) table; no
//! `io`, the rest of `os`, `package`, `load`, `loadfile`, `dofile` or
//! `print`, and `loadstring` refuses bytecode. `prelude.lua` freezes the
//! globals and libraries.
//!
//! Invariants: scripts share one set of globals they cannot change;
//! `impl.command` and `impl.setresp` exist only while a script runs
//! (the runner installs them for its run); the count hook lets a kill
//! or a shutdown stop any script within [`HOOK_EVERY`] instructions.

use std::sync::Arc;

use mlua::{HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Table, Value, VmState};

use super::running::{Running, Stop};

/// Lua instructions between two looks at whether the script is to stop.
pub const HOOK_EVERY: u32 = 10_000;

/// The error a killed script ends with.
pub const KILLED: &str = "ERR Script killed by user with SCRIPT KILL...";
/// The error a script stopped by `SHUTDOWN NOSAVE` ends with.
pub const SHUT_DOWN: &str = "ERR Script stopped: the server is shutting down";

pub struct Sandbox {
    pub lua: Lua,
    /// The real globals (where `KEYS` and `ARGV` are set).
    pub globals: Table,
    /// What scripts see as their globals.
    pub view: Table,
    /// The server's hooks: `command`, `setresp`, `run`.
    pub hooks: Table,
}

impl Sandbox {
    pub fn new(running: Arc<Running>) -> mlua::Result<Self> {
        let lua = Lua::new_with(
            StdLib::TABLE | StdLib::STRING | StdLib::MATH,
            LuaOptions::new(),
        )?;
        let g = lua.globals();
        for name in ["loadfile", "dofile", "print"] {
            g.raw_set(name, Value::Nil)?;
        }
        g.raw_set("bit", super::bit::library(&lua)?)?;
        g.raw_set("cjson", super::json::library(&lua)?)?;
        g.raw_set("cmsgpack", super::msgpack::library(&lua)?)?;
        // Of `os`, only the clock (as Redis 7.2 gives scripts).
        let os = lua.create_table()?;
        os.raw_set(
            "clock",
            lua.create_function(|_, ()| {
                let mut ts = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                // SAFETY: `ts` is a valid timespec the call fills in.
                let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
                if rc != 0 {
                    return Err(mlua::Error::RuntimeError("os.clock: no CPU clock".into()));
                }
                Ok(ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9)
            })?,
        )?;
        g.raw_set("os", os)?;
        let hooks = lua.create_table()?;
        hooks.raw_set("redis", redis_table(&lua)?)?;
        let r = running.clone();
        hooks.raw_set(
            "stopping",
            lua.create_function(move |_, ()| Ok(r.stop().is_some()))?,
        )?;
        let view: Table = lua
            .load(include_str!("prelude.lua"))
            .set_name("=prelude")
            .call((g.clone(), hooks.clone()))?;
        lua.set_hook(
            HookTriggers::new().every_nth_instruction(HOOK_EVERY),
            move |_, _| match running.stop() {
                None => Ok(VmState::Continue),
                Some(Stop::Killed) => Err(mlua::Error::RuntimeError(KILLED.into())),
                Some(Stop::Shutdown) => Err(mlua::Error::RuntimeError(SHUT_DOWN.into())),
            },
        );
        Ok(Self {
            lua,
            globals: g,
            view,
            hooks,
        })
    }
}

/// The parts of `redis` that need no running command.
fn redis_table(lua: &Lua) -> mlua::Result<Table> {
    let r = lua.create_table()?;
    r.raw_set(
        "sha1hex",
        lua.create_function(|_, args: MultiValue| match args.front() {
            Some(Value::String(s)) if args.len() == 1 => Ok(sha1_hex(&s.as_bytes())),
            _ => Err(mlua::Error::RuntimeError(
                "wrong number of arguments or wrong argument type".into(),
            )),
        })?,
    )?;
    r.raw_set(
        "error_reply",
        lua.create_function(|lua, s: mlua::String| {
            let t = lua.create_table()?;
            t.raw_set("err", super::convert::error_text(&s.as_bytes()))?;
            Ok(t)
        })?,
    )?;
    r.raw_set(
        "status_reply",
        lua.create_function(|lua, s: mlua::String| {
            let t = lua.create_table()?;
            t.raw_set("ok", s)?;
            Ok(t)
        })?,
    )?;
    r.raw_set(
        "log",
        lua.create_function(|lua, args: MultiValue| {
            let mut it = args.into_iter();
            let level = match it.next() {
                Some(Value::Integer(n)) => n,
                Some(Value::Number(n)) => n as i64,
                _ => {
                    return Err(mlua::Error::RuntimeError(
                        "First argument must be a number (log level).".into(),
                    ))
                }
            };
            let mut text = String::new();
            for v in it {
                if let Some(s) = lua.coerce_string(v)? {
                    if !text.is_empty() {
                        text.push(' ');
                    }
                    text.push_str(&s.to_string_lossy());
                }
            }
            match level {
                0 => log::debug!("script: {text}"),
                1 | 2 => log::info!("script: {text}"),
                _ => log::warn!("script: {text}"),
            }
            Ok(())
        })?,
    )?;
    for (name, v) in [
        ("LOG_DEBUG", 0),
        ("LOG_VERBOSE", 1),
        ("LOG_NOTICE", 2),
        ("LOG_WARNING", 3),
        ("REPL_NONE", 0),
        ("REPL_AOF", 1),
        ("REPL_SLAVE", 2),
        ("REPL_REPLICA", 2),
        ("REPL_ALL", 3),
    ] {
        r.raw_set(name, v)?;
    }
    r.raw_set("REDIS_VERSION", crate::REDIS_VERSION)?;
    r.raw_set("REDIS_VERSION_NUM", version_num(crate::REDIS_VERSION))?;
    // Every write is carried as the command that made it: the effects
    // replication of Redis 7 is the only mode, so these change nothing.
    r.raw_set("replicate_commands", lua.create_function(|_, ()| Ok(true))?)?;
    r.raw_set("set_repl", lua.create_function(|_, _: Value| Ok(()))?)?;
    r.raw_set("breakpoint", lua.create_function(|_, ()| Ok(false))?)?;
    r.raw_set("debug", lua.create_function(|_, _: MultiValue| Ok(()))?)?;
    Ok(r)
}

fn version_num(v: &str) -> i64 {
    v.split('.')
        .map(|p| p.parse::<i64>().unwrap_or(0))
        .chain(std::iter::repeat(0))
        .take(3)
        .fold(0, |acc, p| acc * 256 + p)
}

/// The lowercase hex SHA-1 of `b`, as scripts are named.
pub fn sha1_hex(b: &[u8]) -> String {
    sha1_smol::Sha1::from(b).digest().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox() -> Sandbox {
        Sandbox::new(Arc::new(Running::default())).unwrap()
    }

    fn run(s: &Sandbox, code: &str) -> Result<Value, String> {
        let f = s
            .lua
            .load(code)
            .set_name("@user_script")
            .set_environment(s.view.clone())
            .into_function()
            .map_err(|e| e.to_string())?;
        let run: mlua::Function = s.hooks.raw_get("run").unwrap();
        let (ok, v): (bool, Value) = run.call(f).map_err(|e| format!("call failed: {e:?}"))?;
        if ok {
            Ok(v)
        } else {
            Err(match v {
                Value::Error(e) => format!("E[{e}]"),
                other => format!("{} {other:?}", other.type_name()),
            })
        }
    }

    #[test]
    fn globals_and_libraries_are_frozen() {
        let s = sandbox();
        for code in [
            "a = 10",
            "setmetatable(_G, {})",
            "local g = getmetatable(_G); g.__index = {}",
            "redis = function() return 1 end",
            "_G = {}",
            "redis.call = function() return 1 end",
            "cjson.encode = function() return 1 end",
            "bit.band = function() return 1 end",
            "rawset(_G, 'x', 1)",
        ] {
            let e = run(&s, code).unwrap_err();
            assert!(
                e.contains("Attempt to modify a readonly table"),
                "{code}: {e}"
            );
        }
        let e = run(&s, "return a").unwrap_err();
        assert!(
            e.contains("Script attempted to access nonexistent global variable 'a'"),
            "{e}"
        );
        for missing in ["print", "loadfile", "dofile", "io", "load"] {
            let e = run(&s, &format!("return {missing}")).unwrap_err();
            assert!(e.contains("nonexistent global"), "{missing}: {e}");
        }
        assert!(run(&s, "return string.upper('a') .. math.floor(2.5)").is_ok());
        assert!(run(&s, "return os.clock()").is_ok());
        assert!(run(&s, "os.execute('true')").is_err());
        assert!(run(
            &s,
            "return loadstring(string.dump(function() return 1 end))()"
        )
        .is_err());
        assert!(run(&s, "return redis.sha1hex()").is_err());
    }

    #[test]
    fn a_stopped_script_cannot_swallow_its_stop() {
        let running = Arc::new(Running::default());
        let s = Sandbox::new(running.clone()).unwrap();
        running.start(false);
        running.kill(false).unwrap();
        let e = run(
            &s,
            "local f = function() while true do end end while true do pcall(f) end",
        )
        .unwrap_err();
        assert!(e.contains("killed by user"), "got: {e:?}");
    }

    #[test]
    fn redis_helpers_answer_as_redis_does() {
        let s = sandbox();
        let v = run(&s, "return redis.sha1hex('')").unwrap();
        assert_eq!(
            v.as_str().unwrap().as_ref() as &str,
            "da39a3ee5e6b4b0d3255bfef95601890afd80709"
        );
        let v = run(&s, "return redis.error_reply('MY_CODE x').err").unwrap();
        assert_eq!(v.as_str().unwrap().as_ref() as &str, "MY_CODE x");
        let v = run(&s, "return server.status_reply('FINE').ok").unwrap();
        assert_eq!(v.as_str().unwrap().as_ref() as &str, "FINE");
        assert_eq!(version_num("7.0.0"), 0x070000);
    }
}
