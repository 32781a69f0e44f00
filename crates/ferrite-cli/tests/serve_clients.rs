//! `ferrite serve` holds ten thousand idle clients while fifty others run
//! the real `redis-benchmark`: every idle client is admitted, counted by
//! `INFO`, and still answered after the benchmark; the benchmark's
//! writes are there. The idle clients connect over the server's Unix
//! socket: ten thousand TCP connections from one host to itself spend a
//! minute in the kernel's search for free ephemeral ports once earlier
//! tests have left thousands in TIME_WAIT, which measures the machine,
//! not the server (each connection is the same to the server's loops).
//! Needs redis-benchmark (`scripts/install-redis-tools.sh`);
//! without it the test says so and passes, or under
//! CI (`CI=true` or `FERRITE_REQUIRE_TOOLS=1`) fails.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

mod common;

const IDLE: usize = 10_000;
const ACTIVE: usize = 50;

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Raises this process's open-file limit to its hard limit (the test
/// holds one descriptor per idle client).
fn raise_open_files() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read or write the struct given.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        lim.rlim_cur = lim.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }
    lim.rlim_cur
}

/// Sends one command on `s` and reads one reply line.
fn call(s: &mut UnixStream, cmd: &str) -> String {
    s.write_all(cmd.as_bytes()).unwrap();
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        assert_eq!(s.read(&mut b).unwrap(), 1, "closed after {line:?}");
        line.push(b[0]);
    }
    String::from_utf8(line).unwrap()
}

/// Reads a bulk reply's body after its header line.
fn bulk(s: &mut UnixStream, header: &str) -> String {
    let n: usize = header.trim()[1..].parse().unwrap();
    let mut body = vec![0u8; n + 2];
    s.read_exact(&mut body).unwrap();
    String::from_utf8_lossy(&body[..n]).into_owned()
}

#[test]
fn ten_thousand_idle_clients_while_fifty_run_redis_benchmark() {
    if !common::have("redis-benchmark", "scripts/install-redis-tools.sh") {
        return;
    }
    let limit = raise_open_files();
    assert!(
        limit > IDLE as u64 + 100,
        "the open-file hard limit ({limit}) cannot hold {IDLE} clients here"
    );
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("ferrite.sock");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(["serve", "--engine", "btree", "--path"])
        .arg(dir.path().join("store"))
        .args(["--listen", "127.0.0.1:0", "--cache-mb", "64", "--unix"])
        .arg(&sock)
        // The idle clients, the benchmark's, and its set-up connection.
        // The benchmark closes one test's clients and at once opens the
        // next test's; the server counts a close when its loop reads the
        // EOF, so for a moment both sets may be counted (Redis, with its
        // one loop, has the same window).
        .args(["--max-clients", &(IDLE + 2 * ACTIVE + 10).to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let server = Server(child);
    let addr = first.trim().rsplit(' ').next().unwrap().to_string();
    let port = addr.rsplit(':').next().unwrap().to_string();

    let mut idle: Vec<UnixStream> = (0..IDLE)
        .map(|_| UnixStream::connect(&sock).unwrap())
        .collect();
    for s in &mut idle {
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        s.write_all(b"PING\r\n").unwrap();
    }
    for s in &mut idle {
        let mut pong = [0u8; 7];
        s.read_exact(&mut pong).unwrap();
        assert_eq!(&pong, b"+PONG\r\n");
    }
    let header = call(&mut idle[0], "INFO clients\r\n");
    let info = bulk(&mut idle[0], &header);
    assert!(
        info.contains(&format!("connected_clients:{IDLE}\r\n")),
        "{info}"
    );

    let out = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &port])
        .args(["-c", &ACTIVE.to_string(), "-n", "100000", "-r", "10000"])
        .args(["-P", "16", "-t", "set,get", "--csv"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "redis-benchmark {}: {text}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    for test in ["\"SET\"", "\"GET\""] {
        let row = text
            .lines()
            .find(|l| l.starts_with(test))
            .unwrap_or_else(|| panic!("no {test} row: {text}"));
        let rps: f64 = row
            .split(',')
            .nth(1)
            .unwrap()
            .trim_matches('"')
            .parse()
            .unwrap();
        assert!(rps > 0.0, "{row}");
    }

    // The benchmark's keys are there, and every idle client is still
    // served.
    let n = call(&mut idle[1], "DBSIZE\r\n");
    let keys: u64 = n.trim()[1..].parse().unwrap();
    assert!(keys > 0 && keys <= 10_000, "{n}");
    for s in &mut idle {
        s.write_all(b"PING\r\n").unwrap();
    }
    for s in &mut idle {
        let mut pong = [0u8; 7];
        s.read_exact(&mut pong).unwrap();
        assert_eq!(&pong, b"+PONG\r\n");
    }
    drop(idle);
    drop(server);
}
