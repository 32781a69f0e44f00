//! Where a server listens: a port on loopback (one free now) or a Unix
//! socket, and waiting until a process listens there.

use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::Path;
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
    wait_until(child, name, timeout, || {
        TcpStream::connect(("127.0.0.1", port)).is_ok()
    })
}

/// Waits until something accepts connections on the Unix socket at
/// `path`, as [`wait_for_port`] does on a port.
pub fn wait_for_socket(
    path: &Path,
    child: &mut Child,
    name: &str,
    timeout: Duration,
) -> Result<()> {
    wait_until(child, name, timeout, || UnixStream::connect(path).is_ok())
}

fn wait_until(
    child: &mut Child,
    name: &str,
    timeout: Duration,
    mut listening: impl FnMut() -> bool,
) -> Result<()> {
    let t = Instant::now();
    while !listening() {
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

    #[test]
    fn a_socket_is_ready_once_something_listens_on_it() {
        let dir = std::env::temp_dir().join(format!("ferrite-process-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s");
        let mut c = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let e = wait_for_socket(&path, &mut c, "sleep", Duration::from_millis(100)).unwrap_err();
        assert!(matches!(e, ProcessError::NotReady { .. }), "{e}");
        let _l = std::os::unix::net::UnixListener::bind(&path).unwrap();
        wait_for_socket(&path, &mut c, "sleep", Duration::from_secs(5)).unwrap();
        let _ = c.kill();
        let _ = c.wait();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
