//! `baselines`: the peers every ferrite engine is measured against.
//!
//! YCSB A, B, C, F, D, E (in that order, on one load) for every baseline in
//! the build, on 8-byte keys with 8-byte values and on YCSB string keys with
//! 100-byte values, cache = 10% of the data, durability `never` (synced
//! only at `sync`), O_DIRECT where the store supports it, one client thread.

use std::fmt::Write;

use ferrite::SyncMode;
use serde_json::json;

use super::{ClaimSpec, Experiment, Outcome, ReproContext, Scale};
use crate::adapter::Target;
use crate::error::{BenchError, Result};
use crate::keyset::{KeySpec, ValueSpec};
use crate::plan::{BenchPlan, CacheBudget};
use crate::report::{self, BenchReport};
use crate::workload::{OpKind, Workload};

pub struct Baselines;

/// The two data shapes, as they name files and metrics.
const LABELS: [&str; 2] = ["u64-8", "ycsb-100"];

/// Writes `baselines.md` and the plots under `out` from measured reports.
fn render(reports: &[(&str, BenchReport)], out: &std::path::Path) -> Result<()> {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Baselines\n\nThe peers every ferrite engine is measured against: YCSB A, B, C, F, D, E \\
         (standard mixes and distributions, run in that order on one load) on two data shapes, \\
         cache = 10% of the data for every store, durability `never` for every store (data is \\
         synced only by an explicit sync), one client thread. Reproduce with \\
         `cargo run --release --features rocksdb -- repro baselines --out docs/results` \\
         (without `--features rocksdb` RocksDB is left out).\n"
    );
    let base = out.join("baselines");
    for (label, r) in reports {
        md.push_str(&report::to_markdown(
            r,
            &format!("{label}: keys {}, values {}", r.setup.keys, r.setup.values),
        ));
        report::plot_throughput(
            r,
            &format!("YCSB throughput, {label}"),
            &base.join(format!("{label}-throughput.svg")),
        )?;
        report::plot_latency_cdf(
            r,
            "C",
            OpKind::Read,
            &base.join(format!("{label}-cdf-C-read.svg")),
        )?;
        report::plot_latency_cdf(
            r,
            "A",
            OpKind::Update,
            &base.join(format!("{label}-cdf-A-update.svg")),
        )?;
        report::plot_timeline(r, "A", &base.join(format!("{label}-timeline-A.svg")))?;
        let _ = writeln!(
            md,
            "\n![throughput](baselines/{label}-throughput.svg)\n![read latency CDF, C](baselines/{label}-cdf-C-read.svg)\n\\
             ![update latency CDF, A](baselines/{label}-cdf-A-update.svg)\n![timeline, A](baselines/{label}-timeline-A.svg)\n"
        );
    }
    md.push_str(UNFAIRNESS);
    report::write_file(&out.join("baselines.md"), &md)
}

struct Sizes {
    records: u64,
    ops: u64,
    warmup: u64,
    repeats: usize,
}

fn sizes(scale: Scale) -> Sizes {
    match scale {
        Scale::Smoke => Sizes {
            records: 5_000,
            ops: 2_000,
            warmup: 500,
            repeats: 1,
        },
        Scale::Default => Sizes {
            records: 1_000_000,
            ops: 100_000,
            warmup: 20_000,
            repeats: 3,
        },
        Scale::Full => Sizes {
            records: 10_000_000,
            ops: 1_000_000,
            warmup: 100_000,
            repeats: 3,
        },
    }
}

impl Experiment for Baselines {
    fn name(&self) -> &'static str {
        "baselines"
    }

    fn summary(&self) -> &'static str {
        "YCSB A-F for RocksDB, LMDB, redb, fjall and BTreeMap: 8 B keys/8 B values and YCSB keys/100 B values, cache 10% of data"
    }

    fn claims(&self) -> Vec<ClaimSpec> {
        Vec::new()
    }

    fn rerender(&self, ctx: &ReproContext) -> Result<bool> {
        let Some(out) = &ctx.out_dir else {
            return Ok(false);
        };
        let mut reports = Vec::new();
        for label in LABELS {
            let path = out.join("baselines").join(format!("{label}.json"));
            let text = std::fs::read_to_string(&path).map_err(|e| BenchError::Data {
                path: path.clone(),
                reason: e.to_string(),
            })?;
            reports.push((label, BenchReport::from_json(&text)?));
        }
        render(&reports, out)?;
        Ok(true)
    }

    fn run(&self, ctx: &ReproContext) -> Result<Outcome> {
        let s = sizes(ctx.scale);
        let targets: Vec<Target> = Target::BASELINES
            .into_iter()
            .filter(Target::available)
            .collect();
        let workloads: Vec<Workload> = "ABCFDE".chars().filter_map(Workload::ycsb).collect();
        let configs = [
            ("u64-8", KeySpec::UniformU64, ValueSpec::Fixed { bytes: 8 }),
            (
                "ycsb-100",
                KeySpec::YcsbString,
                ValueSpec::Fixed { bytes: 100 },
            ),
        ];
        let mut metrics = std::collections::BTreeMap::new();
        let mut reports = Vec::new();
        for (label, keys, values) in configs {
            let plan = BenchPlan {
                settle: false,
                warm_scan: false,
                targets: targets.clone(),
                keys,
                values,
                records: s.records,
                workloads: workloads.clone(),
                ops: s.ops,
                duration: None,
                warmup_ops: s.warmup,
                threads: 1,
                repeats: s.repeats,
                cache: CacheBudget::RatioOfData(0.10),
                sync: SyncMode::Never,
                direct_io: true,
                dir: ctx.work_dir.clone(),
                seed: 42,
                show_progress: ctx.show_progress,
                bulk_load: false,
            };
            let r = plan.execute()?;
            for row in &r.results {
                metrics.insert(
                    format!("{label}_{}_{}_kops", row.workload, row.store),
                    row.ops_per_sec / 1000.0,
                );
                let main = [OpKind::Read, OpKind::Scan]
                    .into_iter()
                    .find_map(|k| row.latency_of(k));
                if let Some(l) = main {
                    metrics.insert(
                        format!("{label}_{}_{}_p99_us", row.workload, row.store),
                        l.p99_us,
                    );
                }
            }
            if let Some(out) = &ctx.out_dir {
                r.write_json(&out.join("baselines").join(format!("{label}.json")))?;
            }
            reports.push((label, r));
        }
        if let Some(out) = &ctx.out_dir {
            render(&reports, out)?;
        }
        let first: Option<&BenchReport> = reports.first().map(|(_, r)| r);
        Ok(Outcome {
            params: json!({
                "records": s.records,
                "ops_per_run": s.ops,
                "warmup_ops": s.warmup,
                "repeats": s.repeats,
                "threads": 1,
                "cache": "10% of data",
                "sync": "never",
                "stores": targets.iter().map(Target::name).collect::<Vec<_>>(),
                "device": first.map(|r| r.setup.device.clone()),
            }),
            metrics,
        })
    }
}

const UNFAIRNESS: &str = "\n## Known unfairnesses\n\n\
- **LMDB** reads through a memory map and has no cache of its own: the 10% budget does not bind it, \
  and the OS page cache holds as much of the data as free RAM allows (here, all of it). It cannot use O_DIRECT.\n\
- **redb** and **fjall** honour the budget for their own caches but read through the OS page cache, \
  so blocks they evict are usually still in RAM. Only **RocksDB** (with `use_direct_reads`) is held to the budget \
  for reads; its memtables (64 MiB) are outside the budget.\n\
- **BTreeMap** is the in-memory ceiling: all data in RAM, no durability.\n\
- Device bytes per operation come from `/proc/self/io` for every baseline (storage traffic of the \
  process, including background flushes and compactions that fall into a run); reads served by the \
  page cache count zero.\n";
