//! An in-memory block device for tests and simulations.
//!
//! It enforces the same alignment and range rules as [`crate::DirectFile`],
//! so code that passes on it does not fail on O_DIRECT for a misaligned
//! buffer. Writes are "durable" immediately; wrap it in
//! [`crate::FaultyDevice`] to get crash semantics.

use parking_lot::RwLock;

use crate::accounting::{IoCounters, IoStats};
use crate::block_device::{check_aligned, check_block_size, check_read_range, BlockDevice};
use crate::error::Result;

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
