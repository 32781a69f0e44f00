//! `scripts/cluster.sh`: three ferrite nodes behind twemproxy. 100,000
//! keys written through the proxy read back through it, each node holds
//! a fair share, a stopped node fails only its own keys, and once it is
//! back every key is there again. Needs nutcracker and redis-cli
//! (`scripts/install-redis-tools.sh`); without them the test says so and
//! skips, or under CI (`CI=true` or `FERRITE_REQUIRE_TOOLS=1`) fails.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const KEYS: usize = 100_000;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn cluster(args: &[&str]) -> Output {
    let out = Command::new(repo().join("scripts/cluster.sh"))
        .args(args)
        .env("FERRITE", env!("CARGO_BIN_EXE_ferrite"))
        .env("CACHE_MB", "64")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cluster.sh {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn key(i: usize) -> String {
    format!("key:{i:06}")
}

/// Reads every key through the proxy with MGETs of 1000 (twemproxy splits
/// each across the nodes), checking each value.
fn read_all(proxy: u16) {
    for chunk in (0..KEYS).collect::<Vec<_>>().chunks(1000) {
        let mut args = vec!["MGET".to_string()];
        args.extend(chunk.iter().map(|&i| key(i)));
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = redis_cli(proxy, &a);
        let got: Vec<&str> = out.lines().collect();
        assert_eq!(got.len(), chunk.len(), "{}", &out[..out.len().min(300)]);
        for (line, &i) in got.iter().zip(chunk) {
            assert_eq!(*line, format!("value-{i}"), "{}", key(i));
        }
    }
}

#[test]
fn three_nodes_behind_twemproxy_share_the_keys_and_survive_a_node_restart() {
    for tool in ["nutcracker", "redis-cli"] {
        if !common::have(tool, "scripts/install-redis-tools.sh") {
            return;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    // Ports proxy..proxy+3 and the stats port proxy+1000, found free.
    let proxy = loop {
        let p = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if p < 60_000
            && [0, 1, 2, 3, 1000]
                .iter()
                .all(|o| TcpListener::bind(("127.0.0.1", p + o)).is_ok())
        {
            break p;
        }
    };
    cluster(&["start", "3", d, &proxy.to_string()]);
    let _stop = Stopper(dir.path().to_path_buf());
    // Mass insertion through the proxy, pipelined on one connection
    // (`redis-cli --pipe` ends with an ECHO, which twemproxy refuses).
    let mut pipe = Vec::new();
    for i in 0..KEYS {
        let (k, v) = (key(i), format!("value-{i}"));
        write!(
            pipe,
            "*3\r\n$3\r\nSET\r\n${}\r\n{k}\r\n${}\r\n{v}\r\n",
            k.len(),
            v.len()
        )
        .unwrap();
    }
    let conn = TcpStream::connect(("127.0.0.1", proxy)).unwrap();
    let mut tx = conn.try_clone().unwrap();
    // Written from another thread, so neither side's buffers fill while
    // the replies wait to be read.
    let writer = std::thread::spawn(move || tx.write_all(&pipe).unwrap());
    let mut replies = BufReader::new(conn);
    let mut line = String::new();
    for i in 0..KEYS {
        line.clear();
        replies.read_line(&mut line).unwrap();
        assert_eq!(line, "+OK\r\n", "reply to SET {}", key(i));
    }
    writer.join().unwrap();
    read_all(proxy);
    // Every node holds a share between 25% and 42%.
    let shares: Vec<usize> = (1..=3)
        .map(|n| redis_cli(proxy + n, &["DBSIZE"]).trim().parse().unwrap())
        .collect();
    assert_eq!(shares.iter().sum::<usize>(), KEYS);
    for s in &shares {
        let f = *s as f64 / KEYS as f64;
        assert!((0.25..=0.42).contains(&f), "shares {shares:?}");
    }
    // Node 2 down: exactly its keys fail.
    let on_two: HashSet<String> = redis_cli(proxy + 2, &["--scan"])
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(on_two.len(), shares[1]);
    cluster(&["stop-node", d, "2"]);
    for i in (0..KEYS).step_by(KEYS / 300) {
        let got = redis_cli(proxy, &["GET", &key(i)]);
        if on_two.contains(&key(i)) {
            assert!(
                !got.contains("value-"),
                "{} read from a stopped node",
                key(i)
            );
        } else {
            assert_eq!(got.trim(), format!("value-{i}"), "{}", key(i));
        }
    }
    // Back up: every acknowledged key again.
    cluster(&["start-node", d, "2"]);
    read_all(proxy);
}

/// Stops the cluster however the test ends, so a failed assertion leaves
/// no servers or proxy running.
struct Stopper(PathBuf);

impl Drop for Stopper {
    fn drop(&mut self) {
        let _ = Command::new(repo().join("scripts/cluster.sh"))
            .arg("stop")
            .arg(&self.0)
            .status();
    }
}
