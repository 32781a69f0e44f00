//! [`Transaction`]: optimistic, serializable read-write transactions over
//! any engine.
//!
//! A transaction reads a snapshot taken when it begins and keeps its
//! writes in memory, where its own reads see them. It records what it
//! read from the snapshot: each key with a digest of the value it found
//! (or that it found none), and each scanned range with a digest of every
//! pair the snapshot held in the part of it the scan covered. Commit
//! hands the writes to the engine as one conditional batch
//! ([`crate::KvStore::write_batch_if`]): with every other write held off, the
//! engine re-reads those keys and ranges, and applies the batch only if
//! each digest still matches. So a committed transaction read exactly
//! what the store held at the instant its batch applied: every commit is
//! equivalent to running the transaction alone at that instant, and the
//! commits together to running them one after another in commit order
//! (serializable; no write skew, no lost update, no phantom in a scanned
//! range).
//!
//! Invariants: `overlay` holds, for each key written, its newest write
//! (`None` a delete); a range delete drops the overlay's keys inside it
//! and joins `cleared`, so a key in the overlay was written after every
//! cleared range that covers it. `reads` and `scans` describe only what
//! came from the snapshot, never what the overlay answered.
//!
//! When the engine keeps a write sequence and it has not moved since the
//! snapshot, no write came between and the re-reads are skipped.
//!
//! Validation compares contents, not versions: a key rewritten with the
//! value the transaction read is no conflict, since no serial order can
//! tell the two apart. Digests are 128-bit XXH3, a range's the sum of its
//! pairs' (a false match needs two different contents to collide). A read-only transaction commits
//! without validation: a snapshot is one instant of the store.

use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow, RangeBounds};
use std::sync::{Arc, Weak};
use std::time::Duration;

use ferrite_core::{
    CommitView, Error, KeyRange, OwnedKeyRange, Result, ScanVisitor, StoreSnapshot, WriteBatch,
};
use xxhash_rust::xxh3::{xxh3_128, Xxh3};

use crate::catalog::{name_key, Entry, MARKER, RESERVED};
use crate::keyspace::Keyspace;
use crate::region::Region;
use crate::store::Store;

/// The store a transaction writes to: borrowed, or named by a weak
/// reference that does not keep it open (for handles outside Rust's
/// borrows, as a language binding's).
enum StoreRef<'s> {
    Borrowed(&'s Store),
    Weak(Weak<Store>),
}

impl StoreRef<'_> {
    fn with<R>(&self, f: impl FnOnce(&Store) -> Result<R>) -> Result<R> {
        match self {
            StoreRef::Borrowed(s) => f(s),
            StoreRef::Weak(w) => f(&*w.upgrade().ok_or(Error::Closed)?),
        }
    }
}

/// What a read found: a value's digest, or nothing.
type Seen = Option<u128>;

fn seen(value: Option<&[u8]>) -> Seen {
    value.map(xxh3_128)
}

/// The pairs a scan found in a range, as one digest: the sum of each
/// pair's, so a scan down and the validating scan up agree.
#[derive(Default)]
struct RangeDigest {
    sum: u128,
    pairs: u64,
}

impl RangeDigest {
    fn add(&mut self, key: &[u8], value: &[u8]) {
        // Lengths first, so (ab, c) and (a, bc) differ.
        let mut h = Xxh3::new();
        h.update(&(key.len() as u32).to_le_bytes());
        h.update(&(value.len() as u32).to_le_bytes());
        h.update(key);
        h.update(value);
        self.sum = self.sum.wrapping_add(h.digest128());
        self.pairs += 1;
    }

    fn finish(&self) -> (u128, u64) {
        (self.sum, self.pairs)
    }
}

/// A range a transaction scanned, as far as its scan went, and what the
/// snapshot held there.
struct ScanRead {
    range: OwnedKeyRange,
    digest: (u128, u64),
}

fn owned(b: Bound<&[u8]>) -> Bound<Vec<u8>> {
    match b {
        Bound::Included(k) => Bound::Included(k.to_vec()),
        Bound::Excluded(k) => Bound::Excluded(k.to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// A read-write transaction (see the module docs for what it
/// guarantees). Made by [`Store::transaction`]; ends by
/// [`Transaction::commit`], or by being dropped, which discards its
/// writes. Its reads see its own writes.
///
/// What it holds while open: a snapshot (see [`crate::Snapshot`] for its
/// cost per engine), its writes, and a digest per key and range it read.
pub struct Transaction<'s> {
    store: StoreRef<'s>,
    snap: Box<dyn StoreSnapshot>,
    batch: WriteBatch,
    overlay: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    cleared: Vec<(Vec<u8>, Vec<u8>)>,
    reads: BTreeMap<Vec<u8>, Seen>,
    scans: Vec<ScanRead>,
    /// The default key space's place when the transaction began.
    default: Region,
    /// Keyspaces whose catalog record the transaction read (so a drop
    /// before its commit is a conflict).
    keyspaces: Vec<u32>,
    /// The catalog of the store, to tell its keyspaces from another's.
    catalog: Weak<crate::catalog::Catalog>,
}

impl<'s> Transaction<'s> {
    fn begin(store: StoreRef<'s>) -> Result<Self> {
        let (snap, default, catalog) = store.with(|s| {
            // The snapshot first: if the first keyspace is made between
            // the two, the region stops the default space at `FF FF` over
            // a snapshot that holds no keyspace's keys yet (the other
            // order could show them as the default space's).
            let snap = s.as_kv().snapshot()?;
            Ok((snap, s.catalog.default_region(), Arc::downgrade(&s.catalog)))
        })?;
        Ok(Self {
            store,
            snap,
            batch: WriteBatch::new(),
            overlay: BTreeMap::new(),
            cleared: Vec::new(),
            reads: BTreeMap::new(),
            scans: Vec::new(),
            default,
            keyspaces: Vec::new(),
            catalog,
        })
    }

    /// Checks a key of the default key space: once the store has named
    /// keyspaces, none sorts from `0xFF 0xFF` up. Before, a write there
    /// reads the catalog's marker, so a first keyspace made over it
    /// before the commit is a conflict.
    fn default_key(&mut self, key: &[u8], write: bool) -> Result<()> {
        if key < RESERVED {
            return Ok(());
        }
        if !self.default.is_everything() {
            return Err(Error::ReservedKey {
                key: key.escape_ascii().to_string(),
            });
        }
        if write && !self.reads.contains_key(MARKER) {
            let v = self.snap.get(MARKER)?;
            self.reads.insert(MARKER.to_vec(), seen(v.as_deref()));
        }
        Ok(())
    }

    /// Reads and writes in `keyspace` (of this transaction's store) as
    /// part of the transaction. The first use of a keyspace reads its
    /// catalog record, so a drop of it before the commit makes the commit
    /// a conflict. Errors: [`Error::KeyspaceDropped`] when the keyspace is
    /// not in the transaction's snapshot (dropped, or made after it
    /// began: run the transaction again); [`Error::InvalidKeyspaceName`]
    /// for a keyspace of another store.
    pub fn keyspace<'t>(&'t mut self, keyspace: &Keyspace<'_>) -> Result<TxKeyspace<'t, 's>> {
        let entry = keyspace.entry().clone();
        if !std::ptr::eq(
            self.catalog.as_ptr(),
            Arc::as_ptr(&keyspace.store().catalog),
        ) {
            return Err(Error::InvalidKeyspaceName {
                name: entry.name.clone(),
                reason: "it is a keyspace of another store",
            });
        }
        if !self.keyspaces.contains(&entry.id) {
            let record = name_key(&entry.name);
            let v = self.get_raw(&record)?;
            if v.as_deref() != Some(&entry.id.to_le_bytes()[..]) {
                return Err(Error::KeyspaceDropped(entry.name.clone()));
            }
            self.keyspaces.push(entry.id);
        }
        Ok(TxKeyspace { tx: self, entry })
    }

    fn in_cleared(&self, key: &[u8]) -> bool {
        self.cleared
            .iter()
            .any(|(s, e)| s.as_slice() <= key && key < e.as_slice())
    }

    /// The value of `key`: the transaction's own write if it made one,
    /// else the snapshot's.
    pub fn get(&mut self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        let key = key.as_ref();
        self.default_key(key, false)?;
        self.get_raw(key)
    }

    fn get_raw(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if let Some(v) = self.overlay.get(key) {
            return Ok(v.clone());
        }
        if self.in_cleared(key) {
            return Ok(None);
        }
        let v = self.snap.get(key)?;
        self.reads
            .entry(key.to_vec())
            .or_insert_with(|| seen(v.as_deref()));
        Ok(v)
    }

    /// Sets `key` to `value` when the transaction commits.
    pub fn put(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        let (key, value) = (key.as_ref(), value.as_ref());
        self.default_key(key, true)?;
        self.put_raw(key, value)
    }

    fn put_raw(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.batch.put(key, value)?;
        self.overlay.insert(key.to_vec(), Some(value.to_vec()));
        Ok(())
    }

    /// Removes `key` when the transaction commits.
    pub fn delete(&mut self, key: impl AsRef<[u8]>) -> Result<()> {
        let key = key.as_ref();
        self.default_key(key, true)?;
        self.delete_raw(key)
    }

    fn delete_raw(&mut self, key: &[u8]) -> Result<()> {
        self.batch.delete(key)?;
        self.overlay.insert(key.to_vec(), None);
        Ok(())
    }

    /// Removes every key of `start..end` when the transaction commits
    /// (keys it writes later in the transaction stay).
    /// A store with named keyspaces cuts the range at `0xFF 0xFF`.
    pub fn delete_range<K: AsRef<[u8]>>(&mut self, range: std::ops::Range<K>) -> Result<()> {
        let (start, end) = (range.start.as_ref(), range.end.as_ref());
        if end > RESERVED && self.default.is_everything() {
            self.default_key(end, true)?;
        }
        match self.default.delete_range(start, end)? {
            Some((s, e)) => self.delete_range_raw(&s, &e),
            None => Ok(()),
        }
    }

    fn delete_range_raw(&mut self, start: &[u8], end: &[u8]) -> Result<()> {
        self.batch.delete_range(start, end)?;
        let inside: Vec<Vec<u8>> = self
            .overlay
            .range::<[u8], _>((Bound::Included(start), Bound::Excluded(end)))
            .map(|(k, _)| k.clone())
            .collect();
        for k in inside {
            self.overlay.remove(&k);
        }
        self.cleared.push((start.to_vec(), end.to_vec()));
        Ok(())
    }

    /// Visits the pairs of `range` ascending, its own writes over the
    /// snapshot's; return `ControlFlow::Break(())` to stop. The range
    /// counts as read up to where the visit stopped.
    pub fn scan(&mut self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.scan_in_default(range, false, visit)
    }

    /// As [`Transaction::scan`], descending.
    pub fn scan_rev(&mut self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.scan_in_default(range, true, visit)
    }

    fn scan_in_default(
        &mut self,
        range: KeyRange<'_>,
        rev: bool,
        visit: &mut ScanVisitor<'_>,
    ) -> Result<()> {
        if self.default.is_everything() {
            return self.scan_dir(range, rev, visit);
        }
        let r = self.default.range(range);
        self.scan_dir(r.as_range(), rev, visit)
    }

    /// The pairs in `range` (`a..b`, `a..=b`, `a..`, `..b`), ascending.
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(
        &mut self,
        range: R,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.collect(OwnedKeyRange::new(range))
    }

    /// The pairs whose key starts with `prefix`, ascending.
    pub fn prefix(&mut self, prefix: impl AsRef<[u8]>) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.collect(OwnedKeyRange::prefix(prefix.as_ref()))
    }

    fn collect(&mut self, range: OwnedKeyRange) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        collect(&range, |r, v| self.scan(r, v))
    }

    /// Merges the overlay into the snapshot's scan of `range`, in either
    /// direction, and records the snapshot's pairs up to the stop.
    fn scan_dir(
        &mut self,
        range: KeyRange<'_>,
        rev: bool,
        visit: &mut ScanVisitor<'_>,
    ) -> Result<()> {
        if range.is_empty() {
            return Ok(());
        }
        let overlay: Vec<(&[u8], Option<&[u8]>)> = {
            let mut o: Vec<_> = self
                .overlay
                .range::<[u8], _>((range.start, range.end))
                .map(|(k, v)| (k.as_slice(), v.as_deref()))
                .collect();
            if rev {
                o.reverse();
            }
            o
        };
        // Whether `a` comes before `b` in the scan's order.
        let before = |a: &[u8], b: &[u8]| if rev { a > b } else { a < b };
        let cleared = &self.cleared;
        let in_cleared = |k: &[u8]| {
            cleared
                .iter()
                .any(|(s, e)| s.as_slice() <= k && k < e.as_slice())
        };
        let mut next = 0usize;
        let mut digest = RangeDigest::default();
        // The key the visitor stopped at, if it stopped.
        let mut stopped: Option<Vec<u8>> = None;
        self.snap.as_ref().scan_dir(range, rev, &mut |k, v| {
            while let Some(&(ok, ov)) = overlay.get(next) {
                if !before(ok, k) {
                    break;
                }
                next += 1;
                if let Some(ov) = ov {
                    if visit(ok, ov).is_break() {
                        stopped = Some(ok.to_vec());
                        return ControlFlow::Break(());
                    }
                }
            }
            digest.add(k, v);
            let shown = match overlay.get(next) {
                Some(&(ok, ov)) if ok == k => {
                    next += 1;
                    ov
                }
                _ if in_cleared(k) => None,
                _ => Some(v),
            };
            if let Some(value) = shown {
                if visit(k, value).is_break() {
                    stopped = Some(k.to_vec());
                    return ControlFlow::Break(());
                }
            }
            ControlFlow::Continue(())
        })?;
        if stopped.is_none() {
            for &(ok, ov) in &overlay[next..] {
                if let Some(ov) = ov {
                    if visit(ok, ov).is_break() {
                        stopped = Some(ok.to_vec());
                        break;
                    }
                }
            }
        }
        // What was read: the range up to (and with) the key the visit
        // stopped at. Snapshot pairs past it were not added.
        let read = match (stopped, rev) {
            (None, _) => OwnedKeyRange {
                start: owned(range.start),
                end: owned(range.end),
            },
            (Some(k), false) => OwnedKeyRange {
                start: owned(range.start),
                end: Bound::Included(k),
            },
            (Some(k), true) => OwnedKeyRange {
                start: Bound::Included(k),
                end: owned(range.end),
            },
        };
        self.scans.push(ScanRead {
            range: read,
            digest: digest.finish(),
        });
        Ok(())
    }

    /// Whether the transaction has writes to commit.
    pub fn is_read_only(&self) -> bool {
        self.batch.is_empty()
    }

    /// Applies the transaction's writes atomically if nothing it read has
    /// changed since its snapshot; otherwise writes nothing and returns
    /// [`Error::Conflict`] (run it again, or use [`Store::transact`]).
    /// Durable as the store's sync mode makes any write.
    pub fn commit(self) -> Result<()> {
        let Self {
            store,
            snap,
            batch,
            reads,
            scans,
            ..
        } = self;
        // (A keyspace dropped since the transaction used it changed its
        // catalog record, which `reads` holds: the check below sees it.)
        // Every read is done: let the snapshot go before the batch, so the
        // engine need not keep, for it, the versions the batch replaces.
        let read_at = snap.write_sequence();
        drop(snap);
        if batch.is_empty() {
            return Ok(());
        }
        let mut changed: Option<String> = None;
        let applied = store.with(|s| {
            s.as_kv().write_batch_if(&batch, &mut |now| {
                // No write since the snapshot: nothing read can differ.
                if read_at.is_some() && now.write_sequence() == read_at {
                    return Ok(true);
                }
                changed = first_change(now, &reads, &scans)?;
                Ok(changed.is_none())
            })
        })?;
        match (applied, changed) {
            (true, _) => Ok(()),
            (false, Some(what)) => Err(Error::Conflict(what)),
            (false, None) => Err(Error::Conflict("the store".into())),
        }
    }
}

/// The first read of `reads` and `scans` that `now` no longer answers as
/// the snapshot did, described for [`Error::Conflict`].
fn first_change(
    now: &dyn CommitView,
    reads: &BTreeMap<Vec<u8>, Seen>,
    scans: &[ScanRead],
) -> Result<Option<String>> {
    for (key, was) in reads {
        if seen(now.get(key)?.as_deref()) != *was {
            return Ok(Some(format!("key {}", key.escape_ascii())));
        }
    }
    for s in scans {
        let mut digest = RangeDigest::default();
        now.scan(s.range.as_range(), &mut |k, v| {
            digest.add(k, v);
            ControlFlow::Continue(())
        })?;
        if digest.finish() != s.digest {
            return Ok(Some(format!(
                "range {:?}..{:?}",
                s.range.start.as_ref().map(|k| k.escape_ascii().to_string()),
                s.range.end.as_ref().map(|k| k.escape_ascii().to_string())
            )));
        }
    }
    Ok(None)
}

/// Every pair `scan` visits in `range`, in its order.
fn collect(
    range: &OwnedKeyRange,
    scan: impl FnOnce(KeyRange<'_>, &mut ScanVisitor<'_>) -> Result<()>,
) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut out = Vec::new();
    scan(range.as_range(), &mut |k, v| {
        out.push((k.to_vec(), v.to_vec()));
        ControlFlow::Continue(())
    })?;
    Ok(out)
}

/// A snapshot's scan in either direction.
trait ScanDir {
    fn scan_dir(&self, range: KeyRange<'_>, rev: bool, visit: &mut ScanVisitor<'_>) -> Result<()>;
}

impl ScanDir for dyn StoreSnapshot {
    fn scan_dir(&self, range: KeyRange<'_>, rev: bool, visit: &mut ScanVisitor<'_>) -> Result<()> {
        if rev {
            self.scan_rev(range, visit)
        } else {
            self.scan(range, visit)
        }
    }
}

/// A transaction's reads and writes in one named keyspace: made by
/// [`Transaction::keyspace`]; everything it does is part of the
/// transaction, committed with the rest or not at all.
pub struct TxKeyspace<'t, 's> {
    tx: &'t mut Transaction<'s>,
    entry: Arc<Entry>,
}

impl TxKeyspace<'_, '_> {
    fn region(&self) -> &Region {
        &self.entry.region
    }

    /// The value of `key` in the keyspace: the transaction's own write if
    /// it made one, else the snapshot's.
    pub fn get(&mut self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        let k = self.entry.region.key(key.as_ref())?;
        self.tx.get_raw(&k)
    }

    /// Sets `key` to `value` in the keyspace when the transaction commits.
    pub fn put(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        let k = self.entry.region.key(key.as_ref())?;
        self.tx.put_raw(&k, value.as_ref())
    }

    /// Removes `key` from the keyspace when the transaction commits.
    pub fn delete(&mut self, key: impl AsRef<[u8]>) -> Result<()> {
        let k = self.entry.region.key(key.as_ref())?;
        self.tx.delete_raw(&k)
    }

    /// Removes the keyspace's keys in `start..end` when the transaction
    /// commits.
    pub fn delete_range<K: AsRef<[u8]>>(&mut self, range: std::ops::Range<K>) -> Result<()> {
        match self
            .region()
            .delete_range(range.start.as_ref(), range.end.as_ref())?
        {
            Some((s, e)) => self.tx.delete_range_raw(&s, &e),
            None => Ok(()),
        }
    }

    /// Visits the keyspace's pairs of `range` ascending, the
    /// transaction's writes over the snapshot's.
    pub fn scan(&mut self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.scan_dir(range, false, visit)
    }

    /// As [`TxKeyspace::scan`], descending.
    pub fn scan_rev(&mut self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.scan_dir(range, true, visit)
    }

    fn scan_dir(
        &mut self,
        range: KeyRange<'_>,
        rev: bool,
        visit: &mut ScanVisitor<'_>,
    ) -> Result<()> {
        let r = self.entry.region.range(range);
        let n = self.entry.region.prefix_len();
        self.tx
            .scan_dir(r.as_range(), rev, &mut |k, v| visit(&k[n..], v))
    }

    /// The keyspace's pairs in `range`, ascending.
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(
        &mut self,
        range: R,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.collect(OwnedKeyRange::new(range))
    }

    /// The keyspace's pairs whose key starts with `prefix`, ascending.
    pub fn prefix(&mut self, prefix: impl AsRef<[u8]>) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.collect(OwnedKeyRange::prefix(prefix.as_ref()))
    }

    fn collect(&mut self, range: OwnedKeyRange) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        collect(&range, |r, v| self.scan(r, v))
    }
}

/// How [`Store::transact_with`] retries a transaction whose commit
/// conflicts.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    /// Attempts in all, the first included; after the last conflict the
    /// error is returned.
    pub attempts: u32,
    /// The wait after the first conflict; it doubles after each one.
    pub first_backoff: Duration,
    /// The longest wait between attempts.
    pub max_backoff: Duration,
}

impl Default for Retry {
    /// 64 attempts, waits from 10 µs doubling to 10 ms: under contention
    /// the losers spread out rather than collide again at once.
    fn default() -> Self {
        Self {
            attempts: 64,
            first_backoff: Duration::from_micros(10),
            max_backoff: Duration::from_millis(10),
        }
    }
}

impl Store {
    /// Begins a transaction reading the store as it is now.
    pub fn transaction(&self) -> Result<Transaction<'_>> {
        Transaction::begin(StoreRef::Borrowed(self))
    }

    /// As [`Store::transaction`], for a transaction that must outlive a
    /// borrow (as in a language binding): it holds the store by a weak
    /// reference, so it does not keep it open, and its commit after the
    /// last `Arc` went fails with [`Error::Closed`].
    pub fn transaction_shared(self: &Arc<Self>) -> Result<Transaction<'static>> {
        Transaction::begin(StoreRef::Weak(Arc::downgrade(self)))
    }

    /// Runs `body` in a transaction and commits it, running it again on a
    /// fresh snapshot while the commit conflicts ([`Retry::default`]
    /// attempts). `body` may run more than once, so it should change
    /// nothing outside the transaction. An error from `body` discards the
    /// transaction and is returned as it is.
    pub fn transact<T>(&self, body: impl FnMut(&mut Transaction<'_>) -> Result<T>) -> Result<T> {
        self.transact_with(Retry::default(), body)
    }

    /// As [`Store::transact`], with its own retry policy.
    pub fn transact_with<T>(
        &self,
        retry: Retry,
        mut body: impl FnMut(&mut Transaction<'_>) -> Result<T>,
    ) -> Result<T> {
        let mut wait = retry.first_backoff;
        let mut attempt = 1;
        loop {
            let mut tx = self.transaction()?;
            let out = body(&mut tx)?;
            match tx.commit() {
                Ok(()) => return Ok(out),
                Err(Error::Conflict(what)) if attempt < retry.attempts.max(1) => {
                    log::trace!("transaction conflict on {what}; attempt {attempt}");
                    attempt += 1;
                    // Jitter, so two losers do not retry in step.
                    let jitter = wait.mul_f64(0.5 + rand::random::<f64>());
                    std::thread::sleep(jitter.min(retry.max_backoff));
                    wait = (wait * 2).min(retry.max_backoff);
                }
                Err(e) => return Err(e),
            }
        }
    }
}

impl std::fmt::Debug for Transaction<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transaction")
            .field("writes", &self.batch.len())
            .field("keys_read", &self.reads.len())
            .field("ranges_read", &self.scans.len())
            .finish()
    }
}
