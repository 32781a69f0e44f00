//! Copying a byte range from one device to the same range of another,
//! as cheaply as the two devices allow: shared blocks where the file
//! system can clone (a reflink: XFS, btrfs), a copy the kernel makes
//! where both are files (`copy_file_range`: no bytes through user
//! memory), and reads and writes through a buffer otherwise.
//!
//! Invariants: the destination holds the source's bytes of the range
//! when a copy returns, not durably until its `sync`; a method that the
//! file system refuses before it moved a byte falls through to the next
//! one, so the caller never sees a refusal it could not act on; what
//! each method moved is reported ([`RangeCopy`]), so a checkpoint says
//! how much it shared and how much it wrote.

use std::fs::File;
use std::os::fd::AsRawFd;

use crate::aligned_buf::AlignedBuf;
use crate::block_device::{check_aligned, BlockDevice};
use crate::error::{DeviceError, IoOp, Result};

/// Bytes a copy moved, by how.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RangeCopy {
    /// Cloned: the destination shares the source's blocks until either
    /// is written (nothing was written).
    pub shared: u64,
    /// Copied by the kernel from file to file.
    pub kernel: u64,
    /// Read into memory and written back.
    pub buffered: u64,
}

impl RangeCopy {
    /// Bytes the copy covered, however it moved them.
    pub fn total(&self) -> u64 {
        self.shared + self.kernel + self.buffered
    }

    /// Bytes the destination's device wrote.
    pub fn written(&self) -> u64 {
        self.kernel + self.buffered
    }
}

impl std::ops::AddAssign for RangeCopy {
    fn add_assign(&mut self, o: Self) {
        self.shared += o.shared;
        self.kernel += o.kernel;
        self.buffered += o.buffered;
    }
}

/// Bytes one buffered step moves.
const STEP: usize = 1 << 20;

/// Copies `[offset, offset + len)` of `src` to `dst` through a buffer,
/// `STEP` bytes at a time, by the devices' own reads and writes (so fault
/// and latency devices see every one).
pub fn copy_buffered(
    dst: &(impl BlockDevice + ?Sized),
    src: &(impl BlockDevice + ?Sized),
    offset: u64,
    len: u64,
) -> Result<RangeCopy> {
    let unit = dst.block_size().max(src.block_size());
    check_aligned(unit, offset, len as usize, 0)?;
    let mut buf = AlignedBuf::zeroed(STEP.min(len as usize).max(unit));
    let mut at = offset;
    let end = offset + len;
    while at < end {
        let n = ((end - at) as usize).min(buf.len());
        src.read_at(&mut buf[..n], at)?;
        dst.write_at(&buf[..n], at)?;
        at += n as u64;
    }
    Ok(RangeCopy {
        buffered: len,
        ..RangeCopy::default()
    })
}

/// Errors by which a file system says it cannot do a kind of copy at all
/// (as opposed to failing one): the next method may.
fn refused(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::EOPNOTSUPP
                | libc::ENOTTY
                | libc::EXDEV
                | libc::EINVAL
                | libc::ENOSYS
                | libc::EBADF
                | libc::ETXTBSY
        )
    )
}

/// Clones `[offset, offset + len)` of `src` into `dst` (FICLONERANGE):
/// `Ok(false)` when the file system cannot share blocks.
fn clone_range(dst: &File, src: &File, offset: u64, len: u64) -> std::io::Result<bool> {
    let arg = libc::file_clone_range {
        src_fd: i64::from(src.as_raw_fd()),
        src_offset: offset,
        src_length: len,
        dest_offset: offset,
    };
    // SAFETY: an ioctl on two owned fds with a fully initialized argument
    // the kernel only reads.
    let rc = unsafe { libc::ioctl(dst.as_raw_fd(), libc::FICLONERANGE, &arg) };
    if rc == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if refused(&e) {
        Ok(false)
    } else {
        Err(e)
    }
}

/// Copies `[offset, offset + len)` of `src` into `dst` in the kernel
/// (`copy_file_range`); `Ok(0)` when the file systems cannot, before any
/// byte moved.
fn kernel_copy(dst: &File, src: &File, offset: u64, len: u64) -> std::io::Result<u64> {
    let mut done = 0u64;
    while done < len {
        let mut off_in = (offset + done) as libc::loff_t;
        let mut off_out = off_in;
        let want = (len - done).min(1 << 30) as usize;
        // SAFETY: a syscall on two owned fds; the offsets are locals it
        // updates.
        let n = unsafe {
            libc::copy_file_range(
                src.as_raw_fd(),
                &mut off_in,
                dst.as_raw_fd(),
                &mut off_out,
                want,
                0,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            if done == 0 && refused(&e) {
                return Ok(0);
            }
            return Err(e);
        }
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("the source ends {} bytes into a copy of {len}", done),
            ));
        }
        done += n as u64;
    }
    Ok(done)
}

/// Copies `[offset, offset + len)` from file `src` to file `dst`: cloned
/// where the file system shares blocks, else in the kernel; `Ok(None)`
/// when neither is possible and the caller must copy through memory.
/// `path` names `dst` in errors.
pub(crate) fn copy_files(
    dst: &File,
    src: &File,
    path: &std::path::Path,
    offset: u64,
    len: u64,
) -> Result<Option<RangeCopy>> {
    let os = |e| DeviceError::os(IoOp::Write, path, offset, e);
    if len == 0 {
        return Ok(Some(RangeCopy::default()));
    }
    if clone_range(dst, src, offset, len).map_err(os)? {
        return Ok(Some(RangeCopy {
            shared: len,
            ..RangeCopy::default()
        }));
    }
    match kernel_copy(dst, src, offset, len).map_err(os)? {
        0 => Ok(None),
        n => Ok(Some(RangeCopy {
            kernel: n,
            ..RangeCopy::default()
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DirectFile, DirectFileOptions, MemDevice};

    fn pattern(len: usize, seed: u8) -> AlignedBuf {
        let mut b = AlignedBuf::zeroed(len);
        for (i, x) in b.iter_mut().enumerate() {
            *x = (i as u8).wrapping_mul(31).wrapping_add(seed);
        }
        b
    }

    #[test]
    fn buffered_copy_moves_the_range_only() {
        let src = MemDevice::new();
        src.write_at(&pattern(5 << 20, 7), 0).unwrap();
        let dst = MemDevice::new();
        let c = copy_buffered(&dst, &src, 4096, 3 << 20).unwrap();
        assert_eq!(c.buffered, 3 << 20);
        assert_eq!(c.total(), 3 << 20);
        assert_eq!(dst.len(), 4096 + (3 << 20));
        let mut a = AlignedBuf::zeroed(3 << 20);
        let mut b = AlignedBuf::zeroed(3 << 20);
        src.read_at(&mut a, 4096).unwrap();
        dst.read_at(&mut b, 4096).unwrap();
        assert!(a[..] == b[..]);
        let mut head = AlignedBuf::zeroed(4096);
        dst.read_at(&mut head, 0).unwrap();
        assert!(head.iter().all(|&x| x == 0), "bytes before the range stay");
    }

    #[test]
    fn buffered_copy_refuses_a_misaligned_range() {
        let src = MemDevice::new();
        src.write_at(&pattern(8192, 1), 0).unwrap();
        let dst = MemDevice::new();
        assert!(copy_buffered(&dst, &src, 100, 4096).is_err());
        assert_eq!(dst.len(), 0);
    }

    #[test]
    fn files_copy_in_the_kernel_or_share_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let opts = DirectFileOptions::default();
        let src = DirectFile::open_with(dir.path().join("src"), opts).unwrap();
        src.write_at(&pattern(1 << 20, 3), 0).unwrap();
        src.sync().unwrap();
        let dst = DirectFile::open_with(dir.path().join("dst"), opts).unwrap();
        let c = dst.copy_range_from(&src, 64 << 10, 256 << 10).unwrap();
        assert_eq!(c.total(), 256 << 10);
        assert_eq!(
            c.buffered, 0,
            "two files on one file system copy in the kernel"
        );
        assert_eq!(dst.len(), (64 << 10) + (256 << 10));
        let mut a = AlignedBuf::zeroed(256 << 10);
        let mut b = AlignedBuf::zeroed(256 << 10);
        src.read_at(&mut a, 64 << 10).unwrap();
        dst.read_at(&mut b, 64 << 10).unwrap();
        assert!(a[..] == b[..]);
    }

    #[test]
    fn a_file_from_a_memory_device_copies_through_a_buffer() {
        let dir = tempfile::tempdir().unwrap();
        let src = MemDevice::new();
        src.write_at(&pattern(64 << 10, 9), 0).unwrap();
        let dst = DirectFile::open(dir.path().join("dst")).unwrap();
        let c = dst.copy_range_from(&src, 0, 64 << 10).unwrap();
        assert_eq!(c.buffered, 64 << 10);
        let mut b = AlignedBuf::zeroed(64 << 10);
        dst.read_at(&mut b, 0).unwrap();
        assert!(b[..] == pattern(64 << 10, 9)[..]);
    }
}
