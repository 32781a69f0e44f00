//! Victim selection for the buffer pool: the clock (second-chance) policy
//! as a pure function of frame states, so it is tested without I/O.
//!
//! A frame may be chosen only if it is unpinned, and clean unless `steal`
//! allows a dirty one (the pool then writes it to its spill file first;
//! see `buffer_pool`). A referenced frame gets a second chance: its bit is
//! cleared and the hand moves on. Empty frames are taken first. A dirty
//! victim's write takes along the cold dirty frames the hand reaches next
//! ([`cleaning_batch`]), so one overlapped batch of writes pays for
//! several evictions.

/// What the policy needs to know about one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameState {
    pub empty: bool,
    pub pinned: bool,
    pub dirty: bool,
    pub referenced: bool,
}

/// Picks a victim starting at `hand`, clearing reference bits it passes
/// (through `clear`). Returns the victim and the new hand, or `None` after
/// two full sweeps found nothing evictable.
pub fn pick_victim(
    n: usize,
    hand: usize,
    steal: bool,
    state: &dyn Fn(usize) -> FrameState,
    clear: &mut dyn FnMut(usize),
) -> Option<(usize, usize)> {
    if n == 0 {
        return None;
    }
    for step in 0..2 * n {
        let i = (hand + step) % n;
        let s = state(i);
        if s.empty && !s.pinned {
            return Some((i, (i + 1) % n));
        }
        if s.pinned || (s.dirty && !steal) {
            continue;
        }
        if s.referenced {
            clear(i);
            continue;
        }
        return Some((i, (i + 1) % n));
    }
    None
}

/// The frames to write out beside a dirty victim: at most `max` of the
/// `window` frames after `from` (wrapping over `n`, never reaching
/// `from - 1`, the victim), in hand order, that are dirty, unpinned and
/// unreferenced. These are the frames the hand will evict next if nothing
/// touches them, so writing them in the victim's batch turns their
/// evictions into clean ones without writing pages the pool is using.
pub fn cleaning_batch(
    n: usize,
    from: usize,
    window: usize,
    max: usize,
    state: &dyn Fn(usize) -> FrameState,
) -> Vec<usize> {
    let mut out = Vec::new();
    if n == 0 {
        return out;
    }
    for step in 0..window.min(n - 1) {
        if out.len() >= max {
            break;
        }
        let i = (from + step) % n;
        let s = state(i);
        if !s.empty && !s.pinned && s.dirty && !s.referenced {
            out.push(i);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    fn run(states: Vec<FrameState>, hand: usize) -> (Option<(usize, usize)>, Vec<FrameState>) {
        run_with(states, hand, false)
    }

    fn run_with(
        states: Vec<FrameState>,
        hand: usize,
        steal: bool,
    ) -> (Option<(usize, usize)>, Vec<FrameState>) {
        let cell = RefCell::new(states);
        let n = cell.borrow().len();
        let r = pick_victim(n, hand, steal, &|i| cell.borrow()[i], &mut |i| {
            cell.borrow_mut()[i].referenced = false
        });
        (r, cell.into_inner())
    }

    const CLEAN: FrameState = FrameState {
        empty: false,
        pinned: false,
        dirty: false,
        referenced: false,
    };

    #[test]
    fn second_chance() {
        let hot = FrameState {
            referenced: true,
            ..CLEAN
        };
        let (r, after) = run(vec![hot, hot, CLEAN, hot], 0);
        assert_eq!(r, Some((2, 3)));
        assert!(!after[0].referenced && !after[1].referenced && after[3].referenced);
    }

    #[test]
    fn pinned_and_dirty_frames_are_never_chosen() {
        let pinned = FrameState {
            pinned: true,
            ..CLEAN
        };
        let dirty = FrameState {
            dirty: true,
            ..CLEAN
        };
        assert_eq!(run(vec![pinned, dirty, pinned], 0).0, None);
        assert_eq!(run(vec![pinned, dirty, CLEAN], 1).0, Some((2, 0)));
        // With stealing allowed a dirty frame is a victim like a clean one,
        // and a pinned one still never is.
        assert_eq!(
            run_with(vec![pinned, dirty, pinned], 0, true).0,
            Some((1, 2))
        );
        assert_eq!(run_with(vec![pinned, pinned], 0, true).0, None);
    }

    #[test]
    fn all_referenced_still_yields_a_victim() {
        let hot = FrameState {
            referenced: true,
            ..CLEAN
        };
        assert_eq!(run(vec![hot; 3], 1).0, Some((1, 2)));
    }

    #[test]
    fn the_cleaning_batch_takes_cold_dirty_frames_ahead_of_the_hand() {
        let cold = FrameState {
            dirty: true,
            ..CLEAN
        };
        let hot = FrameState {
            referenced: true,
            ..cold
        };
        let pinned = FrameState {
            pinned: true,
            ..cold
        };
        let empty = FrameState {
            empty: true,
            ..cold
        };
        //          0     1    2       3      4     5     6     7
        let s = [cold, hot, pinned, CLEAN, cold, empty, cold, cold];
        let batch = |from, window, max| cleaning_batch(s.len(), from, window, max, &|i| s[i]);
        // Victim at 0, hand at 1: hot, pinned, clean and empty frames stay.
        assert_eq!(batch(1, 8, 8), vec![4, 6, 7]);
        assert_eq!(batch(1, 8, 2), vec![4, 6], "at most `max`, in hand order");
        assert_eq!(batch(1, 4, 8), vec![4], "only the window is looked at");
        // Wrapping, and never the victim (at 6, hand at 7).
        assert_eq!(batch(7, 100, 8), vec![7, 0, 4]);
        assert_eq!(cleaning_batch(0, 0, 8, 8, &|i| s[i]), Vec::<usize>::new());
    }
}
