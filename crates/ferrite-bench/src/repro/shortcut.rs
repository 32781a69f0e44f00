//! `shortcut`: one-shot B+tree traversal (SHORTCUT) against the same
//! engine's dependent descent.
//!
//! Every variant is the B+tree engine over the same bulk-loaded data, with
//! the same buffer pool and the same page size; only the lookup path
//! differs: `baseline` (dependent descent), `shortcut-base` (exact key and
//! page arrays per level), `shortcut-sync` (keyless models, rebuilt inline
//! by writers) and `shortcut` (keyless models, rebuilt in the background).
//! One client thread; durability `never`; O_DIRECT; lookups alternate
//! between the variants in chunks after a warm-up of the same sequence.
//!
//! Phases:
//! 1. *calibration*: the pool starts at 1% of the tree and halves until
//!    the baseline's dependent descent reads ≥ 2.5 pages per lookup (or
//!    the pool reaches its 64-frame floor);
//! 2. YCSB-C uniform and zipfian at that pool: latency CDFs, throughput,
//!    per-level and per-segment accuracy, prefetched pages used / wasted;
//! 3. the paper's setting, a pool of 1% of the tree: latency, and the
//!    companion's memory against the pool;
//! 4. a copy of the store in memory behind a `LatencyDevice` whose every
//!    read takes 100 µs, so the disk's own speed on the day is not in it;
//! 5. the real GeoLite2 IPv4 keys (skipped if `../shared/data` is absent):
//!    accuracy of the keyless models on a hard distribution;
//! 6. insert-heavy (50% lookups with the `latest` distribution, 50%
//!    inserts of new random keys, growing the tree by 50%): accuracy,
//!    throughput and tail latency per chunk for SHORTCUT, SHORTCUT with
//!    re-layout off, and SHORTCUT-SYNC.
//!
//! Keys are 8-byte big-endian images of distinct uniform random `u64`s
//! (splitmix64 of the record number), values 8 bytes.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrite::{KvStore, Options, SyncMode};
use ferrite_btree::{
    BTreeOptions, BTreeStats, BTreeStore, Devices, ShortcutOptions, ShortcutVariant,
};
use ferrite_io::BlockDevice;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::driver::{
    alternate, fixed_reads, made_dir, memory_copy, store_err, Latencies, Metrics, Report, Study,
};
use super::ReproContext;
use crate::distribution::{Chooser, Latest, ScrambledZipfian, ZIPFIAN_THETA};
use crate::error::{BenchError, Result};
use crate::keyset::{mix64, read_sosd};
use crate::report;

pub struct ShortcutRepro;

sizes! {
    struct Sizes {
        records: u64 = (100_000, 50_000_000, 200_000_000),
        page_size: usize = (1024, 1024, 1024),
        warmup: u64 = (1_000, 40_000, 100_000),
        ops: u64 = (3_000, 120_000, 400_000),
        chunks: u64 = (3, 12, 20),
        latdev_ops: u64 = (300, 8_000, 20_000),
        insert_base: u64 = (20_000, 500_000, 4_000_000),
        insert_ops: u64 = (20_000, 500_000, 4_000_000),
        insert_chunks: u64 = (4, 20, 20),
        punch_ops: u64 = (20, 400, 1_000),
    }
}

/// The variants, in report order: name, SHORTCUT variant (`None` is the
/// dependent descent), and whether low-accuracy levels also prefetch their
/// runner-up (`shortcut-single` is the paper's one node per level).
const VARIANTS: [(&str, Option<ShortcutVariant>, bool); 5] = [
    ("baseline", None, false),
    ("shortcut-base", Some(ShortcutVariant::Base), false),
    ("shortcut-sync", Some(ShortcutVariant::Sync), true),
    ("shortcut-single", Some(ShortcutVariant::Shortcut), false),
    ("shortcut", Some(ShortcutVariant::Shortcut), true),
];

/// Percentiles the CDFs are drawn at.
const PCTS: [f64; 15] = [
    1.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 99.0, 99.5, 99.9,
];

fn key(x: u64) -> [u8; 8] {
    x.to_be_bytes()
}

fn value(i: u64) -> [u8; 8] {
    (i ^ 0x5bd1_e995).to_le_bytes()
}

/// How a store is opened for one phase.
#[derive(Clone, Copy)]
struct Open {
    variant: Option<ShortcutVariant>,
    cache: u64,
    page_size: usize,
    read_delay: Option<Duration>,
    relayout: bool,
    runner_up: bool,
}

fn open(dir: &Path, o: Open) -> Result<BTreeStore> {
    made_dir(dir)?;
    let options = Options::default()
        .cache_bytes(o.cache)
        .sync(SyncMode::Never);
    let bt = BTreeOptions::default()
        .page_size(o.page_size)
        .shortcut(o.variant.map(|variant| {
            ShortcutOptions::default()
                .variant(variant)
                .relayout(o.relayout)
                .runner_up_below(if o.runner_up {
                    ShortcutOptions::default().runner_up_below
                } else {
                    0.0
                })
        }));
    let mut devices =
        Devices::open_dir(dir, options.direct_io, o.page_size).map_err(store_err("open"))?;
    if let Some(d) = o.read_delay {
        // The whole store is copied into memory, so the injected delay is
        // the only device latency a read pays, whatever the disk's speed
        // that day; the files stay as they were.
        devices = in_memory(&devices)?;
        devices.pages = fixed_reads(devices.pages.clone(), d)?;
    }
    BTreeStore::open_on(devices, &options, bt).map_err(store_err("open"))
}

/// A copy in memory of every device of a closed store.
fn in_memory(on_disk: &Devices) -> Result<Devices> {
    let copy =
        |d: &Arc<dyn BlockDevice>| -> Result<Arc<dyn BlockDevice>> { Ok(memory_copy(d.as_ref())?) };
    Ok(Devices {
        pages: copy(&on_disk.pages)?,
        dwb: copy(&on_disk.dwb)?,
        wal: copy(&on_disk.wal)?,
        spill: copy(&on_disk.spill)?,
        carry: [copy(&on_disk.carry[0])?, copy(&on_disk.carry[1])?],
    })
}

/// Loads `keys` (sorted, distinct) into a fresh store in `dir`.
fn load(dir: &Path, keys: &[u64], o: Open) -> Result<()> {
    let _ = std::fs::remove_dir_all(dir);
    let db = open(dir, o)?;
    let bytes = std::cell::Cell::new(0u64);
    let mut pairs = keys
        .iter()
        .enumerate()
        .map(|(i, &k)| (key(k).to_vec(), value(i as u64).to_vec()))
        .inspect(|(k, v)| bytes.set(bytes.get() + (k.len() + v.len()) as u64));
    db.bulk_load(&mut pairs).map_err(store_err("bulk load"))?;
    crate::user_data::declare(dir, bytes.get());
    Ok(())
}

/// `n` distinct uniform random keys, sorted.
fn uniform_keys(n: u64, salt: u64) -> Vec<u64> {
    let mut k: Vec<u64> = (0..n).map(|i| mix64(i ^ salt)).collect();
    k.sort_unstable();
    k
}

/// One variant's measurements in one phase.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Run {
    ops: u64,
    secs: f64,
    /// Latency in µs at each of `PCTS`.
    cdf: Vec<f64>,
    p50_us: f64,
    p95_us: f64,
    p99_us: f64,
    /// Page-device reads per lookup.
    reads_per_lookup: f64,
    /// Mean over levels of the per-level accuracy (SHORTCUT variants).
    accuracy: Option<f64>,
    level_accuracy: Vec<f64>,
    /// Per level: the node on the path was the prediction or its
    /// prefetched runner-up.
    level_coverage: Vec<f64>,
    prefetched: u64,
    prefetch_used: u64,
    prefetch_wasted: u64,
    companion_bytes: u64,
    segments: u64,
    discontinuities: u64,
    nodes_modelled: u64,
}

impl Run {
    fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.secs.max(1e-9)
    }
}

/// Per-chunk figures of the insert-heavy phase.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Timeline {
    ops_per_sec: Vec<f64>,
    p50_us: Vec<f64>,
    p99_us: Vec<f64>,
    accuracy: Vec<f64>,
    rebuilds: Vec<u64>,
    p99_us_all: f64,
    rebuild_seconds: f64,
    relayouts: u64,
    relocated: u64,
    relayout_seconds: f64,
    discontinuities_end: u64,
    pages_start: u64,
    pages_end: u64,
}

/// Per-segment accuracy for the plot.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct SegmentPoint {
    level: u8,
    nodes: u64,
    lookups: u64,
    hits: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Results {
    #[serde(default)]
    sizes: Sizes,
    records: u64,
    page_size: usize,
    tree_levels: u64,
    tree_pages: u64,
    pages_per_level: Vec<u64>,
    tree_bytes: u64,
    pool_bytes: u64,
    pool_frames: u64,
    one_pct_pool_bytes: u64,
    calibration: Vec<(u64, f64)>,
    /// phase → variant → run.
    runs: BTreeMap<String, BTreeMap<String, Run>>,
    segments: Vec<SegmentPoint>,
    geolite_keys: u64,
    geolite_accuracy: Option<f64>,
    geolite_level_accuracy: Vec<f64>,
    insert_base: u64,
    insert_ops: u64,
    timelines: BTreeMap<String, Timeline>,
    punch: Option<PunchProbe>,
}

/// The cost of the file-system operation the paper's phantom mapping
/// relies on, against a plain page write.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct PunchProbe {
    file_blocks: u64,
    ops: u64,
    pwrite_us_p50: f64,
    insert_range_us_p50: f64,
    collapse_range_us_p50: f64,
}

/// Times 4 KiB O_DIRECT `pwrite`s, then what the paper's punching does
/// per split: `fallocate` INSERT_RANGE of one block at a random offset of
/// a 64 MiB file followed by a write of the new node into the hole (so the
/// file's extent map fragments as it would), then COLLAPSE_RANGE of as
/// many blocks. `None` where the file system lacks the operations.
fn punch_probe(dir: &Path, ops: u64) -> Result<Option<PunchProbe>> {
    use ferrite_io::{AlignedBuf, DirectFile};
    let blocks = 16_384u64;
    made_dir(dir)?;
    let path = dir.join("punch-probe");
    let _ = std::fs::remove_file(&path);
    let io = |e: ferrite_io::DeviceError| BenchError::Config(format!("punch probe: {e}"));
    let f = DirectFile::open(&path).map_err(io)?;
    let mut chunk = AlignedBuf::zeroed(1 << 20);
    for (i, b) in chunk.iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    for at in (0..blocks * 4096).step_by(1 << 20) {
        f.write_at(&chunk, at).map_err(io)?;
    }
    f.sync().map_err(io)?;
    let page = AlignedBuf::zeroed(4096);
    let mut rng = SmallRng::seed_from_u64(41);
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    let mut pw = Vec::new();
    for _ in 0..ops {
        let at = rng.gen_range(0..blocks) * 4096;
        let t = Instant::now();
        f.write_at(&page, at).map_err(io)?;
        pw.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let (mut ins, mut col) = (Vec::new(), Vec::new());
    for k in 0..ops {
        let at = rng.gen_range(0..blocks + k) * 4096;
        let t = Instant::now();
        if f.insert_range(at, 4096).is_err() {
            let _ = std::fs::remove_file(&path);
            return Ok(None);
        }
        ins.push(t.elapsed().as_secs_f64() * 1e6);
        f.write_at(&page, at).map_err(io)?;
    }
    for k in 0..ops {
        let at = rng.gen_range(0..blocks + ops - k) * 4096;
        let t = Instant::now();
        f.collapse_range(at, 4096).map_err(io)?;
        col.push(t.elapsed().as_secs_f64() * 1e6);
    }
    drop(f);
    let _ = std::fs::remove_file(&path);
    Ok(Some(PunchProbe {
        file_blocks: blocks,
        ops,
        pwrite_us_p50: median(pw),
        insert_range_us_p50: median(ins),
        collapse_range_us_p50: median(col),
    }))
}

fn report_of(db: &BTreeStore) -> ferrite_btree::ShortcutReport {
    db.shortcut_report().unwrap_or_default()
}

/// Looks up `ops` keys drawn by `pick` on every store, in alternating
/// chunks; returns one run per store.
fn measure(
    stores: &[(&str, BTreeStore)],
    keys: &[u64],
    pick: &mut dyn FnMut(&mut SmallRng) -> u64,
    warmup: u64,
    ops: u64,
    chunks: u64,
    seed: u64,
) -> Result<BTreeMap<String, Run>> {
    // The same operation sequence for every store.
    let mut rng = SmallRng::seed_from_u64(seed);
    let seq: Vec<u64> = (0..warmup + ops).map(|_| pick(&mut rng)).collect();
    for (name, db) in stores {
        for &i in &seq[..warmup as usize] {
            db.get(&key(keys[i as usize])).map_err(store_err(name))?;
        }
        db.reset_shortcut_counters();
        // The first statistics call counts pages per level (reads outside
        // the pool); it must not land inside the measured delta.
        let _ = db.stats();
    }
    let mut hist: Vec<Latencies> = stores.iter().map(|_| Latencies::new()).collect();
    let mut secs = vec![0.0; stores.len()];
    let before: Vec<u64> = stores.iter().map(|(_, d)| d.stats().device.reads).collect();
    let chunk = (ops / chunks.max(1)).max(1) as usize;
    let measured = &seq[warmup as usize..];
    let parts: Vec<&[u64]> = measured.chunks(chunk).collect();
    alternate(stores.len(), parts.len() as u64, |s, c| {
        let (name, db) = &stores[s];
        let t0 = Instant::now();
        for &i in parts[c as usize] {
            let t = Instant::now();
            let v = db.get(&key(keys[i as usize])).map_err(store_err(name))?;
            hist[s].record(t.elapsed());
            if v.as_deref() != Some(&value(i)[..]) {
                return Err(BenchError::Config(format!(
                    "{name}: wrong answer for record {i}"
                )));
            }
        }
        secs[s] += t0.elapsed().as_secs_f64();
        Ok(())
    })?;
    let mut out = BTreeMap::new();
    for (s, (name, db)) in stores.iter().enumerate() {
        let h = &hist[s];
        let l = h.summary();
        let reads = db.stats().device.reads - before[s];
        let r = report_of(db);
        let level_accuracy: Vec<f64> = r
            .level_predictions
            .iter()
            .zip(&r.level_hits)
            .filter(|(n, _)| **n > 0)
            .map(|(n, h)| *h as f64 / *n as f64)
            .collect();
        let accuracy = (!level_accuracy.is_empty())
            .then(|| level_accuracy.iter().sum::<f64>() / level_accuracy.len() as f64);
        let level_coverage: Vec<f64> = r
            .level_predictions
            .iter()
            .zip(r.level_hits.iter().zip(&r.level_runner_up_hits))
            .filter(|(n, _)| **n > 0)
            .map(|(n, (h, u))| (h + u) as f64 / *n as f64)
            .collect();
        out.insert(
            name.to_string(),
            Run {
                ops: l.count,
                secs: secs[s],
                cdf: PCTS.iter().map(|&p| h.quantile_us(p / 100.0)).collect(),
                p50_us: l.p50_us,
                p95_us: l.p95_us,
                p99_us: l.p99_us,
                reads_per_lookup: reads as f64 / l.count.max(1) as f64,
                accuracy,
                level_accuracy,
                level_coverage,
                prefetched: r.prefetched,
                prefetch_used: r.prefetch_used,
                prefetch_wasted: r.prefetch_wasted,
                companion_bytes: r.companion_bytes,
                segments: r.segments,
                discontinuities: r.discontinuities,
                nodes_modelled: r.nodes_modelled,
            },
        );
    }
    Ok(out)
}

fn open_all(
    dirs: &[(&'static str, PathBuf, Option<ShortcutVariant>, bool)],
    cache: u64,
    page_size: usize,
    read_delay: Option<Duration>,
    only: &[&str],
) -> Result<Vec<(&'static str, BTreeStore)>> {
    dirs.iter()
        .filter(|(n, _, _, _)| only.is_empty() || only.contains(n))
        .map(|(n, d, v, u)| {
            open(
                d,
                Open {
                    variant: *v,
                    cache,
                    page_size,
                    read_delay,
                    relayout: true,
                    runner_up: *u,
                },
            )
            .map(|db| (*n, db))
        })
        .collect()
}

claims! {
    struct Claims {
        tree_height >= 4, "5 levels (3.3B keys, 4 KB nodes)";
        reads_per_lookup_baseline >= 2.5, "(setup)";
        p50_ratio_uniform <= 0.65, "26.2-64.8% lower P50";
        p95_ratio_uniform <= 0.75, "19.1-69.9% lower P95";
        p50_ratio_latencydev <= 0.45, "about 1 / uncached levels";
        throughput_ratio_uniform >= 1.0, "+2.1-13.9%";
        accuracy_uniform_keys >= 0.5, "over 50% per segment (linear data)";
        accuracy_geolite2 >= 0.4, "about 50% on real data sets";
        companion_bytes_pct_of_pool <= 2.0, "about 0.6% of memory";
        insert_heavy_accuracy_retained >= 0.8, "58-62% accuracy sustained";
        insert_heavy_p99_ratio <= 2.0, "latency sustained while re-laying out";
    }
}

impl Study for ShortcutRepro {
    type Results = Results;
    type Claims = Claims;

    const NAME: &'static str = "shortcut";

    const SUMMARY: &'static str = "SHORTCUT's one-shot traversal vs dependent descent: latency, accuracy, memory, insert-heavy re-layout";

    type Sizes = Sizes;

    fn measure(&self, ctx: &ReproContext, s: Sizes) -> Result<Results> {
        let ps = s.page_size;
        let root = ctx.work_dir.join("shortcut");
        let _ = std::fs::remove_dir_all(&root);
        let t0 = Instant::now();
        let say = |m: &str| {
            progress!(ctx, "shortcut [{:>6.1} s]: {m}", t0.elapsed().as_secs_f64());
        };
        let mut r = Results {
            sizes: s,
            records: s.records,
            page_size: ps,
            insert_base: s.insert_base,
            insert_ops: s.insert_ops,
            ..Results::default()
        };
        say("timing INSERT_RANGE against pwrite");
        r.punch = punch_probe(&root, s.punch_ops)?;
        say("generating keys");
        let keys = uniform_keys(s.records, 0);
        let dirs: Vec<(&'static str, PathBuf, Option<ShortcutVariant>, bool)> = VARIANTS
            .iter()
            .map(|(n, v, u)| (*n, root.join(n), *v, *u))
            .collect();
        let load_cache = 64 << 20;
        for (n, d, v, u) in &dirs {
            say(&format!("bulk loading {} records into {n}", s.records));
            load(
                d,
                &keys,
                Open {
                    variant: *v,
                    cache: load_cache,
                    page_size: ps,
                    read_delay: None,
                    relayout: true,
                    runner_up: *u,
                },
            )?;
        }
        // Tree shape, from the baseline.
        {
            let db = open(
                &dirs[0].1,
                Open {
                    variant: None,
                    cache: load_cache,
                    page_size: ps,
                    read_delay: None,
                    relayout: true,
                    runner_up: false,
                },
            )?;
            let st = db.stats().engine_or_default::<BTreeStats>();
            r.tree_levels = u64::from(st.height);
            r.tree_pages = st.pages;
            r.pages_per_level = (0..r.tree_levels)
                .map(|l| st.pages_per_level.get(l as usize).copied().unwrap_or(0))
                .collect();
        }
        r.tree_bytes = r.tree_pages * ps as u64;
        r.one_pct_pool_bytes = (r.tree_bytes / 100).max(64 << 10);
        let n = s.records;
        let uniform = |rng: &mut SmallRng| rng.gen_range(0..n);

        // 1. Calibration.
        let mut cache = r.one_pct_pool_bytes;
        loop {
            let db = open_all(&dirs, cache, ps, None, &["baseline"])?;
            let m = measure(&db, &keys, &mut { uniform }, s.warmup / 2, 4_000, 1, 11)?;
            let rpl = m.get("baseline").map_or(0.0, |x| x.reads_per_lookup);
            say(&format!(
                "calibration: pool {cache} B, {rpl:.2} reads per lookup"
            ));
            r.calibration.push((cache, rpl));
            let frames = db.first().map_or(0.0, |(_, d)| {
                d.stats().engine_or_default::<BTreeStats>().pool_frames as f64
            });
            if rpl >= 2.5 || frames <= 64.0 || cache <= 64 << 10 {
                r.pool_frames = frames as u64;
                break;
            }
            cache = (cache / 2).max(64 << 10);
        }
        r.pool_bytes = cache;

        // 2. YCSB-C, uniform and zipfian, at the calibrated pool.
        {
            let stores = open_all(&dirs, cache, ps, None, &[])?;
            say("uniform lookups");
            let m = measure(
                &stores,
                &keys,
                &mut { uniform },
                s.warmup,
                s.ops,
                s.chunks,
                21,
            )?;
            r.runs.insert("uniform".into(), m);
            if let Some((_, db)) = stores.iter().find(|(n, _)| *n == "shortcut") {
                r.segments = report_of(db)
                    .segment_accuracy
                    .iter()
                    .map(|a| SegmentPoint {
                        level: a.level,
                        nodes: a.nodes,
                        lookups: a.lookups,
                        hits: a.hits,
                    })
                    .collect();
            }
            say("zipfian lookups");
            let mut z = ScrambledZipfian::new(n);
            let mut zipf = |rng: &mut SmallRng| z.next(rng, n);
            let m = measure(&stores, &keys, &mut zipf, s.warmup, s.ops, s.chunks, 22)?;
            r.runs.insert("zipfian".into(), m);
        }
        // 3. The paper's 1% setting.
        {
            say("uniform lookups, pool = 1% of the tree");
            let stores = open_all(&dirs, r.one_pct_pool_bytes, ps, None, &[])?;
            let m = measure(
                &stores,
                &keys,
                &mut { uniform },
                s.warmup,
                s.ops / 2,
                s.chunks,
                23,
            )?;
            r.runs.insert("uniform_pool1pct".into(), m);
        }
        // 4. A device with a fixed 100 µs per read.
        {
            say("uniform lookups on a 100 µs device");
            let stores = open_all(
                &dirs,
                cache,
                ps,
                Some(Duration::from_micros(100)),
                &["baseline", "shortcut-base", "shortcut-single", "shortcut"],
            )?;
            let m = measure(
                &stores,
                &keys,
                &mut { uniform },
                s.latdev_ops / 2,
                s.latdev_ops,
                s.chunks,
                24,
            )?;
            r.runs.insert("uniform_latencydev".into(), m);
        }
        drop(keys);
        for (_, d, _, _) in &dirs {
            let _ = std::fs::remove_dir_all(d);
        }
        // 5. GeoLite2 keys.
        let geo = ctx.data_dir.join("keys").join("geolite2_ipv4_starts.u64");
        if geo.exists() {
            say("GeoLite2 keys");
            let mut gk = read_sosd(&geo)?;
            gk.sort_unstable();
            gk.dedup();
            r.geolite_keys = gk.len() as u64;
            let dir = root.join("geolite2");
            let o = Open {
                variant: Some(ShortcutVariant::Shortcut),
                cache: 64 << 20,
                page_size: ps,
                read_delay: None,
                relayout: true,
                runner_up: true,
            };
            load(&dir, &gk, o)?;
            let db = open(
                &dir,
                Open {
                    cache: (gk.len() as u64 * 16 / 100).max(64 << 10),
                    ..o
                },
            )?;
            let gn = gk.len() as u64;
            let m = measure(
                &[("shortcut", db)],
                &gk,
                &mut |rng: &mut SmallRng| rng.gen_range(0..gn),
                s.warmup / 4,
                s.ops / 2,
                1,
                25,
            )?;
            if let Some(run) = m.get("shortcut") {
                r.geolite_accuracy = run.accuracy;
                r.geolite_level_accuracy = run.level_accuracy.clone();
            }
            let _ = std::fs::remove_dir_all(&dir);
        } else {
            say("GeoLite2 keys absent; skipping their accuracy");
        }
        // 6. Insert-heavy.
        say("insert-heavy");
        r.timelines = insert_heavy(&root, &s)?;
        let _ = std::fs::remove_dir_all(&root);
        Ok(r)
    }

    fn params(&self, r: &Results) -> serde_json::Value {
        json!({
            "key_bytes": 8,
            "value_bytes": 8,
            "pool_bytes": r.pool_bytes,
            "pool_pct_of_tree": r.pool_bytes as f64 * 100.0 / r.tree_bytes.max(1) as f64,
            "one_pct_pool_bytes": r.one_pct_pool_bytes,
            "latencydev_read_us": 100,
            "latencydev_backing": "memory copy of the store",
            "sync": "never",
            "threads": 1,
            "eps": ShortcutOptions::default().eps,
            "stash_threshold": ShortcutOptions::default().stash_threshold,
        })
    }

    fn metrics(&self, r: &Results, c: &mut Claims) -> Metrics {
        metrics_of(r, c)
    }

    fn render(&self, r: &Results, metrics: &Metrics, doc: &mut Report) -> Result<()> {
        render(r, metrics, doc)
    }
}

/// The insert-heavy phase: 50% `latest` lookups, 50% inserts of new keys.
fn insert_heavy(root: &Path, s: &Sizes) -> Result<BTreeMap<String, Timeline>> {
    let ps = s.page_size;
    let base = uniform_keys(s.insert_base, 0x1234_5678);
    let variants: [(&str, ShortcutVariant, bool); 3] = [
        ("shortcut", ShortcutVariant::Shortcut, true),
        ("shortcut-no-relayout", ShortcutVariant::Shortcut, false),
        ("shortcut-sync", ShortcutVariant::Sync, true),
    ];
    let mut stores = Vec::new();
    let mut tree_bytes = 0;
    for (name, v, relayout) in variants {
        let dir = root.join(format!("insert-{name}"));
        let o = Open {
            variant: Some(v),
            cache: 64 << 20,
            page_size: ps,
            read_delay: None,
            relayout,
            runner_up: true,
        };
        load(&dir, &base, o)?;
        if tree_bytes == 0 {
            let db = open(&dir, o)?;
            tree_bytes = db.stats().engine_or_default::<BTreeStats>().pages * ps as u64;
        }
        stores.push((name, dir, o));
    }
    // A pool of 2% of the initial tree: the upper levels fit, most of the
    // rest does not.
    let cache = (tree_bytes / 50).max(64 << 10);
    let opened: Vec<(&str, BTreeStore)> = stores
        .iter()
        .map(|(n, d, o)| open(d, Open { cache, ..*o }).map(|db| (*n, db)))
        .collect::<Result<_>>()?;
    // One operation sequence for all: (is_insert, record number).
    let mut rng = SmallRng::seed_from_u64(31);
    let mut latest = Latest::new(ZIPFIAN_THETA);
    let nb = s.insert_base;
    let mut inserted = 0u64;
    let mut seq = Vec::with_capacity(s.insert_ops as usize);
    for _ in 0..s.insert_ops {
        if rng.gen_bool(0.5) {
            seq.push((true, nb + inserted));
            inserted += 1;
        } else {
            seq.push((false, latest.next(&mut rng, nb + inserted)));
        }
    }
    let key_of = |rec: u64| -> u64 {
        if rec < nb {
            base[rec as usize]
        } else {
            mix64((rec - nb) ^ 0x9e37_79b9_7f4a_7c15)
        }
    };
    let mut out: BTreeMap<String, Timeline> = BTreeMap::new();
    let mut all: Vec<Latencies> = opened.iter().map(|_| Latencies::new()).collect();
    for (_, db) in &opened {
        db.reset_shortcut_counters();
    }
    let mut prev: Vec<(u64, u64, u64)> = opened.iter().map(|_| (0, 0, 0)).collect();
    let chunk = (s.insert_ops / s.insert_chunks.max(1)).max(1) as usize;
    let parts: Vec<&[(bool, u64)]> = seq.chunks(chunk).collect();
    alternate(opened.len(), parts.len() as u64, |i, c| {
        let (name, db) = &opened[i];
        let part = parts[c as usize];
        let mut h = Latencies::new();
        let t0 = Instant::now();
        for &(ins, rec) in part {
            let kk = key(key_of(rec));
            let t = Instant::now();
            if ins {
                db.put(&kk, &value(rec)).map_err(store_err(name))?;
            } else {
                let v = db.get(&kk).map_err(store_err(name))?;
                if v.as_deref() != Some(&value(rec)[..]) {
                    return Err(BenchError::Config(format!(
                        "{name}: wrong answer for record {rec} (insert-heavy)"
                    )));
                }
            }
            h.record(t.elapsed());
        }
        all[i].add(&h);
        let secs = t0.elapsed().as_secs_f64();
        let rep = report_of(db);
        let (p, hh) = (
            rep.level_predictions.iter().sum::<u64>(),
            rep.level_hits.iter().sum::<u64>(),
        );
        let (p0, h0, _) = prev[i];
        prev[i] = (p, hh, rep.rebuilds);
        let t = out.entry(name.to_string()).or_default();
        t.ops_per_sec.push(part.len() as f64 / secs.max(1e-9));
        t.p50_us.push(h.quantile_us(0.5));
        t.p99_us.push(h.quantile_us(0.99));
        t.accuracy
            .push((hh - h0) as f64 / p.saturating_sub(p0).max(1) as f64);
        t.rebuilds.push(rep.rebuilds);
        Ok(())
    })?;
    for (i, (name, db)) in opened.iter().enumerate() {
        db.verify().map_err(store_err(name))?;
        let rep = report_of(db);
        let t = out.entry(name.to_string()).or_default();
        t.p99_us_all = all[i].quantile_us(0.99);
        t.rebuild_seconds = rep.rebuild_seconds_total;
        t.relayouts = rep.relayouts;
        t.relocated = rep.relocated;
        t.relayout_seconds = rep.relayout_seconds_total;
        t.discontinuities_end = rep.discontinuities;
        t.pages_start = tree_bytes / ps as u64;
        t.pages_end = db.stats().engine_or_default::<BTreeStats>().pages;
    }
    drop(opened);
    for (_, d, _) in &stores {
        let _ = std::fs::remove_dir_all(d);
    }
    Ok(out)
}

fn run_of<'r>(r: &'r Results, phase: &str, variant: &str) -> Option<&'r Run> {
    r.runs.get(phase)?.get(variant)
}

fn metrics_of(r: &Results, c: &mut Claims) -> Metrics {
    let mut m = Metrics::new();
    c.tree_height.set(r.tree_levels as f64);
    m.set(
        "pool_pct_of_tree",
        r.pool_bytes as f64 * 100.0 / r.tree_bytes.max(1) as f64,
    );
    let ratio = |phase: &str, f: fn(&Run) -> f64| -> Option<f64> {
        let b = run_of(r, phase, "baseline")?;
        let s = run_of(r, phase, "shortcut")?;
        Some(f(s) / f(b))
    };
    if let Some(b) = run_of(r, "uniform", "baseline") {
        c.reads_per_lookup_baseline.set(b.reads_per_lookup);
    }
    if let Some(s) = run_of(r, "uniform", "shortcut") {
        m.set("reads_per_lookup_shortcut", s.reads_per_lookup);
        c.accuracy_uniform_keys.set_some(s.accuracy);
    }
    type Statistic = fn(&Run) -> f64;
    let (p50, p95, p99): (Statistic, Statistic, Statistic) =
        (|x| x.p50_us, |x| x.p95_us, |x| x.p99_us);
    c.p50_ratio_uniform.set_some(ratio("uniform", p50));
    c.p95_ratio_uniform.set_some(ratio("uniform", p95));
    c.p50_ratio_latencydev
        .set_some(ratio("uniform_latencydev", p50));
    c.throughput_ratio_uniform
        .set_some(ratio("uniform", Run::ops_per_sec));
    for (name, phase, f) in [
        ("p99_ratio_uniform", "uniform", p99),
        ("p50_ratio_zipfian", "zipfian", p50),
        ("p95_ratio_zipfian", "zipfian", p95),
        ("p50_ratio_pool1pct", "uniform_pool1pct", p50),
        ("throughput_ratio_zipfian", "zipfian", Run::ops_per_sec),
    ] {
        m.set_some(name, ratio(phase, f));
    }
    for phase in [
        "uniform",
        "zipfian",
        "uniform_latencydev",
        "uniform_pool1pct",
    ] {
        for v in ["shortcut-base", "shortcut-sync", "shortcut-single"] {
            if let (Some(b), Some(x)) = (run_of(r, phase, "baseline"), run_of(r, phase, v)) {
                m.set(format!("p50_ratio_{phase}_{v}"), x.p50_us / b.p50_us);
                m.set(format!("p95_ratio_{phase}_{v}"), x.p95_us / b.p95_us);
            }
        }
    }
    if let Some(p) = &r.punch {
        m.set(
            "insert_range_over_pwrite",
            p.insert_range_us_p50 / p.pwrite_us_p50,
        );
    }
    c.accuracy_geolite2.set_some(r.geolite_accuracy);
    if let Some(s) = run_of(r, "uniform_pool1pct", "shortcut") {
        c.companion_bytes_pct_of_pool
            .set(s.companion_bytes as f64 * 100.0 / r.one_pct_pool_bytes.max(1) as f64);
        m.set(
            "companion_bytes_per_node",
            s.companion_bytes as f64 / s.nodes_modelled.max(1) as f64,
        );
    }
    if let Some(b) = run_of(r, "uniform_pool1pct", "shortcut-base") {
        m.set(
            "base_companion_bytes_pct_of_pool",
            b.companion_bytes as f64 * 100.0 / r.one_pct_pool_bytes.max(1) as f64,
        );
    }
    if let Some(t) = r.timelines.get("shortcut") {
        let first = t.accuracy.first().copied().unwrap_or(0.0);
        let last = t.accuracy.last().copied().unwrap_or(0.0);
        if first > 0.0 {
            c.insert_heavy_accuracy_retained.set(last / first);
        }
        m.set("insert_heavy_accuracy_last", last);
        m.set(
            "insert_heavy_record_growth",
            (r.insert_ops / 2) as f64 / r.insert_base.max(1) as f64,
        );
        m.set(
            "insert_heavy_page_ids_growth",
            t.pages_end as f64 / t.pages_start.max(1) as f64 - 1.0,
        );
        if let Some(off) = r.timelines.get("shortcut-no-relayout") {
            // Without re-layouts no id is ever left behind: its page ids
            // are the live tree.
            m.set(
                "insert_heavy_tree_growth",
                off.pages_end as f64 / off.pages_start.max(1) as f64 - 1.0,
            );
            c.insert_heavy_p99_ratio
                .set(t.p99_us_all / off.p99_us_all.max(1e-9));
            let off_last = off.accuracy.last().copied().unwrap_or(0.0);
            m.set("insert_heavy_accuracy_last_no_relayout", off_last);
        }
        if let Some(sync) = r.timelines.get("shortcut-sync") {
            m.set(
                "insert_heavy_p99_ratio_sync",
                sync.p99_us_all / t.p99_us_all.max(1e-9),
            );
        }
    }
    m
}

fn render(r: &Results, metrics: &Metrics, doc: &mut Report) -> Result<()> {
    let mb = |b: u64| b as f64 / (1 << 20) as f64;
    let _ = writeln!(
        doc,
        "# SHORTCUT: one-shot B+tree traversal (`shortcut`)\n\n\
         The B+tree engine with its dependent descent (`baseline`) and with SHORTCUT's companion in three variants, \
         on the same data, pool and page size: {} records of 8-byte uniform random keys and 8-byte values, \
         bulk-loaded at 90% fill into {}-byte pages: {} levels, {} pages ({:.0} MiB; pages per level from the leaves: {:?}). \
         Pool for the main runs: {:.2} MiB ({} frames, {:.3}% of the tree), found by halving from 1% of the tree until \
         the baseline read ≥ 2.5 pages per lookup (calibration: {}). One client thread, O_DIRECT, durability `never`; \
         every variant runs the same lookup sequence in alternating chunks after a warm-up of the same sequence. \
         Reproduce with `cargo run --release -- repro shortcut --out docs/results`.\n",
        r.records,
        r.page_size,
        r.tree_levels,
        r.tree_pages,
        mb(r.tree_bytes),
        r.pages_per_level,
        mb(r.pool_bytes),
        r.pool_frames,
        r.pool_bytes as f64 * 100.0 / r.tree_bytes.max(1) as f64,
        r.calibration
            .iter()
            .map(|(b, x)| format!("{:.2} MiB → {x:.2}", mb(*b)))
            .collect::<Vec<_>>()
            .join(", "),
    );
    let _ = writeln!(
        doc,
        "| phase | variant | kops/s | P50 µs | P95 µs | P99 µs | device reads / lookup | model accuracy (mean; per level) | path covered incl. runner-up (per level) | prefetched used / wasted | companion |\n\
         |---|---|---|---|---|---|---|---|---|---|---|"
    );
    for (phase, runs) in &r.runs {
        for (name, _, _) in VARIANTS {
            let Some(x) = runs.get(name) else {
                continue;
            };
            let _ = writeln!(
        doc,
                "| {phase} | {name} | {:.2} | {:.1} | {:.1} | {:.1} | {:.2} | {} | {:?} | {} / {} | {} |",
                x.ops_per_sec() / 1e3,
                x.p50_us,
                x.p95_us,
                x.p99_us,
                x.reads_per_lookup,
                x.accuracy
                    .map_or("–".into(), |a| format!("{:.1}% {:?}", a * 100.0, x
                        .level_accuracy
                        .iter()
                        .map(|v| (v * 1000.0).round() / 10.0)
                        .collect::<Vec<_>>())),
                x.level_coverage
                    .iter()
                    .map(|v| (v * 1000.0).round() / 10.0)
                    .collect::<Vec<_>>(),
                x.prefetch_used,
                x.prefetch_wasted,
                if x.companion_bytes > 0 {
                    format!(
                        "{:.1} KiB, {} segments, {} discontinuities",
                        x.companion_bytes as f64 / 1024.0,
                        x.segments,
                        x.discontinuities
                    )
                } else {
                    "–".into()
                },
            );
        }
    }
    let _ = writeln!(
        doc,
        "\nPhases: `uniform` and `zipfian` (YCSB-C) at the calibrated pool; `uniform_pool1pct` at a pool of 1% of the tree \
         ({:.2} MiB, the paper's setting); `uniform_latencydev` with a copy of each store in memory behind a device whose every \
         read takes 100 µs (no disk under it, so the disk's speed on the day does not move it). Accuracy is per level (leaves first), over the lookups measured.\n",
        mb(r.one_pct_pool_bytes)
    );
    match r.geolite_accuracy {
        Some(a) => {
            let _ = writeln!(
        doc,
                "GeoLite2 IPv4 network starts ({} real keys, `../shared/data/keys`): keyless-model accuracy {:.1}% \
                 averaged over levels ({:?} per level, leaves first).\n",
                r.geolite_keys,
                a * 100.0,
                r.geolite_level_accuracy
                    .iter()
                    .map(|v| (v * 1000.0).round() / 10.0)
                    .collect::<Vec<_>>()
            );
        }
        None => {
            let _ = doc.write_str(
                "GeoLite2 keys were not available; their accuracy was not measured.\n\n",
            );
        }
    }
    // Latency CDFs.
    for phase in ["uniform", "zipfian", "uniform_latencydev"] {
        let Some(runs) = r.runs.get(phase) else {
            continue;
        };
        let series: Vec<(String, Vec<(f64, f64)>)> = VARIANTS
            .iter()
            .filter_map(|(n, _, _)| {
                let x = runs.get(*n)?;
                let curve = PCTS.iter().zip(&x.cdf).map(|(p, us)| (p / 100.0, *us));
                Some((n.to_string(), curve.collect()))
            })
            .collect();
        report::plot_percentiles(
            &format!("{phase}: lookup latency by percentile (paper Figure 8)"),
            "lookup latency (µs, log scale)",
            &series,
            &doc.dir().join(format!("cdf-{phase}.svg")),
        )?;
        let _ = writeln!(doc, "![{phase} latency](shortcut/cdf-{phase}.svg)");
    }
    // Per-segment accuracy (paper Figure 12), the leaf level.
    let leaf: Vec<f64> = r
        .segments
        .iter()
        .filter(|p| p.level == 0 && p.lookups > 0)
        .map(|p| p.hits as f64 / p.lookups as f64)
        .collect();
    if !leaf.is_empty() {
        report::plot_lines(
            "accuracy per segment, leaf level, uniform lookups (paper Figure 12)",
            "segment",
            "accuracy",
            &[("shortcut".to_string(), leaf)],
            &doc.dir().join("segments.svg"),
        )?;
        let _ = writeln!(doc, "\n![per-segment accuracy](shortcut/segments.svg)\n");
    }
    // Insert-heavy timelines (paper Figure 10).
    if !r.timelines.is_empty() {
        let _ = writeln!(
        doc,
            "## Insert-heavy (paper Figure 10)\n\n{} records bulk-loaded, then {} operations: 50% lookups (`latest`), \
             50% inserts of new random keys, in {} chunks per variant, alternating; pool = 2% of the initial tree.\n\n\
             Page ids allocated: without re-layouts they are the live tree; with them they also count each level's \
             run slack and the ids re-layouts left behind (spare runs and freed ids, which later splits and \
             re-layouts reuse before the file grows).\n\n\
             | variant | P99 µs (all ops) | accuracy first → last chunk | rebuilds | rebuild time s | level re-layouts | nodes moved | re-layout time s | map discontinuities at end | page ids allocated start → end |\n|---|---|---|---|---|---|---|---|---|---|---|",
            r.insert_base,
            r.insert_ops,
            r.timelines.values().next().map_or(0, |t| t.ops_per_sec.len()),
        );
        for (name, t) in &r.timelines {
            let _ = writeln!(
        doc,
                "| {name} | {:.1} | {:.1}% → {:.1}% | {} | {:.2} | {} | {} | {:.2} | {} | {} → {} |",
                t.p99_us_all,
                t.accuracy.first().copied().unwrap_or(0.0) * 100.0,
                t.accuracy.last().copied().unwrap_or(0.0) * 100.0,
                t.rebuilds.last().copied().unwrap_or(0),
                t.rebuild_seconds,
                t.relayouts,
                t.relocated,
                t.relayout_seconds,
                t.discontinuities_end,
                t.pages_start,
                t.pages_end,
            );
        }
        for (what, f) in [
            (
                "accuracy",
                (&|t: &Timeline| t.accuracy.clone()) as &dyn Fn(&Timeline) -> Vec<f64>,
            ),
            ("kops", &|t: &Timeline| {
                t.ops_per_sec.iter().map(|v| v / 1e3).collect()
            }),
            ("p50-us", &|t: &Timeline| t.p50_us.clone()),
            ("p99-us", &|t: &Timeline| t.p99_us.clone()),
        ] {
            let series: Vec<(String, Vec<f64>)> =
                r.timelines.iter().map(|(n, t)| (n.clone(), f(t))).collect();
            report::plot_lines(
                &format!("insert-heavy: {what} per chunk"),
                "chunk",
                what,
                &series,
                &doc.dir().join(format!("insert-{what}.svg")),
            )?;
            let _ = writeln!(doc, "![insert-heavy {what}](shortcut/insert-{what}.svg)");
        }
    }
    match &r.punch {
        Some(p) => {
            let _ = writeln!(
        doc,
                "\n## The file-system path the paper uses\n\n\
                 On this machine's ext4, in a {} MiB file, medians over {} operations at random block offsets: \
                 a 4 KiB O_DIRECT `pwrite` {:.1} µs; `fallocate` INSERT_RANGE of one block (each followed by a write of \
                 the new node into the hole, so the extent map fragments) {:.1} µs; COLLAPSE_RANGE {:.1} µs. Inserting a \
                 hole costs {:.2}× a page write here; the paper cites about 1000× from its file system. ferrite cannot \
                 use the operation for its layout: child pointers are page ids, that is file offsets, which an insert \
                 shifts, and this file system offers no LBA-addressed reads that would keep them valid (the paper's \
                 custom file system does). Its re-layout copies pages into place instead.\n",
                (p.file_blocks * 4096) >> 20,
                p.ops,
                p.pwrite_us_p50,
                p.insert_range_us_p50,
                p.collapse_range_us_p50,
                p.insert_range_us_p50 / p.pwrite_us_p50,
            );
        }
        None => {
            let _ = doc.write_str(
                "\nINSERT_RANGE is not available on this file system; it was not timed.\n",
            );
        }
    }
    doc.metrics(metrics);
    let _ = doc.write_str(
        "\n## How to read this\n\n\
         - A lookup's latency is its service time: one thread, one lookup at a time. SHORTCUT reads every predicted, \
         uncached node of the path in one io_uring batch before descending, so a lookup whose predictions hit waits for \
         one parallel round of reads instead of one read per uncached level.\n\
         - Device reads per lookup count every page read, so SHORTCUT's include wasted prefetches; its extra reads over \
         the baseline are the bandwidth mispredictions cost.\n\
         - Memory: the companion (models, phantom maps, per-segment counters) is reported beside the pool, which is the \
         same for every variant; SHORTCUT-BASE's exact key and page arrays show what the keyless design saves.\n\
         - `shortcut-single` is the paper's design, one predicted node per level. `shortcut` (the default) also reads, \
         in the same batch, the runner-up of levels whose models' expected hit rate is below 90% (here the two lowest \
         levels): the neighbouring node on the side the prediction leans to. It costs device bandwidth (the wasted column), \
         not an extra round. *Model accuracy* counts the first choice only, as the paper does; *path covered* counts a \
         level whose node was either choice.\n\
         - The phantom map holds one run per stretch of consecutively placed nodes: a bulk-loaded level costs one run, \
         and every node a split places out of order costs up to two. Re-layout rebuilds the companion from a walk of the \
         inner pages (no leaf is read) and, for a level whose discontinuities pass 10% of its nodes, first moves the \
         level's nodes back into one run of page ids in key order (4 nodes per hold of the write lock; in \
         SHORTCUT-SYNC all at once, on the writer's critical path, which is why its P99 stays low while single \
         operations stall for a whole level's move).\n",
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_keys_are_sorted_and_distinct() {
        let k = uniform_keys(10_000, 3);
        assert!(k.windows(2).all(|w| w[0] < w[1]));
    }
}
