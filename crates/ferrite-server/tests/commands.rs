//! Every command against the server, over each engine: replies, reply
//! types and error texts as Redis gives them.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use common::{Client, TestServer, Value, ENGINES};
use ferrite::EngineKind;
use Value::{Array, Bulk, Error, Int, Null, Status};

fn b(s: &str) -> Value {
    Value::bulk(s)
}

fn strings(c: &mut Client) {
    assert_eq!(c.cmd(&["SET", "k", "v"]), Value::ok());
    assert_eq!(c.cmd(&["GET", "k"]), b("v"));
    assert_eq!(c.cmd(&["GET", "nope"]), Null);
    assert_eq!(c.cmd(&["SET", "k", "w", "NX"]), Null);
    assert_eq!(c.cmd(&["SET", "k2", "w", "XX"]), Null);
    assert_eq!(c.cmd(&["SET", "k", "w", "XX", "GET"]), b("v"));
    assert_eq!(c.cmd(&["SET", "k3", "x", "NX", "GET"]), Null);
    assert_eq!(c.cmd(&["GET", "k3"]), b("x"));
    assert_eq!(
        c.cmd(&["SET", "k", "v", "NX", "XX"]),
        Error("ERR syntax error".into())
    );
    assert_eq!(c.cmd(&["SET", "k", "v", "EX", "10"]), Value::ok());
    assert!(matches!(c.cmd(&["TTL", "k"]), Int(9..=10)));
    assert_eq!(
        c.cmd(&["SET", "k", "v", "EX", "0"]),
        Error("ERR invalid expire time in 'set' command".into())
    );
    assert_eq!(c.cmd(&["SETNX", "k", "z"]), Int(0));
    assert_eq!(c.cmd(&["SETNX", "fresh", "z"]), Int(1));
    assert_eq!(c.cmd(&["GETSET", "fresh", "y"]), b("z"));
    assert_eq!(c.cmd(&["GETDEL", "fresh"]), b("y"));
    assert_eq!(c.cmd(&["GETDEL", "fresh"]), Null);
    assert_eq!(c.cmd(&["MSET", "a", "1", "b", "2"]), Value::ok());
    assert_eq!(
        c.cmd(&["MGET", "a", "nope", "b"]),
        Array(vec![b("1"), Null, b("2")])
    );
    assert_eq!(
        c.cmd(&["MSET", "a"]),
        Error("ERR wrong number of arguments for 'mset' command".into())
    );
    assert_eq!(c.cmd(&["MSETNX", "a", "9", "c", "3"]), Int(0));
    assert_eq!(c.cmd(&["GET", "c"]), Null);
    assert_eq!(c.cmd(&["MSETNX", "c", "3", "d", "4"]), Int(1));
    assert_eq!(c.cmd(&["STRLEN", "k"]), Int(1));
    assert_eq!(c.cmd(&["STRLEN", "nope"]), Int(0));
    assert_eq!(c.cmd(&["APPEND", "ap", "Hello"]), Int(5));
    assert_eq!(c.cmd(&["APPEND", "ap", " World"]), Int(11));
    assert_eq!(c.cmd(&["GET", "ap"]), b("Hello World"));
    assert_eq!(c.cmd(&["INCR", "n"]), Int(1));
    assert_eq!(c.cmd(&["INCRBY", "n", "10"]), Int(11));
    assert_eq!(c.cmd(&["DECR", "n"]), Int(10));
    assert_eq!(c.cmd(&["DECRBY", "n", "20"]), Int(-10));
    let not_int = Error("ERR value is not an integer or out of range".into());
    assert_eq!(c.cmd(&["INCR", "k"]), not_int);
    assert_eq!(c.cmd(&["INCRBY", "n", "x"]), not_int);
    assert_eq!(c.cmd(&["SET", "big", "9223372036854775807"]), Value::ok());
    assert_eq!(
        c.cmd(&["INCR", "big"]),
        Error("ERR increment or decrement would overflow".into())
    );
    assert_eq!(c.cmd(&["SET", "f", "10.50"]), Value::ok());
    assert_eq!(c.cmd(&["INCRBYFLOAT", "f", "0.1"]), b("10.6"));
    assert_eq!(c.cmd(&["INCRBYFLOAT", "f", "-5"]), b("5.6"));
    assert_eq!(c.cmd(&["SET", "f", "5.0e3"]), Value::ok());
    assert_eq!(c.cmd(&["INCRBYFLOAT", "f", "2.0e2"]), b("5200"));
    assert_eq!(
        c.cmd(&["INCRBYFLOAT", "k", "1"]),
        Error("ERR value is not a valid float".into())
    );
    // Redis allows the empty key.
    assert_eq!(c.cmd(&["SET", "", "empty"]), Value::ok());
    assert_eq!(c.cmd(&["GET", ""]), b("empty"));
    let long = "x".repeat(ferrite_server::MAX_USER_KEY + 1);
    assert!(matches!(c.cmd(&["SET", &long, "v"]), Error(e) if e.contains("key is too long")));
}

fn keys(c: &mut Client) {
    assert_eq!(c.cmd(&["FLUSHALL"]), Value::ok());
    assert_eq!(
        c.cmd(&["MSET", "user:1", "a", "user:2", "b", "other", "c"]),
        Value::ok()
    );
    assert_eq!(c.cmd(&["DEL", "user:1", "nope", "user:1"]), Int(1));
    assert_eq!(c.cmd(&["DEL", "user:2"]), Int(1));
    assert_eq!(c.cmd(&["DEL", "user:2"]), Int(0));
    assert_eq!(c.cmd(&["EXISTS", "other", "other", "nope"]), Int(2));
    assert_eq!(c.cmd(&["TYPE", "other"]), Status("string".into()));
    assert_eq!(c.cmd(&["TYPE", "nope"]), Status("none".into()));
    assert_eq!(c.cmd(&["TTL", "other"]), Int(-1));
    assert_eq!(c.cmd(&["PTTL", "nope"]), Int(-2));
    for i in 0..250 {
        c.cmd(&["SET", &format!("s:{i:03}"), "v"]);
    }
    assert_eq!(c.cmd(&["DBSIZE"]), Int(251));
    let Array(keys) = c.cmd(&["KEYS", "s:1?9"]) else {
        panic!()
    };
    assert_eq!(keys.len(), 10);
    // SCAN visits every key once, COUNT at a time.
    let mut cursor = "0".to_string();
    let mut seen = Vec::new();
    loop {
        let Array(r) = c.cmd(&["SCAN", &cursor, "MATCH", "s:*", "COUNT", "7"]) else {
            panic!()
        };
        let (Bulk(next), Array(ks)) = (&r[0], &r[1]) else {
            panic!()
        };
        assert!(ks.len() <= 7);
        seen.extend(ks.iter().cloned());
        cursor = String::from_utf8(next.clone()).unwrap();
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(seen.len(), 250);
    assert_eq!(
        c.cmd(&["SCAN", "12345678"]),
        Error("ERR invalid cursor".into())
    );
    // Databases are separate.
    assert_eq!(c.cmd(&["SELECT", "3"]), Value::ok());
    assert_eq!(c.cmd(&["GET", "other"]), Null);
    assert_eq!(c.cmd(&["SET", "other", "in3"]), Value::ok());
    assert_eq!(c.cmd(&["FLUSHDB"]), Value::ok());
    assert_eq!(c.cmd(&["DBSIZE"]), Int(0));
    assert_eq!(
        c.cmd(&["SELECT", "16"]),
        Error("ERR DB index is out of range".into())
    );
    assert_eq!(c.cmd(&["SELECT", "0"]), Value::ok());
    assert_eq!(c.cmd(&["GET", "other"]), b("c"));
}

fn transactions(c: &mut Client) {
    assert_eq!(c.cmd(&["SET", "t", "1"]), Value::ok());
    assert_eq!(c.cmd(&["MULTI"]), Value::ok());
    assert_eq!(c.cmd(&["INCR", "t"]), Status("QUEUED".into()));
    assert_eq!(c.cmd(&["SET", "u", "x"]), Status("QUEUED".into()));
    assert_eq!(c.cmd(&["INCR", "u"]), Status("QUEUED".into()));
    assert_eq!(c.cmd(&["GET", "t"]), Status("QUEUED".into()));
    assert_eq!(
        c.cmd(&["EXEC"]),
        Array(vec![
            Int(2),
            Value::ok(),
            Error("ERR value is not an integer or out of range".into()),
            b("2"),
        ])
    );
    assert_eq!(c.cmd(&["MULTI"]), Value::ok());
    assert_eq!(
        c.cmd(&["MULTI"]),
        Error("ERR MULTI calls can not be nested".into())
    );
    assert!(matches!(c.cmd(&["NOSUCH"]), Error(e) if e.starts_with("ERR unknown command")));
    assert_eq!(c.cmd(&["SET", "t", "99"]), Status("QUEUED".into()));
    assert_eq!(
        c.cmd(&["EXEC"]),
        Error("EXECABORT Transaction discarded because of previous errors.".into())
    );
    assert_eq!(c.cmd(&["GET", "t"]), b("2"));
    assert_eq!(c.cmd(&["MULTI"]), Value::ok());
    assert_eq!(c.cmd(&["SET", "t", "99"]), Status("QUEUED".into()));
    assert_eq!(c.cmd(&["DISCARD"]), Value::ok());
    assert_eq!(c.cmd(&["GET", "t"]), b("2"));
    assert_eq!(c.cmd(&["EXEC"]), Error("ERR EXEC without MULTI".into()));
    assert_eq!(
        c.cmd(&["DISCARD"]),
        Error("ERR DISCARD without MULTI".into())
    );
}

fn connection(c: &mut Client) {
    assert_eq!(c.cmd(&["PING"]), Status("PONG".into()));
    assert_eq!(c.cmd(&["PING", "hi"]), b("hi"));
    assert_eq!(c.cmd(&["ECHO", "x y"]), b("x y"));
    assert_eq!(
        c.cmd(&["GET"]),
        Error("ERR wrong number of arguments for 'get' command".into())
    );
    assert_eq!(
        c.cmd(&["FOO", "a", "b"]),
        Error("ERR unknown command 'FOO', with args beginning with: 'a' 'b' ".into())
    );
    assert_eq!(c.cmd(&["CLIENT", "SETNAME", "tester"]), Value::ok());
    assert_eq!(c.cmd(&["CLIENT", "GETNAME"]), b("tester"));
    assert!(matches!(c.cmd(&["CLIENT", "ID"]), Int(n) if n > 0));
    // No replica: nothing to wait for answers at once, a wait for one
    // answers 0 at its timeout (0 would wait forever, as in Redis).
    assert_eq!(c.cmd(&["WAIT", "0", "0"]), Int(0));
    assert_eq!(c.cmd(&["WAIT", "1", "20"]), Int(0));
    assert!(matches!(
        c.cmd(&["AUTH", "pw"]),
        Error(e) if e.starts_with("ERR AUTH <password> called without any password")
    ));
    let Value::Map(hello) = c.cmd(&["HELLO", "3"]) else {
        panic!("HELLO 3 answers a map")
    };
    assert!(hello.contains(&(b("proto"), Int(3))));
    assert_eq!(c.cmd(&["GET", "no such key"]), Null);
    assert!(
        matches!(c.cmd(&["INFO", "server"]), Value::Verbatim(t) if t.contains("redis_version:"))
    );
    let Value::Map(cfg) = c.cmd(&["CONFIG", "GET", "appendonly"]) else {
        panic!()
    };
    assert_eq!(cfg, vec![(b("appendonly"), b("yes"))]);
    assert!(matches!(c.cmd(&["COMMAND", "COUNT"]), Int(n) if n > 30));
    let keys = |c: &mut Client, words: &[&str]| c.cmd(&[&["COMMAND", "GETKEYS"], words].concat());
    assert_eq!(
        keys(c, &["MSET", "a", "1", "b", "2"]),
        Array(vec![b("a"), b("b")])
    );
    assert_eq!(
        keys(c, &["SORT", "abc", "STORE", "x", "STORE", "def"]),
        Array(vec![b("abc"), b("def")])
    );
    assert_eq!(
        keys(c, &["EVAL", "return 1", "2", "k1", "k2", "arg"]),
        Array(vec![b("k1"), b("k2")])
    );
    assert_eq!(
        keys(
            c,
            &["ZUNIONSTORE", "d", "2", "s1", "s2", "WEIGHTS", "1", "2"]
        ),
        Array(vec![b("d"), b("s1"), b("s2")])
    );
    assert_eq!(
        keys(c, &["PING"]),
        Error("ERR The command has no key arguments".into())
    );
    assert!(matches!(c.cmd(&["HELLO", "2"]), Array(_)));
    // Inline commands, as typed into telnet.
    c.send_raw(b"SET inline \"a b\"\r\nGET inline\r\n");
    assert_eq!(c.read(), Value::ok());
    assert_eq!(c.read(), b("a b"));
    assert_eq!(c.cmd(&["QUIT"]), Value::ok());
    assert_eq!(c.try_read(), None);
}

/// Integer strings: what `SET` and `INCR` store as the canonical decimal
/// of an `i64` is an integer (`int`), what the byte commands leave is
/// bytes (`raw`), and either reads back as the same text, across a
/// restart too (`reopened`: the same keys after one).
fn string_encodings(c: &mut Client, reopened: bool) {
    let enc = |c: &mut Client, k: &str| c.cmd(&["OBJECT", "ENCODING", k]);
    let int = b("int");
    let raw = b("raw");
    if !reopened {
        for (k, v) in [
            ("e1", "1"),
            ("e2", "-42"),
            ("e3", "9223372036854775807"),
            ("e4", "-9223372036854775808"),
            ("e5", "01"),
            ("e6", "-0"),
            ("e7", "+1"),
            ("e8", "9223372036854775808"),
            ("e9", " 1"),
        ] {
            assert_eq!(c.cmd(&["SET", k, v]), Value::ok());
        }
        assert_eq!(c.cmd(&["APPEND", "a1", "1"]), Int(1));
        assert_eq!(c.cmd(&["SET", "a2", "1"]), Value::ok());
        assert_eq!(c.cmd(&["APPEND", "a2", "2"]), Int(2));
        assert_eq!(c.cmd(&["SET", "i1", "7"]), Value::ok());
        assert_eq!(c.cmd(&["INCRBY", "i1", "5"]), Int(12));
        assert_eq!(c.cmd(&["SET", "f1", "1"]), Value::ok());
        assert_eq!(c.cmd(&["INCRBYFLOAT", "f1", "1"]), b("2"));
        assert_eq!(c.cmd(&["SET", "r1", "1234"]), Value::ok());
        assert_eq!(c.cmd(&["SETRANGE", "r1", "0", ""]), Int(4));
        assert_eq!(c.cmd(&["SET", "r2", "1234"]), Value::ok());
        assert_eq!(c.cmd(&["SETRANGE", "r2", "0", "2"]), Int(4));
        assert_eq!(c.cmd(&["SET", "b1", "1"]), Value::ok());
        assert_eq!(c.cmd(&["SETBIT", "b1", "6", "1"]), Int(0));
        assert_eq!(c.cmd(&["MSET", "m1", "5", "m2", "x"]), Value::ok());
        assert_eq!(c.cmd(&["SET", "x1", "30", "EX", "100"]), Value::ok());
    }
    for (k, e, v) in [
        ("e1", &int, "1"),
        ("e2", &int, "-42"),
        ("e3", &int, "9223372036854775807"),
        ("e4", &int, "-9223372036854775808"),
        ("e5", &raw, "01"),
        ("e6", &raw, "-0"),
        ("e7", &raw, "+1"),
        ("e8", &raw, "9223372036854775808"),
        ("e9", &raw, " 1"),
        ("a1", &int, "1"),
        ("a2", &raw, "12"),
        ("i1", &int, "12"),
        ("f1", &raw, "2"),
        ("r1", &int, "1234"),
        ("r2", &raw, "2234"),
        ("b1", &raw, "3"),
        ("m1", &int, "5"),
        ("m2", &raw, "x"),
        ("x1", &int, "30"),
    ] {
        assert_eq!(&enc(c, k), e, "{k}");
        assert_eq!(c.cmd(&["GET", k]), b(v), "{k}");
        assert_eq!(c.cmd(&["STRLEN", k]), Int(v.len() as i64), "{k}");
    }
    assert!(matches!(c.cmd(&["TTL", "x1"]), Int(1..=100)));
    assert_eq!(c.cmd(&["GETRANGE", "e4", "1", "3"]), b("922"));
    assert_eq!(c.cmd(&["GETBIT", "e1", "2"]), Int(1));
}

#[test]
fn integer_strings_read_as_their_text_and_survive_a_restart() {
    for kind in ENGINES {
        let mut s = TestServer::start(kind);
        string_encodings(&mut s.client(), false);
        s.restart();
        string_encodings(&mut s.client(), true);
    }
}

#[test]
fn every_command_answers_as_redis_does_on_every_engine() {
    for kind in ENGINES {
        let s = TestServer::start(kind);
        let mut c = s.client();
        strings(&mut c);
        keys(&mut c);
        transactions(&mut c);
        connection(&mut c);
    }
}

#[test]
fn pipelined_commands_run_in_order_and_survive_a_restart() {
    let mut s = TestServer::start(EngineKind::Lsm);
    let mut c = s.client();
    let mut bytes = Vec::new();
    for i in 0..2000 {
        let (k, v) = (format!("p{i}"), format!("v{i}"));
        bytes.extend_from_slice(
            format!(
                "*3\r\n$3\r\nSET\r\n${}\r\n{k}\r\n${}\r\n{v}\r\n",
                k.len(),
                v.len()
            )
            .as_bytes(),
        );
    }
    bytes.extend_from_slice(b"*2\r\n$3\r\nGET\r\n$5\r\np1999\r\n");
    c.send_raw(&bytes);
    for _ in 0..2000 {
        assert_eq!(c.read(), Value::ok());
    }
    assert_eq!(c.read(), b("v1999"));
    drop(c);
    s.restart();
    let mut c = s.client();
    assert_eq!(c.cmd(&["GET", "p7"]), b("v7"));
    assert_eq!(c.cmd(&["DBSIZE"]), Int(2000));
}

#[test]
fn read_modify_writes_lose_no_update_under_concurrency() {
    let s = TestServer::start(EngineKind::Btree);
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let addr = s.addr;
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                let mut wins = 0;
                for i in 0..300 {
                    assert!(matches!(c.cmd(&["INCR", "counter"]), Int(_)));
                    assert!(matches!(c.cmd(&["APPEND", "log", "x"]), Int(_)));
                    // Of the clients setting the same fresh pair, one wins.
                    let (a, b) = (format!("once{i}"), format!("twice{i}"));
                    match c.cmd(&["MSETNX", &a, &t.to_string(), &b, &t.to_string()]) {
                        Int(1) => wins += 1,
                        Int(0) => {}
                        other => panic!("{other:?}"),
                    }
                }
                wins
            })
        })
        .collect();
    let wins: i32 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(wins, 300);
    let mut c = s.client();
    for i in 0..300 {
        // Both keys of a pair come from the same winner.
        let (a, b) = (format!("once{i}"), format!("twice{i}"));
        assert_eq!(c.cmd(&["GET", &a]), c.cmd(&["GET", &b]));
    }
    assert_eq!(c.cmd(&["GET", "counter"]), b("2400"));
    assert_eq!(c.cmd(&["STRLEN", "log"]), Int(2400));
}

/// Small hashes and lists are packed (one record, `listpack`), larger
/// ones a record per element, as the `*-max-listpack-*` settings say;
/// both hold the same data across a restart, and a list packs again when
/// it shrinks.
#[test]
fn small_collections_are_packed_and_survive_a_restart() {
    for kind in ENGINES {
        let mut s = TestServer::start(kind);
        let mut c = s.client();
        let enc = |c: &mut Client, k: &str| c.cmd(&["OBJECT", "ENCODING", k]);
        let long = "x".repeat(65);
        assert_eq!(c.cmd(&["HSET", "hs", "a", "1", "b", "-7"]), Int(2));
        assert_eq!(c.cmd(&["HSET", "hb", "a", "1", "b", &long]), Int(2));
        assert_eq!(c.cmd(&["RPUSH", "ls", "a", "12", "c"]), Int(3));
        // 100 items of 200 bytes: past the default 8 KiB listpack.
        let items: Vec<String> = (0..100)
            .map(|i| format!("{i:03}{}", "y".repeat(197)))
            .collect();
        let mut push = vec!["RPUSH", "lb"];
        push.extend(items.iter().map(String::as_str));
        assert_eq!(c.cmd(&push), Int(100));
        for (k, e) in [
            ("hs", "listpack"),
            ("hb", "hashtable"),
            ("ls", "listpack"),
            ("lb", "records"),
        ] {
            assert_eq!(enc(&mut c, k), b(e), "{kind}: {k}");
        }
        drop(c);
        s.restart();
        let mut c = s.client();
        assert_eq!(c.cmd(&["HGET", "hs", "b"]), b("-7"));
        assert_eq!(c.cmd(&["HGET", "hb", "b"]), b(&long));
        assert_eq!(
            c.cmd(&["LRANGE", "ls", "0", "-1"]),
            Array(vec![b("a"), b("12"), b("c")])
        );
        assert_eq!(c.cmd(&["LINDEX", "lb", "99"]), b(&items[99]));
        assert_eq!(enc(&mut c, "hs"), b("listpack"));
        assert_eq!(enc(&mut c, "ls"), b("listpack"));
        // Within half the limit again (4 KiB), the big list packs.
        assert_eq!(c.cmd(&["LTRIM", "lb", "0", "9"]), Value::ok());
        assert_eq!(enc(&mut c, "lb"), b("listpack"));
        assert_eq!(c.cmd(&["LINDEX", "lb", "9"]), b(&items[9]));
        // A count limit: the third item unpacks, popping back to one packs.
        assert_eq!(
            c.cmd(&["CONFIG", "SET", "list-max-listpack-size", "2"]),
            Value::ok()
        );
        assert_eq!(c.cmd(&["RPUSH", "lc", "a", "b"]), Int(2));
        assert_eq!(enc(&mut c, "lc"), b("listpack"));
        assert_eq!(c.cmd(&["LINSERT", "lc", "BEFORE", "b", "m"]), Int(3));
        assert_eq!(enc(&mut c, "lc"), b("records"));
        assert_eq!(c.cmd(&["RPOP", "lc", "2"]), Array(vec![b("b"), b("m")]));
        assert_eq!(enc(&mut c, "lc"), b("listpack"));
        assert_eq!(c.cmd(&["LRANGE", "lc", "0", "-1"]), Array(vec![b("a")]));
        // A hash converts once, for good.
        assert_eq!(
            c.cmd(&["CONFIG", "SET", "hash-max-listpack-entries", "2"]),
            Value::ok()
        );
        assert_eq!(c.cmd(&["HSET", "hs", "c", "3"]), Int(1));
        assert_eq!(enc(&mut c, "hs"), b("hashtable"));
        assert_eq!(c.cmd(&["HDEL", "hs", "c", "b"]), Int(2));
        assert_eq!(enc(&mut c, "hs"), b("hashtable"));
        assert_eq!(c.cmd(&["HGETALL", "hs"]), Array(vec![b("a"), b("1")]));
    }
}
