//! Zone reclamation policy: which zone to empty next, as pure functions of
//! per-zone accounting (no I/O, unit-tested).
//!
//! - **Greedy** picks the zone with the fewest valid pages: the cheapest
//!   migration now.
//! - **Cost-benefit** (LFS) maximises `(1 - u) * age / (1 + u)`, where `u`
//!   is the valid fraction and `age` the time since the zone was last
//!   written: an older zone's remaining pages are likely to stay valid, so
//!   emptying it frees space for longer.
//!
//! A zone with no valid page is always chosen first (it costs nothing).
//!
//! Admission keeps the device from running out of zones under the store:
//! a write that adds data is refused (the store stays open and readable)
//! once reclamation cannot keep the reserve free, so the zones left
//! always suffice for deletes, which free space, and for reclamation
//! itself, which needs a zone for each flusher to move on to. A flusher
//! moves on only once its zone is full, so the pages left in the zones
//! the flushers hold count as zones beside the free ones.

/// How victims are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GcPolicy {
    Greedy,
    CostBenefit,
}

/// A zone that may be reclaimed: full (no longer written) and not already
/// waiting for its reset.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    pub zone: u32,
    /// Valid pages (leaf zones) or live bytes in pages (value-log zones).
    pub valid: u64,
    /// Pages or bytes the zone holds when full.
    pub capacity: u64,
    /// Clock ticks since the zone was last written.
    pub age: u64,
}

/// The zone to reclaim, or `None` if no candidate would free anything.
pub fn choose_victim(policy: GcPolicy, candidates: &[Candidate]) -> Option<u32> {
    let useful = candidates.iter().filter(|c| c.valid < c.capacity);
    if let Some(c) = useful.clone().find(|c| c.valid == 0) {
        return Some(c.zone);
    }
    match policy {
        GcPolicy::Greedy => useful.min_by_key(|c| (c.valid, c.zone)).map(|c| c.zone),
        GcPolicy::CostBenefit => useful
            .map(|c| {
                let u = c.valid as f64 / c.capacity.max(1) as f64;
                ((1.0 - u) * (c.age as f64 + 1.0) / (1.0 + u), c.zone)
            })
            .max_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)))
            .map(|(_, z)| z),
    }
}

/// Whether value-log zones should start draining ahead of need: fewer
/// than three times the reserve are free. A zone emptied through the
/// buffers is free only once its leaves have merged, and its copies may
/// only use zones above the reserve, so it must start early.
pub fn drain_early(free_zones: usize, reserve: usize) -> bool {
    free_zones < reserve * 3
}

/// Seconds without a write after which an idle store settles.
pub const SETTLE_QUIET_TICKS: u32 = 2;

/// Deletes since the last settling that make settling pay: fewer are
/// left to the buffers' own eviction and the reclamation writes trigger.
pub const SETTLE_DELETES: u64 = 1024;

/// Whether an idle store settles now (puts what its buffers hold into
/// the leaves and reclaims the zones that leaves garbage): it has taken no
/// write for `quiet_ticks` ticks of a second, and since it last settled it
/// took enough deletes, or its last settling was cut short by a write.
/// A mass delete or expiry then gives its space back without further
/// writes; a store under steady writes never settles.
pub fn settles(quiet_ticks: u32, deletes_since: u64, unfinished: bool) -> bool {
    quiet_ticks >= SETTLE_QUIET_TICKS && (deletes_since >= SETTLE_DELETES || unfinished)
}

/// Whether reclamation should run: fewer free zones than `reserve`.
pub fn should_collect(free_zones: usize, reserve: usize) -> bool {
    free_zones < reserve
}

/// Free zones (or zones awaiting their reset) below which a write is
/// refused, once reclamation has run: `reserve` (at least the
/// reclamation floor plus one) for writes that add data, the reclamation
/// floor (a zone for each flusher to move on to) for deletes.
pub fn admission_floor(adds_data: bool, reserve: usize, flushers: usize) -> usize {
    let reclaim = flushers.max(1);
    if adds_data {
        reserve.max(reclaim + 1)
    } else {
        reclaim
    }
}

/// Whether a write takes zones of its own and so must be admitted: all
/// do but deletes that go to the merged filter (`buffered`). Those write
/// nothing but the WAL until their batch reaches the leaves, and that
/// leaf work waits for zones by itself; counting them as admitted writes
/// refused a delete on a full device because other deletes were in
/// flight.
pub fn takes_zones(adds_data: bool, buffered: bool) -> bool {
    adds_data || !buffered
}

/// Pages the flushers can still put in the zones they hold (`rooms`:
/// each held zone's pages not yet handed out) before one of them needs a
/// free zone. Flushers take pages in turn, so the one with the least room
/// fills first and each is counted with that room; a flusher holding no
/// zone has none.
pub fn flusher_pages(rooms: impl IntoIterator<Item = u64>, flushers: usize) -> u64 {
    let (held, least) = rooms
        .into_iter()
        .fold((0usize, u64::MAX), |(n, least), r| (n + 1, least.min(r)));
    if flushers == 0 || held < flushers {
        return 0;
    }
    least.saturating_mul(flushers as u64)
}

/// [`flusher_pages`] as whole zones of `zone_pages`, a number to count
/// beside the free zones. Without it, a full device whose flushers had
/// just moved on to fresh zones refused deletes for want of zones to move
/// on to, while those zones stood nearly empty.
pub fn flusher_room(
    rooms: impl IntoIterator<Item = u64>,
    flushers: usize,
    zone_pages: u64,
) -> usize {
    let pages = flusher_pages(rooms, flushers);
    usize::try_from(pages / zone_pages.max(1)).unwrap_or(usize::MAX)
}

/// Whether emptying a value-log zone of `zone_bytes` by writing `need`
/// bytes elsewhere (copies of its live records and the leaves that point
/// at them) pays: it must free at least a quarter of the zone net, and fit
/// in `free_zones` zones.
pub fn relocation_pays(need: u64, zone_bytes: u64, free_zones: u64) -> bool {
    zones_relocation_pays(need, 1, zone_bytes, free_zones)
}

/// [`relocation_pays`] for emptying `zones` zones at once.
pub fn zones_relocation_pays(need: u64, zones: u64, zone_bytes: u64, free_zones: u64) -> bool {
    let need = u128::from(need);
    need * 4 <= u128::from(zones) * u128::from(zone_bytes) * 3
        && need <= u128::from(free_zones) * u128::from(zone_bytes)
}

/// The value-log zones to empty together when none pays alone, from
/// `zones` as (zone, live bytes); `leaf_bytes` is what rewriting every
/// leaf of the tree writes. Moving a zone's records directly rewrites
/// each leaf pointing into it, and when a zone's records belong to keys
/// all over the tree those leaves cost more than the zone frees; moving
/// several zones' records rewrites each such leaf once for all of them.
/// The cost is bounded without a scan (the live bytes and every leaf), so
/// the group chosen pays whatever the scan finds. Takes the most of the
/// emptiest zones that pays and fits in `free_zones` (`None` if no number
/// does): one pass over the leaves then frees as much as it can.
pub fn relocation_group(
    zones: &[(u32, u64)],
    leaf_bytes: u64,
    zone_bytes: u64,
    free_zones: u64,
) -> Option<Vec<u32>> {
    let mut by_live = zones.to_vec();
    by_live.sort_by_key(|&(z, live)| (live, z));
    let mut need = leaf_bytes;
    let mut best = None;
    for (k, &(_, live)) in by_live.iter().enumerate() {
        need = need.saturating_add(live);
        if need > free_zones.saturating_mul(zone_bytes) {
            break; // more zones only need more room
        }
        if zones_relocation_pays(need, k as u64 + 1, zone_bytes, free_zones) {
            best = Some(k + 1);
        }
    }
    best.map(|k| by_live[..k].iter().map(|&(z, _)| z).collect())
}

/// Why a value-log zone is not scanned again yet: each scan reads the
/// zone and the leaves its records belong to, so a zone that could not
/// be emptied waits for what stood in the way to change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deferral {
    /// Until its live bytes fall below the mark: its records cost too
    /// much to move ([`retry_below`]), or it is draining ([`drain_mark`]).
    Below(u64),
    /// Until more free zones than `room` may take moves, or its live
    /// bytes fall below `below`: its moves would have paid but did not
    /// fit, and fewer of them may.
    Room { room: u64, below: u64 },
}

impl Deferral {
    /// Whether the zone may be looked at again, holding `valid` live
    /// bytes with `room` free zones for moves. An empty zone always may:
    /// it takes no scan.
    pub fn due(self, valid: u64, room: u64) -> bool {
        valid == 0
            || match self {
                Deferral::Below(mark) => valid < mark,
                Deferral::Room { room: had, below } => room > had || valid < below,
            }
    }
}

/// The mark below which a value-log zone whose records cost too much to
/// move is looked at again: an eighth of them must die first, so a zone
/// is not scanned over and over for nothing.
pub fn retry_below(valid: u64) -> Deferral {
    Deferral::Below(valid - valid / 8)
}

/// A zone whose moves did not fit in the `room` there was: looked at
/// again once there is more, or an eighth of its live bytes died.
pub fn retry_with_room(valid: u64, room: u64) -> Deferral {
    Deferral::Room {
        room,
        below: valid - valid / 8,
    }
}

/// The mark below which a zone left draining (its records moved through
/// the buffers, its shadowed pairs waiting for their leaves to merge) is
/// looked at again: seven eighths of them must be gone, when rewriting
/// the leaves still pointing into it is cheap; an empty zone always
/// qualifies.
pub fn drain_mark(valid: u64) -> Deferral {
    Deferral::Below((valid / 8).max(1))
}

/// Whether reclaiming `c` lowers space amplification below `bound`: its
/// utilisation is under `1 / bound` (a fuller zone costs more migration
/// than the space it returns moves the ratio).
pub fn lowers_amplification(c: &Candidate, bound: f64) -> bool {
    (c.valid as f64) * bound < c.capacity as f64
}

/// Space amplification: device bytes held by zones in use over live bytes.
pub fn space_amplification(used_zone_bytes: u64, live_bytes: u64) -> f64 {
    used_zone_bytes as f64 / live_bytes.max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(zone: u32, valid: u64, age: u64) -> Candidate {
        Candidate {
            zone,
            valid,
            capacity: 100,
            age,
        }
    }

    #[test]
    fn empty_zones_come_first() {
        let cs = [c(1, 10, 0), c(2, 0, 0), c(3, 5, 1000)];
        assert_eq!(choose_victim(GcPolicy::Greedy, &cs), Some(2));
        assert_eq!(choose_victim(GcPolicy::CostBenefit, &cs), Some(2));
    }

    #[test]
    fn greedy_takes_fewest_valid() {
        let cs = [c(1, 50, 9), c(2, 20, 0), c(3, 30, 1000)];
        assert_eq!(choose_victim(GcPolicy::Greedy, &cs), Some(2));
    }

    #[test]
    fn cost_benefit_prefers_old_zones() {
        // Zone 3 holds more valid pages but has been cold far longer.
        let cs = [c(2, 20, 1), c(3, 30, 1000)];
        assert_eq!(choose_victim(GcPolicy::CostBenefit, &cs), Some(3));
        assert_eq!(choose_victim(GcPolicy::Greedy, &cs), Some(2));
    }

    #[test]
    fn full_zones_are_never_victims() {
        assert_eq!(choose_victim(GcPolicy::Greedy, &[c(1, 100, 5)]), None);
        assert_eq!(choose_victim(GcPolicy::CostBenefit, &[]), None);
    }

    #[test]
    fn deletes_are_admitted_below_the_floor_of_writes_that_add_data() {
        // Reserve 4, two flushers: puts need 4 free zones, deletes 2.
        assert_eq!(admission_floor(true, 4, 2), 4);
        assert_eq!(admission_floor(false, 4, 2), 2);
        // A reserve below the reclamation floor is raised above it, so
        // deletes always have zones that puts cannot take.
        assert_eq!(admission_floor(true, 1, 2), 3);
        assert!(takes_zones(true, true) && takes_zones(true, false));
        assert!(takes_zones(false, false) && !takes_zones(false, true));
        for reserve in 0..10 {
            for flushers in 1..5 {
                assert!(
                    admission_floor(true, reserve, flushers)
                        > admission_floor(false, reserve, flushers)
                );
            }
        }
    }

    #[test]
    fn flushers_count_as_many_zones_as_the_least_roomy_one_allows_them_all() {
        // Two flushers, 192-page zones, nearly empty: one zone's worth.
        assert_eq!(flusher_room([191, 191], 2, 192), 1);
        assert_eq!(flusher_room([192, 192], 2, 192), 2);
        // The fuller one decides: 2 * 95 pages is less than a zone.
        assert_eq!(flusher_room([191, 95], 2, 192), 0);
        assert_eq!(flusher_room([96, 191], 2, 192), 1);
        // A flusher without a zone has no room, whatever the others have.
        assert_eq!(flusher_room([192], 2, 192), 0);
        assert_eq!(flusher_room([], 0, 192), 0);
        assert_eq!(flusher_room([u64::MAX; 4], 4, 0), usize::MAX);
        assert_eq!(flusher_pages([191, 95], 2), 190);
        assert_eq!(flusher_pages([191], 2), 0);
    }

    #[test]
    fn relocation_pays_when_it_frees_a_quarter_and_fits() {
        assert!(relocation_pays(700, 1000, 1));
        assert!(relocation_pays(750, 1000, 1));
        assert!(!relocation_pays(751, 1000, 1), "frees less than a quarter");
        assert!(!relocation_pays(10, 1000, 0), "no zone to write into");
        assert!(!relocation_pays(u64::MAX, u64::MAX, u64::MAX));
    }

    #[test]
    fn zones_whose_leaves_cost_too_much_alone_are_emptied_together() {
        // Four zones 8-14% live, whose records point into 1000 bytes of
        // leaves: alone, none pays (1000 + 86 > 750).
        let zones = [(4, 128), (7, 132), (12, 86), (13, 114)];
        assert!(!relocation_pays(1000 + 86, 1000, 2));
        // Two would pay (1200 <= 1500); all four pay and fit in two free
        // zones (1460 <= 2000), and one pass over the leaves frees them
        // all.
        assert_eq!(
            relocation_group(&zones, 1000, 1000, 2),
            Some(vec![12, 13, 4, 7])
        );
        // With one free zone nothing fits.
        assert_eq!(relocation_group(&zones, 1000, 1000, 1), None);
        // Room caps the group: the fourth zone's records would not fit.
        let zones = [(1, 100), (2, 200), (3, 300), (4, 950)];
        assert_eq!(relocation_group(&zones, 1500, 1000, 3), Some(vec![1, 2, 3]));
        assert_eq!(relocation_group(&zones, 1500, 1000, 2), None);
        // A group pays only if it frees a quarter of its zones net.
        assert_eq!(relocation_group(&[(1, 900), (2, 900)], 0, 1000, 9), None);
        assert_eq!(relocation_group(&[], 0, 1000, 9), None);
        assert_eq!(relocation_group(&[(1, 5)], u64::MAX, 1000, 9), None);
    }

    #[test]
    fn deferred_zones_wait_for_deaths_merges_or_room() {
        assert_eq!(retry_below(800), Deferral::Below(700));
        assert!(retry_below(800).due(699, 0) && !retry_below(800).due(700, 99));
        assert!(!retry_below(8).due(7, 0) && retry_below(1).due(0, 0));
        assert_eq!(drain_mark(800), Deferral::Below(100));
        assert!(drain_mark(3).due(0, 0), "an emptied zone always qualifies");
        assert!(drain_mark(0).due(0, 0));
        let room = retry_with_room(800, 3);
        assert!(!room.due(700, 3) && room.due(800, 4) && room.due(699, 0));
        assert!(room.due(0, 0));
        assert!(drain_early(11, 4) && !drain_early(12, 4));
    }

    #[test]
    fn trigger_and_amplification() {
        assert!(should_collect(1, 3));
        assert!(!should_collect(3, 3));
        assert!((space_amplification(130, 100) - 1.3).abs() < 1e-9);
        assert!(lowers_amplification(&c(1, 70, 0), 1.25));
        assert!(!lowers_amplification(&c(1, 85, 0), 1.25));
    }

    #[test]
    fn an_idle_store_settles_after_many_deletes_or_an_unfinished_settling() {
        assert!(!settles(SETTLE_QUIET_TICKS - 1, SETTLE_DELETES, true));
        assert!(!settles(SETTLE_QUIET_TICKS, SETTLE_DELETES - 1, false));
        assert!(settles(SETTLE_QUIET_TICKS, SETTLE_DELETES, false));
        assert!(settles(SETTLE_QUIET_TICKS + 5, 0, true));
    }
}
