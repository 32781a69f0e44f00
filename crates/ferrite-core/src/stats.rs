//! Engine-neutral statistics.
//!
//! Every engine reports the same [`Stats`] so tools and benchmarks can
//! compare them: operation counts, user bytes in and out, device bytes in
//! and out (their ratio is read and write amplification), cache hits and
//! misses, and memory held by engine structures. Engine-specific counters go
//! in [`Stats::extra`] under stable names.

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

/// A snapshot of an engine's counters since it was opened.
#[derive(Debug, Clone, Default, PartialEq)]
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
    /// Engine-specific counters, by stable name.
    pub extra: Vec<(String, f64)>,
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

    /// An engine-specific counter by name.
    pub fn extra(&self, name: &str) -> Option<f64> {
        self.extra.iter().find(|(n, _)| n == name).map(|&(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            extra: vec![("levels".into(), 3.0)],
            ..Default::default()
        };
        assert_eq!(s.write_amplification(), Some(4.0));
        assert_eq!(s.read_amplification(), None);
        assert_eq!(s.cache.hit_ratio(), Some(0.75));
        assert_eq!(s.extra("levels"), Some(3.0));
    }
}
