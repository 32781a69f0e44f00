//! Benchmark reports: a stable JSON schema (`docs/format/bench-report.md`),
//! console tables, Markdown for `docs/results/`, and SVG plots.

mod console;
mod markdown;
mod plot;

pub use console::print_console;
pub use markdown::to_markdown;
pub use plot::{
    plot_grouped_bars, plot_latency_cdf, plot_lines, plot_percentiles, plot_throughput,
    plot_timeline, plot_xy,
};

use std::collections::BTreeMap;
use std::path::Path;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::adapter::TargetInfo;
use crate::error::{BenchError, Result};
use crate::provenance::Provenance;
use crate::runner::RunResult;
use crate::workload::OpKind;

/// Version tag of the JSON schema; bumped on any incompatible change.
pub const SCHEMA: &str = "ferrite-bench/1";

/// What was run, identical for every store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Setup {
    pub keys: String,
    pub values: String,
    pub records: u64,
    /// Records × (mean key + mean value) bytes.
    pub data_bytes: u64,
    /// Cache budget given to every store.
    pub cache_bytes: u64,
    pub threads: usize,
    /// Measured operations per run.
    pub ops: u64,
    pub warmup_ops: u64,
    pub repeats: usize,
    pub sync: String,
    pub direct_io: bool,
    pub seed: u64,
    /// File system and device holding the stores.
    pub device: String,
}

/// A footprint as (kind, bytes) pairs for reports, the kinds holding no
/// bytes left out.
pub fn footprint_parts(f: &ferrite::Footprint) -> Vec<(String, u64)> {
    f.parts()
        .filter(|&(_, b)| b > 0)
        .map(|(k, b)| (k.name().to_string(), b))
        .collect()
}

/// The load phase of one store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadRow {
    pub store: String,
    pub seconds: f64,
    pub ops_per_sec: f64,
    /// The store's directory after the load (and settle), still open.
    pub disk_bytes: u64,
    /// The most the directory held during the load, sampled.
    #[serde(default)]
    pub peak_disk_bytes: u64,
    /// The directory after the load with the store closed (`at_rest`).
    #[serde(default)]
    pub rest_disk_bytes: Option<u64>,
    /// Key and value bytes the load wrote, as the store counted them.
    #[serde(default)]
    pub user_bytes: u64,
    /// Device bytes written during the load (and settle), counted as the
    /// runs' device I/O is.
    #[serde(default)]
    pub device_write_bytes: u64,
    /// The store's bytes after the load by kind (`SpaceKind` names): a
    /// ferrite engine's own account, a baseline's files by name.
    #[serde(default)]
    pub footprint: Vec<(String, u64)>,
}

impl LoadRow {
    /// Device bytes written per user byte written.
    pub fn write_amplification(&self) -> Option<f64> {
        (self.user_bytes > 0).then(|| self.device_write_bytes as f64 / self.user_bytes as f64)
    }
}

/// The usual percentiles of a series of latencies, in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub count: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p95_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
}

impl LatencySummary {
    /// The summary of a histogram of nanoseconds.
    pub fn of(h: &Histogram<u64>) -> Self {
        let us = |q: f64| h.value_at_quantile(q) as f64 / 1e3;
        Self {
            count: h.len(),
            mean_us: h.mean() / 1e3,
            p50_us: us(0.5),
            p95_us: us(0.95),
            p99_us: us(0.99),
            p999_us: us(0.999),
        }
    }
}

/// Latency of one operation kind (microseconds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpLatency {
    pub op: OpKind,
    #[serde(flatten)]
    pub summary: LatencySummary,
    pub max_us: f64,
    /// (latency µs, fraction of operations at or below it), ascending.
    pub cdf: Vec<(f64, f64)>,
}

/// What of a B+tree's shape decides how many pages a lookup reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeShape {
    /// Levels, the leaves included.
    pub height: u32,
    /// Pages the buffer pool holds.
    pub pool_frames: u64,
    /// Pages on each level, the leaves first.
    pub pages_per_level: Vec<u64>,
}

impl TreeShape {
    pub fn of(s: &ferrite_btree::BTreeStats) -> Self {
        Self {
            height: s.height,
            pool_frames: s.pool_frames,
            pages_per_level: s.pages_per_level.clone(),
        }
    }

    /// Levels, from the leaves up, that do not fit in the pool when it
    /// caches the tree from the root down.
    pub fn levels_not_cached(&self) -> usize {
        let mut used = 0;
        let cached = self
            .pages_per_level
            .iter()
            .rev()
            .take_while(|&&n| {
                used += n;
                used <= self.pool_frames
            })
            .count();
        self.pages_per_level.len() - cached
    }
}

/// One store on one workload, over all repeats.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultRow {
    pub store: String,
    pub workload: String,
    /// Median over repeats.
    pub ops_per_sec: f64,
    pub ops_per_sec_runs: Vec<f64>,
    pub latency: Vec<OpLatency>,
    pub device_read_bytes_per_op: f64,
    pub device_write_bytes_per_op: f64,
    /// `engine` (the store's own device counters) or `process` (/proc/self/io).
    pub io_source: String,
    pub peak_rss_bytes: u64,
    pub engine_memory_bytes: u64,
    pub disk_bytes: u64,
    /// The most the store's directory held during the runs, sampled.
    #[serde(default)]
    pub peak_disk_bytes: u64,
    /// The directory with the store closed after the last workload
    /// (`at_rest`; on the store's last row only).
    #[serde(default)]
    pub rest_disk_bytes: Option<u64>,
    /// Key and value bytes the runs wrote, as the store counted them.
    #[serde(default)]
    pub user_bytes_written: u64,
    /// Device bytes written per user byte written over the runs (none
    /// when the runs wrote nothing).
    #[serde(default)]
    pub write_amplification: Option<f64>,
    /// The store's bytes after the workload by kind, as for the load.
    #[serde(default)]
    pub footprint: Vec<(String, u64)>,
    pub missing_reads: u64,
    /// Throughput samples of the last repeat: (seconds, ops/s).
    pub timeline: Vec<(f64, f64)>,
    /// The store's own counters after the workload (ferrite engines).
    #[serde(default)]
    pub engine_extra: Vec<(String, f64)>,
    /// The B+tree's shape after the workload (B+tree stores only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree: Option<TreeShape>,
    #[serde(skip)]
    hist: BTreeMap<OpKind, Histogram<u64>>,
    #[serde(skip)]
    totals: (u64, u64, u64),
}

impl ResultRow {
    pub fn new(store: &str, workload: &str) -> Self {
        Self {
            store: store.into(),
            workload: workload.into(),
            ops_per_sec: 0.0,
            ops_per_sec_runs: Vec::new(),
            latency: Vec::new(),
            device_read_bytes_per_op: 0.0,
            device_write_bytes_per_op: 0.0,
            io_source: String::new(),
            peak_rss_bytes: 0,
            engine_memory_bytes: 0,
            disk_bytes: 0,
            peak_disk_bytes: 0,
            rest_disk_bytes: None,
            user_bytes_written: 0,
            write_amplification: None,
            footprint: Vec::new(),
            missing_reads: 0,
            timeline: Vec::new(),
            engine_extra: Vec::new(),
            tree: None,
            hist: BTreeMap::new(),
            totals: (0, 0, 0),
        }
    }

    /// Adds one repeat; `io` is the (read, written) device bytes during it.
    pub fn add_run(&mut self, r: &RunResult, io: (u64, u64)) {
        self.ops_per_sec_runs.push(r.ops_per_sec);
        for (k, h) in &r.latency {
            match self.hist.get_mut(k) {
                Some(acc) => {
                    let _ = acc.add(h);
                }
                None => {
                    self.hist.insert(*k, h.clone());
                }
            }
        }
        self.totals.0 += r.ops;
        self.totals.1 += io.0;
        self.totals.2 += io.1;
        self.peak_rss_bytes = self.peak_rss_bytes.max(r.peak_rss_bytes);
        self.missing_reads += r.missing_reads;
        self.timeline = r.timeline.clone();
    }

    /// Computes medians, percentiles and per-operation I/O.
    pub fn finish(&mut self) {
        self.ops_per_sec = median(&self.ops_per_sec_runs);
        let ops = self.totals.0.max(1) as f64;
        self.device_read_bytes_per_op = self.totals.1 as f64 / ops;
        self.device_write_bytes_per_op = self.totals.2 as f64 / ops;
        self.write_amplification = (self.user_bytes_written > 0)
            .then(|| self.totals.2 as f64 / self.user_bytes_written as f64);
        self.latency = self
            .hist
            .iter()
            .map(|(op, h)| {
                let us = |ns: u64| ns as f64 / 1000.0;
                let mut cdf: Vec<(f64, f64)> = (0..=100)
                    .map(|i| f64::from(i) / 100.0)
                    .chain([0.995, 0.999, 0.9999])
                    .map(|q| (us(h.value_at_quantile(q)), q))
                    .collect();
                cdf.sort_by(|a, b| a.1.total_cmp(&b.1));
                OpLatency {
                    op: *op,
                    summary: LatencySummary::of(h),
                    max_us: us(h.max()),
                    cdf,
                }
            })
            .collect();
    }

    pub fn latency_of(&self, op: OpKind) -> Option<&OpLatency> {
        self.latency.iter().find(|l| l.op == op)
    }
}

/// Median of a sample (mean of the middle two for even sizes).
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// A whole comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchReport {
    pub schema: String,
    pub provenance: Provenance,
    pub setup: Setup,
    pub stores: Vec<TargetInfo>,
    pub loads: Vec<LoadRow>,
    pub results: Vec<ResultRow>,
}

impl BenchReport {
    pub fn new(
        setup: Setup,
        stores: Vec<TargetInfo>,
        loads: Vec<LoadRow>,
        results: Vec<ResultRow>,
    ) -> Self {
        Self {
            schema: SCHEMA.into(),
            provenance: Provenance::capture(),
            setup,
            stores,
            loads,
            results,
        }
    }

    /// The row for `store` on `workload`.
    pub fn row(&self, store: &str, workload: &str) -> Option<&ResultRow> {
        self.results
            .iter()
            .find(|r| r.store == store && r.workload == workload)
    }

    /// Workload names in run order.
    pub fn workloads(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for r in &self.results {
            if !out.contains(&r.workload) {
                out.push(r.workload.clone());
            }
        }
        out
    }

    pub fn to_json(&self) -> Result<String> {
        serde_json::to_string_pretty(self)
            .map_err(|e| BenchError::Config(format!("serialising the report: {e}")))
    }

    pub fn from_json(s: &str) -> Result<Self> {
        serde_json::from_str(s).map_err(|e| BenchError::Config(format!("reading a report: {e}")))
    }

    pub fn write_json(&self, path: &Path) -> Result<()> {
        write_file(path, &(self.to_json()? + "\n"))
    }
}

/// Writes a text file, creating its directory.
pub fn write_file(path: &Path, text: &str) -> Result<()> {
    let out = |source| BenchError::Output {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(out)?;
    }
    std::fs::write(path, text).map_err(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_not_cached_count_up_from_the_leaves() {
        let shape = |pool_frames| TreeShape {
            height: 3,
            pool_frames,
            pages_per_level: vec![100, 10, 1],
        };
        // Root and inner level fit (11 pages); the leaves do not.
        assert_eq!(shape(50).levels_not_cached(), 1);
        assert_eq!(shape(111).levels_not_cached(), 0);
        assert_eq!(shape(5).levels_not_cached(), 2);
        assert_eq!(shape(0).levels_not_cached(), 3);
    }

    fn sample() -> BenchReport {
        let mut h = Histogram::<u64>::new(3).unwrap();
        for v in [1000u64, 2000, 3000, 50_000] {
            h.record(v).unwrap();
        }
        let run = RunResult {
            ops: 4,
            seconds: 1.0,
            ops_per_sec: 4.0,
            latency: [(OpKind::Read, h)].into_iter().collect(),
            timeline: vec![(0.2, 4.0)],
            peak_rss_bytes: 10,
            missing_reads: 0,
        };
        let mut row = ResultRow::new("btreemap", "C");
        row.add_run(&run, (4096, 0));
        row.finish();
        BenchReport::new(
            Setup {
                keys: "uniform u64".into(),
                values: "8 B".into(),
                records: 4,
                data_bytes: 64,
                cache_bytes: 65536,
                threads: 1,
                ops: 4,
                warmup_ops: 0,
                repeats: 1,
                sync: "never".into(),
                direct_io: true,
                seed: 1,
                device: "ext4 on /dev/vda".into(),
            },
            vec![],
            vec![],
            vec![row],
        )
    }

    #[test]
    fn json_round_trips() {
        let r = sample();
        let back = BenchReport::from_json(&r.to_json().unwrap()).unwrap();
        assert_eq!(back.schema, SCHEMA);
        assert_eq!(back.setup, r.setup);
        assert_eq!(back.results[0].latency, r.results[0].latency);
        assert_eq!(back.results[0].device_read_bytes_per_op, 1024.0);
    }

    #[test]
    fn percentiles_come_from_the_histogram() {
        let r = sample();
        let l = r.results[0].latency_of(OpKind::Read).unwrap();
        assert_eq!(l.summary.count, 4);
        assert!((l.summary.p50_us - 2.0).abs() < 0.01, "{:?}", l.summary);
        assert!((l.max_us - 50.0).abs() < 0.1);
        assert!(l
            .cdf
            .windows(2)
            .all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
    }

    #[test]
    fn median_of_even_and_odd() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
