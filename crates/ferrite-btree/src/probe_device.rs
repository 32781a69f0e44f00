//! A memory device for this crate's unit tests that counts what the
//! pool's I/O paths promise: rounds of reads (a single read or a whole
//! batch, what a lookup waits for), batches of writes, and the requests
//! of gathered writes (each one sequential write). It can also fail
//! every write, or hold one batch of writes open until the test lets it
//! go. Every byte is kept by the `MemDevice` inside.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

use ferrite_io::{BlockDevice, DeviceError, GatherReq, IoStats, MemDevice, ReadReq, WriteReq};
use parking_lot::Mutex;

pub(crate) struct ProbeDevice {
    pub inner: MemDevice,
    pub read_rounds: AtomicU64,
    pub write_batches: AtomicU64,
    /// Requests of gathered writes, each one sequential write.
    pub gathered_requests: AtomicU64,
    /// While set, every write fails.
    pub fail_writes: AtomicBool,
    /// While set, the next batch of writes says it started and waits.
    pub gate: Mutex<Option<Gate>>,
}

/// The ends a test holds a batch of writes open with: it hears the batch
/// start, does what must be possible meanwhile, then lets it go.
pub(crate) struct Gate {
    pub started: Sender<()>,
    pub go: Receiver<()>,
    /// Whether the test let go (rather than the batch giving up).
    pub let_go: Arc<AtomicBool>,
}

impl ProbeDevice {
    pub fn new() -> Self {
        Self {
            inner: MemDevice::new(),
            read_rounds: AtomicU64::new(0),
            write_batches: AtomicU64::new(0),
            gathered_requests: AtomicU64::new(0),
            fail_writes: AtomicBool::new(false),
            gate: Mutex::new(None),
        }
    }
}

impl BlockDevice for ProbeDevice {
    fn block_size(&self) -> usize {
        self.inner.block_size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> ferrite_io::Result<()> {
        self.read_rounds.fetch_add(1, Relaxed);
        self.inner.read_at(buf, offset)
    }
    fn read_batch(&self, reqs: &mut [ReadReq<'_>]) -> ferrite_io::Result<()> {
        self.read_rounds.fetch_add(1, Relaxed);
        self.inner.read_batch(reqs)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> ferrite_io::Result<()> {
        if self.fail_writes.load(Relaxed) {
            return Err(DeviceError::Crashed);
        }
        self.inner.write_at(buf, offset)
    }
    fn write_batch(&self, reqs: &[WriteReq<'_>]) -> ferrite_io::Result<()> {
        let gate = self.gate.lock().take();
        if let Some(g) = gate {
            let _ = g.started.send(());
            // A bound, so code that wrongly waits on this batch fails its
            // test instead of hanging it.
            let ok = g.go.recv_timeout(Duration::from_secs(20));
            g.let_go.store(ok.is_ok(), Relaxed);
        }
        self.write_batches.fetch_add(1, Relaxed);
        for r in reqs {
            self.write_at(r.buf, r.offset)?;
        }
        Ok(())
    }
    fn write_gathered(&self, reqs: &[GatherReq<'_>]) -> ferrite_io::Result<()> {
        self.gathered_requests.fetch_add(reqs.len() as u64, Relaxed);
        let flat: Vec<WriteReq<'_>> = reqs.iter().flat_map(|r| r.pieces()).collect();
        self.write_batch(&flat)
    }
    fn sync(&self) -> ferrite_io::Result<()> {
        self.inner.sync()
    }
    fn discard(&self, offset: u64, len: u64) -> ferrite_io::Result<()> {
        self.inner.discard(offset, len)
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn allocated(&self) -> u64 {
        self.inner.allocated()
    }
    fn set_len(&self, len: u64) -> ferrite_io::Result<()> {
        self.inner.set_len(len)
    }
    fn io_stats(&self) -> IoStats {
        self.inner.io_stats()
    }
    fn describe(&self) -> String {
        "probe memory device".into()
    }
}
