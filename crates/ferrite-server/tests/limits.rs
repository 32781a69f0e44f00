//! Bad input and limits: protocol garbage, oversized arguments, too many
//! arguments, stalled requests, too many clients; and a clean shutdown.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::time::{Duration, Instant};

use common::{Client, TestServer, Value};
use ferrite::EngineKind;
use ferrite_server::{Limits, ServerConfig};

fn small() -> ServerConfig {
    let mut c = ServerConfig::default();
    c.limits = Limits {
        max_bulk: 1000,
        max_args: 10,
        ..Limits::default()
    };
    c.max_clients = 3;
    c.client_timeout = Duration::from_millis(300);
    c
}

#[test]
fn garbage_and_oversized_requests_get_an_error_and_only_their_connection_closes() {
    let s = TestServer::start_with(EngineKind::Btree, small());
    let mut other = s.client();
    assert_eq!(other.cmd(&["SET", "keep", "me"]), Value::ok());
    for (bytes, text) in [
        (
            &b"*1\r\n$5000\r\n"[..],
            "ERR Protocol error: invalid bulk length",
        ),
        (b"*11\r\n", "ERR Protocol error: invalid multibulk length"),
        (
            b"*1\r\n+PING\r\n",
            "ERR Protocol error: expected '$', got '+'",
        ),
        (b"*x\r\n", "ERR Protocol error: invalid multibulk length"),
        (
            b"GET \"unbalanced\r\n",
            "ERR Protocol error: unbalanced quotes in request",
        ),
    ] {
        let mut c = s.client();
        c.send_raw(bytes);
        assert_eq!(c.read(), Value::Error(text.into()));
        assert_eq!(
            c.try_read(),
            None,
            "the connection closes after a protocol error"
        );
    }
    // A value past the bulk limit is refused whole.
    let mut c = s.client();
    let big = "v".repeat(1001);
    c.send(&[b"SET", b"k", big.as_bytes()]);
    assert_eq!(
        c.read(),
        Value::Error("ERR Protocol error: invalid bulk length".into())
    );
    // Everything else carries on.
    assert_eq!(other.cmd(&["GET", "keep"]), Value::bulk("me"));
}

#[test]
fn a_stalled_half_request_is_dropped_and_an_idle_client_is_not() {
    let s = TestServer::start_with(EngineKind::Btree, small());
    let mut idle = s.client();
    let mut stalled = s.client();
    stalled.send_raw(b"*2\r\n$3\r\nGET\r\n");
    let t = Instant::now();
    assert_eq!(stalled.try_read(), None);
    assert!(t.elapsed() >= Duration::from_millis(250));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(idle.cmd(&["PING"]), Value::Status("PONG".into()));
}

/// A pipeline streamed for longer than the client timeout, every read
/// ending part way through a request, is not stalled: requests keep
/// completing.
#[test]
fn a_long_streamed_pipeline_is_not_taken_for_a_stalled_request() {
    let s = TestServer::start_with(EngineKind::Btree, small());
    let mut c = s.client();
    c.send_raw(b"*1\r\n$4\r\nPI");
    let rounds = 20;
    for _ in 0..rounds {
        std::thread::sleep(Duration::from_millis(50));
        c.send_raw(b"NG\r\n*1\r\n$4\r\nPI");
    }
    c.send_raw(b"NG\r\n");
    for _ in 0..=rounds {
        assert_eq!(c.read(), Value::Status("PONG".into()));
    }
}

#[test]
fn clients_past_the_limit_are_refused_with_redis_error() {
    let s = TestServer::start_with(EngineKind::Btree, small());
    let mut held: Vec<Client> = (0..3).map(|_| s.client()).collect();
    for c in &mut held {
        assert_eq!(c.cmd(&["PING"]), Value::Status("PONG".into()));
    }
    let mut extra = s.client();
    assert_eq!(
        extra.try_read(),
        Some(Value::Error("ERR max number of clients reached".into()))
    );
    drop(held.pop());
    // A slot frees once the server sees the client go.
    let t = Instant::now();
    loop {
        let mut c = s.client();
        c.send(&[b"PING"]);
        match c.try_read() {
            Some(Value::Status(p)) if p == "PONG" => break,
            _ if t.elapsed() < Duration::from_secs(5) => {
                std::thread::sleep(Duration::from_millis(50))
            }
            other => panic!("no slot freed: {other:?}"),
        }
    }
}

#[test]
fn shutdown_finishes_received_commands_then_closes_the_store() {
    let mut s = TestServer::start(EngineKind::Lsm);
    let mut c = s.client();
    let mut bytes = Vec::new();
    for i in 0..500 {
        bytes.extend_from_slice(format!("SET k{i} v{i}\r\n").as_bytes());
    }
    bytes.extend_from_slice(b"SHUTDOWN\r\n");
    c.send_raw(&bytes);
    for _ in 0..500 {
        assert_eq!(c.read(), Value::ok());
    }
    // SHUTDOWN answers nothing, as in Redis: the connection closes.
    assert_eq!(c.try_read(), None);
    s.restart();
    assert_eq!(s.client().cmd(&["GET", "k499"]), Value::bulk("v499"));
}
