//! The prefetch pool: page buffers that predicted nodes are read into.
//!
//! A prefetched page waits here, outside the buffer pool, until the
//! descent reaches its level and confirms that the predicted node is the
//! one on the path; only then is it copied into a frame. A wrong
//! prediction's buffer simply goes back to the pool, so mispredictions
//! never evict anything from the cache. Buffers are reused across lookups;
//! at most [`PrefetchPool::capacity`] are kept (and charged to the
//! engine's memory), more are allocated for the moment when many lookups
//! run at once.

use ferrite_io::AlignedBuf;
use parking_lot::Mutex;

pub struct PrefetchPool {
    free: Mutex<Vec<AlignedBuf>>,
    page_size: usize,
    cap: usize,
}

impl PrefetchPool {
    pub fn new(page_size: usize, cap: usize) -> Self {
        Self {
            free: Mutex::new(Vec::with_capacity(cap)),
            page_size,
            cap,
        }
    }

    /// `n` page buffers.
    pub fn take(&self, n: usize) -> Vec<AlignedBuf> {
        let mut out = Vec::with_capacity(n);
        {
            let mut free = self.free.lock();
            while out.len() < n {
                match free.pop() {
                    Some(b) => out.push(b),
                    None => break,
                }
            }
        }
        while out.len() < n {
            out.push(AlignedBuf::zeroed(self.page_size));
        }
        out
    }

    /// Returns buffers; those beyond the capacity are freed.
    pub fn give(&self, bufs: Vec<AlignedBuf>) {
        let mut free = self.free.lock();
        for b in bufs {
            if free.len() < self.cap {
                free.push(b);
            }
        }
    }

    /// Bytes of the buffers it may keep.
    pub fn memory_bytes(&self) -> usize {
        self.cap * self.page_size
    }
}
