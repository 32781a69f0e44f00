//! Reads: lookups and scans in both directions, for the store and for
//! its snapshots (which read the current state through them).
//!
//! In the plain tree, lookups and short forward scans take no lock (see
//! `structure_version`); with the insert buffer or SHORTCUT on they take
//! the shared lock, and the buffer's records overlay the leaves' cells.
//! A reverse scan always takes the shared lock: it finds each next leaf
//! by a descent below the current one's low fence.

use std::sync::atomic::Ordering::Relaxed;

use ferrite_core::{CommitView, KeyRange, Result, ScanVisitor};

use super::{visit_collected, Shared, State, SCAN_CHUNK};
use crate::tree::Collected;

/// The state a conditional batch's check reads: the tree as the write
/// lock holds it.
pub(super) struct LockedView<'a> {
    pub(super) shared: &'a Shared,
    pub(super) st: &'a State,
}

impl CommitView for LockedView<'_> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.shared.get_locked(self.st, key)
    }

    fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.shared.scan_locked(self.st, range, visit).map(drop)
    }

    fn write_sequence(&self) -> Option<u64> {
        Some(self.st.applied)
    }
}

impl Shared {
    /// The value of `key` now.
    pub(super) fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let s = self;
        s.check_poison()?;
        s.check_key_len(key)?;
        if s.lock_free_lookups() {
            let lookup = || {
                let descent = s.tree.route_published(key)?;
                s.tree.get_at(descent, key)
            };
            // Overlapped by changes on every attempt: wait for the writer
            // under the tree's lock instead.
            let (v, resident) = match s.tree.version.optimistic(lookup) {
                Some(r) => r?,
                None => {
                    let _st = s.state.read();
                    lookup()?
                }
            };
            s.count_lookup(resident, key, v.as_deref());
            return Ok(v);
        }
        let st = s.state.read();
        let leaf = match &s.shortcut {
            Some(sc) => sc.leaf_for(&s.tree, &st.shape, key)?,
            None => s.tree.leaf_for(&st.shape, key)?,
        };
        let buffered = st.turbo.buffer().and_then(|ib| ib.lookup(leaf, key));
        let v = match buffered {
            Some(b) => {
                s.counters.access.buffer_reads.fetch_add(1, Relaxed);
                b.map(<[u8]>::to_vec)
            }
            None => {
                let (v, resident) = s.tree.get_in(leaf, key)?;
                s.count_lookup(resident, key, v.as_deref());
                return Ok(v);
            }
        };
        s.counters.api.count_get(key, v.as_deref());
        Ok(v)
    }

    /// The value of `key` in the state the caller holds locked (for a
    /// write's snapshot capture and a compare-and-swap's comparison).
    pub(super) fn get_locked(&self, st: &State, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let leaf = self.tree.leaf_for(&st.shape, key)?;
        if let Some(b) = st.turbo.buffer().and_then(|ib| ib.lookup(leaf, key)) {
            return Ok(b.map(<[u8]>::to_vec));
        }
        Ok(self.tree.get_in(leaf, key)?.0)
    }

    /// Visits `range` in ascending key order.
    pub(super) fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        let s = self;
        s.check_poison()?;
        s.counters.api.count_scan();
        let mut got = Collected::default();
        let mut prefix_at = None;
        if s.lock_free_lookups() {
            // A short scan is read whole with no lock and validated before
            // the visitor sees any of it, so it shows one tree, as a scan
            // under the lock does.
            let read = || s.tree.collect_published(range, SCAN_CHUNK, &mut got);
            match s.tree.version.optimistic_at(read) {
                Some((Ok(true), _)) => {
                    let bytes = visit_collected(&got, visit).0;
                    s.counters.api.add_read(bytes);
                    return Ok(());
                }
                Some((Ok(false), v)) => prefix_at = Some(v),
                Some((Err(e), _)) => return Err(e),
                None => {}
            }
        }
        let st = s.state.read();
        if prefix_at.is_some_and(|v| s.tree.version.validate(v)) {
            // A long scan: nothing changed since its first chunk was read,
            // so that chunk and the rest, read under the lock, are one tree.
            let (mut bytes, stopped) = visit_collected(&got, visit);
            let last = got.len().checked_sub(1).and_then(|i| got.get(i));
            if let (false, Some((last, _))) = (stopped, last) {
                let rest = KeyRange {
                    start: std::ops::Bound::Excluded(last),
                    end: range.end,
                };
                bytes += s.tree.scan(&st.shape, rest, visit)?;
            }
            s.counters.api.add_read(bytes);
            return Ok(());
        }
        let bytes = s.scan_locked(&st, range, visit)?;
        s.counters.api.add_read(bytes);
        Ok(())
    }

    /// Visits `range` in descending key order, under the shared lock.
    pub(super) fn scan_rev(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.check_poison()?;
        self.counters.api.count_scan();
        let st = self.state.read();
        let bytes = self.scan_rev_locked(&st, range, visit)?;
        self.counters.api.add_read(bytes);
        Ok(())
    }

    /// A reverse scan of the state the caller holds locked.
    pub(super) fn scan_rev_locked(
        &self,
        st: &State,
        range: KeyRange<'_>,
        visit: &mut ScanVisitor<'_>,
    ) -> Result<u64> {
        match st.turbo.records() {
            Some(ib) => self
                .tree
                .scan_rev_with(&st.shape, range, &|leaf| ib.sorted(leaf), visit),
            None => self
                .tree
                .scan_rev_with(&st.shape, range, &|_| Vec::new(), visit),
        }
    }

    /// A forward scan of the state the caller holds locked.
    pub(super) fn scan_locked(
        &self,
        st: &State,
        range: KeyRange<'_>,
        visit: &mut ScanVisitor<'_>,
    ) -> Result<u64> {
        match st.turbo.records() {
            Some(ib) => self
                .tree
                .scan_with(&st.shape, range, &|leaf| ib.sorted(leaf), visit),
            None => self.tree.scan(&st.shape, range, visit),
        }
    }
}
