//! A fault-injecting wrapper with crash semantics.
//!
//! [`FaultyDevice`] holds every write in a volatile overlay, block by block,
//! until [`BlockDevice::sync`] moves the overlay to the inner device. Reads
//! see the overlay, so a running engine observes ordinary semantics.
//! [`FaultyDevice::crash`] then models a power failure: the overlay is
//! dropped whole, or (with [`CrashMode::KeepRandom`]) each unsynced block
//! independently survives or not, which reorders and tears writes at block
//! granularity exactly as a real drive may. After a crash every operation
//! fails with [`DeviceError::Crashed`] until [`FaultyDevice::restart`], so a
//! dying engine cannot write after the "power cut".
//!
//! Fault rules ([`FaultRule`]) make chosen operations fail with EIO, ENOSPC,
//! or a torn write (a prefix of the blocks lands, then the write fails).
//!
//! Invariant: the inner device only ever holds synced data, plus the
//! survivors chosen by a crash. `set_len` and `discard` pass straight
//! through (they model metadata operations the file system makes durable).
//!
//! Zoned devices get the same semantics by stacking
//! [`crate::EmulatedZonedDevice`] on a `FaultyDevice`.

use std::collections::BTreeMap;
use std::ops::Range;

use parking_lot::Mutex;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::accounting::{IoCounters, IoStats};
use crate::aligned_buf::AlignedBuf;
use crate::block_device::{check_aligned, check_read_range, BlockDevice, ReadReq};
use crate::error::{DeviceError, IoOp, Result};

/// An operation a fault rule can target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultOp {
    Read,
    Write,
    Sync,
}

/// What an injected fault does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// The operation fails with an I/O error and has no effect.
    Eio,
    /// The operation fails as if the device were full and has no effect.
    NoSpace,
    /// Writes only: the first `blocks` blocks land (unsynced), then the
    /// write fails.
    Torn { blocks: usize },
}

/// When a rule fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trigger {
    /// On the n-th matching operation after the rule was added (1-based), once.
    Nth(u64),
    /// On every matching operation after the first n succeed.
    After(u64),
    /// On every read or write that touches this byte range.
    Range(Range<u64>),
}

/// One planted fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultRule {
    pub op: FaultOp,
    pub trigger: Trigger,
    pub kind: FaultKind,
}

impl FaultRule {
    pub fn nth(op: FaultOp, n: u64, kind: FaultKind) -> Self {
        Self {
            op,
            trigger: Trigger::Nth(n),
            kind,
        }
    }
    pub fn after(op: FaultOp, n: u64, kind: FaultKind) -> Self {
        Self {
            op,
            trigger: Trigger::After(n),
            kind,
        }
    }
    pub fn range(op: FaultOp, range: Range<u64>, kind: FaultKind) -> Self {
        Self {
            op,
            trigger: Trigger::Range(range),
            kind,
        }
    }
}

/// How a crash treats writes that were not synced.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CrashMode {
    /// Every unsynced write is lost.
    DropAll,
    /// Each unsynced block survives with probability `keep`, independently.
    KeepRandom { seed: u64, keep: f64 },
}

#[derive(Debug)]
struct ArmedRule {
    rule: FaultRule,
    seen: u64,
    spent: bool,
}

#[derive(Debug, Default)]
struct State {
    /// Unsynced blocks by offset; each is exactly one block long.
    pending: BTreeMap<u64, Box<[u8]>>,
    /// End of the highest unsynced block (the device may have grown).
    pending_end: u64,
    rules: Vec<ArmedRule>,
    crashed: bool,
}

/// A device wrapper that injects faults and simulates crashes.
#[derive(Debug)]
pub struct FaultyDevice<D> {
    inner: D,
    state: Mutex<State>,
    counters: IoCounters,
}

impl<D: BlockDevice> FaultyDevice<D> {
    pub fn new(inner: D) -> Self {
        Self {
            inner,
            state: Mutex::new(State::default()),
            counters: IoCounters::new(),
        }
    }

    /// Plants a fault rule.
    pub fn inject(&self, rule: FaultRule) {
        self.state.lock().rules.push(ArmedRule {
            rule,
            seen: 0,
            spent: false,
        });
    }

    /// Leaves the device `headroom` bytes past its current length: a write
    /// reaching further fails with [`DeviceError::NoSpace`] and has no
    /// effect, as a file's would on a file system out of free blocks;
    /// writes inside that limit land. [`FaultyDevice::clear_faults`] frees
    /// the space.
    pub fn fill_up(&self, headroom: u64) {
        let end = self.len().saturating_add(headroom);
        self.inject(FaultRule::range(
            FaultOp::Write,
            end..u64::MAX,
            FaultKind::NoSpace,
        ));
    }

    /// Removes every fault rule.
    pub fn clear_faults(&self) {
        self.state.lock().rules.clear();
    }

    /// Simulates power loss; see the module docs. Returns how many unsynced
    /// blocks survived.
    pub fn crash(&self, mode: CrashMode) -> Result<usize> {
        let mut st = self.state.lock();
        let pending = std::mem::take(&mut st.pending);
        st.pending_end = 0;
        st.crashed = true;
        let mut survivors = 0;
        if let CrashMode::KeepRandom { seed, keep } = mode {
            let mut rng = SmallRng::seed_from_u64(seed);
            let bs = self.inner.block_size();
            let mut buf = AlignedBuf::zeroed(bs);
            for (off, block) in pending {
                if rng.gen_bool(keep.clamp(0.0, 1.0)) {
                    buf.copy_from_slice(&block);
                    self.inner.write_at(&buf, off)?;
                    survivors += 1;
                }
            }
            self.inner.sync()?;
        }
        Ok(survivors)
    }

    /// Brings a crashed device back (as after a reboot). Fault rules are cleared.
    pub fn restart(&self) {
        let mut st = self.state.lock();
        st.crashed = false;
        st.rules.clear();
    }

    /// Number of blocks written but not yet synced.
    pub fn unsynced_blocks(&self) -> usize {
        self.state.lock().pending.len()
    }

    pub fn inner(&self) -> &D {
        &self.inner
    }

    fn check_faults(st: &mut State, op: FaultOp, range: Option<Range<u64>>) -> Option<FaultKind> {
        if st.crashed {
            return None;
        }
        for armed in st.rules.iter_mut().filter(|r| r.rule.op == op && !r.spent) {
            let fire = match &armed.rule.trigger {
                Trigger::Nth(n) => {
                    armed.seen += 1;
                    let hit = armed.seen == *n;
                    armed.spent = hit;
                    hit
                }
                Trigger::After(n) => {
                    armed.seen += 1;
                    armed.seen > *n
                }
                Trigger::Range(r) => range
                    .as_ref()
                    .is_some_and(|io| io.start < r.end && r.start < io.end),
            };
            if fire {
                return Some(armed.rule.kind);
            }
        }
        None
    }

    fn fault_error(op: IoOp, offset: u64, kind: FaultKind) -> DeviceError {
        match kind {
            FaultKind::NoSpace => DeviceError::NoSpace { op, offset },
            FaultKind::Eio => DeviceError::Injected {
                op,
                offset,
                kind: "EIO",
            },
            FaultKind::Torn { .. } => DeviceError::Injected {
                op,
                offset,
                kind: "torn write",
            },
        }
    }

    fn read_locked(&self, st: &State, buf: &mut [u8], offset: u64) -> Result<()> {
        let inner_len = self.inner.len();
        let end = offset + buf.len() as u64;
        check_read_range(offset, buf.len(), inner_len.max(st.pending_end))?;
        // Bytes below the inner device's end come from it; the rest are zeros
        // until the overlay says otherwise.
        let from_inner = inner_len.clamp(offset, end) - offset;
        if from_inner > 0 {
            if let Some(head) = buf.get_mut(..from_inner as usize) {
                self.inner.read_at(head, offset)?;
            }
        }
        if let Some(tail) = buf.get_mut(from_inner as usize..) {
            tail.fill(0);
        }
        for (&off, block) in st.pending.range(offset..end) {
            let at = (off - offset) as usize;
            if let Some(dst) = buf.get_mut(at..at + block.len()) {
                dst.copy_from_slice(block);
            }
        }
        Ok(())
    }
}

impl<D: BlockDevice> BlockDevice for FaultyDevice<D> {
    fn block_size(&self) -> usize {
        self.inner.block_size()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        check_aligned(self.block_size(), offset, buf.len(), buf.as_ptr() as usize)?;
        let mut st = self.state.lock();
        if st.crashed {
            return Err(DeviceError::Crashed);
        }
        let range = offset..offset + buf.len() as u64;
        if let Some(kind) = Self::check_faults(&mut st, FaultOp::Read, Some(range)) {
            return Err(Self::fault_error(IoOp::Read, offset, kind));
        }
        self.read_locked(&st, buf, offset)?;
        self.counters.record_read(buf.len() as u64);
        Ok(())
    }

    fn read_batch(&self, reqs: &mut [ReadReq<'_>]) -> Result<()> {
        self.counters.record_read_batch();
        for r in reqs.iter_mut() {
            self.read_at(r.buf, r.offset)?;
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        let bs = self.block_size();
        check_aligned(bs, offset, buf.len(), buf.as_ptr() as usize)?;
        let mut st = self.state.lock();
        if st.crashed {
            return Err(DeviceError::Crashed);
        }
        let range = offset..offset + buf.len() as u64;
        let fault = Self::check_faults(&mut st, FaultOp::Write, Some(range));
        let land_blocks = match fault {
            None => usize::MAX,
            Some(FaultKind::Torn { blocks }) => blocks,
            Some(_) => 0,
        };
        for (i, block) in buf.chunks(bs).take(land_blocks).enumerate() {
            let off = offset + (i * bs) as u64;
            st.pending.insert(off, block.into());
            st.pending_end = st.pending_end.max(off + bs as u64);
        }
        if let Some(kind) = fault {
            return Err(Self::fault_error(IoOp::Write, offset, kind));
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
        let mut st = self.state.lock();
        if st.crashed {
            return Err(DeviceError::Crashed);
        }
        if let Some(kind) = Self::check_faults(&mut st, FaultOp::Sync, None) {
            return Err(Self::fault_error(IoOp::Sync, 0, kind));
        }
        // Write back contiguous runs of pending blocks as single writes.
        let mut run: Vec<u8> = Vec::new();
        let mut run_start = 0u64;
        let flush_run = |run: &mut Vec<u8>, start: u64| -> Result<()> {
            if !run.is_empty() {
                let buf = AlignedBuf::from_slice(run);
                self.inner.write_at(&buf, start)?;
                run.clear();
            }
            Ok(())
        };
        for (&off, block) in st.pending.iter() {
            if run.is_empty() || run_start + run.len() as u64 != off || run.len() >= (8 << 20) {
                flush_run(&mut run, run_start)?;
                run_start = off;
            }
            run.extend_from_slice(block);
        }
        flush_run(&mut run, run_start)?;
        self.inner.sync()?;
        st.pending.clear();
        st.pending_end = 0;
        self.counters.record_sync();
        Ok(())
    }

    fn discard(&self, offset: u64, len: u64) -> Result<()> {
        let mut st = self.state.lock();
        if st.crashed {
            return Err(DeviceError::Crashed);
        }
        let doomed: Vec<u64> = st
            .pending
            .range(offset..offset.saturating_add(len))
            .map(|(&o, _)| o)
            .collect();
        for o in doomed {
            st.pending.remove(&o);
        }
        let inner_len = self.inner.len();
        if offset < inner_len {
            self.inner.discard(offset, len.min(inner_len - offset))?;
        }
        Ok(())
    }

    fn len(&self) -> u64 {
        self.inner.len().max(self.state.lock().pending_end)
    }

    fn set_len(&self, len: u64) -> Result<()> {
        let mut st = self.state.lock();
        if st.crashed {
            return Err(DeviceError::Crashed);
        }
        let doomed: Vec<u64> = st.pending.range(len..).map(|(&o, _)| o).collect();
        for o in doomed {
            st.pending.remove(&o);
        }
        st.pending_end = st.pending_end.min(len);
        self.inner.set_len(len)
    }

    fn io_stats(&self) -> IoStats {
        self.counters.snapshot()
    }

    fn describe(&self) -> String {
        format!("fault-injecting wrapper over {}", self.inner.describe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemDevice;

    fn block(fill: u8) -> AlignedBuf {
        let mut b = AlignedBuf::zeroed(4096);
        b.fill(fill);
        b
    }

    fn read(dev: &impl BlockDevice, off: u64) -> u8 {
        let mut b = AlignedBuf::zeroed(4096);
        dev.read_at(&mut b, off).unwrap();
        assert!(
            b.iter().all(|&x| x == b[0]),
            "block at {off} is torn inside"
        );
        b[0]
    }

    #[test]
    fn synced_data_survives_and_unsynced_does_not() {
        let dev = FaultyDevice::new(MemDevice::new());
        dev.write_at(&block(1), 0).unwrap();
        dev.sync().unwrap();
        dev.write_at(&block(2), 0).unwrap();
        dev.write_at(&block(3), 4096).unwrap();
        assert_eq!(read(&dev, 0), 2, "reads see unsynced writes");
        assert_eq!(dev.len(), 8192);
        dev.crash(CrashMode::DropAll).unwrap();
        assert!(matches!(
            dev.read_at(&mut block(0), 0),
            Err(DeviceError::Crashed)
        ));
        assert!(matches!(
            dev.write_at(&block(9), 0),
            Err(DeviceError::Crashed)
        ));
        dev.restart();
        assert_eq!(read(&dev, 0), 1);
        assert_eq!(dev.len(), 4096, "the unsynced extension is gone");
    }

    #[test]
    fn keep_random_keeps_a_subset_of_whole_blocks() {
        let dev = FaultyDevice::new(MemDevice::new());
        dev.write_at(&AlignedBuf::zeroed(64 * 4096), 0).unwrap();
        dev.sync().unwrap();
        for i in 0..64u64 {
            dev.write_at(&block(7), i * 4096).unwrap();
        }
        let kept = dev
            .crash(CrashMode::KeepRandom {
                seed: 42,
                keep: 0.5,
            })
            .unwrap();
        dev.restart();
        assert!(kept > 0 && kept < 64, "kept {kept}");
        let sevens = (0..64u64).filter(|&i| read(&dev, i * 4096) == 7).count();
        assert_eq!(sevens, kept);
    }

    #[test]
    fn nth_write_fails_once_and_has_no_effect() {
        let dev = FaultyDevice::new(MemDevice::new());
        dev.inject(FaultRule::nth(FaultOp::Write, 2, FaultKind::Eio));
        dev.write_at(&block(1), 0).unwrap();
        let err = dev.write_at(&block(2), 4096).unwrap_err();
        assert!(matches!(
            err,
            DeviceError::Injected {
                op: IoOp::Write,
                offset: 4096,
                ..
            }
        ));
        dev.write_at(&block(3), 8192).unwrap();
        assert_eq!(read(&dev, 4096), 0);
        assert_eq!(read(&dev, 8192), 3);
    }

    #[test]
    fn a_fault_inside_a_write_batch_stops_it_there() {
        // Writes before the faulty one land (unsynced, as any write), the
        // faulty one and those after it do not.
        let dev = FaultyDevice::new(MemDevice::new());
        dev.write_at(&AlignedBuf::zeroed(4 * 4096), 0).unwrap();
        dev.inject(FaultRule::nth(FaultOp::Write, 2, FaultKind::Eio));
        let bufs: Vec<AlignedBuf> = (1..=3).map(block).collect();
        let reqs: Vec<crate::WriteReq<'_>> = bufs
            .iter()
            .enumerate()
            .map(|(i, b)| crate::WriteReq::new(i as u64 * 4096, b))
            .collect();
        assert!(matches!(
            dev.write_batch(&reqs),
            Err(DeviceError::Injected { offset: 4096, .. })
        ));
        assert_eq!(
            (read(&dev, 0), read(&dev, 4096), read(&dev, 8192)),
            (1, 0, 0)
        );
        assert_eq!(dev.io_stats().write_batches, 1);
    }

    #[test]
    fn torn_write_lands_a_prefix() {
        let dev = FaultyDevice::new(MemDevice::new());
        dev.inject(FaultRule::nth(
            FaultOp::Write,
            1,
            FaultKind::Torn { blocks: 2 },
        ));
        let mut big = AlignedBuf::zeroed(4 * 4096);
        big.fill(5);
        assert!(dev.write_at(&big, 0).is_err());
        assert_eq!(read(&dev, 0), 5);
        assert_eq!(read(&dev, 4096), 5);
        assert_eq!(dev.len(), 8192);
    }

    #[test]
    fn no_space_and_sync_failures_are_typed() {
        let dev = FaultyDevice::new(MemDevice::new());
        dev.inject(FaultRule::range(
            FaultOp::Write,
            8192..12288,
            FaultKind::NoSpace,
        ));
        dev.inject(FaultRule::after(FaultOp::Sync, 0, FaultKind::Eio));
        assert!(matches!(
            dev.write_at(&block(1), 8192),
            Err(DeviceError::NoSpace { .. })
        ));
        dev.write_at(&block(1), 0).unwrap();
        assert!(dev.sync().is_err());
        assert_eq!(dev.unsynced_blocks(), 1, "a failed sync persists nothing");
    }

    #[test]
    fn a_full_device_takes_writes_inside_its_length_only() {
        let dev = FaultyDevice::new(MemDevice::new());
        dev.write_at(&block(1), 0).unwrap();
        dev.write_at(&block(2), 4096).unwrap();
        dev.fill_up(0);
        dev.write_at(&block(3), 4096).unwrap();
        assert!(matches!(
            dev.write_at(&block(4), 8192),
            Err(DeviceError::NoSpace { .. })
        ));
        assert_eq!(dev.len(), 8192);
        assert_eq!(read(&dev, 4096), 3);
        dev.clear_faults();
        dev.write_at(&block(4), 8192).unwrap();
        assert_eq!(dev.len(), 12288);
    }
}
