//! The RESP server as the process under test (`ferrite crashtest
//! --server`): the driver starts `ferrite serve --sync always` on the
//! store and drives the operation stream through a Redis client library
//! (SET, DEL, MULTI/EXEC for batches, GET checked against what it
//! expects), SIGKILLs the server at a random instant, and reads the
//! recovered store back through a restarted server. A reply the client
//! received is an acknowledgment; under `--sync always` the server sends
//! none before the write is durable.
//!
//! The server's stderr goes to `DIR.server.log`, kept for a failure.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use anyhow::{bail, Result};

use super::ops::{key, Op, OpStream, KEYS};
use super::oracle::{apply, State};
use super::{board_file, served, CrashtestArgs, Reported};

/// A running `ferrite serve`.
pub struct Server {
    child: Child,
    addr: SocketAddr,
}

/// The `ferrite serve` command for the store, counting background work
/// on `board` if given.
fn command(me: &Path, a: &CrashtestArgs, board: Option<&Path>) -> Command {
    let mut cmd = Command::new(me);
    cmd.args(["serve", "--engine", a.engine.name(), "--path"])
        .arg(&a.path)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--sync",
            "always",
            "--cache-mb",
            "4",
        ]);
    if let Some(b) = board {
        cmd.arg("--board").arg(b);
    }
    cmd
}

/// Starts the server and waits until it listens (its recovery done);
/// returns it and how long that took.
pub fn start(me: &Path, a: &CrashtestArgs) -> Result<(Server, Duration)> {
    start_counting(me, a, None)
}

/// [`start`], counting background work on the board in `board`.
fn start_counting(
    me: &Path,
    a: &CrashtestArgs,
    board: Option<&Path>,
) -> Result<(Server, Duration)> {
    let (mut child, line, took) = served::start(command(me, a, board), &a.path)?;
    // "ferrite ENGINE listening on ADDR"
    let Some(addr) = line
        .trim()
        .rsplit(' ')
        .next()
        .and_then(|s| s.parse::<SocketAddr>().ok())
    else {
        let _ = child.kill();
        let _ = child.wait();
        bail!("the server printed no address: {line:?}");
    };
    Ok((Server { child, addr }, took))
}

/// Starts the server and kills it after `ms`, mostly while it recovers;
/// returns whether it was listening by then.
pub fn kill_in_recovery(me: &Path, a: &CrashtestArgs, ms: u64) -> Result<bool> {
    served::kill_while_starting(command(me, a, None), &a.path, ms)
}

fn connect(addr: SocketAddr) -> Result<redis::Connection> {
    let client = redis::Client::open(format!("redis://{addr}/"))?;
    let con = client.get_connection_with_timeout(Duration::from_secs(10))?;
    con.set_read_timeout(Some(Duration::from_secs(60)))?;
    Ok(con)
}

/// Runs `op` on the server; a read is checked against `state`.
fn execute(con: &mut redis::Connection, op: &Op, state: &State) -> Result<()> {
    match op {
        Op::Put(k, v) => redis::cmd("SET").arg(k).arg(v).query::<()>(con)?,
        Op::Delete(k) => {
            redis::cmd("DEL").arg(k).query::<i64>(con)?;
        }
        Op::Batch(items) => {
            let mut p = redis::pipe();
            p.atomic();
            for (k, v) in items {
                match v {
                    Some(v) => p.cmd("SET").arg(k).arg(v).ignore(),
                    None => p.cmd("DEL").arg(k).ignore(),
                };
            }
            p.query::<()>(con)?;
        }
        Op::Get(k) => {
            let got: Option<Vec<u8>> = redis::cmd("GET").arg(k).query(con)?;
            if got.as_ref() != state.get(k) {
                bail!(
                    "GET {} found {:?} bytes, expected {:?}",
                    String::from_utf8_lossy(k),
                    got.map(|v| v.len()),
                    state.get(k).map(Vec::len)
                );
            }
        }
        Op::DeleteRange(..) => bail!("the server's stream has no range deletes"),
    }
    Ok(())
}

/// Drives run `run` of the stream from `state` into a fresh server and
/// SIGKILLs it after `ms`. A read that disagrees is an error.
pub fn kill_one(
    me: &Path,
    a: &CrashtestArgs,
    state: &State,
    run: u64,
    ms: u64,
) -> Result<Reported> {
    let board = board_file::path_for(&a.path);
    board_file::reset(&board)?;
    let (mut server, _) = start_counting(me, a, Some(&board))?;
    let (addr, seed, mut state) = (server.addr, a.seed, state.clone());
    served::drive_then_kill(&mut server.child, &board, ms, move |r2| {
        let Ok(mut con) = connect(addr) else {
            // Killed before the connection was made.
            return Ok(());
        };
        for (i, op) in (0u64..).zip(OpStream::for_server(seed, run)) {
            r2.lock().started = Some(i);
            match execute(&mut con, &op, &state) {
                Ok(()) => {}
                // The server died under the request: nothing acknowledged.
                Err(e)
                    if e.downcast_ref::<redis::RedisError>()
                        .is_some_and(|r| r.is_io_error() || r.is_connection_dropped()) =>
                {
                    return Ok(())
                }
                Err(e) => return Err(e.context(format!("operation {i}: {op:?}"))),
            }
            apply(&mut state, &op);
            r2.lock().acked = Some(i);
        }
        Ok(())
    })
}

impl Server {
    /// Every key of the stream's key space, read with pipelined GETs.
    pub fn state(&self) -> Result<State> {
        let mut con = connect(self.addr)?;
        let mut out = State::new();
        let keys: Vec<Vec<u8>> = (0..KEYS).map(key).collect();
        for chunk in keys.chunks(500) {
            let mut p = redis::pipe();
            for k in chunk {
                p.cmd("GET").arg(k);
            }
            let values: Vec<Option<Vec<u8>>> = p.query(&mut con)?;
            for (k, v) in chunk.iter().zip(values) {
                if let Some(v) = v {
                    out.insert(k.clone(), v);
                }
            }
        }
        Ok(out)
    }

    /// SHUTDOWN (drain, sync, close) and wait for the process to end.
    pub fn shutdown(mut self) -> Result<()> {
        if let Ok(mut con) = connect(self.addr) {
            // The server closes the connection instead of replying.
            let _ = redis::cmd("SHUTDOWN").query::<()>(&mut con);
        }
        served::wait_exit(&mut self.child, "ferrite serve")
    }
}
