//! Batched reads and writes through io_uring.
//!
//! Each thread owns one small ring, created on first use, so submission needs
//! no lock. A batch is pushed as one submission and the call waits for every
//! completion before returning: the kernel holds raw pointers into the
//! callers' buffers, so returning early (even on error) would let it write
//! into memory the caller may have freed. That wait is the soundness
//! invariant of this module.

use std::cell::RefCell;
use std::os::fd::RawFd;
use std::sync::OnceLock;

use io_uring::{opcode, types, IoUring};

use crate::block_device::{GatherReq, ReadReq, WriteReq};

/// Submission-queue depth of each thread's ring; larger batches go in chunks.
const RING_ENTRIES: u32 = 64;

thread_local! {
    static RING: RefCell<Option<IoUring>> = const { RefCell::new(None) };
}

/// Whether this process may create rings (seccomp filters and old kernels
/// refuse). Probed once.
pub fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| match IoUring::new(2) {
        Ok(_) => true,
        Err(e) => {
            log::warn!("io_uring is unavailable ({e}); batched reads fall back to a thread pool");
            false
        }
    })
}

/// One operation of a batch as the ring sees it: a raw buffer pointer (or,
/// for a gathered write, a pointer to `len` iovecs) the submitter keeps
/// alive until every completion is in.
struct Op {
    ptr: *mut u8,
    len: u32,
    offset: u64,
    kind: Kind,
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Read,
    Write,
    Writev,
}

fn len32(len: usize) -> std::io::Result<u32> {
    u32::try_from(len).map_err(|_| std::io::Error::other("an I/O larger than 4 GiB"))
}

/// Reads every request from `fd`, writing each request's result (bytes read
/// or negative errno) into `results`.
pub fn read_batch(fd: RawFd, reqs: &mut [ReadReq<'_>], results: &mut [i32]) -> std::io::Result<()> {
    let ops = reqs
        .iter_mut()
        .map(|r| {
            Ok(Op {
                ptr: r.buf.as_mut_ptr(),
                len: len32(r.buf.len())?,
                offset: r.offset,
                kind: Kind::Read,
            })
        })
        .collect::<std::io::Result<Vec<Op>>>()?;
    run(fd, &ops, results)
}

/// Writes every request to `fd`, writing each request's result (bytes
/// written or negative errno) into `results`.
pub fn write_batch(fd: RawFd, reqs: &[WriteReq<'_>], results: &mut [i32]) -> std::io::Result<()> {
    let ops = reqs
        .iter()
        .map(|r| {
            Ok(Op {
                // The kernel only reads through a write's pointer.
                ptr: r.buf.as_ptr().cast_mut(),
                len: len32(r.buf.len())?,
                offset: r.offset,
                kind: Kind::Write,
            })
        })
        .collect::<std::io::Result<Vec<Op>>>()?;
    run(fd, &ops, results)
}

/// Writes every gathered request to `fd` as one vectored write, writing
/// each request's result (bytes written or negative errno) into `results`.
pub fn write_gathered(
    fd: RawFd,
    reqs: &[GatherReq<'_>],
    results: &mut [i32],
) -> std::io::Result<()> {
    // Every request's iovecs, kept here until `run` has seen every
    // completion; the kernel reads them and the buffers they name.
    let iovecs: Vec<Vec<libc::iovec>> = reqs
        .iter()
        .map(|r| {
            r.bufs
                .iter()
                .map(|b| libc::iovec {
                    iov_base: b.as_ptr().cast_mut().cast(),
                    iov_len: b.len(),
                })
                .collect()
        })
        .collect();
    let ops = reqs
        .iter()
        .zip(&iovecs)
        .map(|(r, iov)| {
            len32(r.len())?;
            Ok(Op {
                ptr: iov.as_ptr().cast_mut().cast(),
                len: len32(iov.len())?,
                offset: r.offset,
                kind: Kind::Writev,
            })
        })
        .collect::<std::io::Result<Vec<Op>>>()?;
    run(fd, &ops, results)
}

fn run(fd: RawFd, ops: &[Op], results: &mut [i32]) -> std::io::Result<()> {
    RING.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(IoUring::new(RING_ENTRIES)?);
        }
        let Some(ring) = slot.as_mut() else {
            return Err(std::io::Error::other("io_uring ring missing"));
        };
        let mut base = 0usize;
        for chunk in ops.chunks(RING_ENTRIES as usize) {
            submit_chunk(ring, fd, chunk, base, results)?;
            base += chunk.len();
        }
        Ok(())
    })
}

fn submit_chunk(
    ring: &mut IoUring,
    fd: RawFd,
    chunk: &[Op],
    base: usize,
    results: &mut [i32],
) -> std::io::Result<()> {
    {
        let mut sq = ring.submission();
        // Checked before anything is pushed: an entry left in the queue
        // would be submitted with the next batch, after its buffer is gone.
        if sq.capacity() - sq.len() < chunk.len() {
            return Err(std::io::Error::other("io_uring submission queue full"));
        }
        for (i, op) in chunk.iter().enumerate() {
            let sqe = match op.kind {
                Kind::Write => opcode::Write::new(types::Fd(fd), op.ptr.cast_const(), op.len)
                    .offset(op.offset)
                    .build(),
                Kind::Writev => {
                    opcode::Writev::new(types::Fd(fd), op.ptr.cast_const().cast(), op.len)
                        .offset(op.offset)
                        .build()
                }
                Kind::Read => opcode::Read::new(types::Fd(fd), op.ptr, op.len)
                    .offset(op.offset)
                    .build(),
            }
            .user_data((base + i) as u64);
            // SAFETY: the buffer (and a gathered write's iovecs, which the
            // caller of `run` holds) outlives the operation because this
            // function waits for every completion below before returning; the room
            // was checked above, so every push succeeds.
            if unsafe { sq.push(&sqe) }.is_err() {
                return Err(std::io::Error::other("io_uring submission queue full"));
            }
        }
    }
    let want = chunk.len();
    let mut completed = 0usize;
    let mut failures = 0u32;
    while completed < want {
        match ring.submit_and_wait(want - completed) {
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)
                ) => {}
            Err(e) => {
                failures += 1;
                if failures > 1000 {
                    // The kernel owns pointers into live buffers and will not
                    // report their completion; no return path is sound.
                    log::error!("io_uring wait failed permanently: {e}");
                    std::process::abort();
                }
            }
        }
        for cqe in ring.completion() {
            if let Some(slot) = results.get_mut(cqe.user_data() as usize) {
                *slot = cqe.result();
            }
            completed += 1;
        }
    }
    Ok(())
}
