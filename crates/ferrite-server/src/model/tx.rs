//! [`Tx`]: one unit of work on the keyspace, the commands of a pipeline
//! or of a `MULTI`/`EXEC` between taking the keyspace lock and releasing
//! it.
//!
//! A write transaction holds the lock exclusively: reads see the store
//! under the transaction's own writes (an overlay), and every write
//! reaches the store as one atomic batch at [`Tx::commit`], with what
//! follows from it (key counts, the version ceiling, touched `WATCH`ed
//! keys, lists and sorted sets that gained elements, keyspace events).
//! A read transaction holds the lock shared and reads the store as it
//! is; nothing writes while any read transaction lives, so a command's
//! several reads see one state.
//!
//! Invariants: nothing reaches the store before `commit`, and a failed
//! commit applies none of its effects; the overlay answers every read of
//! a key it holds, and a range delete hides every stored key it covers
//! from later reads of the same transaction; [`Tx::rollback`] to a
//! [`Savepoint`] undoes every write and effect since it, so a command
//! that fails part way leaves nothing behind in the commands grouped
//! with it.

use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow};

use ferrite::{KeyRange, WriteBatch, MAX_VALUE_LEN};
use parking_lot::{RwLockReadGuard, RwLockWriteGuard};

use super::hints::{self, CollId, Mark};
use super::keyspace::{Keyspace, State};
use super::layout::{self, Span, DATABASES};
use super::meta::Kind;
use super::pop_queue::PopQueues;
use super::{ModelError, Visit};

/// How many versions one ceiling record reserves: a restart skips at
/// most this many.
const VERSION_BLOCK: u64 = 1 << 16;

pub(super) enum Guard<'a> {
    Read(RwLockReadGuard<'a, State>),
    Write(RwLockWriteGuard<'a, State>),
}

/// A keyspace event for `notify-keyspace-events` (published after the
/// commit that made it true).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Redis's class letter: `g` generic, `$` string, `l` list, `s` set,
    /// `h` hash, `z` sorted set, `x` expired.
    pub class: char,
    pub name: &'static str,
    pub db: u8,
    pub key: Vec<u8>,
}

/// What a committed transaction changed, for the server to act on.
#[derive(Debug, Default)]
pub struct Committed {
    /// Lists and sorted sets that gained elements (blocked clients may be
    /// served), as (db, key).
    pub ready: Vec<(u8, Vec<u8>)>,
    pub events: Vec<Event>,
    /// Whether anything was written.
    pub wrote: bool,
}

/// Where a transaction stood before a command (see [`Tx::rollback`]).
#[derive(Debug, Clone, Copy)]
pub struct Savepoint {
    undo: usize,
    cleared: usize,
    keys_delta: [i64; DATABASES as usize],
    volatile_delta: [i64; DATABASES as usize],
    expired: u64,
    touched: usize,
    ready: usize,
    events: usize,
    marks: usize,
    dbmap: Option<[u8; DATABASES as usize]>,
    wrote: bool,
}

/// An overlay entry as it was before a write: `None` when the overlay
/// did not hold the key.
type Undo = (Vec<u8>, Option<Option<Vec<u8>>>);

/// A unit of work on the keyspace; see the module documentation.
pub struct Tx<'a> {
    ks: &'a Keyspace,
    guard: Guard<'a>,
    overlay: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    cleared: Vec<Span>,
    /// Overlay entries before each write since the transaction began.
    undo: Vec<Undo>,
    /// Per-slot changes of the key and volatile-key counts.
    keys_delta: [i64; DATABASES as usize],
    volatile_delta: [i64; DATABASES as usize],
    expired: u64,
    /// Keys whose value changed, as (db, key, exists after).
    touched: Vec<(u8, Vec<u8>, bool)>,
    ready: Vec<(u8, Vec<u8>)>,
    events: Vec<Event>,
    /// Marks to set at commit (see `hints`), in order; `None` drops the
    /// mark. Only ever appended to, so a rollback is a truncation.
    marks: Vec<(CollId, Mark, Option<Vec<u8>>)>,
    /// Sorted-set members read ahead for pops (see `pop_queue`).
    pub(super) pops: PopQueues,
    /// Expired keys lookups met (removed as Redis removes them: by the
    /// command that meets them; see [`Tx::expire_stale`]).
    stale: std::cell::RefCell<Vec<(u8, Vec<u8>)>>,
    /// `SWAPDB` inside the transaction: the database map it leaves.
    dbmap: Option<[u8; DATABASES as usize]>,
    /// A version ceiling written by this transaction.
    ceiling: Option<u64>,
    /// Databases emptied (every watched key of theirs that existed is
    /// touched by the command that emptied them).
    wrote: bool,
    /// The command's clock (ms since the Unix epoch): fixed while a
    /// command runs, as Redis fixes it, so one command sees one "now".
    pub now: u64,
}

/// A keyspace's transactions are made here, beside what they hold.
impl Keyspace {
    /// A transaction that reads, sharing the lock with other readers.
    pub fn read(&self) -> Tx<'_> {
        Tx::new(self, Guard::Read(self.state.read()))
    }

    /// A transaction that writes, holding the lock alone.
    pub fn write(&self) -> Tx<'_> {
        Tx::new(self, Guard::Write(self.state.write()))
    }

    /// [`Keyspace::read`], unless the lock stays taken for `wait`.
    pub fn try_read_for(&self, wait: std::time::Duration) -> Option<Tx<'_>> {
        let g = self.state.try_read_for(wait)?;
        Some(Tx::new(self, Guard::Read(g)))
    }

    /// [`Keyspace::write`], unless the lock stays taken for `wait`.
    pub fn try_write_for(&self, wait: std::time::Duration) -> Option<Tx<'_>> {
        let g = self.state.try_write_for(wait)?;
        Some(Tx::new(self, Guard::Write(g)))
    }
}

impl<'a> Tx<'a> {
    pub(super) fn new(ks: &'a Keyspace, guard: Guard<'a>) -> Self {
        Self {
            ks,
            guard,
            overlay: BTreeMap::new(),
            cleared: Vec::new(),
            undo: Vec::new(),
            keys_delta: [0; DATABASES as usize],
            volatile_delta: [0; DATABASES as usize],
            expired: 0,
            touched: Vec::new(),
            ready: Vec::new(),
            events: Vec::new(),
            marks: Vec::new(),
            pops: PopQueues::default(),
            stale: std::cell::RefCell::new(Vec::new()),
            dbmap: None,
            ceiling: None,
            wrote: false,
            now: super::now_ms(),
        }
    }

    pub fn keyspace(&self) -> &'a Keyspace {
        self.ks
    }

    fn state(&self) -> &State {
        match &self.guard {
            Guard::Read(g) => g,
            Guard::Write(g) => g,
        }
    }

    /// Whether this transaction may write.
    pub fn writable(&self) -> bool {
        matches!(self.guard, Guard::Write(_))
    }

    /// Resets the clock for the next command.
    pub fn tick(&mut self) {
        self.now = super::now_ms();
    }

    /// The slot holding logical database `db` now.
    pub fn slot(&self, db: u8) -> u8 {
        let map = self.dbmap.as_ref().unwrap_or(&self.state().dbmap);
        map[db as usize % DATABASES as usize]
    }

    /// The logical database held in `slot`.
    pub fn db_of_slot(&self, slot: u8) -> u8 {
        let map = self.dbmap.as_ref().unwrap_or(&self.state().dbmap);
        map.iter().position(|&s| s == slot).unwrap_or(0) as u8
    }

    /// Exchanges what databases `a` and `b` hold.
    pub fn swap_dbs(&mut self, a: u8, b: u8) {
        let mut map = self.dbmap.unwrap_or(self.state().dbmap);
        map.swap(a as usize, b as usize);
        self.dbmap = Some(map);
        self.wrote = true;
        let mut rec = Vec::with_capacity(DATABASES as usize);
        rec.extend_from_slice(&map);
        self.record(layout::server("dbmap"), Some(rec));
    }

    /// Where the transaction stands now.
    pub fn savepoint(&self) -> Savepoint {
        Savepoint {
            undo: self.undo.len(),
            cleared: self.cleared.len(),
            keys_delta: self.keys_delta,
            volatile_delta: self.volatile_delta,
            expired: self.expired,
            touched: self.touched.len(),
            ready: self.ready.len(),
            events: self.events.len(),
            marks: self.marks.len(),
            dbmap: self.dbmap,
            wrote: self.wrote,
        }
    }

    /// Whether anything was written since `sp`.
    pub fn wrote_since(&self, sp: &Savepoint) -> bool {
        self.undo.len() > sp.undo || self.cleared.len() > sp.cleared || self.dbmap != sp.dbmap
    }

    /// Undoes every write and effect since `sp`.
    pub fn rollback(&mut self, sp: Savepoint) {
        while self.undo.len() > sp.undo {
            let Some((k, before)) = self.undo.pop() else {
                break;
            };
            match before {
                Some(v) => self.overlay.insert(k, v),
                None => self.overlay.remove(&k),
            };
        }
        self.cleared.truncate(sp.cleared);
        self.keys_delta = sp.keys_delta;
        self.volatile_delta = sp.volatile_delta;
        self.expired = sp.expired;
        self.touched.truncate(sp.touched);
        self.ready.truncate(sp.ready);
        self.events.truncate(sp.events);
        self.marks.truncate(sp.marks);
        self.pops.clear();
        self.dbmap = sp.dbmap;
        self.wrote = sp.wrote;
    }

    /// Sets an overlay entry, keeping what it replaces for a rollback.
    fn record(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) {
        if !self.pops.is_empty() {
            if let Some(id) = layout::score_owner(&key) {
                self.pops.written(id);
            }
        }
        let before = self.overlay.insert(key.clone(), value);
        self.undo.push((key, before));
    }

    /// Keys and keys with an expiry in `db`, counting this transaction's
    /// changes (expired keys not yet removed count, as in Redis).
    pub fn db_size(&self, db: u8) -> (u64, u64) {
        let slot = self.slot(db) as usize;
        let st = self.state();
        (
            (st.keys[slot] as i64 + self.keys_delta[slot]).max(0) as u64,
            (st.volatile[slot] as i64 + self.volatile_delta[slot]).max(0) as u64,
        )
    }

    /// A fresh collection version.
    pub fn new_version(&mut self) -> Result<u64, ModelError> {
        let Guard::Write(st) = &mut self.guard else {
            return Err(ModelError::ReadOnly);
        };
        let v = st.next_version;
        st.next_version += 1;
        let ceiling = self.ceiling.unwrap_or(st.ceiling);
        if v >= ceiling {
            // Kept through a rollback: the ceiling only ever rises.
            let next = v + VERSION_BLOCK;
            self.ceiling = Some(next);
            self.overlay
                .insert(layout::server("version"), Some(next.to_be_bytes().to_vec()));
        }
        Ok(v)
    }

    /// The stored value of a raw key, through this transaction's writes.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, ModelError> {
        if let Some(v) = self.overlay.get(key) {
            return Ok(v.clone());
        }
        if self.is_cleared(key) {
            return Ok(None);
        }
        Ok(self.ks.store().get(key)?)
    }

    /// Range deletes written so far (tests check which writes are points).
    #[cfg(test)]
    pub(super) fn range_deletes(&self) -> usize {
        self.cleared.len()
    }

    fn is_cleared(&self, key: &[u8]) -> bool {
        self.cleared
            .iter()
            .any(|(s, e)| s.as_slice() <= key && key < e.as_slice())
    }

    fn check_writable(&self) -> Result<(), ModelError> {
        if self.writable() {
            Ok(())
        } else {
            Err(ModelError::ReadOnly)
        }
    }

    pub fn put(&mut self, key: Vec<u8>, value: Vec<u8>) -> Result<(), ModelError> {
        self.check_writable()?;
        if value.len() > MAX_VALUE_LEN {
            return Err(ModelError::ValueTooLarge {
                len: value.len(),
                max: MAX_VALUE_LEN,
            });
        }
        self.wrote = true;
        self.record(key, Some(value));
        Ok(())
    }

    pub fn delete(&mut self, key: Vec<u8>) -> Result<(), ModelError> {
        self.check_writable()?;
        self.wrote = true;
        self.record(key, None);
        Ok(())
    }

    /// Deletes every key in `start..end`.
    pub fn delete_range(&mut self, start: Vec<u8>, end: Vec<u8>) -> Result<(), ModelError> {
        self.check_writable()?;
        if start >= end {
            return Ok(());
        }
        self.wrote = true;
        self.pops.clear();
        let doomed: Vec<Vec<u8>> = self
            .overlay
            .range::<[u8], _>((Bound::Included(&start[..]), Bound::Excluded(&end[..])))
            .map(|(k, _)| k.clone())
            .collect();
        for k in doomed {
            let before = self.overlay.remove(&k);
            self.undo.push((k, before));
        }
        self.cleared.push((start, end));
        Ok(())
    }

    /// Visits the stored pairs of `start..end` (`end` `None`: to the end
    /// of the store) through this transaction's writes, ascending or (with
    /// `rev`) descending, until `visit` breaks. `visit` must not call
    /// back into the transaction.
    pub fn scan(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        rev: bool,
        visit: &mut Visit<'_>,
    ) -> Result<(), ModelError> {
        let range = KeyRange {
            start: Bound::Included(start),
            end: end.map_or(Bound::Unbounded, Bound::Excluded),
        };
        let upper = end.map_or(Bound::Unbounded, Bound::Excluded);
        let mut pending: Vec<(&[u8], Option<&[u8]>)> = self
            .overlay
            .range::<[u8], _>((Bound::Included(start), upper))
            .map(|(k, v)| (k.as_slice(), v.as_deref()))
            .collect();
        let store = self.ks.store();
        if pending.is_empty() && self.cleared.is_empty() {
            let r = if rev {
                store.scan_rev(range, visit)
            } else {
                store.scan(range, visit)
            };
            return Ok(r?);
        }
        if rev {
            pending.reverse();
        }
        // Ahead of `k` in the scan's direction.
        let ahead = |a: &[u8], k: &[u8]| if rev { a > k } else { a < k };
        let mut i = 0;
        let mut stopped = false;
        let mut merge = |k: &[u8], v: &[u8]| -> ControlFlow<()> {
            while i < pending.len() && ahead(pending[i].0, k) {
                if let (pk, Some(pv)) = pending[i] {
                    if visit(pk, pv).is_break() {
                        stopped = true;
                        return ControlFlow::Break(());
                    }
                }
                i += 1;
            }
            let flow = if i < pending.len() && pending[i].0 == k {
                i += 1;
                match pending[i - 1].1 {
                    Some(pv) => visit(k, pv),
                    None => ControlFlow::Continue(()),
                }
            } else if self.is_cleared(k) {
                ControlFlow::Continue(())
            } else {
                visit(k, v)
            };
            if flow.is_break() {
                stopped = true;
            }
            flow
        };
        if rev {
            store.scan_rev(range, &mut merge)?;
        } else {
            store.scan(range, &mut merge)?;
        }
        if !stopped {
            for (pk, pv) in &pending[i..] {
                if let Some(pv) = pv {
                    if visit(pk, pv).is_break() {
                        break;
                    }
                }
            }
        }
        Ok(())
    }

    /// Records a key's change for `WATCH` (`exists`: whether it holds a
    /// value afterwards).
    pub fn touch(&mut self, db: u8, key: &[u8], exists: bool) {
        if self.ks.watches().any() {
            self.touched.push((db, key.to_vec(), exists));
        }
    }

    /// Records that a list or sorted set gained elements.
    pub fn mark_ready(&mut self, db: u8, key: &[u8]) {
        if self.ks.ready_wanted() {
            self.ready.push((db, key.to_vec()));
        }
    }

    /// Notes an expired key a lookup met.
    pub(super) fn saw_stale(&self, db: u8, key: &[u8]) {
        self.stale.borrow_mut().push((db, key.to_vec()));
    }

    /// Whether lookups met expired keys not yet removed.
    pub fn met_stale(&self) -> bool {
        !self.stale.borrow().is_empty()
    }

    /// Removes the expired keys lookups met, as Redis removes an expired
    /// key the moment a command touches it (so `DBSIZE` after a read of
    /// one counts it gone, and `expired_keys` counts it). A write
    /// transaction only; a read one keeps them for the next.
    pub fn expire_stale(&mut self) -> Result<(), ModelError> {
        if !self.writable() {
            return Ok(());
        }
        if self.ks.is_replica() {
            // The master's deletes remove them.
            self.stale.borrow_mut().clear();
            return Ok(());
        }
        let met = std::mem::take(&mut *self.stale.borrow_mut());
        for (db, key) in met {
            let mut f = self.lookup(db, &key)?;
            if f.stale() {
                self.set(&mut f, None)?;
            }
        }
        self.stale.borrow_mut().clear();
        Ok(())
    }

    /// The expired keys lookups met, forgotten here (for a write
    /// transaction to remove).
    pub fn take_stale(&mut self) -> Vec<(u8, Vec<u8>)> {
        std::mem::take(&mut *self.stale.borrow_mut())
    }

    /// Queues keys another transaction met expired, for
    /// [`Tx::expire_stale`].
    pub fn add_stale(&mut self, keys: Vec<(u8, Vec<u8>)>) {
        self.stale.borrow_mut().extend(keys);
    }

    /// The lists and sorted sets that gained elements so far, forgotten
    /// (blocked clients waiting on them are served now).
    pub fn take_ready(&mut self) -> Vec<(u8, Vec<u8>)> {
        std::mem::take(&mut self.ready)
    }

    /// The newest mark of `id`'s `which` end this transaction set or
    /// dropped (`Some(None)`: dropped), if any.
    fn own_mark(&self, id: CollId, which: Mark) -> Option<&Option<Vec<u8>>> {
        self.marks
            .iter()
            .rev()
            .find(|(i, w, _)| *i == id && *w == which)
            .map(|(_, _, k)| k)
    }

    /// A sorted set's mark as this transaction sees it.
    pub(super) fn mark(&self, id: CollId, which: Mark) -> Option<Vec<u8>> {
        match self.own_mark(id, which) {
            Some(k) => k.clone(),
            None => self.ks.hints().mark(id, which),
        }
    }

    /// Where `SPOP` of a large set resumes.
    pub(super) fn ks_cursor(&self, id: CollId) -> Option<Vec<u8>> {
        self.ks.hints().cursor(id)
    }

    pub(super) fn ks_set_cursor(&self, id: CollId, position: Vec<u8>) {
        self.ks.hints().set_cursor(id, position);
    }

    /// Moves a mark past what this transaction deleted (set at commit).
    pub(super) fn move_mark(&mut self, id: CollId, which: Mark, key: Vec<u8>) {
        self.marks.push((id, which, Some(key)));
    }

    /// A score-index key is written: marks it passes are dropped, here
    /// and in the keyspace.
    pub(super) fn score_written(&mut self, id: CollId, key: &[u8]) {
        self.ks.hints().written(id, key);
        for which in [Mark::Low, Mark::High] {
            let passed = self
                .own_mark(id, which)
                .and_then(Option::as_deref)
                .is_some_and(|k| hints::passes(which, key, k));
            if passed {
                self.marks.push((id, which, None));
            }
        }
    }

    /// Records a keyspace event, if any are wanted.
    pub fn notify(&mut self, class: char, name: &'static str, db: u8, key: &[u8]) {
        if self.ks.events_wanted(class) {
            self.events.push(Event {
                class,
                name,
                db,
                key: key.to_vec(),
            });
        }
    }

    pub(super) fn count_key(&mut self, slot: u8, delta: i64) {
        self.keys_delta[slot as usize] += delta;
    }

    pub(super) fn count_volatile(&mut self, slot: u8, delta: i64) {
        self.volatile_delta[slot as usize] += delta;
    }

    /// Counts a key removed because it expired.
    pub(super) fn count_expired(&mut self) {
        self.expired += 1;
    }

    /// Whether this transaction has written anything yet.
    pub fn has_writes(&self) -> bool {
        self.wrote
    }

    /// Writes everything as one atomic batch and applies its effects.
    pub fn commit(self) -> Result<Committed, ModelError> {
        let Tx {
            ks,
            guard,
            overlay,
            cleared,
            keys_delta,
            volatile_delta,
            expired,
            touched,
            ready,
            events,
            marks,
            dbmap,
            ceiling,
            wrote,
            ..
        } = self;
        let Guard::Write(mut st) = guard else {
            return Ok(Committed::default());
        };
        if !wrote {
            // A change that left the records as they were (a value set to
            // itself) still counts for watchers and events.
            drop(st);
            ks.watches().touch(&touched);
            return Ok(Committed {
                ready,
                events,
                wrote: false,
            });
        }
        let mut batch = WriteBatch::new();
        for (s, e) in &cleared {
            batch.delete_range(s, e)?;
        }
        for (k, v) in &overlay {
            match v {
                Some(v) => batch.put(k, v)?,
                None => batch.delete(k)?,
            };
        }
        ks.store().write(&batch)?;
        if let Some(feed) = st.feed.as_ref().filter(|f| f.wanted()) {
            feed.committed(&super::change::encode(
                &cleared,
                &overlay,
                &keys_delta,
                &volatile_delta,
                &touched,
            ));
        }
        // Counted once in the store (a sync after this covers it) and
        // before the lock is released (whoever sees it sees the count).
        ks.note_write();
        for slot in 0..DATABASES as usize {
            st.keys[slot] = (st.keys[slot] as i64 + keys_delta[slot]).max(0) as u64;
            st.volatile[slot] = (st.volatile[slot] as i64 + volatile_delta[slot]).max(0) as u64;
        }
        if let Some(map) = dbmap {
            st.dbmap = map;
        }
        if let Some(c) = ceiling {
            st.ceiling = c;
        }
        ks.stats().add_expired(expired);
        drop(st);
        for (id, which, key) in marks {
            match key {
                Some(k) => ks.hints().set_mark(id, which, k),
                None => ks.hints().drop_mark(id, which),
            }
        }
        ks.watches().touch(&touched);
        Ok(Committed {
            ready,
            events,
            wrote: true,
        })
    }

    /// Whether `kind` is one a blocked client may wait on.
    pub fn blocks_on(kind: Kind) -> bool {
        matches!(kind, Kind::List | Kind::ZSet)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::testing::keyspace;

    fn collect(tx: &Tx<'_>, rev: bool) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        tx.scan(b"a", Some(b"z"), rev, &mut |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            ControlFlow::Continue(())
        })
        .unwrap();
        out
    }

    #[test]
    fn scans_merge_the_overlay_with_the_store_both_ways() {
        let ks = keyspace();
        for k in ["b", "d", "f", "h"] {
            ks.store().put(k, "store").unwrap();
        }
        let mut tx = ks.write();
        tx.put(b"c".to_vec(), b"tx".to_vec()).unwrap();
        tx.delete(b"d".to_vec()).unwrap();
        tx.put(b"f".to_vec(), b"tx".to_vec()).unwrap();
        tx.delete_range(b"g".to_vec(), b"i".to_vec()).unwrap();
        tx.put(b"gg".to_vec(), b"tx".to_vec()).unwrap();
        let want: Vec<(Vec<u8>, Vec<u8>)> =
            [("b", "store"), ("c", "tx"), ("f", "tx"), ("gg", "tx")]
                .iter()
                .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
                .collect();
        assert_eq!(collect(&tx, false), want);
        let mut rev = want.clone();
        rev.reverse();
        assert_eq!(collect(&tx, true), rev);
        assert_eq!(tx.get(b"h").unwrap(), None);
        assert_eq!(tx.get(b"b").unwrap(), Some(b"store".to_vec()));
        // Nothing reached the store before the commit.
        assert_eq!(ks.store().get(b"c").unwrap(), None);
        tx.commit().unwrap();
        let tx = ks.read();
        assert_eq!(collect(&tx, false), want);
    }

    #[test]
    fn a_rollback_undoes_writes_range_deletes_and_counts() {
        let ks = keyspace();
        ks.store().put("b", "store").unwrap();
        let mut tx = ks.write();
        tx.put(b"c".to_vec(), b"1".to_vec()).unwrap();
        let sp = tx.savepoint();
        tx.put(b"c".to_vec(), b"2".to_vec()).unwrap();
        tx.put(b"d".to_vec(), b"2".to_vec()).unwrap();
        tx.delete_range(b"a".to_vec(), b"c".to_vec()).unwrap();
        tx.count_key(0, 5);
        tx.swap_dbs(0, 1);
        tx.rollback(sp);
        assert_eq!(tx.get(b"c").unwrap(), Some(b"1".to_vec()));
        assert_eq!(tx.get(b"d").unwrap(), None);
        assert_eq!(tx.get(b"b").unwrap(), Some(b"store".to_vec()));
        assert_eq!(tx.slot(0), 0);
        assert_eq!(tx.db_size(0), (0, 0));
        tx.commit().unwrap();
        assert_eq!(ks.store().get(b"c").unwrap(), Some(b"1".to_vec()));
        assert_eq!(ks.store().get(b"d").unwrap(), None);
    }

    #[test]
    fn a_read_transaction_refuses_writes() {
        let ks = keyspace();
        let mut tx = ks.read();
        assert!(matches!(
            tx.put(b"a".to_vec(), vec![]),
            Err(ModelError::ReadOnly)
        ));
        assert!(matches!(tx.new_version(), Err(ModelError::ReadOnly)));
    }

    #[test]
    fn versions_are_never_reused_across_reopens() {
        let dir = tempfile::tempdir().unwrap();
        let open = || {
            let store = ferrite::Config::builder(ferrite::EngineKind::Lsm)
                .open(dir.path())
                .unwrap();
            Keyspace::open(store).unwrap()
        };
        let ks = open();
        let mut tx = ks.write();
        let a = tx.new_version().unwrap();
        let b = tx.new_version().unwrap();
        assert!(b > a);
        // A record naming the version makes it durable.
        tx.put(layout::field(0, b, Kind::Set, b"m").unwrap(), Vec::new())
            .unwrap();
        tx.commit().unwrap();
        ks.into_store().close().unwrap();
        let ks = open();
        let mut tx = ks.write();
        assert!(tx.new_version().unwrap() > b);
    }
}
