//! [`SnapshotChain`]: snapshots for stores that update in place.
//!
//! A store whose pages (or buffers) hold only the current value of a key
//! keeps, for its live snapshots, the values that writes replaced: before
//! the first write to a key after a snapshot was taken, the store
//! [`captures`](SnapshotChain::capture) the key's current value (or its
//! absence) under that snapshot's id. A snapshot reads a key as the first
//! value captured for it at or after its own id, or, if none was, as the
//! store's current value.
//!
//! Why that is exact: captures are tagged with the newest live snapshot,
//! so the entries of a key with ids `>= s` were all captured after `s` was
//! taken, and the one with the smallest id is the pre-image of the first
//! write after `s` — the value at `s`. With no such entry no write came
//! since, and the current value is the value at `s`.
//!
//! Invariants the store keeps for it: [`SnapshotChain::take`] and every
//! `capture` run under the store's write serialization (its write lock,
//! or whatever orders writes), and a write captures before it changes
//! anything; a snapshot read takes the current value first and the chain's
//! answer after, and the chain's answer wins (a capture made in between
//! means the current value it read is newer than the snapshot).
//!
//! Cost: one read of the key's current value per key written while a
//! snapshot is live (once per snapshot interval), and the captured values
//! in memory until the oldest snapshot that could need them is dropped.
//! Past `limit` retained bytes every live snapshot is cut off: its reads
//! answer [`Error::SnapshotTooOld`], and the memory is freed at once.

use std::collections::{BTreeMap, HashMap};
use std::ops::{Bound, ControlFlow};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::range::KeyRange;
use crate::store::ScanVisitor;

/// Bytes one captured entry costs beyond its key and value: the map node,
/// the version vector's element, the `Vec`s' headers.
const ENTRY_OVERHEAD: u64 = 96;

/// Pairs a snapshot scan reads from the store at a time before merging
/// them with the chain.
const SCAN_CHUNK: usize = 256;

/// The old versions a store keeps for its live snapshots.
pub struct SnapshotChain {
    /// Whether any snapshot is live: writes skip the lock when none is.
    active: AtomicBool,
    state: Mutex<ChainState>,
    /// Retained bytes past which live snapshots are cut off.
    limit: u64,
}

/// A key's old values, as (snapshot id, value then), ascending by id.
type Versions = Vec<(u64, Option<Vec<u8>>)>;

#[derive(Default)]
struct ChainState {
    /// Live snapshots by id (weak: dropping a snapshot's handle ends it).
    live: BTreeMap<u64, Weak<Pin>>,
    next_id: u64,
    versions: BTreeMap<Vec<u8>, Versions>,
    retained: u64,
}

/// One live snapshot's registration; dropping it lets the chain forget
/// what only it needed.
pub struct Pin {
    id: u64,
    chain: Weak<SnapshotChain>,
    /// Set when the chain cut the snapshot off.
    cut: AtomicBool,
    needed: AtomicU64,
}

impl Drop for Pin {
    fn drop(&mut self) {
        if let Some(chain) = self.chain.upgrade() {
            chain.release(self.id);
        }
    }
}

impl Pin {
    /// The snapshot's id (for tests and statistics).
    pub fn id(&self) -> u64 {
        self.id
    }
}

/// What the chain holds, for statistics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChainStats {
    pub live_snapshots: u64,
    pub retained_keys: u64,
    pub retained_bytes: u64,
}

fn entry_bytes(key: &[u8], value: Option<&[u8]>) -> u64 {
    (key.len() + value.map_or(0, <[u8]>::len)) as u64 + ENTRY_OVERHEAD
}

impl SnapshotChain {
    /// A chain that cuts snapshots off past `limit` retained bytes.
    pub fn new(limit: u64) -> Arc<Self> {
        Arc::new(Self {
            active: AtomicBool::new(false),
            state: Mutex::new(ChainState {
                next_id: 1,
                ..ChainState::default()
            }),
            limit,
        })
    }

    /// Registers a snapshot of the store as it is now. The caller holds
    /// the store's write serialization, so no write is half-captured.
    pub fn take(self: &Arc<Self>) -> Arc<Pin> {
        let mut st = self.state.lock();
        let id = st.next_id;
        st.next_id += 1;
        let pin = Arc::new(Pin {
            id,
            chain: Arc::downgrade(self),
            cut: AtomicBool::new(false),
            needed: AtomicU64::new(0),
        });
        st.live.insert(id, Arc::downgrade(&pin));
        self.active.store(true, Ordering::Release);
        pin
    }

    /// Whether any snapshot is live (a write may skip `capture` if not).
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    /// Called before a write changes `key`: if the newest live snapshot
    /// has no version of `key` yet, records the current one, read by
    /// `current` (only then). The caller holds the write serialization.
    pub fn capture(
        &self,
        key: &[u8],
        current: impl FnOnce() -> Result<Option<Vec<u8>>>,
    ) -> Result<()> {
        if !self.is_active() {
            return Ok(());
        }
        let mut st = self.state.lock();
        let Some(&newest) = st.live.keys().next_back() else {
            return Ok(());
        };
        // Pins upgraded to cut them off are dropped after the lock: the
        // last one of a snapshot dropped meanwhile releases it, which locks.
        let mut cut = Vec::new();
        if st
            .versions
            .get(key)
            .and_then(|v| v.last())
            .is_some_and(|&(id, _)| id == newest)
        {
            return Ok(());
        }
        let value = current()?;
        st.retained += entry_bytes(key, value.as_deref());
        st.versions
            .entry(key.to_vec())
            .or_default()
            .push((newest, value));
        if st.retained > self.limit {
            cut = self.cut_off(&mut st);
        }
        drop(st);
        drop(cut);
        Ok(())
    }

    /// Captures every key `visit_range` reports in `start..end` (the
    /// store's current pairs in the range), before a range delete.
    pub fn capture_range(
        &self,
        visit_range: impl FnOnce(&mut dyn FnMut(&[u8], &[u8]) -> Result<()>) -> Result<()>,
    ) -> Result<()> {
        if !self.is_active() {
            return Ok(());
        }
        visit_range(&mut |k, v| self.capture(k, || Ok(Some(v.to_vec()))))
    }

    /// Every live snapshot is cut off and the retained versions freed;
    /// returns the pins it upgraded, for the caller to drop unlocked.
    fn cut_off(&self, st: &mut ChainState) -> Vec<Arc<Pin>> {
        let needed = st.retained;
        let pins: Vec<Arc<Pin>> = st.live.values().filter_map(Weak::upgrade).collect();
        for pin in &pins {
            pin.needed.store(needed, Ordering::Relaxed);
            pin.cut.store(true, Ordering::Release);
        }
        st.live.clear();
        st.versions.clear();
        st.retained = 0;
        self.active.store(false, Ordering::Release);
        pins
    }

    fn release(&self, id: u64) {
        let mut st = self.state.lock();
        if st.live.remove(&id).is_none() {
            // Cut off earlier: it holds nothing any more.
            return;
        }
        st.live.retain(|_, w| w.strong_count() > 0);
        match st.live.keys().next().copied() {
            None => {
                st.versions.clear();
                st.retained = 0;
                self.active.store(false, Ordering::Release);
            }
            Some(oldest) => {
                // Versions captured before the oldest live snapshot serve
                // no one (a read at `s` uses ids at or above `s`).
                let mut freed = 0;
                st.versions.retain(|k, vs| {
                    let keep = vs.partition_point(|&(vid, _)| vid < oldest);
                    for (_, v) in vs.drain(..keep) {
                        freed += entry_bytes(k, v.as_deref());
                    }
                    !vs.is_empty()
                });
                st.retained -= freed;
            }
        }
    }

    fn check(&self, pin: &Pin) -> Result<()> {
        if pin.cut.load(Ordering::Acquire) {
            return Err(Error::SnapshotTooOld {
                needed: pin.needed.load(Ordering::Relaxed),
                limit: self.limit,
            });
        }
        Ok(())
    }

    /// `key`'s value at `pin`'s snapshot if a write has replaced it since
    /// (`Some(value)`, the value possibly absent), `None` if the current
    /// value is still the snapshot's.
    fn version_at(&self, pin: &Pin, key: &[u8]) -> Result<Option<Option<Vec<u8>>>> {
        let st = self.state.lock();
        self.check(pin)?;
        Ok(st.versions.get(key).and_then(|vs| {
            let i = vs.partition_point(|&(vid, _)| vid < pin.id);
            vs.get(i).map(|(_, v)| v.clone())
        }))
    }

    /// The snapshot's versions of the keys in `lo..=hi` (bounds as given)
    /// that writes have replaced since.
    fn versions_in(
        &self,
        pin: &Pin,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
    ) -> Result<HashMap<Vec<u8>, Option<Vec<u8>>>> {
        let st = self.state.lock();
        self.check(pin)?;
        let mut out = HashMap::new();
        if (KeyRange { start: lo, end: hi }).is_empty() {
            return Ok(out);
        }
        for (k, vs) in st.versions.range::<[u8], _>((lo, hi)) {
            let i = vs.partition_point(|&(vid, _)| vid < pin.id);
            if let Some((_, v)) = vs.get(i) {
                out.insert(k.clone(), v.clone());
            }
        }
        Ok(out)
    }

    pub fn stats(&self) -> ChainStats {
        let st = self.state.lock();
        ChainStats {
            live_snapshots: st.live.values().filter(|w| w.strong_count() > 0).count() as u64,
            retained_keys: st.versions.len() as u64,
            retained_bytes: st.retained,
        }
    }
}

/// How a snapshot reads the store's current state: the store's own reads.
pub trait CurrentState: Send + Sync {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;
    fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()>;
    fn scan_rev(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()>;
}

/// A snapshot of a store that updates in place: the store's current
/// state corrected by the chain.
pub struct ChainSnapshot<S: CurrentState> {
    store: S,
    chain: Arc<SnapshotChain>,
    pin: Arc<Pin>,
}

impl<S: CurrentState> ChainSnapshot<S> {
    /// A snapshot reading `store` through `chain`, registered as `pin`.
    pub fn new(store: S, chain: Arc<SnapshotChain>, pin: Arc<Pin>) -> Self {
        Self { store, chain, pin }
    }

    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if let Some(v) = self.chain.version_at(&self.pin, key)? {
            return Ok(v);
        }
        let current = self.store.get(key)?;
        Ok(match self.chain.version_at(&self.pin, key)? {
            Some(v) => v,
            None => current,
        })
    }

    /// Reads `range` in `SCAN_CHUNK`-pair chunks of the current state,
    /// each merged with the chain's versions of the keys it spans, in the
    /// direction `rev` says.
    pub fn scan_dir(
        &self,
        range: KeyRange<'_>,
        rev: bool,
        visit: &mut ScanVisitor<'_>,
    ) -> Result<()> {
        let (mut lo, mut hi): (Bound<Vec<u8>>, Bound<Vec<u8>>) = (
            range.start.map(<[u8]>::to_vec),
            range.end.map(<[u8]>::to_vec),
        );
        loop {
            let r = KeyRange {
                start: lo.as_ref().map(Vec::as_slice),
                end: hi.as_ref().map(Vec::as_slice),
            };
            let mut chunk: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(SCAN_CHUNK);
            let mut collect = |k: &[u8], v: &[u8]| {
                chunk.push((k.to_vec(), v.to_vec()));
                if chunk.len() >= SCAN_CHUNK {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            };
            if rev {
                self.store.scan_rev(r, &mut collect)?;
            } else {
                self.store.scan(r, &mut collect)?;
            }
            let last = chunk.len() < SCAN_CHUNK;
            // The chunk spans keys up to its last one (to the range's end
            // when it is the last chunk); the chain's versions of that
            // span, read after the chunk, correct it.
            let edge: Option<Vec<u8>> = if last {
                None
            } else {
                chunk.last().map(|(k, _)| k.clone())
            };
            let span = match (&edge, rev) {
                (None, _) => (r.start, r.end),
                (Some(e), false) => (r.start, Bound::Included(e.as_slice())),
                (Some(e), true) => (Bound::Included(e.as_slice()), r.end),
            };
            let mut fixes = self.chain.versions_in(&self.pin, span.0, span.1)?;
            let mut merged: Vec<(Vec<u8>, Option<Vec<u8>>)> = chunk
                .into_iter()
                .map(|(k, v)| match fixes.remove(&k) {
                    Some(old) => (k, old),
                    None => (k, Some(v)),
                })
                .collect();
            merged.extend(fixes);
            if rev {
                merged.sort_by(|a, b| b.0.cmp(&a.0));
            } else {
                merged.sort_by(|a, b| a.0.cmp(&b.0));
            }
            for (k, v) in &merged {
                if let Some(v) = v {
                    if visit(k, v).is_break() {
                        return Ok(());
                    }
                }
            }
            let Some(e) = edge else {
                return Ok(());
            };
            if rev {
                hi = Bound::Excluded(e);
            } else {
                lo = Bound::Excluded(e);
            }
        }
    }
}

impl<S: CurrentState> crate::store::StoreSnapshot for ChainSnapshot<S> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        ChainSnapshot::get(self, key)
    }

    fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.scan_dir(range, false, visit)
    }

    fn scan_rev(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.scan_dir(range, true, visit)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap as Map;

    use parking_lot::RwLock;

    use super::*;

    /// A store over a map, capturing as an in-place store must.
    #[derive(Clone)]
    struct MapStore {
        map: Arc<RwLock<Map<Vec<u8>, Vec<u8>>>>,
        chain: Arc<SnapshotChain>,
    }

    impl MapStore {
        fn new(limit: u64) -> Self {
            Self {
                map: Arc::default(),
                chain: SnapshotChain::new(limit),
            }
        }

        fn write(&self, k: &[u8], v: Option<&[u8]>) -> Result<()> {
            let mut m = self.map.write();
            self.chain.capture(k, || Ok(m.get(k).cloned()))?;
            match v {
                Some(v) => m.insert(k.to_vec(), v.to_vec()),
                None => m.remove(k),
            };
            Ok(())
        }

        fn snapshot(&self) -> ChainSnapshot<MapStore> {
            let _w = self.map.write();
            let pin = self.chain.take();
            ChainSnapshot::new(self.clone(), self.chain.clone(), pin)
        }
    }

    impl CurrentState for MapStore {
        fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
            Ok(self.map.read().get(key).cloned())
        }

        fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
            for (k, v) in self.map.read().range::<[u8], _>(range) {
                if visit(k, v).is_break() {
                    break;
                }
            }
            Ok(())
        }

        fn scan_rev(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
            for (k, v) in self.map.read().range::<[u8], _>(range).rev() {
                if visit(k, v).is_break() {
                    break;
                }
            }
            Ok(())
        }
    }

    fn all(s: &ChainSnapshot<MapStore>, rev: bool) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        s.scan_dir(KeyRange::all(), rev, &mut |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            ControlFlow::Continue(())
        })
        .unwrap();
        out
    }

    #[test]
    fn snapshots_keep_their_view_while_writes_go_on() {
        let db = MapStore::new(1 << 30);
        for i in 0..1000u32 {
            db.write(&i.to_be_bytes(), Some(b"v0")).unwrap();
        }
        let s1 = db.snapshot();
        let want1 = all(&s1, false);
        for i in (0..1000u32).step_by(3) {
            db.write(&i.to_be_bytes(), None).unwrap();
        }
        for i in 1000..1500u32 {
            db.write(&i.to_be_bytes(), Some(b"new")).unwrap();
        }
        let s2 = db.snapshot();
        let want2 = all(&s2, false);
        for i in (0..1500u32).step_by(2) {
            db.write(&i.to_be_bytes(), Some(b"v2")).unwrap();
        }
        assert_eq!(all(&s1, false), want1);
        assert_eq!(all(&s2, false), want2);
        let mut rev = want1.clone();
        rev.reverse();
        assert_eq!(all(&s1, true), rev);
        assert_eq!(s1.get(&3u32.to_be_bytes()).unwrap(), Some(b"v0".to_vec()));
        assert_eq!(s1.get(&1200u32.to_be_bytes()).unwrap(), None);
        assert_eq!(s2.get(&3u32.to_be_bytes()).unwrap(), None);
        // The middle snapshot goes; the oldest still sees its view.
        drop(s2);
        assert_eq!(all(&s1, false), want1);
        drop(s1);
        assert_eq!(db.chain.stats(), ChainStats::default());
        assert!(!db.chain.is_active());
    }

    #[test]
    fn past_the_bound_snapshots_are_cut_off_and_memory_freed() {
        let db = MapStore::new(10_000);
        db.write(b"k", Some(b"v")).unwrap();
        let s = db.snapshot();
        for i in 0..200u32 {
            db.write(&i.to_be_bytes(), Some(&[1; 32])).unwrap();
        }
        assert!(matches!(s.get(b"k"), Err(Error::SnapshotTooOld { .. })));
        assert_eq!(db.chain.stats().retained_bytes, 0);
        let fresh = db.snapshot();
        db.write(b"k", Some(b"w")).unwrap();
        // The snapshot cut off earlier goes; the fresh one keeps its view.
        drop(s);
        assert_eq!(fresh.get(b"k").unwrap(), Some(b"v".to_vec()));
        assert_eq!(db.get(b"k").unwrap(), Some(b"w".to_vec()));
    }
}
