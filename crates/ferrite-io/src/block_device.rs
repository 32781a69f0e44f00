//! The block-device interface every engine reads and writes through.
//!
//! A [`BlockDevice`] is a flat, byte-addressed space with one rule set for
//! all implementations, so code tested on [`crate::MemDevice`] behaves the
//! same on an O_DIRECT file: offsets, lengths and buffer addresses must be
//! multiples of [`BlockDevice::block_size`]; reads must lie below
//! [`BlockDevice::len`]; writes may extend the device. Data is durable only
//! after [`BlockDevice::sync`] returns; until then a crash may drop any
//! subset of the writes, or tear one at block granularity
//! ([`crate::FaultyDevice`] models exactly that).

use crate::accounting::IoStats;
use crate::error::{DeviceError, IoOp, Result};
use crate::range_copy::{copy_buffered, RangeCopy};

/// One read of a batch: fill `buf` from `offset`.
#[derive(Debug)]
pub struct ReadReq<'a> {
    pub offset: u64,
    pub buf: &'a mut [u8],
}

impl<'a> ReadReq<'a> {
    pub fn new(offset: u64, buf: &'a mut [u8]) -> Self {
        Self { offset, buf }
    }
}

/// One write of a batch: `buf` at `offset`.
#[derive(Debug, Clone, Copy)]
pub struct WriteReq<'a> {
    pub offset: u64,
    pub buf: &'a [u8],
}

impl<'a> WriteReq<'a> {
    pub fn new(offset: u64, buf: &'a [u8]) -> Self {
        Self { offset, buf }
    }
}

/// One write of a batch gathered from several buffers: `bufs` back to
/// back from `offset`, as one request where the device can (a vectored
/// write), so consecutive pages held in separate buffers reach the disk as
/// one sequential write.
#[derive(Debug, Clone, Copy)]
pub struct GatherReq<'a> {
    pub offset: u64,
    pub bufs: &'a [&'a [u8]],
}

impl<'a> GatherReq<'a> {
    pub fn new(offset: u64, bufs: &'a [&'a [u8]]) -> Self {
        Self { offset, bufs }
    }

    /// Bytes the request writes.
    pub fn len(&self) -> usize {
        self.bufs.iter().map(|b| b.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The request as plain writes, one per buffer.
    pub fn pieces(&self) -> impl Iterator<Item = WriteReq<'a>> + '_ {
        let mut at = self.offset;
        self.bufs.iter().map(move |b| {
            let r = WriteReq::new(at, b);
            at += b.len() as u64;
            r
        })
    }
}

/// A random-access block device. Object safe; shared as `Arc<dyn BlockDevice>`.
pub trait BlockDevice: Send + Sync {
    /// The alignment unit for offsets, lengths and buffer addresses.
    fn block_size(&self) -> usize;

    /// Fills `buf` from `offset`. The whole range must lie below `len()`.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()>;

    /// Performs every read in `reqs`, concurrently where the device can, and
    /// returns when all have finished. On error some buffers may be filled
    /// and others not; none is still being written when this returns.
    ///
    /// The default issues the reads one after another; devices that can
    /// overlap them override it.
    fn read_batch(&self, reqs: &mut [ReadReq<'_>]) -> Result<()> {
        for r in reqs.iter_mut() {
            self.read_at(r.buf, r.offset)?;
        }
        Ok(())
    }

    /// Writes `buf` at `offset`, extending the device if the range ends past
    /// `len()`. Not durable until [`BlockDevice::sync`].
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()>;

    /// Performs every write in `reqs`, concurrently where the device can,
    /// and returns when all have finished. The writes must not overlap
    /// (their order is not kept). On error some may have landed and others
    /// not, as after a crash before a sync; none is still in flight when
    /// this returns.
    ///
    /// The default issues the writes one after another; devices that can
    /// overlap them override it.
    fn write_batch(&self, reqs: &[WriteReq<'_>]) -> Result<()> {
        write_each(self, reqs)
    }

    /// [`BlockDevice::write_batch`] for gathered writes: every request in
    /// flight together where the device can, each as one vectored write.
    /// The same rules hold for every buffer as for a plain write.
    ///
    /// The default splits the requests into plain writes, one per buffer,
    /// and hands them to `write_batch`.
    fn write_gathered(&self, reqs: &[GatherReq<'_>]) -> Result<()> {
        let flat: Vec<WriteReq<'_>> = reqs.iter().flat_map(|r| r.pieces()).collect();
        self.write_batch(&flat)
    }

    /// Makes every completed write durable.
    fn sync(&self) -> Result<()>;

    /// Tells the device `[offset, offset + len)` is no longer needed (TRIM,
    /// or a punched hole in a file). Later reads of the range return zeros.
    /// The device length does not change.
    fn discard(&self, offset: u64, len: u64) -> Result<()>;

    /// Current size in bytes.
    fn len(&self) -> u64;

    /// True when the device holds no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the device occupies where it is kept: a file's allocated
    /// blocks, fewer than [`len`](Self::len) where it has holes (a sparse
    /// mirror, a punched range); `len` for a device that keeps every byte.
    fn allocated(&self) -> u64 {
        self.len()
    }

    /// Grows (with zeros) or shrinks the device. Must be block aligned.
    fn set_len(&self, len: u64) -> Result<()>;

    /// The device's I/O counters since it was opened.
    fn io_stats(&self) -> IoStats;

    /// A one-line description for logs and reports (kind, path, I/O mode).
    fn describe(&self) -> String;

    /// The file behind the device when nothing stands between them (no
    /// fault injection, no added latency), so the kernel may copy from it.
    fn backing_file(&self) -> Option<&std::fs::File> {
        None
    }

    /// Copies `[offset, offset + len)` of `src` to the same range of this
    /// device, extending it if needed; not durable until
    /// [`BlockDevice::sync`]. The range must be aligned to both devices'
    /// blocks and lie below `src.len()`.
    ///
    /// The default reads and writes through a buffer; a file copies from
    /// a file in the kernel, sharing blocks where its file system can
    /// (`range_copy`). The result says which.
    fn copy_range_from(&self, src: &dyn BlockDevice, offset: u64, len: u64) -> Result<RangeCopy> {
        copy_buffered(self, src, offset, len)
    }
}

/// Carries out a batch of writes one after another: the default for
/// devices that cannot overlap writes, and the fallback of those that can.
pub(crate) fn write_each<D: BlockDevice + ?Sized>(dev: &D, reqs: &[WriteReq<'_>]) -> Result<()> {
    for r in reqs {
        dev.write_at(r.buf, r.offset)?;
    }
    Ok(())
}

/// Checks the alignment rule shared by every device.
pub fn check_aligned(block_size: usize, offset: u64, len: usize, addr: usize) -> Result<()> {
    let bs = block_size as u64;
    if !offset.is_multiple_of(bs) {
        return Err(DeviceError::Misaligned {
            what: "offset",
            value: offset,
            align: block_size,
        });
    }
    if !(len as u64).is_multiple_of(bs) {
        return Err(DeviceError::Misaligned {
            what: "length",
            value: len as u64,
            align: block_size,
        });
    }
    if !addr.is_multiple_of(block_size) {
        return Err(DeviceError::Misaligned {
            what: "buffer address",
            value: addr as u64,
            align: block_size,
        });
    }
    Ok(())
}

/// Checks that a read of `len` bytes at `offset` lies inside a device of `device_len`.
pub fn check_read_range(offset: u64, len: usize, device_len: u64) -> Result<()> {
    let end = offset.checked_add(len as u64);
    match end {
        Some(end) if end <= device_len => Ok(()),
        _ => Err(DeviceError::OutOfRange {
            op: IoOp::Read,
            offset,
            len: len as u64,
            device_len,
        }),
    }
}

/// Block sizes a device may use: powers of two from 512 B to 4 KiB.
pub fn check_block_size(block_size: usize) -> Result<()> {
    if block_size.is_power_of_two() && (512..=crate::BUF_ALIGN).contains(&block_size) {
        Ok(())
    } else {
        Err(DeviceError::InvalidConfig(format!(
            "block size {block_size} is not a power of two between 512 and {}",
            crate::BUF_ALIGN
        )))
    }
}

impl<D: BlockDevice + ?Sized> BlockDevice for std::sync::Arc<D> {
    fn block_size(&self) -> usize {
        (**self).block_size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        (**self).read_at(buf, offset)
    }
    fn read_batch(&self, reqs: &mut [ReadReq<'_>]) -> Result<()> {
        (**self).read_batch(reqs)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        (**self).write_at(buf, offset)
    }
    fn write_batch(&self, reqs: &[WriteReq<'_>]) -> Result<()> {
        (**self).write_batch(reqs)
    }
    fn write_gathered(&self, reqs: &[GatherReq<'_>]) -> Result<()> {
        (**self).write_gathered(reqs)
    }
    fn sync(&self) -> Result<()> {
        (**self).sync()
    }
    fn discard(&self, offset: u64, len: u64) -> Result<()> {
        (**self).discard(offset, len)
    }
    fn len(&self) -> u64 {
        (**self).len()
    }
    fn allocated(&self) -> u64 {
        (**self).allocated()
    }
    fn set_len(&self, len: u64) -> Result<()> {
        (**self).set_len(len)
    }
    fn io_stats(&self) -> IoStats {
        (**self).io_stats()
    }
    fn describe(&self) -> String {
        (**self).describe()
    }
    fn backing_file(&self) -> Option<&std::fs::File> {
        (**self).backing_file()
    }
    fn copy_range_from(&self, src: &dyn BlockDevice, offset: u64, len: u64) -> Result<RangeCopy> {
        (**self).copy_range_from(src, offset, len)
    }
}
