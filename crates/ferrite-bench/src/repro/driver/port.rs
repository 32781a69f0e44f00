//! Loopback ports for the servers an experiment starts: a free one to
//! give a server, and waiting until the server listens on it.

use std::net::TcpListener;
use std::process::Child;
use std::time::{Duration, Instant};

use crate::error::{BenchError, Result};

/// A port on 127.0.0.1 nothing listens on now.
pub fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0")
        .map_err(|e| BenchError::Config(format!("no free port: {e}")))?;
    Ok(l.local_addr()
        .map_err(|e| BenchError::Config(e.to_string()))?
        .port())
}

/// Waits (up to a minute) until `child` (named `what` in errors) accepts
/// connections on `port`; an error if it exits first.
pub fn wait_for_port(port: u16, child: &mut Child, what: &str) -> Result<()> {
    let t = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(BenchError::Config(format!(
                "{what} exited at start: {status}"
            )));
        }
        if t.elapsed() > Duration::from_secs(60) {
            return Err(BenchError::Config(format!(
                "{what} did not listen on {port}"
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}
