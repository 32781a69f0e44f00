//! The most disk space a store directory held while a phase ran: a
//! thread samples the directory's allocated bytes every few milliseconds
//! (`process::disk_bytes`), so a checkpoint's double-write image or a
//! compaction's inputs and outputs, gone by the phase's end, still show.
//! A sample walks a handful of files' metadata, cheap beside the phase.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::process;

/// How often the directory is measured.
const EVERY: Duration = Duration::from_millis(10);

/// Samples `dir` until [`DiskPeak::finish`].
pub struct DiskPeak {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    dir: PathBuf,
    thread: Option<JoinHandle<()>>,
}

impl DiskPeak {
    pub fn start(dir: &Path) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(process::disk_bytes(dir)));
        let thread = {
            let (stop, peak, dir) = (stop.clone(), peak.clone(), dir.to_path_buf());
            std::thread::Builder::new()
                .name("disk-peak".into())
                .spawn(move || {
                    while !stop.load(Ordering::Acquire) {
                        peak.fetch_max(process::disk_bytes(&dir), Ordering::AcqRel);
                        std::thread::sleep(EVERY);
                    }
                })
                .ok()
        };
        Self {
            stop,
            peak,
            dir: dir.to_path_buf(),
            thread,
        }
    }

    /// Stops sampling; the largest size seen, the directory's size now
    /// included.
    pub fn finish(mut self) -> u64 {
        self.stop_thread();
        self.peak
            .fetch_max(process::disk_bytes(&self.dir), Ordering::AcqRel)
            .max(self.peak.load(Ordering::Acquire))
    }

    fn stop_thread(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for DiskPeak {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_written_and_removed_during_the_phase_shows_in_the_peak() {
        let dir = tempfile::tempdir().unwrap();
        let peak = DiskPeak::start(dir.path());
        let f = dir.path().join("big");
        std::fs::write(&f, vec![7u8; 4 << 20]).unwrap();
        std::thread::sleep(EVERY * 10);
        std::fs::remove_file(&f).unwrap();
        std::fs::write(dir.path().join("small"), [1u8; 4096]).unwrap();
        let p = peak.finish();
        assert!(p >= 4 << 20, "peak {p}");
        assert!(process::disk_bytes(dir.path()) < 1 << 20);
    }
}
