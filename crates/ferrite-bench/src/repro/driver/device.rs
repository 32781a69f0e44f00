//! Emulated devices, for comparisons that take the disk's day-to-day
//! speed out: a closed store's device copied into memory, and a device
//! whose every read takes a fixed time. The time is counted from when a
//! read starts, so the inner device's own time is part of it, never added
//! to it; writes and syncs pass through at the inner device's speed.

use std::sync::Arc;
use std::time::Duration;

use ferrite_io::{BlockDevice, Latency, LatencyDevice, LatencyProfile, MemDevice};

use crate::error::{BenchError, Result};

/// A copy in memory of `device` (a closed store's: nothing may write to it
/// while it is copied).
pub fn memory_copy(device: &dyn BlockDevice) -> Result<Arc<MemDevice>> {
    MemDevice::copy_of(device)
        .map(Arc::new)
        .map_err(|e| BenchError::Config(format!("memory copy of the store: {e}")))
}

/// `inner`, every read taking `read`.
pub fn fixed_reads(inner: Arc<dyn BlockDevice>, read: Duration) -> Result<Arc<dyn BlockDevice>> {
    let profile = LatencyProfile {
        read: Latency::Fixed(read),
        write: Latency::Zero,
        sync: Latency::Zero,
    };
    // A fixed latency draws nothing from the seed.
    let device = LatencyDevice::new(inner, profile, 0)
        .map_err(|e| BenchError::Config(format!("latency device: {e}")))?;
    Ok(Arc::new(device))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_io::AlignedBuf;
    use std::time::Instant;

    #[test]
    fn a_copy_reads_as_the_original_and_reads_take_the_fixed_time() {
        let original = MemDevice::new();
        original
            .write_at(&AlignedBuf::from_slice(&[7u8; 8192]), 0)
            .unwrap();
        let copy = memory_copy(&original).unwrap();
        original
            .write_at(&AlignedBuf::from_slice(&[9u8; 4096]), 4096)
            .unwrap();
        let slow = fixed_reads(copy, Duration::from_millis(20)).unwrap();
        let mut buf = AlignedBuf::zeroed(4096);
        let t = Instant::now();
        slow.read_at(&mut buf, 4096).unwrap();
        assert!(t.elapsed() >= Duration::from_millis(20));
        assert!(
            buf.iter().all(|&b| b == 7),
            "the copy is of the device when copied"
        );
    }
}
