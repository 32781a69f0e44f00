//! The zone rule book: conditions, write pointers and resource limits, as a
//! pure state machine with no I/O.
//!
//! Transitions follow the NVMe ZNS specification:
//! - a write to an empty or closed zone opens it implicitly; if that would
//!   pass `max_open`, the implicitly open zone written least recently is
//!   closed to make room, and only if none exists does the write fail;
//! - a zone leaving the empty state becomes active; the write fails if that
//!   would pass `max_active`;
//! - a zone whose write pointer reaches its capacity becomes full and
//!   releases its open and active slots;
//! - closing a zone with nothing written returns it to empty;
//! - reset empties any zone but a read-only or offline one; finish fills it.
//!
//! Invariants: `open` and `active` always equal the counts of zones in those
//! conditions; `open ≤ max_open`; `active ≤ max_active`; a write pointer is
//! block aligned and `0 ≤ wp ≤ capacity`, with `wp == capacity` exactly
//! when the zone is full (except a finished zone, whose pointer is set to
//! capacity).

use crate::error::ZoneError;
use crate::zoned::geometry::ZoneGeometry;

/// The condition of a zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZoneCondition {
    Empty,
    ImplicitOpen,
    ExplicitOpen,
    Closed,
    Full,
    ReadOnly,
    Offline,
}

impl ZoneCondition {
    pub fn name(self) -> &'static str {
        match self {
            ZoneCondition::Empty => "empty",
            ZoneCondition::ImplicitOpen => "implicitly open",
            ZoneCondition::ExplicitOpen => "explicitly open",
            ZoneCondition::Closed => "closed",
            ZoneCondition::Full => "full",
            ZoneCondition::ReadOnly => "read-only",
            ZoneCondition::Offline => "offline",
        }
    }

    pub fn is_open(self) -> bool {
        matches!(
            self,
            ZoneCondition::ImplicitOpen | ZoneCondition::ExplicitOpen
        )
    }

    pub fn is_active(self) -> bool {
        self.is_open() || self == ZoneCondition::Closed
    }

    pub(crate) fn code(self) -> u8 {
        match self {
            ZoneCondition::Empty => 1,
            ZoneCondition::ImplicitOpen => 2,
            ZoneCondition::ExplicitOpen => 3,
            ZoneCondition::Closed => 4,
            ZoneCondition::Full => 5,
            ZoneCondition::ReadOnly => 6,
            ZoneCondition::Offline => 7,
        }
    }

    pub(crate) fn from_code(c: u8) -> Option<Self> {
        Some(match c {
            1 => ZoneCondition::Empty,
            2 => ZoneCondition::ImplicitOpen,
            3 => ZoneCondition::ExplicitOpen,
            4 => ZoneCondition::Closed,
            5 => ZoneCondition::Full,
            6 => ZoneCondition::ReadOnly,
            7 => ZoneCondition::Offline,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ZoneState {
    pub cond: ZoneCondition,
    /// Bytes written, relative to the zone start.
    pub wp: u64,
    /// Logical clock of the last write, to pick which implicit zone to close.
    pub last_write: u64,
}

/// Conditions and write pointers of every zone, with the open/active counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneTable {
    geo: ZoneGeometry,
    zones: Vec<ZoneState>,
    open: u32,
    active: u32,
    clock: u64,
}

impl ZoneTable {
    /// Every zone empty.
    pub fn new(geo: ZoneGeometry) -> Self {
        let zones = vec![
            ZoneState {
                cond: ZoneCondition::Empty,
                wp: 0,
                last_write: 0,
            };
            geo.zone_count as usize
        ];
        Self {
            geo,
            zones,
            open: 0,
            active: 0,
            clock: 0,
        }
    }

    /// Rebuilds a table from persisted (condition, write pointer) pairs, as
    /// after a power cycle: open zones come back closed (or empty if nothing
    /// was written), as the ZNS specification prescribes.
    pub(crate) fn restore(geo: ZoneGeometry, saved: &[(ZoneCondition, u64)]) -> Self {
        let mut t = Self::new(geo);
        for (z, &(cond, wp)) in t.zones.iter_mut().zip(saved.iter()) {
            let wp = wp.min(geo.zone_capacity);
            z.wp = wp;
            z.cond = match cond {
                c if c.is_open() && wp == 0 => ZoneCondition::Empty,
                c if c.is_open() => ZoneCondition::Closed,
                ZoneCondition::Closed if wp == 0 => ZoneCondition::Empty,
                c => c,
            };
            if z.cond == ZoneCondition::Empty {
                z.wp = 0;
            }
        }
        t.active = t.zones.iter().filter(|z| z.cond.is_active()).count() as u32;
        t
    }

    pub fn geometry(&self) -> &ZoneGeometry {
        &self.geo
    }

    pub fn open_count(&self) -> u32 {
        self.open
    }

    pub fn active_count(&self) -> u32 {
        self.active
    }

    /// Condition and write pointer (relative to the zone start) of `zone`.
    pub fn zone(&self, zone: u32) -> Result<(ZoneCondition, u64), ZoneError> {
        let z = self.get(zone)?;
        Ok((z.cond, z.wp))
    }

    pub(crate) fn entries(&self) -> impl Iterator<Item = (ZoneCondition, u64)> + '_ {
        self.zones.iter().map(|z| (z.cond, z.wp))
    }

    fn get(&self, zone: u32) -> Result<&ZoneState, ZoneError> {
        self.zones.get(zone as usize).ok_or(ZoneError::NoSuchZone {
            zone,
            zone_count: self.geo.zone_count,
        })
    }

    fn get_mut(&mut self, zone: u32) -> Result<&mut ZoneState, ZoneError> {
        let zone_count = self.geo.zone_count;
        self.zones
            .get_mut(zone as usize)
            .ok_or(ZoneError::NoSuchZone { zone, zone_count })
    }

    fn set_cond(&mut self, zone: u32, to: ZoneCondition) -> Result<(), ZoneError> {
        let from = self.get(zone)?.cond;
        if from.is_open() {
            self.open -= 1;
        }
        if from.is_active() {
            self.active -= 1;
        }
        if to.is_open() {
            self.open += 1;
        }
        if to.is_active() {
            self.active += 1;
        }
        self.get_mut(zone)?.cond = to;
        Ok(())
    }

    /// Makes room for one more open zone by closing the implicitly open
    /// zone written least recently, if the open limit is reached.
    fn make_open_room(&mut self, zone: u32) -> Result<(), ZoneError> {
        if self.open < self.geo.max_open {
            return Ok(());
        }
        let victim = self
            .zones
            .iter()
            .enumerate()
            .filter(|(_, z)| z.cond == ZoneCondition::ImplicitOpen)
            .min_by_key(|(_, z)| z.last_write)
            .map(|(i, _)| i as u32);
        match victim {
            Some(v) => self.set_cond(v, ZoneCondition::Closed),
            None => Err(ZoneError::TooManyOpenZones {
                zone,
                max_open: self.geo.max_open,
            }),
        }
    }

    /// Opens `zone` for writing, implicitly or explicitly, enforcing limits.
    fn open_for(&mut self, zone: u32, explicit: bool) -> Result<(), ZoneError> {
        let cond = self.get(zone)?.cond;
        let target = if explicit {
            ZoneCondition::ExplicitOpen
        } else {
            ZoneCondition::ImplicitOpen
        };
        match cond {
            ZoneCondition::ExplicitOpen => Ok(()),
            ZoneCondition::ImplicitOpen if !explicit => Ok(()),
            ZoneCondition::ImplicitOpen => self.set_cond(zone, target),
            ZoneCondition::Empty | ZoneCondition::Closed => {
                if cond == ZoneCondition::Empty && self.active >= self.geo.max_active {
                    return Err(ZoneError::TooManyActiveZones {
                        zone,
                        max_active: self.geo.max_active,
                    });
                }
                self.make_open_room(zone)?;
                self.set_cond(zone, target)
            }
            ZoneCondition::Full => Err(ZoneError::ZoneFull { zone }),
            ZoneCondition::ReadOnly => Err(ZoneError::ZoneReadOnly { zone }),
            ZoneCondition::Offline => Err(ZoneError::ZoneOffline { zone }),
        }
    }

    /// Admits a write of `len` bytes to `zone`, at relative offset `at`
    /// (a zone write) or wherever the write pointer is (`None`, an append).
    /// Advances the write pointer and returns the relative offset written.
    pub fn admit_write(&mut self, zone: u32, at: Option<u64>, len: u64) -> Result<u64, ZoneError> {
        let (cond, wp) = self.zone(zone)?;
        match cond {
            ZoneCondition::Full => return Err(ZoneError::ZoneFull { zone }),
            ZoneCondition::ReadOnly => return Err(ZoneError::ZoneReadOnly { zone }),
            ZoneCondition::Offline => return Err(ZoneError::ZoneOffline { zone }),
            _ => {}
        }
        let start = self.geo.zone_start(zone);
        if let Some(at) = at {
            if at != wp {
                return Err(ZoneError::NotAtWritePointer {
                    zone,
                    offset: start + at,
                    write_pointer: start + wp,
                });
            }
        } else if len > self.geo.max_append {
            return Err(ZoneError::AppendTooLarge {
                len,
                limit: self.geo.max_append,
            });
        }
        if wp + len > self.geo.zone_capacity {
            return Err(ZoneError::PastCapacity {
                zone,
                offset: start + wp,
                len,
                capacity_end: start + self.geo.zone_capacity,
            });
        }
        self.open_for(zone, false)?;
        self.clock += 1;
        let clock = self.clock;
        let z = self.get_mut(zone)?;
        z.wp = wp + len;
        z.last_write = clock;
        if wp + len == self.geo.zone_capacity {
            self.set_cond(zone, ZoneCondition::Full)?;
        }
        Ok(wp)
    }

    /// Checks that `[rel, rel + len)` of `zone` may be read.
    pub fn admit_read(&self, zone: u32, rel: u64, len: u64) -> Result<(), ZoneError> {
        let (cond, wp) = self.zone(zone)?;
        if cond == ZoneCondition::Offline {
            return Err(ZoneError::ZoneOffline { zone });
        }
        let readable = match cond {
            ZoneCondition::Full | ZoneCondition::ReadOnly => self.geo.zone_capacity,
            _ => wp,
        };
        if rel + len > readable {
            let start = self.geo.zone_start(zone);
            return Err(ZoneError::ReadPastWritePointer {
                zone,
                offset: start + rel,
                end: start + rel + len,
                write_pointer: start + readable,
            });
        }
        Ok(())
    }

    /// Explicit open.
    pub fn open(&mut self, zone: u32) -> Result<(), ZoneError> {
        self.open_for(zone, true)
    }

    /// Close: an open zone becomes closed, or empty if nothing was written.
    pub fn close(&mut self, zone: u32) -> Result<(), ZoneError> {
        let (cond, wp) = self.zone(zone)?;
        match cond {
            c if c.is_open() => {
                let to = if wp == 0 {
                    ZoneCondition::Empty
                } else {
                    ZoneCondition::Closed
                };
                self.set_cond(zone, to)
            }
            ZoneCondition::Closed => Ok(()),
            c => Err(ZoneError::InvalidTransition {
                zone,
                state: c.name(),
                action: "closed",
            }),
        }
    }

    /// Finish: the zone becomes full; unwritten space reads as zeros.
    pub fn finish(&mut self, zone: u32) -> Result<(), ZoneError> {
        let (cond, _) = self.zone(zone)?;
        match cond {
            ZoneCondition::Full => Ok(()),
            ZoneCondition::ReadOnly => Err(ZoneError::ZoneReadOnly { zone }),
            ZoneCondition::Offline => Err(ZoneError::ZoneOffline { zone }),
            _ => {
                self.set_cond(zone, ZoneCondition::Full)?;
                let cap = self.geo.zone_capacity;
                self.get_mut(zone)?.wp = cap;
                Ok(())
            }
        }
    }

    /// Reset: the zone becomes empty with its write pointer at the start.
    pub fn reset(&mut self, zone: u32) -> Result<(), ZoneError> {
        let (cond, _) = self.zone(zone)?;
        match cond {
            ZoneCondition::ReadOnly => Err(ZoneError::ZoneReadOnly { zone }),
            ZoneCondition::Offline => Err(ZoneError::ZoneOffline { zone }),
            _ => {
                self.set_cond(zone, ZoneCondition::Empty)?;
                self.get_mut(zone)?.wp = 0;
                Ok(())
            }
        }
    }

    /// Marks a zone read-only or offline, as a failing drive would.
    pub fn fail_zone(&mut self, zone: u32, cond: ZoneCondition) -> Result<(), ZoneError> {
        let current = self.get(zone)?.cond;
        if !matches!(cond, ZoneCondition::ReadOnly | ZoneCondition::Offline) {
            return Err(ZoneError::InvalidTransition {
                zone,
                state: current.name(),
                action: "failed into a condition other than read-only or offline",
            });
        }
        self.set_cond(zone, cond)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: u64 = 4096;

    fn table(max_open: u32, max_active: u32) -> ZoneTable {
        ZoneTable::new(ZoneGeometry::small(8, max_open, max_active))
    }

    fn counts_match(t: &ZoneTable) {
        let open = t.zones.iter().filter(|z| z.cond.is_open()).count() as u32;
        let active = t.zones.iter().filter(|z| z.cond.is_active()).count() as u32;
        assert_eq!((t.open, t.active), (open, active));
        assert!(t.open <= t.geo.max_open && t.active <= t.geo.max_active);
    }

    #[test]
    fn write_opens_implicitly_and_advances() {
        let mut t = table(2, 4);
        assert_eq!(t.admit_write(0, Some(0), B), Ok(0));
        assert_eq!(t.zone(0), Ok((ZoneCondition::ImplicitOpen, B)));
        assert_eq!(t.admit_write(0, None, 2 * B), Ok(B));
        assert_eq!(t.zone(0).unwrap().1, 3 * B);
        counts_match(&t);
    }

    #[test]
    fn implicit_zone_is_closed_to_make_room() {
        let mut t = table(2, 4);
        t.admit_write(0, None, B).unwrap();
        t.admit_write(1, None, B).unwrap();
        t.admit_write(0, None, B).unwrap(); // zone 1 is now least recent
        t.admit_write(2, None, B).unwrap();
        assert_eq!(t.zone(1).unwrap().0, ZoneCondition::Closed);
        assert_eq!(t.zone(0).unwrap().0, ZoneCondition::ImplicitOpen);
        counts_match(&t);
    }

    #[test]
    fn explicit_zones_are_never_closed_for_room() {
        let mut t = table(2, 4);
        t.open(0).unwrap();
        t.open(1).unwrap();
        assert_eq!(
            t.admit_write(2, None, B),
            Err(ZoneError::TooManyOpenZones {
                zone: 2,
                max_open: 2
            })
        );
        counts_match(&t);
    }

    #[test]
    fn active_limit_counts_closed_zones() {
        let mut t = table(2, 2);
        t.admit_write(0, None, B).unwrap();
        t.admit_write(1, None, B).unwrap();
        t.close(0).unwrap();
        assert_eq!(
            t.admit_write(2, None, B),
            Err(ZoneError::TooManyActiveZones {
                zone: 2,
                max_active: 2
            })
        );
        t.reset(0).unwrap();
        t.admit_write(2, None, B).unwrap();
        counts_match(&t);
    }

    #[test]
    fn filling_a_zone_releases_its_slots() {
        let mut t = table(1, 1);
        let cap = t.geometry().zone_capacity;
        let mut at = 0;
        while at < cap {
            t.admit_write(0, Some(at), 32 * B).unwrap();
            at += 32 * B;
        }
        assert_eq!(t.zone(0).unwrap().0, ZoneCondition::Full);
        assert_eq!((t.open_count(), t.active_count()), (0, 0));
        assert_eq!(
            t.admit_write(0, None, B),
            Err(ZoneError::ZoneFull { zone: 0 })
        );
        t.admit_write(1, None, B).unwrap();
    }

    #[test]
    fn restore_closes_open_zones() {
        let g = ZoneGeometry::small(4, 2, 4);
        let t = ZoneTable::restore(
            g,
            &[
                (ZoneCondition::ImplicitOpen, B),
                (ZoneCondition::ExplicitOpen, 0),
                (ZoneCondition::Full, g.zone_capacity),
                (ZoneCondition::Empty, 0),
            ],
        );
        assert_eq!(t.zone(0).unwrap().0, ZoneCondition::Closed);
        assert_eq!(t.zone(1).unwrap().0, ZoneCondition::Empty);
        assert_eq!((t.open_count(), t.active_count()), (0, 1));
    }

    #[test]
    fn close_of_unwritten_zone_empties_it() {
        let mut t = table(2, 2);
        t.open(3).unwrap();
        t.close(3).unwrap();
        assert_eq!(t.zone(3).unwrap().0, ZoneCondition::Empty);
        assert!(matches!(
            t.close(3),
            Err(ZoneError::InvalidTransition { .. })
        ));
        counts_match(&t);
    }
}
