//! A side-by-side comparison: several stores, the same data, the same
//! operations, the same budgets.
//!
//! Every store is loaded with the same records. Then, for each workload in
//! order, each repeat runs every store once, rotating which store goes
//! first, so slow drift of a shared machine falls on all of them alike; the
//! reported throughput is the median over repeats. Workloads run on the
//! loaded data in the given order (YCSB's usual A, B, C, F, D, E), so the
//! inserts of D and E happen identically in every store.

use std::path::PathBuf;

use ferrite::{KvStore, SyncMode};
use indicatif::{ProgressBar, ProgressStyle};

use crate::adapter::{self, StoreConfig, Target, TargetInfo};
use crate::disk_peak::DiskPeak;
use crate::error::{BenchError, Result};
use crate::keyset::{KeySet, KeySpec, ValueSpec};
use crate::process;
use crate::report::{footprint_parts, BenchReport, LoadRow, ResultRow, Setup, TreeShape};
use crate::runner::{self, Dataset, LoadSpec, RunSpec};
use crate::workload::{RecordCounter, Workload};

/// How much cache each store gets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CacheBudget {
    Bytes(u64),
    /// A fraction of the loaded data's size (keys plus values).
    RatioOfData(f64),
}

/// Everything a comparison needs.
#[derive(Debug, Clone)]
pub struct BenchPlan {
    pub targets: Vec<Target>,
    pub keys: KeySpec,
    pub values: ValueSpec,
    pub records: u64,
    pub workloads: Vec<Workload>,
    pub ops: u64,
    /// Measure each run for this long instead of counting `ops`.
    pub duration: Option<std::time::Duration>,
    pub warmup_ops: u64,
    pub threads: usize,
    pub repeats: usize,
    pub cache: CacheBudget,
    pub sync: SyncMode,
    pub direct_io: bool,
    /// Table block compression of the stores that compress.
    pub compression: crate::adapter::Compression,
    /// Parent directory for the stores (each gets a subdirectory, removed afterwards).
    pub dir: PathBuf,
    pub seed: u64,
    pub show_progress: bool,
    /// Load in key order through `KvStore::bulk_load` instead of random-order batches.
    pub bulk_load: bool,
    /// After loading, wait for every store's flushes and compactions to
    /// finish (`KvStore::settle`), so runs measure settled stores.
    pub settle: bool,
    /// After loading (and settling), read every record once in key order,
    /// so caches start warm.
    pub warm_scan: bool,
    /// Close each store after its load and measure its directory at rest,
    /// then reopen it; at the end, close and measure again. Off, stores
    /// stay open from load to end (and their caches warm).
    pub at_rest: bool,
}

struct Loaded {
    target: Target,
    db: Box<dyn KvStore>,
    info: TargetInfo,
    dir: PathBuf,
    records: RecordCounter,
}

fn bar(show: bool, len: u64, msg: String) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    ProgressBar::new(len)
        .with_style(
            ProgressStyle::with_template("{msg:32} {bar:30} {pos}/{len} ({per_sec}, {eta})")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        )
        .with_message(msg)
}

impl BenchPlan {
    /// Data size in bytes: records × (mean key + mean value length).
    pub fn data_bytes(&self, keys: &KeySet) -> u64 {
        (self.records as f64 * (keys.mean_key_len() + self.values.mean())) as u64
    }

    fn validate(&self) -> Result<()> {
        if self.targets.is_empty() || self.workloads.is_empty() {
            return Err(BenchError::Config(
                "need at least one target and one workload".into(),
            ));
        }
        if self.records == 0 || self.repeats == 0 {
            return Err(BenchError::Config(
                "records and repeats must be positive".into(),
            ));
        }
        if let Some(t) = self.targets.iter().find(|t| !t.available()) {
            return Err(BenchError::Unavailable(
                t.name(),
                "enable its cargo feature (see `ferrite bench --help`)",
            ));
        }
        Ok(())
    }

    /// Runs the comparison and returns its report.
    pub fn execute(&self) -> Result<BenchReport> {
        self.validate()?;
        let keys = KeySet::new(self.keys.clone(), self.seed)?;
        let data_bytes = self.data_bytes(&keys);
        let data = Dataset {
            keys: &keys,
            values: &self.values,
        };
        let cache_bytes = match self.cache {
            CacheBudget::Bytes(b) => b,
            CacheBudget::RatioOfData(r) => (data_bytes as f64 * r) as u64,
        }
        .max(64 << 10);
        let cfg = StoreConfig {
            cache_bytes,
            sync: self.sync,
            direct_io: self.direct_io,
            compression: self.compression,
        };
        let mut loaded = Vec::new();
        let mut loads = Vec::new();
        for &target in &self.targets {
            let dir = self
                .dir
                .join(format!("{}-{}", target.name(), std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            let (db, info) = adapter::open(target, &dir, &cfg)?;
            let pb = bar(
                self.show_progress,
                self.records,
                format!("load {}", target.name()),
            );
            let spec = LoadSpec {
                records: self.records,
                threads: self.threads,
                batch: 1000,
                seed: self.seed,
            };
            let peak = DiskPeak::start(&dir);
            let written_before = device_written(target, db.as_ref());
            let l = if self.bulk_load {
                runner::bulk_load(db.as_ref(), data, self.records, self.seed)
            } else {
                runner::load(db.as_ref(), data, spec, &|n| pb.inc(n))
            }
            .map_err(|e| relabel(e, &target))?;
            pb.finish_and_clear();
            let store_err = |source| BenchError::Store {
                target: target.name(),
                source,
            };
            if self.settle {
                db.settle().map_err(store_err)?;
            }
            let device_write_bytes =
                device_written(target, db.as_ref()).saturating_sub(written_before);
            let user_bytes = db.stats().user_bytes_written;
            crate::user_data::declare(&dir, user_bytes);
            let disk_bytes = process::disk_bytes(&dir);
            let footprint = footprint_parts(&target.footprint(db.as_ref(), &dir));
            // The directory as measured just now counts too: a log freed
            // between that walk and the sampler's last can escape it.
            let peak_disk_bytes = peak.finish().max(disk_bytes);
            let (db, info, rest_disk_bytes) = if self.at_rest {
                db.close().map_err(store_err)?;
                let rest = process::disk_bytes(&dir);
                let (db, info) = adapter::open(target, &dir, &cfg)?;
                (db, info, Some(rest))
            } else {
                (db, info, None)
            };
            if self.warm_scan {
                db.scan(ferrite::KeyRange::all(), &mut |_, _| {
                    std::ops::ControlFlow::Continue(())
                })
                .map_err(store_err)?;
            }
            loads.push(LoadRow {
                store: target.name(),
                seconds: l.seconds,
                ops_per_sec: l.ops_per_sec,
                disk_bytes,
                peak_disk_bytes,
                rest_disk_bytes,
                user_bytes,
                device_write_bytes,
                footprint,
            });
            loaded.push(Loaded {
                target,
                db,
                info,
                dir,
                records: RecordCounter::new(self.records),
            });
        }
        let mut results = Vec::new();
        for (wi, w) in self.workloads.iter().enumerate() {
            let mut rows: Vec<ResultRow> = loaded
                .iter()
                .map(|l| ResultRow::new(&l.info.name, &w.name))
                .collect();
            for rep in 0..self.repeats {
                let n = loaded.len();
                for step in 0..n {
                    let i = (step + rep) % n;
                    let (Some(l), Some(row)) = (loaded.get(i), rows.get_mut(i)) else {
                        continue;
                    };
                    let spec = RunSpec {
                        workload: w,
                        ops: self.ops,
                        duration: self.duration,
                        warmup_ops: if rep == 0 { self.warmup_ops } else { 0 },
                        threads: self.threads,
                        seed: self.seed ^ ((wi as u64) << 48) ^ ((rep as u64) << 40),
                    };
                    let pb = bar(
                        self.show_progress,
                        self.ops,
                        format!("{} {} #{}", l.target.name(), w.name, rep + 1),
                    );
                    let io_before = io_counts(l);
                    let user_before = l.db.stats().user_bytes_written;
                    let peak = DiskPeak::start(&l.dir);
                    let r = runner::run(l.db.as_ref(), data, &l.records, &spec, &|n| pb.inc(n))
                        .map_err(|e| relabel(e, &l.target))?;
                    pb.finish_and_clear();
                    row.peak_disk_bytes = row.peak_disk_bytes.max(peak.finish());
                    let io_after = io_counts(l);
                    row.user_bytes_written +=
                        l.db.stats().user_bytes_written.saturating_sub(user_before);
                    row.add_run(&r, (io_after.0 - io_before.0, io_after.1 - io_before.1));
                    row.io_source = if l.target.counts_own_io() {
                        "engine"
                    } else {
                        "process"
                    }
                    .into();
                    row.engine_memory_bytes =
                        row.engine_memory_bytes.max(l.db.stats().memory_bytes);
                }
            }
            for (row, l) in rows.iter_mut().zip(&loaded) {
                row.disk_bytes = process::disk_bytes(&l.dir);
                row.footprint = footprint_parts(&l.target.footprint(l.db.as_ref(), &l.dir));
                let stats = l.db.stats();
                row.tree = stats
                    .engine::<ferrite_btree::BTreeStats>()
                    .map(TreeShape::of);
                row.engine_extra = stats.detail.map(|d| d.fields()).unwrap_or_default();
                row.finish();
            }
            results.extend(rows);
        }
        for l in &loaded {
            l.db.verify().map_err(|e| BenchError::Store {
                target: l.target.name(),
                source: e,
            })?;
        }
        let stores = loaded.iter().map(|l| l.info.clone()).collect();
        for l in loaded {
            if self.at_rest {
                let name = l.info.name.clone();
                l.db.close().map_err(|e| BenchError::Store {
                    target: l.target.name(),
                    source: e,
                })?;
                let rest = process::disk_bytes(&l.dir);
                if let Some(row) = results.iter_mut().rev().find(|r| r.store == name) {
                    row.rest_disk_bytes = Some(rest);
                }
            } else {
                drop(l.db);
            }
            let _ = std::fs::remove_dir_all(&l.dir);
        }
        Ok(BenchReport::new(
            Setup {
                keys: keys.spec().label(),
                values: self.values.label(),
                records: self.records,
                data_bytes,
                cache_bytes,
                threads: self.threads,
                ops: self.ops,
                warmup_ops: self.warmup_ops,
                repeats: self.repeats,
                sync: self.sync.to_string(),
                direct_io: self.direct_io,
                seed: self.seed,
                device: process::device_of(&self.dir),
            },
            stores,
            loads,
            results,
        ))
    }
}

/// Device bytes written so far by `db`, counted as [`io_counts`] does.
fn device_written(target: Target, db: &dyn KvStore) -> u64 {
    if target.counts_own_io() {
        db.stats().device.write_bytes
    } else {
        process::io_bytes().1
    }
}

/// Device bytes (read, written) so far: the engine's own counters for
/// ferrite engines, the process's storage I/O for baselines.
fn io_counts(l: &Loaded) -> (u64, u64) {
    if l.target.counts_own_io() {
        let d = l.db.stats().device;
        (d.read_bytes, d.write_bytes)
    } else {
        process::io_bytes()
    }
}

fn relabel(e: BenchError, target: &Target) -> BenchError {
    match e {
        BenchError::Store { source, .. } => BenchError::Store {
            target: target.name(),
            source,
        },
        other => other,
    }
}
