//! An in-memory block device for tests and simulations.
//!
//! It enforces the same alignment and range rules as [`crate::DirectFile`],
//! so code that passes on it does not fail on O_DIRECT for a misaligned
//! buffer. Writes are "durable" immediately; wrap it in
//! [`crate::FaultyDevice`] to get crash semantics.

use parking_lot::RwLock;

use crate::accounting::{IoCounters, IoStats};
use crate::block_device::{check_aligned, check_block_size, check_read_range, BlockDevice};
use crate::error::{DeviceError, Result};

/// A growable byte vector behind a lock.
#[derive(Debug)]
pub struct MemDevice {
    data: RwLock<Vec<u8>>,
    block_size: usize,
    counters: IoCounters,
}

impl MemDevice {
    /// An empty device with 4 KiB blocks.
    pub fn new() -> Self {
        Self {
            data: RwLock::new(Vec::new()),
            block_size: 4096,
            counters: IoCounters::new(),
        }
    }

    /// An empty device with the given block size (512 B to 4 KiB, power of two).
    pub fn with_block_size(block_size: usize) -> Result<Self> {
        check_block_size(block_size)?;
        Ok(Self {
            block_size,
            ..Self::new()
        })
    }
}

impl MemDevice {
    /// A copy of everything on `src`, with its block size: an image to run
    /// against in memory, so an experiment that injects a device's latency
    /// pays only that latency, not the real disk's under it. The copy's
    /// counters start at zero.
    pub fn copy_of(src: &dyn BlockDevice) -> Result<Self> {
        let block_size = src.block_size();
        let len = src.len();
        let mut data = Vec::new();
        data.try_reserve_exact(len as usize).map_err(|_| {
            DeviceError::InvalidConfig(format!("a {len}-byte image does not fit in memory"))
        })?;
        // Chunks of whole blocks, aligned for O_DIRECT sources.
        let chunk = (8 << 20) / block_size.max(1) * block_size;
        let mut buf = crate::AlignedBuf::zeroed(chunk);
        let mut at = 0u64;
        while at < len {
            let n = (len - at).min(chunk as u64) as usize;
            src.read_at(&mut buf[..n], at)?;
            data.extend_from_slice(&buf[..n]);
            at += n as u64;
        }
        Ok(Self {
            data: RwLock::new(data),
            block_size,
            counters: IoCounters::new(),
        })
    }
}

impl Default for MemDevice {
    fn default() -> Self {
        Self::new()
    }
}

impl BlockDevice for MemDevice {
    fn block_size(&self) -> usize {
        self.block_size
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        check_aligned(self.block_size, offset, buf.len(), buf.as_ptr() as usize)?;
        let data = self.data.read();
        check_read_range(offset, buf.len(), data.len() as u64)?;
        let start = offset as usize;
        if let Some(src) = data.get(start..start + buf.len()) {
            buf.copy_from_slice(src);
        }
        self.counters.record_read(buf.len() as u64);
        Ok(())
    }

    fn read_batch(&self, reqs: &mut [crate::ReadReq<'_>]) -> Result<()> {
        self.counters.record_read_batch();
        for r in reqs.iter_mut() {
            self.read_at(r.buf, r.offset)?;
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        check_aligned(self.block_size, offset, buf.len(), buf.as_ptr() as usize)?;
        let mut data = self.data.write();
        let start = offset as usize;
        let end = start + buf.len();
        if data.len() < end {
            data.resize(end, 0);
        }
        if let Some(dst) = data.get_mut(start..end) {
            dst.copy_from_slice(buf);
        }
        self.counters.record_write(buf.len() as u64);
        Ok(())
    }

    fn write_batch(&self, reqs: &[crate::WriteReq<'_>]) -> Result<()> {
        if reqs.len() > 1 {
            self.counters.record_write_batch();
        }
        crate::block_device::write_each(self, reqs)
    }

    fn sync(&self) -> Result<()> {
        self.counters.record_sync();
        Ok(())
    }

    fn discard(&self, offset: u64, len: u64) -> Result<()> {
        check_aligned(self.block_size, offset, len as usize, 0)?;
        let mut data = self.data.write();
        let end = (offset.saturating_add(len)).min(data.len() as u64) as usize;
        if let Some(dst) = data.get_mut(offset as usize..end) {
            dst.fill(0);
        }
        Ok(())
    }

    fn len(&self) -> u64 {
        self.data.read().len() as u64
    }

    fn set_len(&self, len: u64) -> Result<()> {
        check_aligned(self.block_size, len, 0, 0)?;
        self.data.write().resize(len as usize, 0);
        Ok(())
    }

    fn io_stats(&self) -> IoStats {
        self.counters.snapshot()
    }

    fn describe(&self) -> String {
        format!("memory device ({} B blocks)", self.block_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AlignedBuf;

    #[test]
    fn a_copy_holds_every_byte_with_the_block_size_and_fresh_counters() {
        let src = MemDevice::with_block_size(1024).unwrap();
        // More than one copy chunk, with a tail shorter than a chunk.
        let len = (8 << 20) + 3 * 1024;
        let mut img = AlignedBuf::zeroed(len);
        for (i, b) in img.iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
        src.write_at(&img, 0).unwrap();
        let copy = MemDevice::copy_of(&src).unwrap();
        assert_eq!(copy.block_size(), 1024);
        assert_eq!(copy.len(), len as u64);
        assert_eq!(copy.io_stats().write_bytes, 0);
        let mut back = AlignedBuf::zeroed(len);
        copy.read_at(&mut back, 0).unwrap();
        assert!(back[..] == img[..]);
        // The copy is independent of its source.
        copy.write_at(&back[..1024], 4096).unwrap();
        src.discard(0, 1024).unwrap();
        let mut first = AlignedBuf::zeroed(1024);
        copy.read_at(&mut first, 0).unwrap();
        assert_eq!(first[1], 1);
    }
}
