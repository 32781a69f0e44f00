//! Which zone does what, and how much of each is still live.
//!
//! The device's zones are split at format time: two MetaLog slots, a ring
//! of WAL zones, and data zones that hold leaf pages or value-log records.
//! Data zones move between *free* (empty), *leaf* and *vlog*; a reclaimed
//! zone waits in *pending reset* until a MetaLog that no longer refers to
//! it is durable, and only then is it reset and freed.
//!
//! Invariants: a page id is a global page offset (device address / page
//! size); a leaf zone's `valid` counts the pages that leaf metadata points
//! to; a vlog zone's `valid` counts live value bytes; an open leaf zone's
//! `handed` counts the pages its flusher has given ids, written or
//! waiting, so the rest of its capacity is room the flusher can still
//! write. All counts are rebuilt from the MetaLog at recovery (`handed`
//! from the write pointer of a zone a flusher takes back).

use std::collections::VecDeque;

use crate::gc_policy::{self, Candidate};

/// Of the leaf zones a restart found partly written, as (zone, bytes
/// written), the ones the flushers take back, at most `flushers`: those
/// with the most room first, and only where the write pointer sits on a
/// page boundary with room for a page (a torn write can leave it inside a
/// page, and such a zone is finished instead).
pub fn resumed_leaf_zones(
    partly: &[(u32, u64)],
    page: u64,
    capacity: u64,
    flushers: usize,
) -> Vec<(u32, u64)> {
    let page = page.max(1);
    let mut ok: Vec<(u32, u64)> = partly
        .iter()
        .copied()
        .filter(|&(_, w)| w.is_multiple_of(page) && w.saturating_add(page) <= capacity)
        .collect();
    ok.sort_by_key(|&(z, w)| (w, z));
    ok.truncate(flushers);
    ok
}

/// What a zone is used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Meta,
    Wal,
    Free,
    Leaf,
    Vlog,
}

#[derive(Debug, Clone)]
pub struct ZoneStat {
    pub role: Role,
    /// Valid pages (leaf) or live bytes (vlog).
    pub valid: u64,
    /// Being written (a flusher or the value log holds it open).
    pub open: bool,
    /// Pages a flusher has handed out in this zone, written or waiting
    /// (leaf zones; what is left of an open one is room to write in).
    pub handed: u64,
    /// Emptied by reclamation; reset after the next MetaLog.
    pub pending_reset: bool,
    /// Clock value of the zone's last write.
    pub stamp: u64,
}

/// Zone roles and liveness.
#[derive(Debug)]
pub struct ZoneSpace {
    pub zones: Vec<ZoneStat>,
    free: VecDeque<u32>,
    pub pages_per_zone: u64,
    /// Writable pages per zone.
    pub capacity_pages: u64,
    clock: u64,
    /// Writes admitted and not yet finished (see [`ZoneSpace::admit`]).
    writing: usize,
    /// Flushers writing leaf zones in turn.
    flushers: usize,
}

impl ZoneSpace {
    #[cfg(test)]
    pub fn zone_of(&self, page: u64) -> usize {
        (page / self.pages_per_zone) as usize
    }

    /// `meta_zones` MetaLog zones (both slots) come first, then the WAL ring.
    pub fn new(
        zone_count: u32,
        meta_zones: u32,
        wal_zones: u32,
        pages_per_zone: u64,
        capacity_pages: u64,
        flushers: usize,
    ) -> Self {
        let mut zones = Vec::with_capacity(zone_count as usize);
        let mut free = VecDeque::new();
        for z in 0..zone_count {
            let role = if z < meta_zones {
                Role::Meta
            } else if z < meta_zones + wal_zones {
                Role::Wal
            } else {
                free.push_back(z);
                Role::Free
            };
            zones.push(ZoneStat {
                role,
                valid: 0,
                open: false,
                handed: 0,
                pending_reset: false,
                stamp: 0,
            });
        }
        Self {
            zones,
            free,
            pages_per_zone,
            capacity_pages,
            clock: 0,
            writing: 0,
            flushers,
        }
    }

    pub fn free_zones(&self) -> usize {
        self.free.len()
    }

    /// Data zones free or waiting for their reset (free after the next
    /// checkpoint).
    pub fn room(&self) -> usize {
        self.free.len() + self.zones.iter().filter(|s| s.pending_reset).count()
    }

    /// Admits a write if `floor` zones stay free beside one for each write
    /// already admitted and not finished: a write takes at most one zone
    /// of its own (a value-log zone, or a flusher's next), so writers
    /// admitted together cannot eat into the zones kept for reclamation.
    /// Zones waiting for their reset do not count: a flusher can take
    /// only free ones, and those become free only at the next checkpoint,
    /// which the refused writer's reclamation runs. Each admission is
    /// ended by [`ZoneSpace::finish`].
    pub fn admit(&mut self, floor: usize) -> bool {
        let ok = self.free.len() >= self.admission_need(floor);
        if ok {
            self.writing += 1;
        }
        ok
    }

    /// Free zones that reclamation may fill with moved records, when the
    /// checkpoint after the moves may take `checkpoint` zones: what is
    /// left once every admitted write has its zone (at least one, a
    /// flusher's next, when none is admitted). The room left in the
    /// flushers' zones counts as zones ([`gc_policy::flusher_room`]).
    pub fn movable(&self, checkpoint: u64) -> u64 {
        ((self.free.len() + self.flusher_room()) as u64)
            .saturating_sub(checkpoint + self.writing.max(1) as u64)
    }

    /// Pages a leaf zone's migration may write: those of the free zones
    /// and the room in the flushers' zones, less a zone for each admitted
    /// write.
    pub fn movable_pages(&self) -> u64 {
        let free = self.free.len() as u64 * self.capacity_pages;
        (free + self.flusher_pages()).saturating_sub(self.writing as u64 * self.capacity_pages)
    }

    /// Zones [`ZoneSpace::admit`] wants free or pending to admit one more
    /// write over `floor`, less the zones' worth of room the flushers'
    /// zones still have: a flusher moves on to a free zone only once its
    /// own is full.
    pub fn admission_need(&self, floor: usize) -> usize {
        (floor + self.writing).saturating_sub(self.flusher_room())
    }

    /// Whether deferred leaf writes (inserting evicted batches into the
    /// leaves, and the merges that follow) may go on: the free zones and
    /// the flushers' room still cover `floor` and a zone for each admitted
    /// write but the caller's own (`admitted`: the caller is one of them).
    /// Those writes are not bounded by any one admission, so they stop
    /// here and wait, rather than take the zones kept for reclamation.
    pub fn admits_leaf_work(&self, floor: usize, admitted: bool) -> bool {
        let others = self.writing.saturating_sub(usize::from(admitted));
        self.free.len() + self.flusher_room() >= floor + others
    }

    /// [`gc_policy::flusher_pages`] of the leaf zones held open.
    pub fn flusher_pages(&self) -> u64 {
        gc_policy::flusher_pages(self.held_rooms(), self.flushers)
    }

    /// [`gc_policy::flusher_room`] of the leaf zones held open.
    pub fn flusher_room(&self) -> usize {
        gc_policy::flusher_room(self.held_rooms(), self.flushers, self.capacity_pages)
    }

    /// Pages not yet handed out in each leaf zone a flusher holds.
    fn held_rooms(&self) -> impl Iterator<Item = u64> + '_ {
        self.zones
            .iter()
            .filter(|s| s.open && s.role == Role::Leaf)
            .map(|s| self.capacity_pages.saturating_sub(s.handed))
    }

    /// Ends an admitted write.
    pub fn finish(&mut self) {
        self.writing = self.writing.saturating_sub(1);
    }

    /// Takes an empty zone for `role`.
    pub fn take(&mut self, role: Role) -> Option<u32> {
        let z = self.free.pop_front()?;
        self.clock += 1;
        if let Some(s) = self.zones.get_mut(z as usize) {
            *s = ZoneStat {
                role,
                valid: 0,
                open: true,
                handed: 0,
                pending_reset: false,
                stamp: self.clock,
            };
        }
        Some(z)
    }

    /// Marks a zone written (by the flusher that holds it) now.
    pub fn touch(&mut self, zone: usize) {
        self.clock += 1;
        if let Some(s) = self.zones.get_mut(zone) {
            s.stamp = self.clock;
        }
    }

    pub fn close(&mut self, zone: usize) {
        if let Some(s) = self.zones.get_mut(zone) {
            s.open = false;
        }
    }

    /// A flusher handed out the next page of `zone`, valid from now on.
    pub fn add_page(&mut self, zone: usize) {
        if let Some(s) = self.zones.get_mut(zone) {
            s.valid += 1;
            s.handed += 1;
        }
    }

    /// A partly written leaf zone goes back to a flusher, with `handed`
    /// pages already in it.
    pub fn resume(&mut self, zone: usize, handed: u64) {
        if let Some(s) = self.zones.get_mut(zone) {
            s.open = true;
            s.handed = handed;
        }
    }

    pub fn add_valid(&mut self, page_or_zone: usize, n: u64) {
        if let Some(s) = self.zones.get_mut(page_or_zone) {
            s.valid += n;
        }
    }

    pub fn sub_valid(&mut self, zone: usize, n: u64) {
        if let Some(s) = self.zones.get_mut(zone) {
            s.valid = s.valid.saturating_sub(n);
        }
    }

    /// Zones that reclamation may take, with their liveness.
    pub fn candidates(&self, role: Role, capacity: u64) -> Vec<Candidate> {
        self.zones
            .iter()
            .enumerate()
            .filter(|(_, s)| s.role == role && !s.open && !s.pending_reset)
            .map(|(z, s)| Candidate {
                zone: z as u32,
                valid: s.valid,
                capacity,
                age: self.clock.saturating_sub(s.stamp),
            })
            .collect()
    }

    pub fn mark_pending_reset(&mut self, zone: usize) {
        if let Some(s) = self.zones.get_mut(zone) {
            s.pending_reset = true;
        }
    }

    /// Zones waiting for a reset (after a durable MetaLog).
    pub fn pending_resets(&self) -> Vec<u32> {
        self.zones
            .iter()
            .enumerate()
            .filter(|(_, s)| s.pending_reset)
            .map(|(z, _)| z as u32)
            .collect()
    }

    /// A zone was reset on the device: it is free again.
    pub fn freed(&mut self, zone: u32) {
        if let Some(s) = self.zones.get_mut(zone as usize) {
            *s = ZoneStat {
                role: Role::Free,
                valid: 0,
                open: false,
                handed: 0,
                pending_reset: false,
                stamp: 0,
            };
            self.free.push_back(zone);
        }
    }

    /// Rebuilds the free list after recovery set roles directly.
    pub fn rebuild_free(&mut self) {
        self.free = self
            .zones
            .iter()
            .enumerate()
            .filter(|(_, s)| s.role == Role::Free)
            .map(|(z, _)| z as u32)
            .collect();
    }

    /// Zones in use for data (leaf or vlog), for space amplification.
    pub fn used_data_zones(&self) -> usize {
        self.zones
            .iter()
            .filter(|s| matches!(s.role, Role::Leaf | Role::Vlog))
            .count()
    }

    /// Bytes of data zones in use over live bytes; zones waiting for their
    /// reset count as free when `after_resets`.
    pub fn amplification(&self, zone_capacity: u64, page_size: u64, after_resets: bool) -> f64 {
        let mut used = 0u64;
        let mut live = 0u64;
        for z in &self.zones {
            if !matches!(z.role, Role::Leaf | Role::Vlog) || (after_resets && z.pending_reset) {
                continue;
            }
            used += zone_capacity;
            live += if z.role == Role::Leaf {
                z.valid * page_size
            } else {
                z.valid
            };
        }
        crate::gc_policy::space_amplification(used, live)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flushers_take_back_the_emptiest_page_aligned_zones() {
        let page = 4096;
        let cap = 16 * page;
        let partly = [
            (7, 9 * page),
            (8, 2 * page),
            (9, 3 * page + 512), // torn inside a page
            (10, 15 * page),     // room for one more page
            (11, 16 * page - 1), // no room for a page
            (12, 2 * page),
        ];
        assert_eq!(
            resumed_leaf_zones(&partly, page, cap, 2),
            vec![(8, 2 * page), (12, 2 * page)]
        );
        assert_eq!(resumed_leaf_zones(&partly, page, cap, 5).len(), 4);
        assert!(resumed_leaf_zones(&partly, page, cap, 0).is_empty());
        assert!(resumed_leaf_zones(&[(3, u64::MAX)], page, cap, 2).is_empty());
    }

    #[test]
    fn writes_admitted_together_leave_what_one_write_alone_would() {
        // Six data zones and a floor of three. One write alone is admitted
        // at three zones and may leave two; writes admitted together may
        // leave no fewer.
        let mut s = ZoneSpace::new(10, 2, 2, 256, 192, 2);
        for _ in 0..4 {
            assert!(s.admit(3));
        }
        assert!(!s.admit(3), "a fifth could leave one zone");
        for _ in 0..4 {
            s.take(Role::Vlog).unwrap();
        }
        assert_eq!(s.room(), 2);
        for _ in 0..4 {
            s.finish();
        }
        assert!(!s.admit(3), "two zones are below the floor");
    }

    #[test]
    fn room_in_the_flushers_zones_counts_towards_admission_and_moves() {
        // Six data zones: two held by the flushers, three by the value
        // log, one free. A delete's floor is two zones.
        let mut s = ZoneSpace::new(10, 2, 2, 256, 192, 2);
        let flushers = [s.take(Role::Leaf).unwrap(), s.take(Role::Leaf).unwrap()];
        for _ in 0..3 {
            s.take(Role::Vlog).unwrap();
        }
        assert_eq!(s.free_zones(), 1);
        // Both flushers just moved on: a zone's worth of room between them.
        for &z in &flushers {
            s.add_page(z as usize);
        }
        assert_eq!(s.flusher_room(), 1);
        assert_eq!(s.admission_need(2), 1);
        assert_eq!(s.movable(0), 1);
        assert!(s.admit(2));
        s.finish();
        // Once one flusher's zone is half written, the two cannot both
        // write another half zone: the free zone must serve.
        for _ in 0..96 {
            s.add_page(flushers[0] as usize);
        }
        assert_eq!(s.flusher_room(), 0);
        assert_eq!(s.admission_need(2), 2);
        assert!(!s.admit(2));
        // Pages handed out count as valid until released.
        assert_eq!(s.zones[flushers[0] as usize].valid, 97);
        // A zone taken back after a restart keeps what it held.
        s.close(flushers[0] as usize);
        s.resume(flushers[0] as usize, 10);
        assert_eq!(s.flusher_room(), 1);
    }

    #[test]
    fn zones_waiting_for_their_reset_do_not_admit_writes() {
        // Six data zones, four emptied by reclamation and not yet reset:
        // room for a floor of three, but a flusher could take only two.
        let mut s = ZoneSpace::new(10, 2, 2, 256, 192, 2);
        for _ in 0..4 {
            let z = s.take(Role::Leaf).unwrap();
            s.close(z as usize);
            s.mark_pending_reset(z as usize);
        }
        assert_eq!(s.room(), 6);
        assert!(!s.admit(3));
        for z in s.pending_resets() {
            s.freed(z);
        }
        assert!(s.admit(3));
    }

    #[test]
    fn moves_leave_a_zone_for_every_admitted_write() {
        let mut s = ZoneSpace::new(12, 2, 2, 256, 192, 2);
        // Eight free: one kept for a flusher's next, two for a checkpoint.
        assert_eq!(s.movable(2), 5);
        for _ in 0..3 {
            assert!(s.admit(0));
        }
        assert_eq!(s.movable(2), 3, "three writers, three zones kept");
        assert_eq!(s.movable(8), 0);
    }

    #[test]
    fn leaf_work_and_migration_leave_the_zones_admitted_writes_may_take() {
        // Six data zones: two held by the flushers, three free, one value
        // log. The deletes' floor is two zones.
        let mut s = ZoneSpace::new(10, 2, 2, 256, 192, 2);
        let flushers = [s.take(Role::Leaf).unwrap(), s.take(Role::Leaf).unwrap()];
        s.take(Role::Vlog).unwrap();
        for _ in 0..150 {
            for &z in &flushers {
                s.add_page(z as usize);
            }
        }
        // 42 pages left in each flusher's zone: 84 between them.
        assert_eq!(s.flusher_pages(), 84);
        assert_eq!(s.movable_pages(), 3 * 192 + 84);
        assert!(s.admits_leaf_work(2, false));
        // Two admitted writes may take a zone each: leaf work keeps them,
        // and a migration may not write into them, but a write's own
        // zone is its own leaf work's to use.
        assert!(s.admit(2) && s.admit(2));
        assert_eq!(s.movable_pages(), 192 + 84);
        assert!(s.admits_leaf_work(2, true));
        assert!(!s.admits_leaf_work(3, true));
        assert!(!s.admits_leaf_work(2, false));
        assert!(s.admits_leaf_work(1, false));
        // The free zones go to the value log: nothing is left to move into
        // but the flushers' room, and no leaf work may go on.
        for _ in 0..3 {
            s.take(Role::Vlog).unwrap();
        }
        assert_eq!(s.movable_pages(), 0);
        assert!(!s.admits_leaf_work(2, true));
        s.finish();
        s.finish();
        assert_eq!(s.movable_pages(), 84);
        assert!(!s.admits_leaf_work(2, false));
        assert!(
            !s.admits_leaf_work(1, false),
            "84 pages are less than a zone"
        );
        assert!(s.admits_leaf_work(0, false));
    }

    #[test]
    fn roles_and_free_list() {
        let mut s = ZoneSpace::new(8, 2, 2, 256, 192, 2);
        assert_eq!(s.free_zones(), 4);
        assert_eq!(s.zones[0].role, Role::Meta);
        assert_eq!(s.zones[3].role, Role::Wal);
        let z = s.take(Role::Leaf).unwrap();
        assert_eq!(z, 4);
        s.add_valid(z as usize, 3);
        s.sub_valid(z as usize, 1);
        assert_eq!(s.zones[4].valid, 2);
        assert!(
            s.candidates(Role::Leaf, 192).is_empty(),
            "open zones are not candidates"
        );
        s.close(4);
        assert_eq!(s.candidates(Role::Leaf, 192).len(), 1);
        s.mark_pending_reset(4);
        assert_eq!(s.pending_resets(), vec![4]);
        s.freed(4);
        assert_eq!(s.free_zones(), 4);
        assert_eq!(s.zone_of(256 * 5 + 3), 5);
    }
}
