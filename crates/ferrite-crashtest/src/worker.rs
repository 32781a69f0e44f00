//! `ferrite-crashtest worker`: runs one seeded stream of operations on a
//! store until it is killed, reporting each operation on stdout as it
//! starts (`start N`), as it is acknowledged (`ack N`) and, in batched
//! mode, as a sync makes everything up to it durable (`synced N`).
//!
//! It opens the store first (recovering it, which may itself be killed),
//! reads all of it, and checks every read it makes against what it has
//! since written: a read that disagrees stops it with an error. With
//! `--recover-only` it only opens the store, reports `open` and waits to
//! be killed: the driver aims those kills at recovery itself. With
//! `--board FILE`, the engines count their background work in that file;
//! with `--kill-in KIND` it kills itself inside that kind of work.
//!
//! Inside a power-cut guest (`--dump DEVICE`), it also writes what it
//! recovered, after `verify()`, to a raw disk the driver reads once the
//! guest is gone, and reports how long recovery took (`recovered US`)
//! before `dumped`: the store itself lives on a disk only the guest reads.

use std::io::Write;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use ferrite::background::{self, Work};
use ferrite::SyncMode;
use rand::Rng;

use crate::expected;
use crate::ops::OpStream;
use crate::oracle::{apply, State};
use crate::setup;
use crate::WorkerArgs;

/// Syncs in batched mode come every this many operations.
const SYNC_EVERY: u64 = 25;

/// Below this delay a whitebox kill is sent at once, from inside the
/// work's start: a thread woken from a shorter sleep would come too late
/// for work this brief.
const KILL_AT_ONCE_BELOW: Duration = Duration::from_micros(150);

fn kill_self() {
    // SAFETY: kill(2) on our own pid; SIGKILL cannot be caught.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
}

/// Arms the whitebox kill: the first piece of `kind` to begin gets this
/// process SIGKILLed after a uniform delay up to `within`, while that
/// work is (most likely) still running.
fn kill_inside(kind: Work, within: Duration) {
    let armed = AtomicBool::new(true);
    background::set_begin_hook(move |w| {
        if w != kind || !armed.swap(false, Ordering::SeqCst) {
            return;
        }
        let delay = rand::thread_rng().gen_range(Duration::ZERO..=within);
        if delay < KILL_AT_ONCE_BELOW {
            kill_self();
        }
        std::thread::spawn(move || {
            std::thread::sleep(delay);
            kill_self();
        });
    });
}

pub fn run(w: &WorkerArgs) -> Result<()> {
    let (sync, seed, run) = (w.mode, w.seed, w.run);
    let out = std::io::stdout();
    let mut out = out.lock();
    if let Some(b) = &w.board {
        crate::board_file::install(b)?;
    }
    if let Some(kind) = w.kill_in {
        kill_inside(kind, Duration::from_micros(w.kill_within_us));
    }
    if w.skip_wal_sync {
        ferrite_wal::inject_skipped_commit_sync();
    }
    let t = Instant::now();
    let store = setup::open(w.engine, &w.path, sync, w.partitions, w.cache_kib)?;
    let recovered = t.elapsed();
    writeln!(out, "open")?;
    out.flush()?;
    let mut state: State = store.state()?;
    if let Some(device) = &w.dump {
        if let Err(e) = store.verify() {
            writeln!(out, "verify-failed {}", format!("{e:#}").replace('\n', " "))?;
            out.flush()?;
            anyhow::bail!("verify: {e:#}");
        }
        let image = expected::encode(&expected::Expected {
            engine: w.engine.name().to_string(),
            seed,
            next_run: run,
            state: state.clone(),
        });
        write_dump(device, &image)?;
        writeln!(out, "recovered {}", recovered.as_micros())?;
        writeln!(out, "dumped {}", image.len())?;
        out.flush()?;
    }
    if w.recover_only {
        // Never closed: whatever recovery left is what the next open sees.
        loop {
            std::thread::park();
        }
    }
    for (i, op) in (0u64..).zip(OpStream::for_engine(w.engine, seed, run)) {
        writeln!(out, "start {i}")?;
        out.flush()?;
        store
            .execute(&op, &state, w.transactions)
            .with_context(|| format!("operation {i}: {op:?}"))?;
        apply(&mut state, &op);
        writeln!(out, "ack {i}")?;
        if sync != SyncMode::Always && (i + 1) % SYNC_EVERY == 0 {
            store.sync()?;
            writeln!(out, "synced {i}")?;
        }
        out.flush()?;
    }
    Ok(())
}

/// Writes `image` to the raw `device` (length first, little-endian u64)
/// and syncs it, so it is on the host's file before `dumped` is printed.
fn write_dump(device: &std::path::Path, image: &[u8]) -> Result<()> {
    let mut b = (image.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(image);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(device)
        .with_context(|| format!("opening {}", device.display()))?;
    f.write_all(&b)?;
    f.sync_all()
        .with_context(|| format!("syncing {}", device.display()))
}
