//! `swiftkv`: the LSM engine with learned index blocks against the same
//! engine with sparse (binary-searched) index blocks, and against RocksDB.
//!
//! Parts, each side by side in one run:
//! 1. **Engine A/B** (per key/value configuration: 16-byte keys with
//!    100-byte values, 8-byte keys with 8-byte values): both variants are
//!    loaded with the same records in the same random order, in
//!    alternating chunks, each ending when the store has settled (write
//!    throughput, including the flushes and compactions the writes
//!    cause), then reopened with the cache holding all data ("in-cache")
//!    and with 10% of it ("cache10"), and read in alternating chunks:
//!    uniform and zipfian lookups of loaded keys (throughput and P99,
//!    judged by the median of side-by-side chunk ratios), and the
//!    read/write-ratio sweep (zipfian, updates). The loaded stores are
//!    also copied into memory and read at 10% cache behind emulated
//!    devices of fixed read latency, since what a learned index saves (CPU
//!    time per lookup) weighs against the device read each uncached lookup
//!    waits on.
//! 2. **Against RocksDB** (only in builds with `--features rocksdb`): the
//!    `ferrite bench` harness with `lsm` and `rocksdb`, same data, same
//!    cache budget (index and filter blocks charged to it in both), same
//!    memtable size, durability `never`: uniform reads in-cache and at 10%,
//!    and YCSB A, B, C, D, F at 10%.
//! 3. **Index-block size** on every real key set (GeoLite2, and the ones
//!    `scripts/make-keys.sh` makes) and on sequential and uniform keys: the
//!    same sorted records written as tables of the engine's default size
//!    with each index kind.
//! 4. **Model types** (single LR, Greedy-PLR only, two-level, and
//!    Bourbon's block-level model with a binary search in the block) on the same
//!    tables: training time, index memory, and lookup latency with every
//!    block cached (the index's own cost); and training time against the
//!    number of training threads.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrite::{KeyRange, KvStore, Options, SyncMode, WriteBatch};
use ferrite_io::{BlockDevice, MemDevice};
use ferrite_learned::FitKind;
use ferrite_lsm::internals::BlockCache;
use ferrite_lsm::internals::Bloom;
use ferrite_lsm::internals::TableSpace;
use ferrite_lsm::internals::{BuiltTable, Table, TableBuilder};
use ferrite_lsm::{Compression, Devices, IndexKind, LsmOptions, LsmStats, LsmStore, WAL_DEVICES};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::driver::{
    alternate, fixed_reads, memory_copy, sized_lsm_options, Latencies, Metrics, Report, Study,
};
use super::ReproContext;
use crate::adapter::Target;
use crate::distribution::Chooser;
use crate::distribution::ScrambledZipfian;
use crate::error::{BenchError, Result};
use crate::keyset::{pseudo_random_bytes, read_sosd, KeySet, KeySpec, ValueSpec};
use crate::plan::{BenchPlan, CacheBudget};
use crate::report;
use crate::workload::Workload;

pub struct SwiftRepro;

sizes! {
    struct Sizes {
        records: u64 = (100_000, 10_000_000, 40_000_000),
        warmup: u64 = (10_000, 100_000, 500_000),
        /// Measured lookups per distribution in-cache, and at 10% cache.
        ops: u64 = (20_000, 1_000_000, 4_000_000),
        ops_cache10: u64 = (10_000, 200_000, 1_000_000),
        chunks: u64 = (4, 10, 20),
        sweep_ops: u64 = (10_000, 100_000, 1_000_000),
        peer_records: u64 = (50_000, 10_000_000, 40_000_000),
        peer_ops: u64 = (10_000, 100_000, 1_000_000),
        model_records: u64 = (100_000, 2_000_000, 8_000_000),
        partition_records: u64 = (50_000, 2_000_000, 10_000_000),
    }
}

/// A key/value configuration.
#[derive(Debug, Clone, Copy)]
struct Shape {
    name: &'static str,
    keys: fn() -> KeySpec,
    key_bytes: usize,
    value_bytes: usize,
}

const SHAPES: [Shape; 2] = [
    Shape {
        name: "k16v100",
        keys: || KeySpec::Uniform16,
        key_bytes: 16,
        value_bytes: 100,
    },
    Shape {
        name: "k8v8",
        keys: || KeySpec::UniformU64,
        key_bytes: 8,
        value_bytes: 8,
    },
];

/// Read/write ratios of the sweep (reads in ten).
const SWEEP: [(u32, &str); 6] = [
    (10, "1:0"),
    (9, "9:1"),
    (7, "7:3"),
    (5, "1:1"),
    (3, "3:7"),
    (1, "1:9"),
];

const VARIANTS: [&str; 2] = ["sparse", "learned"];

/// Read latencies, in microseconds, of the emulated devices the uniform
/// reads at 10% cache are repeated on (0: memory behind no delay).
const DEVICE_READ_US: [u64; 4] = [0, 5, 10, 20];

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct ReadRun {
    ops: u64,
    secs: f64,
    p50_us: f64,
    p99_us: f64,
    read_bytes_per_op: f64,
    /// Per chunk, in run order: operations per second and P99 (µs). The
    /// stores' chunks alternate, so chunk `c` of every store ran within
    /// moments of the others' and their ratios share the machine's state.
    #[serde(default)]
    chunk_ops_per_sec: Vec<f64>,
    #[serde(default)]
    chunk_p99_us: Vec<f64>,
}

impl ReadRun {
    fn kops(&self) -> f64 {
        self.ops as f64 / self.secs.max(1e-9) / 1e3
    }
}

/// The median over chunks of `learned / sparse`, each ratio taken between
/// chunks that ran side by side; the pooled ratio where chunks were not
/// recorded (results saved before they were).
fn chunk_ratio(
    v: &[ReadRun],
    per_chunk: fn(&ReadRun) -> &[f64],
    pooled: fn(&ReadRun) -> f64,
) -> f64 {
    let [sparse, learned] = v else {
        return f64::NAN;
    };
    let (a, b) = (per_chunk(sparse), per_chunk(learned));
    if a.is_empty() || a.len() != b.len() {
        return pooled(learned) / pooled(sparse);
    }
    report::median(&a.iter().zip(b).map(|(a, b)| b / a).collect::<Vec<_>>())
}

fn speedup(v: &[ReadRun]) -> f64 {
    chunk_ratio(v, |r| &r.chunk_ops_per_sec, ReadRun::kops)
}

fn p99_ratio(v: &[ReadRun]) -> f64 {
    chunk_ratio(v, |r| &r.chunk_p99_us, |r| r.p99_us)
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct ShapeResults {
    records: u64,
    /// Per variant: load kops/s, table bytes, index bytes, levels' tables.
    load_kops: Vec<f64>,
    /// Per variant, the seconds of each load chunk (chunks alternate).
    #[serde(default)]
    load_chunk_secs: Vec<Vec<f64>>,
    table_bytes: Vec<u64>,
    /// Table bytes with data blocks counted uncompressed: what the block
    /// cache holds of a store when every block is in it.
    #[serde(default)]
    cached_bytes: Vec<u64>,
    index_bytes: Vec<u64>,
    levels: Vec<Vec<usize>>,
    write_stall_micros: Vec<f64>,
    /// `(cache setting, distribution)` → per variant.
    reads: BTreeMap<String, Vec<ReadRun>>,
    cache_bytes: BTreeMap<String, u64>,
    /// Sweep ratio → per variant: (reads per second, all ops per second).
    sweep: BTreeMap<String, Vec<(f64, f64)>>,
    /// Emulated device read latency (µs) → per variant: uniform reads at
    /// 10% cache on the loaded stores copied into memory.
    #[serde(default)]
    devices: BTreeMap<u64, Vec<ReadRun>>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct ModelRow {
    kind: String,
    tables: usize,
    training_ms: f64,
    index_bytes: u64,
    index_memory: u64,
    segments: u64,
    lookup_ns_mean: f64,
    lookup_ns_p99: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct PeerResults {
    /// Workload → (lsm kops/s, rocksdb kops/s).
    runs: BTreeMap<String, (f64, f64)>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Results {
    #[serde(default)]
    sizes: Sizes,
    shapes: BTreeMap<String, ShapeResults>,
    /// Key set → (sparse index bytes, learned index bytes, tables).
    index_sizes: BTreeMap<String, (u64, u64, usize)>,
    /// Key set → learned-index tables that kept the sparse index because
    /// their model took more bytes.
    #[serde(default)]
    index_fallbacks: BTreeMap<String, usize>,
    /// Key set → learned index bytes had every table kept its model.
    #[serde(default)]
    index_model_bytes: BTreeMap<String, u64>,
    models: Vec<ModelRow>,
    /// Training threads → total training milliseconds.
    threads: Vec<(usize, f64)>,
    /// Shape → peer comparison (absent without RocksDB).
    peers: BTreeMap<String, PeerResults>,
    #[serde(default)]
    partitions: PartitionResults,
    /// Table block compression of every LSM store and of RocksDB.
    #[serde(default)]
    compression: String,
}

/// One partitioned and one unpartitioned store, learned indexes in both.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct PartitionResults {
    records: u64,
    /// Per store: partitions, point lookups kops/s, scans kops/s.
    runs: Vec<(usize, f64, f64)>,
    /// Per store: load kops/s (to settled tables), L0 tables written
    /// (flushes of a memtable or of partitions' buffers), and device bytes
    /// written (WAL, tables, manifest) per byte of user data.
    #[serde(default)]
    writes: Vec<(f64, f64, f64)>,
}

fn lsm_options(index: IndexKind, records: u64, shape: &Shape, codec: Compression) -> LsmOptions {
    sized_lsm_options(
        index,
        records * (shape.key_bytes + shape.value_bytes) as u64,
    )
    .compression(codec)
}

fn store_options(cache: u64) -> Options {
    Options::default()
        .cache_bytes(cache.max(1 << 20))
        .sync(SyncMode::Never)
}

fn open_lsm(dir: &Path, lsm: LsmOptions, cache: u64) -> Result<LsmStore> {
    LsmStore::open(dir, &store_options(cache), lsm).map_err(store_err)
}

/// A closed store's devices copied into memory, to be opened again behind
/// an emulated device.
struct MemoryCopy {
    tables: Arc<MemDevice>,
    manifest: [Arc<MemDevice>; 2],
    wal: [Arc<MemDevice>; WAL_DEVICES],
}

impl MemoryCopy {
    /// Copies the (closed) store in `dir`.
    fn of(dir: &Path) -> Result<Self> {
        let on_disk = Devices::open_dir(dir, false).map_err(store_err)?;
        let copy = |src: &Arc<dyn BlockDevice>| memory_copy(src.as_ref());
        let tables = copy(&on_disk.tables)?;
        let manifest = [copy(&on_disk.manifest[0])?, copy(&on_disk.manifest[1])?];
        let mut wal = Vec::with_capacity(WAL_DEVICES);
        for d in &on_disk.wal {
            wal.push(copy(d)?);
        }
        let wal = wal
            .try_into()
            .map_err(|_| BenchError::Config("swiftkv: WAL device count".into()))?;
        Ok(Self {
            tables,
            manifest,
            wal,
        })
    }

    /// The copy as a store's devices, every table read taking `read`
    /// (measured from when it starts, so the copy's own time counts).
    fn devices(&self, read: Duration) -> Result<Devices> {
        let shared = |d: &Arc<MemDevice>| -> Arc<dyn BlockDevice> { d.clone() };
        Ok(Devices {
            tables: fixed_reads(self.tables.clone(), read)?,
            manifest: self.manifest.each_ref().map(shared),
            wal: self.wal.each_ref().map(shared),
        })
    }
}

fn store_err(e: ferrite::Error) -> BenchError {
    super::driver::store_err("lsm")(e)
}

/// Pseudo-random value bytes: a value that repeats its seed would let
/// block compression shrink the tables several times over, and the
/// experiment would then measure the codec rather than the index.
fn value(shape: &Shape, i: u64, version: u64, out: &mut Vec<u8>) {
    pseudo_random_bytes(i ^ version.rotate_left(40), shape.value_bytes, out);
}

/// Loads both variants in alternating chunks; returns, per variant, the
/// seconds of each chunk. A store's time covers its writes and the
/// flushes and compactions they cause: each chunk ends when the store has
/// settled, so no store's background work runs during another's chunk,
/// and the final flush is timed too (building models is compaction work).
/// Each store's user data is declared at its directory in `dirs`.
fn load(
    stores: &[LsmStore],
    dirs: &[PathBuf],
    keys: &KeySet,
    shape: &Shape,
    s: &Sizes,
) -> Result<Vec<Vec<f64>>> {
    let mut secs = vec![Vec::new(); stores.len()];
    let mut bytes = vec![0u64; stores.len()];
    let chunk = (s.records / s.chunks).max(1);
    let (mut k, mut v) = (Vec::new(), Vec::new());
    alternate(stores.len(), s.records.div_ceil(chunk), |i, c| {
        let (start, end) = (c * chunk, ((c + 1) * chunk).min(s.records));
        let t = Instant::now();
        let mut b = WriteBatch::new();
        for r in start..end {
            keys.key(r, &mut k);
            value(shape, r, 0, &mut v);
            b.put(&k, &v).map_err(store_err)?;
            bytes[i] += (k.len() + v.len()) as u64;
            if b.len() == 256 {
                stores[i].write_batch(&b).map_err(store_err)?;
                b.clear();
            }
        }
        if !b.is_empty() {
            stores[i].write_batch(&b).map_err(store_err)?;
        }
        if end == s.records {
            stores[i].flush().map_err(store_err)?;
        }
        stores[i].wait_for_compactions().map_err(store_err)?;
        secs[i].push(t.elapsed().as_secs_f64());
        Ok(())
    })?;
    for (dir, &b) in dirs.iter().zip(&bytes) {
        crate::user_data::declare(dir, b);
    }
    Ok(secs)
}

/// One measured mix of operations.
#[derive(Debug, Clone, Copy)]
struct Mix {
    ops: u64,
    chunks: u64,
    zipf: bool,
    /// Lookups in every ten operations; the rest are updates.
    reads_in_ten: u32,
    seed: u64,
}

/// Runs `mix` on every store in alternating chunks; per store the run and
/// how many of its operations were lookups. A chunk with updates ends when
/// its store has settled, so the flushes and compactions its writes cause
/// are charged to it rather than to whichever store runs next.
fn drive(
    stores: &[LsmStore],
    keys: &KeySet,
    shape: &Shape,
    records: u64,
    mix: Mix,
) -> Result<Vec<(ReadRun, u64)>> {
    let Mix {
        ops,
        chunks,
        zipf,
        reads_in_ten,
        seed,
    } = mix;
    let n = stores.len();
    let mut rngs: Vec<SmallRng> = (0..n).map(|_| SmallRng::seed_from_u64(seed)).collect();
    let mut choosers: Vec<Box<dyn Chooser>> = (0..n)
        .map(|_| -> Box<dyn Chooser> {
            if zipf {
                Box::new(ScrambledZipfian::new(records))
            } else {
                Box::new(crate::distribution::Uniform)
            }
        })
        .collect();
    let mut hists: Vec<Latencies> = (0..n).map(|_| Latencies::new()).collect();
    let mut runs: Vec<(ReadRun, u64)> = vec![(ReadRun::default(), 0); n];
    let before: Vec<u64> = stores.iter().map(|d| d.stats().device.read_bytes).collect();
    let chunk = (ops / chunks).max(1);
    let (mut k, mut v) = (Vec::new(), Vec::new());
    alternate(n, chunks, |i, c| {
        let mut chunk_hist = Latencies::new();
        let t = Instant::now();
        let mut reads = 0u64;
        for op in 0..chunk {
            let r = choosers[i].next(&mut rngs[i], records);
            keys.key(r, &mut k);
            let is_read = (op % 10) < reads_in_ten as u64;
            let t0 = Instant::now();
            if is_read {
                let got = stores[i].get(&k).map_err(store_err)?;
                if got.is_none() {
                    return Err(BenchError::Config(format!(
                        "swiftkv: a loaded key is missing from the {} store",
                        VARIANTS.get(i).unwrap_or(&"?")
                    )));
                }
                reads += 1;
            } else {
                value(shape, r, c + 1, &mut v);
                stores[i].put(&k, &v).map_err(store_err)?;
            }
            chunk_hist.record(t0.elapsed());
        }
        if reads_in_ten < 10 {
            stores[i].wait_for_compactions().map_err(store_err)?;
        }
        let secs = t.elapsed().as_secs_f64();
        let run = &mut runs[i].0;
        run.secs += secs;
        run.ops += chunk;
        run.chunk_ops_per_sec.push(chunk as f64 / secs.max(1e-9));
        run.chunk_p99_us.push(chunk_hist.quantile_us(0.99));
        hists[i].add(&chunk_hist);
        runs[i].1 += reads;
        Ok(())
    })?;
    for (i, (r, _)) in runs.iter_mut().enumerate() {
        r.p50_us = hists[i].quantile_us(0.5);
        r.p99_us = hists[i].quantile_us(0.99);
        r.read_bytes_per_op =
            (stores[i].stats().device.read_bytes - before[i]) as f64 / r.ops.max(1) as f64;
    }
    Ok(runs)
}

fn run_shape(ctx: &ReproContext, s: &Sizes, shape: &Shape) -> Result<ShapeResults> {
    let root = ctx.work_dir.join("swiftkv").join(shape.name);
    let _ = std::fs::remove_dir_all(&root);
    let dirs: Vec<_> = VARIANTS.iter().map(|v| root.join(v)).collect();
    let kinds = [IndexKind::Sparse, IndexKind::LEARNED];
    let keys = KeySet::new((shape.keys)(), 7)?;
    let mut r = ShapeResults {
        records: s.records,
        ..ShapeResults::default()
    };
    let progress = |what: &str| {
        progress!(ctx, "swiftkv {}: {what}", shape.name);
    };
    progress("load");
    let stores: Vec<LsmStore> = dirs
        .iter()
        .zip(kinds)
        .map(|(d, k)| {
            open_lsm(
                d,
                lsm_options(k, s.records, shape, ctx.compression),
                64 << 20,
            )
        })
        .collect::<Result<_>>()?;
    let chunk_secs = load(&stores, &dirs, &keys, shape, s)?;
    for (db, secs) in stores.iter().zip(&chunk_secs) {
        // Both variants are read with the same shape: L0 (whose table
        // count depends on when the last compaction ran) compacted away.
        db.compact_l0().map_err(store_err)?;
        let rep = db.report();
        r.load_kops
            .push(s.records as f64 / secs.iter().sum::<f64>() / 1e3);
        r.load_chunk_secs.push(secs.clone());
        let tables: u64 = rep.levels.iter().map(|l| l.bytes).sum();
        r.table_bytes.push(tables);
        r.cached_bytes
            .push(tables - rep.data_bytes() + rep.uncompressed_data_bytes());
        r.index_bytes.push(rep.index_bytes());
        r.levels.push(rep.levels.iter().map(|l| l.tables).collect());
        r.write_stall_micros.push(
            db.stats()
                .engine_or_default::<LsmStats>()
                .write_stall_micros as f64,
        );
    }
    drop(stores);
    // Cache settings are fractions of what the cache holds when every
    // block is in it: blocks are cached decoded, so a compressed table
    // takes its uncompressed size there.
    let data = r.cached_bytes.iter().copied().max().unwrap_or(1 << 20);
    progress("emulated devices");
    r.devices = device_sweep(&dirs, kinds, &keys, shape, s, data / 10, ctx.compression)?;
    for (setting, cache) in [("incache", data * 2), ("cache10", data / 10)] {
        progress(setting);
        r.cache_bytes.insert(setting.into(), cache);
        let stores: Vec<LsmStore> = dirs
            .iter()
            .zip(kinds)
            .map(|(d, k)| open_lsm(d, lsm_options(k, s.records, shape, ctx.compression), cache))
            .collect::<Result<_>>()?;
        if setting == "incache" {
            for db in &stores {
                db.scan(KeyRange::all(), &mut |_, _| {
                    std::ops::ControlFlow::Continue(())
                })
                .map_err(store_err)?;
            }
        }
        for (dist, zipf) in [("uniform", false), ("zipfian", true)] {
            let warm = Mix {
                ops: s.warmup,
                chunks: 2,
                zipf,
                reads_in_ten: 10,
                seed: 1,
            };
            drive(&stores, &keys, shape, s.records, warm)?;
            let measured = Mix {
                ops: if setting == "incache" {
                    s.ops
                } else {
                    s.ops_cache10
                },
                chunks: s.chunks,
                seed: 2,
                ..warm
            };
            let runs = drive(&stores, &keys, shape, s.records, measured)?;
            r.reads.insert(
                format!("{setting}/{dist}"),
                runs.into_iter().map(|(run, _)| run).collect(),
            );
        }
        if setting == "cache10" {
            for (reads_in_ten, label) in SWEEP {
                progress(&format!("sweep {label}"));
                let mix = Mix {
                    ops: s.sweep_ops,
                    chunks: s.chunks,
                    zipf: true,
                    reads_in_ten,
                    seed: 3 + reads_in_ten as u64,
                };
                let runs = drive(&stores, &keys, shape, s.records, mix)?;
                r.sweep.insert(
                    label.into(),
                    runs.iter()
                        .map(|(run, reads)| {
                            (
                                *reads as f64 / run.secs.max(1e-9),
                                run.ops as f64 / run.secs.max(1e-9),
                            )
                        })
                        .collect(),
                );
            }
        }
        for db in &stores {
            db.verify().map_err(store_err)?;
        }
    }
    let _ = std::fs::remove_dir_all(&root);
    Ok(r)
}

/// Builds tables from sorted `keys` with `value_len`-byte values, cut
/// at `table_bytes` as the engine cuts them, handing each to `emit`.
/// Uniform reads at cache `cache` on both variants' stores (in `dirs`,
/// closed) copied into memory, behind a fixed read latency per
/// [`DEVICE_READ_US`], side by side in alternating chunks as on the disk.
fn device_sweep(
    dirs: &[PathBuf],
    kinds: [IndexKind; 2],
    keys: &KeySet,
    shape: &Shape,
    s: &Sizes,
    cache: u64,
    codec: Compression,
) -> Result<BTreeMap<u64, Vec<ReadRun>>> {
    let copies: Vec<MemoryCopy> = dirs
        .iter()
        .map(|d| MemoryCopy::of(d))
        .collect::<Result<_>>()?;
    let mut out = BTreeMap::new();
    for us in DEVICE_READ_US {
        let stores: Vec<LsmStore> = copies
            .iter()
            .zip(kinds)
            .map(|(c, k)| {
                let devices = c.devices(Duration::from_micros(us))?;
                LsmStore::open_on(
                    devices,
                    &store_options(cache),
                    lsm_options(k, s.records, shape, codec),
                )
                .map_err(store_err)
            })
            .collect::<Result<_>>()?;
        let warm = Mix {
            ops: s.warmup,
            chunks: 2,
            zipf: false,
            reads_in_ten: 10,
            seed: 1,
        };
        drive(&stores, keys, shape, s.records, warm)?;
        let measured = Mix {
            ops: s.ops_cache10,
            chunks: s.chunks,
            seed: 2,
            ..warm
        };
        let runs = drive(&stores, keys, shape, s.records, measured)?;
        out.insert(us, runs.into_iter().map(|(run, _)| run).collect());
    }
    Ok(out)
}

/// Builds the tables of `keys`; with `smaller_index` as the engine does
/// (a model larger than the separators gives way to them), without it
/// every table keeps the index `index` asks for.
fn cut_tables(
    keys: &[Vec<u8>],
    value_len: usize,
    (index, smaller_index): (IndexKind, bool),
    threads: usize,
    table_bytes: usize,
    emit: &mut dyn FnMut(BuiltTable) -> Result<()>,
) -> Result<()> {
    let value = vec![7u8; value_len];
    let mut b = TableBuilder::new(index, 10, threads).smaller_index(smaller_index);
    for k in keys {
        if b.estimated_bytes() >= table_bytes {
            if let Some(t) = b.finish() {
                emit(t)?;
            }
        }
        b.add(k, Some(&value));
    }
    match b.finish() {
        Some(t) => emit(t),
        None => Ok(()),
    }
}

/// The tables [`cut_tables`] builds, written to `space` and opened, each
/// with the index asked for (the model types are compared as they are).
fn build_tables(
    keys: &[Vec<u8>],
    value_len: usize,
    index: IndexKind,
    threads: usize,
    table_bytes: usize,
    space: &Arc<TableSpace>,
    cache: &Arc<BlockCache>,
) -> Result<Vec<Table>> {
    let mut out = Vec::new();
    cut_tables(
        keys,
        value_len,
        (index, false),
        threads,
        table_bytes,
        &mut |built| {
            let extent = space.allocate(built.pages());
            space.write(extent, &built.bytes).map_err(store_err)?;
            let id = out.len() as u64 + 1;
            out.push(Table::open(id, extent, space.clone(), cache.clone()).map_err(store_err)?);
            Ok(())
        },
    )?;
    Ok(out)
}

fn memory_space() -> (Arc<TableSpace>, Arc<BlockCache>) {
    (
        Arc::new(TableSpace::new(Arc::new(ferrite_io::MemDevice::new()))),
        Arc::new(BlockCache::new(u64::MAX / 4)),
    )
}

fn index_bytes(tables: &[Table]) -> u64 {
    tables.iter().map(|t| t.footer.index_len as u64).sum()
}

/// Index-block bytes of the tables `keys` make, how many tables, and how
/// many of them fell back to the sparse index (the tables are built, not
/// written).
fn index_only(
    keys: &[Vec<u8>],
    value_len: usize,
    index: (IndexKind, bool),
    table_bytes: usize,
) -> Result<(u64, usize, usize)> {
    let (mut bytes, mut tables, mut fallbacks) = (0u64, 0usize, 0usize);
    cut_tables(keys, value_len, index, 1, table_bytes, &mut |t| {
        bytes += t.index_bytes as u64;
        tables += 1;
        fallbacks += usize::from(t.sparse_fallback);
        Ok(())
    })?;
    Ok((bytes, tables, fallbacks))
}

/// Key set and value size → (sparse bytes, learned bytes, tables), →
/// learned-index tables that fell back to sparse, and → the learned bytes
/// had every table kept its model.
type IndexSizes = (
    BTreeMap<String, (u64, u64, usize)>,
    BTreeMap<String, usize>,
    BTreeMap<String, u64>,
);

/// Value sizes of the index-size comparison: the paper's (1 KiB, its
/// §4.1 setup, which the claims use) and this experiment's two shapes.
const INDEX_VALUE_BYTES: [usize; 3] = [1024, 100, 8];

fn index_sizes(ctx: &ReproContext, s: &Sizes) -> Result<IndexSizes> {
    let table_bytes = LsmOptions::default().table_bytes;
    let mut sets: Vec<(String, Vec<Vec<u8>>)> = Vec::new();
    // Every real key set there is (GeoLite2 from the shared data, the
    // project's own from `scripts/make-keys.sh`).
    for (name, path) in ctx.real_key_sets() {
        let mut k = read_sosd(&path)?;
        k.sort_unstable();
        k.dedup();
        sets.push((name, k.iter().map(|x| x.to_be_bytes().to_vec()).collect()));
    }
    let n = s.model_records;
    sets.push((
        "sequential".into(),
        (0..n).map(|i| i.to_be_bytes().to_vec()).collect(),
    ));
    let mut uniform: Vec<Vec<u8>> = (0..n)
        .map(|i| crate::keyset::mix64(i).to_be_bytes().to_vec())
        .collect();
    uniform.sort_unstable();
    sets.push(("uniform".into(), uniform));
    let (mut out, mut fallbacks, mut models) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
    for (name, keys) in sets {
        for value_len in INDEX_VALUE_BYTES {
            let sparse = (IndexKind::Sparse, true);
            let (sparse, _, _) = index_only(&keys, value_len, sparse, table_bytes)?;
            let engine = (IndexKind::LEARNED, true);
            let (learned, tables, fell) = index_only(&keys, value_len, engine, table_bytes)?;
            let models_only = (IndexKind::LEARNED, false);
            let (model_bytes, _, _) = index_only(&keys, value_len, models_only, table_bytes)?;
            let set = format!("{name}_v{value_len}");
            out.insert(set.clone(), (sparse, learned, tables));
            fallbacks.insert(set.clone(), fell);
            models.insert(set, model_bytes);
        }
    }
    Ok((out, fallbacks, models))
}

/// Lookups of existing keys with every block cached: the index's cost.
fn lookup_latency(tables: &[Table], keys: &[Vec<u8>], probes: usize) -> Result<(f64, f64)> {
    // Warm every block.
    for t in tables {
        for b in 0..t.block_count() {
            t.block(b).map_err(store_err)?;
        }
    }
    let mut rng = SmallRng::seed_from_u64(11);
    let mut hist = Latencies::new();
    let mut total = 0.0;
    for _ in 0..probes {
        let k = &keys[rng.gen_range(0..keys.len())];
        let h = Bloom::hash(k);
        let t0 = Instant::now();
        let i = tables.partition_point(|t| t.largest() < k.as_slice());
        let found = tables
            .get(i)
            .map(|t| t.get(k, h))
            .transpose()
            .map_err(store_err)?;
        let ns = t0.elapsed().as_nanos() as u64;
        if found.flatten().is_none() {
            return Err(BenchError::Config(
                "swiftkv: model lookup lost a key".into(),
            ));
        }
        total += ns as f64;
        hist.record_ns(ns);
    }
    Ok((total / probes as f64, hist.quantile_us(0.99) * 1e3))
}

/// Training threads → total training milliseconds.
type ThreadRows = Vec<(usize, f64)>;

fn models(s: &Sizes) -> Result<(Vec<ModelRow>, ThreadRows)> {
    let shape = &SHAPES[0];
    let keyset = KeySet::new((shape.keys)(), 7)?;
    let mut keys: Vec<Vec<u8>> = (0..s.model_records)
        .map(|i| {
            let mut k = Vec::new();
            keyset.key(i, &mut k);
            k
        })
        .collect();
    keys.sort_unstable();
    let table_bytes = LsmOptions::default().table_bytes;
    let kinds = [
        ("sparse", IndexKind::Sparse),
        (
            "lr",
            IndexKind::Learned {
                fit: FitKind::Linear,
                eps: 8.0,
            },
        ),
        (
            "plr",
            IndexKind::Learned {
                fit: FitKind::Piecewise,
                eps: 8.0,
            },
        ),
        ("two-level", IndexKind::LEARNED),
        ("bourbon", IndexKind::BOURBON),
    ];
    let probes = (s.model_records as usize).min(500_000);
    let mut rows = Vec::new();
    for (name, kind) in kinds {
        let (space, cache) = memory_space();
        let tables = build_tables(&keys, 100, kind, 1, table_bytes, &space, &cache)?;
        let (mean, p99) = lookup_latency(&tables, &keys, probes)?;
        rows.push(ModelRow {
            kind: name.into(),
            tables: tables.len(),
            training_ms: tables
                .iter()
                .map(|t| t.props.training_micros as f64)
                .sum::<f64>()
                / 1e3,
            index_bytes: index_bytes(&tables),
            index_memory: tables.iter().map(|t| t.index.memory_bytes() as u64).sum(),
            segments: tables.iter().map(|t| t.index.model_segments() as u64).sum(),
            lookup_ns_mean: mean,
            lookup_ns_p99: p99,
        });
    }
    let mut threads = Vec::new();
    for t in [1usize, 2, 4, 8] {
        let (space, cache) = memory_space();
        let tables = build_tables(
            &keys,
            100,
            IndexKind::LEARNED,
            t,
            table_bytes,
            &space,
            &cache,
        )?;
        threads.push((
            t,
            tables
                .iter()
                .map(|x| x.props.training_micros as f64)
                .sum::<f64>()
                / 1e3,
        ));
    }
    Ok((rows, threads))
}

/// Partition counts compared (SwiftKV's default is 64).
const PARTITIONS: [usize; 2] = [1, 64];
/// Longest scan of the scan mix (YCSB-E's default).
const SCAN_MAX: u64 = 100;

/// Point lookups and short scans (uniform length 1..=100, YCSB-E) on a
/// store with one partition and one with SwiftKV's 64, side by side,
/// everything cached.
fn partitions_part(ctx: &ReproContext, s: &Sizes) -> Result<PartitionResults> {
    let shape = &SHAPES[0];
    let root = ctx.work_dir.join("swiftkv").join("partitions");
    let _ = std::fs::remove_dir_all(&root);
    let keys = KeySet::new((shape.keys)(), 7)?;
    let sizes = Sizes {
        records: s.partition_records,
        ..*s
    };
    let cache = s.partition_records * 400;
    let dirs: Vec<PathBuf> = PARTITIONS
        .iter()
        .map(|p| root.join(format!("p{p}")))
        .collect();
    let stores: Vec<LsmStore> = PARTITIONS
        .iter()
        .zip(&dirs)
        .map(|(&p, dir)| {
            let lsm = lsm_options(IndexKind::LEARNED, sizes.records, shape, ctx.compression)
                .partitions(p);
            open_lsm(dir, lsm, cache)
        })
        .collect::<Result<_>>()?;
    progress!(ctx, "swiftkv partitions: load");
    let load_secs = load(&stores, &dirs, &keys, shape, &sizes)?;
    let writes: Vec<(f64, f64, f64)> = stores
        .iter()
        .zip(load_secs.iter().map(|c| c.iter().sum::<f64>()))
        .map(|(db, secs)| {
            let st = db.stats();
            let flushed = st
                .engine::<LsmStats>()
                .map_or(f64::NAN, |l| l.l0_flushed_tables as f64);
            let amp = st.device.write_bytes as f64 / st.user_bytes_written.max(1) as f64;
            (sizes.records as f64 / secs.max(1e-9) / 1e3, flushed, amp)
        })
        .collect();
    for db in &stores {
        db.flush().map_err(store_err)?;
        db.wait_for_compactions().map_err(store_err)?;
        db.scan(KeyRange::all(), &mut |_, _| {
            std::ops::ControlFlow::Continue(())
        })
        .map_err(store_err)?;
    }
    let point = drive(
        &stores,
        &keys,
        shape,
        sizes.records,
        Mix {
            ops: s.ops / 2,
            chunks: s.chunks,
            zipf: false,
            reads_in_ten: 10,
            seed: 21,
        },
    )?;
    let mut scan_secs = vec![0.0; stores.len()];
    let scans = (s.ops / 20).max(100);
    let chunk = (scans / s.chunks).max(1);
    let mut k = Vec::new();
    alternate(stores.len(), s.chunks, |i, c| {
        let mut rng = SmallRng::seed_from_u64(31 + c);
        let t = Instant::now();
        for _ in 0..chunk {
            keys.key(rng.gen_range(0..sizes.records), &mut k);
            let len = rng.gen_range(1..=SCAN_MAX);
            let mut n = 0;
            stores[i]
                .scan(KeyRange::from_bounds(&k[..]..), &mut |_, _| {
                    n += 1;
                    if n >= len {
                        std::ops::ControlFlow::Break(())
                    } else {
                        std::ops::ControlFlow::Continue(())
                    }
                })
                .map_err(store_err)?;
        }
        scan_secs[i] += t.elapsed().as_secs_f64();
        Ok(())
    })?;
    for db in &stores {
        db.verify().map_err(store_err)?;
    }
    drop(stores);
    let _ = std::fs::remove_dir_all(&root);
    Ok(PartitionResults {
        records: sizes.records,
        writes,
        runs: PARTITIONS
            .iter()
            .enumerate()
            .map(|(i, &p)| {
                (
                    p,
                    point.get(i).map_or(f64::NAN, |(r, _)| r.kops()),
                    (chunk * s.chunks) as f64 / scan_secs[i].max(1e-9) / 1e3,
                )
            })
            .collect(),
    })
}

fn peers(ctx: &ReproContext, s: &Sizes, shape: &Shape) -> Result<Option<PeerResults>> {
    if !Target::RocksDb.available() {
        return Ok(None);
    }
    let mut out = PeerResults::default();
    let plan = |workloads: Vec<Workload>, cache: CacheBudget, warm_scan: bool| BenchPlan {
        settle: true,
        warm_scan,
        at_rest: false,
        targets: vec![Target::Ferrite(ferrite::EngineKind::Lsm), Target::RocksDb],
        keys: (shape.keys)(),
        values: ValueSpec::Fixed {
            bytes: shape.value_bytes,
        },
        records: s.peer_records,
        workloads,
        ops: s.peer_ops,
        duration: None,
        warmup_ops: s.peer_ops / 5,
        threads: 1,
        repeats: 5,
        cache,
        sync: SyncMode::Never,
        direct_io: true,
        compression: ctx.compression,
        dir: ctx.work_dir.join("swiftkv-peers"),
        seed: 42,
        show_progress: ctx.show_progress,
        bulk_load: false,
    };
    let read = || Workload::parse("read=1.0,dist=uniform");
    let raw = s.peer_records as f64 * (shape.key_bytes + shape.value_bytes) as f64;
    // In-cache: room for the data twice over (tables are larger than raw
    // pairs); then 10% of the data.
    let cases = [
        (
            "read_incache",
            vec![read()?],
            CacheBudget::Bytes((raw * 2.5) as u64),
        ),
        (
            "ycsb",
            ["read=1.0,dist=uniform", "a", "b", "c", "d", "f"]
                .iter()
                .map(|w| Workload::parse(w))
                .collect::<Result<Vec<_>>>()?,
            CacheBudget::RatioOfData(0.1),
        ),
    ];
    for (case, workloads, cache) in cases {
        // In-cache runs start from a full scan; at 10% a scan would only
        // fill the cache with the last tenth of the keys.
        let report = plan(workloads, cache, case == "read_incache").execute()?;
        for w in report.workloads() {
            let get = |store: &str| {
                report
                    .row(store, &w)
                    .map(|r| r.ops_per_sec)
                    .unwrap_or(f64::NAN)
            };
            let label = if case == "read_incache" {
                "read_incache".to_string()
            } else if w.starts_with("read=") {
                "read_cache10".to_string()
            } else {
                w.clone()
            };
            out.runs.insert(label, (get("lsm"), get("rocksdb")));
        }
    }
    Ok(Some(out))
}

claims! {
    struct Claims {
        read_speedup_vs_sparse_incache >= 1.4, "1.5-2.1x random reads (vs RocksDB)";
        read_speedup_vs_sparse_cache10 >= 1.1, "1.19-1.60x read throughput";
        p99_ratio_vs_sparse <= 0.7, "72% lower read-only P99";
        read_speedup_vs_rocksdb_incache >= 1.0, "1.5-2.1x";
        read_speedup_vs_rocksdb_cache10 >= 1.0, "1.19-1.60x";
        min_ycsb_ratio_vs_rocksdb >= 1.0, "0.8-1.6x, better on all but E";
        index_size_ratio_geolite2 <= 0.7, "30% smaller on average (Table 1)";
        index_size_ratio_sequential <= 0.7, "32.79% smaller (SEQ)";
        max_index_size_ratio <= 1.0, "(every key set and value size: never larger than sparse)";
        write_ratio_vs_sparse >= 0.95, "without affecting write performance";
    }
}

impl Study for SwiftRepro {
    type Results = Results;
    type Claims = Claims;

    const NAME: &'static str = "swiftkv";

    const SUMMARY: &'static str = "SwiftKV: learned vs sparse SSTable index blocks in one LSM engine, vs RocksDB, index sizes, model types";

    type Sizes = Sizes;

    fn measure(&self, ctx: &ReproContext, s: Sizes) -> Result<Results> {
        let mut results = Results {
            sizes: s,
            compression: ctx.compression.to_string(),
            ..Results::default()
        };
        progress!(ctx, "swiftkv: index sizes");
        (
            results.index_sizes,
            results.index_fallbacks,
            results.index_model_bytes,
        ) = index_sizes(ctx, &s)?;
        progress!(ctx, "swiftkv: model types");
        let (rows, threads) = models(&s)?;
        results.models = rows;
        results.threads = threads;
        results.partitions = partitions_part(ctx, &s)?;
        for shape in &SHAPES {
            let r = run_shape(ctx, &s, shape)?;
            results.shapes.insert(shape.name.into(), r);
            // RocksDB runs on the paper's shape only (16-byte keys), which
            // keeps the default scale near half an hour.
            if shape.name == SHAPES[0].name {
                if let Some(p) = peers(ctx, &s, shape)? {
                    results.peers.insert(shape.name.into(), p);
                }
            }
        }
        let _ = std::fs::remove_dir_all(ctx.work_dir.join("swiftkv"));
        Ok(results)
    }

    fn params(&self, r: &Results) -> serde_json::Value {
        json!({
            "shapes": SHAPES.iter().map(|x| json!({"name": x.name, "key_bytes": x.key_bytes, "value_bytes": x.value_bytes})).collect::<Vec<_>>(),
            "partitions_compared": PARTITIONS,
            "learned_eps": 32.0,
            "learned_eps_cap": "a quarter of the table's mean entries per block",
            "block_bytes": 4096,
            "bloom_bits_per_key": 10,
            "sync": "never",
            "threads": 1,
            "compression": r.compression,
            "rocksdb": Target::RocksDb.available(),
        })
    }

    fn metrics(&self, r: &Results, c: &mut Claims) -> Metrics {
        metrics_of(r, c)
    }

    fn render(&self, r: &Results, metrics: &Metrics, doc: &mut Report) -> Result<()> {
        render(r, metrics, doc)
    }
}

fn ratio(v: &[ReadRun], f: fn(&ReadRun) -> f64) -> f64 {
    match v {
        [sparse, learned] => f(learned) / f(sparse),
        _ => f64::NAN,
    }
}

fn metrics_of(r: &Results, c: &mut Claims) -> Metrics {
    let mut m = Metrics::new();
    for (shape, sr) in &r.shapes {
        for (case, runs) in &sr.reads {
            let key = case.replace('/', "_");
            m.set(format!("{shape}_speedup_{key}"), speedup(runs));
            m.set(format!("{shape}_p99_ratio_{key}"), p99_ratio(runs));
            m.set(
                format!("{shape}_pooled_speedup_{key}"),
                ratio(runs, ReadRun::kops),
            );
            m.set(
                format!("{shape}_pooled_p99_ratio_{key}"),
                ratio(runs, |x| x.p99_us),
            );
        }
        for (us, runs) in &sr.devices {
            m.set(
                format!("{shape}_speedup_cache10_uniform_device_{us}us"),
                speedup(runs),
            );
        }
        let speed = |case: &str| sr.reads.get(case).map_or(f64::NAN, |v| speedup(v));
        c.read_speedup_vs_sparse_incache
            .least(speed("incache/uniform"));
        c.read_speedup_vs_sparse_cache10
            .least(speed("cache10/uniform"));
        // The claim is a ceiling: the worst (largest) ratio over shapes.
        let p99 = sr.reads.get("incache/uniform").map(|v| p99_ratio(v));
        c.p99_ratio_vs_sparse.most(p99.unwrap_or(f64::NAN));
        if let [sparse, learned] = sr.load_kops.as_slice() {
            let pooled = learned / sparse;
            m.set(format!("{shape}_pooled_write_ratio"), pooled);
            let ratio = match sr.load_chunk_secs.as_slice() {
                [a, b] if !a.is_empty() && a.len() == b.len() => {
                    report::median(&a.iter().zip(b).map(|(a, b)| a / b).collect::<Vec<_>>())
                }
                _ => pooled,
            };
            m.set(format!("{shape}_write_ratio"), ratio);
            c.write_ratio_vs_sparse.least(ratio);
        }
        if let [sparse, learned] = sr.index_bytes.as_slice() {
            let ratio = *learned as f64 / *sparse as f64;
            m.set(format!("{shape}_index_size_ratio"), ratio);
        }
    }
    for (shape, p) in &r.peers {
        for (w, (lsm, rocks)) in &p.runs {
            m.set(format!("{shape}_vs_rocksdb_{w}"), lsm / rocks);
        }
        let get = |w: &str| p.runs.get(w).map_or(f64::NAN, |(a, b)| a / b);
        c.read_speedup_vs_rocksdb_incache.least(get("read_incache"));
        c.read_speedup_vs_rocksdb_cache10.least(get("read_cache10"));
        for w in ["A", "B", "C", "D", "F"] {
            c.min_ycsb_ratio_vs_rocksdb.least(get(w));
        }
    }
    if let [(_, p1, s1), (_, pn, sn)] = r.partitions.runs.as_slice() {
        m.set("partitioned_point_ratio", pn / p1);
        m.set("partitioned_scan_ratio", sn / s1);
    }
    for (set, (sparse, learned, _)) in &r.index_sizes {
        let ratio = *learned as f64 / *sparse as f64;
        c.max_index_size_ratio.most(ratio);
        m.set(format!("index_size_ratio_{set}"), ratio);
        // The claims use the paper's record shape (1 KiB values).
        match set.strip_suffix("_v1024") {
            Some("geolite2") => c.index_size_ratio_geolite2.set(ratio),
            Some("sequential") => c.index_size_ratio_sequential.set(ratio),
            Some(base) => {
                m.set(format!("index_size_ratio_{base}"), ratio);
            }
            None => {}
        }
    }
    m
}

fn render(r: &Results, metrics: &Metrics, doc: &mut Report) -> Result<()> {
    let _ = writeln!(
        doc,
        "# SwiftKV: learned SSTable index blocks in an LSM-tree (`swiftkv`)\n\n\
         The LSM engine (`crates/ferrite-lsm`) with learned index blocks (two-level Greedy-PLR + LR, ε = 32 entries capped at a quarter of a table's entries per block, \
         and a one-byte threshold per block boundary naming which block of a window holds a key) \
         against the same engine with sparse index blocks (one shortened separator per 4 KiB block, binary search), \
         loaded with the same records in the same random order, side by side in alternating chunks (a variant's load time \
         covers its writes and the flushes and compactions they cause: each chunk ends when the store has settled), durability `never`, \
         O_DIRECT, one client thread; filters (10 bits/key) and index blocks are charged to the cache budget. \
         Table blocks compressed with {} (RocksDB's alike; pseudo-random values: a block is packed only where it \
         shrinks by an eighth); cache sizes are fractions of the tables with data blocks uncompressed, \
         as the cache holds them. \
         Reproduce with `cargo run --release -- repro swiftkv --out docs/results` \
         (add `--features rocksdb` for the RocksDB rows).\n",
        if r.compression.is_empty() {
            // Runs from before tables were compressed.
            "none (RocksDB: its default, Snappy)"
        } else {
            r.compression.as_str()
        }
    );
    for (shape, sr) in &r.shapes {
        let _ = writeln!(
            doc,
            "## {shape}: {} records\n\n\
             | | sparse | learned |\n|---|---|---|",
            sr.records
        );
        let pair = |v: &[f64]| match v {
            [a, b] => format!("{a:.1} | {b:.1}"),
            _ => "- | -".into(),
        };
        let _ = writeln!(doc, "| load, kops/s | {} |", pair(&sr.load_kops));
        if let Some(r) = metrics.get(&format!("{shape}_write_ratio")) {
            let _ = writeln!(
                doc,
                "| load throughput, learned / sparse (median of side-by-side chunks) | | {r:.3} |"
            );
        }
        let _ = writeln!(
            doc,
            "| write stalls, s | {} |",
            pair(
                &sr.write_stall_micros
                    .iter()
                    .map(|x| x / 1e6)
                    .collect::<Vec<_>>()
            )
        );
        let mib = |v: &[u64]| {
            pair(
                &v.iter()
                    .map(|x| *x as f64 / (1 << 20) as f64)
                    .collect::<Vec<_>>(),
            )
        };
        let _ = writeln!(doc, "| tables, MiB | {} |", mib(&sr.table_bytes));
        if !sr.cached_bytes.is_empty() {
            let _ = writeln!(
                doc,
                "| tables with data blocks uncompressed (what the cache holds), MiB | {} |",
                mib(&sr.cached_bytes)
            );
        }
        let _ = writeln!(
            doc,
            "| index blocks, KiB | {} |",
            pair(
                &sr.index_bytes
                    .iter()
                    .map(|x| *x as f64 / 1024.0)
                    .collect::<Vec<_>>()
            )
        );
        let _ = writeln!(
            doc,
            "| tables per level | {} |\n",
            sr.levels
                .iter()
                .map(|l| format!("{l:?}"))
                .collect::<Vec<_>>()
                .join(" | ")
        );
        let _ = writeln!(
        doc,
            "| reads | cache, MiB | sparse kops/s | learned kops/s | speedup (pooled) | speedup (median of chunks) | sparse p99 µs | learned p99 µs | p99 ratio (pooled) | p99 ratio (median of chunks) | device KiB read/op (sparse, learned) |\n\
             |---|---|---|---|---|---|---|---|---|---|---|"
        );
        for (case, runs) in &sr.reads {
            if let [a, b] = runs.as_slice() {
                let setting = case.split('/').next().unwrap_or_default();
                let _ = writeln!(
        doc,
                    "| {case} | {:.0} | {:.1} | {:.1} | {:.2}× | {:.2}× | {:.1} | {:.1} | {:.2} | {:.2} | {:.2}, {:.2} |",
                    sr.cache_bytes.get(setting).copied().unwrap_or(0) as f64 / (1 << 20) as f64,
                    a.kops(),
                    b.kops(),
                    b.kops() / a.kops(),
                    speedup(runs),
                    a.p99_us,
                    b.p99_us,
                    b.p99_us / a.p99_us,
                    p99_ratio(runs),
                    a.read_bytes_per_op / 1024.0,
                    b.read_bytes_per_op / 1024.0,
                );
            }
        }
        let _ = writeln!(
        doc,
            "\nThe stores run in alternating chunks ({} per distribution); the claims take the median over chunks of \
             the ratio between chunks that ran side by side, so a burst of load from the machine's other tenants \
             moves one ratio rather than the whole result. \
             With every block cached, a learned lookup replaces the binary search over the index block with one \
             prediction and searches a few slots of the predicted block. With 10% cached, lookups wait on the device: \
             a sparse lookup reads the one block its separator names, and a learned one the block its prediction \
             names, or, when the model's window spans two blocks, the one the index's block-boundary thresholds \
             name (one byte per boundary; where a boundary has none, both blocks in one contiguous read, which \
             the device column counts). Both variants thus read about one block per uncached lookup, and the \
             index's CPU time is a small part of a lookup's.\n",
            sr.reads.values().next().and_then(|v| v.first()).map_or(0, |r| r.chunk_ops_per_sec.len())
        );
        if !sr.devices.is_empty() {
            let _ = writeln!(
        doc,
                "Uniform reads at 10% cache on emulated devices: both variants' loaded stores copied into memory, \
                 every table read taking a fixed time (counted from when it starts, so the copy's own time is \
                 part of it), with the warm-up and alternating chunks of the disk runs. The last row is the disk \
                 run above.\n\n\
                 | device | sparse kops/s | learned kops/s | speedup (pooled) | speedup (median of chunks) | sparse p50 µs | learned p50 µs | device KiB read/op (sparse, learned) |\n\
                 |---|---|---|---|---|---|---|---|"
            );
            let mut row = |device: String, runs: &[ReadRun]| {
                if let [a, b] = runs {
                    let _ = writeln!(
        doc,
                        "| {device} | {:.1} | {:.1} | {:.2}× | {:.2}× | {:.1} | {:.1} | {:.2}, {:.2} |",
                        a.kops(),
                        b.kops(),
                        b.kops() / a.kops(),
                        speedup(runs),
                        a.p50_us,
                        b.p50_us,
                        a.read_bytes_per_op / 1024.0,
                        b.read_bytes_per_op / 1024.0,
                    );
                }
            };
            for (us, runs) in &sr.devices {
                row(format!("memory, reads take {us} µs"), runs);
            }
            if let Some(runs) = sr.reads.get("cache10/uniform") {
                row("this host's disk (O_DIRECT)".into(), runs);
            }
        }
        let _ = writeln!(
        doc,
            "\nRead/write-ratio sweep (zipfian, cache = 10% of data; updates overwrite loaded keys; \
             a chunk with updates ends when its store has settled):\n\n\
             | reads:writes | sparse reads/s | learned reads/s | speedup |\n|---|---|---|---|"
        );
        for (_, label) in SWEEP {
            if let Some([a, b]) = sr.sweep.get(label).map(Vec::as_slice) {
                let _ = writeln!(
                    doc,
                    "| {label} | {:.0} | {:.0} | {:.2}× |",
                    a.0,
                    b.0,
                    b.0 / a.0
                );
            }
        }
        let _ = writeln!(doc);
        // x: the writes' share of the operations, from SWEEP's reads in ten.
        let series: Vec<(String, Vec<(f64, f64)>)> = VARIANTS
            .iter()
            .enumerate()
            .map(|(i, v)| {
                (
                    format!("{v} index blocks"),
                    SWEEP
                        .iter()
                        .filter_map(|(reads, l)| {
                            let x = sr.sweep.get(*l).and_then(|x| x.get(i))?;
                            Some((f64::from(10 - reads) * 10.0, x.0 / 1e3))
                        })
                        .collect(),
                )
            })
            .collect();
        report::plot_xy(
            &format!("SwiftKV's learned against sparse index blocks, {shape}: read throughput as writes grow"),
            "writes (% of operations)",
            "reads (kops/s)",
            &series,
            &doc.dir().join(format!("sweep_{shape}.svg")),
        )?;
        let _ = writeln!(doc, "![sweep](swiftkv/sweep_{shape}.svg)\n");
    }
    let _ = writeln!(
        doc,
        "## Index-block size\n\nThe same sorted records (8-byte keys; values of 1 KiB as in the paper's setup, which the claims use, \
         and of 100 and 8 bytes) written as {} MiB tables with each index kind. The sparse index keeps one shortened separator per block, \
         so its size falls with the entries a block holds; the learned index's size follows the key distribution. \
         A table whose model would take more bytes than its separators gets the sparse index instead (`fell back` counts them; `models only` is the learned index had every table kept its model), \
         so the learned index is never the larger. Key sets: every SOSD file in the shared data and in `data/keys` \
         (`scripts/make-keys.sh`; provenance in `data/README.md`), 8-byte sequential and uniform random keys.\n\n\
         | key set, value bytes | tables | sparse index bytes | learned index bytes | learned / sparse | fell back | models only, bytes | models only / sparse |\n|---|---|---|---|---|---|---|---|",
        LsmOptions::default().table_bytes >> 20
    );
    for (set, (sparse, learned, tables)) in &r.index_sizes {
        let _ = writeln!(
            doc,
            "| {set} | {tables} | {sparse} | {learned} | {:.3} | {} | {} | {} |",
            *learned as f64 / *sparse as f64,
            r.index_fallbacks
                .get(set)
                .map_or_else(|| "–".to_string(), |n| n.to_string()),
            r.index_model_bytes
                .get(set)
                .map_or_else(|| "–".to_string(), |n| n.to_string()),
            r.index_model_bytes.get(set).map_or_else(
                || "–".to_string(),
                |n| format!("{:.3}", *n as f64 / *sparse as f64)
            ),
        );
    }
    let _ = writeln!(
        doc,
        "\n## Model types\n\nOne set of tables (16-byte keys, sorted) built with each index kind; lookups of existing keys with every block cached, \
         so the time is the index's and the in-block search's. `lr`, `plr` and `two-level` search the model's window inside the predicted block; \
         `bourbon` is Bourbon's placement (Greedy-PLR, ε = 8 entries, used to pick the block, then a binary search over the whole block).\n\n\
         | index | tables | training ms | segments | index bytes | index memory bytes | lookup ns (mean) | lookup ns (p99) |\n|---|---|---|---|---|---|---|---|"
    );
    for m in &r.models {
        let _ = writeln!(
            doc,
            "| {} | {} | {:.1} | {} | {} | {} | {:.0} | {:.0} |",
            m.kind,
            m.tables,
            m.training_ms,
            m.segments,
            m.index_bytes,
            m.index_memory,
            m.lookup_ns_mean,
            m.lookup_ns_p99
        );
    }
    let kinds: Vec<String> = r.models.iter().map(|m| m.kind.clone()).collect();
    // Training time is in the table: on one axis with nanoseconds of
    // lookup it would only squash one or the other.
    report::plot_grouped_bars(
        "Index kinds over the same tables (16-byte keys): lookup time with every block cached",
        "lookup time (ns, log scale)",
        &kinds,
        &[
            (
                "mean".to_string(),
                r.models.iter().map(|m| Some(m.lookup_ns_mean)).collect(),
            ),
            (
                "p99".to_string(),
                r.models.iter().map(|m| Some(m.lookup_ns_p99)).collect(),
            ),
        ],
        true,
        &doc.dir().join("models.svg"),
    )?;
    let _ = writeln!(doc, "\n![models](swiftkv/models.svg)");
    let _ = writeln!(
        doc,
        "\nTraining time against training threads (two-level, the same tables; this machine has 2 cores):\n\n\
         | threads | training ms |\n|---|---|"
    );
    for (t, ms) in &r.threads {
        let _ = writeln!(doc, "| {t} | {ms:.1} |");
    }
    report::plot_xy(
        "Two-level model training over the same tables, by training threads (2 cores)",
        "training threads",
        "training time (ms)",
        &[(
            "two-level".to_string(),
            r.threads.iter().map(|&(t, ms)| (t as f64, ms)).collect(),
        )],
        &doc.dir().join("threads.svg"),
    )?;
    let _ = writeln!(doc, "\n![threads](swiftkv/threads.svg)\n");
    if !r.partitions.runs.is_empty() {
        let _ = writeln!(
        doc,
        "## Partitions\n\nSwiftKV's subtrees: {} records (16-byte keys, 100-byte values) in a store with one partition and one with 64 \
         (a key's partition is its first 8 bytes mod 64), learned indexes in both, everything cached, side by side. \
         A lookup searches one partition; a scan (YCSB-E: uniform length 1 to {SCAN_MAX}) merges all of them. \
         With partitions, a flushed memtable's share of each partition waits in the partition's flush buffer until it makes a \
         table's worth (or its WAL is about to be reused), so L0 tables are not cut 64 ways; the write columns show the load \
         (timed to settled tables), the L0 tables flushes wrote, and device bytes written per user byte.\n\n\
         | partitions | point lookups kops/s | scans kops/s | load kops/s | L0 tables written | write amplification |\n|---|---|---|---|---|---|",
        r.partitions.records
    );
        for (i, (p, point, scan)) in r.partitions.runs.iter().enumerate() {
            let (load, flushed, amp) =
                r.partitions
                    .writes
                    .get(i)
                    .copied()
                    .unwrap_or((f64::NAN, f64::NAN, f64::NAN));
            let _ = writeln!(
                doc,
                "| {p} | {point:.1} | {scan:.2} | {load:.1} | {flushed:.0} | {amp:.2} |"
            );
        }
        let _ = writeln!(doc);
    }
    if r.peers.is_empty() {
        let _ = writeln!(
        doc, "## Against RocksDB\n\nNot measured in this run (the build had no `rocksdb` feature).\n");
    } else {
        let _ = writeln!(
        doc,
            "## Against RocksDB\n\n`ferrite bench` with `lsm` and `rocksdb`: same records, same cache budget (RocksDB's index and filter blocks charged to its cache), \
             64 MiB memtables in both, durability `never`, medians of 5 repeats (alternating stores). \
             After the random-order load each store settles (its own flushes and compactions finish: \
             `KvStore::settle`), and the in-cache run starts from a full scan that warms the cache.\n\n\
             | shape | workload | lsm kops/s | rocksdb kops/s | ratio |\n|---|---|---|---|---|"
        );
        for (shape, p) in &r.peers {
            for (w, (a, b)) in &p.runs {
                let _ = writeln!(
                    doc,
                    "| {shape} | {w} | {:.1} | {:.1} | {:.2} |",
                    a / 1e3,
                    b / 1e3,
                    a / b
                );
            }
        }
    }
    doc.metrics(metrics);
    Ok(())
}
