//! When to reclaim space and which segments to reclaim: pure functions of
//! the segment table, tested without I/O.
//!
//! Victims are chosen by LFS's cost-benefit rule: cleaning a segment with
//! live fraction `u` frees `1 - u` of a segment at the cost of reading it
//! and writing `u` of it, and older data is less likely to die soon, so
//! the score is `(1 - u) * age / (1 + u)`. Greedy (lowest `u`) is the
//! special case of equal ages.

use crate::segment_table::{SegmentInfo, SegmentState};

/// The reclaimer's thresholds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReclaimTargets {
    /// Reclaim while fewer segments than this are free.
    pub low_free: usize,
    /// Reclaim while the segments in use hold more than this many times
    /// the live blocks (space amplification), when a victim is worth it.
    pub space_amp: f64,
    /// Never reclaim a segment more than this fraction live: copying it
    /// frees too little.
    pub max_victim_live: f64,
}

impl Default for ReclaimTargets {
    fn default() -> Self {
        Self {
            low_free: 3,
            space_amp: 1.2,
            max_victim_live: 0.9,
        }
    }
}

/// True when the reclaimer should run now.
pub fn should_reclaim(
    free_segments: usize,
    used_segments: usize,
    live_blocks: u64,
    capacity: u32,
    t: &ReclaimTargets,
) -> bool {
    if free_segments < t.low_free {
        return true;
    }
    // Two segments of slack: the heads are partly filled by design.
    let used = used_segments.saturating_sub(2) as f64 * capacity as f64;
    used > t.space_amp * live_blocks as f64 + capacity as f64
}

/// Up to `max` sealed segments to reclaim, best first by cost-benefit;
/// none above `t.max_victim_live` live, none that frees nothing.
pub fn pick_victims(
    segs: &[SegmentInfo],
    capacity: u32,
    now: u64,
    max: usize,
    t: &ReclaimTargets,
) -> Vec<u32> {
    let cap = capacity.max(1) as f64;
    let mut scored: Vec<(f64, u32)> = segs
        .iter()
        .enumerate()
        .filter(|(_, s)| s.state == SegmentState::Sealed && s.live < capacity)
        .filter_map(|(i, s)| {
            let u = s.live as f64 / cap;
            if u > t.max_victim_live {
                return None;
            }
            let age = now.saturating_sub(s.sealed_at).max(1) as f64;
            Some(((1.0 - u) * age / (1.0 + u), i as u32))
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.into_iter().take(max).map(|(_, i)| i).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(state: SegmentState, live: u32, sealed_at: u64) -> SegmentInfo {
        SegmentInfo {
            state,
            live,
            inflight: 0,
            sealed_at,
        }
    }

    #[test]
    fn emptier_and_older_segments_win() {
        use SegmentState::*;
        let segs = [
            seg(Sealed, 90, 1),  // old but nearly full
            seg(Sealed, 10, 9),  // young, nearly empty
            seg(Sealed, 50, 1),  // old, half full
            seg(Open, 0, 0),     // a head: never a victim
            seg(Free, 0, 0),     // free: never a victim
            seg(Draining, 0, 5), // already draining
            seg(Sealed, 100, 0), // full: frees nothing
        ];
        let t = ReclaimTargets {
            max_victim_live: 0.95,
            ..ReclaimTargets::default()
        };
        let v = pick_victims(&segs, 100, 10, 10, &t);
        // scores at now = 10: #1 0.9*1/1.1 = 0.82, #2 0.5*9/1.5 = 3.0,
        // #0 0.1*9/1.9 = 0.47.
        assert_eq!(v, vec![2, 1, 0]);
        let strict = ReclaimTargets {
            max_victim_live: 0.6,
            ..t
        };
        assert_eq!(pick_victims(&segs, 100, 10, 10, &strict), vec![2, 1]);
        assert_eq!(pick_victims(&segs, 100, 10, 1, &strict), vec![2]);
    }

    #[test]
    fn reclaim_runs_when_free_is_low_or_space_amp_high() {
        let t = ReclaimTargets::default();
        assert!(should_reclaim(1, 10, 10_000, 1000, &t));
        // 10 used (8 counted) of 1000 blocks against 8000 live: fine.
        assert!(!should_reclaim(10, 10, 8000, 1000, &t));
        // Same segments with 4000 live: amplification 2, reclaim.
        assert!(should_reclaim(10, 10, 4000, 1000, &t));
    }
}
