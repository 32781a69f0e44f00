//! The peer's command line: `redis-server` on a loopback port with its
//! files in a directory and RDB snapshots off, which callers extend
//! (AOF, `--replicaof`, ...) before starting it as a [`crate::Server`]
//! ready on that port.

use std::path::Path;
use std::process::Command;

/// `redis-server --port PORT --bind 127.0.0.1 --save "" --dir DIR`.
pub fn redis_server(port: u16, dir: &Path) -> Command {
    let mut cmd = Command::new("redis-server");
    cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", ""])
        .arg("--dir")
        .arg(dir);
    cmd
}
