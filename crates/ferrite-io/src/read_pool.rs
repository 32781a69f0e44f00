//! The portable fallback for batched reads: a small pool of threads doing
//! `pread`, used when io_uring cannot be set up.
//!
//! Jobs carry raw buffer pointers to the workers. The submitting thread
//! always waits for every job of its batch to report back before it returns,
//! which is what keeps those pointers valid (the same invariant as the ring).

use std::os::fd::RawFd;
use std::sync::OnceLock;

use crossbeam_channel::{bounded, unbounded, Sender};

use crate::block_device::ReadReq;

/// Worker threads; enough to keep a few reads in flight per batch.
const WORKERS: usize = 4;

struct Job {
    fd: RawFd,
    ptr: usize,
    len: usize,
    offset: u64,
    index: usize,
    done: Sender<(usize, i32)>,
}

fn pool() -> &'static Sender<Job> {
    static POOL: OnceLock<Sender<Job>> = OnceLock::new();
    POOL.get_or_init(|| {
        let (tx, rx) = unbounded::<Job>();
        for i in 0..WORKERS {
            let rx = rx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("ferrite-pread-{i}"))
                .spawn(move || {
                    for job in rx.iter() {
                        let r = pread_full(job.fd, job.ptr as *mut u8, job.len, job.offset);
                        // The submitter may only stop listening once it has
                        // every result, so a failed send cannot happen.
                        let _ = job.done.send((job.index, r));
                    }
                });
            if let Err(e) = spawned {
                log::warn!("could not start read worker {i}: {e}");
            }
        }
        tx
    })
}

/// Reads `len` bytes at `offset` into `ptr`; returns bytes read or -errno.
fn pread_full(fd: RawFd, ptr: *mut u8, len: usize, offset: u64) -> i32 {
    let mut done = 0usize;
    while done < len {
        // SAFETY: ptr..ptr+len is a live buffer owned by a waiting submitter.
        let n = unsafe {
            libc::pread(
                fd,
                ptr.add(done).cast(),
                len - done,
                (offset + done as u64) as libc::off_t,
            )
        };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return -err.raw_os_error().unwrap_or(libc::EIO);
        }
        if n == 0 {
            break;
        }
        done += n as usize;
    }
    done as i32
}

/// Reads every request with the pool (or inline for a single request).
pub fn read_batch(fd: RawFd, reqs: &mut [ReadReq<'_>], results: &mut [i32]) {
    if let [only] = reqs {
        if let Some(r) = results.first_mut() {
            *r = pread_full(fd, only.buf.as_mut_ptr(), only.buf.len(), only.offset);
        }
        return;
    }
    let (done_tx, done_rx) = bounded(reqs.len());
    let mut outstanding = 0usize;
    for (index, r) in reqs.iter_mut().enumerate() {
        let job = Job {
            fd,
            ptr: r.buf.as_mut_ptr() as usize,
            len: r.buf.len(),
            offset: r.offset,
            index,
            done: done_tx.clone(),
        };
        match pool().send(job) {
            Ok(()) => outstanding += 1,
            Err(e) => {
                // No workers: do it here.
                let j = e.0;
                if let Some(slot) = results.get_mut(j.index) {
                    *slot = pread_full(j.fd, j.ptr as *mut u8, j.len, j.offset);
                }
            }
        }
    }
    drop(done_tx);
    while outstanding > 0 {
        match done_rx.recv() {
            Ok((index, r)) => {
                if let Some(slot) = results.get_mut(index) {
                    *slot = r;
                }
                outstanding -= 1;
            }
            // All senders gone means every job reported or was dropped unrun.
            Err(_) => break,
        }
    }
}
