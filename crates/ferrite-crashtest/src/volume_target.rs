//! The block volume as the process under test (`ferrite crashtest
//! --engine rask --volume`): the driver creates a small volume (1 MiB
//! segments, so reclamation runs), starts `ferrite volume serve` on it
//! and sends RASK's block-map stream over NBD, one request at a time:
//! a range put becomes a write of those blocks, a range delete a TRIM, a
//! read a READ checked against what the client expects. In `always` mode
//! writes carry FUA and trims are followed by a FLUSH, so a reply is an
//! acknowledgment; in `batched` mode a FLUSH every 25 operations makes
//! everything before it durable. It SIGKILLs the server at a random
//! instant, restarts it, reads the whole volume back, stops the server
//! (SIGTERM: flush and close) and runs `ferrite volume check`. Under
//! `--power-cut` the volume lives in the guest of `guest.rs`, the same
//! client reaches it through a forwarded port, and each kill is a power
//! cut of the machine.
//!
//! Every block written holds its value from the stream (the physical
//! block the RASK stream names), its own address and a fill derived from
//! both, so a block found holding anything else (another block's data, a
//! torn write, stale bytes) reads back as a value no operation wrote.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use ferrite::SyncMode;

use crate::guest::Rig;
use crate::nbd_client::NbdClient;
use crate::ops::{block_key, Op, OpStream, BLOCKS};
use crate::oracle::{apply, State};
use crate::{board_file, served, CrashtestArgs, Reported};

const BS: usize = 4096;
/// A FLUSH every this many operations in batched mode.
const FLUSH_EVERY: u64 = 25;

/// A running `ferrite volume serve`.
pub struct VolumeServer {
    proc: served::Proc,
    addr: SocketAddr,
}

/// The bytes of block `lba` holding `value`.
fn block_image(lba: u64, value: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(BS);
    b.extend_from_slice(value);
    b.extend_from_slice(&lba.to_be_bytes());
    let seed = value.iter().fold(lba.wrapping_mul(0x9E37_79B9), |h, x| {
        h.wrapping_mul(31).wrapping_add(u64::from(*x))
    });
    b.extend((b.len()..BS).map(|i| (seed.wrapping_add(i as u64 * 7) >> 3) as u8));
    b
}

/// What block `lba` read back as: absent if it is zeroes, its value if
/// it is exactly the image of one, and otherwise a value no operation
/// wrote (which the oracle reports).
fn block_value(lba: u64, b: &[u8]) -> Option<Vec<u8>> {
    if b.iter().all(|x| *x == 0) {
        return None;
    }
    let value = b.get(..8)?.to_vec();
    if block_image(lba, &value) == b {
        Some(value)
    } else {
        let mut bad = b"garbage:".to_vec();
        bad.extend_from_slice(&value);
        Some(bad)
    }
}

fn lba(key: &[u8]) -> Result<u64> {
    Ok(u64::from_be_bytes(
        key.try_into().context("a block key is 8 bytes")?,
    ))
}

/// Runs `op` over NBD; a read is checked against `state`.
fn execute(c: &mut NbdClient, op: &Op, state: &State, fua: bool) -> Result<()> {
    match op {
        Op::Batch(items) => {
            let Some((first, _)) = items.first() else {
                return Ok(());
            };
            let start = lba(first)?;
            let mut data = Vec::with_capacity(items.len() * BS);
            for (i, (k, v)) in items.iter().enumerate() {
                let (Some(v), true) = (v, lba(k)? == start + i as u64) else {
                    bail!("a volume write needs consecutive mapped blocks");
                };
                data.extend_from_slice(&block_image(start + i as u64, v));
            }
            c.write(start * BS as u64, &data, fua)?;
        }
        Op::DeleteRange(a, b) => {
            let (a, b) = (lba(a)?, lba(b)?);
            c.trim(a * BS as u64, (b - a) * BS as u64)?;
            if fua {
                c.flush()?;
            }
        }
        Op::Get(k) => {
            let l = lba(k)?;
            let mut b = vec![0u8; BS];
            c.read(l * BS as u64, &mut b)?;
            let got = block_value(l, &b);
            if got.as_ref() != state.get(k) {
                bail!(
                    "block {l} read {:?}, expected {:?}",
                    got.as_deref().map(|v| &v[..v.len().min(16)]),
                    state.get(k)
                );
            }
        }
        Op::Put(..) | Op::Delete(..) => bail!("not a block operation: {op:?}"),
    }
    Ok(())
}

fn command(me: &Path, a: &CrashtestArgs, board: Option<&Path>) -> Command {
    let mut cmd = Command::new(me);
    cmd.args(["volume", "serve", "--path"])
        .arg(&a.path)
        .args(["--listen", "127.0.0.1:0"]);
    if let Some(b) = board {
        cmd.arg("--board").arg(b);
    }
    cmd
}

/// Where the volume lives in the power-cut guest, and the port its
/// server listens on there.
const GUEST_VOLUME: &str = "/data/volume";

/// `ferrite volume serve` in the power-cut guest.
fn guest_args() -> Vec<String> {
    let listen = format!("0.0.0.0:{}", served::GUEST_PORT);
    [
        "ferrite",
        "volume",
        "serve",
        "--path",
        GUEST_VOLUME,
        "--listen",
        &listen,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// What `ferrite volume serve` prints once it serves.
const READY: &str = "nbd://";

/// The volume's size and segments: small segments, so reclamation runs.
fn create_args(path: &str) -> Vec<String> {
    let size = (BLOCKS * BS as u64).to_string();
    [
        "volume",
        "create",
        "--path",
        path,
        "--size",
        &size,
        "--segment-size",
        "1M",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Creates the volume if the directory holds none yet; in the power-cut
/// guest (`rig`), on its fresh store disk.
pub fn create_if_missing(me: &Path, a: &CrashtestArgs, rig: Option<&Rig>) -> Result<()> {
    if let Some(rig) = rig {
        let mut args = vec!["ferrite".to_string()];
        args.extend(create_args(GUEST_VOLUME));
        let mut guest = rig.boot(&args, None)?;
        return guest.wait_off(Duration::from_secs(300));
    }
    if a.path.exists() {
        return Ok(());
    }
    let path = a.path.to_str().context("the volume's path is not UTF-8")?;
    let out = Command::new(me).args(create_args(path)).output()?;
    if !out.status.success() {
        bail!(
            "ferrite volume create: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Starts the server (here, or booting `rig`'s machine) and waits until
/// it serves; returns it and how long that took (the map's recovery
/// among it).
/// A server started here counts its background work on the board in
/// `board`, if given.
pub fn start(
    me: &Path,
    a: &CrashtestArgs,
    board: Option<&Path>,
    rig: Option<&Rig>,
) -> Result<(VolumeServer, Duration)> {
    let here = || command(me, a, board);
    let (proc, addr, took) = served::start_where(rig, &guest_args(), READY, here, &a.path)?;
    Ok((VolumeServer { proc, addr }, took))
}

/// Starts the server and kills it (or cuts its machine's power) after
/// `ms`, mostly while it recovers.
pub fn kill_in_recovery(me: &Path, a: &CrashtestArgs, ms: u64, rig: Option<&Rig>) -> Result<bool> {
    match rig {
        Some(rig) => served::cut_while_starting(rig, &guest_args(), READY, ms),
        None => served::kill_while_starting(command(me, a, None), &a.path, ms),
    }
}

/// Drives run `run` of RASK's stream from `state` into a fresh server and
/// SIGKILLs it after `ms`. A read that disagrees, or a request the server
/// refuses, is an error.
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
    let (addr, seed, mut state) = (server.addr, a.seed, state.clone());
    let always = a.mode == SyncMode::Always;
    served::drive_then_kill(&mut server.proc, &board, ms, move |r2| {
        let died = |e: &anyhow::Error| e.downcast_ref::<std::io::Error>().is_some();
        let mut c = match NbdClient::connect(addr) {
            Ok(c) => c,
            Err(e) if died(&e) => return Ok(()),
            Err(e) => return Err(e),
        };
        let stream = OpStream::for_engine(ferrite::EngineKind::Rask, seed, run);
        for (i, op) in (0u64..).zip(stream) {
            r2.lock().started = Some(i);
            match execute(&mut c, &op, &state, always) {
                Ok(()) => {}
                Err(e) if died(&e) => return Ok(()),
                Err(e) => return Err(e.context(format!("operation {i}: {op:?}"))),
            }
            apply(&mut state, &op);
            r2.lock().acked = Some(i);
            if !always && (i + 1) % FLUSH_EVERY == 0 {
                match c.flush() {
                    Ok(()) => r2.lock().synced = Some(i),
                    Err(e) if died(&e) => return Ok(()),
                    Err(e) => return Err(e.context("flush")),
                }
            }
        }
        Ok(())
    })
}

impl VolumeServer {
    /// Every block of the volume, read back 1 MiB at a time.
    pub fn state(&self) -> Result<State> {
        let mut c = NbdClient::connect(self.addr)?;
        let mut out = State::new();
        let per = 256u64;
        let mut buf = vec![0u8; per as usize * BS];
        let mut at = 0;
        while at < BLOCKS {
            let n = per.min(BLOCKS - at);
            let chunk = &mut buf[..n as usize * BS];
            c.read(at * BS as u64, chunk)?;
            for (i, b) in chunk.chunks(BS).enumerate() {
                let l = at + i as u64;
                if let Some(v) = block_value(l, b) {
                    out.insert(block_key(l), v);
                }
            }
            at += n;
        }
        Ok(out)
    }

    /// The negative control's damage: every block trimmed (and flushed)
    /// behind the check's back.
    pub fn trim_all(&self) -> Result<()> {
        let mut c = NbdClient::connect(self.addr)?;
        c.trim(0, BLOCKS * BS as u64)?;
        c.flush()
    }

    /// SIGTERM (flush and close), wait for the exit.
    pub fn stop(mut self) -> Result<()> {
        // A guest's power is cut, idle: the next boot recovers a volume
        // already checked.
        self.proc.terminate("ferrite volume serve")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_reads_back_as_its_value_and_anything_else_as_garbage() {
        let v = 77u64.to_be_bytes().to_vec();
        let img = block_image(5, &v);
        assert_eq!(img.len(), BS);
        assert_eq!(block_value(5, &img), Some(v.clone()));
        // The same value at another address is not this block's.
        assert_ne!(block_value(6, &img), Some(v.clone()));
        let mut torn = img.clone();
        torn[BS - 1] ^= 1;
        assert!(block_value(5, &torn).unwrap().starts_with(b"garbage:"));
        assert_eq!(block_value(5, &[0u8; BS]), None);
    }
}
