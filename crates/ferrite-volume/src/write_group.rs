//! Group commit for client writes: writes that arrive while one batch is
//! being written become the next batch, one append to the data log.
//!
//! A writer queues its job, then takes the leader lock. If a leader
//! before it already wrote its job, it returns that result; otherwise it
//! becomes the leader, takes every queued job (its own among them) and
//! commits them together. Jobs are committed in the order they queued, so
//! of two overlapping writes the later one wins in the map.

use std::sync::Arc;

use ferrite_io::AlignedBuf;
use parking_lot::Mutex;

use crate::error::Result;

/// One client write of whole blocks.
pub struct WriteJob {
    pub lba: u64,
    pub data: AlignedBuf,
    pub fua: bool,
    done: Mutex<Option<Result<()>>>,
}

impl WriteJob {
    pub fn new(lba: u64, data: AlignedBuf, fua: bool) -> Self {
        Self {
            lba,
            data,
            fua,
            done: Mutex::new(None),
        }
    }

    pub fn blocks(&self) -> u64 {
        self.data.len() as u64 / crate::superblock::BLOCK_SIZE as u64
    }
}

#[derive(Default)]
pub struct WriteGroup {
    queue: Mutex<Vec<Arc<WriteJob>>>,
    leader: Mutex<()>,
}

impl WriteGroup {
    /// Queues `job` and returns once a batch holding it was committed by
    /// `commit` (run by whichever writer leads that batch).
    pub fn submit(
        &self,
        job: Arc<WriteJob>,
        commit: impl FnOnce(&[Arc<WriteJob>]) -> Result<()>,
    ) -> Result<()> {
        self.queue.lock().push(job.clone());
        let _lead = self.leader.lock();
        if let Some(r) = job.done.lock().take() {
            return r;
        }
        let batch = std::mem::take(&mut *self.queue.lock());
        let result = commit(&batch);
        for j in &batch {
            if !Arc::ptr_eq(j, &job) {
                *j.done.lock() = Some(match &result {
                    Ok(()) => Ok(()),
                    Err(e) => Err(e.replicate()),
                });
            }
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::VolumeError;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn concurrent_writers_share_batches_and_all_complete() {
        let group = Arc::new(WriteGroup::default());
        let batches = Arc::new(AtomicUsize::new(0));
        let jobs = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let (group, batches, jobs) = (group.clone(), batches.clone(), jobs.clone());
                std::thread::spawn(move || {
                    for i in 0..200u64 {
                        let job =
                            Arc::new(WriteJob::new(t * 1000 + i, AlignedBuf::zeroed(4096), false));
                        group
                            .submit(job, |batch| {
                                batches.fetch_add(1, Ordering::Relaxed);
                                jobs.fetch_add(batch.len(), Ordering::Relaxed);
                                std::thread::yield_now();
                                Ok(())
                            })
                            .unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(jobs.load(Ordering::Relaxed), 1600);
        assert!(batches.load(Ordering::Relaxed) <= 1600);
    }

    #[test]
    fn a_failed_batch_fails_every_job_in_it() {
        let group = WriteGroup::default();
        let job = Arc::new(WriteJob::new(0, AlignedBuf::zeroed(4096), false));
        let r = group.submit(job, |_| {
            Err(VolumeError::NoSpace {
                live_blocks: 1,
                segments: 2,
            })
        });
        assert!(matches!(r, Err(VolumeError::NoSpace { .. })));
    }
}
