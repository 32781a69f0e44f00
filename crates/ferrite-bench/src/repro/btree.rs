//! `btree`: the disk B+tree engine against RocksDB and LMDB.
//!
//! Four measurements, all side by side with the same data, budgets and
//! durability (`never`; synced at the end of loads):
//! 1. in cache (budget = 4× the data, enough for the whole tree): YCSB C
//!    and A on 8 B/8 B and YCSB-key/100 B records, loaded in random order;
//! 2. cache = 10% of the data, uniform YCSB C, stores bulk-loaded in key
//!    order; device reads per lookup against the tree levels that do not
//!    fit in the pool (from the engine's per-level page counts);
//! 3. loading 10M records: in key order through each store's bulk loader
//!    (RocksDB: ordered write batches, its fill-sequential), and in random
//!    order with batches of 1000 (fill-random) at the in-cache budget;
//! 4. a random-order load at the 10% budget, where a B+tree without an
//!    insert buffer pays a leaf read and write per insert.
//!
//! Ratios are ferrite over peer; claims take the worst data shape.

use std::time::Instant;

use ferrite::SyncMode;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::driver::{side_by_side, store_err, Metrics, Report, RunSizes, Study, Table};
use super::ReproContext;
use crate::adapter::{self, StoreConfig, Target};
use crate::error::Result;
use crate::keyset::{KeySet, KeySpec, ValueSpec};
use crate::process;
use crate::report::{self, BenchReport};
use crate::runner::{self, Dataset, LoadSpec};
use crate::workload::{OpKind, Workload};

pub struct BtreeRepro;

/// Where the claims come from: the engine's own targets, not a paper.
const ENGINE_TARGET: &str = "engine target (LeanStore-class B+tree)";

sizes! {
    struct Sizes {
        run: RunSizes = (
            RunSizes { records: 5_000, ops: 2_000, warmup: 500, repeats: 1 },
            RunSizes { records: 1_000_000, ops: 200_000, warmup: 50_000, repeats: 3 },
            RunSizes { records: 10_000_000, ops: 1_000_000, warmup: 200_000, repeats: 3 },
        ),
        load_records: u64 = (20_000, 10_000_000, 10_000_000),
        cache10_random_records: u64 = (5_000, 1_000_000, 10_000_000),
    }
}

/// A data shape: its label, how its keys are made, its values.
type Shape = (&'static str, fn() -> KeySpec, ValueSpec);

const SHAPES: [Shape; 2] = [
    (
        "u64-8",
        || KeySpec::UniformU64,
        ValueSpec::Fixed { bytes: 8 },
    ),
    (
        "ycsb-100",
        || KeySpec::YcsbString,
        ValueSpec::Fixed { bytes: 100 },
    ),
];

/// One store's load.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct LoadRow {
    kind: String,
    records: u64,
    cache_bytes: u64,
    store: String,
    secs: f64,
    records_per_sec: f64,
    disk_bytes: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Results {
    sizes: Sizes,
    peers: Vec<String>,
    /// `incache-<shape>` and `cache10-<shape>` comparisons.
    reports: Vec<(String, BenchReport)>,
    loads: Vec<LoadRow>,
    /// The B+tree's memory growth over its budget during random loads,
    /// as a fraction of the budget (largest over the loads).
    max_memory_over_budget: Option<f64>,
}

fn ratio(r: &BenchReport, a: &str, b: &str, w: &str) -> Option<f64> {
    Some(r.row(a, w)?.ops_per_sec / r.row(b, w)?.ops_per_sec)
}

/// Live heap bytes, with the peak restarted from here, if the counting
/// allocator is installed.
fn heap_live_reset_peak() -> Option<u64> {
    let n = crate::counting_alloc::live_bytes()?;
    crate::counting_alloc::reset_peak();
    Some(n)
}

/// The peak of live heap bytes since [`heap_live_reset_peak`], if counted.
fn heap_peak() -> Option<u64> {
    crate::counting_alloc::peak_bytes()
}

/// Loads of 8-byte records, one store at a time: sequential through the
/// bulk loaders, random in batches of 1000 in cache and at a 10% budget.
fn loads(ctx: &ReproContext, s: &Sizes, targets: &[Target]) -> Result<(Vec<LoadRow>, Option<f64>)> {
    let btree = Target::Ferrite(ferrite::EngineKind::Btree);
    let mut rows = Vec::new();
    let mut peak_over: Option<f64> = None;
    for (kind, records, cache_ratio, bulk) in [
        ("sequential (bulk)", s.load_records, 0.10, true),
        ("random, in cache", s.load_records, 4.0, false),
        ("random, cache 10%", s.cache10_random_records, 0.10, false),
    ] {
        let spec = if bulk {
            KeySpec::Sequential
        } else {
            KeySpec::UniformU64
        };
        let keys = KeySet::new(spec, 7)?;
        let values = ValueSpec::Fixed { bytes: 8 };
        let cache_bytes = (((records * 16) as f64 * cache_ratio) as u64).max(64 << 10);
        for &t in targets.iter().filter(|t| **t != Target::Lmdb) {
            let dir = ctx
                .work_dir
                .join(format!("load-{}-{}", t.name(), std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            let rss_before = process::rss_bytes();
            // With the counting allocator installed, the peak of live
            // heap bytes over the load: RSS cannot see memory that an
            // earlier store freed and this one reuses.
            let heap_before = heap_live_reset_peak();
            let cfg = StoreConfig {
                cache_bytes,
                sync: SyncMode::Never,
                direct_io: true,
                compression: ctx.compression,
            };
            let (db, _) = adapter::open(t, &dir, &cfg)?;
            let data = Dataset {
                keys: &keys,
                values: &values,
            };
            let started = Instant::now();
            let l = if bulk {
                runner::bulk_load(db.as_ref(), data, records, 7)?
            } else {
                let spec = LoadSpec {
                    records,
                    threads: 1,
                    batch: 1000,
                    seed: 7,
                };
                runner::load(db.as_ref(), data, spec, &|_| {})?
            };
            db.sync().map_err(store_err(&t.name()))?;
            let secs = started.elapsed().as_secs_f64();
            crate::user_data::declare(&dir, db.stats().user_bytes_written);
            // Memory growth over the budget, on random-order loads only:
            // the bulk path holds the harness's sorted input in memory.
            if t == btree && !bulk {
                let grew = match (heap_before, heap_peak()) {
                    (Some(before), Some(peak)) => peak.saturating_sub(before),
                    _ => process::rss_bytes().saturating_sub(rss_before),
                } as f64;
                let over = grew / cache_bytes as f64 - 1.0;
                peak_over = Some(peak_over.map_or(over, |p| p.max(over)));
            }
            rows.push(LoadRow {
                kind: kind.to_string(),
                records,
                cache_bytes,
                store: t.name(),
                secs,
                records_per_sec: l.records as f64 / secs,
                disk_bytes: process::disk_bytes(&dir),
            });
            drop(db);
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    Ok((rows, peak_over))
}

claims! {
    struct Claims {
        ycsb_c_vs_rocksdb_incache >= 1.0, ENGINE_TARGET;
        ycsb_c_vs_lmdb_incache >= 1.0, ENGINE_TARGET;
        ycsb_b_vs_lmdb_incache >= 1.0, ENGINE_TARGET;
        ycsb_a_vs_rocksdb_incache >= 1.0, ENGINE_TARGET;
        ycsb_c_vs_rocksdb_cache10 >= 1.0, ENGINE_TARGET;
        reads_per_lookup_excess_cache10 <= 0.1, ENGINE_TARGET;
        bulkload_vs_rocksdb >= 1.5, ENGINE_TARGET;
        randload_vs_rocksdb >= 0.7, ENGINE_TARGET;
        max_memory_over_budget <= 0.1, ENGINE_TARGET;
    }
}

impl Study for BtreeRepro {
    type Results = Results;
    type Claims = Claims;

    const NAME: &'static str = "btree";

    const SUMMARY: &'static str = "the disk B+tree vs RocksDB and LMDB: in-cache and 10%-cache YCSB, bulk and random loads, memory";

    type Sizes = Sizes;

    fn measure(&self, ctx: &ReproContext, s: Sizes) -> Result<Results> {
        let btree = Target::Ferrite(ferrite::EngineKind::Btree);
        let peers: Vec<Target> = [Target::RocksDb, Target::Lmdb]
            .into_iter()
            .filter(Target::available)
            .collect();
        let mut targets = vec![btree];
        targets.extend(peers.iter().copied());
        let mut reports = Vec::new();
        // 1. In cache.
        for (label, keys, values) in SHAPES {
            let w: Vec<Workload> = "CBA".chars().filter_map(Workload::ycsb).collect();
            let plan = side_by_side(
                ctx,
                &s.run,
                targets.clone(),
                keys(),
                values,
                w,
                4.0,
                false,
                7,
            );
            reports.push((format!("incache-{label}"), plan.execute()?));
        }
        // 2. Cache = 10%, uniform reads, stores bulk-loaded in key order.
        for (label, keys, values) in SHAPES {
            let mut targets10 = vec![btree];
            targets10.extend(peers.iter().copied().filter(|t| *t == Target::RocksDb));
            let mut w = Workload::parse("read=1,dist=uniform")?;
            w.name = "C-uniform".into();
            let plan = side_by_side(
                ctx,
                &s.run,
                targets10,
                keys(),
                values,
                vec![w],
                0.10,
                true,
                7,
            );
            reports.push((format!("cache10-{label}"), plan.execute()?));
        }
        // 3 and 4. Loads, one store at a time.
        let (loads, max_memory_over_budget) = loads(ctx, &s, &targets)?;
        Ok(Results {
            sizes: s,
            peers: peers.iter().map(Target::name).collect(),
            reports,
            loads,
            max_memory_over_budget,
        })
    }

    fn params(&self, r: &Results) -> serde_json::Value {
        json!({
            "threads": 1,
            "in_cache_budget": "4x data",
            "small_budget": "10% of data",
            "sync": "never",
            "peers": r.peers,
        })
    }

    fn metrics(&self, r: &Results, c: &mut Claims) -> Metrics {
        let mut m = Metrics::new();
        let mut excess_worst: Option<f64> = None;
        for (name, b) in &r.reports {
            if let Some(label) = name.strip_prefix("incache-") {
                m.lowest(
                    &mut c.ycsb_c_vs_rocksdb_incache,
                    label,
                    ratio(b, "btree", "rocksdb", "C"),
                );
                m.lowest(
                    &mut c.ycsb_c_vs_lmdb_incache,
                    label,
                    ratio(b, "btree", "lmdb", "C"),
                );
                m.lowest(
                    &mut c.ycsb_b_vs_lmdb_incache,
                    label,
                    ratio(b, "btree", "lmdb", "B"),
                );
                m.lowest(
                    &mut c.ycsb_a_vs_rocksdb_incache,
                    label,
                    ratio(b, "btree", "rocksdb", "A"),
                );
            } else if let Some(label) = name.strip_prefix("cache10-") {
                let w = "C-uniform";
                m.lowest(
                    &mut c.ycsb_c_vs_rocksdb_cache10,
                    label,
                    ratio(b, "btree", "rocksdb", w),
                );
                let Some(row) = b.row("btree", w) else {
                    continue;
                };
                let reads = row.device_read_bytes_per_op / 4096.0;
                if let Some(tree) = &row.tree {
                    let uncached = tree.levels_not_cached() as f64;
                    let excess = reads - uncached;
                    m.set(format!("reads_per_lookup_cache10_{label}"), reads);
                    m.set(format!("levels_not_cached_cache10_{label}"), uncached);
                    m.set(format!("reads_per_lookup_excess_cache10_{label}"), excess);
                    excess_worst = Some(excess_worst.map_or(excess, |w| w.max(excess)));
                }
                m.set_some(
                    format!("tree_levels_{label}"),
                    row.tree.as_ref().map(|t| f64::from(t.height)),
                );
            }
        }
        c.reads_per_lookup_excess_cache10.set_some(excess_worst);
        let rate = |kind: &str, store: &str| {
            r.loads
                .iter()
                .find(|l| l.kind == kind && l.store == store)
                .map(|l| l.records_per_sec)
        };
        let load = |kind: &str| {
            let v = rate(kind, "btree").zip(rate(kind, "rocksdb"));
            v.map(|(a, b)| a / b)
        };
        c.bulkload_vs_rocksdb.set_some(load("sequential (bulk)"));
        c.randload_vs_rocksdb.set_some(load("random, in cache"));
        m.set_some("randload_vs_rocksdb_cache10", load("random, cache 10%"));
        c.max_memory_over_budget.set_some(r.max_memory_over_budget);
        m
    }

    fn render(&self, r: &Results, m: &Metrics, doc: &mut Report) -> Result<()> {
        doc.h1("The disk B+tree engine (`btree`)");
        doc.text(
            "The B+tree against RocksDB and LMDB through the same harness, same data, same \
             cache budget in bytes, durability `never` for every store, one client thread, O_DIRECT for the B+tree and RocksDB \
             (LMDB cannot; it is cached by the OS page cache, see [baselines](baselines.md)). Reproduce with \
             `cargo run --release --features rocksdb -- repro btree --out docs/results`.",
        );
        doc.h2("Loads");
        let mut t = Table::new([
            "load",
            "records",
            "cache budget",
            "store",
            "seconds",
            "kops/s",
            "on disk",
        ]);
        let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1 << 20) as f64);
        for l in &r.loads {
            t.row([
                l.kind.clone(),
                l.records.to_string(),
                mib(l.cache_bytes),
                l.store.clone(),
                format!("{:.1}", l.secs),
                format!("{:.1}", l.records_per_sec / 1000.0),
                mib(l.disk_bytes),
            ]);
        }
        doc.table(&t);
        doc.text(
            "A random load through a cache of a tenth of the data reads a leaf from the \
             device for nearly every insert, and writes changed pages home through the spill \
             file and checkpoints, where an LSM-tree only appends; [btree-small-pool](btree-small-pool.md) \
             measures how the spill allowance sets how often a page is written home. The on-disk \
             column includes the spill and double-write files.",
        );
        for (label, b) in &r.reports {
            doc.text(report::to_markdown(b, label));
            let path = doc.figure(&format!("{label}-throughput.svg"), "throughput");
            report::plot_throughput(b, &format!("throughput, {label}"), &path)?;
            let w = b.workloads().into_iter().next().unwrap_or_default();
            let path = doc.figure(&format!("{label}-cdf-read.svg"), "read latency");
            report::plot_latency_cdf(b, &w, OpKind::Read, &path)?;
        }
        doc.metrics(m);
        Ok(())
    }
}
