//! A latency-injecting wrapper.
//!
//! [`LatencyDevice`] adds a delay, fixed or drawn from a distribution, to
//! every operation of an inner device, so experiments can run against a
//! known device profile instead of this host's disk. Delays are measured
//! from when an operation starts, so the inner device's own time counts
//! toward them. Concurrency is preserved: each caller waits on its own
//! clock, so two threads reading at once both finish after one delay, and a
//! batch of N reads finishes after the largest of N delays, as N commands
//! in flight on one SSD would.
//!
//! Waiting sleeps while more than [`SPIN_BELOW`] remains and then yields in
//! a loop, because the OS timer overshoots short sleeps by tens of
//! microseconds, which would swamp a 100 µs device.

use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use rand_distr::{Distribution, LogNormal};

use crate::accounting::IoStats;
use crate::block_device::{BlockDevice, ReadReq, WriteReq};
use crate::error::{DeviceError, Result};

/// Below this much remaining wait, yield instead of sleeping.
pub const SPIN_BELOW: Duration = Duration::from_micros(150);

/// A latency distribution for one kind of operation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Latency {
    Zero,
    Fixed(Duration),
    /// Uniform in `[min, max]`.
    Uniform {
        min: Duration,
        max: Duration,
    },
    /// Log-normal with the given median and shape `sigma` (SSD read
    /// latencies are well described by it: a tight body with a long tail).
    LogNormal {
        median: Duration,
        sigma: f64,
    },
}

/// Latencies per operation kind.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatencyProfile {
    pub read: Latency,
    pub write: Latency,
    pub sync: Latency,
}

impl LatencyProfile {
    /// The same fixed delay for reads and writes, none for sync.
    pub fn fixed(per_io: Duration) -> Self {
        Self {
            read: Latency::Fixed(per_io),
            write: Latency::Fixed(per_io),
            sync: Latency::Zero,
        }
    }

    fn validate(&self) -> Result<()> {
        for l in [self.read, self.write, self.sync] {
            match l {
                Latency::Uniform { min, max } if min > max => {
                    return Err(DeviceError::InvalidConfig(format!(
                        "uniform latency has min {min:?} > max {max:?}"
                    )))
                }
                Latency::LogNormal { sigma, .. } if !(sigma.is_finite() && sigma >= 0.0) => {
                    return Err(DeviceError::InvalidConfig(format!(
                        "log-normal sigma {sigma} must be finite and >= 0"
                    )))
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// Wraps a device and delays each of its operations.
#[derive(Debug)]
pub struct LatencyDevice<D> {
    inner: D,
    profile: LatencyProfile,
    rng: Mutex<SmallRng>,
}

impl<D: BlockDevice> LatencyDevice<D> {
    pub fn new(inner: D, profile: LatencyProfile, seed: u64) -> Result<Self> {
        profile.validate()?;
        Ok(Self {
            inner,
            profile,
            rng: Mutex::new(SmallRng::seed_from_u64(seed)),
        })
    }

    pub fn inner(&self) -> &D {
        &self.inner
    }

    fn sample(&self, l: Latency) -> Duration {
        match l {
            Latency::Zero => Duration::ZERO,
            Latency::Fixed(d) => d,
            Latency::Uniform { min, max } => {
                let span = (max - min).as_nanos() as u64;
                let r = if span == 0 {
                    0
                } else {
                    rand::Rng::gen_range(&mut *self.rng.lock(), 0..=span)
                };
                min + Duration::from_nanos(r)
            }
            Latency::LogNormal { median, sigma } => {
                let mu = (median.as_nanos() as f64).max(1.0).ln();
                match LogNormal::new(mu, sigma) {
                    Ok(d) => Duration::from_nanos(d.sample(&mut *self.rng.lock()) as u64),
                    Err(_) => median,
                }
            }
        }
    }
}

/// Waits until `deadline`; see the module docs for why it spins at the end.
pub fn wait_until(deadline: Instant) {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        let left = deadline - now;
        if left > SPIN_BELOW {
            std::thread::sleep(left - SPIN_BELOW);
        } else {
            std::thread::yield_now();
        }
    }
}

impl<D: BlockDevice> BlockDevice for LatencyDevice<D> {
    fn block_size(&self) -> usize {
        self.inner.block_size()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let deadline = Instant::now() + self.sample(self.profile.read);
        let r = self.inner.read_at(buf, offset);
        wait_until(deadline);
        r
    }

    fn read_batch(&self, reqs: &mut [ReadReq<'_>]) -> Result<()> {
        let start = Instant::now();
        let delay = reqs
            .iter()
            .map(|_| self.sample(self.profile.read))
            .max()
            .unwrap_or_default();
        let r = self.inner.read_batch(reqs);
        wait_until(start + delay);
        r
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        let deadline = Instant::now() + self.sample(self.profile.write);
        let r = self.inner.write_at(buf, offset);
        wait_until(deadline);
        r
    }

    fn write_batch(&self, reqs: &[WriteReq<'_>]) -> Result<()> {
        let start = Instant::now();
        let delay = reqs
            .iter()
            .map(|_| self.sample(self.profile.write))
            .max()
            .unwrap_or_default();
        let r = self.inner.write_batch(reqs);
        wait_until(start + delay);
        r
    }

    fn sync(&self) -> Result<()> {
        let deadline = Instant::now() + self.sample(self.profile.sync);
        let r = self.inner.sync();
        wait_until(deadline);
        r
    }

    fn discard(&self, offset: u64, len: u64) -> Result<()> {
        self.inner.discard(offset, len)
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn allocated(&self) -> u64 {
        self.inner.allocated()
    }

    fn set_len(&self, len: u64) -> Result<()> {
        self.inner.set_len(len)
    }

    fn io_stats(&self) -> IoStats {
        self.inner.io_stats()
    }

    fn describe(&self) -> String {
        format!(
            "latency wrapper (read {:?}, write {:?}) over {}",
            self.profile.read,
            self.profile.write,
            self.inner.describe()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AlignedBuf, MemDevice};

    fn device(us: u64) -> LatencyDevice<MemDevice> {
        let d = LatencyDevice::new(
            MemDevice::new(),
            LatencyProfile::fixed(Duration::from_micros(us)),
            1,
        )
        .unwrap();
        d.write_at(&AlignedBuf::zeroed(16 * 4096), 0).unwrap();
        d
    }

    #[test]
    fn every_read_takes_at_least_the_latency() {
        let d = device(2000);
        let mut b = AlignedBuf::zeroed(4096);
        let t = Instant::now();
        for _ in 0..5 {
            d.read_at(&mut b, 0).unwrap();
        }
        assert!(t.elapsed() >= Duration::from_millis(10));
    }

    #[test]
    fn a_batch_costs_one_latency_not_n() {
        // The lower bound is exact; the upper bound only has to tell one
        // 50 ms delay from eight (400 ms), leaving room for a noisy host.
        let d = device(50_000);
        let mut bufs: Vec<AlignedBuf> = (0..8).map(|_| AlignedBuf::zeroed(4096)).collect();
        let mut reqs: Vec<ReadReq> = bufs
            .iter_mut()
            .enumerate()
            .map(|(i, b)| ReadReq::new(i as u64 * 4096, b))
            .collect();
        let t = Instant::now();
        d.read_batch(&mut reqs).unwrap();
        let e = t.elapsed();
        assert!(e >= Duration::from_millis(50), "{e:?}");
        assert!(e < Duration::from_millis(250), "{e:?}");
    }

    #[test]
    fn concurrent_readers_overlap() {
        let d = std::sync::Arc::new(device(50_000));
        let t = Instant::now();
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let d = d.clone();
                std::thread::spawn(move || {
                    let mut b = AlignedBuf::zeroed(4096);
                    d.read_at(&mut b, 0).unwrap();
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        // Serialised, four readers would need 200 ms.
        assert!(
            t.elapsed() < Duration::from_millis(150),
            "{:?}",
            t.elapsed()
        );
    }

    #[test]
    fn invalid_profiles_are_rejected() {
        let bad = LatencyProfile {
            read: Latency::Uniform {
                min: Duration::from_micros(9),
                max: Duration::from_micros(1),
            },
            write: Latency::Zero,
            sync: Latency::Zero,
        };
        assert!(LatencyDevice::new(MemDevice::new(), bad, 0).is_err());
    }
}
