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

use std::fmt::Write;
use std::time::Instant;

use ferrite::SyncMode;
use serde_json::json;

use super::{ClaimSpec, Experiment, Outcome, ReproContext, Scale};
use crate::adapter::{self, StoreConfig, Target};
use crate::error::Result;
use crate::keyset::{KeySet, KeySpec, ValueSpec};
use crate::plan::{BenchPlan, CacheBudget};
use crate::process;
use crate::report::{self, BenchReport};
use crate::runner::{self, Dataset, LoadSpec};
use crate::workload::Workload;

pub struct BtreeRepro;

struct Sizes {
    records: u64,
    load_records: u64,
    cache10_random_records: u64,
    ops: u64,
    warmup: u64,
    repeats: usize,
}

fn sizes(scale: Scale) -> Sizes {
    match scale {
        Scale::Smoke => Sizes {
            records: 5_000,
            load_records: 20_000,
            cache10_random_records: 5_000,
            ops: 2_000,
            warmup: 500,
            repeats: 1,
        },
        Scale::Default => Sizes {
            records: 1_000_000,
            load_records: 10_000_000,
            cache10_random_records: 1_000_000,
            ops: 200_000,
            warmup: 50_000,
            repeats: 3,
        },
        Scale::Full => Sizes {
            records: 10_000_000,
            load_records: 10_000_000,
            cache10_random_records: 10_000_000,
            ops: 1_000_000,
            warmup: 200_000,
            repeats: 3,
        },
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

/// Records a per-shape metric and keeps the worst (lowest) under the bare name.
fn worst(
    metrics: &mut std::collections::BTreeMap<String, f64>,
    name: &str,
    v: Option<f64>,
    label: &str,
) {
    if let Some(v) = v {
        metrics.insert(format!("{name}_{label}"), v);
        let e = metrics.entry(name.to_string()).or_insert(v);
        *e = e.min(v);
    }
}

fn ratio(r: &BenchReport, a: &str, b: &str, w: &str) -> Option<f64> {
    Some(r.row(a, w)?.ops_per_sec / r.row(b, w)?.ops_per_sec)
}

/// Tree levels (from the leaves up) that do not fit in the pool when the
/// pool caches from the root down.
fn levels_not_cached(row: &crate::report::ResultRow) -> Option<f64> {
    let frames = row.extra("pool_frames")?;
    let mut levels = Vec::new();
    while let Some(n) = row.extra(&format!("pages_level_{}", levels.len())) {
        levels.push(n);
    }
    let mut used = 0.0;
    let mut cached = 0;
    for n in levels.iter().rev() {
        used += n;
        if used > frames {
            break;
        }
        cached += 1;
    }
    Some((levels.len() - cached) as f64)
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

impl Experiment for BtreeRepro {
    fn name(&self) -> &'static str {
        "btree"
    }

    fn summary(&self) -> &'static str {
        "the disk B+tree vs RocksDB and LMDB: in-cache and 10%-cache YCSB, bulk and random loads, memory"
    }

    fn claims(&self) -> Vec<ClaimSpec> {
        let issue = "engine target (LeanStore-class B+tree)";
        vec![
            ClaimSpec {
                metric: "ycsb_c_vs_rocksdb_incache",
                paper: issue,
                target: ">= 1.0",
            },
            ClaimSpec {
                metric: "ycsb_c_vs_lmdb_incache",
                paper: issue,
                target: ">= 0.8",
            },
            ClaimSpec {
                metric: "ycsb_a_vs_rocksdb_incache",
                paper: issue,
                target: ">= 1.0",
            },
            ClaimSpec {
                metric: "ycsb_c_vs_rocksdb_cache10",
                paper: issue,
                target: ">= 1.0",
            },
            ClaimSpec {
                metric: "reads_per_lookup_excess_cache10",
                paper: issue,
                target: "<= 0.1",
            },
            ClaimSpec {
                metric: "bulkload_vs_rocksdb",
                paper: issue,
                target: ">= 1.5",
            },
            ClaimSpec {
                metric: "randload_vs_rocksdb",
                paper: issue,
                target: ">= 0.7",
            },
            ClaimSpec {
                metric: "max_memory_over_budget",
                paper: issue,
                target: "<= 0.1",
            },
        ]
    }

    fn run(&self, ctx: &ReproContext) -> Result<Outcome> {
        let s = sizes(ctx.scale);
        let btree = Target::Ferrite(ferrite::EngineKind::Btree);
        let peers: Vec<Target> = [Target::RocksDb, Target::Lmdb]
            .into_iter()
            .filter(Target::available)
            .collect();
        let mut targets = vec![btree];
        targets.extend(peers.iter().copied());
        let mut metrics = std::collections::BTreeMap::new();
        let mut md = String::new();
        let plan = |keys: KeySpec,
                    values: ValueSpec,
                    targets: Vec<Target>,
                    workloads: Vec<Workload>,
                    cache: f64,
                    bulk: bool| BenchPlan {
            settle: false,
            warm_scan: false,
            targets,
            keys,
            values,
            records: s.records,
            workloads,
            ops: s.ops,
            duration: None,
            warmup_ops: s.warmup,
            threads: 1,
            repeats: s.repeats,
            cache: CacheBudget::RatioOfData(cache),
            sync: SyncMode::Never,
            direct_io: true,
            dir: ctx.work_dir.clone(),
            seed: 7,
            show_progress: ctx.show_progress,
            bulk_load: bulk,
        };
        let mut reports = Vec::new();
        // 1. In cache.
        for (label, keys, values) in SHAPES {
            let w: Vec<Workload> = "CA".chars().filter_map(Workload::ycsb).collect();
            let r = plan(keys(), values, targets.clone(), w, 4.0, false).execute()?;
            worst(
                &mut metrics,
                "ycsb_c_vs_rocksdb_incache",
                ratio(&r, "btree", "rocksdb", "C"),
                label,
            );
            worst(
                &mut metrics,
                "ycsb_c_vs_lmdb_incache",
                ratio(&r, "btree", "lmdb", "C"),
                label,
            );
            worst(
                &mut metrics,
                "ycsb_a_vs_rocksdb_incache",
                ratio(&r, "btree", "rocksdb", "A"),
                label,
            );
            reports.push((format!("incache-{label}"), r));
        }
        // 2. Cache = 10%, uniform reads.
        let mut excess_worst: Option<f64> = None;
        for (label, keys, values) in SHAPES {
            let mut targets10 = vec![btree];
            targets10.extend(peers.iter().copied().filter(|t| *t == Target::RocksDb));
            let mut w = Workload::parse("read=1,dist=uniform")?;
            w.name = "C-uniform".into();
            let r = plan(keys(), values, targets10, vec![w], 0.10, true).execute()?;
            worst(
                &mut metrics,
                "ycsb_c_vs_rocksdb_cache10",
                ratio(&r, "btree", "rocksdb", "C-uniform"),
                label,
            );
            if let Some(row) = r.row("btree", "C-uniform") {
                let reads = row.device_read_bytes_per_op / 4096.0;
                if let Some(uncached) = levels_not_cached(row) {
                    let excess = reads - uncached;
                    metrics.insert(format!("reads_per_lookup_cache10_{label}"), reads);
                    metrics.insert(format!("levels_not_cached_cache10_{label}"), uncached);
                    metrics.insert(format!("reads_per_lookup_excess_cache10_{label}"), excess);
                    excess_worst = Some(excess_worst.map_or(excess, |w: f64| w.max(excess)));
                }
                if let Some(h) = row.extra("height") {
                    metrics.insert(format!("tree_levels_{label}"), h);
                }
            }
            reports.push((format!("cache10-{label}"), r));
        }
        if let Some(e) = excess_worst {
            metrics.insert("reads_per_lookup_excess_cache10".into(), e);
        }
        // 3 and 4. Loads, one store at a time, sequential then random.
        let mut load_rows = Vec::new();
        let data_bytes = |records: u64| records * 16;
        let mut peak_over = f64::MIN;
        for (kind, records, cache_ratio, bulk) in [
            ("sequential (bulk)", s.load_records, 0.10, true),
            ("random, in cache", s.load_records, 4.0, false),
            ("random, cache 10%", s.cache10_random_records, 0.10, false),
        ] {
            let keys = KeySet::new(
                if bulk {
                    KeySpec::Sequential
                } else {
                    KeySpec::UniformU64
                },
                7,
            )?;
            let values = ValueSpec::Fixed { bytes: 8 };
            let cache_bytes = (((data_bytes(records) as f64) * cache_ratio) as u64).max(64 << 10);
            let mut rates = std::collections::BTreeMap::new();
            for &t in &targets {
                if t == Target::Lmdb {
                    continue;
                }
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
                    runner::load(
                        db.as_ref(),
                        data,
                        LoadSpec {
                            records,
                            threads: 1,
                            batch: 1000,
                            seed: 7,
                        },
                        &|_| {},
                    )?
                };
                db.sync().map_err(|e| crate::error::BenchError::Store {
                    target: t.name(),
                    source: e,
                })?;
                let secs = started.elapsed().as_secs_f64();
                let rate = l.records as f64 / secs;
                // Memory growth over the budget, on random-order loads only:
                // the bulk path holds the harness's sorted input in memory.
                if t == btree && !bulk {
                    let grew = match (heap_before, heap_peak()) {
                        (Some(before), Some(peak)) => peak.saturating_sub(before),
                        _ => process::rss_bytes().saturating_sub(rss_before),
                    } as f64;
                    peak_over = peak_over.max(grew / cache_bytes as f64 - 1.0);
                }
                rates.insert(t.name(), rate);
                load_rows.push((
                    kind,
                    records,
                    cache_bytes,
                    t.name(),
                    secs,
                    rate,
                    process::disk_bytes(&dir),
                ));
                drop(db);
                let _ = std::fs::remove_dir_all(&dir);
            }
            let r = rates
                .get("btree")
                .zip(rates.get("rocksdb"))
                .map(|(a, b)| a / b);
            match kind {
                "sequential (bulk)" => r.map(|v| metrics.insert("bulkload_vs_rocksdb".into(), v)),
                "random, in cache" => r.map(|v| metrics.insert("randload_vs_rocksdb".into(), v)),
                _ => r.map(|v| metrics.insert("randload_vs_rocksdb_cache10".into(), v)),
            };
        }
        if peak_over > f64::MIN {
            metrics.insert("max_memory_over_budget".into(), peak_over);
        }
        // Report.
        let _ = writeln!(
            md,
            "# The disk B+tree engine (`btree`)\n\nThe B+tree against RocksDB and LMDB through the same harness, same data, same \
             cache budget in bytes, durability `never` for every store, one client thread, O_DIRECT for the B+tree and RocksDB \
             (LMDB cannot; it is cached by the OS page cache, see [baselines](baselines.md)). Reproduce with \
             `cargo run --release --features rocksdb -- repro btree --out docs/results`.\n"
        );
        let _ = writeln!(md, "## Loads\n\n| load | records | cache budget | store | seconds | kops/s | on disk |\n|---|---|---|---|---|---|---|");
        for (kind, records, cache, store, secs, rate, disk) in &load_rows {
            let _ = writeln!(
                md,
                "| {kind} | {records} | {:.1} MiB | {store} | {secs:.1} | {:.1} | {:.1} MiB |",
                *cache as f64 / (1 << 20) as f64,
                rate / 1000.0,
                *disk as f64 / (1 << 20) as f64
            );
        }
        md.push_str(
            "\nA random load through a cache of a tenth of the data reads a leaf from the \
             device for nearly every insert, and writes changed pages home through the spill \
             file and checkpoints, where an LSM-tree only appends; [btree-small-pool](btree-small-pool.md) \
             measures how the spill allowance sets how often a page is written home. The on-disk \
             column includes the spill and double-write files.\n\n",
        );
        for (label, r) in &reports {
            md.push_str(&report::to_markdown(r, label));
            if let Some(out) = &ctx.out_dir {
                let base = out.join("btree");
                r.write_json(&base.join(format!("{label}.json")))?;
                report::plot_throughput(
                    r,
                    &format!("throughput, {label}"),
                    &base.join(format!("{label}-throughput.svg")),
                )?;
                let w = r.workloads().into_iter().next().unwrap_or_default();
                report::plot_latency_cdf(
                    r,
                    &w,
                    crate::workload::OpKind::Read,
                    &base.join(format!("{label}-cdf-read.svg")),
                )?;
                let _ = writeln!(md, "\n![throughput](btree/{label}-throughput.svg)\n![read latency](btree/{label}-cdf-read.svg)\n");
            }
        }
        if let Some(out) = &ctx.out_dir {
            report::write_file(&out.join("btree.md"), &md)?;
        }
        Ok(Outcome {
            params: json!({
                "records": s.records,
                "load_records": s.load_records,
                "random_load_cache10_records": s.cache10_random_records,
                "ops_per_run": s.ops,
                "warmup_ops": s.warmup,
                "repeats": s.repeats,
                "threads": 1,
                "in_cache_budget": "4x data",
                "small_budget": "10% of data",
                "sync": "never",
                "peers": peers.iter().map(Target::name).collect::<Vec<_>>(),
            }),
            metrics,
        })
    }
}
