//! Periodic sync for baselines without a native group-commit interval, so
//! `SyncMode::Batched(d)` means the same thing for every store.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Calls a sync function every interval until dropped.
pub struct SyncTicker {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SyncTicker {
    pub fn start(every: Duration, sync: impl Fn() + Send + 'static) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("bench-sync-ticker".into())
            .spawn(move || {
                while !flag.load(Ordering::Acquire) {
                    std::thread::sleep(every);
                    sync();
                }
            })
            .ok();
        Self { stop, thread }
    }
}

impl Drop for SyncTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
