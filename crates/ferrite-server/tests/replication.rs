//! Replication between servers in one process: a replica copies its
//! master (every type, expiry, several databases), follows its stream,
//! acknowledges for `WAIT`, refuses writes, continues from its offset
//! after a restart, and after a promotion takes its old master as a
//! replica; after each step both hold the same data, compared key by
//! key through the protocol.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{Client, TestServer, Value, ENGINES};
use ferrite::EngineKind;

fn text(v: &Value) -> String {
    match v {
        Value::Status(s) | Value::Error(s) | Value::Double(s) | Value::Verbatim(s) => s.clone(),
        Value::Int(n) => n.to_string(),
        Value::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
        Value::Null => "(nil)".into(),
        Value::Array(a) => a.iter().map(text).collect::<Vec<_>>().join(","),
        Value::Map(m) => m
            .iter()
            .map(|(k, v)| format!("{}={}", text(k), text(v)))
            .collect::<Vec<_>>()
            .join(","),
    }
}

/// Every key of databases 0 and 1 with its type, value and whether it
/// expires: the logical content a client sees.
fn dump(c: &mut Client) -> BTreeMap<(u8, String), String> {
    let mut out = BTreeMap::new();
    for db in 0..2u8 {
        assert_eq!(c.cmd(&["SELECT", &db.to_string()]), Value::ok());
        let Value::Array(keys) = c.cmd(&["KEYS", "*"]) else {
            panic!("KEYS")
        };
        for k in keys {
            let k = text(&k);
            let ty = text(&c.cmd(&["TYPE", &k]));
            let mut body = match ty.as_str() {
                "string" => text(&c.cmd(&["GET", &k])),
                "hash" => {
                    let Value::Array(a) = c.cmd(&["HGETALL", &k]) else {
                        panic!("HGETALL")
                    };
                    let mut pairs: Vec<String> = a
                        .chunks(2)
                        .map(|p| format!("{}={}", text(&p[0]), text(&p[1])))
                        .collect();
                    pairs.sort();
                    pairs.join(",")
                }
                "set" => {
                    let Value::Array(a) = c.cmd(&["SMEMBERS", &k]) else {
                        panic!("SMEMBERS")
                    };
                    let mut m: Vec<String> = a.iter().map(text).collect();
                    m.sort();
                    m.join(",")
                }
                "zset" => text(&c.cmd(&["ZRANGE", &k, "0", "-1", "WITHSCORES"])),
                "list" => text(&c.cmd(&["LRANGE", &k, "0", "-1"])),
                other => panic!("unexpected type {other}"),
            };
            let ttl = text(&c.cmd(&["PTTL", &k]));
            body.push_str(if ttl == "-1" {
                " persistent"
            } else {
                " volatile"
            });
            out.insert((db, k), format!("{ty}: {body}"));
        }
    }
    assert_eq!(c.cmd(&["SELECT", "0"]), Value::ok());
    out
}

fn info_field(c: &mut Client, section: &str, field: &str) -> String {
    let info = text(&c.cmd(&["INFO", section]));
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("INFO {section} has no {field}: {info}"))
        .trim()
        .to_string()
}

/// Waits until `replica` is linked and has applied everything `master`
/// streamed.
fn caught_up(master: &mut Client, replica: &mut Client) {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let m = info_field(master, "replication", "master_repl_offset");
        let link = info_field(replica, "replication", "master_link_status");
        let r = info_field(replica, "replication", "master_repl_offset");
        if link == "up" && m == r {
            return;
        }
        assert!(
            Instant::now() < until,
            "the replica did not catch up: master at {m}, replica at {r}, link {link}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Writes of every type in databases 0 and 1; `tag` makes each round's
/// values its own.
fn write_round(c: &mut Client, tag: &str) {
    for i in 0..50 {
        let k = format!("s{i}");
        assert_eq!(c.cmd(&["SET", &k, &format!("{tag}-{i}")]), Value::ok());
    }
    c.cmd(&["HSET", "h", &format!("f{tag}"), tag, "common", tag]);
    c.cmd(&["SADD", "set", tag, "x", "y"]);
    c.cmd(&["SREM", "set", "x"]);
    c.cmd(&["ZADD", "z", "1.5", tag, "-3", "low"]);
    c.cmd(&["ZINCRBY", "z", "2", "low"]);
    c.cmd(&["RPUSH", "queue", tag, "b", "c"]);
    c.cmd(&["LPOP", "queue"]);
    c.cmd(&["INCRBY", "counter", "7"]);
    c.cmd(&["SET", "lasting", tag, "EX", "1000"]);
    c.cmd(&["DEL", "s3"]);
    assert_eq!(c.cmd(&["SELECT", "1"]), Value::ok());
    c.cmd(&["SET", "in-db-1", tag]);
    c.cmd(&["HSET", &format!("h-{tag}"), "a", "b"]);
    assert_eq!(c.cmd(&["SELECT", "0"]), Value::ok());
    // A whole collection overwritten: its old elements must not show.
    c.cmd(&["DEL", "gone"]);
    c.cmd(&["RPUSH", "gone", tag, tag]);
}

fn replicaof(c: &mut Client, master: &TestServer) -> Value {
    c.cmd(&["REPLICAOF", "127.0.0.1", &master.addr.port().to_string()])
}

fn pair(master_kind: EngineKind, replica_kind: EngineKind) {
    let mut master = TestServer::start(master_kind);
    let mut replica = TestServer::start(replica_kind);
    let mut m = master.client();
    write_round(&mut m, "before");
    m.cmd(&["SET", "short", "v", "PX", "300"]);
    let mut r = replica.client();
    assert_eq!(replicaof(&mut r, &master), Value::ok());
    caught_up(&mut m, &mut r);
    assert_eq!(dump(&mut r), dump(&mut m), "after the full sync");
    assert_eq!(info_field(&mut m, "stats", "sync_full"), "1");

    // The stream: writes after the copy, acknowledged for WAIT.
    write_round(&mut m, "streamed");
    assert_eq!(m.cmd(&["WAIT", "1", "5000"]), Value::Int(1));
    assert_eq!(dump(&mut r), dump(&mut m), "after streamed writes");

    // Expiry comes from the master as deletes.
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(m.cmd(&["EXISTS", "short"]), Value::Int(0));
    assert_eq!(r.cmd(&["EXISTS", "short"]), Value::Int(0));

    // A replica refuses writes and answers reads.
    assert_eq!(
        r.cmd(&["SET", "k", "v"]),
        Value::Error("READONLY You can't write against a read only replica.".into())
    );
    assert_eq!(r.cmd(&["GET", "s1"]), Value::bulk("streamed-1"));
    let Value::Array(role) = r.cmd(&["ROLE"]) else {
        panic!("ROLE")
    };
    assert_eq!(role[0], Value::bulk("slave"));
    assert_eq!(role[3], Value::bulk("connected"));
    assert_eq!(info_field(&mut m, "replication", "connected_slaves"), "1");
    assert_eq!(
        m.cmd(&["REPLICAOF", "127.0.0.1", "notaport"]),
        Value::Error("ERR Invalid master port".into())
    );

    // A restart continues from the stored offset (a partial sync) and
    // follows the same master without being told again.
    drop(r);
    replica.restart();
    write_round(&mut m, "while-down");
    let mut r = replica.client();
    caught_up(&mut m, &mut r);
    assert_eq!(dump(&mut r), dump(&mut m), "after the replica's restart");
    assert_eq!(info_field(&mut m, "stats", "sync_partial_ok"), "1");
    assert_eq!(info_field(&mut m, "stats", "sync_full"), "1");

    // Promotion: the replica takes writes; its old master follows it,
    // continuing from the offset where the promotion happened.
    assert_eq!(r.cmd(&["REPLICAOF", "NO", "ONE"]), Value::ok());
    assert_eq!(r.cmd(&["SET", "after-promotion", "1"]), Value::ok());
    write_round(&mut r, "promoted");
    assert_eq!(replicaof(&mut m, &replica), Value::ok());
    caught_up(&mut r, &mut m);
    assert_eq!(
        dump(&mut m),
        dump(&mut r),
        "the old master follows the new one"
    );
    assert_eq!(info_field(&mut r, "stats", "sync_partial_ok"), "1");
    assert_eq!(
        m.cmd(&["SET", "k", "v"]),
        Value::Error("READONLY You can't write against a read only replica.".into())
    );
    drop((m, r));
    master.stop().unwrap();
    replica.stop().unwrap();
}

#[test]
fn a_replica_holds_its_masters_data_through_sync_restart_and_promotion() {
    for kind in ENGINES {
        pair(kind, kind);
    }
}

#[test]
fn the_stream_is_the_same_whatever_the_engines() {
    pair(EngineKind::Lsm, EngineKind::Btree);
    pair(EngineKind::Btree, EngineKind::Zkv);
}

#[test]
fn a_replica_too_far_behind_copies_again() {
    let master = TestServer::start(EngineKind::Lsm);
    let mut replica = TestServer::start(EngineKind::Lsm);
    let mut m = master.client();
    let mut r = replica.client();
    assert_eq!(replicaof(&mut r, &master), Value::ok());
    caught_up(&mut m, &mut r);
    drop(r);
    replica.stop().unwrap();
    // More than the backlog holds while the replica is away.
    let value = "x".repeat(64 << 10);
    let per = ferrite_backlog_bytes() / value.len() + 64;
    for i in 0..per {
        // Each value differs from the one it replaces (a value set to
        // itself changes nothing and streams nothing).
        let v = format!("{i}{value}");
        assert_eq!(m.cmd(&["SET", &format!("big{}", i % 100), &v]), Value::ok());
    }
    replica.restart();
    let mut r = replica.client();
    caught_up(&mut m, &mut r);
    assert_eq!(dump(&mut r), dump(&mut m));
    // A fresh replica asks to continue its own stream (as Redis's does),
    // which fails; so does the one left behind.
    assert_eq!(info_field(&mut m, "stats", "sync_full"), "2");
    assert_eq!(info_field(&mut m, "stats", "sync_partial_err"), "2");
    assert_eq!(info_field(&mut m, "stats", "sync_partial_ok"), "0");
}

fn ferrite_backlog_bytes() -> usize {
    ferrite_server::replication::BACKLOG_BYTES
}
