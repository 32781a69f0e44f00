//! `turboindex`: the B+tree with its insert buffer (TurboIndex) against the
//! same engine with the buffer off.
//!
//! Setup as the paper (§IV-A, §VI): 8-byte keys (record numbers, big
//! endian, so a key range is a page range) and 8-byte values, bulk-loaded
//! at 90% fill; the memory budget is half the tree's size in bytes (data =
//! 2× the pool), the same for both variants (TurboIndex's insert buffer is
//! carved out of it); 4 KiB pages; durability `never` for both; one client
//! thread. Both stores are loaded with identical data, and each workload
//! runs on both in alternating chunks (same operation sequence), after a
//! warm-up of the same workload, so machine noise hits both alike.
//!
//! Workloads (updates overwrite existing keys, reads are lookups):
//! - `write_uniform`: updates, uniform keys;
//! - `lru_anomaly1`: a hot set of 45% of the keys written uniformly, with
//!   periodic sweeps of the other 55%: after eight writes per hot leaf,
//!   one write to each cold leaf in key order;
//! - `lru_anomaly2`: every leaf written in turn, in a loop (consecutive
//!   operations hit consecutive leaves);
//! - `workload3`: three equal key ranges written with probabilities
//!   0.8 / 0.19 / 0.01;
//! - `ycsb_a` / `ycsb_b`: 50% / 95% lookups, the rest updates, uniform.
//!
//! Buffer-pool hit ratio: leaf requests that reached the buffer pool and
//! found their page there. A write the insert buffer absorbs never reaches
//! the pool; every page it loads to apply records is a miss. The stricter
//! *leaf-access* ratio is also reported: all leaf accesses, a buffered
//! write counting as a miss (a lookup the buffer answered is not counted).

use std::collections::BTreeMap;
use std::time::Instant;

use ferrite::internals::Instrumented;
use ferrite::{EngineKind, KvStore, Options, SyncMode};
use ferrite_btree::BTreeStats;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::driver::{alternate, open_engine, store_err, Metrics, Report, Study, Table};
use super::ReproContext;
use crate::error::Result;
use crate::report;

pub struct TurboRepro;

sizes! {
    struct Sizes {
        records: u64 = (200_000, 3_000_000, 20_000_000),
        warmup: u64 = (10_000, 150_000, 1_000_000),
        ops: u64 = (40_000, 600_000, 4_000_000),
        chunks: u64 = (4, 12, 20),
    }
}

/// The workloads, in report order.
const WORKLOADS: [&str; 6] = [
    "write_uniform",
    "lru_anomaly1",
    "lru_anomaly2",
    "workload3",
    "ycsb_a",
    "ycsb_b",
];

/// Bytes a pool frame costs (page and bookkeeping), for sizing the budget.
const PAGE_COST: u64 = 4096 + 128;

/// One client's operation stream: `(is_read, record number)`.
struct Stream {
    workload: &'static str,
    records: u64,
    /// Records per leaf, so the loop of `lru_anomaly2` steps leaf by leaf.
    per_leaf: u64,
    i: u64,
    rng: SmallRng,
}

impl Stream {
    fn new(workload: &'static str, records: u64, per_leaf: u64, seed: u64) -> Self {
        Self {
            workload,
            records,
            per_leaf: per_leaf.max(1),
            i: 0,
            rng: SmallRng::seed_from_u64(seed),
        }
    }

    fn next(&mut self) -> (bool, u64) {
        let n = self.records;
        let i = self.i;
        self.i += 1;
        match self.workload {
            "lru_anomaly1" => {
                let hot = n * 45 / 100;
                let hot_phase = 8 * (hot / self.per_leaf).max(1);
                let sweep = ((n - hot) / self.per_leaf).max(1);
                let cycle = hot_phase + sweep;
                let j = i % cycle;
                if j < hot_phase {
                    (false, self.rng.gen_range(0..hot))
                } else {
                    // One write per cold leaf; each sweep a different slot.
                    let slot = (i / cycle) % self.per_leaf;
                    (
                        false,
                        (hot + (j - hot_phase) * self.per_leaf + slot).min(n - 1),
                    )
                }
            }
            "lru_anomaly2" => {
                let leaves = (n / self.per_leaf).max(1);
                let leaf = i % leaves;
                let slot = (i / leaves) % self.per_leaf;
                (false, (leaf * self.per_leaf + slot).min(n - 1))
            }
            "workload3" => {
                let third = n / 3;
                let r: f64 = self.rng.gen();
                let base = if r < 0.8 {
                    0
                } else if r < 0.99 {
                    third
                } else {
                    2 * third
                };
                (false, base + self.rng.gen_range(0..third))
            }
            "ycsb_a" => (self.rng.gen_bool(0.5), self.rng.gen_range(0..n)),
            "ycsb_b" => (self.rng.gen_bool(0.95), self.rng.gen_range(0..n)),
            _ => (false, self.rng.gen_range(0..n)),
        }
    }
}

/// One variant's measurements over a workload's measured phase.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct VariantRun {
    ops: u64,
    secs: f64,
    hit_ratio: f64,
    leaf_access_ratio: f64,
    read_bytes_per_op: f64,
    write_bytes_per_op: f64,
    /// Insert-buffer bytes at the end, as a fraction of the total budget.
    buffer_share: f64,
    /// Pool frames at the end (an adaptive insert buffer that turned itself
    /// off lends its memory to the pool).
    #[serde(default)]
    pool_frames_end: u64,
    /// Times the adaptive insert buffer turned off or on, warm-up included.
    #[serde(default)]
    gate_switches: u64,
    /// Per file of the store: (name, device bytes read / op, written / op).
    #[serde(default)]
    files: Vec<(String, f64, f64)>,
    /// Per operation: dirty pages evicted to the spill file, and pages
    /// checkpoints installed.
    #[serde(default)]
    spills_per_op: f64,
    #[serde(default)]
    checkpoint_pages_per_op: f64,
    /// (seconds since the phase began, ops/s, hit ratio) per chunk.
    timeline: Vec<(f64, f64, f64)>,
}

impl VariantRun {
    fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.secs.max(1e-9)
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Results {
    records: u64,
    #[serde(default)]
    warmup: u64,
    #[serde(default)]
    ops: u64,
    #[serde(default)]
    chunks: u64,
    leaf_pages: u64,
    tree_pages: u64,
    budget_bytes: u64,
    pool_frames_baseline: u64,
    pool_frames_turbo: u64,
    /// workload -> (baseline, turboindex)
    runs: BTreeMap<String, (VariantRun, VariantRun)>,
}

/// Leaf requests to the pool that hit, and all of them: a write absorbed
/// by the insert buffer is no request; a page loaded to apply buffered
/// records is a miss.
fn pool_requests(b: &BTreeStats) -> (f64, f64) {
    let hits = (b.write_hits + b.read_hits) as f64;
    let write_loads = match &b.insert_buffer {
        Some(ib) => {
            let k = &ib.counters;
            b.write_misses as f64 - k.buffered as f64
                + (k.promoted_loads + k.full_loads + k.pressure_loads) as f64
        }
        None => b.write_misses as f64,
    };
    (hits, hits + b.read_misses as f64 + write_loads)
}

/// Leaf accesses whose page was in the pool, and all leaf accesses.
fn leaf_accesses(b: &BTreeStats) -> (f64, f64) {
    let hits = (b.write_hits + b.read_hits) as f64;
    (hits, hits + (b.write_misses + b.read_misses) as f64)
}

/// The insert buffer's bytes now and its switches so far (0 without one).
fn buffer_state(b: &BTreeStats) -> (u64, u64) {
    b.insert_buffer
        .as_ref()
        .map_or((0, 0), |ib| (ib.bytes, ib.switches))
}

fn value_of(k: u64, round: u64) -> [u8; 8] {
    (k ^ round.rotate_left(32)).to_le_bytes()
}

fn open(dir: &std::path::Path, kind: EngineKind, budget: u64) -> Result<Box<dyn Instrumented>> {
    let opts = Options::default().cache_bytes(budget).sync(SyncMode::Never);
    open_engine(dir, kind, &opts)
}

/// Runs `ops` operations of `stream` on `db`.
fn drive(db: &dyn KvStore, kind: EngineKind, stream: &mut Stream, ops: u64) -> Result<()> {
    let err = store_err(kind.name());
    for _ in 0..ops {
        let (read, k) = stream.next();
        let key = k.to_be_bytes();
        if read {
            std::hint::black_box(db.get(&key).map_err(&err)?);
        } else {
            db.put(&key, &value_of(k, stream.i)).map_err(&err)?;
        }
    }
    Ok(())
}

const KINDS: [EngineKind; 2] = [EngineKind::Btree, EngineKind::TurboIndex];

/// Runs workload `w` (number `wi`) on both stores: a warm-up, then the
/// measured operations in alternating chunks.
fn run_workload(
    stores: &[Box<dyn Instrumented>],
    w: &'static str,
    wi: usize,
    s: &Sizes,
    per_leaf: u64,
    budget: u64,
) -> Result<(VariantRun, VariantRun)> {
    let mut runs: Vec<VariantRun> = vec![VariantRun::default(); 2];
    let switches_at_start: Vec<u64> = stores
        .iter()
        .map(|d| buffer_state(&d.stats().engine_or_default::<BTreeStats>()).1)
        .collect();
    let mut streams: Vec<Stream> = (0..2)
        .map(|_| Stream::new(w, s.records, per_leaf, 1000 + wi as u64))
        .collect();
    for (i, db) in stores.iter().enumerate() {
        drive(db.as_ref(), KINDS[i], &mut streams[i], s.warmup)?;
    }
    let before: Vec<BTreeStats> = stores
        .iter()
        .map(|d| d.stats().engine_or_default::<BTreeStats>())
        .collect();
    let chunk = s.ops / s.chunks;
    alternate(2, s.chunks, |i, _| {
        let a = stores[i].stats().engine_or_default::<BTreeStats>();
        let t = Instant::now();
        drive(stores[i].as_ref(), KINDS[i], &mut streams[i], chunk)?;
        let secs = t.elapsed().as_secs_f64();
        let b = stores[i].stats().engine_or_default::<BTreeStats>();
        let (h0, n0) = pool_requests(&a);
        let (h1, n1) = pool_requests(&b);
        let r = &mut runs[i];
        r.secs += secs;
        r.ops += chunk;
        r.timeline
            .push((r.secs, chunk as f64 / secs, (h1 - h0) / (n1 - n0).max(1.0)));
        Ok(())
    })?;
    for (i, db) in stores.iter().enumerate() {
        let (a, b) = (db.stats().engine_or_default::<BTreeStats>(), &before[i]);
        let (h0, n0) = pool_requests(b);
        let (h1, n1) = pool_requests(&a);
        let (a0, m0) = leaf_accesses(b);
        let (a1, m1) = leaf_accesses(&a);
        let r = &mut runs[i];
        let ops = r.ops.max(1) as f64;
        r.hit_ratio = (h1 - h0) / (n1 - n0).max(1.0);
        r.leaf_access_ratio = (a1 - a0) / (m1 - m0).max(1.0);
        let (now, then) = (a.files.total(), b.files.total());
        r.read_bytes_per_op = (now.read_bytes - then.read_bytes) as f64 / ops;
        r.write_bytes_per_op = (now.write_bytes - then.write_bytes) as f64 / ops;
        let (buffer_bytes, switches) = buffer_state(&a);
        r.buffer_share = buffer_bytes as f64 / budget as f64;
        r.pool_frames_end = a.pool_frames;
        r.gate_switches = switches.saturating_sub(switches_at_start[i]);
        r.files = a
            .files
            .named()
            .into_iter()
            .zip(b.files.named())
            .map(|((name, x), (_, y))| {
                (
                    name.to_string(),
                    (x.read_bytes - y.read_bytes) as f64 / ops,
                    (x.write_bytes - y.write_bytes) as f64 / ops,
                )
            })
            .collect();
        r.spills_per_op = (a.spills - b.spills) as f64 / ops;
        r.checkpoint_pages_per_op = (a.checkpoint_pages - b.checkpoint_pages) as f64 / ops;
    }
    let turbo = runs.pop().unwrap_or_default();
    let base = runs.pop().unwrap_or_default();
    Ok((base, turbo))
}

claims! {
    struct Claims {
        speedup_write_uniform >= 4.0, "up to 4.5x (reuse threshold 2)";
        speedup_lru_anomaly1 >= 5.0, "9.98x";
        speedup_lru_anomaly2 >= 10.0, "69.86x";
        speedup_workload3 >= 2.0, "2.25-3.53x";
        speedup_ycsb_a >= 1.5, "1.5-1.7x";
        speedup_ycsb_b >= 0.97, "no degradation";
        min_hit_ratio_delta >= 0.0, "hit ratio at or above LeanStore's in every workload";
    }
}

impl Study for TurboRepro {
    type Results = Results;
    type Claims = Claims;

    const NAME: &'static str = "turboindex";

    const SUMMARY: &'static str = "TurboIndex's insert buffer vs the same B+tree without it: uniform writes, LRU anomalies, skew, YCSB A/B";

    type Sizes = Sizes;

    fn measure(&self, ctx: &ReproContext, s: Sizes) -> Result<Results> {
        let root = ctx.work_dir.join("turboindex");
        let _ = std::fs::remove_dir_all(&root);
        let dirs: Vec<_> = KINDS.iter().map(|k| root.join(k.name())).collect();
        // Load both stores identically, then size the budget from the tree.
        let mut results = Results {
            records: s.records,
            warmup: s.warmup,
            ops: s.ops,
            chunks: s.chunks,
            ..Results::default()
        };
        for (kind, dir) in KINDS.iter().zip(&dirs) {
            let db = open(dir, *kind, 64 << 20)?;
            let bytes = std::cell::Cell::new(0u64);
            let mut pairs = (0..s.records)
                .map(|k| (k.to_be_bytes().to_vec(), value_of(k, 0).to_vec()))
                .inspect(|(k, v)| bytes.set(bytes.get() + (k.len() + v.len()) as u64));
            db.bulk_load(&mut pairs).map_err(store_err(kind.name()))?;
            crate::user_data::declare(dir, bytes.get());
            let st = &db.stats().engine_or_default::<BTreeStats>();
            results.leaf_pages = st.pages_per_level.first().copied().unwrap_or(0);
            results.tree_pages = st.pages;
        }
        results.budget_bytes = (results.tree_pages * PAGE_COST / 2).max(1 << 20);
        let per_leaf = s.records / results.leaf_pages.max(1);
        let stores: Vec<Box<dyn Instrumented>> = KINDS
            .iter()
            .zip(&dirs)
            .map(|(k, d)| open(d, *k, results.budget_bytes))
            .collect::<Result<_>>()?;
        let frames = |d: &dyn KvStore| d.stats().engine_or_default::<BTreeStats>().pool_frames;
        results.pool_frames_baseline = frames(stores[0].as_ref());
        results.pool_frames_turbo = frames(stores[1].as_ref());
        for (wi, &w) in WORKLOADS.iter().enumerate() {
            progress!(ctx, "turboindex: {w}");
            let runs = run_workload(&stores, w, wi, &s, per_leaf, results.budget_bytes)?;
            results.runs.insert(w.to_string(), runs);
        }
        for (db, kind) in stores.iter().zip(KINDS) {
            db.verify().map_err(store_err(kind.name()))?;
        }
        drop(stores);
        let _ = std::fs::remove_dir_all(&root);
        Ok(results)
    }

    fn params(&self, r: &Results) -> serde_json::Value {
        json!({
            "key_bytes": 8,
            "value_bytes": 8,
            "page_bytes": 4096,
            "budget_bytes": r.budget_bytes,
            "data_over_budget": (r.tree_pages * PAGE_COST) as f64 / r.budget_bytes as f64,
            "insert_buffer_share": 0.05,
            "reuse_threshold": 2,
            "l_quota": 0.9,
            "sync": "never",
            "threads": 1,
        })
    }

    fn metrics(&self, r: &Results, c: &mut Claims) -> Metrics {
        let mut m = Metrics::new();
        let mut min_delta: Option<f64> = None;
        for (w, (base, turbo)) in &r.runs {
            let speedup = turbo.ops_per_sec() / base.ops_per_sec();
            let claimed = [
                &mut c.speedup_write_uniform,
                &mut c.speedup_lru_anomaly1,
                &mut c.speedup_lru_anomaly2,
                &mut c.speedup_workload3,
                &mut c.speedup_ycsb_a,
                &mut c.speedup_ycsb_b,
            ];
            match claimed
                .into_iter()
                .find(|f| f.name() == format!("speedup_{w}"))
            {
                Some(f) => f.set(speedup),
                None => {
                    m.set(format!("speedup_{w}"), speedup);
                }
            }
            let delta = turbo.hit_ratio - base.hit_ratio;
            m.set(format!("hit_ratio_delta_{w}"), delta);
            min_delta = Some(min_delta.map_or(delta, |d| d.min(delta)));
            m.set(format!("buffer_share_{w}"), turbo.buffer_share);
        }
        c.min_hit_ratio_delta.set_some(min_delta);
        m
    }

    fn render(&self, r: &Results, metrics: &Metrics, doc: &mut Report) -> Result<()> {
        doc.h1("TurboIndex: the insert buffer beside the B+tree's buffer pool (`turboindex`)");
        doc.text(format!(
            "The B+tree engine with its insert buffer on (`turboindex`) against the same engine with it off (`btree`): \
             {} records of 8-byte keys and 8-byte values bulk-loaded into {} leaves ({} pages), a memory budget of {:.1} MiB \
             for both (data = {:.2}× the budget; the baseline's pool has {} frames, TurboIndex's {} plus its insert buffer \
             while that is on), \
             4 KiB pages, O_DIRECT, durability `never`, one thread, reuse threshold 2, L quota 90% of the pool's frames. \
             Each workload runs on both stores in alternating chunks after a warm-up. Reproduce with \
             `cargo run --release -- repro turboindex --out docs/results`.",
            r.records,
            r.leaf_pages,
            r.tree_pages,
            r.budget_bytes as f64 / (1 << 20) as f64,
            (r.tree_pages * PAGE_COST) as f64 / r.budget_bytes as f64,
            r.pool_frames_baseline,
            r.pool_frames_turbo,
        ));
        let mut t = Table::new([
            "workload",
            "btree kops/s",
            "turboindex kops/s",
            "speedup",
            "pool hit ratio (btree, turbo)",
            "leaf accesses in pool (btree, turbo)",
            "device KiB read / op (btree, turbo)",
            "device KiB written / op (btree, turbo)",
            "insert buffer % of budget",
            "turbo pool frames at end (gate switches)",
        ]);
        let mut diff = Table::new(["workload", "difference", "per-chunk mean ± 2 SE"]);
        for w in WORKLOADS {
            let Some((b, tu)) = r.runs.get(w) else {
                continue;
            };
            t.row([
                w.to_string(),
                format!("{:.1}", b.ops_per_sec() / 1e3),
                format!("{:.1}", tu.ops_per_sec() / 1e3),
                format!("{:.2}×", metrics.value(&format!("speedup_{w}"))),
                format!("{:.3}, {:.3}", b.hit_ratio, tu.hit_ratio),
                format!("{:.3}, {:.3}", b.leaf_access_ratio, tu.leaf_access_ratio),
                format!(
                    "{:.2}, {:.2}",
                    b.read_bytes_per_op / 1024.0,
                    tu.read_bytes_per_op / 1024.0
                ),
                format!(
                    "{:.2}, {:.2}",
                    b.write_bytes_per_op / 1024.0,
                    tu.write_bytes_per_op / 1024.0
                ),
                format!("{:.1}%", tu.buffer_share * 100.0),
                format!("{} ({})", tu.pool_frames_end, tu.gate_switches),
            ]);
            let (mean, se) = chunk_difference(b, tu);
            diff.row([
                w.to_string(),
                format!("{:+.4}", tu.hit_ratio - b.hit_ratio),
                format!("{mean:+.4} ± {:.4}", 2.0 * se),
            ]);
        }
        doc.table(&t);
        doc.text(
            "Hit-ratio difference (TurboIndex minus btree) per workload, over the measured phase and as the \
             mean of the per-chunk differences with two standard errors (the chunks are measured side by side, \
             so this is the noise of the comparison):",
        );
        doc.table(&diff);
        let mut files = Table::new([
            "workload",
            "file",
            "KiB read / op (btree, turbo)",
            "KiB written / op (btree, turbo)",
        ]);
        let mut evictions = Table::new([
            "workload",
            "dirty pages spilled / op (btree, turbo)",
            "pages checkpoints installed / op (btree, turbo)",
        ]);
        for w in WORKLOADS {
            let Some((b, tu)) = r.runs.get(w) else {
                continue;
            };
            for ((name, br, bw), (_, tr, tw)) in b.files.iter().zip(&tu.files) {
                if br + bw + tr + tw == 0.0 {
                    continue;
                }
                files.row([
                    w.to_string(),
                    name.clone(),
                    format!("{:.3}, {:.3}", br / 1024.0, tr / 1024.0),
                    format!("{:.3}, {:.3}", bw / 1024.0, tw / 1024.0),
                ]);
            }
            evictions.row([
                w.to_string(),
                format!("{:.4}, {:.4}", b.spills_per_op, tu.spills_per_op),
                format!(
                    "{:.4}, {:.4}",
                    b.checkpoint_pages_per_op, tu.checkpoint_pages_per_op
                ),
            ]);
        }
        if !files.is_empty() {
            doc.text("Device bytes per operation by file of the store (files with no I/O in either store left out):");
            doc.table(&files);
            doc.table(&evictions);
        }
        let groups: Vec<String> = WORKLOADS.iter().map(|w| w.to_string()).collect();
        let series = |f: &dyn Fn(&VariantRun) -> f64| -> Vec<(String, Vec<Option<f64>>)> {
            ["btree", "turboindex"]
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    let vals = WORKLOADS
                        .iter()
                        .map(|w| r.runs.get(*w).map(|(b, t)| f(if i == 0 { b } else { t })))
                        .collect();
                    (name.to_string(), vals)
                })
                .collect()
        };
        let path = doc.figure("throughput.svg", "throughput");
        report::plot_grouped_bars(
            "TurboIndex against the B+-tree it extends, same byte budget: throughput per workload (paper Figures 3 and 7)",
            "throughput (kops/s, log scale)",
            &groups,
            &series(&|v| v.ops_per_sec() / 1e3),
            true,
            &path,
        )?;
        let path = doc.figure("hit-ratio.svg", "hit ratio");
        report::plot_grouped_bars(
            "TurboIndex against the B+-tree: buffer-pool hit ratio per workload (paper Figure 6)",
            "hit ratio (fraction of leaf requests)",
            &groups,
            &series(&|v| v.hit_ratio),
            false,
            &path,
        )?;
        doc.h2("Timelines (paper Figures 4 and 5)");
        doc.text("Throughput and hit ratio per chunk of the measured phase.");
        for w in ["lru_anomaly1", "lru_anomaly2", "workload3"] {
            let Some((b, t)) = r.runs.get(w) else {
                continue;
            };
            let lines = |f: &dyn Fn(&(f64, f64, f64)) -> f64| {
                vec![
                    (
                        "btree".to_string(),
                        b.timeline.iter().map(f).collect::<Vec<_>>(),
                    ),
                    ("turboindex".to_string(), t.timeline.iter().map(f).collect()),
                ]
            };
            let path = doc.figure(&format!("{w}-throughput.svg"), &format!("{w} throughput"));
            report::plot_lines(
                &format!("{w}: throughput per chunk, TurboIndex against the B+-tree"),
                "chunk of the measured phase",
                "throughput (kops/s)",
                &lines(&|p| p.1 / 1e3),
                &path,
            )?;
            let path = doc.figure(&format!("{w}-hit-ratio.svg"), &format!("{w} hit ratio"));
            report::plot_lines(
                &format!("{w}: buffer-pool hit ratio per chunk, TurboIndex against the B+-tree"),
                "chunk of the measured phase",
                "hit ratio (fraction of leaf requests)",
                &lines(&|p| p.2),
                &path,
            )?;
        }
        doc.text(
        "## How to read this\n\n\
         - Both variants are the same engine, the same data and the same byte budget: TurboIndex's pool is \
         smaller by its insert buffer's share (5%) while the buffer is on; the gains come from the writes it \
         never loads a page for.\n\
         - The insert buffer is adaptive (the default): at the end of each window of operations (two per \
         pool frame) a gate weighs the reads its buffered writes saved (write misses less the pages it \
         loaded) against the lookup misses its frames cost (lookups × its frames ÷ the tree's pages, as \
         under uniform access). Where the cost is larger it applies its records, frees its memory and lends \
         it to the pool, which then has the baseline's frames; it comes back when writes make it pay 1.5× \
         its cost (estimated from the share of write misses that saved a read when last on). The last \
         column gives TurboIndex's pool frames at the end of each workload and the gate's switches during \
         it (warm-up included).\n\
         - *Pool hit ratio* counts the leaf requests that reached the buffer pool: a write the insert buffer \
         absorbed is not a request, every page it loads to apply records is a miss. *Leaf accesses in pool* \
         counts every write and lookup, a buffered write as a miss.\n\
         - The engine steals: a dirty page leaving the pool is written to a spill file and read back from \
         there, and checkpoints (every 64 MiB of WAL or when the spill file holds four pool-fulls) install \
         spilled and dirty pages together. Device bytes per operation include the WAL, the spill file, \
         the double-write file and the checkpoints.\n\
         - Reuse threshold 2: a page is due for loading (with all its buffered records) on the write miss \
         that brings its reuse score to 2, counted over misses inside the DB-buffer locality since it last \
         entered the pool; write hits are logged and replayed into the stack at the next miss, and move pages \
         without scoring. Due pages are read eight at a time in one batch of overlapping reads. Under memory \
         pressure the coldest pages' records are applied in page order, their pages read eight at a time the \
         same way, and those pages (unless L) leave the pool at once.\n\
         - Batching changes no byte counts (the device bytes per operation are those of loading each page \
         alone); it overlaps the reads. The baseline cannot batch: a write miss must read its page before \
         the write returns.\n\
         - With uniform lookups every policy hits in proportion to the frames it has, so in YCSB-B a buffer \
         that stayed on would lose hit ratio by its share; off, TurboIndex is the baseline engine with the \
         same frames, and the two hit ratios differ only by which pages each pool happens to hold.\n",
    );
        Ok(())
    }
}

/// Mean and standard error of the per-chunk hit-ratio differences.
fn chunk_difference(base: &VariantRun, turbo: &VariantRun) -> (f64, f64) {
    let d: Vec<f64> = base
        .timeline
        .iter()
        .zip(&turbo.timeline)
        .map(|(b, t)| t.2 - b.2)
        .collect();
    let n = d.len() as f64;
    if d.len() < 2 {
        return (d.first().copied().unwrap_or(0.0), 0.0);
    }
    let mean = d.iter().sum::<f64>() / n;
    let var = d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, (var / n).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_follow_their_definitions() {
        let n = 10_000;
        let mut s = Stream::new("lru_anomaly2", n, 100, 1);
        let first: Vec<u64> = (0..4).map(|_| s.next().1).collect();
        assert_eq!(first, vec![0, 100, 200, 300], "one write per leaf in turn");
        let mut s = Stream::new("lru_anomaly1", n, 100, 1);
        let hot = n * 45 / 100;
        let hot_phase = 8 * hot / 100;
        let keys: Vec<u64> = (0..hot_phase + 55).map(|_| s.next().1).collect();
        assert!(keys[..hot_phase as usize].iter().all(|&k| k < hot));
        let sweep: Vec<u64> = keys[hot_phase as usize..].to_vec();
        assert_eq!(
            sweep[..3],
            [hot, hot + 100, hot + 200],
            "a sweep, leaf by leaf"
        );
        let mut s = Stream::new("workload3", n, 100, 1);
        let in_a = (0..10_000).filter(|_| s.next().1 < n / 3).count();
        assert!((7_500..8_500).contains(&in_a), "{in_a}");
        let mut s = Stream::new("ycsb_b", n, 100, 1);
        let reads = (0..10_000).filter(|_| s.next().0).count();
        assert!((9_300..9_700).contains(&reads), "{reads}");
    }

    #[test]
    fn chunk_differences_have_a_mean_and_a_standard_error() {
        let run = |ratios: &[f64]| VariantRun {
            timeline: ratios.iter().map(|&h| (0.0, 0.0, h)).collect(),
            ..VariantRun::default()
        };
        let (mean, se) = chunk_difference(&run(&[0.5, 0.5, 0.5, 0.5]), &run(&[0.6, 0.4, 0.6, 0.4]));
        assert!(mean.abs() < 1e-12);
        // Differences ±0.1: sample variance 0.04/3, over four chunks.
        assert!((se - (0.04f64 / 3.0 / 4.0).sqrt()).abs() < 1e-12, "{se}");
        assert_eq!(chunk_difference(&run(&[0.5]), &run(&[0.7])).1, 0.0);
    }
}
