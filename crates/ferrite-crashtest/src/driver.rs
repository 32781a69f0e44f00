//! The crash campaign: kills a real worker process at random instants,
//! reopens the store, and checks that it holds exactly what the worker's
//! acknowledgments promise (as RocksDB's `db_crashtest.py` does, in
//! blackbox mode).
//!
//! | file | owns |
//! |---|---|
//! | `ops.rs` | the seeded operation stream |
//! | `oracle.rs` | which recovered states are allowed (pure) |
//! | `expected.rs` | the expected state beside the store, to resume a run |
//! | `setup.rs` | how each engine is opened (small, so background work runs) |
//! | `worker.rs` | `ferrite-crashtest worker`: the process that gets killed |
//! | `board_file.rs` | the worker's background-work board, readable after its death |
//! | `server_target.rs` | `--server`: `ferrite serve` killed instead, driven by a Redis client |
//! | `volume_target.rs` | `--volume`: `ferrite volume serve` killed instead, driven over NBD |
//! | `served.rs`, `nbd_client.rs` | starting and stopping those servers; the NBD client |
//! | `guest.rs` | the power-cut rig: a qemu guest whose disk loses unflushed writes |
//! | `power_cut.rs` | `--power-cut`: the worker in that guest, the machine killed |
//!
//! One kill: start the worker (run number = kill number), let it run for
//! a random time, SIGKILL it and read what it acknowledged from its pipe.
//! A quarter of the time, then start a worker that only recovers the
//! crashed store and kill it too, within the time the last recovery took
//! (so most of those kills land inside recovery). Then open the store
//! here (recovery once more), compare the whole store with the expected
//! state, `verify()` it, now and then run `ferrite inspect` on it, and
//! carry on from the recovered state.
//!
//! Each kill of a writing worker is also classed by the background work
//! (flush, compaction, checkpoint, rebuild, ...) that was running at the
//! instant of the kill, read from the worker's board file: the summary
//! says how often kills landed inside each kind, so a run shows that it
//! reached the engine's background work and not only idle moments.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use ferrite::background::{BoardImage, Work};
use ferrite::{EngineKind, SyncMode};
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};

use crate::ops::OpStream;
use crate::oracle::{apply, recovered_prefix, State};
use crate::{
    board_file, expected, guest, ops, oracle, power_cut, server_target, setup, volume_target,
};

#[derive(Args)]
pub struct CrashtestArgs {
    /// Any engine, or `rask` (a `DurableRask` block map: range puts and
    /// deletes, checked block by block).
    #[arg(long)]
    pub(crate) engine: EngineKind,
    /// The store's directory; the expected state is kept beside it.
    #[arg(long)]
    pub(crate) path: PathBuf,
    #[arg(long, default_value_t = 100)]
    pub(crate) kills: u64,
    /// Durability: always, or batched:<ms> (acknowledged = synced by the
    /// worker's next completed sync).
    #[arg(long, default_value = "always", value_parser = SyncMode::parse)]
    pub(crate) mode: SyncMode,
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// The `ferrite` binary that serves (`--server`, `--volume`) and
    /// checks stores [default: $FERRITE_BIN, else `ferrite` beside this
    /// binary].
    #[arg(long)]
    pub(crate) ferrite: Option<PathBuf>,
    /// Longest a worker runs before it is killed.
    #[arg(long, default_value_t = 2000)]
    pub(crate) max_run_ms: u64,
    /// The LSM's partitions (SwiftKV's subtrees behind one memtable).
    #[arg(long, default_value_t = 1)]
    pub(crate) partitions: usize,
    /// The store's cache in KiB. A cache smaller than the store makes the
    /// B+tree spill dirty pages between checkpoints, so kills land while
    /// checkpoints install spilled pages.
    #[arg(long, default_value_t = 1024)]
    pub(crate) cache_kib: u64,
    /// Whitebox kills: each worker is told a kind of background work the
    /// engine does (in turn) and kills itself part way through its first
    /// piece of it (at a uniform point of that kind's mean duration so
    /// far), as RocksDB's kill points do; the timer (five times
    /// --max-run-ms) still kills the workers that never reach it.
    #[arg(long)]
    pub(crate) whitebox: bool,
    /// Run `ferrite serve --sync always` on the store instead of the
    /// worker, drive it through a Redis client, and kill the server.
    #[arg(long)]
    pub(crate) server: bool,
    /// With `--server`: the server's cache in MiB. A cache smaller than
    /// the store sends the readers' reads to the device, and so to the
    /// server's reader pool.
    #[arg(long, default_value_t = 4)]
    pub(crate) server_cache_mb: u64,
    /// With `--engine rask`: run `ferrite volume serve` on a volume at
    /// --path instead of the worker, send the block stream over NBD, and
    /// kill the volume server.
    #[arg(long)]
    pub(crate) volume: bool,
    /// Power cuts instead of kills: the worker runs inside a Linux guest
    /// (qemu; `scripts/install-qemu-guest.sh`) whose store disk caches
    /// writes until flushed, and the whole machine is killed, losing the
    /// guest's page cache and the disk's unflushed writes. --path is a
    /// directory for the guest's disks, made afresh.
    #[arg(long)]
    pub(crate) power_cut: bool,
    /// Negative control: the write-ahead log skips its commit syncs. A
    /// power-cut run must fail on it.
    #[arg(long)]
    pub(crate) skip_wal_sync: bool,
    /// Each batch of the stream runs as a transaction that first reads
    /// every key it writes (checked against the expected state) and then
    /// commits: a commit must be all or nothing across the kill.
    #[arg(long)]
    pub(crate) transactions: bool,
    /// Negative control: after each kill, damage the recovered store
    /// behind the check's back (FLUSHALL through the restarted server, a
    /// trim of the whole volume, a range delete of every key) before
    /// checking it. The run must fail on it.
    #[arg(long)]
    pub(crate) damage: bool,
    /// Write the summary as JSON.
    #[arg(long)]
    pub(crate) json: Option<PathBuf>,
}

/// The store reopened after a kill: in this process, or behind a
/// restarted server.
pub(crate) enum Reopened {
    Store(setup::Target),
    Server(server_target::Server),
    Volume(volume_target::VolumeServer),
}

impl Reopened {
    /// The negative control's damage (`--damage`).
    pub(crate) fn damage(&self) -> Result<()> {
        match self {
            Reopened::Store(s) => s.execute(
                &ops::Op::DeleteRange(ops::key(0), ops::key(ops::KEYS)),
                &State::new(),
                false,
            ),
            Reopened::Server(s) => s.flush_all(),
            Reopened::Volume(v) => v.trim_all(),
        }
    }

    pub(crate) fn state(&self) -> Result<State> {
        match self {
            Reopened::Store(s) => s.state(),
            Reopened::Server(s) => s.state(),
            Reopened::Volume(v) => v.state(),
        }
    }
}

/// What the worker reported before it died.
#[derive(Debug, Default, Clone)]
pub(crate) struct Reported {
    pub(crate) opened: bool,
    /// The worker's background-work board at its death.
    pub(crate) board: Option<BoardImage>,
    /// It killed itself inside the work it was told to (whitebox).
    pub(crate) self_killed: bool,
    pub(crate) started: Option<u64>,
    pub(crate) acked: Option<u64>,
    pub(crate) synced: Option<u64>,
    /// What readers beside the writers were shown (the server's runs).
    pub(crate) shown: Vec<oracle::Shown>,
    /// The server's runs: each concurrent writer's own stream, started
    /// and acknowledged (`started`/`acked` above are unused then).
    pub(crate) writers: Vec<Progress>,
}

/// How far one writer's stream got: the last operation it sent and the
/// last whose reply it received.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Progress {
    pub(crate) started: Option<u64>,
    pub(crate) acked: Option<u64>,
}

impl Reported {
    /// Operations acknowledged, over every writer.
    pub(crate) fn acked_ops(&self) -> u64 {
        if self.writers.is_empty() {
            return count(self.acked) as u64;
        }
        self.writers.iter().map(|p| count(p.acked) as u64).sum()
    }
}

pub(crate) fn count(i: Option<u64>) -> usize {
    i.map_or(0, |i| i as usize + 1)
}

pub fn run(a: CrashtestArgs) -> Result<()> {
    if !matches!(a.mode, SyncMode::Always | SyncMode::Batched(_)) {
        bail!("--mode is always or batched:<ms>");
    }
    if a.server && (a.mode != SyncMode::Always || !a.engine.is_key_value() || a.whitebox) {
        bail!(
            "--server runs a key-value engine with --mode always (a reply is its acknowledgment), \
             blackbox"
        );
    }
    if a.volume && (a.engine != EngineKind::Rask || a.server || a.whitebox) {
        bail!("--volume runs with --engine rask (its block stream), blackbox");
    }
    // This binary runs the worker; `ferrite` serves (`--server`,
    // `--volume`) and checks stores.
    let me = std::env::current_exe()?;
    let ferrite = ferrite_binary(&a)?;
    if a.power_cut && (a.whitebox || a.damage) {
        bail!("--power-cut runs blackbox (--skip-wal-sync is its negative control)");
    }
    if a.power_cut && !a.server && !a.volume {
        return power_cut::run(&me, &ferrite, &a);
    }
    let exp_path = expected::path_for(&a.path);
    // A server under power cuts: its machine's disks made afresh in
    // --path, and the run starts from an empty store.
    let rig = if a.power_cut {
        let _ = std::fs::remove_file(&exp_path);
        Some(guest::Rig::create(&a.path, &[&me, &ferrite])?)
    } else {
        None
    };
    let rig = rig.as_ref();
    let subject = if a.server {
        format!("server:{}", a.engine.name())
    } else if a.volume {
        "volume".to_string()
    } else {
        a.engine.name().to_string()
    };
    if a.volume {
        volume_target::create_if_missing(&ferrite, &a, rig)?;
    }
    let mut exp = expected::load(&exp_path)?.unwrap_or(expected::Expected {
        engine: subject.clone(),
        seed: a.seed,
        next_run: 0,
        state: State::new(),
    });
    if exp.engine != subject || exp.seed != a.seed {
        bail!(
            "{} belongs to a run of {} with seed {}; use those or another --path",
            exp_path.display(),
            exp.engine,
            exp.seed
        );
    }
    let mut rng = rand::rngs::SmallRng::seed_from_u64(a.seed ^ 0xC4A5_11E5 ^ exp.next_run);
    let bar = indicatif::ProgressBar::new(a.kills);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} kills {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut recoveries: Vec<f64> = Vec::new();
    let mut tally = Tally {
        commit: commit(),
        ..Tally::default()
    };
    // Every way the campaign ends writes its summary: a violation from
    // the check, and a run stopped by anything else (a server that would
    // not start, a refused request), with what it had checked by then.
    let mut campaign = || -> Result<()> {
        for _ in 0..a.kills {
            let run = exp.next_run;
            let ms = rng.gen_range(10..a.max_run_ms.max(11));
            let reported = if a.server {
                server_target::kill_one(&ferrite, &a, &exp.state, run, ms, rig)
                    .map_err(|e| fail(&a, run, &format!("{e:#}")))?
            } else if a.volume {
                volume_target::kill_one(&ferrite, &a, &exp.state, run, ms, rig)
                    .map_err(|e| fail(&a, run, &format!("{e:#}")))?
            } else {
                // Whitebox: each run aims at one kind of the engine's work
                // in turn; blackbox (and the timer, whitebox) at any instant.
                let expected = expected_work(a.engine, a.volume);
                let kill_in = (a.whitebox && !expected.is_empty())
                    .then(|| expected[run as usize % expected.len()]);
                let within_us = kill_in.map_or(0, |w| tally.mean_us(w));
                // Aimed runs get longer to reach work that comes rarely (a
                // re-layout); most die inside it well before the timer.
                let ms = if kill_in.is_some() { ms * 5 } else { ms };
                kill_one(&me, &a, run, false, ms, kill_in, within_us)?
            };
            tally.note_board(reported.board.as_ref());
            tally.self_killed += u64::from(reported.self_killed);
            if rng.gen_bool(0.25) {
                // Process start plus the last recovery's length.
                let last = recoveries.last().copied().unwrap_or(5.0) as u64;
                let ms = rng.gen_range(0..=last + 5);
                let opened = if a.server {
                    server_target::kill_in_recovery(&ferrite, &a, ms, rig)?
                } else if a.volume {
                    volume_target::kill_in_recovery(&ferrite, &a, ms, rig)?
                } else {
                    kill_one(&me, &a, run, true, ms, None, 0)?.opened
                };
                if !opened {
                    tally.in_recovery += 1;
                }
            }
            // Reopen: recovery, then the whole store against the oracle.
            let t = Instant::now();
            let store = if a.server {
                let (server, took) = server_target::start(&ferrite, &a, None, rig)
                    .map_err(|e| fail(&a, run, &format!("{e:#}")))?;
                recoveries.push(took.as_secs_f64() * 1e3);
                Reopened::Server(server)
            } else if a.volume {
                let (v, took) = volume_target::start(&ferrite, &a, None, rig)
                    .map_err(|e| fail(&a, run, &format!("{e:#}")))?;
                recoveries.push(took.as_secs_f64() * 1e3);
                Reopened::Volume(v)
            } else {
                let store = setup::open(a.engine, &a.path, a.mode, a.partitions, a.cache_kib)
                    .map_err(|e| fail(&a, run, &format!("{e:#}")))?;
                recoveries.push(t.elapsed().as_secs_f64() * 1e3);
                Reopened::Store(store)
            };
            if a.damage {
                store
                    .damage()
                    .map_err(|e| fail(&a, run, &format!("damaging the store: {e:#}")))?;
            }
            let found: State = store
                .state()
                .map_err(|e| fail(&a, run, &format!("reading the store back: {e:#}")))?;
            judge(
                &a,
                &mut exp,
                run,
                &reported,
                &found,
                &mut tally,
                &mut recoveries,
            )?;
            match store {
                Reopened::Store(store) => {
                    if let Err(e) = store.verify() {
                        tally.verify_failures += 1;
                        tally.write(&a, &exp, &mut recoveries)?;
                        return Err(fail(&a, run, &format!("verify: {e:#}")));
                    }
                    store
                        .close()
                        .map_err(|e| fail(&a, run, &format!("close: {e}")))?;
                }
                // The server's store is verified by `ferrite inspect` below,
                // the volume by `ferrite volume check`.
                Reopened::Server(server) => server
                    .shutdown()
                    .map_err(|e| fail(&a, run, &format!("{e:#}")))?,
                Reopened::Volume(v) => v.stop().map_err(|e| fail(&a, run, &format!("{e:#}")))?,
            }
            // (A server's store in a power-cut guest is not reachable here.)
            if !a.power_cut && (a.server || a.volume || run % 10 == 9) {
                let check: &[&str] = if a.volume {
                    &["volume", "check", "--path"]
                } else {
                    &["inspect", "--path"]
                };
                let out = Command::new(&ferrite).args(check).arg(&a.path).output()?;
                if !out.status.success() {
                    tally.verify_failures += 1;
                    tally.write(&a, &exp, &mut recoveries)?;
                    return Err(fail(
                        &a,
                        run,
                        &format!(
                            "ferrite {}: {}{}",
                            check[..check.len() - 1].join(" "),
                            String::from_utf8_lossy(&out.stdout),
                            String::from_utf8_lossy(&out.stderr)
                        ),
                    ));
                }
            }
            tally.kills += 1;
            tally.acked_ops += reported.acked_ops();
            exp.next_run += 1;
            expected::save(&exp_path, &exp)?;
            bar.inc(1);
            bar.set_message(format!(
                "{} acked ops, {} keys, {} killed in recovery",
                tally.acked_ops,
                exp.state.len(),
                tally.in_recovery
            ));
        }
        Ok(())
    };
    let outcome = campaign();
    bar.finish();
    tally.conclude(outcome, &a, &exp, &mut recoveries)
}

/// Checks what the store held after run `run` was cut short (`found`)
/// against the oracle, given what the worker and its readers `reported`;
/// on success carries `exp` forward by the operations that survived. A
/// violation writes the summary and fails with how to reproduce it.
pub(crate) fn judge(
    a: &CrashtestArgs,
    exp: &mut expected::Expected,
    run: u64,
    reported: &Reported,
    found: &State,
    tally: &mut Tally,
    recoveries: &mut [f64],
) -> Result<()> {
    // One stream, or (the server) one per concurrent writer, each over
    // its own share of the keys and checked as a prefix of its own.
    let streams: Vec<(Option<u32>, usize, usize)> = if reported.writers.is_empty() {
        let durable = if a.mode == SyncMode::Always {
            count(reported.acked)
        } else {
            count(reported.synced)
        };
        vec![(None, count(reported.started), durable)]
    } else {
        (0u32..)
            .zip(&reported.writers)
            .map(|(w, p)| (Some(w), count(p.started), count(p.acked)))
            .collect()
    };
    let writers = reported.writers.len() as u32;
    for (writer, started, durable) in streams {
        let mine = |k: &[u8]| writer.is_none_or(|w| ops::writer_of(k, writers) == w);
        let share = |s: &State| -> State {
            s.iter()
                .filter(|(k, _)| mine(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        let (before, found) = (share(&exp.state), share(found));
        let shown: Vec<oracle::Shown> = reported
            .shown
            .iter()
            .filter(|(k, _)| mine(k))
            .cloned()
            .collect();
        let stream = match writer {
            Some(w) => OpStream::for_server_writer(a.seed, run, w, writers),
            None if a.server => OpStream::for_server(a.seed, run),
            None => OpStream::for_engine(a.engine, a.seed, run),
        };
        let ops: Vec<ops::Op> = stream.take(started).collect();
        let whose = writer.map_or(String::new(), |w| format!("writer {w}: "));
        match recovered_prefix(&before, &ops, durable, started, &found) {
            Ok(j) => {
                let recovered = oracle::longest_prefix(&before, &ops, j, started, &found);
                if let Err(u) = oracle::check_shown(&before, &ops, recovered, &shown) {
                    tally.shown_lost += 1;
                    tally.write(a, exp, recoveries)?;
                    return Err(fail(
                        a,
                        run,
                        &format!(
                            "{whose}a reader was shown key {} holding {:?} (value of length \
                             {:?}), which the recovered history never held ({} operations \
                             recovered, {} durable, {} started)",
                            String::from_utf8_lossy(&u.key),
                            u.shown.as_ref().map(|x| &x[..x.len().min(16)]),
                            u.shown.as_ref().map(Vec::len),
                            u.recovered,
                            durable,
                            started
                        ),
                    ));
                }
                tally.shown_checked += shown.len() as u64;
                for op in &ops[..j] {
                    apply(&mut exp.state, op);
                }
            }
            Err(v) => {
                tally.acked_lost += 1;
                tally.write(a, exp, recoveries)?;
                return Err(fail(
                    a,
                    run,
                    &format!(
                        "{whose}key {} holds {:?} (value of length {:?}), expected {:?} \
                         (length {:?}); {} operations durable, {} started",
                        String::from_utf8_lossy(&v.key),
                        v.found.as_ref().map(|x| &x[..x.len().min(16)]),
                        v.found.as_ref().map(Vec::len),
                        v.expected.as_ref().map(|x| &x[..x.len().min(16)]),
                        v.expected.as_ref().map(Vec::len),
                        v.durable,
                        v.started
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// What a run found, counted as it goes; written (stdout and `--json`) at
/// the end, and at the first violation before the driver stops.
#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) kills: u64,
    pub(crate) in_recovery: u64,
    pub(crate) acked_ops: u64,
    /// Recoveries that lost an acknowledged write or broke a batch.
    pub(crate) acked_lost: u64,
    /// Values readers were shown, checked against the recovered history,
    /// and recoveries that lost one.
    pub(crate) shown_checked: u64,
    pub(crate) shown_lost: u64,
    pub(crate) verify_failures: u64,
    /// Kills of writing workers that landed while each kind of work ran.
    pub(crate) hits: [u64; Work::COUNT],
    /// Pieces of each kind of work the killed workers started, finished,
    /// and the nanoseconds the finished ones took.
    pub(crate) started: [u64; Work::COUNT],
    pub(crate) finished: [u64; Work::COUNT],
    pub(crate) nanos: [u64; Work::COUNT],
    /// Kills of writing workers whose board could not be read.
    pub(crate) boards_missing: u64,
    /// Whitebox kills: workers that killed themselves inside their work.
    pub(crate) self_killed: u64,
    /// Power cuts: seconds per cycle (boot, recover, verify, run, cut) and
    /// from starting the machine to the recovered state's dump.
    pub(crate) cycle_s: Vec<f64>,
    pub(crate) boot_to_dump_s: Vec<f64>,
    /// The commit the run started on.
    pub(crate) commit: String,
    /// The summary has been written (at a violation).
    pub(crate) written: bool,
}

/// The commit this binary was built from, so a campaign's summary names
/// the code that ran.
pub(crate) fn commit() -> String {
    ferrite_process::BUILD_COMMIT.to_string()
}

/// The `p` quantile of `v` (sorted here), 0 when empty.
pub(crate) fn quantile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(((v.len() as f64 - 1.0) * p) as usize)
        .copied()
        .unwrap_or(0.0)
}

/// The background work each engine does, which its kills must reach.
pub(crate) fn expected_work(engine: EngineKind, volume: bool) -> &'static [Work] {
    if volume {
        return &[Work::Reclamation];
    }
    match engine {
        EngineKind::Btree => &[Work::Checkpoint],
        EngineKind::Shortcut => &[Work::Checkpoint, Work::Rebuild, Work::Relayout],
        EngineKind::TurboIndex => &[Work::Checkpoint, Work::BufferSpill],
        EngineKind::Lsm => &[Work::Flush, Work::Compaction],
        EngineKind::Zkv => &[Work::Flush, Work::Checkpoint, Work::Reclamation],
        EngineKind::Rask => &[Work::Checkpoint],
        _ => &[],
    }
}

impl Tally {
    pub(crate) fn note_board(&mut self, board: Option<&BoardImage>) {
        let Some(b) = board else {
            self.boards_missing += 1;
            return;
        };
        for w in b.running_kinds() {
            self.hits[w as usize] += 1;
        }
        for w in Work::ALL {
            let i = w as usize;
            self.started[i] += b.started(w);
            self.finished[i] += b.finished[i];
            self.nanos[i] += b.nanos[i];
        }
    }

    /// The mean duration of kind `w` so far in microseconds (1 ms before
    /// any finished).
    pub(crate) fn mean_us(&self, w: Work) -> u64 {
        let i = w as usize;
        (self.nanos[i] / 1000)
            .checked_div(self.finished[i])
            .unwrap_or(1000)
            .max(1)
    }

    /// Ends a campaign however it went: the summary written once (a
    /// violation has written it already), the campaign's error kept.
    pub(crate) fn conclude(
        &mut self,
        outcome: Result<()>,
        a: &CrashtestArgs,
        exp: &expected::Expected,
        recoveries: &mut [f64],
    ) -> Result<()> {
        match outcome {
            Ok(()) => self.write(a, exp, recoveries),
            Err(e) => {
                if !self.written {
                    let _ = self.write(a, exp, recoveries);
                }
                Err(e)
            }
        }
    }

    pub(crate) fn write(
        &mut self,
        a: &CrashtestArgs,
        exp: &expected::Expected,
        recoveries: &mut [f64],
    ) -> Result<()> {
        let (rec_p50, rec_p99) = (quantile(recoveries, 0.5), quantile(recoveries, 0.99));
        let mut cycle = self.cycle_s.clone();
        let mut boot = self.boot_to_dump_s.clone();
        let named = |v: &[u64; Work::COUNT]| {
            Work::ALL
                .iter()
                .map(|w| (w.name().to_string(), serde_json::json!(v[*w as usize])))
                .collect::<serde_json::Map<_, _>>()
        };
        let expected = expected_work(a.engine, a.volume);
        let min_hits = expected.iter().map(|w| self.hits[*w as usize]).min();
        let summary = serde_json::json!({
            "engine": a.engine.name(),
            "server": a.server,
            "volume": a.volume,
            "mode": a.mode.to_string(),
            "partitions": a.partitions,
            "cache_kib": a.cache_kib,
            "seed": a.seed,
            "kills": self.kills,
            "killed_in_recovery": self.in_recovery,
            "acked_ops": self.acked_ops,
            "acked_lost": self.acked_lost,
            "reads_shown_checked": self.shown_checked,
            "reads_shown_lost": self.shown_lost,
            "verify_failures": self.verify_failures,
            "recovery_ms_p50": rec_p50,
            "recovery_ms_p99": rec_p99,
            "keys_at_end": exp.state.len(),
            "background_hits": named(&self.hits),
            "background_started": named(&self.started),
            "background_mean_us": named(&Work::ALL.map(|w| self.mean_us(w))),
            "background_expected": expected.iter().map(|w| w.name()).collect::<Vec<_>>(),
            "min_background_hits": min_hits,
            "boards_missing": self.boards_missing,
            "whitebox": a.whitebox,
            "whitebox_kills": self.self_killed,
            "power_cut": a.power_cut,
            "skip_wal_sync": a.skip_wal_sync,
            "transactions": a.transactions,
            "damage": a.damage,
            "cycle_s_p50": quantile(&mut cycle, 0.5),
            "boot_to_recovered_dump_s_p50": quantile(&mut boot, 0.5),
            "commit": self.commit,
        });
        println!("{summary}");
        self.written = true;
        if let Some(p) = &a.json {
            std::fs::write(p, serde_json::to_string_pretty(&summary)? + "\n")?;
        }
        Ok(())
    }
}

/// Runs the worker for run `run` (or, `recover_only`, just its open) and
/// kills it after `ms` milliseconds.
pub(crate) fn kill_one(
    me: &Path,
    a: &CrashtestArgs,
    run: u64,
    recover_only: bool,
    ms: u64,
    kill_in: Option<Work>,
    within_us: u64,
) -> Result<Reported> {
    let mut cmd = Command::new(me);
    cmd.args(["worker", "--engine", a.engine.name(), "--path"])
        .arg(&a.path)
        .args(["--mode", &a.mode.to_string(), "--seed", &a.seed.to_string()])
        .args(["--run", &run.to_string()])
        .args(["--partitions", &a.partitions.to_string()])
        .args(["--cache-kib", &a.cache_kib.to_string()]);
    if recover_only {
        cmd.arg("--recover-only");
    }
    if a.skip_wal_sync {
        cmd.arg("--skip-wal-sync");
    }
    if a.transactions {
        cmd.arg("--transactions");
    }
    if let Some(w) = kill_in {
        cmd.args(["--kill-in", w.name()]);
        cmd.args(["--kill-within-us", &within_us.to_string()]);
    }
    let board = board_file::path_for(&a.path);
    board_file::reset(&board)?;
    cmd.arg("--board").arg(&board);
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting the worker")?;
    let stdout = child.stdout.take().context("the worker's stdout")?;
    let reported = Arc::new(Mutex::new(Reported::default()));
    let r2 = reported.clone();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout)
            .lines()
            .map_while(std::io::Result::ok)
        {
            let mut r = r2.lock();
            let mut words = line.split(' ');
            match (
                words.next(),
                words.next().and_then(|n| n.parse::<u64>().ok()),
            ) {
                (Some("open"), _) => r.opened = true,
                (Some("start"), Some(n)) => r.started = Some(n),
                (Some("ack"), Some(n)) => r.acked = Some(n),
                (Some("synced"), Some(n)) => r.synced = Some(n),
                _ => {}
            }
        }
    });
    let deadline = Instant::now() + Duration::from_millis(ms);
    let mut self_killed = false;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait()? {
            if kill_in.is_some()
                && std::os::unix::process::ExitStatusExt::signal(&status) == Some(libc::SIGKILL)
            {
                // Whitebox: the worker killed itself inside the work.
                self_killed = true;
                break;
            }
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            bail!("the worker of run {run} stopped by itself ({status}): {err}");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = reader.join();
    let mut r = reported.lock().clone();
    r.board = board_file::read(&board);
    r.self_killed = self_killed;
    Ok(r)
}

/// A violation: keeps the store, says how to reproduce it.
pub(crate) fn fail(a: &CrashtestArgs, run: u64, what: &str) -> anyhow::Error {
    let mut flags = format!("--partitions {} --cache-kib {}", a.partitions, a.cache_kib);
    if a.whitebox {
        flags.push_str(" --whitebox");
    }
    if a.server {
        flags.push_str(" --server");
    }
    if a.volume {
        flags.push_str(" --volume");
    }
    if a.power_cut {
        flags.push_str(" --power-cut");
    }
    if a.damage {
        flags.push_str(" --damage");
    }
    if a.skip_wal_sync {
        flags.push_str(" --skip-wal-sync");
    }
    if a.transactions {
        flags.push_str(" --transactions");
    }
    let ops = if a.server || a.volume {
        format!(
            "the operations sent to the server are run {run} of the {} stream of seed {} \
             (see {}.server.log for the server's own log)",
            if a.volume { "block" } else { "server" },
            a.seed,
            a.path.display()
        )
    } else {
        format!(
            "the worker's operations: `ferrite-crashtest worker --engine {} --path <copy> --mode {} \
             --seed {} --run {run} --partitions {} --cache-kib {}{}`",
            a.engine,
            a.mode,
            a.seed,
            a.partitions,
            a.cache_kib,
            if a.transactions { " --transactions" } else { "" }
        )
    };
    if a.power_cut {
        return anyhow::anyhow!(
            "crash test failed after the power cut of run {run}: {what}\n\
             the guest's disks and its last two consoles are kept in {} (store.img, \
             serial.prev.log, serial.log)\n\
             {ops}\n\
             a power-cut run starts afresh: `ferrite crashtest --engine {} --path {} --mode {} \
             --seed {} {flags} --kills <n>`",
            a.path.display(),
            a.engine,
            a.path.display(),
            a.mode,
            a.seed
        );
    }
    anyhow::anyhow!(
        "crash test failed after run {run}: {what}\n\
         the store and its expected state are kept in {}\n\
         {ops}\n\
         to continue the same test: `ferrite crashtest --engine {} --path {} --mode {} --seed {} {flags} --kills <n>`",
        a.path.display(),
        a.engine,
        a.path.display(),
        a.mode,
        a.seed
    )
}

pub(crate) fn parse_work(s: &str) -> Result<Work, String> {
    Work::from_name(s).ok_or_else(|| {
        let names: Vec<&str> = Work::ALL.iter().map(|w| w.name()).collect();
        format!("one of {}", names.join(", "))
    })
}

/// The worker's arguments.
#[derive(Args)]
pub struct WorkerArgs {
    #[arg(long)]
    pub engine: EngineKind,
    #[arg(long)]
    pub path: PathBuf,
    #[arg(long, value_parser = SyncMode::parse)]
    pub mode: SyncMode,
    #[arg(long)]
    pub seed: u64,
    #[arg(long)]
    pub run: u64,
    #[arg(long, default_value_t = 1)]
    pub partitions: usize,
    #[arg(long, default_value_t = 1024)]
    pub cache_kib: u64,
    /// Open (recover) the store, report it, and wait to be killed.
    #[arg(long)]
    pub recover_only: bool,
    /// Count background work on a board mapped from this file.
    #[arg(long)]
    pub board: Option<PathBuf>,
    /// Kill this process part way through the first piece of this kind
    /// of background work (`flush`, `compaction`, `checkpoint`, ...).
    #[arg(long, value_parser = parse_work)]
    pub kill_in: Option<Work>,
    /// ... at a uniformly drawn point within this many microseconds of
    /// its start (the kind's mean duration in earlier runs).
    #[arg(long, default_value_t = 1000)]
    pub kill_within_us: u64,
    /// After recovery, write the recovered state to this raw device (a
    /// power-cut guest's channel disk).
    #[arg(long)]
    pub dump: Option<PathBuf>,
    /// Negative control: the write-ahead log skips its commit syncs.
    #[arg(long)]
    pub skip_wal_sync: bool,
    /// Batches run as transactions that read their keys first.
    #[arg(long)]
    pub transactions: bool,
}

/// The `ferrite` binary: `--ferrite`, `$FERRITE_BIN` (set by `ferrite
/// crashtest`, which runs this binary), or the one beside this binary.
pub(crate) fn ferrite_binary(a: &CrashtestArgs) -> Result<PathBuf> {
    let path = match (&a.ferrite, std::env::var_os("FERRITE_BIN")) {
        (Some(p), _) => p.clone(),
        (None, Some(p)) => PathBuf::from(p),
        (None, None) => std::env::current_exe()?
            .parent()
            .context("this binary has no directory")?
            .join("ferrite"),
    };
    if !path.exists() {
        bail!(
            "{} is not built: the crash test runs `ferrite serve`, `ferrite volume` and \
             `ferrite inspect` from it (`cargo build --release -p ferrite-cli`, or --ferrite PATH)",
            path.display()
        );
    }
    Ok(path)
}
