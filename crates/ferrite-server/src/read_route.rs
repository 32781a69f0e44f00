//! Where key reads run: on the event loop that received them, or on the
//! reader pool ([`crate::readers`]).
//!
//! A read that misses the engine's cache waits for the device, and on a
//! loop every other connection of that loop waits with it. A read that
//! hits costs a few microseconds, less than handing it to another thread
//! and back. So reads run on their loop while they stay in cache, and go
//! to the readers while they go to the device. Which is the case is
//! measured, not guessed: whoever runs key reads (a loop or a reader)
//! counts the commands and the device reads its own thread issued for
//! them ([`ferrite_io::thread_reads`]); every [`WINDOW`] the route is
//! decided again from the window just past, by [`offload`].
//!
//! Invariants:
//! - with no readers (`--readers 0`) reads always run on their loop;
//! - the decision changes only at a window's end, and only on a window
//!   of at least [`MIN_COMMANDS`] reads (an idle server keeps its route);
//! - turning the readers on needs more device reads per command than
//!   keeping them on ([`ON_AT`] > [`OFF_BELOW`]), so a store near the
//!   edge does not flap.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// How long a decision holds.
pub const WINDOW: Duration = Duration::from_millis(100);

/// Reads a window needs before it can change the route.
pub const MIN_COMMANDS: u64 = 32;

/// Device reads per command from which reads move to the readers: one in
/// fifty commands waiting ~100 µs costs a loop more than handing every
/// command over (~2 µs each, amortized over a pipeline).
pub const ON_AT: f64 = 0.02;

/// Device reads per command below which reads come back to the loops.
pub const OFF_BELOW: f64 = 0.005;

/// Key reads run and the device reads they issued, over a window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Window {
    pub commands: u64,
    pub device_reads: u64,
}

/// Whether reads should run on the readers after a window, given whether
/// they did during it. A pure function of the window.
pub fn offload(w: Window, on: bool) -> bool {
    if w.commands < MIN_COMMANDS {
        return on;
    }
    let per = w.device_reads as f64 / w.commands as f64;
    if on {
        per >= OFF_BELOW
    } else {
        per >= ON_AT
    }
}

/// The route every loop consults, and what it is decided from.
pub struct ReadRoute {
    readers: usize,
    on: AtomicBool,
    commands: AtomicU64,
    device_reads: AtomicU64,
    /// Reads the readers ran (`INFO stats`).
    offloaded: AtomicU64,
    /// When the window began, and the counts at its beginning.
    window: Mutex<(Instant, Window)>,
}

impl ReadRoute {
    /// A route for a server with `readers` reader threads.
    pub fn new(readers: usize) -> Self {
        Self {
            readers,
            on: AtomicBool::new(false),
            commands: AtomicU64::new(0),
            device_reads: AtomicU64::new(0),
            offloaded: AtomicU64::new(0),
            window: Mutex::new((Instant::now(), Window::default())),
        }
    }

    /// Reader threads the server runs.
    pub fn readers(&self) -> usize {
        self.readers
    }

    /// Whether key reads go to the readers now.
    pub fn offloading(&self) -> bool {
        self.readers > 0 && self.on.load(Ordering::Relaxed)
    }

    /// Counts `commands` key reads that issued `device_reads` reads of
    /// the device; `by_reader` when a reader ran them.
    pub fn record(&self, commands: u64, device_reads: u64, by_reader: bool) {
        self.commands.fetch_add(commands, Ordering::Relaxed);
        if device_reads > 0 {
            self.device_reads.fetch_add(device_reads, Ordering::Relaxed);
        }
        if by_reader {
            self.offloaded.fetch_add(commands, Ordering::Relaxed);
        }
    }

    /// Key reads the readers have run.
    pub fn offloaded(&self) -> u64 {
        self.offloaded.load(Ordering::Relaxed)
    }

    /// Decides the route again if a window has passed (loops call this
    /// at their tick; one of them does the work).
    pub fn refresh(&self, now: Instant) {
        if self.readers == 0 {
            return;
        }
        let Some(mut w) = self.window.try_lock() else {
            return;
        };
        if now.duration_since(w.0) < WINDOW {
            return;
        }
        let total = Window {
            commands: self.commands.load(Ordering::Relaxed),
            device_reads: self.device_reads.load(Ordering::Relaxed),
        };
        let past = Window {
            commands: total.commands - w.1.commands,
            device_reads: total.device_reads - w.1.device_reads,
        };
        let on = self.on.load(Ordering::Relaxed);
        let next = offload(past, on);
        if next != on {
            self.on.store(next, Ordering::Relaxed);
            log::debug!(
                "key reads now run on the {} ({} device reads for {} commands in the last window)",
                if next { "readers" } else { "loops" },
                past.device_reads,
                past.commands
            );
        }
        // A window too small to decide on runs on into the next one.
        if past.commands >= MIN_COMMANDS {
            *w = (now, total);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(commands: u64, device_reads: u64) -> Window {
        Window {
            commands,
            device_reads,
        }
    }

    #[test]
    fn reads_in_cache_stay_on_the_loops() {
        assert!(!offload(w(100_000, 0), false));
        assert!(!offload(w(100_000, 100), false));
        assert!(!offload(w(100_000, 100), true));
    }

    #[test]
    fn reads_that_go_to_the_device_move_to_the_readers() {
        assert!(offload(w(1_000, 900), false));
        assert!(offload(w(1_000, 20), false));
        assert!(offload(w(1_000, 900), true));
    }

    #[test]
    fn between_the_thresholds_the_route_stays() {
        // 1 in 100: below ON_AT, above OFF_BELOW.
        assert!(!offload(w(10_000, 100), false));
        assert!(offload(w(10_000, 100), true));
    }

    #[test]
    fn a_small_window_decides_nothing() {
        assert!(offload(w(MIN_COMMANDS - 1, 0), true));
        assert!(!offload(w(MIN_COMMANDS - 1, MIN_COMMANDS - 1), false));
    }

    #[test]
    fn the_route_follows_the_windows() {
        let r = ReadRoute::new(4);
        let t0 = Instant::now();
        r.record(1_000, 800, false);
        r.refresh(t0 + WINDOW);
        assert!(r.offloading());
        r.record(1_000, 0, true);
        r.refresh(t0 + WINDOW * 2);
        assert!(!r.offloading());
        assert_eq!(r.offloaded(), 1_000);
        // Without readers there is nowhere to send reads.
        let none = ReadRoute::new(0);
        none.record(1_000, 1_000, false);
        none.refresh(t0 + WINDOW);
        assert!(!none.offloading());
    }
}
