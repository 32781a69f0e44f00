//! A server process under test (`ferrite serve`, `ferrite volume
//! serve`): started with its stderr in a log file beside the store, ready
//! once it prints its first line (its address, after recovery), driven
//! by a client thread and killed at will. Under `--power-cut` the server
//! runs in the guest of `guest.rs` instead, ready once its console shows
//! that line, and "killed" is the machine's power cut.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use ferrite_process::Ready;
use parking_lot::Mutex;

use crate::guest::{Guest, Rig};
use crate::{board_file, Reported};

/// The port a server in the guest listens on (forwarded from the host).
pub const GUEST_PORT: u16 = 6379;

/// Longest a guest may take to boot and recover before it serves.
const GUEST_START: Duration = Duration::from_secs(300);

/// Longest a server here may take to recover before it serves.
const LOCAL_START: Duration = Duration::from_secs(300);

/// Longest a server asked to stop may take to close its store.
const STOP_WAIT: Duration = Duration::from_secs(60);

/// A server under test: a process here, or a machine running it.
pub enum Proc {
    Local(ferrite_process::Server),
    Guest(Box<Guest>),
}

impl Proc {
    /// SIGKILL the process, or cut the machine's power.
    pub fn kill(&mut self) {
        match self {
            Proc::Local(s) => s.kill(),
            Proc::Guest(g) => g.cut(),
        }
    }

    /// Waits for the server, asked to stop, to end cleanly (a guest then
    /// unmounts its store and powers off).
    pub fn wait_exit(&mut self, what: &str) -> Result<()> {
        match self {
            Proc::Local(s) => {
                let status = s
                    .wait_exit(STOP_WAIT)
                    .inspect_err(|_| s.kill())
                    .with_context(|| format!("{what} asked to stop"))?;
                if !status.success() {
                    bail!("{what} exited with {status} when asked to stop");
                }
                Ok(())
            }
            Proc::Guest(g) => g.wait_off(Duration::from_secs(60)),
        }
    }

    /// Asks the server to stop with SIGTERM (it flushes and closes) and
    /// waits for a clean exit; a guest, which cannot be signalled, has its
    /// power cut instead.
    pub fn terminate(&mut self, what: &str) -> Result<()> {
        match self {
            Proc::Local(s) => {
                s.signal(libc::SIGTERM)?;
                self.wait_exit(what)
            }
            Proc::Guest(g) => {
                g.cut();
                Ok(())
            }
        }
    }
}

/// Boots `rig` running `args` (`ferrite` serving, listening on
/// [`GUEST_PORT`]) and waits for the console line holding `ready`;
/// returns the machine, that line, where the host reaches the server, and
/// how long it took (boot and recovery).
fn start_in_guest(
    rig: &Rig,
    args: &[String],
    ready: &str,
) -> Result<(Proc, String, std::net::SocketAddr, Duration)> {
    let t = Instant::now();
    let mut guest = rig.boot(args, Some(GUEST_PORT))?;
    let addr = guest.addr.context("the guest's forwarded port")?;
    let until = Instant::now() + GUEST_START;
    loop {
        let Some(line) = guest.line(until) else {
            let tail = guest.tail();
            guest.cut();
            bail!("the server in the guest did not start (console:\n{tail})");
        };
        if line.contains(ready) {
            return Ok((Proc::Guest(Box::new(guest)), line, addr, t.elapsed()));
        }
        if line.starts_with("ferrite-guest:") {
            let tail = guest.tail();
            guest.cut();
            bail!("the server in the guest ended at start (console:\n{tail})");
        }
    }
}

/// Boots `rig` running the server and cuts the power after `ms`, mostly
/// while it boots or recovers; returns whether it was serving by then.
pub fn cut_while_starting(rig: &Rig, args: &[String], ready: &str, ms: u64) -> Result<bool> {
    let mut guest = rig.boot(args, Some(GUEST_PORT))?;
    let until = Instant::now() + Duration::from_millis(ms);
    let mut serving = false;
    while let Some(line) = guest.line(until) {
        serving |= line.contains(ready);
    }
    guest.cut();
    Ok(serving)
}

/// `DIR.server.log`: the servers' stderr, appended run after run.
pub fn log_path(store: &Path) -> PathBuf {
    let mut p = store.as_os_str().to_owned();
    p.push(".server.log");
    PathBuf::from(p)
}

fn log_file(store: &Path) -> Result<std::fs::File> {
    Ok(std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path(store))?)
}

/// Starts a server in `rig`'s machine (with `guest` for its arguments,
/// ready once it prints `ready`) or, without a rig, here as `here` says;
/// waits until it serves and returns how long that took.
pub fn start_where(
    rig: Option<&Rig>,
    guest: &[String],
    ready: &str,
    here: impl FnOnce() -> Command,
    store: &Path,
) -> Result<(Proc, SocketAddr, Duration)> {
    match rig {
        Some(rig) => {
            let (proc, _, addr, took) = start_in_guest(rig, guest, ready)?;
            Ok((proc, addr, took))
        }
        None => start(here(), store),
    }
}

/// Starts `cmd` (stderr appended to the log beside `store`) and waits for
/// its first line, which names the address it serves; returns the
/// process, that address, and how long it took (start-up and recovery).
fn start(mut cmd: Command, store: &Path) -> Result<(Proc, SocketAddr, Duration)> {
    cmd.stderr(log_file(store)?);
    let server = ferrite_process::Server::start(cmd, "the server", Ready::FirstLine, LOCAL_START)
        .with_context(|| format!("see {}", log_path(store).display()))?;
    let Some(addr) = server.announced_addr() else {
        bail!("the server printed no address: {:?}", server.first_line());
    };
    let took = server.started_in();
    Ok((Proc::Local(server), addr, took))
}

/// Starts `cmd` and SIGKILLs it after `ms`, mostly while it recovers;
/// returns whether it was ready by then.
pub fn kill_while_starting(mut cmd: Command, store: &Path, ms: u64) -> Result<bool> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(log_file(store)?)
        .spawn()
        .context("starting the server")?;
    let stdout = child.stdout.take().context("the server's stdout")?;
    let ready = Arc::new(Mutex::new(false));
    let r2 = ready.clone();
    let reader = std::thread::spawn(move || {
        let mut line = String::new();
        if BufReader::new(stdout).read_line(&mut line).unwrap_or(0) > 0 {
            *r2.lock() = true;
        }
    });
    std::thread::sleep(Duration::from_millis(ms));
    let _ = child.kill();
    let _ = child.wait();
    let _ = reader.join();
    let was_ready = *ready.lock();
    Ok(was_ready)
}

/// Runs `client` (which records what it started, got acknowledged and
/// saw synced in the shared report) against the server `child` on its
/// own thread, SIGKILLs the server after `ms`, and returns the report
/// with the background-work board the server left in `board`.
pub fn drive_then_kill(
    server: &mut Proc,
    board: &Path,
    ms: u64,
    client: impl FnOnce(Arc<Mutex<Reported>>) -> Result<()> + Send + 'static,
) -> Result<Reported> {
    let reported = Arc::new(Mutex::new(Reported {
        opened: true,
        ..Reported::default()
    }));
    let r2 = reported.clone();
    let client = std::thread::spawn(move || client(r2));
    std::thread::sleep(Duration::from_millis(ms));
    server.kill();
    client
        .join()
        .map_err(|_| anyhow::anyhow!("the client thread panicked"))??;
    let mut r = reported.lock().clone();
    r.board = board_file::read(board);
    Ok(r)
}
