//! The RESP server as the process under test (`ferrite crashtest
//! --server`): the driver starts `ferrite serve --sync always` on the
//! store and drives it from eight writers at once, each on its own
//! connection with its own stream over its own share of the keys, through
//! a Redis client library (SET, DEL and GET sent in pipelines of up to 16,
//! MULTI/EXEC for batches, every GET checked against what the writer
//! expects), SIGKILLs the server at a random instant, and reads the
//! recovered store back through a restarted server. A reply a writer
//! received is an acknowledgment; under `--sync always` the server sends
//! none before the write is durable. Each writer's share of the recovered
//! store must be a prefix of its own stream holding all it had
//! acknowledged, so the server's grouping of writes across connections is
//! checked under load, not one request at a time.
//!
//! Beside the writer, readers on connections of their own read the keys
//! the writer is writing at that moment (GET and MGET) and record what
//! they were shown: under `--sync always` no reply shows a write before
//! it is durable, so after the restart every value shown must be in the
//! recovered history (`oracle::check_shown`).
//!
//! The server's stderr goes to `DIR.server.log`, kept for a failure.
//! Under `--power-cut` the server runs in the guest of `guest.rs` on its
//! store disk, the same clients reach it through a forwarded port, and
//! each kill is a power cut of the machine.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use parking_lot::Mutex;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::guest::Rig;
use crate::ops::{self, key, Op, OpStream, KEYS};
use crate::oracle::{apply, Shown, State};
use crate::{board_file, served, CrashtestArgs, Progress, Reported};

/// Readers beside the writers.
const READERS: usize = 2;

/// Writers at once, each on its own connection.
const WRITERS: u32 = 8;

/// Longest pipeline a writer sends before it reads the replies.
const MAX_PIPELINE: usize = 16;

/// Observations one reader keeps at most (enough for a run of a few
/// hundred milliseconds; later ones are not recorded).
const MAX_SHOWN: usize = 200_000;

/// A running `ferrite serve`.
pub struct Server {
    proc: served::Proc,
    addr: SocketAddr,
}

/// What `ferrite serve` prints once it serves.
const READY: &str = "listening on";

/// The `ferrite serve` command for the store, counting background work
/// on `board` if given.
fn command(me: &Path, a: &CrashtestArgs, board: Option<&Path>) -> Command {
    let mut cmd = Command::new(me);
    cmd.args(["serve", "--engine", a.engine.name(), "--path"])
        .arg(&a.path)
        .args(["--listen", "127.0.0.1:0", "--sync", "always", "--cache-mb"])
        .arg(a.server_cache_mb.to_string());
    if let Some(b) = board {
        cmd.arg("--board").arg(b);
    }
    cmd
}

/// `ferrite serve` in the power-cut guest, on its store disk.
fn guest_args(a: &CrashtestArgs) -> Vec<String> {
    let listen = format!("0.0.0.0:{}", served::GUEST_PORT);
    [
        "ferrite",
        "serve",
        "--engine",
        a.engine.name(),
        "--path",
        "/data/store",
        "--listen",
        &listen,
        "--sync",
        "always",
        "--cache-mb",
        &a.server_cache_mb.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Starts the server (here, or booting `rig`'s machine) and waits until
/// it listens (its recovery done); returns it and how long that took.
/// A server started here counts its background work on the board in
/// `board`, if given.
pub fn start(
    me: &Path,
    a: &CrashtestArgs,
    board: Option<&Path>,
    rig: Option<&Rig>,
) -> Result<(Server, Duration)> {
    let here = || command(me, a, board);
    let (proc, addr, took) = served::start_where(rig, &guest_args(a), READY, here, &a.path)?;
    Ok((Server { proc, addr }, took))
}

/// Starts the server and kills it (or cuts its machine's power) after
/// `ms`, mostly while it recovers; returns whether it was listening by
/// then.
pub fn kill_in_recovery(me: &Path, a: &CrashtestArgs, ms: u64, rig: Option<&Rig>) -> Result<bool> {
    match rig {
        Some(rig) => served::cut_while_starting(rig, &guest_args(a), READY, ms),
        None => served::kill_while_starting(command(me, a, None), &a.path, ms),
    }
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

/// The keys an operation writes.
fn keys_of(op: &Op) -> Vec<Vec<u8>> {
    match op {
        Op::Put(k, _) | Op::Delete(k) => vec![k.clone()],
        Op::Batch(items) => items.iter().map(|(k, _)| k.clone()).collect(),
        Op::DeleteRange(..) | Op::Get(_) => Vec::new(),
    }
}

/// Reads the keys the writers are writing (one writer after another),
/// over and over, until the server dies or the writers are done,
/// recording what each reply showed.
fn read_along(
    addr: SocketAddr,
    writing: &[Mutex<Vec<Vec<u8>>>],
    done: &AtomicBool,
    shown: &Mutex<Vec<Shown>>,
    mget: bool,
) {
    let Ok(mut con) = connect(addr) else {
        return;
    };
    let mut turn = 0usize;
    while !done.load(Ordering::Acquire) {
        turn += 1;
        let keys = writing[turn % writing.len()].lock().clone();
        if keys.is_empty() {
            std::thread::yield_now();
            continue;
        }
        let got: Vec<Option<Vec<u8>>> = if mget {
            match redis::cmd("MGET").arg(&keys).query(&mut con) {
                Ok(v) => v,
                Err(_) => return,
            }
        } else {
            match redis::cmd("GET").arg(&keys[0]).query(&mut con) {
                Ok(v) => vec![v],
                Err(_) => return,
            }
        };
        let mut s = shown.lock();
        if s.len() >= MAX_SHOWN {
            return;
        }
        s.extend(keys.into_iter().zip(got));
    }
}

/// Drives run `run` from `state` into a fresh server, eight writers and
/// two readers at once, and SIGKILLs it after `ms`. A read that
/// disagrees is an error.
pub fn kill_one(
    me: &Path,
    a: &CrashtestArgs,
    state: &State,
    run: u64,
    ms: u64,
    rig: Option<&Rig>,
) -> Result<Reported> {
    let board = board_file::path_for(&a.path);
    board_file::reset(&board)?;
    let (mut server, _) = start(me, a, Some(&board), rig)?;
    let (addr, seed) = (server.addr, a.seed);
    let writing: Arc<Vec<Mutex<Vec<Vec<u8>>>>> =
        Arc::new((0..WRITERS).map(|_| Mutex::new(Vec::new())).collect());
    let progress = Arc::new(Mutex::new(vec![Progress::default(); WRITERS as usize]));
    let done = Arc::new(AtomicBool::new(false));
    let shown = Arc::new(Mutex::new(Vec::new()));
    let readers: Vec<_> = (0..READERS)
        .map(|i| {
            let (w, d, s) = (writing.clone(), done.clone(), shown.clone());
            std::thread::spawn(move || read_along(addr, &w, &d, &s, i % 2 == 1))
        })
        .collect();
    let (state, w, d, p) = (
        state.clone(),
        writing.clone(),
        done.clone(),
        progress.clone(),
    );
    let result = served::drive_then_kill(&mut server.proc, &board, ms, move |_| {
        let _stop = StopOnDrop(d);
        let state = Arc::new(state);
        let writers: Vec<_> = (0..WRITERS)
            .map(|i| {
                let (state, w, p) = (state.clone(), w.clone(), p.clone());
                std::thread::spawn(move || write_stream(addr, seed, run, i, &state, &w, &p))
            })
            .collect();
        let mut first_err = Ok(());
        for h in writers {
            let r = h
                .join()
                .map_err(|_| anyhow::anyhow!("a writer thread panicked"))
                .and_then(|r| r);
            if first_err.is_ok() {
                first_err = r;
            }
        }
        first_err
    });
    done.store(true, Ordering::Release);
    for r in readers {
        let _ = r.join();
    }
    let mut reported = result?;
    reported.writers = progress.lock().clone();
    reported.shown = std::mem::take(&mut *shown.lock());
    Ok(reported)
}

/// Writer `w`: its stream from `state` (its share of it), in pipelines of
/// random length (a batch goes alone, as MULTI/EXEC), noting in
/// `progress` what it sent and what was acknowledged, until the server
/// dies.
fn write_stream(
    addr: SocketAddr,
    seed: u64,
    run: u64,
    w: u32,
    state: &State,
    writing: &[Mutex<Vec<Vec<u8>>>],
    progress: &Mutex<Vec<Progress>>,
) -> Result<()> {
    let Ok(mut con) = connect(addr) else {
        // Killed before the connection was made.
        return Ok(());
    };
    let mine = |k: &Vec<u8>| ops::writer_of(k, WRITERS) == w;
    let mut state: State = state
        .iter()
        .filter(|(k, _)| mine(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut rng = SmallRng::seed_from_u64(seed ^ run.rotate_left(17) ^ u64::from(w));
    let mut stream = OpStream::for_server_writer(seed, run, w, WRITERS).peekable();
    let mut next = 0u64;
    loop {
        let depth = rng.gen_range(1..=MAX_PIPELINE);
        let mut group = Vec::new();
        while group.len() < depth {
            let batch_next = matches!(stream.peek(), Some(Op::Batch(_)));
            if batch_next && !group.is_empty() {
                break;
            }
            group.extend(stream.next());
            if batch_next {
                break;
            }
        }
        let last = next + group.len() as u64 - 1;
        progress.lock()[w as usize].started = Some(last);
        *writing[w as usize].lock() = group.iter().flat_map(keys_of).collect();
        let sent = match &group[..] {
            [op @ Op::Batch(_)] => execute(&mut con, op, &state),
            _ => pipeline(&mut con, &group, &state),
        };
        match sent {
            Ok(()) => {}
            // The server died under the request: nothing acknowledged.
            Err(e)
                if e.downcast_ref::<redis::RedisError>()
                    .is_some_and(|r| r.is_io_error() || r.is_connection_dropped()) =>
            {
                return Ok(())
            }
            Err(e) => {
                return Err(e.context(format!("writer {w}, operations {next}..={last}")));
            }
        }
        for op in &group {
            apply(&mut state, op);
        }
        progress.lock()[w as usize].acked = Some(last);
        next = last + 1;
    }
}

/// Sends `group` (puts, deletes and reads) as one pipeline and checks each
/// read against `state` with the group's earlier writes applied.
fn pipeline(con: &mut redis::Connection, group: &[Op], state: &State) -> Result<()> {
    let mut p = redis::pipe();
    for op in group {
        match op {
            Op::Put(k, v) => p.cmd("SET").arg(k).arg(v),
            Op::Delete(k) => p.cmd("DEL").arg(k),
            Op::Get(k) => p.cmd("GET").arg(k),
            Op::Batch(_) | Op::DeleteRange(..) => bail!("not sent in a pipeline: {op:?}"),
        };
    }
    let replies: Vec<redis::Value> = p.query(con)?;
    for (i, (op, reply)) in group.iter().zip(&replies).enumerate() {
        let Op::Get(k) = op else { continue };
        let got: Option<Vec<u8>> = redis::from_redis_value(reply)?;
        // The value the key holds after the group's writes before this read.
        let want = group[..i]
            .iter()
            .rev()
            .find_map(|o| match o {
                Op::Put(k2, v) if k2 == k => Some(Some(v)),
                Op::Delete(k2) if k2 == k => Some(None),
                _ => None,
            })
            .unwrap_or_else(|| state.get(k));
        if got.as_ref() != want {
            bail!(
                "GET {} found {:?} bytes, expected {:?}",
                String::from_utf8_lossy(k),
                got.map(|v| v.len()),
                want.map(Vec::len)
            );
        }
    }
    Ok(())
}

/// Tells the readers the writers are done, however they end.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
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

    /// The negative control's damage: every key deleted behind the
    /// check's back.
    pub fn flush_all(&self) -> Result<()> {
        let mut con = connect(self.addr)?;
        redis::cmd("FLUSHALL").query::<()>(&mut con)?;
        Ok(())
    }

    /// SHUTDOWN (drain, sync, close) and wait for the process to end.
    pub fn shutdown(mut self) -> Result<()> {
        if let Ok(mut con) = connect(self.addr) {
            // The server closes the connection instead of replying.
            let _ = redis::cmd("SHUTDOWN").query::<()>(&mut con);
        }
        self.proc.wait_exit("ferrite serve")
    }
}
