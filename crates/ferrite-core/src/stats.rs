//! Engine-neutral statistics.
//!
//! Every engine reports the same [`Stats`] so tools and benchmarks can
//! compare them: operation counts, user bytes in and out, device bytes in
//! and out (their ratio is read and write amplification), cache hits and
//! misses, and memory held by engine structures. Engine-specific counters go
//! in [`Stats::extra`] under stable names. [`ApiCounters`] is what every
//! engine counts its API calls with.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use ferrite_io::IoStats;

/// Counts of API calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpCounts {
    pub gets: u64,
    pub puts: u64,
    pub deletes: u64,
    pub scans: u64,
    pub batches: u64,
}

/// The counters behind [`Stats::ops`], [`Stats::user_bytes_written`] and
/// [`Stats::user_bytes_read`], shared by concurrent callers. Relaxed: they
/// are statistics, read apart from the data they count, so a snapshot may
/// mix counts from either side of a call in flight.
#[derive(Debug, Default)]
pub struct ApiCounters {
    gets: AtomicU64,
    puts: AtomicU64,
    deletes: AtomicU64,
    scans: AtomicU64,
    batches: AtomicU64,
    written: AtomicU64,
    read: AtomicU64,
}

impl ApiCounters {
    /// One get of `key`, and the bytes it returned if it `found` a value.
    pub fn count_get(&self, key: &[u8], found: Option<&[u8]>) {
        self.gets.fetch_add(1, Relaxed);
        if let Some(v) = found {
            self.add_read((key.len() + v.len()) as u64);
        }
    }

    /// `n` puts (a bulk load counts each pair).
    pub fn count_puts(&self, n: u64) {
        self.puts.fetch_add(n, Relaxed);
    }

    pub fn count_delete(&self) {
        self.deletes.fetch_add(1, Relaxed);
    }

    pub fn count_scan(&self) {
        self.scans.fetch_add(1, Relaxed);
    }

    pub fn count_batch(&self) {
        self.batches.fetch_add(1, Relaxed);
    }

    /// Key and value bytes a write passed in.
    pub fn add_written(&self, bytes: u64) {
        self.written.fetch_add(bytes, Relaxed);
    }

    /// Key and value bytes a read or scan returned.
    pub fn add_read(&self, bytes: u64) {
        self.read.fetch_add(bytes, Relaxed);
    }

    pub fn ops(&self) -> OpCounts {
        OpCounts {
            gets: self.gets.load(Relaxed),
            puts: self.puts.load(Relaxed),
            deletes: self.deletes.load(Relaxed),
            scans: self.scans.load(Relaxed),
            batches: self.batches.load(Relaxed),
        }
    }

    pub fn bytes_written(&self) -> u64 {
        self.written.load(Relaxed)
    }

    pub fn bytes_read(&self) -> u64 {
        self.read.load(Relaxed)
    }
}

/// Device traffic, from `ferrite-io` accounting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceCounts {
    pub reads: u64,
    pub read_bytes: u64,
    pub writes: u64,
    pub write_bytes: u64,
    pub syncs: u64,
}

impl From<IoStats> for DeviceCounts {
    fn from(s: IoStats) -> Self {
        Self {
            reads: s.reads,
            read_bytes: s.read_bytes,
            writes: s.writes,
            write_bytes: s.write_bytes,
            syncs: s.syncs,
        }
    }
}

impl std::ops::Add for DeviceCounts {
    type Output = Self;
    fn add(self, o: Self) -> Self {
        Self {
            reads: self.reads + o.reads,
            read_bytes: self.read_bytes + o.read_bytes,
            writes: self.writes + o.writes,
            write_bytes: self.write_bytes + o.write_bytes,
            syncs: self.syncs + o.syncs,
        }
    }
}

/// Cache effectiveness.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheCounts {
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
}

impl CacheCounts {
    /// Hits over lookups, or `None` before the first lookup.
    pub fn hit_ratio(&self) -> Option<f64> {
        let total = self.hits + self.misses;
        (total > 0).then(|| self.hits as f64 / total as f64)
    }
}

/// An engine's own counters: a struct per engine (`BTreeStats`,
/// `LsmStats`, `ZkvStats`), read typed through [`Stats::engine`] and
/// listed by name for reports and `ferrite inspect`.
pub trait EngineStats: std::fmt::Debug + Send + Sync + std::any::Any {
    /// Every counter as (name, value), in a stable order.
    fn fields(&self) -> Vec<(String, f64)>;
}

/// A snapshot of an engine's counters since it was opened: the common ones
/// every engine keeps, and its own in [`Stats::engine`].
#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub ops: OpCounts,
    /// Key and value bytes passed in by writes.
    pub user_bytes_written: u64,
    /// Key and value bytes returned by reads and scans.
    pub user_bytes_read: u64,
    pub device: DeviceCounts,
    pub cache: CacheCounts,
    /// Bytes held by engine structures (caches, indexes, buffers).
    pub memory_bytes: u64,
    /// Live snapshots (and iterators, which read one).
    pub snapshots: u64,
    /// Bytes the live snapshots keep alive: old versions, or tables and
    /// memtables they pin.
    pub snapshot_bytes: u64,
    /// The engine's own counters.
    pub detail: Option<std::sync::Arc<dyn EngineStats>>,
    /// The store's bytes on its devices, by kind (empty for a store that
    /// does not report them).
    pub footprint: crate::Footprint,
}

impl Stats {
    /// Device bytes written per user byte written.
    pub fn write_amplification(&self) -> Option<f64> {
        (self.user_bytes_written > 0)
            .then(|| self.device.write_bytes as f64 / self.user_bytes_written as f64)
    }

    /// Device bytes read per user byte read.
    pub fn read_amplification(&self) -> Option<f64> {
        (self.user_bytes_read > 0)
            .then(|| self.device.read_bytes as f64 / self.user_bytes_read as f64)
    }

    /// The engine's own counters as their type (`BTreeStats`, ...), if
    /// the store is that engine.
    pub fn engine<T: EngineStats>(&self) -> Option<&T> {
        let d: &dyn std::any::Any = self.detail.as_deref()?;
        d.downcast_ref::<T>()
    }

    /// [`Stats::engine`] copied out, or all zeros when the store is
    /// another engine (deltas between two snapshots then stay zero).
    pub fn engine_or_default<T: EngineStats + Clone + Default>(&self) -> T {
        self.engine::<T>().cloned().unwrap_or_default()
    }

    /// One counter of [`Stats::fields`] by name, for reports and tools that
    /// render counters of any engine; code that knows its engine reads the
    /// typed struct through [`Stats::engine`].
    pub fn field(&self, name: &str) -> Option<f64> {
        self.fields()
            .into_iter()
            .find_map(|(n, v)| (n == name).then_some(v))
    }

    /// Every counter, common and the engine's own, as (name, value).
    pub fn fields(&self) -> Vec<(String, f64)> {
        let mut out: Vec<(String, f64)> = [
            ("gets", self.ops.gets),
            ("puts", self.ops.puts),
            ("deletes", self.ops.deletes),
            ("scans", self.ops.scans),
            ("batches", self.ops.batches),
            ("user_bytes_written", self.user_bytes_written),
            ("user_bytes_read", self.user_bytes_read),
            ("device_reads", self.device.reads),
            ("device_read_bytes", self.device.read_bytes),
            ("device_writes", self.device.writes),
            ("device_write_bytes", self.device.write_bytes),
            ("device_syncs", self.device.syncs),
            ("cache_hits", self.cache.hits),
            ("cache_misses", self.cache.misses),
            ("cache_evictions", self.cache.evictions),
            ("memory_bytes", self.memory_bytes),
            ("snapshots", self.snapshots),
            ("snapshot_bytes", self.snapshot_bytes),
        ]
        .into_iter()
        .map(|(n, v)| (n.to_string(), v as f64))
        .collect();
        if let Some(d) = &self.detail {
            out.extend(d.fields());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_counters_count_calls_and_bytes() {
        let c = ApiCounters::default();
        c.count_get(b"key", Some(b"value"));
        c.count_get(b"absent", None);
        c.count_puts(3);
        c.count_delete();
        c.count_scan();
        c.count_batch();
        c.add_written(10);
        c.add_read(4);
        let ops = OpCounts {
            gets: 2,
            puts: 3,
            deletes: 1,
            scans: 1,
            batches: 1,
        };
        assert_eq!(c.ops(), ops);
        assert_eq!((c.bytes_written(), c.bytes_read()), (10, 8 + 4));
    }

    #[derive(Debug, PartialEq)]
    struct Levels(u64);

    impl EngineStats for Levels {
        fn fields(&self) -> Vec<(String, f64)> {
            vec![("levels".into(), self.0 as f64)]
        }
    }

    #[test]
    fn ratios() {
        let s = Stats {
            user_bytes_written: 100,
            device: DeviceCounts {
                write_bytes: 400,
                ..Default::default()
            },
            cache: CacheCounts {
                hits: 3,
                misses: 1,
                evictions: 0,
            },
            detail: Some(std::sync::Arc::new(Levels(3))),
            ..Default::default()
        };
        assert_eq!(s.write_amplification(), Some(4.0));
        assert_eq!(s.read_amplification(), None);
        assert_eq!(s.cache.hit_ratio(), Some(0.75));
        assert_eq!(s.engine::<Levels>(), Some(&Levels(3)));
        let fields = s.fields();
        assert!(fields.contains(&("levels".to_string(), 3.0)));
        assert!(fields.contains(&("device_write_bytes".to_string(), 400.0)));
    }
}
