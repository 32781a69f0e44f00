//! A server process under test (`ferrite serve`, `ferrite volume
//! serve`): started with its stderr in a log file beside the store, ready
//! once it prints its first line (its address, after recovery), driven
//! by a client thread and killed at will. Under `--power-cut` the server
//! runs in the guest of `guest.rs` instead, ready once its console shows
//! that line, and "killed" is the machine's power cut.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use parking_lot::Mutex;

use crate::guest::{Guest, Rig};
use crate::{board_file, Reported};

/// The port a server in the guest listens on (forwarded from the host).
pub const GUEST_PORT: u16 = 6379;

/// Longest a guest may take to boot and recover before it serves.
const GUEST_START: Duration = Duration::from_secs(300);

/// A server under test: a process here, or a machine running it.
pub enum Proc {
    Local(Child),
    Guest(Box<Guest>),
}

impl Proc {
    /// SIGKILL the process, or cut the machine's power.
    pub fn kill(&mut self) {
        match self {
            Proc::Local(c) => {
                let _ = c.kill();
                let _ = c.wait();
            }
            Proc::Guest(g) => g.cut(),
        }
    }

    /// Waits for the server, asked to stop, to end cleanly (a guest then
    /// unmounts its store and powers off).
    pub fn wait_exit(&mut self, what: &str) -> Result<()> {
        match self {
            Proc::Local(c) => wait_exit(c, what),
            Proc::Guest(g) => g.wait_off(Duration::from_secs(60)),
        }
    }

    /// The process id, for a signal (a local process only).
    pub fn local(&self) -> Option<&Child> {
        match self {
            Proc::Local(c) => Some(c),
            Proc::Guest(_) => None,
        }
    }
}

/// A server the driver let go of (a failed check returns early) is not
/// left running: it is killed when dropped, unless it has already ended.
impl Drop for Proc {
    fn drop(&mut self) {
        if let Proc::Local(c) = self {
            if matches!(c.try_wait(), Ok(None)) {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

/// Boots `rig` running `args` (`ferrite` serving, listening on
/// [`GUEST_PORT`]) and waits for the console line holding `ready`;
/// returns the machine, that line, where the host reaches the server, and
/// how long it took (boot and recovery).
pub fn start_in_guest(
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

fn spawn(mut cmd: Command, store: &Path) -> Result<Child> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path(store))?;
    cmd.stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .context("starting the server")
}

/// Starts `cmd` and waits for its first line; returns the process, that
/// line, and how long it took (start-up and recovery).
pub fn start(cmd: Command, store: &Path) -> Result<(Child, String, Duration)> {
    let t = Instant::now();
    let mut child = spawn(cmd, store)?;
    let stdout = child.stdout.take().context("the server's stdout")?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    if line.is_empty() {
        let _ = child.kill();
        let status = child.wait()?;
        bail!(
            "the server did not start ({status}); see {}",
            log_path(store).display()
        );
    }
    Ok((child, line, t.elapsed()))
}

/// Starts `cmd` and SIGKILLs it after `ms`, mostly while it recovers;
/// returns whether it was ready by then.
pub fn kill_while_starting(cmd: Command, store: &Path, ms: u64) -> Result<bool> {
    let mut child = spawn(cmd, store)?;
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

/// Waits up to a minute for `child` to exit by itself (after a shutdown
/// request) and requires a clean exit.
pub fn wait_exit(child: &mut Child, what: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait()? {
            if !status.success() {
                bail!("{what} exited with {status} when asked to stop");
            }
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = child.kill();
    bail!("{what} did not stop within 60 s of being asked to")
}
