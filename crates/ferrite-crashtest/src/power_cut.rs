//! `ferrite crashtest --power-cut`: the worker runs inside the guest of
//! `guest.rs` and each cut kills the whole machine, so what the guest had
//! not synced is gone, as after a power failure (the crash states LazyFS
//! and ALICE explore, and SQLite's crash VFS).
//!
//! One cycle: boot the machine on the store as the last cut left it; the
//! worker recovers it, verifies it and writes what it holds to the
//! channel disk (`dumped`), then runs its next run of operations; a
//! random time later the machine is cut. The dump of each boot is checked
//! here against the oracle for the run the previous cut interrupted, with
//! what that worker acknowledged on the console before the cut. A quarter
//! of the cycles also boot a worker that only recovers and cut it between
//! its start and its dump (as timed at the last boot), so cuts land
//! inside start-up and recovery too. The
//! run ends with one more boot that only recovers, for the last check.
//!
//! The console is the only way out of the guest, and it lags: a cut
//! loses the lines still in the guest's terminal buffers. So what the
//! host saw acknowledged is a true lower bound on what survives, but what
//! it saw started is no upper bound: the oracle allows the worker to have
//! run up to 20,000 operations beyond it.
//!
//! Every campaign starts from an empty store: the disks are made afresh.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rand::{Rng, SeedableRng};

use crate::guest::{Guest, Rig, COMMAND_STARTS};
use crate::ops::{Op, OpStream};
use crate::oracle::{self, State};
use crate::{expected, judge, CrashtestArgs, Reported, Tally};

/// Longest a boot may take to reach its dump: far above the seconds it
/// takes, for a loaded host.
const BOOT_TIMEOUT: Duration = Duration::from_secs(300);

pub fn run(me: &Path, ferrite: &Path, a: &CrashtestArgs) -> Result<()> {
    let rig = Rig::create(&a.path, &[me, ferrite])?;
    let mut exp = expected::Expected {
        engine: a.engine.name().to_string(),
        seed: a.seed,
        next_run: 0,
        state: State::new(),
    };
    let mut rng = rand::rngs::SmallRng::seed_from_u64(a.seed ^ 0x0B0A_7C07);
    let mut tally = Tally {
        commit: crate::commit(),
        ..Tally::default()
    };
    let mut recoveries: Vec<f64> = Vec::new();
    let bar = indicatif::ProgressBar::new(a.kills);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} power cuts {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    // The run the last cut interrupted, and what its worker reported.
    let mut pending: Option<(u64, Reported)> = None;
    // When the last boot's command started and when it had dumped what
    // it recovered: cuts aimed at recovery land between the two.
    let mut last_window = (Duration::from_secs(2), Duration::from_secs(3));
    // Every way the campaign ends writes its summary (see `crate::run`).
    let mut campaign = || -> Result<()> {
        for cut in 0..=a.kills {
            let t = Instant::now();
            let last = cut == a.kills;
            if !last && rng.gen_bool(0.25) && pending.is_some() {
                let within = rng.gen_range(last_window.0..=last_window.1);
                if cut_in_recovery(&rig, &worker_args(a, exp.next_run, true), within)? {
                    tally.in_recovery += 1;
                }
            }
            // This boot runs the run after the one the last cut interrupted.
            let run = pending.as_ref().map_or(exp.next_run, |(p, _)| p + 1);
            rig.clear_dump()?;
            let mut guest = rig.boot(&worker_args(a, run, last), None)?;
            let (command_at, recovered_us) =
                wait_for_dump(&guest).map_err(|e| crate::fail(a, run, &e))?;
            let boot = guest.started.elapsed();
            last_window = (command_at, boot);
            tally.boot_to_dump_s.push(boot.as_secs_f64());
            recoveries.push(recovered_us as f64 / 1e3);
            let image = rig.read_dump().context("reading the guest's dump")?;
            let dumped = expected::decode(&image).context("decoding the guest's dump")?;
            if dumped.next_run != run || dumped.seed != a.seed {
                bail!(
                    "the guest dumped run {} of seed {}, not run {run} of seed {}",
                    dumped.next_run,
                    dumped.seed,
                    a.seed
                );
            }
            // The store this boot recovered is what the last cut left.
            let (prev, reported) = match pending.take() {
                Some((prev, r)) => (prev, ran_ahead(a, &exp.state, prev, r, &dumped.state)),
                None => (run, Reported::default()),
            };
            judge(
                a,
                &mut exp,
                prev,
                &reported,
                &dumped.state,
                &mut tally,
                &mut recoveries,
            )?;
            if pending_was_run(&reported) {
                tally.kills += 1;
                tally.acked_ops += reported.acked_ops();
                exp.next_run = prev + 1;
                bar.inc(1);
            }
            if last {
                guest.cut();
                break;
            }
            let ms = rng.gen_range(10..a.max_run_ms.max(11));
            let reported = run_until_cut(guest, Duration::from_millis(ms))
                .map_err(|e| crate::fail(a, run, &e))?;
            pending = Some((run, reported));
            tally.cycle_s.push(t.elapsed().as_secs_f64());
            bar.set_message(format!(
                "{} acked ops, {} keys, {} cut in recovery",
                tally.acked_ops,
                exp.state.len(),
                tally.in_recovery
            ));
        }
        Ok(())
    };
    let outcome = campaign();
    bar.finish();
    tally.conclude(outcome, a, &exp, &mut recoveries)
}

/// Operations the worker may have run past the last `start` its console
/// carried out before the cut: lines still in the guest's terminal
/// buffers die with it, so what the host saw started is no upper bound.
/// Acknowledgments are (each was printed after its write was durable).
const RUN_AHEAD: [usize; 2] = [1_000, 20_000];

/// `r` with `started` raised to what the worker may have run unseen: the
/// smaller margin when the recovered state fits in it, else the larger
/// (which `judge` then checks, and fails on if it does not fit either).
fn ran_ahead(
    a: &CrashtestArgs,
    before: &State,
    run: u64,
    mut r: Reported,
    found: &State,
) -> Reported {
    let seen = crate::count(r.started).max(crate::count(r.acked));
    let durable = if a.mode == ferrite::SyncMode::Always {
        crate::count(r.acked)
    } else {
        crate::count(r.synced)
    };
    let mut bound = seen + RUN_AHEAD[1];
    let ops: Vec<Op> = OpStream::for_engine(a.engine, a.seed, run)
        .take(seen + RUN_AHEAD[0])
        .collect();
    if oracle::recovered_prefix(before, &ops, durable, ops.len(), found).is_ok() {
        bound = ops.len();
    }
    r.started = Some(bound as u64 - 1);
    r
}

/// Whether a report comes from a worker that ran (the first boot checks
/// the empty store against nothing run).
fn pending_was_run(r: &Reported) -> bool {
    r.opened
}

/// The worker's command line inside the guest.
fn worker_args(a: &CrashtestArgs, run: u64, recover_only: bool) -> Vec<String> {
    let mut v: Vec<String> = [
        "ferrite-crashtest",
        "worker",
        "--engine",
        a.engine.name(),
        "--path",
        "/data/store",
        "--dump",
        "/dev/vdc",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.extend([
        "--mode".into(),
        a.mode.to_string(),
        "--seed".into(),
        a.seed.to_string(),
        "--run".into(),
        run.to_string(),
        "--partitions".into(),
        a.partitions.to_string(),
        "--cache-kib".into(),
        a.cache_kib.to_string(),
    ]);
    if recover_only {
        v.push("--recover-only".into());
    }
    if a.skip_wal_sync {
        v.push("--skip-wal-sync".into());
    }
    v
}

/// Reads the console until the worker has dumped what it recovered;
/// returns when (since the machine started) its command started, and how
/// long its recovery took (µs).
fn wait_for_dump(guest: &Guest) -> Result<(Duration, u64), String> {
    let until = Instant::now() + BOOT_TIMEOUT;
    let mut recovered = None;
    let mut command_at = Duration::ZERO;
    loop {
        let Some(line) = guest.line(until) else {
            return Err(format!(
                "the guest did not dump its recovered store (console:\n{})",
                guest.tail()
            ));
        };
        if line == COMMAND_STARTS {
            command_at = guest.started.elapsed();
        }
        let mut words = line.split(' ');
        match words.next() {
            Some("recovered") => recovered = words.next().and_then(|n| n.parse().ok()),
            Some("dumped") => {
                let us = recovered.ok_or("dumped before recovered")?;
                return Ok((command_at, us));
            }
            Some("verify-failed") => return Err(format!("verify in the guest: {line}")),
            Some("ferrite-guest:") => {
                return Err(format!(
                    "the guest's worker ended before dumping (console:\n{})",
                    guest.tail()
                ))
            }
            _ => {}
        }
    }
}

/// Lets the worker run for `ms`, then cuts the power; returns what it
/// acknowledged on the console before the cut.
fn run_until_cut(mut guest: Guest, ms: Duration) -> Result<Reported, String> {
    let until = Instant::now() + ms;
    let mut r = Reported {
        opened: true,
        ..Reported::default()
    };
    while let Some(line) = guest.line(until) {
        let mut words = line.split(' ');
        match (
            words.next(),
            words.next().and_then(|n| n.parse::<u64>().ok()),
        ) {
            (Some("start"), Some(n)) => r.started = Some(n),
            (Some("ack"), Some(n)) => r.acked = Some(n),
            (Some("synced"), Some(n)) => r.synced = Some(n),
            (Some("ferrite-guest:"), _) => {
                return Err(format!(
                    "the guest's worker stopped by itself (console:\n{})",
                    guest.tail()
                ))
            }
            _ => {}
        }
    }
    // Whatever the console had not yet carried out was not acknowledged
    // to anyone: the cut decides.
    guest.cut();
    Ok(r)
}

/// Boots a worker that only recovers and cuts it `within` after the
/// machine starts (between its command's start and its dump, as the
/// last boot took); returns whether the cut came before its dump.
fn cut_in_recovery(rig: &Rig, args: &[String], within: Duration) -> Result<bool> {
    let mut guest = rig.boot(args, None)?;
    let until = guest.started + within;
    let mut dumped = false;
    while let Some(line) = guest.line(until) {
        if line.starts_with("dumped") {
            dumped = true;
        }
    }
    guest.cut();
    Ok(!dumped)
}
