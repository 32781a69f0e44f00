//! The data log's segments: which are free, which take writes, and how
//! many live blocks each holds.
//!
//! Invariants (kept under the volume's space lock):
//! - a segment's `live` is the number of its blocks the block map points
//!   at; the sum over segments is the map's mapped block count;
//! - a segment is `Free` only after a map sync that followed the last map
//!   change dropping a reference to it (`Draining` until then), so no
//!   durable map entry can point into a segment that is being rewritten;
//! - at most two segments are `Open` (the client head and the reclaimer's).

use std::collections::VecDeque;

/// Where a segment is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentState {
    /// Holds nothing the durable map can point at; may be written.
    Free,
    /// A head: blocks are being appended to it.
    Open,
    /// Full; its blocks die as the map moves away from them.
    Sealed,
    /// Sealed with no live block left, waiting for the map sync that
    /// makes the last reference's removal durable.
    Draining,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentInfo {
    pub state: SegmentState,
    pub live: u32,
    /// Blocks allocated in it whose map entries are not in yet: a
    /// segment with any cannot drain, however few blocks are live.
    pub inflight: u32,
    /// The table's clock when the segment was sealed (its age's origin).
    pub sealed_at: u64,
}

pub struct SegmentTable {
    segs: Vec<SegmentInfo>,
    free: VecDeque<u32>,
    capacity: u32,
    clock: u64,
    live_total: u64,
}

impl SegmentTable {
    /// A table of `live.len()` segments of `capacity` blocks whose live
    /// counts are `live` (from a walk of the recovered map): segments with
    /// live blocks are sealed, the rest free.
    pub fn from_live(live: Vec<u32>, capacity: u32) -> Self {
        let mut free = VecDeque::new();
        let mut live_total = 0;
        let segs = live
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                live_total += n as u64;
                let state = if n == 0 {
                    free.push_back(i as u32);
                    SegmentState::Free
                } else {
                    SegmentState::Sealed
                };
                SegmentInfo {
                    state,
                    live: n,
                    inflight: 0,
                    sealed_at: 0,
                }
            })
            .collect();
        Self {
            segs,
            free,
            capacity,
            clock: 1,
            live_total,
        }
    }

    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    pub fn len(&self) -> usize {
        self.segs.len()
    }

    pub fn infos(&self) -> &[SegmentInfo] {
        &self.segs
    }

    pub fn info(&self, seg: u32) -> Option<&SegmentInfo> {
        self.segs.get(seg as usize)
    }

    pub fn clock(&self) -> u64 {
        self.clock
    }

    pub fn free_count(&self) -> usize {
        self.free.len()
    }

    pub fn live_blocks(&self) -> u64 {
        self.live_total
    }

    /// Segments not free (open, sealed or draining).
    pub fn used_count(&self) -> usize {
        self.segs.len() - self.free.len()
    }

    /// Opens a free segment as a head, if more than `keep` are free (the
    /// client head leaves the reclaimer room to work).
    pub fn open_free(&mut self, keep: usize) -> Option<u32> {
        if self.free.len() <= keep {
            return None;
        }
        let seg = self.free.pop_front()?;
        if let Some(s) = self.segs.get_mut(seg as usize) {
            s.state = SegmentState::Open;
        }
        Some(seg)
    }

    /// A head is full: it ages from now on.
    pub fn seal(&mut self, seg: u32) {
        let clock = self.clock;
        if let Some(s) = self.segs.get_mut(seg as usize) {
            s.sealed_at = clock;
            s.state = SegmentState::Sealed;
            self.clock += 1;
        }
        self.settle(seg);
    }

    /// A sealed segment with nothing live and nothing in flight drains.
    fn settle(&mut self, seg: u32) {
        if let Some(s) = self.segs.get_mut(seg as usize) {
            if s.state == SegmentState::Sealed && s.live == 0 && s.inflight == 0 {
                s.state = SegmentState::Draining;
            }
        }
    }

    /// `n` blocks of `seg` were handed out; their map entries follow.
    pub fn reserve(&mut self, seg: u32, n: u32) {
        if let Some(s) = self.segs.get_mut(seg as usize) {
            s.inflight += n;
        }
    }

    /// The map entries for `n` reserved blocks of `seg` are in (or will
    /// never be: a failed write, a copy a client write overtook).
    pub fn land(&mut self, seg: u32, n: u32) {
        if let Some(s) = self.segs.get_mut(seg as usize) {
            debug_assert!(s.inflight >= n);
            s.inflight = s.inflight.saturating_sub(n);
        }
        self.settle(seg);
    }

    pub fn add_live(&mut self, seg: u32, n: u32) {
        if let Some(s) = self.segs.get_mut(seg as usize) {
            s.live = s.live.saturating_add(n);
            self.live_total += n as u64;
        }
    }

    pub fn sub_live(&mut self, seg: u32, n: u32) {
        if let Some(s) = self.segs.get_mut(seg as usize) {
            debug_assert!(s.live >= n, "segment {seg}: {} live, {n} dropped", s.live);
            let n = n.min(s.live);
            s.live -= n;
            self.live_total -= n as u64;
        }
        self.settle(seg);
    }

    /// Segments waiting for a map sync before they can be reused.
    pub fn draining(&self) -> Vec<u32> {
        (0..self.segs.len() as u32)
            .filter(|&i| self.segs[i as usize].state == SegmentState::Draining)
            .collect()
    }

    /// Frees `segs` (listed by [`SegmentTable::draining`] before a map
    /// sync that has since completed). A segment that took a live block
    /// again meanwhile cannot be among them: only heads take blocks.
    pub fn release(&mut self, segs: &[u32]) {
        for &seg in segs {
            if let Some(s) = self.segs.get_mut(seg as usize) {
                if s.state == SegmentState::Draining && s.live == 0 {
                    s.state = SegmentState::Free;
                    self.free.push_back(seg);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_drains_then_frees_only_on_release() {
        let mut t = SegmentTable::from_live(vec![0, 5, 0, 0], 8);
        assert_eq!(t.free_count(), 3);
        assert_eq!(t.live_blocks(), 5);
        let head = t.open_free(1).unwrap();
        assert_eq!(head, 0);
        t.add_live(head, 8);
        t.seal(head);
        assert_eq!(t.info(0).unwrap().state, SegmentState::Sealed);
        t.sub_live(1, 5);
        assert_eq!(t.draining(), vec![1]);
        // Not free until released.
        assert_eq!(t.free_count(), 2);
        t.release(&[1]);
        assert_eq!(t.free_count(), 3);
        assert_eq!(t.info(1).unwrap().state, SegmentState::Free);
        // The client head leaves `keep` segments for the reclaimer.
        assert!(t.open_free(3).is_none());
        assert!(t.open_free(2).is_some());
    }

    #[test]
    fn an_emptied_head_drains_when_sealed() {
        let mut t = SegmentTable::from_live(vec![0, 0], 4);
        let h = t.open_free(0).unwrap();
        t.add_live(h, 2);
        t.sub_live(h, 2);
        assert_eq!(t.info(h).unwrap().state, SegmentState::Open);
        t.seal(h);
        assert_eq!(t.draining(), vec![h]);
    }

    #[test]
    fn blocks_in_flight_keep_a_sealed_segment_from_draining() {
        let mut t = SegmentTable::from_live(vec![0, 0], 4);
        let h = t.open_free(0).unwrap();
        t.reserve(h, 4);
        // Sealed as the allocation filled it, before its entries are in.
        t.seal(h);
        assert!(t.draining().is_empty());
        t.add_live(h, 3);
        t.land(h, 4);
        assert!(t.draining().is_empty());
        t.sub_live(h, 3);
        assert_eq!(t.draining(), vec![h]);
    }
}
