//! A server on a free loopback port over a fresh store, and a minimal
//! RESP client that reads every reply type, for the tests.
#![allow(dead_code, reason = "each test binary uses part of it")]
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Stdio;
use std::time::Duration;

use ferrite::{Config, EngineKind, SyncMode};
use ferrite_server::{Server, ServerConfig};

/// A reply as a client sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Status(String),
    Error(String),
    Int(i64),
    Bulk(Vec<u8>),
    Null,
    Array(Vec<Value>),
    Map(Vec<(Value, Value)>),
    Double(String),
    Verbatim(String),
}

impl Value {
    pub fn bulk(s: &str) -> Self {
        Value::Bulk(s.as_bytes().to_vec())
    }

    pub fn ok() -> Self {
        Value::Status("OK".into())
    }
}

pub struct Client {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Self {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Self {
            reader: BufReader::new(s.try_clone().unwrap()),
            writer: s,
        }
    }

    /// Closes the sending side: the server sees end of input.
    pub fn shutdown_write(&mut self) {
        self.writer.shutdown(std::net::Shutdown::Write).unwrap();
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).unwrap();
    }

    pub fn send(&mut self, args: &[&[u8]]) {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        self.send_raw(&out);
    }

    /// Sends a command of words and reads its reply.
    pub fn cmd(&mut self, words: &[&str]) -> Value {
        let args: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
        self.send(&args);
        self.read()
    }

    pub fn read(&mut self) -> Value {
        self.try_read().expect("the server closed the connection")
    }

    /// The next reply, or `None` once the server has closed. A reply that
    /// does not come within the read timeout fails the test: a server
    /// that neither answers nor closes is not one that closed.
    pub fn try_read(&mut self) -> Option<Value> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => return None,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                panic!("no reply and no close within the read timeout")
            }
            Err(_) => return None,
        }
        let line = line.trim_end_matches("\r\n");
        let (kind, rest) = line.split_at(1);
        Some(match kind {
            "+" => Value::Status(rest.into()),
            "-" => Value::Error(rest.into()),
            ":" => Value::Int(rest.parse().unwrap()),
            "_" => Value::Null,
            "," => Value::Double(rest.into()),
            "$" | "=" => {
                let n: i64 = rest.parse().unwrap();
                if n < 0 {
                    return Some(Value::Null);
                }
                let mut b = vec![0u8; n as usize + 2];
                self.reader.read_exact(&mut b).unwrap();
                b.truncate(n as usize);
                if kind == "=" {
                    Value::Verbatim(String::from_utf8(b[4..].to_vec()).unwrap())
                } else {
                    Value::Bulk(b)
                }
            }
            "*" | ">" | "~" => {
                let n: i64 = rest.parse().unwrap();
                if n < 0 {
                    return Some(Value::Null);
                }
                Value::Array((0..n).map(|_| self.read()).collect())
            }
            "%" => {
                let n: usize = rest.parse().unwrap();
                Value::Map((0..n).map(|_| (self.read(), self.read())).collect())
            }
            other => panic!("unknown reply type {other:?} in {line:?}"),
        })
    }
}

/// A running server over a fresh store, stopped when dropped.
pub struct TestServer {
    pub server: Option<Server>,
    pub addr: SocketAddr,
    pub dir: tempfile::TempDir,
    kind: EngineKind,
}

impl TestServer {
    pub fn start(kind: EngineKind) -> Self {
        Self::start_with(kind, ServerConfig::default())
    }

    pub fn start_with(kind: EngineKind, config: ServerConfig) -> Self {
        Self::start_cached(kind, config, 16 << 20)
    }

    /// A server whose store caches `cache_bytes`.
    pub fn start_cached(kind: EngineKind, config: ServerConfig, cache_bytes: u64) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let server = Self::serve(kind, &dir, config, cache_bytes);
        let addr = server.local_addr();
        Self {
            server: Some(server),
            addr,
            dir,
            kind,
        }
    }

    fn serve(
        kind: EngineKind,
        dir: &tempfile::TempDir,
        mut config: ServerConfig,
        cache_bytes: u64,
    ) -> Server {
        let store = Config::builder(kind)
            .sync(SyncMode::Never)
            .cache_bytes(cache_bytes)
            .direct_io(false)
            .open(dir.path().join("db"))
            .unwrap();
        config.listen = "127.0.0.1:0".parse().unwrap();
        Server::start(config, store).unwrap()
    }

    /// Stops the server cleanly and starts a new one over the same
    /// store (on a new port).
    pub fn restart(&mut self) {
        self.stop().unwrap();
        let server = Self::serve(self.kind, &self.dir, ServerConfig::default(), 16 << 20);
        self.addr = server.local_addr();
        self.server = Some(server);
    }

    pub fn client(&self) -> Client {
        Client::connect(self.addr)
    }

    /// Stops the server and reports how closing the store went.
    pub fn stop(&mut self) -> Result<(), ferrite_server::ServerError> {
        match self.server.take() {
            Some(s) => {
                s.shutdown();
                s.wait()
            }
            None => Ok(()),
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// The engines the server is tested over.
pub const ENGINES: [EngineKind; 3] = [EngineKind::Btree, EngineKind::Lsm, EngineKind::Zkv];

/// Where the Redis tools come from.
const REDIS_TOOLS: &str = "scripts/install-redis-tools.sh";

/// Whether `tool` is installed (see `ferrite_process::tool`: missing, the
/// caller skips, or under CI the test fails).
pub fn have(tool: &str) -> bool {
    ferrite_process::tool::have(tool, REDIS_TOOLS)
}

/// Skips (or under CI fails) for a missing `what`, which `how` provides.
pub fn missing(what: &str, how: &str) {
    ferrite_process::tool::missing(what, how)
}

/// A real redis-server, persistence off, killed when dropped.
pub struct RedisServer {
    _proc: ferrite_process::Server,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl RedisServer {
    pub fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = ferrite_process::free_port().unwrap();
        let mut cmd = ferrite_process::redis_server(port, dir.path());
        cmd.args(["--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let proc = ferrite_process::Server::start(
            cmd,
            "redis-server",
            ferrite_process::Ready::Port(port),
            Duration::from_secs(30),
        )
        .unwrap();
        Self {
            _proc: proc,
            port,
            _dir: dir,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }
}
