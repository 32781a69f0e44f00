//! `ferrite bench` (`ferrite-bench bench`): load then run workloads against several stores side by
//! side, with the same data, operations, cache budget and durability.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use ferrite::SyncMode;
use ferrite_bench::adapter::Target;
use ferrite_bench::keyset::{KeySpec, ValueSpec};
use ferrite_bench::plan::{BenchPlan, CacheBudget};
use ferrite_bench::report;
use ferrite_bench::workload::{OpKind, Workload};

#[derive(Args)]
pub struct BenchArgs {
    /// Stores to compare, comma separated: ferrite engines (btree, ...) and
    /// baselines rocksdb, lmdb, redb, fjall, btreemap.
    #[arg(long, default_value = "lmdb,redb,fjall,btreemap")]
    engine: String,
    /// Workloads in run order: YCSB letters (a-f) or custom mixes such as
    /// `read=0.9,insert=0.1,dist=uniform`, separated by `;`.
    #[arg(long, default_value = "a;b;c;f;d;e")]
    workloads: String,
    /// Key set: sequential, uniform, ycsb, geolite2, or sosd:<path>.
    #[arg(long, default_value = "uniform")]
    keys: String,
    /// Values: N or MIN-MAX random bytes; `records:PATH`, the blank-line
    /// separated records of a file (`scripts/debian-package-records.sh`);
    /// or `files:LIST`, each file a list names (one path per line).
    #[arg(long, default_value = "8")]
    values: String,
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    /// Measured operations per run.
    #[arg(long, default_value_t = 100_000)]
    ops: u64,
    /// Measure each run for this many seconds instead of counting --ops
    /// (faster stores then do more inserts in D and E).
    #[arg(long)]
    duration: Option<f64>,
    /// Unmeasured operations before the first run of each workload.
    #[arg(long, default_value_t = 10_000)]
    warmup: u64,
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Runs per store and workload, alternating stores; the median is reported.
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Cache budget per store in MiB (overrides --cache-ratio).
    #[arg(long)]
    cache_mb: Option<u64>,
    /// Cache budget per store as a fraction of the loaded data size.
    #[arg(long, default_value_t = 0.1)]
    cache_ratio: f64,
    /// Durability for every store: always, never or batched:<ms>.
    #[arg(long, default_value = "never")]
    sync: String,
    /// Do not ask stores for O_DIRECT.
    #[arg(long)]
    no_direct: bool,
    /// Where the stores are created (removed afterwards).
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// Where the shared real data lives (for --keys geolite2).
    #[arg(long, default_value = "../shared/data")]
    data_dir: PathBuf,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Write the report as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the report as Markdown.
    #[arg(long)]
    md: Option<PathBuf>,
    /// Write SVG plots (throughput, latency CDFs, timelines) into this directory.
    #[arg(long)]
    plots: Option<PathBuf>,
    /// Allow a debug build (its numbers are not comparable).
    #[arg(long)]
    allow_debug: bool,
    /// Load in key order through each store's bulk loader instead of
    /// random-order batches.
    #[arg(long)]
    bulk_load: bool,
    /// After loading, wait for every store's flushes and compactions to finish.
    #[arg(long)]
    settle: bool,
    /// After loading, read every record once in key order (warm caches).
    #[arg(long)]
    warm_scan: bool,
    /// Close each store after its load to measure its directory at rest
    /// (then reopen it), and again at the end.
    #[arg(long)]
    at_rest: bool,
    /// Table block compression for the stores that have it (ferrite's
    /// LSM, RocksDB, fjall): none, lz4, zstd or zstd:LEVEL. LMDB, redb and
    /// the B+trees store values as given.
    #[arg(long, default_value = "lz4")]
    compression: ferrite::lsm::Compression,
}

pub fn run(a: BenchArgs) -> Result<()> {
    if cfg!(debug_assertions) && !a.allow_debug {
        bail!("benchmarks need a release build: cargo run --release -- bench ...");
    }
    let targets = a
        .engine
        .split(',')
        .map(|t| Target::parse(t.trim()))
        .collect::<Result<Vec<_>, _>>()?;
    let workloads = a
        .workloads
        .split(';')
        .map(|w| Workload::parse(w.trim()))
        .collect::<Result<Vec<_>, _>>()?;
    let sync = SyncMode::parse(&a.sync)?;
    let plan = BenchPlan {
        targets,
        keys: KeySpec::parse(&a.keys, &a.data_dir)?,
        values: ValueSpec::parse(&a.values)?,
        records: a.records,
        workloads,
        ops: a.ops,
        duration: a.duration.map(std::time::Duration::from_secs_f64),
        warmup_ops: a.warmup,
        threads: a.threads,
        repeats: a.repeats,
        cache: match a.cache_mb {
            Some(mb) => CacheBudget::Bytes(mb << 20),
            None => CacheBudget::RatioOfData(a.cache_ratio),
        },
        sync,
        direct_io: !a.no_direct,
        compression: a.compression,
        dir: a.dir.clone(),
        seed: a.seed,
        show_progress: true,
        bulk_load: a.bulk_load,
        settle: a.settle,
        warm_scan: a.warm_scan,
        at_rest: a.at_rest,
    };
    let r = plan.execute().context("running the benchmark")?;
    report::print_console(&r);
    if let Some(p) = &a.json {
        r.write_json(p)?;
        println!("wrote {}", p.display());
    }
    if let Some(p) = &a.md {
        report::write_file(p, &report::to_markdown(&r, "ferrite bench"))?;
        println!("wrote {}", p.display());
    }
    if let Some(dir) = &a.plots {
        report::plot_throughput(&r, "throughput", &dir.join("throughput.svg"))?;
        for w in r.workloads() {
            for op in OpKind::ALL {
                if r.results
                    .iter()
                    .any(|x| x.workload == w && x.latency_of(op).is_some())
                {
                    report::plot_latency_cdf(
                        &r,
                        &w,
                        op,
                        &dir.join(format!("cdf-{w}-{}.svg", op.name())),
                    )?;
                }
            }
            report::plot_timeline(&r, &w, &dir.join(format!("timeline-{w}.svg")))?;
        }
        println!("wrote plots to {}", dir.display());
    }
    Ok(())
}
