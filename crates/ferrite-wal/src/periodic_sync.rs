//! A background thread that syncs a [`Wal`] at a fixed interval, so that
//! `SyncMode::Batched(d)` bounds what a crash loses to the last `d` of
//! writes even when writes stop (a writer-driven sync only runs when the
//! next write arrives).
//!
//! Invariants: no sync runs after [`PeriodicSync`] is dropped (drop joins
//! the thread); a failed sync ends the thread, since the log is poisoned
//! from then on and reports the failure to the next writer itself.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::Wal;

/// Syncs a log every interval until dropped.
pub struct PeriodicSync {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl PeriodicSync {
    /// Starts the thread; fails only if the OS cannot spawn one.
    pub fn start(wal: Arc<Wal>, every: Duration) -> std::io::Result<Self> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("wal-periodic-sync".into())
            .spawn(move || {
                let (lock, wake) = &*flag;
                let mut stopped = lock.lock();
                // The flag is checked before every wait: a drop may have set
                // it before this thread first took the lock.
                while !*stopped {
                    // A spurious wake-up only syncs early, which is harmless.
                    wake.wait_for(&mut stopped, every);
                    if *stopped {
                        return;
                    }
                    // Sync without the flag held, so a drop is not delayed
                    // behind the device.
                    let failed =
                        parking_lot::MutexGuard::unlocked(&mut stopped, || wal.sync().is_err());
                    if failed {
                        return;
                    }
                }
            })?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for PeriodicSync {
    fn drop(&mut self) {
        let (lock, wake) = &*self.stop;
        *lock.lock() = true;
        wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_io::{BlockDevice, CrashMode, FaultyDevice, MemDevice};

    fn replayed(dev: Arc<dyn BlockDevice>) -> usize {
        let mut n = 0;
        Wal::open(dev, 0, &mut |_| {
            n += 1;
            Ok(())
        })
        .unwrap();
        n
    }

    #[test]
    fn appended_records_become_durable_without_another_write() {
        let dev = Arc::new(FaultyDevice::new(MemDevice::new()));
        let wal = Arc::new(Wal::open(dev.clone(), 0, &mut |_| Ok(())).unwrap());
        wal.append(b"one").unwrap();
        wal.append(b"two").unwrap();
        let before = wal.io_stats().syncs;
        let ticker = PeriodicSync::start(wal.clone(), Duration::from_millis(5)).unwrap();
        // Wait (bounded) for the thread's first sync.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while wal.io_stats().syncs == before {
            assert!(std::time::Instant::now() < deadline, "never synced");
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(ticker);
        drop(wal);
        dev.crash(CrashMode::DropAll).unwrap();
        dev.restart();
        assert_eq!(replayed(dev), 2);
    }

    #[test]
    fn drop_stops_the_thread_promptly() {
        let wal = Arc::new(Wal::open(Arc::new(MemDevice::new()), 0, &mut |_| Ok(())).unwrap());
        let ticker = PeriodicSync::start(wal, Duration::from_secs(3600)).unwrap();
        let t = std::time::Instant::now();
        drop(ticker);
        assert!(t.elapsed() < Duration::from_secs(60));
    }
}
