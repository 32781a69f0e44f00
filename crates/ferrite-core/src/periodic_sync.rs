//! A background thread that syncs a store's log at a fixed interval, so
//! that `SyncMode::Batched(d)` bounds what a crash loses to the last `d` of
//! writes even when writes stop (a writer-driven sync only runs when the
//! next write arrives).
//!
//! Invariants: no sync runs after [`PeriodicSync`] is dropped (drop wakes
//! and joins the thread, however long the interval); a failed sync ends
//! the thread, since the store is poisoned from then on and reports the
//! failure to its next caller itself.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::Result;

/// Calls a sync function every interval until dropped.
pub struct PeriodicSync {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl PeriodicSync {
    /// Starts thread `name` calling `sync` every `every`; fails only if the
    /// OS cannot spawn a thread.
    pub fn start(
        name: &str,
        every: Duration,
        mut sync: impl FnMut() -> Result<()> + Send + 'static,
    ) -> std::io::Result<Self> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let (lock, wake) = &*flag;
                let stopped = |g: &std::sync::MutexGuard<'_, bool>| **g;
                loop {
                    let guard = lock.lock().unwrap_or_else(PoisonError::into_inner);
                    // Checked before waiting: a drop may have set the flag
                    // before this thread first took the lock. A spurious
                    // wake-up only syncs early, which is harmless.
                    if stopped(&guard) {
                        return;
                    }
                    let (guard, _) = wake
                        .wait_timeout(guard, every)
                        .unwrap_or_else(PoisonError::into_inner);
                    if stopped(&guard) {
                        return;
                    }
                    // Sync without the flag held, so a drop is not delayed
                    // behind the device.
                    drop(guard);
                    if sync().is_err() {
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
        *lock.lock().unwrap_or_else(PoisonError::into_inner) = true;
        wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Instant;

    fn counter() -> (Arc<AtomicU64>, impl FnMut() -> Result<()> + Send + 'static) {
        let n = Arc::new(AtomicU64::new(0));
        let m = n.clone();
        (n, move || {
            m.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
    }

    #[test]
    fn syncs_every_interval_until_dropped() {
        let (n, sync) = counter();
        let ticker = PeriodicSync::start("test-sync", Duration::from_millis(2), sync).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while n.load(Ordering::SeqCst) < 3 {
            assert!(Instant::now() < deadline, "fewer than 3 syncs in 10 s");
            std::thread::sleep(Duration::from_millis(2));
        }
        drop(ticker);
        let after = n.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(n.load(Ordering::SeqCst), after, "a sync ran after the drop");
    }

    #[test]
    fn drop_does_not_wait_out_a_long_interval() {
        let (n, sync) = counter();
        let ticker = PeriodicSync::start("test-sync", Duration::from_secs(3600), sync).unwrap();
        let t = Instant::now();
        drop(ticker);
        assert!(t.elapsed() < Duration::from_secs(60));
        assert_eq!(n.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_failed_sync_ends_the_thread() {
        let n = Arc::new(AtomicU64::new(0));
        let m = n.clone();
        let ticker = PeriodicSync::start("test-sync", Duration::from_millis(1), move || {
            m.fetch_add(1, Ordering::SeqCst);
            Err(crate::Error::Poisoned {
                cause: "test".into(),
                no_space: false,
                corruption: false,
            })
        })
        .unwrap();
        std::thread::sleep(Duration::from_millis(50));
        drop(ticker);
        assert_eq!(n.load(Ordering::SeqCst), 1);
    }
}
