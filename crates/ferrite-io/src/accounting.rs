//! Per-device I/O accounting.
//!
//! Every device keeps an [`IoCounters`]: operation and byte counts for reads,
//! writes and syncs, and a histogram of I/O sizes in power-of-two buckets.
//! Updates are relaxed atomic adds (a few nanoseconds), so accounting is
//! always on; a [`IoStats`] snapshot is taken when someone asks. Counts are
//! monotonic, so the difference of two snapshots is the I/O of the interval
//! between them, which is how benchmarks compute read and write amplification.
//!
//! Each thread also counts the reads it asked of any device
//! ([`thread_reads`]): a caller learns whether a piece of its own work went
//! to the device, without knowing which devices an engine holds (a server
//! moves work that waits on the device off its event loops by it).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

thread_local! {
    static THREAD_READS: Cell<u64> = const { Cell::new(0) };
}

/// Device reads the calling thread has issued so far, on every device
/// (each read of a batch counts). Only grows; the difference of two calls
/// is the reads of the work between them.
pub fn thread_reads() -> u64 {
    THREAD_READS.with(Cell::get)
}

/// Number of size buckets: bucket `i` counts I/Os of `(2^(i+8), 2^(i+9)]`
/// bytes, with bucket 0 also taking everything up to 512 B and the last
/// bucket everything above.
pub const SIZE_BUCKETS: usize = 20;

/// Live counters, shared by reference between a device and its users.
#[derive(Debug, Default)]
pub struct IoCounters {
    reads: AtomicU64,
    read_bytes: AtomicU64,
    read_batches: AtomicU64,
    writes: AtomicU64,
    write_bytes: AtomicU64,
    write_batches: AtomicU64,
    syncs: AtomicU64,
    sizes: [AtomicU64; SIZE_BUCKETS],
}

/// A point-in-time copy of [`IoCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoStats {
    pub reads: u64,
    pub read_bytes: u64,
    /// Submissions of one or more reads as a batch (a batch of N reads adds
    /// N to `reads` and 1 here).
    pub read_batches: u64,
    pub writes: u64,
    pub write_bytes: u64,
    /// Submissions of several writes as one batch (a batch of N writes adds
    /// N to `writes` and 1 here).
    pub write_batches: u64,
    pub syncs: u64,
    /// I/O size histogram; see [`SIZE_BUCKETS`] for the bucket bounds.
    pub size_histogram: [u64; SIZE_BUCKETS],
}

/// Index of the size bucket for an I/O of `len` bytes.
pub fn size_bucket(len: u64) -> usize {
    if len <= 512 {
        return 0;
    }
    // ceil(log2(len)) - 9, so (512, 1024] -> 1, (1024, 2048] -> 2, ...
    let bits = 64 - (len - 1).leading_zeros() as usize;
    (bits - 9).min(SIZE_BUCKETS - 1)
}

/// Upper bound in bytes of bucket `i` (the last bucket is open-ended).
pub fn bucket_upper_bound(i: usize) -> u64 {
    512u64 << i.min(SIZE_BUCKETS - 1)
}

impl IoCounters {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn record_read(&self, len: u64) {
        THREAD_READS.with(|c| c.set(c.get() + 1));
        self.reads.fetch_add(1, Relaxed);
        self.read_bytes.fetch_add(len, Relaxed);
        self.bump_size(len);
    }

    pub fn record_read_batch(&self) {
        self.read_batches.fetch_add(1, Relaxed);
    }

    pub fn record_write(&self, len: u64) {
        self.writes.fetch_add(1, Relaxed);
        self.write_bytes.fetch_add(len, Relaxed);
        self.bump_size(len);
    }

    pub fn record_write_batch(&self) {
        self.write_batches.fetch_add(1, Relaxed);
    }

    pub fn record_sync(&self) {
        self.syncs.fetch_add(1, Relaxed);
    }

    fn bump_size(&self, len: u64) {
        if let Some(b) = self.sizes.get(size_bucket(len)) {
            b.fetch_add(1, Relaxed);
        }
    }

    /// Copies the counters. Each field is read atomically; the snapshot as a
    /// whole is not, which is fine for counters that only grow.
    pub fn snapshot(&self) -> IoStats {
        let mut size_histogram = [0u64; SIZE_BUCKETS];
        for (dst, src) in size_histogram.iter_mut().zip(self.sizes.iter()) {
            *dst = src.load(Relaxed);
        }
        IoStats {
            reads: self.reads.load(Relaxed),
            read_bytes: self.read_bytes.load(Relaxed),
            read_batches: self.read_batches.load(Relaxed),
            writes: self.writes.load(Relaxed),
            write_bytes: self.write_bytes.load(Relaxed),
            write_batches: self.write_batches.load(Relaxed),
            syncs: self.syncs.load(Relaxed),
            size_histogram,
        }
    }
}

impl IoStats {
    /// The I/O done between `earlier` and `self`.
    pub fn since(&self, earlier: &IoStats) -> IoStats {
        let mut size_histogram = [0u64; SIZE_BUCKETS];
        for ((d, a), b) in size_histogram
            .iter_mut()
            .zip(self.size_histogram.iter())
            .zip(earlier.size_histogram.iter())
        {
            *d = a.saturating_sub(*b);
        }
        IoStats {
            reads: self.reads.saturating_sub(earlier.reads),
            read_bytes: self.read_bytes.saturating_sub(earlier.read_bytes),
            read_batches: self.read_batches.saturating_sub(earlier.read_batches),
            writes: self.writes.saturating_sub(earlier.writes),
            write_bytes: self.write_bytes.saturating_sub(earlier.write_bytes),
            write_batches: self.write_batches.saturating_sub(earlier.write_batches),
            syncs: self.syncs.saturating_sub(earlier.syncs),
            size_histogram,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets() {
        assert_eq!(size_bucket(1), 0);
        assert_eq!(size_bucket(512), 0);
        assert_eq!(size_bucket(513), 1);
        assert_eq!(size_bucket(1024), 1);
        assert_eq!(size_bucket(4096), 3);
        assert_eq!(size_bucket(4097), 4);
        assert_eq!(size_bucket(u64::MAX), SIZE_BUCKETS - 1);
        for len in [1u64, 700, 4096, 1 << 20] {
            let b = size_bucket(len);
            assert!(len <= bucket_upper_bound(b));
        }
    }

    #[test]
    fn snapshot_and_difference() {
        let c = IoCounters::new();
        c.record_read(4096);
        let a = c.snapshot();
        c.record_read(4096);
        c.record_write(8192);
        c.record_sync();
        let d = c.snapshot().since(&a);
        assert_eq!((d.reads, d.read_bytes), (1, 4096));
        assert_eq!((d.writes, d.write_bytes, d.syncs), (1, 8192, 1));
        assert_eq!(d.size_histogram[3], 1);
        assert_eq!(d.size_histogram[4], 1);
    }

    #[test]
    fn a_thread_counts_only_its_own_reads() {
        let c = std::sync::Arc::new(IoCounters::new());
        let before = thread_reads();
        c.record_read(512);
        c.record_write(512);
        let other = c.clone();
        let theirs = std::thread::spawn(move || {
            let t0 = thread_reads();
            other.record_read(4096);
            other.record_read(4096);
            thread_reads() - t0
        })
        .join()
        .unwrap();
        assert_eq!(theirs, 2);
        assert_eq!(thread_reads() - before, 1);
        assert_eq!(c.snapshot().reads, 3);
    }
}
