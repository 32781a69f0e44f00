//! `baselines`: the peers every ferrite engine is measured against.
//!
//! YCSB A, B, C, F, D, E (in that order, on one load) for every baseline in
//! the build, on 8-byte keys with 8-byte values and on YCSB string keys with
//! 100-byte values, cache = 10% of the data, durability `never` (synced
//! only at `sync`), O_DIRECT where the store supports it, one client thread.

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::driver::{side_by_side, Metrics, Report, RunSizes, Study};
use super::{NoClaims, ReproContext};
use crate::adapter::Target;
use crate::error::Result;
use crate::keyset::{KeySpec, ValueSpec};
use crate::report::{self, BenchReport};
use crate::workload::{OpKind, Workload};

pub struct Baselines;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Results {
    sizes: RunSizes,
    stores: Vec<String>,
    /// Per data shape: its label and the comparison's report.
    reports: Vec<(String, BenchReport)>,
}

sizes! {
    struct Sizes {
        run: RunSizes = (
            RunSizes { records: 5_000, ops: 2_000, warmup: 500, repeats: 1 },
            RunSizes { records: 1_000_000, ops: 100_000, warmup: 20_000, repeats: 3 },
            RunSizes { records: 10_000_000, ops: 1_000_000, warmup: 100_000, repeats: 3 },
        ),
    }
}

impl Study for Baselines {
    type Results = Results;
    type Claims = NoClaims;

    const NAME: &'static str = "baselines";

    const SUMMARY: &'static str = "YCSB A-F for RocksDB, LMDB, redb, fjall and BTreeMap: 8 B keys/8 B values and YCSB keys/100 B values, cache 10% of data";

    type Sizes = Sizes;

    fn measure(&self, ctx: &ReproContext, Sizes { run: s }: Sizes) -> Result<Results> {
        let targets: Vec<Target> = Target::BASELINES
            .into_iter()
            .filter(Target::available)
            .collect();
        let workloads: Vec<Workload> = "ABCFDE".chars().filter_map(Workload::ycsb).collect();
        let shapes = [
            ("u64-8", KeySpec::UniformU64, ValueSpec::Fixed { bytes: 8 }),
            (
                "ycsb-100",
                KeySpec::YcsbString,
                ValueSpec::Fixed { bytes: 100 },
            ),
        ];
        let mut reports = Vec::new();
        for (label, keys, values) in shapes {
            let plan = side_by_side(
                ctx,
                &s,
                targets.clone(),
                keys,
                values,
                workloads.clone(),
                0.10,
                false,
                42,
            );
            reports.push((label.to_string(), plan.execute()?));
        }
        Ok(Results {
            sizes: s,
            stores: targets.iter().map(Target::name).collect(),
            reports,
        })
    }

    fn params(&self, r: &Results) -> serde_json::Value {
        json!({
            "threads": 1,
            "cache": "10% of data",
            "sync": "never",
            "stores": r.stores,
            "device": r.reports.first().map(|(_, b)| b.setup.device.clone()),
        })
    }

    fn metrics(&self, r: &Results, _: &mut NoClaims) -> Metrics {
        let mut m = Metrics::new();
        for (label, b) in &r.reports {
            for row in &b.results {
                let name = format!("{label}_{}_{}", row.workload, row.store);
                m.set(format!("{name}_kops"), row.ops_per_sec / 1000.0);
                let main = [OpKind::Read, OpKind::Scan]
                    .into_iter()
                    .find_map(|k| row.latency_of(k));
                m.set_some(format!("{name}_p99_us"), main.map(|l| l.summary.p99_us));
            }
        }
        m
    }

    fn render(&self, r: &Results, _: &Metrics, doc: &mut Report) -> Result<()> {
        doc.h1("Baselines");
        doc.text(
            "The peers every ferrite engine is measured against: YCSB A, B, C, F, D, E \
             (standard mixes and distributions, run in that order on one load) on two data shapes, \
             cache = 10% of the data for every store, durability `never` for every store (data is \
             synced only by an explicit sync), one client thread. Reproduce with \
             `cargo run --release --features rocksdb -- repro baselines --out docs/results` \
             (without `--features rocksdb` RocksDB is left out).",
        );
        for (label, b) in &r.reports {
            doc.text(report::to_markdown(
                b,
                &format!("{label}: keys {}, values {}", b.setup.keys, b.setup.values),
            ));
            let path = doc.figure(&format!("{label}-throughput.svg"), "throughput");
            report::plot_throughput(b, &format!("YCSB throughput, {label}"), &path)?;
            let path = doc.figure(&format!("{label}-cdf-C-read.svg"), "read latency, C");
            report::plot_latency_cdf(b, "C", OpKind::Read, &path)?;
            let path = doc.figure(&format!("{label}-cdf-A-update.svg"), "update latency, A");
            report::plot_latency_cdf(b, "A", OpKind::Update, &path)?;
            let path = doc.figure(&format!("{label}-timeline-A.svg"), "timeline, A");
            report::plot_timeline(b, "A", &path)?;
        }
        doc.text(UNFAIRNESS);
        Ok(())
    }
}

const UNFAIRNESS: &str = "## Known unfairnesses\n\n\
- **LMDB** reads through a memory map and has no cache of its own: the 10% budget does not bind it, \
  and the OS page cache holds as much of the data as free RAM allows (here, all of it). It cannot use O_DIRECT.\n\
- **redb** and **fjall** honour the budget for their own caches but read through the OS page cache, \
  so blocks they evict are usually still in RAM. Only **RocksDB** (with `use_direct_reads`) is held to the budget \
  for reads; its memtables (64 MiB) are outside the budget.\n\
- **BTreeMap** is the in-memory ceiling: all data in RAM, no durability.\n\
- Device bytes per operation come from `/proc/self/io` for every baseline (storage traffic of the \
  process, including background flushes and compactions that fall into a run); reads served by the \
  page cache count zero.\n";
