//! `checkpoint`: `Store::checkpoint` of a large store while a writer
//! runs, on btree and lsm: how long the copy takes, what it copies (the
//! B+tree pair by pair; the LSM its tables' extents, shared where the
//! file system clones them), and the writer's latency before and during
//! it.
//!
//! The store is bulk-loaded with 512-byte values, then a writer updates
//! random existing keys at a fixed rate (so its latency, not its
//! throughput, is what moves), first alone, then while the checkpoint
//! runs. The copy is opened afterwards and its pairs counted.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ferrite::{Config, EngineKind, SyncMode};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::driver::{
    fresh_dir, store_err, Latencies, LatencySummary, Metrics, Report, Study, Table,
};
use super::{NoClaims, ReproContext};
use crate::error::Result;

pub struct CheckpointRepro;

/// Below the B+tree's inline limit (a quarter page), so every engine keeps
/// values in its leaves or blocks.
const VALUE_BYTES: usize = 512;
const KEY_BYTES: usize = 16;
/// The writer's rate, operations per second.
const WRITES_PER_SEC: u64 = 2000;
const CACHE_BYTES: u64 = 256 << 20;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct EngineRun {
    pub engine: String,
    pub records: u64,
    pub load_secs: f64,
    pub store_disk_bytes: u64,
    pub checkpoint_secs: f64,
    /// Pairs copied one by one (`None` where the engine copied its files).
    pub copied_pairs: Option<u64>,
    pub copied_user_bytes: Option<u64>,
    /// Bytes of the store's files copied as they are.
    #[serde(default)]
    pub copied_file_bytes: u64,
    pub copy_disk_bytes: u64,
    /// Bytes shared with the source: blocks the file system cloned.
    pub linked_bytes: u64,
    pub copy_pairs_counted: u64,
    pub before: LatencySummary,
    pub during: LatencySummary,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Results {
    pub data_bytes: u64,
    /// The LSM's table blocks and the B+tree's long values (`--compression`;
    /// empty in runs from before the experiment took it: lz4).
    #[serde(default)]
    pub compression: String,
    pub runs: Vec<EngineRun>,
}

fn key(i: u64) -> Vec<u8> {
    format!("rec{i:013}").into_bytes()
}

fn value(i: u64, round: u64) -> Vec<u8> {
    let mut v = vec![(i ^ round) as u8; VALUE_BYTES];
    v[..8].copy_from_slice(&round.to_le_bytes());
    v
}

/// Bytes of keys and values the copy holds: counted where it was made
/// pair by pair, else those of the pairs counted in it after.
fn user_bytes(run: &EngineRun) -> u64 {
    run.copied_user_bytes
        .unwrap_or(run.copy_pairs_counted * (KEY_BYTES + VALUE_BYTES) as u64)
}

fn run_engine(ctx: &ReproContext, kind: EngineKind, s: &Sizes) -> Result<EngineRun> {
    let name = kind.name();
    let err = store_err(name);
    let root = fresh_dir(&ctx.work_dir.join("checkpoint").join(name))?;
    let records = s.data_bytes / (KEY_BYTES + VALUE_BYTES) as u64;
    let db = crate::adapter::compressed(Config::builder(kind), kind, ctx.compression)
        .cache_bytes(CACHE_BYTES)
        .sync(SyncMode::Never)
        .open(root.join("db"))
        .map_err(&err)?;
    let t = Instant::now();
    db.bulk_load((0..records).map(|i| (key(i), value(i, 0))))
        .map_err(&err)?;
    db.sync().map_err(&err)?;
    let load_secs = t.elapsed().as_secs_f64();
    let store_disk_bytes = crate::process::disk_bytes(&root.join("db"));
    // The copy holds the snapshot's pairs, the same number of bytes.
    let user = records * (KEY_BYTES + VALUE_BYTES) as u64;
    crate::user_data::declare(&root.join("db"), user);
    crate::user_data::declare(&root.join("copy"), user);
    // 0: before, 1: during, 2: stop.
    let phase = AtomicU8::new(0);
    let hist = [Mutex::new(Latencies::new()), Mutex::new(Latencies::new())];
    let failed = AtomicBool::new(false);
    let before_for = Duration::from_millis(s.before_ms);
    let stats = std::thread::scope(|s| {
        s.spawn(|| {
            let mut rng = SmallRng::seed_from_u64(7);
            let gap = Duration::from_nanos(1_000_000_000 / WRITES_PER_SEC);
            let mut next = Instant::now();
            let (mut before, mut during) = (Latencies::new(), Latencies::new());
            let mut round = 1;
            loop {
                let p = phase.load(Ordering::Acquire);
                if p >= 2 {
                    break;
                }
                let i = rng.gen_range(0..records);
                let t = Instant::now();
                if db.put(key(i), value(i, round)).is_err() {
                    failed.store(true, Ordering::Relaxed);
                    break;
                }
                if p == 0 { &mut before } else { &mut during }.record(t.elapsed());
                round += 1;
                next += gap;
                if let Some(wait) = next.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
            }
            if let (Ok(mut b), Ok(mut d)) = (hist[0].lock(), hist[1].lock()) {
                b.add(&before);
                d.add(&during);
            }
        });
        std::thread::sleep(before_for);
        phase.store(1, Ordering::Release);
        let r = db.checkpoint(root.join("copy"));
        phase.store(2, Ordering::Release);
        r
    })
    .map_err(&err)?;
    if failed.load(Ordering::Relaxed) {
        return Err(err(ferrite::Error::InvalidOptions(
            "the writer's put failed".into(),
        )));
    }
    db.close().map_err(&err)?;
    let copy = ferrite::open_existing(
        root.join("copy"),
        &ferrite::Options::default().cache_bytes(CACHE_BYTES),
    )
    .map_err(&err)?;
    let copy_pairs_counted = copy.iter().count() as u64;
    copy.close().map_err(&err)?;
    let summary = |h: &Mutex<Latencies>| h.lock().map(|h| h.summary()).unwrap_or_default();
    let run = EngineRun {
        engine: name.into(),
        records,
        load_secs,
        store_disk_bytes,
        checkpoint_secs: stats.elapsed.as_secs_f64(),
        copied_pairs: stats.pairs,
        copied_user_bytes: stats.user_bytes,
        copied_file_bytes: stats.copied_bytes,
        copy_disk_bytes: stats.disk_bytes,
        linked_bytes: stats.shared_bytes,
        copy_pairs_counted,
        before: summary(&hist[0]),
        during: summary(&hist[1]),
    };
    let _ = std::fs::remove_dir_all(&root);
    Ok(run)
}

sizes! {
    struct Sizes {
        /// The store's user bytes when the checkpoint starts.
        data_bytes: u64 = (16 << 20, 1 << 30, 4 << 30),
        /// How long the writer runs before the checkpoint.
        before_ms: u64 = (500, 5_000, 10_000),
    }
}

impl Study for CheckpointRepro {
    type Results = Results;
    type Claims = NoClaims;

    const NAME: &'static str = "checkpoint";

    const SUMMARY: &'static str = "Store::checkpoint of a large store (512-byte values) while a writer updates at 2000/s: time, bytes copied and linked, the writer's latency before and during";

    type Sizes = Sizes;

    fn measure(&self, ctx: &ReproContext, s: Sizes) -> Result<Results> {
        let mut runs = Vec::new();
        for kind in [EngineKind::Btree, EngineKind::Lsm] {
            runs.push(run_engine(ctx, kind, &s)?);
        }
        Ok(Results {
            data_bytes: s.data_bytes,
            compression: ctx.compression.to_string(),
            runs,
        })
    }

    fn params(&self, r: &Results) -> serde_json::Value {
        json!({
            "key_bytes": KEY_BYTES,
            "value_bytes": VALUE_BYTES,
            "writer_ops_per_sec": WRITES_PER_SEC,
            "cache_bytes": CACHE_BYTES,
            "sync": "never",
            "compression": r.compression,
        })
    }

    fn metrics(&self, r: &Results, _: &mut NoClaims) -> Metrics {
        let mut m = Metrics::new();
        for run in &r.runs {
            let e = &run.engine;
            m.set(format!("{e}_checkpoint_secs"), run.checkpoint_secs);
            m.set(
                format!("{e}_checkpoint_mib_per_sec"),
                user_bytes(run) as f64 / f64::from(1 << 20) / run.checkpoint_secs.max(1e-9),
            );
            m.set(
                format!("{e}_copied_file_bytes"),
                run.copied_file_bytes as f64,
            );
            m.set(format!("{e}_copied_bytes"), run.copy_disk_bytes as f64);
            m.set(format!("{e}_linked_bytes"), run.linked_bytes as f64);
            m.set(format!("{e}_p99_before_us"), run.before.p99_us);
            m.set(format!("{e}_p99_during_us"), run.during.p99_us);
            m.set(
                format!("{e}_p99_during_over_before"),
                run.during.p99_us / run.before.p99_us.max(1e-9),
            );
        }
        m
    }

    fn render(&self, r: &Results, _: &Metrics, doc: &mut Report) -> Result<()> {
        doc.h1("Online checkpoints");
        doc.text(format!(
            "`Store::checkpoint` of a store of {:.2} GiB of keys and values ({}-byte keys, \
             {}-byte values of one repeated byte, bulk-loaded, cache {} MiB, durability `never`, \
             compression {}) while one writer \
             updates random existing keys at {} operations per second. The checkpoint copies the \
             store as one snapshot shows it into a new store of the same engine: the B+tree's \
             pairs bulk-loaded, the LSM's table extents copied as they are (cloned, so shared, \
             where the file system can; by the kernel otherwise) and its memtables written as \
             tables. Throughput is of the keys and values the copy holds. The writer's \
             latency is taken alone for a few seconds, then while the checkpoint runs. The copy \
             is opened after and its pairs counted.",
            r.data_bytes as f64 / f64::from(1 << 30),
            KEY_BYTES,
            VALUE_BYTES,
            CACHE_BYTES >> 20,
            if r.compression.is_empty() {
                "lz4"
            } else {
                &r.compression
            },
            WRITES_PER_SEC
        ));
        let mut t = Table::new([
            "engine",
            "store on disk",
            "checkpoint",
            "copied (pairs or file bytes / on disk)",
            "shared",
            "copy counted",
            "writer p50 / p99 before",
            "writer p50 / p99 during",
        ]);
        for run in &r.runs {
            t.row([
                run.engine.clone(),
                format!(
                    "{:.0} MiB",
                    run.store_disk_bytes as f64 / f64::from(1 << 20)
                ),
                format!(
                    "{:.1} s ({:.0} MiB/s)",
                    run.checkpoint_secs,
                    user_bytes(run) as f64 / f64::from(1 << 20) / run.checkpoint_secs.max(1e-9)
                ),
                format!(
                    "{} / {:.0} MiB",
                    match run.copied_pairs {
                        Some(p) => format!("{p} pairs"),
                        None => format!(
                            "{:.0} MiB of files",
                            run.copied_file_bytes as f64 / f64::from(1 << 20)
                        ),
                    },
                    run.copy_disk_bytes as f64 / f64::from(1 << 20)
                ),
                format!("{:.0} MiB", run.linked_bytes as f64 / f64::from(1 << 20)),
                run.copy_pairs_counted.to_string(),
                format!("{:.1} / {:.1} µs", run.before.p50_us, run.before.p99_us),
                format!("{:.1} / {:.1} µs", run.during.p50_us, run.during.p99_us),
            ]);
        }
        doc.table(&t);
        Ok(())
    }
}
