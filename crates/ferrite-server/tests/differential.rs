//! Differential test against a real `redis-server`: random sequences of
//! commands over a small key space (so they collide: overwrites, wrong
//! types, empty collections, expired keys) go to ferrite and to
//! redis-server side by side, and every reply must be the same.
//!
//! Replies that Redis leaves unordered (`SMEMBERS`, `HGETALL`, ...) are
//! compared sorted. Expiry uses absolute times only, far in the past (the
//! key is expired at once) or far in the future, so both servers see the same
//! thing whatever the clock does; `TTL` compares by sign. `DBSIZE`, which
//! counts expired keys not yet removed, compares once both servers'
//! expiry cycles have removed them.
//! `ZRANGEBYLEX` and kin run on a sorted set whose members all score 0
//! (Redis leaves them undefined otherwise). Cases: `FERRITE_DIFF_CASES`
//! (default 48 per engine); a failing case shrinks to a short sequence.
//!
//! A second property holds hash encodings to Redis's: under thresholds
//! set by `CONFIG SET` on both servers, `OBJECT ENCODING` of every hash
//! (`listpack` while small, `hashtable` once it outgrew them) is the same
//! after every command.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use common::{have, Client, RedisServer, TestServer, Value};
use ferrite::EngineKind;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// A command, its words.
type Cmd = Vec<String>;

fn pick(xs: &'static [&'static str]) -> impl Strategy<Value = String> {
    proptest::sample::select(xs).prop_map(str::to_string)
}

fn strkey() -> impl Strategy<Value = String> {
    pick(&["s0", "s1", "s2", "h0", "l0", "z0"])
}
fn hkey() -> impl Strategy<Value = String> {
    pick(&["h0", "h1", "s0", "z0"])
}
fn skey() -> impl Strategy<Value = String> {
    pick(&["t0", "t1", "t2", "s0", "h0"])
}
fn zkey() -> impl Strategy<Value = String> {
    pick(&["z0", "z1", "z2", "s0", "t0"])
}
fn lkey() -> impl Strategy<Value = String> {
    pick(&["l0", "l1", "s0", "z0"])
}
fn anykey() -> impl Strategy<Value = String> {
    pick(&[
        "s0", "s1", "h0", "h1", "t0", "t1", "z0", "z1", "l0", "l1", "zl", "nokey",
    ])
}
fn member() -> impl Strategy<Value = String> {
    pick(&["a", "b", "c", "d", "e", "1", "2", "10", ""])
}
fn value() -> impl Strategy<Value = String> {
    pick(&[
        "",
        "x",
        "abc",
        "1",
        "-3",
        "10",
        "2.5",
        "9223372036854775807",
        "hello world",
    ])
}
/// One `BITFIELD` subcommand, its arguments included: field types at
/// and past their limits, offsets plain and `#`, values that overflow.
fn bitfield_op() -> impl Strategy<Value = Vec<String>> {
    let ty = || pick(&["u1", "u8", "i8", "i5", "u63", "i64", "u64", "i0", "x8"]);
    let off = || pick(&["0", "3", "7", "13", "#1", "#2", "-1", "x"]);
    let n = pick(&[
        "0",
        "1",
        "-1",
        "100",
        "300",
        "-300",
        "9223372036854775807",
        "-9223372036854775808",
        "x",
    ]);
    prop_oneof![
        (ty(), off()).prop_map(|(t, o)| vec!["GET".into(), t, o]),
        (pick(&["SET", "INCRBY"]), ty(), off(), n).prop_map(|(s, t, o, n)| vec![s, t, o, n]),
        pick(&["WRAP", "SAT", "FAIL", "BAD"]).prop_map(|w| vec!["OVERFLOW".into(), w]),
    ]
}

fn int() -> impl Strategy<Value = String> {
    pick(&["0", "1", "-1", "2", "-2", "3", "5", "-5", "100", "x"])
}
fn score() -> impl Strategy<Value = String> {
    pick(&["0", "1", "-1.5", "2.5", "3", "inf", "-inf", "1e3", "x"])
}
fn score_bound() -> impl Strategy<Value = String> {
    pick(&[
        "-inf", "+inf", "0", "(0", "1", "(1", "2.5", "(2.5", "-2", "x",
    ])
}
fn lex_bound() -> impl Strategy<Value = String> {
    pick(&["-", "+", "[a", "(a", "[c", "(c", "[e", "[", "b"])
}
/// Absolute expiry times: long past, or long after the test.
fn abs_secs() -> impl Strategy<Value = String> {
    pick(&["1", "1000000000", "4102444800", "4102444801"])
}
fn abs_ms() -> impl Strategy<Value = String> {
    pick(&["1000", "1000000000000", "4102444800000", "4102444800123"])
}

fn c(words: Vec<String>) -> Cmd {
    words
}

fn string_cmd() -> BoxedStrategy<Cmd> {
    prop_oneof![
        (strkey(), value()).prop_map(|(k, v)| c(vec!["SET".into(), k, v])),
        (
            strkey(),
            value(),
            pick(&["NX", "XX", "GET", "KEEPTTL", "NX GET", "XX GET"])
        )
            .prop_map(|(k, v, o)| {
                let mut w = vec!["SET".into(), k, v];
                w.extend(o.split(' ').map(str::to_string));
                c(w)
            }),
        (
            strkey(),
            value(),
            pick(&["EXAT", "PXAT"]),
            abs_secs(),
            abs_ms()
        )
            .prop_map(|(k, v, o, s, ms)| {
                let t = if o == "EXAT" { s } else { ms };
                c(vec!["SET".into(), k, v, o, t])
            }),
        strkey().prop_map(|k| c(vec!["GET".into(), k])),
        (strkey(), value()).prop_map(|(k, v)| c(vec!["GETSET".into(), k, v])),
        strkey().prop_map(|k| c(vec!["GETDEL".into(), k])),
        strkey().prop_map(|k| c(vec!["GETEX".into(), k, "PERSIST".into()])),
        (strkey(), value()).prop_map(|(k, v)| c(vec!["APPEND".into(), k, v])),
        (strkey(), value()).prop_map(|(k, v)| c(vec!["SETNX".into(), k, v])),
        strkey().prop_map(|k| c(vec!["INCR".into(), k])),
        (strkey(), int()).prop_map(|(k, n)| c(vec!["INCRBY".into(), k, n])),
        (strkey(), int()).prop_map(|(k, n)| c(vec!["DECRBY".into(), k, n])),
        (strkey(), pick(&["1.5", "-2", "0.1", "x", "5e3"])).prop_map(|(k, n)| c(vec![
            "INCRBYFLOAT".into(),
            k,
            n
        ])),
        strkey().prop_map(|k| c(vec!["STRLEN".into(), k])),
        (strkey(), int(), value()).prop_map(|(k, o, v)| c(vec!["SETRANGE".into(), k, o, v])),
        (strkey(), int(), int()).prop_map(|(k, a, b)| c(vec!["GETRANGE".into(), k, a, b])),
        (strkey(), int(), pick(&["0", "1", "2"])).prop_map(|(k, o, b)| c(vec![
            "SETBIT".into(),
            k,
            o,
            b
        ])),
        (strkey(), int()).prop_map(|(k, o)| c(vec!["GETBIT".into(), k, o])),
        strkey().prop_map(|k| c(vec!["BITCOUNT".into(), k])),
        (strkey(), int(), int()).prop_map(|(k, a, b)| c(vec!["BITCOUNT".into(), k, a, b])),
        (strkey(), pick(&["0", "1"])).prop_map(|(k, b)| c(vec!["BITPOS".into(), k, b])),
        (strkey(), strkey(), value(), value()).prop_map(|(a, b, x, y)| c(vec![
            "MSET".into(),
            a,
            x,
            b,
            y
        ])),
        (strkey(), strkey(), value()).prop_map(|(a, b, x)| c(vec![
            "MSETNX".into(),
            a,
            x.clone(),
            b,
            x
        ])),
        (strkey(), strkey()).prop_map(|(a, b)| c(vec!["MGET".into(), a, b])),
        (pick(&["AND", "OR", "XOR"]), strkey(), strkey(), strkey())
            .prop_map(|(op, d, a, b)| c(vec!["BITOP".into(), op, d, a, b])),
        (
            pick(&["BITFIELD", "BITFIELD_RO"]),
            strkey(),
            proptest::collection::vec(bitfield_op(), 0..4)
        )
            .prop_map(|(name, k, ops)| {
                let mut w = vec![name, k];
                w.extend(ops.into_iter().flatten());
                c(w)
            }),
        (strkey(), strkey()).prop_map(|(a, b)| c(vec!["LCS".into(), a, b])),
    ]
    .boxed()
}

fn key_cmd() -> BoxedStrategy<Cmd> {
    prop_oneof![
        (anykey(), anykey()).prop_map(|(a, b)| c(vec!["DEL".into(), a, b])),
        (anykey(), anykey()).prop_map(|(a, b)| c(vec!["EXISTS".into(), a, b])),
        anykey().prop_map(|k| c(vec!["TYPE".into(), k])),
        (anykey(), anykey()).prop_map(|(a, b)| c(vec!["RENAME".into(), a, b])),
        (anykey(), anykey()).prop_map(|(a, b)| c(vec!["RENAMENX".into(), a, b])),
        (anykey(), anykey(), pick(&["", "REPLACE"])).prop_map(|(a, b, r)| {
            let mut w = vec!["COPY".into(), a, b];
            if !r.is_empty() {
                w.push(r);
            }
            c(w)
        }),
        (anykey(), abs_secs(), pick(&["", "NX", "XX", "GT", "LT"])).prop_map(|(k, t, o)| {
            let mut w = vec!["EXPIREAT".into(), k, t];
            if !o.is_empty() {
                w.push(o);
            }
            c(w)
        }),
        (anykey(), abs_ms()).prop_map(|(k, t)| c(vec!["PEXPIREAT".into(), k, t])),
        anykey().prop_map(|k| c(vec!["EXPIRETIME".into(), k])),
        anykey().prop_map(|k| c(vec!["PEXPIRETIME".into(), k])),
        anykey().prop_map(|k| c(vec!["TTL".into(), k])),
        anykey().prop_map(|k| c(vec!["PERSIST".into(), k])),
        Just(c(vec!["DBSIZE".into()])),
        Just(c(vec!["KEYS".into(), "*".into()])),
    ]
    .boxed()
}

fn hash_cmd() -> BoxedStrategy<Cmd> {
    prop_oneof![
        (hkey(), member(), value()).prop_map(|(k, f, v)| c(vec!["HSET".into(), k, f, v])),
        (hkey(), member(), value(), member(), value()).prop_map(|(k, f, v, g, w)| c(vec![
            "HSET".into(),
            k,
            f,
            v,
            g,
            w
        ])),
        (hkey(), member(), value()).prop_map(|(k, f, v)| c(vec!["HSETNX".into(), k, f, v])),
        (hkey(), member()).prop_map(|(k, f)| c(vec!["HGET".into(), k, f])),
        (hkey(), member(), member()).prop_map(|(k, f, g)| c(vec!["HMGET".into(), k, f, g])),
        (hkey(), member(), member()).prop_map(|(k, f, g)| c(vec!["HDEL".into(), k, f, g])),
        hkey().prop_map(|k| c(vec!["HLEN".into(), k])),
        (hkey(), member()).prop_map(|(k, f)| c(vec!["HEXISTS".into(), k, f])),
        (hkey(), member(), int()).prop_map(|(k, f, n)| c(vec!["HINCRBY".into(), k, f, n])),
        (hkey(), member(), pick(&["1.5", "-2", "x"])).prop_map(|(k, f, n)| c(vec![
            "HINCRBYFLOAT".into(),
            k,
            f,
            n
        ])),
        (hkey(), member()).prop_map(|(k, f)| c(vec!["HSTRLEN".into(), k, f])),
        hkey().prop_map(|k| c(vec!["HGETALL".into(), k])),
        hkey().prop_map(|k| c(vec!["HKEYS".into(), k])),
        hkey().prop_map(|k| c(vec!["HVALS".into(), k])),
    ]
    .boxed()
}

fn set_cmd() -> BoxedStrategy<Cmd> {
    prop_oneof![
        (skey(), member(), member()).prop_map(|(k, a, b)| c(vec!["SADD".into(), k, a, b])),
        (skey(), member()).prop_map(|(k, a)| c(vec!["SREM".into(), k, a])),
        (skey(), member()).prop_map(|(k, a)| c(vec!["SISMEMBER".into(), k, a])),
        (skey(), member(), member()).prop_map(|(k, a, b)| c(vec!["SMISMEMBER".into(), k, a, b])),
        skey().prop_map(|k| c(vec!["SCARD".into(), k])),
        skey().prop_map(|k| c(vec!["SMEMBERS".into(), k])),
        (skey(), skey(), member()).prop_map(|(a, b, m)| c(vec!["SMOVE".into(), a, b, m])),
        (pick(&["SUNION", "SINTER", "SDIFF"]), skey(), skey())
            .prop_map(|(op, a, b)| c(vec![op, a, b])),
        (
            pick(&["SUNIONSTORE", "SINTERSTORE", "SDIFFSTORE"]),
            skey(),
            skey(),
            skey()
        )
            .prop_map(|(op, d, a, b)| c(vec![op, d, a, b])),
        (skey(), skey()).prop_map(|(a, b)| c(vec!["SINTERCARD".into(), "2".into(), a, b])),
    ]
    .boxed()
}

fn zset_cmd() -> BoxedStrategy<Cmd> {
    prop_oneof![
        (zkey(), score(), member()).prop_map(|(k, s, m)| c(vec!["ZADD".into(), k, s, m])),
        (
            zkey(),
            pick(&["NX", "XX", "GT", "LT", "CH", "XX CH", "GT CH", "INCR"]),
            score(),
            member()
        )
            .prop_map(|(k, o, s, m)| {
                let mut w = vec!["ZADD".into(), k];
                w.extend(o.split(' ').map(str::to_string));
                w.push(s);
                w.push(m);
                c(w)
            }),
        (zkey(), score(), member()).prop_map(|(k, s, m)| c(vec!["ZINCRBY".into(), k, s, m])),
        (zkey(), member(), member()).prop_map(|(k, a, b)| c(vec!["ZREM".into(), k, a, b])),
        (zkey(), member()).prop_map(|(k, m)| c(vec!["ZSCORE".into(), k, m])),
        (zkey(), member(), member()).prop_map(|(k, a, b)| c(vec!["ZMSCORE".into(), k, a, b])),
        zkey().prop_map(|k| c(vec!["ZCARD".into(), k])),
        (zkey(), score_bound(), score_bound()).prop_map(|(k, a, b)| c(vec![
            "ZCOUNT".into(),
            k,
            a,
            b
        ])),
        (
            zkey(),
            int(),
            int(),
            pick(&["", "WITHSCORES", "REV", "REV WITHSCORES"])
        )
            .prop_map(|(k, a, b, o)| {
                let mut w = vec!["ZRANGE".into(), k, a, b];
                w.extend(o.split(' ').filter(|x| !x.is_empty()).map(str::to_string));
                c(w)
            }),
        (
            zkey(),
            score_bound(),
            score_bound(),
            pick(&["", "WITHSCORES", "LIMIT 1 2", "LIMIT 0 -1"])
        )
            .prop_map(|(k, a, b, o)| {
                let mut w = vec!["ZRANGEBYSCORE".into(), k, a, b];
                w.extend(o.split(' ').filter(|x| !x.is_empty()).map(str::to_string));
                c(w)
            }),
        (zkey(), score_bound(), score_bound()).prop_map(|(k, a, b)| c(vec![
            "ZREVRANGEBYSCORE".into(),
            k,
            a,
            b
        ])),
        (zkey(), member()).prop_map(|(k, m)| c(vec!["ZRANK".into(), k, m])),
        (zkey(), member()).prop_map(|(k, m)| c(vec!["ZREVRANK".into(), k, m])),
        (zkey(), pick(&["", "1", "3"])).prop_map(|(k, n)| {
            let mut w = vec!["ZPOPMIN".into(), k];
            if !n.is_empty() {
                w.push(n);
            }
            c(w)
        }),
        (zkey(), pick(&["", "2"])).prop_map(|(k, n)| {
            let mut w = vec!["ZPOPMAX".into(), k];
            if !n.is_empty() {
                w.push(n);
            }
            c(w)
        }),
        (zkey(), int(), int()).prop_map(|(k, a, b)| c(vec!["ZREMRANGEBYRANK".into(), k, a, b])),
        (zkey(), score_bound(), score_bound()).prop_map(|(k, a, b)| c(vec![
            "ZREMRANGEBYSCORE".into(),
            k,
            a,
            b
        ])),
        (
            pick(&["ZUNIONSTORE", "ZINTERSTORE", "ZDIFFSTORE"]),
            zkey(),
            zkey(),
            zkey()
        )
            .prop_map(|(op, d, a, b)| c(vec![op, d, "2".into(), a, b])),
        (pick(&["ZUNION", "ZINTER", "ZDIFF"]), zkey(), zkey()).prop_map(|(op, a, b)| c(vec![
            op,
            "2".into(),
            a,
            b,
            "WITHSCORES".into()
        ])),
        (zkey(), zkey(), pick(&["SUM", "MIN", "MAX"])).prop_map(|(a, b, g)| c(vec![
            "ZUNION".into(),
            "2".into(),
            a,
            b,
            "WEIGHTS".into(),
            "2".into(),
            "-1".into(),
            "AGGREGATE".into(),
            g,
            "WITHSCORES".into()
        ])),
        // Lexicographic ranges on a sorted set whose members all score 0.
        member().prop_map(|m| c(vec!["ZADD".into(), "zl".into(), "0".into(), m])),
        (lex_bound(), lex_bound()).prop_map(|(a, b)| c(vec![
            "ZRANGEBYLEX".into(),
            "zl".into(),
            a,
            b
        ])),
        (lex_bound(), lex_bound()).prop_map(|(a, b)| c(vec![
            "ZREVRANGEBYLEX".into(),
            "zl".into(),
            b,
            a
        ])),
        (lex_bound(), lex_bound()).prop_map(|(a, b)| c(vec![
            "ZLEXCOUNT".into(),
            "zl".into(),
            a,
            b
        ])),
        (lex_bound(), lex_bound()).prop_map(|(a, b)| c(vec![
            "ZREMRANGEBYLEX".into(),
            "zl".into(),
            a,
            b
        ])),
    ]
    .boxed()
}

fn list_cmd() -> BoxedStrategy<Cmd> {
    prop_oneof![
        (
            pick(&["LPUSH", "RPUSH", "LPUSHX", "RPUSHX"]),
            lkey(),
            member(),
            member()
        )
            .prop_map(|(op, k, a, b)| c(vec![op, k, a, b])),
        (pick(&["LPOP", "RPOP"]), lkey(), pick(&["", "0", "1", "3"])).prop_map(|(op, k, n)| {
            let mut w = vec![op, k];
            if !n.is_empty() {
                w.push(n);
            }
            c(w)
        }),
        lkey().prop_map(|k| c(vec!["LLEN".into(), k])),
        (lkey(), int(), int()).prop_map(|(k, a, b)| c(vec!["LRANGE".into(), k, a, b])),
        (lkey(), int()).prop_map(|(k, i)| c(vec!["LINDEX".into(), k, i])),
        (lkey(), int(), member()).prop_map(|(k, i, m)| c(vec!["LSET".into(), k, i, m])),
        (lkey(), pick(&["BEFORE", "AFTER"]), member(), member()).prop_map(|(k, w, p, m)| c(vec![
            "LINSERT".into(),
            k,
            w,
            p,
            m
        ])),
        (lkey(), int(), member()).prop_map(|(k, n, m)| c(vec!["LREM".into(), k, n, m])),
        (lkey(), int(), int()).prop_map(|(k, a, b)| c(vec!["LTRIM".into(), k, a, b])),
        (
            lkey(),
            member(),
            pick(&["", "RANK -1", "COUNT 0", "RANK 2 COUNT 2"])
        )
            .prop_map(|(k, m, o)| {
                let mut w = vec!["LPOS".into(), k, m];
                w.extend(o.split(' ').filter(|x| !x.is_empty()).map(str::to_string));
                c(w)
            }),
        (lkey(), lkey()).prop_map(|(a, b)| c(vec!["RPOPLPUSH".into(), a, b])),
        (
            lkey(),
            lkey(),
            pick(&["LEFT", "RIGHT"]),
            pick(&["LEFT", "RIGHT"])
        )
            .prop_map(|(a, b, x, y)| c(vec!["LMOVE".into(), a, b, x, y])),
    ]
    .boxed()
}

fn command() -> BoxedStrategy<Cmd> {
    prop_oneof![
        3 => string_cmd(),
        2 => key_cmd(),
        2 => hash_cmd(),
        2 => set_cmd(),
        3 => zset_cmd(),
        2 => list_cmd(),
    ]
    .boxed()
}

/// A sequence, with a transaction now and then, under a list node size
/// chosen per case (so lists move between their encodings: the replies
/// must not change).
fn sequence() -> impl Strategy<Value = Vec<Cmd>> {
    let fill = pick(&["-2", "1", "2", "3"]);
    let commands = proptest::collection::vec(
        prop_oneof![
            8 => command().prop_map(|c| vec![c]),
            1 => proptest::collection::vec(command(), 1..4).prop_map(|cs| {
                let mut v = vec![vec!["MULTI".to_string()]];
                v.extend(cs);
                v.push(vec!["EXEC".to_string()]);
                v
            }),
        ],
        1..40,
    );
    (fill, commands).prop_map(|(fill, groups)| {
        let set: Cmd = ["CONFIG", "SET", "list-max-listpack-size", &fill]
            .iter()
            .map(|w| w.to_string())
            .collect();
        std::iter::once(set)
            .chain(groups.into_iter().flatten())
            .collect()
    })
}

/// Commands whose reply Redis leaves in no particular order.
fn unordered(cmd: &str) -> bool {
    matches!(
        cmd,
        "SMEMBERS" | "SUNION" | "SINTER" | "SDIFF" | "HKEYS" | "HVALS" | "KEYS"
    )
}

/// A reply in a form both servers must agree on.
fn normalize(cmd: &Cmd, v: Value) -> Value {
    let name = cmd[0].to_ascii_uppercase();
    match (name.as_str(), v) {
        (n, Value::Array(mut items)) if unordered(n) => {
            items.sort_by_key(|x| format!("{x:?}"));
            Value::Array(items)
        }
        ("HGETALL", Value::Array(items)) => {
            let mut pairs: Vec<Vec<Value>> = items.chunks(2).map(<[Value]>::to_vec).collect();
            pairs.sort_by_key(|p| format!("{:?}", p.first()));
            Value::Array(pairs.into_iter().flatten().collect())
        }
        // Relative times depend on when each server answered.
        ("TTL", Value::Int(n)) if n > 0 => Value::Int(1),
        ("EXEC", Value::Array(items)) => Value::Array(items),
        (_, v) => v,
    }
}

/// Both servers' connections: the one the sequence runs on, and a
/// side one that watches the key space while the first is in `MULTI`.
struct Pair {
    main: Client,
    side: Client,
}

/// Waits (a few seconds at most) until `side` sees no key that has
/// expired but is not yet removed: `DBSIZE` counts those, and when the
/// server removes them is up to its expiry cycle, so a `DBSIZE` compares
/// once both cycles have done their work.
fn settle(side: &mut Client) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let size = side.cmd(&["DBSIZE"]);
        let live = match side.cmd(&["KEYS", "*"]) {
            Value::Array(keys) => keys.len() as i64,
            _ => -1,
        };
        if size == Value::Int(live) || std::time::Instant::now() > deadline {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn run_case(ferrite: &mut Pair, redis: &mut Pair, cmds: &[Cmd]) -> Result<(), TestCaseError> {
    for conn in [&mut ferrite.main, &mut redis.main] {
        prop_assert_eq!(conn.cmd(&["FLUSHALL"]), Value::ok());
    }
    // Inside MULTI, queued commands are normalized by their own name.
    let mut queued: Vec<&Cmd> = Vec::new();
    for (i, cmd) in cmds.iter().enumerate() {
        let words: Vec<&str> = cmd.iter().map(String::as_str).collect();
        let name = cmd[0].to_ascii_uppercase();
        let counts =
            name == "DBSIZE" || (name == "EXEC" && queued.iter().any(|c| c[0] == "DBSIZE"));
        if counts {
            settle(&mut ferrite.side);
            settle(&mut redis.side);
        }
        let (ferrite, redis) = (&mut ferrite.main, &mut redis.main);
        let (got, want) = (ferrite.cmd(&words), redis.cmd(&words));
        let (got, want) = if name == "EXEC" {
            let norm = |v: Value| match v {
                Value::Array(items) => Value::Array(
                    items
                        .into_iter()
                        .zip(&queued)
                        .map(|(x, c)| normalize(c, x))
                        .collect(),
                ),
                other => other,
            };
            (norm(got), norm(want))
        } else {
            (normalize(cmd, got), normalize(cmd, want))
        };
        match name.as_str() {
            "MULTI" => queued.clear(),
            "EXEC" => queued.clear(),
            _ => queued.push(cmd),
        }
        prop_assert_eq!(
            &got,
            &want,
            "command {} of {}: {:?}\nsequence: {:?}",
            i + 1,
            cmds.len(),
            cmd,
            cmds
        );
    }
    Ok(())
}

fn cases() -> u32 {
    std::env::var("FERRITE_DIFF_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(48)
}

/// Runs the sequences `strategy` makes against ferrite on `kind` and a
/// redis-server side by side; panics naming `what` at the first reply
/// that differs.
fn differential_of(kind: EngineKind, strategy: impl Strategy<Value = Vec<Cmd>>, what: &str) {
    if !have("redis-server") {
        return;
    }
    let redis_server = RedisServer::start();
    let ferrite_server = TestServer::start(kind);
    // The runner takes a `Fn`: the connections sit in cells.
    let redis = std::cell::RefCell::new(Pair {
        main: Client::connect(redis_server.addr()),
        side: Client::connect(redis_server.addr()),
    });
    let ferrite = std::cell::RefCell::new(Pair {
        main: ferrite_server.client(),
        side: ferrite_server.client(),
    });
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&strategy, |cmds| {
        run_case(&mut ferrite.borrow_mut(), &mut redis.borrow_mut(), &cmds)
    });
    if let Err(e) = result {
        panic!("{what}: ferrite and redis-server differ: {e}");
    }
}

fn differential(kind: EngineKind) {
    differential_of(kind, sequence(), kind.name());
}

/// Hash writes over two keys, each followed by `OBJECT ENCODING` of
/// both, under thresholds chosen per case.
fn encoding_sequence() -> impl Strategy<Value = Vec<Cmd>> {
    let key = || pick(&["e0", "e1"]);
    let field = || pick(&["a", "b", "c", "d", "e", "f", "12", "a-long-field"]);
    let value = || {
        pick(&[
            "",
            "x",
            "abcdefgh",
            "abcdefghi",
            "123456789012",
            "-5",
            "1.5",
        ])
    };
    let write = prop_oneof![
        4 => (key(), field(), value()).prop_map(|(k, f, v)| vec!["HSET".into(), k, f, v]),
        2 => (key(), field(), value(), field(), value())
            .prop_map(|(k, f, v, g, w)| vec!["HSET".into(), k, f, v, g, w]),
        1 => (key(), field(), value()).prop_map(|(k, f, v)| vec!["HSETNX".into(), k, f, v]),
        2 => (key(), field(), field()).prop_map(|(k, f, g)| vec!["HDEL".into(), k, f, g]),
        1 => (key(), field(), pick(&["1", "1000000000000"]))
            .prop_map(|(k, f, n)| vec!["HINCRBY".into(), k, f, n]),
        1 => (key(), field(), pick(&["1.5", "0.1"]))
            .prop_map(|(k, f, n)| vec!["HINCRBYFLOAT".into(), k, f, n]),
        1 => key().prop_map(|k| vec!["DEL".into(), k]),
        1 => (key(), key()).prop_map(|(a, b)| vec!["COPY".into(), a, b, "REPLACE".into()]),
        1 => key().prop_map(|k| vec!["HGETALL".into(), k]),
    ];
    (
        pick(&["0", "1", "3", "5", "128"]),
        pick(&["0", "4", "8", "64"]),
        proptest::collection::vec(write, 1..40),
    )
        .prop_map(|(entries, value, writes)| {
            let mut cmds: Vec<Cmd> = vec![
                vec![
                    "CONFIG".into(),
                    "SET".into(),
                    "hash-max-listpack-entries".into(),
                    entries,
                ],
                vec![
                    "CONFIG".into(),
                    "SET".into(),
                    "hash-max-listpack-value".into(),
                    value,
                ],
            ];
            for w in writes {
                cmds.push(w);
                for k in ["e0", "e1"] {
                    cmds.push(vec!["OBJECT".into(), "ENCODING".into(), k.into()]);
                }
            }
            cmds
        })
}

#[test]
fn hash_encodings_match_redis_server() {
    differential_of(EngineKind::Lsm, encoding_sequence(), "hash encodings");
}

#[test]
fn every_reply_matches_redis_server_on_btree() {
    differential(EngineKind::Btree);
}

#[test]
fn every_reply_matches_redis_server_on_lsm() {
    differential(EngineKind::Lsm);
}

#[test]
fn every_reply_matches_redis_server_on_zkv() {
    differential(EngineKind::Zkv);
}
