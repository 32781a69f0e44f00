//! Lua scripting against the server: `EVAL`/`EVALSHA`/`SCRIPT`,
//! `FUNCTION`/`FCALL` (libraries kept across a restart), atomicity under
//! concurrent clients, and a runaway script answered with `BUSY` and
//! stopped by `SCRIPT KILL` or `SHUTDOWN NOSAVE`.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::time::{Duration, Instant};

use common::{Client, TestServer, Value, ENGINES};
use ferrite::EngineKind;
use Value::{Array, Bulk, Error, Int, Null, Status};

fn b(s: &str) -> Value {
    Value::bulk(s)
}

fn err_starts(v: &Value, prefix: &str) -> bool {
    matches!(v, Error(e) if e.starts_with(prefix))
}

fn scripts(c: &mut Client) {
    assert_eq!(c.cmd(&["EVAL", "return 'hello'", "0"]), b("hello"));
    assert_eq!(
        c.cmd(&["EVAL", "return {1,2,3,'ciao',{1,2}}", "0"]),
        Array(vec![
            Int(1),
            Int(2),
            Int(3),
            b("ciao"),
            Array(vec![Int(1), Int(2)])
        ])
    );
    assert_eq!(c.cmd(&["EVAL", "return 100.5", "0"]), Int(100));
    assert_eq!(c.cmd(&["EVAL", "return true", "0"]), Int(1));
    assert_eq!(c.cmd(&["EVAL", "return false", "0"]), Null);
    assert_eq!(
        c.cmd(&["EVAL", "return {ok='fine'}", "0"]),
        Status("fine".into())
    );
    assert_eq!(
        c.cmd(&["EVAL", "return {err='MY bad'}", "0"]),
        Error("MY bad".into())
    );
    assert_eq!(
        c.cmd(&[
            "EVAL",
            "return {KEYS[1],KEYS[2],ARGV[1]}",
            "2",
            "a",
            "b",
            "c"
        ]),
        Array(vec![b("a"), b("b"), b("c")])
    );
    // Writes and reads through redis.call, in the caller's database.
    assert_eq!(
        c.cmd(&[
            "EVAL",
            "redis.call('set', KEYS[1], ARGV[1]); return redis.call('get', KEYS[1])",
            "1",
            "sk",
            "sv"
        ]),
        b("sv")
    );
    assert_eq!(c.cmd(&["GET", "sk"]), b("sv"));
    // The SHA-1 Redis names this body by (Valkey's suite expects it).
    let sha = "fd758d1589d044dd850a6f05d52f2eefd27f033f";
    assert_eq!(
        c.cmd(&["SCRIPT", "LOAD", "return redis.call('get',KEYS[1])"]),
        b(sha)
    );
    assert_eq!(c.cmd(&["EVALSHA", sha, "1", "sk"]), b("sv"));
    assert_eq!(
        c.cmd(&["EVALSHA_RO", &sha.to_uppercase(), "1", "sk"]),
        b("sv")
    );
    assert_eq!(
        c.cmd(&[
            "SCRIPT",
            "EXISTS",
            sha,
            "ffffffffffffffffffffffffffffffffffffffff"
        ]),
        Array(vec![Int(1), Int(0)])
    );
    assert_eq!(
        c.cmd(&["SCRIPT", "SHOW", sha]),
        b("return redis.call('get',KEYS[1])")
    );
    assert_eq!(c.cmd(&["SCRIPT", "FLUSH"]), Value::ok());
    assert!(err_starts(&c.cmd(&["SCRIPT", "SHOW", sha]), "NOSCRIPT"));
    assert!(err_starts(&c.cmd(&["EVALSHA", sha, "1", "sk"]), "NOSCRIPT"));
    // Errors: of commands, raised or caught, of the sandbox.
    assert_eq!(
        c.cmd(&["EVAL", "return redis.pcall('incr', KEYS[1])", "1", "sk"]),
        Error("ERR value is not an integer or out of range".into())
    );
    assert!(err_starts(
        &c.cmd(&["EVAL", "redis.call('incr', KEYS[1]) return 1", "1", "sk"]),
        "ERR value is not an integer or out of range script: "
    ));
    assert!(err_starts(
        &c.cmd(&["EVAL", "return redis.call('nosuch')", "0"]),
        "ERR Unknown command called from script"
    ));
    assert!(err_starts(
        &c.cmd(&["EVAL", "return redis.call('multi')", "0"]),
        "ERR This command is not allowed from script"
    ));
    assert!(err_starts(
        &c.cmd(&["EVAL_RO", "return redis.call('set', 'x', 1)", "0"]),
        "ERR Write commands are not allowed from read-only scripts"
    ));
    assert!(err_starts(
        &c.cmd(&[
            "EVAL",
            "#!lua flags=no-writes\nreturn redis.call('del', 'x')",
            "0"
        ]),
        "ERR Write commands are not allowed from read-only scripts"
    ));
    assert!(
        matches!(c.cmd(&["EVAL", "x = 1", "0"]), Error(e) if e.contains("Attempt to modify a readonly table"))
    );
    assert!(
        matches!(c.cmd(&["EVAL", "return y", "0"]), Error(e) if e.contains("nonexistent global variable 'y'"))
    );
    assert!(err_starts(
        &c.cmd(&["EVAL", "return 1 +", "0"]),
        "ERR Error compiling script"
    ));
    assert_eq!(
        c.cmd(&["EVAL", "return 1", "2", "a"]),
        Error("ERR Number of keys can't be greater than number of args".into())
    );
    // A script's SELECT does not reach its caller; blocking commands
    // answer at once.
    assert_eq!(
        c.cmd(&[
            "EVAL",
            "redis.call('select', '3'); return redis.call('blpop', 'none', 0)",
            "0"
        ]),
        Null
    );
    assert_eq!(c.cmd(&["GET", "sk"]), b("sv"));
    // Libraries.
    assert_eq!(
        c.cmd(&["EVAL", "return cjson.encode({a={1,2}})", "0"]),
        b("{\"a\":[1,2]}")
    );
    assert_eq!(
        c.cmd(&["EVAL", "return bit.band(0xff, 0x0f)", "0"]),
        Int(15)
    );
    assert_eq!(
        c.cmd(&["EVAL", "return cmsgpack.unpack(cmsgpack.pack({7}))[1]", "0"]),
        Int(7)
    );
    // A script may ask the server about scripts.
    assert!(matches!(
        c.cmd(&["EVAL", "return redis.call('info', 'memory')", "0"]),
        Bulk(b) if String::from_utf8_lossy(&b).contains("number_of_cached_scripts:")
    ));
    // Tables larger than the interpreter's room for outside references.
    assert_eq!(
        c.cmd(&["EVAL", "local m = {} for i = 1, 100000 do m[tostring(i)] = i end local r = cmsgpack.unpack(cmsgpack.pack(m)) return #cjson.encode(m) > 0 and r['77'] or 0", "0"]),
        Int(77)
    );
    // Inside MULTI a script is queued and runs in EXEC's transaction.
    assert_eq!(c.cmd(&["MULTI"]), Value::ok());
    assert_eq!(
        c.cmd(&["EVAL", "return redis.call('incr', KEYS[1])", "1", "m"]),
        Status("QUEUED".into())
    );
    assert_eq!(c.cmd(&["INCR", "m"]), Status("QUEUED".into()));
    assert_eq!(c.cmd(&["EXEC"]), Array(vec![Int(1), Int(2)]));
    // Pipelined after a script, a command waits for the script's reply.
    c.send_raw(b"*3\r\n$4\r\nEVAL\r\n$8\r\nreturn 7\r\n$1\r\n0\r\n*1\r\n$4\r\nPING\r\n");
    assert_eq!(c.read(), Int(7));
    assert_eq!(c.read(), Status("PONG".into()));
}

#[test]
fn scripts_run_on_every_engine() {
    for kind in ENGINES {
        let s = TestServer::start(kind);
        let mut c = s.client();
        scripts(&mut c);
    }
}

#[test]
fn function_libraries_load_run_and_survive_a_restart() {
    let mut s = TestServer::start(EngineKind::Lsm);
    let mut c = s.client();
    let lib = "#!lua name=mylib\nredis.register_function('incr2', function(keys, args) return redis.call('incrby', keys[1], 2) end)\nredis.register_function{function_name='peek', callback=function(keys) return redis.call('get', keys[1]) end, flags={'no-writes'}}";
    assert_eq!(c.cmd(&["FUNCTION", "LOAD", lib]), b("mylib"));
    assert!(err_starts(
        &c.cmd(&["FUNCTION", "LOAD", lib]),
        "ERR Library 'mylib' already exists"
    ));
    assert_eq!(c.cmd(&["FCALL", "incr2", "1", "f"]), Int(2));
    assert_eq!(c.cmd(&["FCALL_RO", "peek", "1", "f"]), b("2"));
    assert!(err_starts(
        &c.cmd(&["FCALL_RO", "incr2", "1", "f"]),
        "ERR Can not execute a script with write flag"
    ));
    assert!(err_starts(
        &c.cmd(&["FCALL", "nope", "0"]),
        "ERR Function not found"
    ));
    drop(c);
    s.restart();
    let mut c = s.client();
    assert_eq!(c.cmd(&["FCALL", "incr2", "1", "f"]), Int(4));
    match c.cmd(&["FUNCTION", "LIST"]) {
        Array(libs) => assert_eq!(libs.len(), 1),
        other => panic!("{other:?}"),
    }
    assert_eq!(c.cmd(&["FUNCTION", "DELETE", "mylib"]), Value::ok());
    drop(c);
    s.restart();
    let mut c = s.client();
    assert!(err_starts(
        &c.cmd(&["FCALL", "incr2", "1", "f"]),
        "ERR Function not found"
    ));
}

/// A token bucket as applications write one: at most `capacity` calls
/// get through until it refills (never, here: the rate is 0).
const BUCKET: &str = "local tokens = tonumber(redis.call('get', KEYS[1]) or ARGV[1])
if tokens > 0 then
  redis.call('set', KEYS[1], tokens - 1)
  return 1
end
return 0";

#[test]
fn a_rate_limiter_script_lets_no_more_through_than_its_budget() {
    let s = TestServer::start(EngineKind::Btree);
    let mut c = s.client();
    let sha = match c.cmd(&["SCRIPT", "LOAD", BUCKET]) {
        Bulk(sha) => String::from_utf8(sha).unwrap(),
        other => panic!("{other:?}"),
    };
    let budget = 500;
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (addr, sha) = (s.addr, sha.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                let mut granted = 0;
                for _ in 0..200 {
                    match c.cmd(&["EVALSHA", &sha, "1", "bucket", &budget.to_string()]) {
                        Int(1) => granted += 1,
                        Int(0) => {}
                        other => panic!("{other:?}"),
                    }
                }
                granted
            })
        })
        .collect();
    let granted: i64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(granted, budget);
    assert_eq!(c.cmd(&["GET", "bucket"]), b("0"));
}

fn wait_for(mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < Duration::from_secs(10), "timed out");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_runaway_script_makes_others_busy_until_script_kill() {
    let s = TestServer::start(EngineKind::Lsm);
    let mut admin = s.client();
    assert_eq!(
        admin.cmd(&["CONFIG", "SET", "busy-reply-threshold", "50"]),
        Value::ok()
    );
    assert!(err_starts(&admin.cmd(&["SCRIPT", "KILL"]), "NOTBUSY"));
    let mut runner = s.client();
    runner.send(&[
        b"EVAL",
        b"local f = function() while true do end end while true do pcall(f) end",
        b"0",
    ]);
    wait_for(|| err_starts(&admin.cmd(&["PING"]), "BUSY"));
    assert!(err_starts(&admin.cmd(&["GET", "x"]), "BUSY"));
    // A client connecting now is answered too, not left waiting.
    let mut late = s.client();
    assert!(err_starts(&late.cmd(&["SET", "x", "1"]), "BUSY"));
    assert_eq!(admin.cmd(&["SCRIPT", "KILL"]), Value::ok());
    assert!(matches!(runner.read(), Error(e) if e.contains("killed by user")));
    wait_for(|| admin.cmd(&["PING"]) == Status("PONG".into()));
    assert_eq!(runner.cmd(&["PING"]), Status("PONG".into()));
}

#[test]
fn a_runaway_script_that_wrote_is_unkillable_and_shutdown_nosave_drops_its_writes() {
    let mut s = TestServer::start(EngineKind::Btree);
    let mut admin = s.client();
    assert_eq!(
        admin.cmd(&["CONFIG", "SET", "lua-time-limit", "50"]),
        Value::ok()
    );
    let mut runner = s.client();
    runner.send(&[
        b"EVAL",
        b"redis.call('set', KEYS[1], 'y'); while true do end",
        b"1",
        b"x",
    ]);
    wait_for(|| err_starts(&admin.cmd(&["PING"]), "BUSY"));
    assert!(err_starts(&admin.cmd(&["SCRIPT", "KILL"]), "UNKILLABLE"));
    assert!(err_starts(&admin.cmd(&["PING"]), "BUSY"));
    admin.send(&[b"SHUTDOWN", b"NOSAVE"]);
    assert!(
        admin.try_read().is_none(),
        "SHUTDOWN closes without a reply"
    );
    s.stop().unwrap();
    s.restart();
    let mut c = s.client();
    assert_eq!(
        c.cmd(&["GET", "x"]),
        Null,
        "the stopped script's write is gone"
    );
}

#[test]
fn stopping_the_server_stops_a_runaway_script() {
    let mut s = TestServer::start(EngineKind::Lsm);
    let mut admin = s.client();
    assert_eq!(
        admin.cmd(&["CONFIG", "SET", "busy-reply-threshold", "50"]),
        Value::ok()
    );
    let mut runner = s.client();
    runner.send(&[b"EVAL", b"while true do end", b"0"]);
    wait_for(|| err_starts(&admin.cmd(&["PING"]), "BUSY"));
    let (done, stopped) = std::sync::mpsc::channel();
    let server = s.server.take().unwrap();
    std::thread::spawn(move || {
        server.shutdown();
        done.send(server.wait().is_ok()).unwrap();
    });
    assert_eq!(stopped.recv_timeout(Duration::from_secs(20)), Ok(true));
}

#[test]
fn a_transaction_meeting_a_busy_script_is_aborted_whole() {
    let s = TestServer::start(EngineKind::Lsm);
    let mut admin = s.client();
    assert_eq!(
        admin.cmd(&["CONFIG", "SET", "busy-reply-threshold", "50"]),
        Value::ok()
    );
    assert_eq!(admin.cmd(&["SET", "xx", "1"]), Value::ok());
    let mut tx = s.client();
    let mut runner = s.client();
    runner.send(&[b"EVAL", b"while true do end", b"0"]);
    wait_for(|| err_starts(&admin.cmd(&["PING"]), "BUSY"));
    // MULTI goes ahead; what is queued meanwhile is refused.
    assert_eq!(tx.cmd(&["MULTI"]), Value::ok());
    assert!(err_starts(&tx.cmd(&["INCR", "xx"]), "BUSY"));
    assert!(err_starts(
        &tx.cmd(&["EXEC"]),
        "EXECABORT Transaction discarded because of: BUSY"
    ));
    assert_eq!(admin.cmd(&["SCRIPT", "KILL"]), Value::ok());
    assert!(matches!(runner.read(), Error(e) if e.contains("killed by user")));
    wait_for(|| admin.cmd(&["PING"]) == Status("PONG".into()));
    assert_eq!(admin.cmd(&["GET", "xx"]), b("1"), "nothing of it ran");
    assert!(err_starts(&tx.cmd(&["EXEC"]), "ERR EXEC without MULTI"));
}
