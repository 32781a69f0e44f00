//! A server process under test: started from a [`Command`], found ready
//! (its first line on stdout, or a port that answers), measured, and
//! stopped with SIGTERM or killed. A `Server` that is dropped while its
//! process runs kills it, so a failed test or experiment leaves nothing
//! behind.
//!
//! Invariant: once ready, the process's stdout (if piped) is drained by a
//! thread until it closes, so a server that prints more never blocks on a
//! full pipe or dies of a closed one.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::error::{ProcessError, Result};
use crate::port::{wait_for_port, wait_for_socket};

/// When a started server counts as ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ready {
    /// It printed its first line on stdout (ferrite's servers print their
    /// address once they have recovered and listen).
    FirstLine,
    /// It accepts connections on this loopback port.
    Port(u16),
    /// It accepts connections on the Unix socket at this path (nbdkit
    /// `-U`).
    Socket(PathBuf),
}

/// A running server process.
#[derive(Debug)]
pub struct Server {
    child: Child,
    name: String,
    line: String,
    started_in: Duration,
}

impl Server {
    /// Starts `cmd` (named `name` in errors) and waits at most `timeout`
    /// until it is `ready`. With [`Ready::FirstLine`] its stdout is piped
    /// here; its stderr is as `cmd` set it, and when piped it is read into
    /// the error if the server exits at start.
    pub fn start(
        mut cmd: Command,
        name: impl Into<String>,
        ready: Ready,
        timeout: Duration,
    ) -> Result<Self> {
        let name = name.into();
        let t = Instant::now();
        if matches!(ready, Ready::FirstLine) {
            cmd.stdout(Stdio::piped());
        }
        let child = cmd
            .spawn()
            .map_err(ProcessError::io(format!("starting {name}")))?;
        let mut s = Server {
            child,
            name,
            line: String::new(),
            started_in: Duration::ZERO,
        };
        let found = match ready {
            Ready::FirstLine => s.first_line_within(timeout),
            Ready::Port(p) => wait_for_port(p, &mut s.child, &s.name, timeout),
            Ready::Socket(path) => wait_for_socket(&path, &mut s.child, &s.name, timeout),
        };
        if let Err(e) = found {
            return Err(s.failed_start(e));
        }
        s.started_in = t.elapsed();
        Ok(s)
    }

    /// Reads the first line of stdout on a thread (a read cannot time
    /// out), which then drains the rest.
    fn first_line_within(&mut self, timeout: Duration) -> Result<()> {
        let Some(out) = self.child.stdout.take() else {
            return Err(ProcessError::io(format!("{}'s stdout", self.name))(
                std::io::Error::other("not piped"),
            ));
        };
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(out);
            let mut line = String::new();
            let got = r.read_line(&mut line).map(|_| line);
            let _ = tx.send(got);
            let _ = std::io::copy(&mut r, &mut std::io::sink());
        });
        match rx.recv_timeout(timeout) {
            Ok(Ok(line)) if !line.is_empty() => {
                self.line = line.trim_end().to_string();
                Ok(())
            }
            Ok(Ok(_)) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = self
                    .child
                    .wait()
                    .map_err(ProcessError::io(format!("waiting for {}", self.name)))?;
                Err(ProcessError::ExitedAtStart {
                    name: self.name.clone(),
                    status,
                    output: String::new(),
                })
            }
            Ok(Err(e)) => Err(ProcessError::io(format!("reading {}'s stdout", self.name))(
                e,
            )),
            Err(mpsc::RecvTimeoutError::Timeout) => Err(ProcessError::NotReady {
                name: self.name.clone(),
                seconds: timeout.as_secs(),
            }),
        }
    }

    /// Ends a start that failed: the process killed, and what it wrote on
    /// a piped stderr added to an exit at start.
    fn failed_start(&mut self, e: ProcessError) -> ProcessError {
        self.kill();
        let mut err = String::new();
        if let Some(mut s) = self.child.stderr.take() {
            let _ = s.read_to_string(&mut err);
        }
        match e {
            ProcessError::ExitedAtStart { name, status, .. } if !err.trim().is_empty() => {
                ProcessError::ExitedAtStart {
                    name,
                    status,
                    output: format!(": {}", err.trim()),
                }
            }
            e => e,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The line the server printed first ([`Ready::FirstLine`]; empty
    /// otherwise).
    pub fn first_line(&self) -> &str {
        &self.line
    }

    /// How long the server took to become ready (start-up and recovery).
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// The first address the first line names: a word that is a socket
    /// address, or an `nbd://HOST:PORT/...` URI.
    pub fn announced_addr(&self) -> Option<SocketAddr> {
        self.line.split_whitespace().find_map(|w| {
            let w = w.strip_prefix("nbd://").unwrap_or(w);
            w.split('/').next()?.parse().ok()
        })
    }

    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The process, for what this type does not cover (its stdin, a
    /// `try_wait`).
    pub fn child(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Resident memory, from `/proc`.
    pub fn rss_bytes(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.id())).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb * 1024)
    }

    /// CPU seconds (user and system) the process has used, from `/proc`.
    pub fn cpu_seconds(&self) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.id())).ok()?;
        // The fields after the command name, which may hold spaces.
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
        // SAFETY: sysconf reads a constant of the system.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        Some(ticks / hz)
    }

    /// Sends `signal` (SIGTERM, SIGINT, SIGSTOP, ...) to the process.
    pub fn signal(&self, signal: libc::c_int) -> Result<()> {
        let pid = libc::pid_t::try_from(self.id()).map_err(|_| {
            ProcessError::io(format!("signalling {}", self.name))(std::io::Error::other(
                "process id out of range",
            ))
        })?;
        // SAFETY: kill(2) on the id of a child this value owns and has
        // not reaped (it is reaped only by `wait_exit`, `kill` or drop).
        if unsafe { libc::kill(pid, signal) } != 0 {
            return Err(ProcessError::io(format!("signalling {}", self.name))(
                std::io::Error::last_os_error(),
            ));
        }
        Ok(())
    }

    /// Waits at most `timeout` for the process to end; its status.
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let t = Instant::now();
        loop {
            if let Some(s) = self
                .child
                .try_wait()
                .map_err(ProcessError::io(format!("waiting for {}", self.name)))?
            {
                return Ok(s);
            }
            if t.elapsed() > timeout {
                return Err(ProcessError::DidNotStop {
                    name: self.name.clone(),
                    seconds: timeout.as_secs(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the server with SIGTERM (ferrite closes its store, Redis its
    /// files) and waits at most `timeout`; an error unless it exits with
    /// success.
    pub fn stop(mut self, timeout: Duration) -> Result<()> {
        self.signal(libc::SIGTERM)?;
        let status = self.wait_exit(timeout)?;
        if status.success() {
            Ok(())
        } else {
            Err(ProcessError::Failed {
                name: self.name.clone(),
                status,
            })
        }
    }

    /// SIGKILL, and the process reaped.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.kill();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn the_first_line_is_read_and_its_address_found() {
        let s = Server::start(
            sh("echo 'ferrite btree listening on 127.0.0.1:7001'; echo more; sleep 30"),
            "echo",
            Ready::FirstLine,
            Duration::from_secs(30),
        )
        .unwrap();
        assert_eq!(s.first_line(), "ferrite btree listening on 127.0.0.1:7001");
        assert_eq!(s.announced_addr(), Some("127.0.0.1:7001".parse().unwrap()));
        s.stop(Duration::from_secs(10)).unwrap_err();
    }

    #[test]
    fn an_nbd_uri_is_an_address() {
        let s = Server::start(
            sh("echo 'ferrite volume serving \"v\" on nbd://127.0.0.1:7002/v (map)'; sleep 30"),
            "nbd",
            Ready::FirstLine,
            Duration::from_secs(30),
        )
        .unwrap();
        assert_eq!(s.announced_addr(), Some("127.0.0.1:7002".parse().unwrap()));
    }

    #[test]
    fn an_exit_at_start_says_what_the_server_said() {
        let mut c = sh("echo 'no such store' >&2; exit 3");
        c.stderr(Stdio::piped());
        let e = Server::start(c, "failing", Ready::FirstLine, Duration::from_secs(30)).unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, ProcessError::ExitedAtStart { .. }), "{text}");
        assert!(text.contains("no such store"), "{text}");
    }

    #[test]
    fn a_silent_server_is_not_ready_in_time() {
        let e = Server::start(
            sh("sleep 30"),
            "silent",
            Ready::FirstLine,
            Duration::from_millis(200),
        )
        .unwrap_err();
        assert!(matches!(e, ProcessError::NotReady { .. }), "{e}");
    }

    #[test]
    fn a_server_stopped_by_sigterm_reports_success_when_it_exits_cleanly() {
        let s = Server::start(
            sh("trap 'exit 0' TERM; echo ready; while :; do sleep 0.05; done"),
            "trapping",
            Ready::FirstLine,
            Duration::from_secs(30),
        )
        .unwrap();
        s.stop(Duration::from_secs(10)).unwrap();
    }

    #[test]
    fn a_dropped_server_is_killed() {
        let s = Server::start(
            sh("echo ready; sleep 30"),
            "dropped",
            Ready::FirstLine,
            Duration::from_secs(30),
        )
        .unwrap();
        let pid = s.id();
        drop(s);
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    }
}
