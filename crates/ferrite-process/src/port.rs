//! Ports on loopback: one free now, and waiting until a process listens
//! on one.

use std::net::{TcpListener, TcpStream};
use std::process::Child;
use std::time::{Duration, Instant};

use crate::error::{ProcessError, Result};

/// A port nothing listens on now. Another process may take it before the
/// caller's server binds it; servers that can report the port they bound
/// (port 0, then [`crate::Ready::FirstLine`]) avoid that race.
pub fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(ProcessError::io("binding a free port"))?;
    Ok(l.local_addr()
        .map_err(ProcessError::io("reading a bound port"))?
        .port())
}

/// Waits until something accepts connections on `port`, at most
/// `timeout`; fails at once if `child` (named `name`) exits first.
pub fn wait_for_port(port: u16, child: &mut Child, name: &str, timeout: Duration) -> Result<()> {
    let t = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(ProcessError::ExitedAtStart {
                name: name.to_string(),
                status,
                output: String::new(),
            });
        }
        if t.elapsed() > timeout {
            return Err(ProcessError::NotReady {
                name: name.to_string(),
                seconds: timeout.as_secs(),
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_that_exits_is_not_waited_for() {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let p = free_port().unwrap();
        let e = wait_for_port(p, &mut c, "true", Duration::from_secs(30)).unwrap_err();
        assert!(matches!(e, ProcessError::ExitedAtStart { .. }), "{e}");
    }
}
