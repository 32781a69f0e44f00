//! Load and run phases against one store.
//!
//! A run executes the same operation sequence on every store (the streams
//! are seeded per thread), times each operation into per-kind HDR
//! histograms (nanoseconds, 3 significant digits), and samples throughput
//! every 200 ms for timelines. Warm-up operations execute but are not
//! recorded.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ferrite::{KeyRange, KvStore, WriteBatch};
use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::SeedableRng;

use crate::error::{BenchError, Result};
use crate::keyset::{KeySet, ValueSpec};
use crate::process;
use crate::workload::{Op, OpKind, OpStream, RecordCounter, Workload};

/// Latency histogram bounds: 1 ns to 100 s.
fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("constant histogram bounds are valid")
}

/// Result of loading records.
#[derive(Debug, Clone, Copy)]
pub struct LoadResult {
    pub records: u64,
    pub seconds: f64,
    pub ops_per_sec: f64,
}

/// The data of a benchmark: which keys, which values.
#[derive(Debug, Clone, Copy)]
pub struct Dataset<'a> {
    pub keys: &'a KeySet,
    pub values: &'a ValueSpec,
}

/// How to load.
#[derive(Debug, Clone, Copy)]
pub struct LoadSpec {
    pub records: u64,
    pub threads: usize,
    /// Records per write batch.
    pub batch: usize,
    pub seed: u64,
}

/// Per-thread buffers for generating operations.
struct Scratch {
    rng: SmallRng,
    key: Vec<u8>,
    value: Vec<u8>,
}

/// Inserts records `0..records` in batches, split over `threads`.
pub fn load(
    db: &dyn KvStore,
    data: Dataset<'_>,
    spec: LoadSpec,
    on_progress: &(dyn Fn(u64) + Sync),
) -> Result<LoadResult> {
    let Dataset { keys, values } = data;
    let LoadSpec {
        records,
        threads,
        batch,
        seed,
    } = spec;
    if records > keys.capacity() {
        return Err(BenchError::Config(format!(
            "{records} records asked but the key set holds {}",
            keys.capacity()
        )));
    }
    let threads = threads.max(1) as u64;
    let start = Instant::now();
    let failure: parking_lot::Mutex<Option<ferrite::Error>> = parking_lot::Mutex::new(None);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (lo, hi) = (records * t / threads, records * (t + 1) / threads);
            let failure = &failure;
            s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(seed ^ t);
                let (mut k, mut v) = (Vec::new(), Vec::new());
                let mut b = WriteBatch::new();
                let mut i = lo;
                while i < hi && failure.lock().is_none() {
                    b.clear();
                    let end = (i + batch.max(1) as u64).min(hi);
                    for r in i..end {
                        keys.key(r, &mut k);
                        values.value(r, 0, &mut rng, &mut v);
                        if let Err(e) = b.put(&k, &v) {
                            *failure.lock() = Some(e);
                            return;
                        }
                    }
                    if let Err(e) = db.write_batch(&b) {
                        *failure.lock() = Some(e);
                        return;
                    }
                    on_progress(end - i);
                    i = end;
                }
            });
        }
    });
    if let Some(e) = failure.into_inner() {
        return Err(BenchError::Store {
            target: "load".into(),
            source: e,
        });
    }
    db.flush().map_err(|e| BenchError::Store {
        target: "load".into(),
        source: e,
    })?;
    let seconds = start.elapsed().as_secs_f64();
    Ok(LoadResult {
        records,
        seconds,
        ops_per_sec: records as f64 / seconds.max(1e-9),
    })
}

/// Inserts records `0..records` in key order through
/// [`KvStore::bulk_load`] (engines with a bottom-up loader use it; others
/// get batches of 1000 in key order).
pub fn bulk_load(
    db: &dyn KvStore,
    data: Dataset<'_>,
    records: u64,
    seed: u64,
) -> Result<LoadResult> {
    let Dataset { keys, values } = data;
    if records > keys.capacity() {
        return Err(BenchError::Config(format!(
            "{records} records asked but the key set holds {}",
            keys.capacity()
        )));
    }
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..records)
        .map(|i| {
            let (mut k, mut v) = (Vec::new(), Vec::new());
            keys.key(i, &mut k);
            values.value(i, 0, &mut rng, &mut v);
            (k, v)
        })
        .collect();
    pairs.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let start = Instant::now();
    let n = db
        .bulk_load(&mut pairs.into_iter())
        .and_then(|n| db.flush().map(|_| n))
        .map_err(|e| BenchError::Store {
            target: "bulk load".into(),
            source: e,
        })?;
    let seconds = start.elapsed().as_secs_f64();
    Ok(LoadResult {
        records: n,
        seconds,
        ops_per_sec: n as f64 / seconds.max(1e-9),
    })
}

/// What to run.
#[derive(Debug, Clone)]
pub struct RunSpec<'a> {
    pub workload: &'a Workload,
    /// Measured operations, over all threads.
    pub ops: u64,
    /// If set, each thread measures for this long instead of counting `ops`.
    pub duration: Option<Duration>,
    /// Unmeasured operations before them, over all threads.
    pub warmup_ops: u64,
    pub threads: usize,
    pub seed: u64,
}

/// Result of one run.
#[derive(Debug, Clone)]
pub struct RunResult {
    pub ops: u64,
    pub seconds: f64,
    pub ops_per_sec: f64,
    pub latency: BTreeMap<OpKind, Histogram<u64>>,
    /// (seconds since start, operations per second) samples.
    pub timeline: Vec<(f64, f64)>,
    pub peak_rss_bytes: u64,
    /// Reads of records that should exist but were not found.
    pub missing_reads: u64,
}

fn exec(
    db: &dyn KvStore,
    op: Op,
    data: Dataset<'_>,
    s: &mut Scratch,
    version: u64,
) -> ferrite::Result<bool> {
    let Dataset { keys, values } = data;
    let (rng, k, v) = (&mut s.rng, &mut s.key, &mut s.value);
    match op {
        Op::Read(i) => {
            keys.key(i, k);
            Ok(db.get(k)?.is_some())
        }
        Op::Update(i) | Op::Insert(i) => {
            keys.key(i, k);
            values.value(i, version, rng, v);
            db.put(k, v)?;
            Ok(true)
        }
        Op::ReadModifyWrite(i) => {
            keys.key(i, k);
            let found = db.get(k)?.is_some();
            values.value(i, version, rng, v);
            db.put(k, v)?;
            Ok(found)
        }
        Op::Scan(i, n) | Op::ReverseScan(i, n) => {
            keys.key(i, k);
            let mut left = n;
            let mut visit = |_: &[u8], _: &[u8]| {
                left -= 1;
                if left == 0 {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            };
            if matches!(op, Op::Scan(..)) {
                db.scan(KeyRange::from_bounds(&k[..]..), &mut visit)?;
            } else {
                db.scan_rev(KeyRange::from_bounds(..=&k[..]), &mut visit)?;
            }
            Ok(true)
        }
        Op::DeleteRange(i, n) => {
            keys.key(i, k);
            keys.key(i + n, v);
            let (lo, hi) = if k <= v {
                (&k[..], &v[..])
            } else {
                (&v[..], &k[..])
            };
            if lo < hi {
                db.delete_range(lo, hi)?;
            }
            Ok(true)
        }
    }
}

/// Runs `spec` against `db`, whose records so far are counted by `records`.
pub fn run(
    db: &dyn KvStore,
    data: Dataset<'_>,
    records: &RecordCounter,
    spec: &RunSpec<'_>,
    on_progress: &(dyn Fn(u64) + Sync),
) -> Result<RunResult> {
    let threads = spec.threads.max(1) as u64;
    let done = AtomicU64::new(0);
    let measuring = AtomicU64::new(0);
    let failure: parking_lot::Mutex<Option<ferrite::Error>> = parking_lot::Mutex::new(None);
    let missing = AtomicU64::new(0);
    let mut timeline = Vec::new();
    let mut peak_rss = 0u64;
    type ThreadOut = (BTreeMap<OpKind, Histogram<u64>>, Option<(Instant, Instant)>);
    let per_thread: Vec<ThreadOut> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (done, measuring, failure, missing) = (&done, &measuring, &failure, &missing);
                s.spawn(move || {
                    let mut hist: BTreeMap<OpKind, Histogram<u64>> = BTreeMap::new();
                    let mut stream = OpStream::new(spec.workload, records, spec.seed ^ (t << 32));
                    let mut scratch = Scratch {
                        rng: SmallRng::seed_from_u64(spec.seed ^ (t << 40) ^ 0xabc),
                        key: Vec::new(),
                        value: Vec::new(),
                    };
                    let warm = spec.warmup_ops / threads;
                    let measured = spec.ops / threads + u64::from(t < spec.ops % threads);
                    let mut window: Option<(Instant, Instant)> = None;
                    let limit = if spec.duration.is_some() {
                        u64::MAX
                    } else {
                        warm + measured
                    };
                    for n in 0..limit {
                        if let (Some(d), Some((first, _))) = (spec.duration, window) {
                            if first.elapsed() >= d {
                                break;
                            }
                        }
                        let Some(op) = stream.next() else { break };
                        let version = spec.seed.wrapping_add(n);
                        let t0 = Instant::now();
                        if n == warm {
                            measuring.fetch_add(1, Ordering::AcqRel);
                            window = Some((t0, t0));
                        }
                        match exec(db, op, data, &mut scratch, version) {
                            Ok(found) => {
                                if n >= warm
                                    && !found
                                    && matches!(op, Op::Read(_) | Op::ReadModifyWrite(_))
                                {
                                    missing.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                            Err(e) => {
                                *failure.lock() = Some(e);
                                break;
                            }
                        }
                        if n >= warm {
                            let t1 = Instant::now();
                            let ns = (t1 - t0).as_nanos() as u64;
                            let _ = hist
                                .entry(op.kind())
                                .or_insert_with(new_histogram)
                                .record(ns.max(1));
                            done.fetch_add(1, Ordering::Relaxed);
                            if let Some(w) = window.as_mut() {
                                w.1 = t1;
                            }
                        }
                    }
                    measuring.fetch_max(threads, Ordering::AcqRel);
                    (hist, window)
                })
            })
            .collect();
        // Sample throughput and memory until every thread is done.
        let mut started: Option<Instant> = None;
        let mut last = (Instant::now(), 0u64);
        let mut last_rss = Instant::now();
        loop {
            std::thread::sleep(Duration::from_millis(10));
            let now = Instant::now();
            if started.is_none() && measuring.load(Ordering::Acquire) > 0 {
                started = Some(now);
                last = (now, done.load(Ordering::Relaxed));
            }
            let finished = handles.iter().all(|h| h.is_finished());
            if now - last_rss >= Duration::from_millis(100) || finished {
                peak_rss = peak_rss.max(process::rss_bytes());
                last_rss = now;
            }
            if let Some(t0) = started {
                if now - last.0 >= Duration::from_millis(200) || finished {
                    let d = done.load(Ordering::Relaxed);
                    let span = (now - last.0).as_secs_f64();
                    if span > 0.0 && d > last.1 {
                        timeline.push(((now - t0).as_secs_f64(), (d - last.1) as f64 / span));
                    }
                    on_progress(d - last.1);
                    last = (now, d);
                }
            }
            if finished {
                break;
            }
        }
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    if let Some(e) = failure.into_inner() {
        return Err(BenchError::Store {
            target: "run".into(),
            source: e,
        });
    }
    // The measured window runs from the first thread's first measured
    // operation to the last thread's last one.
    let first = per_thread.iter().filter_map(|(_, w)| w.map(|w| w.0)).min();
    let last_end = per_thread.iter().filter_map(|(_, w)| w.map(|w| w.1)).max();
    let seconds = match (first, last_end) {
        (Some(a), Some(b)) => (b - a).as_secs_f64(),
        _ => 0.0,
    };
    let mut latency: BTreeMap<OpKind, Histogram<u64>> = BTreeMap::new();
    for (h, _) in per_thread {
        for (kind, hist) in h {
            let _ = latency.entry(kind).or_insert_with(new_histogram).add(&hist);
        }
    }
    let ops = done.load(Ordering::Relaxed);
    Ok(RunResult {
        ops,
        seconds,
        ops_per_sec: ops as f64 / seconds.max(1e-9),
        latency,
        timeline,
        peak_rss_bytes: peak_rss,
        missing_reads: missing.load(Ordering::Relaxed),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapter::{self, StoreConfig, Target};
    use crate::keyset::KeySpec;
    use ferrite::SyncMode;

    #[test]
    fn load_then_run_counts_every_operation() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = StoreConfig {
            cache_bytes: 1 << 20,
            sync: SyncMode::Never,
            direct_io: false,
            compression: adapter::Compression::default(),
        };
        let (db, _) = adapter::open(Target::BTreeMap, dir.path(), &cfg).unwrap();
        let keys = KeySet::new(KeySpec::UniformU64, 1).unwrap();
        let values = ValueSpec::Fixed { bytes: 8 };
        let data = Dataset {
            keys: &keys,
            values: &values,
        };
        let spec = LoadSpec {
            records: 10_000,
            threads: 2,
            batch: 100,
            seed: 1,
        };
        let l = load(db.as_ref(), data, spec, &|_| {}).unwrap();
        assert_eq!(l.records, 10_000);
        let counter = RecordCounter::new(10_000);
        let w = Workload::ycsb('A').unwrap();
        let spec = RunSpec {
            workload: &w,
            ops: 20_000,
            duration: None,
            warmup_ops: 1000,
            threads: 2,
            seed: 5,
        };
        let r = run(db.as_ref(), data, &counter, &spec, &|_| {}).unwrap();
        assert_eq!(r.ops, 20_000);
        let recorded: u64 = r.latency.values().map(|h| h.len()).sum();
        assert_eq!(recorded, 20_000);
        assert_eq!(r.missing_reads, 0, "every loaded record must be found");
        assert!(r.latency.contains_key(&OpKind::Read) && r.latency.contains_key(&OpKind::Update));
        let timed = RunSpec {
            duration: Some(Duration::from_millis(300)),
            ..spec
        };
        let r = run(db.as_ref(), data, &counter, &timed, &|_| {}).unwrap();
        assert!(
            r.ops > 0 && r.seconds >= 0.29,
            "{} ops in {} s",
            r.ops,
            r.seconds
        );
    }
}
