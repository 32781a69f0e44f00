//! Operation counters shared by the baseline adapters.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use ferrite::OpCounts;

#[derive(Debug, Default)]
pub struct OpCounter {
    gets: AtomicU64,
    puts: AtomicU64,
    deletes: AtomicU64,
    scans: AtomicU64,
    batches: AtomicU64,
}

impl OpCounter {
    pub fn get(&self) {
        self.gets.fetch_add(1, Relaxed);
    }
    pub fn put(&self) {
        self.puts.fetch_add(1, Relaxed);
    }
    pub fn delete(&self) {
        self.deletes.fetch_add(1, Relaxed);
    }
    pub fn scan(&self) {
        self.scans.fetch_add(1, Relaxed);
    }
    pub fn batch(&self) {
        self.batches.fetch_add(1, Relaxed);
    }
    pub fn snapshot(&self) -> OpCounts {
        OpCounts {
            gets: self.gets.load(Relaxed),
            puts: self.puts.load(Relaxed),
            deletes: self.deletes.load(Relaxed),
            scans: self.scans.load(Relaxed),
            batches: self.batches.load(Relaxed),
        }
    }
}
