//! [`Keyspace`]: the data model's shared state over one store — the lock
//! every command takes, the map from databases to slots, per-slot key
//! counts, the version allocator, the `WATCH` registry and the model's
//! counters.
//!
//! Invariants:
//! - every change to the model's records happens in a write [`Tx`](super::Tx), which
//!   holds the lock exclusively from its first read to its commit, so a
//!   command (or a pipeline, or a transaction) is atomic against every
//!   other; read transactions share the lock;
//! - the version ceiling on disk is above every version any durable
//!   record names (a version above the ceiling is used only in the batch
//!   that raises it), so versions are unique across restarts;
//! - the key counts are those of the metadata records on disk plus the
//!   committed transactions since the open, which counted them at open;
//! - a commit is counted in [`Keyspace::writes`] before its lock is
//!   released, so whoever saw its effects sees the count too, and
//!   [`Keyspace::sync_seen`] makes it durable.

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use ferrite::{Store, WriteBatch};
use parking_lot::RwLock;

use super::change::Change;
use super::hints::{Hints, Resume};
use super::layout::{self, DATABASES};
use super::meta::Meta;
use super::stats::ModelStats;
use super::watch::Watches;
use super::ModelError;

/// Names the layout of the records (`docs/format/redis-types.md`).
/// Format 2 adds packed hashes and lists to format 1, so a store of format 1 is
/// one of format 2 as it stands; the record is rewritten on open, and a
/// server that knows only format 1 then refuses the store by name rather
/// than finding packed records it cannot read.
const FORMAT: &[u8] = b"ferrite-redis 2";
const FORMAT_1: &[u8] = b"ferrite-redis 1";

/// What the lock guards.
pub struct State {
    /// Logical database -> slot (`SWAPDB` exchanges two entries).
    pub(super) dbmap: [u8; DATABASES as usize],
    /// Metadata records per slot.
    pub(super) keys: [u64; DATABASES as usize],
    /// Of which carry an expiry.
    pub(super) volatile: [u64; DATABASES as usize],
    pub(super) next_version: u64,
    pub(super) ceiling: u64,
    /// Where commits' changes go (replication), if anywhere.
    pub(super) feed: Option<Arc<dyn ChangeFeed>>,
}

/// Takes every commit's [`Change`] bytes, in commit order, under the
/// keyspace lock (so it must not block on anything that takes it).
pub trait ChangeFeed: Send + Sync {
    /// Whether changes are wanted now (encoding one is skipped if not).
    fn wanted(&self) -> bool;
    fn committed(&self, change: &[u8]);
}

/// The data model over one store; see the module documentation.
pub struct Keyspace {
    store: Store,
    pub(super) state: RwLock<State>,
    /// Commits so far (a connection compares it around a pipeline to
    /// learn whether it must sync before replying).
    writes: AtomicU64,
    /// Commits known to be on the device (a count of [`Self::writes`]).
    durable: AtomicU64,
    watches: Watches,
    hints: Hints,
    /// Where the next expiry pass and sweeper pass resume.
    expiry_resume: Resume,
    trash_resume: Resume,
    stats: ModelStats,
    /// Whether any client is blocked on a key (then commits report the
    /// lists and sorted sets that gained elements).
    blocked: AtomicBool,
    /// Keyspace-event classes wanted (`notify-keyspace-events`), one bit
    /// per class letter in `EVENT_CLASSES`.
    events: AtomicU32,
    replica: AtomicBool,
    loading: AtomicBool,
}

/// The class letters of keyspace events, in bit order.
pub const EVENT_CLASSES: &str = "g$lshzxeKEtmdn";

impl Keyspace {
    /// Opens the model over `store`: reads its records (upgrading a store
    /// written before the type layer, whose values are all strings) and
    /// counts the keys of every database.
    pub fn open(store: Store) -> Result<Self, ModelError> {
        upgrade(&store)?;
        let state = read_state(&store)?;
        Ok(Self {
            store,
            state: RwLock::new(state),
            writes: AtomicU64::new(0),
            durable: AtomicU64::new(0),
            watches: Watches::default(),
            hints: Hints::default(),
            expiry_resume: Resume::default(),
            trash_resume: Resume::default(),
            stats: ModelStats::default(),
            blocked: AtomicBool::new(false),
            events: AtomicU32::new(0),
            replica: AtomicBool::new(false),
            loading: AtomicBool::new(false),
        })
    }

    /// Installs (or removes) where every commit's [`Change`] goes, in
    /// commit order. Taken under the lock, so the feed sees exactly the
    /// commits after the call returns.
    pub fn set_feed(&self, feed: Option<Arc<dyn ChangeFeed>>) {
        self.state.write().feed = feed;
    }

    /// Makes this keyspace a replica's (its writes come only through
    /// [`Keyspace::apply`]) or a master's. Becoming a replica forgets the
    /// hints: the master's writes will not keep them true. Called from a
    /// command (inside a transaction, so no commit runs meanwhile): it
    /// takes no lock.
    pub fn set_replica(&self, replica: bool) {
        if replica {
            self.hints.clear();
        }
        self.replica.store(replica, Ordering::Release);
    }

    /// Whether this is a replica's keyspace: clients do not write, keys
    /// are not expired here (the master's deletes arrive instead).
    pub fn is_replica(&self) -> bool {
        self.replica.load(Ordering::Acquire)
    }

    /// Marks the store as being replaced by a master's copy (clients are
    /// answered `LOADING`).
    pub fn set_loading(&self, loading: bool) {
        self.loading.store(loading, Ordering::Release);
    }

    pub fn is_loading(&self) -> bool {
        self.loading.load(Ordering::Acquire)
    }

    /// Applies a master's change, with `extra` records written in the
    /// same batch (the replica's position in the stream), then hands the
    /// change's bytes to this keyspace's own feed (its backlog and its
    /// own replicas). `still` is asked under the lock whether the change
    /// is still wanted (the link it came on may have been retired); if
    /// not, nothing is applied and the answer is `false`.
    pub fn apply(
        &self,
        change: &Change,
        encoded: &[u8],
        extra: &[(Vec<u8>, Vec<u8>)],
        still: impl FnOnce() -> bool,
    ) -> Result<bool, ModelError> {
        let mut st = self.state.write();
        if !still() {
            return Ok(false);
        }
        let mut batch = WriteBatch::new();
        for (s, e) in &change.ranges {
            batch.delete_range(s, e)?;
        }
        for (k, v) in &change.records {
            match v {
                Some(v) => batch.put(k, v)?,
                None => batch.delete(k)?,
            };
        }
        for (k, v) in extra {
            batch.put(k, v)?;
        }
        self.store.write(&batch)?;
        self.note_write();
        for slot in 0..DATABASES as usize {
            st.keys[slot] = (st.keys[slot] as i64 + change.keys_delta[slot]).max(0) as u64;
            st.volatile[slot] =
                (st.volatile[slot] as i64 + change.volatile_delta[slot]).max(0) as u64;
        }
        for (k, v) in &change.records {
            if *k == layout::server("dbmap") {
                if let Some(map) = v.as_deref().and_then(|m| parse_dbmap(m).ok()) {
                    st.dbmap = map;
                }
            } else if *k == layout::server("version") {
                if let Some(c) = v.as_deref().and_then(|c| <[u8; 8]>::try_from(c).ok()) {
                    st.ceiling = u64::from_be_bytes(c);
                    // A replica promoted later allocates above it.
                    st.next_version = st.next_version.max(st.ceiling);
                }
            }
        }
        if let Some(f) = &st.feed {
            f.committed(encoded);
        }
        drop(st);
        self.watches.touch(&change.touched);
        Ok(true)
    }

    /// Reads the counts, the database map and the version ceiling again
    /// from the store (after a master's copy replaced its records, while
    /// nothing else writes); forgets the hints and where the background
    /// passes stood.
    pub fn reload(&self) -> Result<(), ModelError> {
        // Counted before taking the lock (a copy of millions of keys takes
        // seconds to count): the caller is the store's only writer now.
        let fresh = read_state(&self.store)?;
        let mut st = self.state.write();
        let feed = st.feed.take();
        *st = State { feed, ..fresh };
        self.hints.clear();
        self.expiry_resume.set(None);
        self.trash_resume.set(None);
        Ok(())
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Gives the store back (the server closes it at shutdown).
    pub fn into_store(self) -> Store {
        self.store
    }

    /// Commits so far.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Acquire)
    }

    /// Makes every commit made so far durable, with one store sync unless
    /// an earlier one already covered them. Whoever replies with what it
    /// read calls this first (under `--sync always`): a value shown to a
    /// client is then never taken back by a crash.
    pub fn sync_seen(&self) -> Result<(), ferrite::Error> {
        let seen = self.writes();
        if self.durable.load(Ordering::Acquire) >= seen {
            return Ok(());
        }
        // The store's group commit shares this sync with every other
        // caller syncing at the time.
        self.store.sync()?;
        self.durable.fetch_max(seen, Ordering::AcqRel);
        Ok(())
    }

    pub(super) fn note_write(&self) {
        self.writes.fetch_add(1, Ordering::Release);
    }

    pub fn watches(&self) -> &Watches {
        &self.watches
    }

    pub(super) fn hints(&self) -> &Hints {
        &self.hints
    }

    pub(super) fn expiry_resume(&self) -> &Resume {
        &self.expiry_resume
    }

    pub(super) fn trash_resume(&self) -> &Resume {
        &self.trash_resume
    }

    pub fn stats(&self) -> &ModelStats {
        &self.stats
    }

    /// Says whether any client is blocked on keys.
    pub fn set_blocked(&self, any: bool) {
        self.blocked.store(any, Ordering::Release);
    }

    pub(super) fn ready_wanted(&self) -> bool {
        self.blocked.load(Ordering::Acquire)
    }

    /// Sets the keyspace-event classes wanted, as letters of
    /// [`EVENT_CLASSES`].
    pub fn set_event_classes(&self, letters: &str) {
        let mut bits = 0u32;
        for c in letters.chars() {
            if let Some(i) = EVENT_CLASSES.find(c) {
                bits |= 1 << i;
            }
        }
        self.events.store(bits, Ordering::Release);
    }

    /// Whether events of class `c` are published (keyspace or keyevent
    /// channels must be on too, `K` or `E`).
    pub(super) fn events_wanted(&self, c: char) -> bool {
        let bits = self.events.load(Ordering::Acquire);
        if bits == 0 {
            return false;
        }
        let bit = |l: char| EVENT_CLASSES.find(l).map_or(0, |i| 1u32 << i);
        let channels = bit('K') | bit('E');
        bits & channels != 0 && bits & bit(c) != 0
    }

    /// Whether keyspace (`K`) and keyevent (`E`) channels are on.
    pub fn event_channels(&self) -> (bool, bool) {
        let bits = self.events.load(Ordering::Acquire);
        let bit = |l: char| EVENT_CLASSES.find(l).map_or(0, |i| 1u32 << i);
        (bits & bit('K') != 0, bits & bit('E') != 0)
    }

    /// Keys and keys with an expiry, per logical database. Takes the
    /// lock, so tests only: a command reads them through its
    /// transaction ([`Tx::db_size`](super::Tx::db_size)).
    #[cfg(test)]
    pub fn db_sizes(&self) -> [(u64, u64); DATABASES as usize] {
        let st = self.state.read();
        std::array::from_fn(|db| {
            let slot = st.dbmap[db] as usize;
            (st.keys[slot], st.volatile[slot])
        })
    }
}

/// The lock's state as the store's records give it: the database map,
/// the version ceiling, and every slot's key counts.
fn read_state(store: &Store) -> Result<State, ModelError> {
    let dbmap = match store.get(layout::server("dbmap"))? {
        Some(m) => parse_dbmap(&m)?,
        None => std::array::from_fn(|i| i as u8),
    };
    let ceiling = match store.get(layout::server("version"))? {
        Some(v) => u64::from_be_bytes(
            v.as_slice()
                .try_into()
                .map_err(|_| ModelError::Corrupt("the version ceiling is malformed".into()))?,
        ),
        None => 1,
    };
    let mut keys = [0u64; DATABASES as usize];
    let mut volatile = [0u64; DATABASES as usize];
    let mut bad = None;
    let (start, end) = layout::all_meta();
    store.scan(
        ferrite::KeyRange {
            start: std::ops::Bound::Included(&start),
            end: std::ops::Bound::Excluded(&end),
        },
        &mut |k, v| {
            let slot = k[0] as usize;
            keys[slot] += 1;
            match Meta::decode(v) {
                Ok(m) if m.expire_at.is_some() => volatile[slot] += 1,
                Ok(_) => {}
                Err(e) => {
                    bad = Some(e);
                    return ControlFlow::Break(());
                }
            }
            ControlFlow::Continue(())
        },
    )?;
    if let Some(e) = bad {
        return Err(e);
    }
    Ok(State {
        dbmap,
        keys,
        volatile,
        next_version: ceiling,
        ceiling,
        feed: None,
    })
}

fn parse_dbmap(m: &[u8]) -> Result<[u8; DATABASES as usize], ModelError> {
    let map: [u8; DATABASES as usize] = m
        .try_into()
        .map_err(|_| ModelError::Corrupt("the database map is malformed".into()))?;
    let mut seen = [false; DATABASES as usize];
    for &s in &map {
        if s >= DATABASES || std::mem::replace(&mut seen[s as usize], true) {
            return Err(ModelError::Corrupt(
                "the database map is not a permutation".into(),
            ));
        }
    }
    Ok(map)
}

/// Rewrites the records of a store written by a server before the type
/// layer (plain values under `[db][key]`, no format record) as string
/// metadata, then writes the format record; checks the format of a
/// store written since.
fn upgrade(store: &Store) -> Result<(), ModelError> {
    let format_key = layout::server("format");
    match store.get(&format_key)? {
        Some(f) if f == FORMAT => return Ok(()),
        Some(f) if f == FORMAT_1 => {
            store.put(&format_key, FORMAT)?;
            store.sync()?;
            return Ok(());
        }
        Some(f) => {
            return Err(ModelError::Corrupt(format!(
                "the store holds records of format {:?}, not {:?}",
                String::from_utf8_lossy(&f),
                String::from_utf8_lossy(FORMAT)
            )))
        }
        None => {}
    }
    // Each batch records how far the rewrite got, so a crash part way
    // resumes there instead of wrapping rewritten records again.
    let progress_key = layout::server("upgraded-to");
    let (start, end) = layout::all_meta();
    let mut from = match store.get(&progress_key)? {
        Some(mut at) => {
            at.push(0);
            at
        }
        None => start,
    };
    loop {
        let mut batch = WriteBatch::new();
        let mut last = None;
        let mut n = 0;
        let mut failed = None;
        store.scan(
            ferrite::KeyRange {
                start: std::ops::Bound::Included(&from),
                end: std::ops::Bound::Excluded(&end),
            },
            &mut |k, v| {
                if let Err(e) = batch.put(k, &Meta::string(v.to_vec()).encode()) {
                    failed = Some(e);
                    return ControlFlow::Break(());
                }
                last = Some(k.to_vec());
                n += 1;
                if n == 10_000 {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            },
        )?;
        if let Some(e) = failed {
            return Err(e.into());
        }
        match last {
            Some(k) => {
                batch.put(&progress_key, &k)?;
                store.write(&batch)?;
                let mut next = k;
                next.push(0);
                from = next;
            }
            None => break,
        }
    }
    let mut done = WriteBatch::new();
    done.put(&format_key, FORMAT)?;
    done.delete(&progress_key)?;
    store.write(&done)?;
    store.sync()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::testing::keyspace_on;

    #[test]
    fn a_store_written_before_the_type_layer_reads_as_strings() {
        let dir = tempfile::tempdir().unwrap();
        let store = ferrite::Config::builder(ferrite::EngineKind::Btree)
            .open(dir.path())
            .unwrap();
        store.put(b"\x00greeting", b"hello").unwrap();
        store.put(b"\x03n", b"12").unwrap();
        let ks = Keyspace::open(store).unwrap();
        assert_eq!(
            ks.store().get(b"\x00greeting").unwrap(),
            Some(Meta::string(b"hello".to_vec()).encode())
        );
        assert_eq!(ks.db_sizes()[0], (1, 0));
        assert_eq!(ks.db_sizes()[3], (1, 0));
        // A second open finds the format record and leaves them.
        let store = ks.into_store();
        let ks = keyspace_on(store);
        assert_eq!(ks.db_sizes()[0], (1, 0));
    }

    #[test]
    fn a_store_of_another_format_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = ferrite::Config::builder(ferrite::EngineKind::Btree)
            .open(dir.path())
            .unwrap();
        store
            .put(layout::server("format"), b"something else")
            .unwrap();
        assert!(matches!(Keyspace::open(store), Err(ModelError::Corrupt(_))));
    }

    #[test]
    fn a_store_of_format_1_is_taken_as_format_2() {
        let dir = tempfile::tempdir().unwrap();
        let store = ferrite::Config::builder(ferrite::EngineKind::Btree)
            .open(dir.path())
            .unwrap();
        store.put(layout::server("format"), FORMAT_1).unwrap();
        let ks = Keyspace::open(store).unwrap();
        assert_eq!(
            ks.store().get(layout::server("format")).unwrap().as_deref(),
            Some(FORMAT)
        );
    }
}
