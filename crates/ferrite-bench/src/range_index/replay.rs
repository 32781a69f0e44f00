//! Synthetic operation streams for range indexes, the timed replay, and
//! the oracle check (streams from block traces come from
//! `ferrite_trace::range_op`).
//!
//! Values are assigned as a log-structured backend would: every write gets
//! the next free run of physical blocks, so two writes never share a
//! location and a divided or merged run is checkable block by block.

use std::collections::HashMap;
use std::time::Instant;

use ferrite_rask::{BlockRange, PhysicalRun, Segment};
use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};

use ferrite_trace::{RangeOp, RunAllocator};

use serde::Deserialize;

use super::{RangeIndex, RaskCounters};

/// `n` operations on a disk of `disk_blocks` blocks: ranges of 4 to 64
/// blocks (uniform) at uniform starts; `write_fraction` puts,
/// `delete_fraction` deletes, the rest gets.
pub fn synthetic_ops(
    n: u64,
    seed: u64,
    disk_blocks: u64,
    write_fraction: f64,
    delete_fraction: f64,
) -> Vec<RangeOp> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut alloc = RunAllocator::default();
    (0..n)
        .filter_map(|_| {
            let len = rng.gen_range(4..=64u64);
            let start = rng.gen_range(0..disk_blocks.saturating_sub(len).max(1));
            let r = BlockRange::with_len(start, len).ok()?;
            let x: f64 = rng.gen();
            Some(if x < write_fraction {
                RangeOp::Put(r, alloc.run(len))
            } else if x < write_fraction + delete_fraction {
                RangeOp::Delete(r)
            } else {
                RangeOp::Get(r)
            })
        })
        .collect()
}

/// Replays `ops` on `ix` and checks every get, block by block, against a
/// per-block oracle. Returns how many gets were checked.
pub fn verify(ix: &dyn RangeIndex, ops: &[RangeOp]) -> Result<u64, String> {
    let mut oracle: HashMap<u64, u64> = HashMap::new();
    let mut out = Vec::new();
    let mut checked = 0;
    for (i, op) in ops.iter().enumerate() {
        match *op {
            RangeOp::Put(r, v) => {
                ix.put(r, v);
                for b in r.l()..=r.r() {
                    oracle.insert(b, v.offset(b - r.l()).to_bits());
                }
            }
            RangeOp::Delete(r) => {
                ix.delete(r);
                for b in r.l()..=r.r() {
                    oracle.remove(&b);
                }
            }
            RangeOp::Get(r) => {
                out.clear();
                ix.get(r, &mut out);
                check_answer(&out, r, &oracle).map_err(|e| format!("op {i} get {r}: {e}"))?;
                checked += 1;
            }
        }
    }
    Ok(checked)
}

fn check_answer(
    out: &[Segment<PhysicalRun>],
    r: BlockRange,
    oracle: &HashMap<u64, u64>,
) -> Result<(), String> {
    let mut at = Some(r.l());
    for s in out {
        if Some(s.range.l()) != at {
            return Err(format!("segment {} does not continue at {at:?}", s.range));
        }
        for b in s.range.l()..=s.range.r() {
            let got = s.value.map(|v| v.offset(b - s.range.l()).to_bits());
            let want = oracle.get(&b).copied();
            if got != want {
                return Err(format!("block {b}: got {got:?}, expected {want:?}"));
            }
        }
        at = s.range.r().checked_add(1);
    }
    if at != r.r().checked_add(1) {
        return Err(format!("answer ends before {}", r.r()));
    }
    Ok(())
}

/// What one replay measured.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ReplayResult {
    pub index: String,
    pub ops: u64,
    pub seconds: f64,
    pub ops_per_sec: f64,
    /// Heap bytes the index holds after the replay (counting allocator).
    pub memory_bytes: Option<u64>,
    /// Latency percentiles over the sampled operations, nanoseconds.
    pub mean_ns: f64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub p9999_ns: u64,
    /// RASK's counters (the baselines keep none). Results saved before
    /// they were typed list them as `extra`, (name, value) pairs.
    #[serde(
        default,
        alias = "extra",
        deserialize_with = "saved_counters",
        skip_serializing_if = "Option::is_none"
    )]
    pub rask: Option<RaskCounters>,
}

/// Reads [`ReplayResult::rask`] as saved: the typed object, or the
/// (name, value) pairs of older results, matched to the fields by serde.
fn saved_counters<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<RaskCounters>, D::Error> {
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Saved {
        Pairs(Vec<(String, f64)>),
        Typed(RaskCounters),
    }
    let pairs = match Option::<Saved>::deserialize(d)? {
        None => return Ok(None),
        Some(Saved::Typed(c)) => return Ok(Some(c)),
        Some(Saved::Pairs(p)) if p.is_empty() => return Ok(None),
        Some(Saved::Pairs(p)) => p,
    };
    // Counts were saved as floats; a count field reads only an integer.
    let object = pairs
        .into_iter()
        .map(|(k, v)| {
            let n = if v.fract() == 0.0 && v >= 0.0 {
                serde_json::Value::from(v as u64)
            } else {
                serde_json::Value::from(v)
            };
            (k, n)
        })
        .collect();
    serde_json::from_value(serde_json::Value::Object(object))
        .map(Some)
        .map_err(serde::de::Error::custom)
}

/// Times replays.
#[derive(Debug, Clone, Copy, Default)]
pub struct Replayer {
    /// Every n-th operation is timed on its own for the latency
    /// percentiles; 0 times none (a throughput run: timer calls would
    /// otherwise count against the fastest index the most).
    pub sample_every: u64,
}

/// The replaying thread's net heap bytes. A replay runs on one thread,
/// and the index allocates and frees only on it, so the difference of two
/// readings is the index's growth, whatever other threads of the process
/// allocate meanwhile.
fn live_heap() -> Option<i64> {
    crate::counting_alloc::thread_net_bytes()
}

/// Frees what earlier indexes retired into crossbeam-epoch's default
/// collector and left there, and returns the replaying thread's heap
/// reading once it has. RASK and `congee` both retire memory through the
/// collector, and a later index's pins would free that backlog during its
/// own replay, so its heap growth would read low by the bytes freed.
///
/// First passes the epoch until the heap stops shrinking (without the
/// counting allocator nothing is measured and a few passes do). What is
/// left then is the collector's own bookkeeping, which must be brought to
/// one state for two readings to compare:
/// - Freeing a queued bag defers freeing its queue node, and the next
///   flush queues that as a new bag, so bags are always in flight. A flush
///   queues before it passes the epoch, so the bags in flight form one or
///   two chains, a chain a node or two of heap, depending on everything
///   pinned before.
/// - Plain pins collect without queueing (one pin in
///   [`PINS_PER_COLLECT`]), so a few hundred of them free every queued bag
///   and gather the deferred node frees into this thread's bag; one flush
///   then queues them as a single chain.
/// - A single chain still moves the heap by a node from one pass to the
///   next. The low point over a few passes is the same whatever phase the
///   passes start in, and that is the reading.
fn drain_retired() -> Option<i64> {
    let mut last = None;
    let mut steady = 0;
    for _ in 0..64 {
        for _ in 0..4 {
            crossbeam_epoch::pin().flush();
        }
        let now = live_heap()?;
        steady = if last == Some(now) { steady + 1 } else { 0 };
        if steady == 2 {
            break;
        }
        last = Some(now);
    }
    for _ in 0..3 * PINS_PER_COLLECT {
        drop(crossbeam_epoch::pin());
    }
    crossbeam_epoch::pin().flush();
    let mut low = live_heap()?;
    for _ in 0..BOOKKEEPING_PASSES {
        crossbeam_epoch::pin().flush();
        low = low.min(live_heap()?);
    }
    Some(low)
}

/// How many pins crossbeam-epoch makes between the collections a plain
/// pin triggers (its `PINNINGS_BETWEEN_COLLECT`). Were it to change, the
/// replay memory test would show the readings drifting again.
const PINS_PER_COLLECT: usize = 128;

/// Epoch passes [`drain_retired`] takes its low reading over: a chain's
/// cycle is two passes.
const BOOKKEEPING_PASSES: usize = 8;

impl Replayer {
    /// Builds index `name` from empty and replays `ops` on it.
    pub fn run(&self, name: &str, ops: &[RangeOp]) -> Option<ReplayResult> {
        self.run_pooled(name, ops, 1)
    }

    /// [`Replayer::run`] `runs` times, each on a fresh index, with the
    /// latency percentiles taken over the timed operations of all runs and
    /// the rest (time, memory, counters) from the last. A short stream's
    /// 99.9th percentile is its single slowest operation, which one
    /// preemption decides; pooling several replays makes it a percentile.
    ///
    /// An untimed warm-up replay of up to [`WARMUP_OPS`] operations on a
    /// fresh index of the same kind goes first, so the measured replays
    /// find the index's code and the stream in the caches, as a block
    /// server's index in constant use does, rather than where the previous
    /// index left them.
    pub fn run_pooled(&self, name: &str, ops: &[RangeOp], runs: usize) -> Option<ReplayResult> {
        let mut out: Vec<Segment<PhysicalRun>> = Vec::with_capacity(4096);
        let mut hist = Histogram::<u64>::new(3).ok()?;
        warm_up(name, &ops[..ops.len().min(WARMUP_OPS)], &mut out)?;
        let mut last = None;
        for _ in 0..runs.max(1) {
            last = Some(self.replay(name, ops, &mut out, &mut hist)?);
        }
        let (seconds, memory_bytes, rask) = last?;
        Some(ReplayResult {
            index: name.to_string(),
            ops: ops.len() as u64,
            seconds,
            ops_per_sec: ops.len() as f64 / seconds.max(1e-9),
            memory_bytes,
            mean_ns: hist.mean(),
            p50_ns: hist.value_at_quantile(0.5),
            p99_ns: hist.value_at_quantile(0.99),
            p999_ns: hist.value_at_quantile(0.999),
            p9999_ns: hist.value_at_quantile(0.9999),
            rask,
        })
    }

    /// One replay on a fresh index: its seconds, heap growth and counters.
    fn replay(
        &self,
        name: &str,
        ops: &[RangeOp],
        out: &mut Vec<Segment<PhysicalRun>>,
        hist: &mut Histogram<u64>,
    ) -> Option<Replay> {
        let before = drain_retired();
        let ix = super::make(name)?;
        let mut writes = 0u64;
        let every = self.sample_every;
        let started = Instant::now();
        for (i, op) in ops.iter().enumerate() {
            let timed = every > 0 && (i as u64).is_multiple_of(every);
            let t = timed.then(Instant::now);
            writes += u64::from(apply(&*ix, op, out));
            if let Some(t) = t {
                let _ = hist.record(t.elapsed().as_nanos() as u64);
            }
        }
        let seconds = started.elapsed().as_secs_f64();
        // The heap is read before the counters are gathered, so nothing
        // the harness allocates for them counts as the index's.
        ix.settle();
        let after = drain_retired();
        let counters = ix.counters(writes);
        let memory_bytes = match (before, after) {
            (Some(b), Some(a)) => Some(u64::try_from(a.saturating_sub(b)).unwrap_or(0)),
            _ => None,
        };
        drop(ix);
        Some((seconds, memory_bytes, counters))
    }
}

/// Most operations a warm-up replay runs (see [`Replayer::run_pooled`]).
pub const WARMUP_OPS: usize = 20_000;

/// Replays `ops` untimed on a fresh index `name`, then frees it.
fn warm_up(name: &str, ops: &[RangeOp], out: &mut Vec<Segment<PhysicalRun>>) -> Option<()> {
    let ix = super::make(name)?;
    for op in ops {
        apply(&*ix, op, out);
    }
    ix.settle();
    Some(())
}

/// Applies `op` to `ix` (a get's answer replaces `out`); true for a write.
#[inline]
fn apply(ix: &dyn super::RangeIndex, op: &RangeOp, out: &mut Vec<Segment<PhysicalRun>>) -> bool {
    match *op {
        RangeOp::Put(r, v) => {
            ix.put(r, v);
            true
        }
        RangeOp::Delete(r) => {
            ix.delete(r);
            true
        }
        RangeOp::Get(r) => {
            out.clear();
            ix.get(r, out);
            false
        }
    }
}

/// What one replay measured besides its latencies.
type Replay = (f64, Option<u64>, Option<RaskCounters>);
