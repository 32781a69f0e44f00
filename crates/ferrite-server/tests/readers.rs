//! Key reads that miss the cache run on the reader pool: the route turns
//! to the readers when reads go to the device, and every client still
//! gets exactly its replies, in its commands' order, whichever thread ran
//! them.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::time::{Duration, Instant};

use common::{Client, TestServer, Value};
use ferrite::EngineKind;
use ferrite_server::ServerConfig;

const KEYS: usize = 4_000;
const VALUE: usize = 2_048;

fn value_of(i: usize) -> Vec<u8> {
    let mut v = format!("value-{i}-").into_bytes();
    v.resize(VALUE, b'a' + (i % 26) as u8);
    v
}

fn stat(c: &mut Client, field: &str) -> u64 {
    let Value::Bulk(info) = c.cmd(&["INFO", "stats"]) else {
        panic!("INFO stats is not a bulk string");
    };
    let info = String::from_utf8(info).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("INFO stats has no {field}"))
        .trim()
        .parse()
        .unwrap()
}

/// A server whose store holds eight times its cache, loaded, with reads
/// already routed to its readers.
fn cold(kind: EngineKind) -> TestServer {
    let mut config = ServerConfig::default();
    config.io_threads = 1;
    config.readers = 4;
    let server = TestServer::start_cached(kind, config, 1 << 20);
    let mut c = server.client();
    for chunk in (0..KEYS).collect::<Vec<_>>().chunks(200) {
        for &i in chunk {
            c.send(&[b"SET", format!("cold:{i}").as_bytes(), &value_of(i)]);
        }
        for _ in chunk {
            assert_eq!(c.read(), Value::ok());
        }
    }
    // Out of the LSM's memtable into its tables (and out of every
    // engine's cache).
    assert_eq!(c.cmd(&["SAVE"]), Value::ok());
    assert_eq!(stat(&mut c, "reads_on_readers"), 0, "no read ran yet");
    // Reads across the whole store go to the device; within a few
    // windows the route turns.
    let until = Instant::now() + Duration::from_secs(30);
    let mut i = 0;
    while stat(&mut c, "reads_on_readers") == 0 {
        assert!(Instant::now() < until, "reads never moved to the readers");
        for _ in 0..64 {
            i = (i + 997) % KEYS;
            c.send(&[b"GET", format!("cold:{i}").as_bytes()]);
        }
        for _ in 0..64 {
            assert!(matches!(c.read(), Value::Bulk(_)));
        }
    }
    server
}

/// Each client pipelines writes and reads of its own keys between reads
/// of the loaded ones; every reply must be the one a serial run gives.
fn clients_get_their_replies_in_order(kind: EngineKind) {
    let server = cold(kind);
    let before = stat(&mut server.client(), "reads_offloaded");
    let addr = server.addr;
    let workers: Vec<_> = (0..4)
        .map(|w| {
            std::thread::spawn(move || {
                let mut c = Client::connect(addr);
                let mut expect = Vec::new();
                let mut counter = 0i64;
                for round in 0..30usize {
                    for j in 0..20usize {
                        let cold = (w * 7_919 + round * 613 + j * 31) % KEYS;
                        let own = format!("own:{w}:{j}");
                        let mine = format!("{w}-{round}-{j}");
                        c.send(&[b"GET", format!("cold:{cold}").as_bytes()]);
                        expect.push(Value::Bulk(value_of(cold)));
                        c.send(&[b"SET", own.as_bytes(), mine.as_bytes()]);
                        expect.push(Value::ok());
                        c.send(&[b"GET", own.as_bytes()]);
                        expect.push(Value::bulk(&mine));
                        c.send(&[b"STRLEN", format!("cold:{cold}").as_bytes()]);
                        expect.push(Value::Int(VALUE as i64));
                        counter += 1;
                        c.send(&[b"INCR", format!("count:{w}").as_bytes()]);
                        expect.push(Value::Int(counter));
                        c.send(&[
                            b"MGET",
                            format!("cold:{}", (cold + 1) % KEYS).as_bytes(),
                            own.as_bytes(),
                            b"absent",
                        ]);
                        expect.push(Value::Array(vec![
                            Value::Bulk(value_of((cold + 1) % KEYS)),
                            Value::bulk(&mine),
                            Value::Null,
                        ]));
                        c.send(&[b"GET", format!("count:{w}").as_bytes()]);
                        expect.push(Value::bulk(&counter.to_string()));
                    }
                    for (n, e) in expect.drain(..).enumerate() {
                        let got = c.read();
                        assert_eq!(got, e, "client {w}, round {round}, reply {n}");
                    }
                }
            })
        })
        .collect();
    for t in workers {
        t.join().unwrap();
    }
    let after = stat(&mut server.client(), "reads_offloaded");
    assert!(
        after > before,
        "the readers ran none of the reads ({before} before, {after} after)"
    );
}

/// A client that sends its reads and closes its side still gets every
/// reply, though its connection waited on a reader when its side closed.
fn a_client_that_stops_sending_gets_every_reply(kind: EngineKind) {
    let server = cold(kind);
    let mut c = server.client();
    for i in 0..300 {
        c.send(&[b"GET", format!("cold:{}", (i * 13) % KEYS).as_bytes()]);
    }
    c.shutdown_write();
    for i in 0..300 {
        assert_eq!(
            c.read(),
            Value::Bulk(value_of((i * 13) % KEYS)),
            "reply {i}"
        );
    }
    assert_eq!(c.try_read(), None, "the server closes after the replies");
}

#[test]
fn btree_clients_get_their_replies_in_order() {
    clients_get_their_replies_in_order(EngineKind::Btree);
}

#[test]
fn lsm_clients_get_their_replies_in_order() {
    clients_get_their_replies_in_order(EngineKind::Lsm);
}

#[test]
fn zkv_clients_get_their_replies_in_order() {
    clients_get_their_replies_in_order(EngineKind::Zkv);
}

#[test]
fn btree_a_client_that_stops_sending_gets_every_reply() {
    a_client_that_stops_sending_gets_every_reply(EngineKind::Btree);
}

#[test]
fn lsm_a_client_that_stops_sending_gets_every_reply() {
    a_client_that_stops_sending_gets_every_reply(EngineKind::Lsm);
}
