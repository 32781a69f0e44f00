//! A block device on a regular file, opened with O_DIRECT.
//!
//! O_DIRECT keeps the kernel page cache out of the way, so an engine's own
//! buffer pool is the only cache and device counters match real device
//! traffic. File systems that refuse O_DIRECT (tmpfs on older kernels) get a
//! buffered file instead, reported once in a log line and in
//! [`DirectFile::is_direct`]. Batched reads go through io_uring when the
//! kernel allows it, otherwise through a pread thread pool; batched writes
//! go through io_uring, otherwise one after another.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::accounting::{IoCounters, IoStats};
use crate::block_device::{
    check_aligned, check_block_size, check_read_range, write_each, BlockDevice, GatherReq, ReadReq,
    WriteReq,
};
use crate::error::{DeviceError, IoOp, Result};
use crate::range_copy::{copy_buffered, copy_files, RangeCopy};
use crate::{read_pool, uring};

/// How batched reads are carried out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BatchMode {
    /// io_uring if it can be set up, else the thread pool.
    #[default]
    Auto,
    /// io_uring only; opening fails if it is unavailable.
    Uring,
    /// The pread thread pool.
    ThreadPool,
    /// One pread after another (the dependent-read baseline).
    Sequential,
}

/// How to open a [`DirectFile`].
#[derive(Debug, Clone, Copy)]
pub struct DirectFileOptions {
    /// Create the file if it does not exist.
    pub create: bool,
    /// Ask for O_DIRECT (falls back to buffered I/O where refused).
    pub direct: bool,
    /// Alignment unit; 4096 matches both 512e and 4Kn drives.
    pub block_size: usize,
    /// Take the file system's own direct-I/O unit instead of `block_size`
    /// where the kernel reports one (`statx`'s `STATX_DIOALIGN`; often
    /// 512 B), so a reader may fetch a few sectors rather than whole
    /// pages. Kept within 512 B..=[`crate::BUF_ALIGN`]; elsewhere
    /// `block_size` stands.
    pub file_system_unit: bool,
    pub batch_mode: BatchMode,
}

impl Default for DirectFileOptions {
    fn default() -> Self {
        Self {
            create: true,
            direct: true,
            block_size: 4096,
            file_system_unit: false,
            batch_mode: BatchMode::Auto,
        }
    }
}

/// A file accessed with aligned, unbuffered I/O.
#[derive(Debug)]
pub struct DirectFile {
    file: File,
    path: PathBuf,
    direct: bool,
    block_size: usize,
    batch_mode: BatchMode,
    len: AtomicU64,
    counters: IoCounters,
}

impl DirectFile {
    /// Opens (and by default creates) `path` with default options.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, DirectFileOptions::default())
    }

    /// Opens `path` with explicit options.
    pub fn open_with(path: impl AsRef<Path>, opts: DirectFileOptions) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        check_block_size(opts.block_size)?;
        let mut batch_mode = opts.batch_mode;
        match batch_mode {
            BatchMode::Uring if !uring::available() => {
                return Err(DeviceError::InvalidConfig(
                    "io_uring was requested but cannot be set up in this process".into(),
                ))
            }
            BatchMode::Auto => {
                batch_mode = if uring::available() {
                    BatchMode::Uring
                } else {
                    BatchMode::ThreadPool
                }
            }
            _ => {}
        }
        let open = |direct: bool| {
            let mut o = OpenOptions::new();
            o.read(true).write(true).create(opts.create);
            if direct {
                o.custom_flags(libc::O_DIRECT);
            }
            o.open(&path)
        };
        let (file, direct) = match open(opts.direct) {
            Ok(f) => (f, opts.direct),
            Err(e) if opts.direct && e.raw_os_error() == Some(libc::EINVAL) => {
                log::warn!(
                    "{}: the file system refuses O_DIRECT; using buffered I/O (the page cache will serve repeated reads)",
                    path.display()
                );
                (
                    open(false).map_err(|e| DeviceError::os(IoOp::Open, &path, 0, e))?,
                    false,
                )
            }
            Err(e) => return Err(DeviceError::os(IoOp::Open, &path, 0, e)),
        };
        let len = file
            .metadata()
            .map_err(|e| DeviceError::os(IoOp::Open, &path, 0, e))?
            .len();
        let block_size = match opts.file_system_unit {
            true => direct_io_unit(&file)
                .filter(|&u| check_block_size(u).is_ok())
                .unwrap_or(opts.block_size),
            false => opts.block_size,
        };
        Ok(Self {
            file,
            path,
            direct,
            block_size,
            batch_mode,
            len: AtomicU64::new(len),
            counters: IoCounters::new(),
        })
    }

    /// Inserts `len` bytes of hole at `offset`, shifting the data from
    /// `offset` on up by `len` (`fallocate` `FALLOC_FL_INSERT_RANGE`): the
    /// file system changes its extent map and moves no data. Both values
    /// must be multiples of the file system's block size, and `offset`
    /// must lie inside the file. File systems without it (tmpfs, most
    /// network file systems) answer with an error.
    pub fn insert_range(&self, offset: u64, len: u64) -> Result<()> {
        self.shift_range(libc::FALLOC_FL_INSERT_RANGE, offset, len)?;
        self.len.fetch_add(len, Ordering::AcqRel);
        Ok(())
    }

    /// Removes `len` bytes at `offset`, shifting the data after them down
    /// (`FALLOC_FL_COLLAPSE_RANGE`), the inverse of [`Self::insert_range`].
    pub fn collapse_range(&self, offset: u64, len: u64) -> Result<()> {
        self.shift_range(libc::FALLOC_FL_COLLAPSE_RANGE, offset, len)?;
        self.len.fetch_sub(len, Ordering::AcqRel);
        Ok(())
    }

    fn shift_range(&self, mode: libc::c_int, offset: u64, len: u64) -> Result<()> {
        check_aligned(self.block_size, offset, len as usize, 0)?;
        // SAFETY: plain syscall on an owned fd.
        let rc = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                mode,
                offset as libc::off_t,
                len as libc::off_t,
            )
        };
        if rc != 0 {
            return Err(DeviceError::os(
                IoOp::SetLen,
                &self.path,
                offset,
                std::io::Error::last_os_error(),
            ));
        }
        Ok(())
    }

    /// Whether the file really is open with O_DIRECT.
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// The batch mode in effect (never `Auto`).
    pub fn batch_mode(&self) -> BatchMode {
        self.batch_mode
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reserves disk blocks for `[offset, offset + len)` without writing them,
    /// so a later write cannot fail for lack of space. Grows the file.
    pub fn allocate(&self, offset: u64, len: u64) -> Result<()> {
        // SAFETY: plain syscall on an owned fd.
        let rc = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                0,
                offset as libc::off_t,
                len as libc::off_t,
            )
        };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            return Err(DeviceError::os(IoOp::SetLen, &self.path, offset, e));
        }
        self.len.fetch_max(offset + len, Ordering::AcqRel);
        Ok(())
    }

    /// Refuses the batch if any write breaks the alignment rules, before
    /// anything is written.
    fn check_writes<'a>(&self, writes: impl IntoIterator<Item = WriteReq<'a>>) -> Result<()> {
        for w in writes {
            check_aligned(
                self.block_size,
                w.offset,
                w.buf.len(),
                w.buf.as_ptr() as usize,
            )?;
        }
        Ok(())
    }

    /// Accounts a ring's batch of writes, each `(offset, length)` with its
    /// result, and returns the first failure.
    fn account_writes(
        &self,
        writes: impl Iterator<Item = (u64, usize)>,
        results: &[i32],
    ) -> Result<()> {
        self.counters.record_write_batch();
        let mut first_error = None;
        for ((offset, len), &res) in writes.zip(results) {
            match self.check_result(IoOp::Write, offset, len, res) {
                Ok(()) => {
                    self.len.fetch_max(offset + len as u64, Ordering::AcqRel);
                    self.counters.record_write(len as u64);
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn check_result(&self, op: IoOp, offset: u64, len: usize, r: i32) -> Result<()> {
        if r < 0 {
            let e = std::io::Error::from_raw_os_error(-r);
            return Err(DeviceError::os(op, &self.path, offset, e));
        }
        if r as usize != len {
            return Err(DeviceError::Short {
                op,
                offset,
                len: len as u64,
                done: r as u64,
            });
        }
        Ok(())
    }
}

impl BlockDevice for DirectFile {
    fn block_size(&self) -> usize {
        self.block_size
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        check_aligned(self.block_size, offset, buf.len(), buf.as_ptr() as usize)?;
        check_read_range(offset, buf.len(), self.len())?;
        self.file
            .read_exact_at(buf, offset)
            .map_err(|e| DeviceError::os(IoOp::Read, &self.path, offset, e))?;
        self.counters.record_read(buf.len() as u64);
        Ok(())
    }

    fn read_batch(&self, reqs: &mut [ReadReq<'_>]) -> Result<()> {
        let device_len = self.len();
        for r in reqs.iter() {
            check_aligned(
                self.block_size,
                r.offset,
                r.buf.len(),
                r.buf.as_ptr() as usize,
            )?;
            check_read_range(r.offset, r.buf.len(), device_len)?;
        }
        if reqs.is_empty() {
            return Ok(());
        }
        let mut results = vec![0i32; reqs.len()];
        let fd = self.file.as_raw_fd();
        match self.batch_mode {
            BatchMode::Uring | BatchMode::Auto => {
                if let Err(e) = uring::read_batch(fd, reqs, &mut results) {
                    // Ring setup can fail per thread (memlock limits); every
                    // submitted read has completed, so redoing all is safe.
                    log::warn!("io_uring batch failed ({e}); using the thread pool");
                    read_pool::read_batch(fd, reqs, &mut results);
                }
            }
            BatchMode::ThreadPool => read_pool::read_batch(fd, reqs, &mut results),
            BatchMode::Sequential => {
                for r in reqs.iter_mut() {
                    self.read_at(r.buf, r.offset)?;
                }
                self.counters.record_read_batch();
                return Ok(());
            }
        }
        self.counters.record_read_batch();
        for (r, &res) in reqs.iter().zip(results.iter()) {
            self.check_result(IoOp::Read, r.offset, r.buf.len(), res)?;
            self.counters.record_read(r.buf.len() as u64);
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        check_aligned(self.block_size, offset, buf.len(), buf.as_ptr() as usize)?;
        self.file
            .write_all_at(buf, offset)
            .map_err(|e| DeviceError::os(IoOp::Write, &self.path, offset, e))?;
        self.len
            .fetch_max(offset + buf.len() as u64, Ordering::AcqRel);
        self.counters.record_write(buf.len() as u64);
        Ok(())
    }

    fn write_batch(&self, reqs: &[WriteReq<'_>]) -> Result<()> {
        self.check_writes(reqs.iter().copied())?;
        // One write needs no ring; without io_uring the writes go one after
        // another (the thread pool is for reads, which callers wait on).
        let uring = matches!(self.batch_mode, BatchMode::Uring | BatchMode::Auto);
        if reqs.len() < 2 || !uring {
            return write_each(self, reqs);
        }
        let mut results = vec![0i32; reqs.len()];
        if let Err(e) = uring::write_batch(self.file.as_raw_fd(), reqs, &mut results) {
            // Every submitted write has completed, so writing all again
            // lands the same bytes.
            log::warn!("io_uring batch failed ({e}); writing one at a time");
            return write_each(self, reqs);
        }
        self.account_writes(reqs.iter().map(|r| (r.offset, r.buf.len())), &results)
    }

    fn write_gathered(&self, reqs: &[GatherReq<'_>]) -> Result<()> {
        self.check_writes(reqs.iter().flat_map(|r| r.pieces()))?;
        let uring = matches!(self.batch_mode, BatchMode::Uring | BatchMode::Auto);
        let flat = || -> Vec<WriteReq<'_>> { reqs.iter().flat_map(|r| r.pieces()).collect() };
        if !uring || reqs.iter().all(|r| r.bufs.len() < 2) {
            return self.write_batch(&flat());
        }
        let mut results = vec![0i32; reqs.len()];
        if let Err(e) = uring::write_gathered(self.file.as_raw_fd(), reqs, &mut results) {
            // As in `write_batch`: every submitted write has completed.
            log::warn!("io_uring batch failed ({e}); writing one at a time");
            return write_each(self, &flat());
        }
        self.account_writes(reqs.iter().map(|r| (r.offset, r.len())), &results)
    }

    fn sync(&self) -> Result<()> {
        self.file
            .sync_data()
            .map_err(|e| DeviceError::os(IoOp::Sync, &self.path, 0, e))?;
        self.counters.record_sync();
        Ok(())
    }

    fn discard(&self, offset: u64, len: u64) -> Result<()> {
        check_aligned(self.block_size, offset, len as usize, 0)?;
        // SAFETY: plain syscall on an owned fd.
        let rc = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                offset as libc::off_t,
                len as libc::off_t,
            )
        };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EOPNOTSUPP) {
                return Err(DeviceError::os(IoOp::Write, &self.path, offset, e));
            }
            // No hole punching here: overwrite with zeros instead.
            let zeros = crate::AlignedBuf::zeroed(1 << 20);
            let end = offset + len;
            let mut at = offset;
            while at < end {
                let n = ((end - at) as usize).min(zeros.len());
                self.write_at(&zeros[..n], at)?;
                at += n as u64;
            }
        }
        Ok(())
    }

    fn len(&self) -> u64 {
        self.len.load(Ordering::Acquire)
    }

    fn allocated(&self) -> u64 {
        use std::os::unix::fs::MetadataExt;
        // A failed fstat on an open descriptor says nothing of its blocks;
        // the length is then the honest upper bound.
        self.file
            .metadata()
            .map_or_else(|_| self.len(), |m| m.blocks() * 512)
    }

    fn set_len(&self, len: u64) -> Result<()> {
        check_aligned(self.block_size, len, 0, 0)?;
        self.file
            .set_len(len)
            .map_err(|e| DeviceError::os(IoOp::SetLen, &self.path, len, e))?;
        self.len.store(len, Ordering::Release);
        Ok(())
    }

    fn io_stats(&self) -> IoStats {
        self.counters.snapshot()
    }

    fn describe(&self) -> String {
        format!(
            "file {} ({}, batches via {:?})",
            self.path.display(),
            if self.direct { "O_DIRECT" } else { "buffered" },
            self.batch_mode
        )
    }

    fn backing_file(&self) -> Option<&File> {
        Some(&self.file)
    }

    /// From a file, cloned or copied in the kernel (`range_copy`); the
    /// bytes the kernel copied count as this file's writes (the source's
    /// reads are the kernel's, uncounted).
    fn copy_range_from(&self, src: &dyn BlockDevice, offset: u64, len: u64) -> Result<RangeCopy> {
        let unit = self.block_size.max(src.block_size());
        check_aligned(unit, offset, len as usize, 0)?;
        check_read_range(offset, len as usize, src.len())?;
        let copied = match src.backing_file() {
            Some(from) => copy_files(&self.file, from, &self.path, offset, len)?,
            None => None,
        };
        let Some(c) = copied else {
            return copy_buffered(self, src, offset, len);
        };
        self.len.fetch_max(offset + len, Ordering::AcqRel);
        if c.kernel > 0 {
            self.counters.record_write(c.kernel);
        }
        Ok(c)
    }
}

/// The alignment the file system asks of direct I/O on `file`, for
/// offsets and lengths (`statx` with `STATX_DIOALIGN`, Linux 6.1 on), if
/// it reports one and buffers aligned to [`crate::BUF_ALIGN`] satisfy it.
fn direct_io_unit(file: &File) -> Option<usize> {
    use std::os::fd::AsRawFd;
    // SAFETY: `statx` is plain old data; zeroes are a valid value.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: a valid fd, an empty NUL-terminated path with AT_EMPTY_PATH
    // (the fd itself), and a pointer to a live, writable statx.
    let rc = unsafe {
        libc::statx(
            file.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut st,
        )
    };
    let reported = rc == 0 && st.stx_mask & libc::STATX_DIOALIGN != 0;
    let (offset, mem) = (
        st.stx_dio_offset_align as usize,
        st.stx_dio_mem_align as usize,
    );
    (reported && offset > 0 && mem > 0 && mem <= crate::BUF_ALIGN).then_some(offset)
}
