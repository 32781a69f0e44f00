//! Whether the insert buffer pays for its memory: a pure policy over the
//! counts of one window of operations.
//!
//! The buffer's memory comes out of the pool's. It saves a page read for
//! every write miss it absorbs, less the pages it later loads to apply
//! them; the frames it takes cost the lookups that would have hit them. In
//! a read-mostly workload the second outweighs the first, and the buffer
//! is better turned off, its records applied and its memory lent to the
//! pool (which then has the frames of a pool without one); when writes
//! return, it is turned on again. Invariant: the decision depends only on
//! the window's counts and the state passed in, never on time.

/// Counts over one window of operations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Window {
    /// Point lookups (and scans' leaf reads do not count).
    pub lookups: u64,
    /// Writes whose leaf was not in the pool.
    pub write_misses: u64,
    /// Pages the buffer read to apply its records (lookups that apply a
    /// page's records read it anyway and do not count).
    pub loads: u64,
}

/// What the gate knows besides the window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GateState {
    /// Whether the buffer is on now.
    pub on: bool,
    /// Share of write misses that saved a read, from the last window the
    /// buffer was on.
    pub saving_share: f64,
    /// Frames the buffer's memory is worth to the pool.
    pub frames: u64,
    /// Pages of the tree.
    pub pages: u64,
}

/// Turning the buffer back on needs this much more saving than cost, and
/// turning it off needs the saving below the cost: the margin keeps a
/// workload near the line from switching every window.
pub const ON_MARGIN: f64 = 1.5;

/// Reads the buffer saves in the window: each absorbed write miss is a read
/// a pool-only engine makes, less the pages the buffer loaded. While off,
/// estimated from the write misses at the last measured saving share.
pub fn reads_saved(w: &Window, s: &GateState) -> f64 {
    if s.on {
        w.write_misses as f64 - w.loads as f64
    } else {
        w.write_misses as f64 * s.saving_share.clamp(0.0, 1.0)
    }
}

/// Lookup misses the buffer's frames cost in the window, priced as under
/// uniform access (each frame holds one page of the tree's). Skewed access
/// gains less from its marginal frames, so this errs toward turning the
/// buffer off only where reads dominate.
pub fn reads_lost(w: &Window, s: &GateState) -> f64 {
    w.lookups as f64 * s.frames as f64 / s.pages.max(1) as f64
}

/// Whether the buffer should be on for the next window.
pub fn keep_buffering(w: &Window, s: &GateState) -> bool {
    let saved = reads_saved(w, s);
    let lost = reads_lost(w, s);
    if s.on {
        // With no lookup to lose, a window of loads catching up on
        // earlier writes is no reason to stop.
        saved >= lost || lost == 0.0
    } else {
        saved > ON_MARGIN * lost
    }
}

/// The saving share measured in a window the buffer was on, or `last` if
/// it saw no write miss.
pub fn saving_share(w: &Window, last: f64) -> f64 {
    if w.write_misses == 0 {
        last
    } else {
        (1.0 - w.loads as f64 / w.write_misses as f64).clamp(0.0, 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A window of `ops` operations with `reads` of them lookups, a miss
    /// ratio `miss`, and `k` absorbed write misses per page loaded.
    fn window(ops: u64, reads: f64, miss: f64, k: f64) -> Window {
        let lookups = (ops as f64 * reads) as u64;
        let write_misses = ((ops - lookups) as f64 * miss) as u64;
        Window {
            lookups,
            write_misses,
            loads: (write_misses as f64 / k) as u64,
        }
    }

    fn state(on: bool, share: f64) -> GateState {
        // The measured setup: 481 frames of budget share, 19849 pages.
        GateState {
            on,
            saving_share: share,
            frames: 481,
            pages: 19_849,
        }
    }

    #[test]
    fn write_heavy_workloads_keep_the_buffer() {
        // YCSB-A: half writes, half of them missing, two per load.
        let w = window(100_000, 0.5, 0.5, 2.0);
        assert!(keep_buffering(&w, &state(true, 0.5)));
        // Write-only: no lookup pays for the frames at all.
        let w = window(100_000, 0.0, 0.5, 1.2);
        assert!(keep_buffering(&w, &state(true, 0.2)));
        assert!(keep_buffering(&w, &state(false, 0.2)));
        let catching_up = Window {
            lookups: 0,
            write_misses: 100,
            loads: 300,
        };
        assert!(keep_buffering(&catching_up, &state(true, 0.2)));
    }

    #[test]
    fn read_mostly_workloads_turn_it_off_and_keep_it_off() {
        // YCSB-B: 5% writes, uniform, a little over one write per load.
        let w = window(100_000, 0.95, 0.5, 1.2);
        assert!(!keep_buffering(&w, &state(true, 0.2)));
        assert!(!keep_buffering(&w, &state(false, 0.2)));
        // Read-only: nothing to save.
        let w = window(100_000, 1.0, 0.5, 2.0);
        assert!(!keep_buffering(&w, &state(true, 0.5)));
    }

    #[test]
    fn the_margin_keeps_a_workload_at_the_line_where_it_is() {
        let w = Window {
            lookups: 10_000,
            write_misses: 500,
            loads: 250,
        };
        let on = state(true, 0.5);
        let (saved, lost) = (reads_saved(&w, &on), reads_lost(&w, &on));
        assert!(
            saved >= lost && saved < ON_MARGIN * lost,
            "{saved} vs {lost}"
        );
        assert!(keep_buffering(&w, &on), "on stays on");
        assert!(!keep_buffering(&w, &state(false, 0.5)), "off stays off");
    }

    #[test]
    fn the_saving_share_falls_back_when_nothing_missed() {
        let none = Window::default();
        assert_eq!(saving_share(&none, 0.7), 0.7);
        let w = Window {
            write_misses: 40,
            loads: 10,
            ..Window::default()
        };
        assert_eq!(saving_share(&w, 0.7), 0.75);
        let w = Window {
            write_misses: 10,
            loads: 30,
            ..Window::default()
        };
        assert_eq!(saving_share(&w, 0.7), 0.0);
    }
}
