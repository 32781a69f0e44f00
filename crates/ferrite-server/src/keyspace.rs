//! The keyspace commands read and write: Redis's sixteen numbered
//! databases over one ferrite store, and the two ways a command reaches
//! it, directly or inside a transaction.
//!
//! Invariants:
//! - a user key `k` of database `d` is stored as `[d] ++ k`, so every
//!   database is one contiguous key range (`FLUSHDB` is one range delete,
//!   `DBSIZE` one scan) and the empty key Redis allows is a valid engine
//!   key; user keys are therefore at most `MAX_KEY_LEN - 1` bytes;
//! - every write takes the store's transaction lock shared, and a command
//!   whose check and writes span several keys (`MSETNX`, `EXEC`) takes it
//!   exclusive, so nothing else writes between its check and its write;
//! - read-modify-write on one key (`INCR`, `APPEND`, `SETNX`, `GETSET`,
//!   `SET ... NX|XX|GET`) loops on the engine's compare-and-swap: atomic
//!   against every other write without any lock of the server's.

use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow};
use std::sync::atomic::{AtomicU64, Ordering};

use ferrite::{Error, KeyRange, Store, WriteBatch, MAX_KEY_LEN};
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::reply::Reply;

/// A range of stored keys.
pub type Span = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// What a scan calls for each pair, until it breaks.
pub type Visit<'a> = dyn FnMut(&[u8], &[u8]) -> ControlFlow<()> + 'a;

/// A read-modify-write's step: the new value (`None`: delete) from the
/// current one, or a reply that ends the command.
pub type Change<'a> = dyn FnMut(Option<&[u8]>) -> Result<Option<Vec<u8>>, Reply> + 'a;

/// A key's value before and after an update.
pub type Updated = (Option<Vec<u8>>, Option<Vec<u8>>);

/// Databases a client may `SELECT`, as in Redis.
pub const DATABASES: u8 = 16;

/// Longest user key: one byte of every stored key names its database.
pub const MAX_USER_KEY: usize = MAX_KEY_LEN - 1;

/// The store with the server's transaction lock.
pub struct Db {
    pub store: Store,
    tx_lock: RwLock<()>,
    /// Writes handed to the store so far: a connection compares it before
    /// and after a pipeline to learn whether a sync must precede the
    /// replies.
    writes: AtomicU64,
}

impl Db {
    pub fn new(store: Store) -> Self {
        Self {
            store,
            tx_lock: RwLock::new(()),
            writes: AtomicU64::new(0),
        }
    }

    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Acquire)
    }

    fn wrote(&self) {
        self.writes.fetch_add(1, Ordering::Release);
    }

    /// For a single write: any number at once.
    pub fn shared(&self) -> RwLockReadGuard<'_, ()> {
        self.tx_lock.read()
    }

    /// For a check-then-write over several keys: alone.
    pub fn exclusive(&self) -> RwLockWriteGuard<'_, ()> {
        self.tx_lock.write()
    }
}

/// Plain `SET key value`s of one pipeline, written as one batch: one
/// engine write (one log record) for many commands. A connection queues
/// them while nothing else comes between, and writes them before it runs
/// any other command and before any reply leaves, so its own later
/// commands and every other client see them exactly as if each had been
/// written alone; a failed write answers each of them with its error.
#[derive(Default)]
pub struct PendingSets {
    batch: WriteBatch,
    count: usize,
    /// Where the first queued `SET`'s reply starts in the output.
    first_reply_at: usize,
}

impl PendingSets {
    /// Queues `key` (already a stored key) = `value`; `reply_at` is where
    /// its reply goes in the output.
    pub fn push(&mut self, key: &[u8], value: &[u8], reply_at: usize) -> Result<(), Reply> {
        self.batch.put(key, value).map_err(|e| engine_error(&e))?;
        if self.count == 0 {
            self.first_reply_at = reply_at;
        }
        self.count += 1;
        Ok(())
    }

    /// Writes what is queued. On failure, the replies from the first
    /// queued `SET` on (all of them `+OK` so far, nothing else came after
    /// them) become the error, once per command.
    pub fn write(&mut self, db: &Db, proto: u8, out: &mut Vec<u8>) {
        if self.count == 0 {
            return;
        }
        let result = {
            let _shared = db.shared();
            db.wrote();
            db.store.write(&self.batch)
        };
        if let Err(e) = result {
            out.truncate(self.first_reply_at);
            let reply = engine_error(&e);
            for _ in 0..self.count {
                reply.encode(proto, out);
            }
        }
        self.batch = WriteBatch::new();
        self.count = 0;
    }
}

/// The stored key of user key `k` in database `db`.
pub fn stored(db: u8, k: &[u8]) -> Result<Vec<u8>, Reply> {
    if k.len() > MAX_USER_KEY {
        return Err(Reply::err(format!(
            "key is too long ({} bytes; this server takes keys up to {MAX_USER_KEY})",
            k.len()
        )));
    }
    let mut out = Vec::with_capacity(k.len() + 1);
    out.push(db);
    out.extend_from_slice(k);
    Ok(out)
}

/// The range of stored keys of database `db` whose user keys start with
/// `prefix`.
pub fn db_range(db: u8, prefix: &[u8]) -> Span {
    let mut start = vec![db];
    start.extend_from_slice(prefix);
    let r = ferrite::OwnedKeyRange::prefix(&start);
    (r.start, r.end)
}

/// An engine error as a reply. A full device says so, so operators and
/// clients can tell it from other failures.
pub fn engine_error(e: &Error) -> Reply {
    if e.is_no_space() {
        return Reply::err(format!(
            "disk is full, writes are refused until space is freed ({e})"
        ));
    }
    match e {
        Error::ValueTooLarge { max, .. } => {
            Reply::err(format!("string exceeds maximum allowed size ({max} bytes)"))
        }
        Error::KeyTooLarge { max, .. } => Reply::err(format!(
            "key is too long (this server takes keys up to {} bytes)",
            max - 1
        )),
        Error::BatchTooLarge { max, .. } => Reply::err(format!(
            "too much in one atomic write (the limit is {max} bytes)"
        )),
        other => Reply::err(format!("storage error: {other}")),
    }
}

/// How a command reads and writes stored keys.
pub trait Access {
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Reply>;
    fn write(&mut self, batch: WriteBatch) -> Result<(), Reply>;
    /// Sets `key` to `new` if its value is `expected`; says whether it did.
    fn cas(
        &mut self,
        key: &[u8],
        expected: Option<&[u8]>,
        new: Option<&[u8]>,
    ) -> Result<bool, Reply>;
    /// Visits stored keys of `range` in order until `visit` breaks.
    fn scan(&mut self, range: Span, visit: &mut Visit<'_>) -> Result<(), Reply>;
    /// Runs `f` with no other writer between its reads and its writes.
    fn alone(
        &mut self,
        f: &mut dyn FnMut(&mut dyn Access) -> Result<Reply, Reply>,
    ) -> Result<Reply, Reply>;

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), Reply> {
        let mut b = WriteBatch::new();
        b.put(key, value).map_err(|e| engine_error(&e))?;
        self.write(b)
    }
}

/// Reads the value of `key`, computes its new value with `f`, and writes
/// it if the key still holds what was read, until it does. `f` sees the
/// current value and answers the new one (`None`: delete) or a reply that
/// ends the command without writing. Returns the values before and after.
pub fn update(a: &mut dyn Access, key: &[u8], f: &mut Change<'_>) -> Result<Updated, Reply> {
    loop {
        let old = a.get(key)?;
        let new = f(old.as_deref())?;
        if a.cas(key, old.as_deref(), new.as_deref())? {
            return Ok((old, new));
        }
    }
}

/// The store itself, for commands outside a transaction.
pub struct Direct<'a>(pub &'a Db);

impl Access for Direct<'_> {
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Reply> {
        self.0.store.get(key).map_err(|e| engine_error(&e))
    }

    fn write(&mut self, batch: WriteBatch) -> Result<(), Reply> {
        let _shared = self.0.shared();
        self.0.wrote();
        self.0.store.write(&batch).map_err(|e| engine_error(&e))
    }

    fn cas(
        &mut self,
        key: &[u8],
        expected: Option<&[u8]>,
        new: Option<&[u8]>,
    ) -> Result<bool, Reply> {
        let _shared = self.0.shared();
        self.0.wrote();
        self.0
            .store
            .compare_and_swap(key, expected, new)
            .map_err(|e| engine_error(&e))
    }

    fn scan(&mut self, range: Span, visit: &mut Visit<'_>) -> Result<(), Reply> {
        let r = KeyRange {
            start: range.0.as_ref().map(Vec::as_slice),
            end: range.1.as_ref().map(Vec::as_slice),
        };
        self.0.store.scan(r, visit).map_err(|e| engine_error(&e))
    }

    fn alone(
        &mut self,
        f: &mut dyn FnMut(&mut dyn Access) -> Result<Reply, Reply>,
    ) -> Result<Reply, Reply> {
        let _alone = self.0.exclusive();
        let mut tx = Overlay::new(self.0);
        let reply = f(&mut tx)?;
        tx.commit()?;
        Ok(reply)
    }
}

/// A transaction: reads see the store (which nobody else writes while
/// the transaction holds the lock exclusive) under the transaction's own
/// writes; the writes reach the store as one atomic batch at the end.
pub struct Overlay<'a> {
    db: &'a Db,
    /// Keys written so far and their new values (`None`: deleted).
    writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// Range deletes so far, in order, before the point writes after them.
    cleared: Vec<Span>,
    batch: WriteBatch,
}

impl<'a> Overlay<'a> {
    /// The caller holds `db.exclusive()`.
    pub fn new(db: &'a Db) -> Self {
        Self {
            db,
            writes: BTreeMap::new(),
            cleared: Vec::new(),
            batch: WriteBatch::new(),
        }
    }

    /// Writes everything at once.
    pub fn commit(self) -> Result<(), Reply> {
        if self.batch.is_empty() {
            return Ok(());
        }
        self.db.wrote();
        self.db
            .store
            .write(&self.batch)
            .map_err(|e| engine_error(&e))
    }

    fn cleared(&self, key: &[u8]) -> bool {
        self.cleared.iter().any(|r| {
            (
                r.0.as_ref().map(Vec::as_slice),
                r.1.as_ref().map(Vec::as_slice),
            )
                .contains_key(key)
        })
    }
}

trait ContainsKey {
    fn contains_key(&self, key: &[u8]) -> bool;
}

impl ContainsKey for (Bound<&[u8]>, Bound<&[u8]>) {
    fn contains_key(&self, key: &[u8]) -> bool {
        KeyRange {
            start: self.0,
            end: self.1,
        }
        .contains(key)
    }
}

impl Access for Overlay<'_> {
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Reply> {
        if let Some(v) = self.writes.get(key) {
            return Ok(v.clone());
        }
        if self.cleared(key) {
            return Ok(None);
        }
        self.db.store.get(key).map_err(|e| engine_error(&e))
    }

    fn write(&mut self, batch: WriteBatch) -> Result<(), Reply> {
        for op in batch.ops() {
            match op {
                ferrite::BatchOp::Put { key, value } => {
                    self.batch.put(key, value).map_err(|e| engine_error(&e))?;
                    self.writes.insert(key.clone(), Some(value.clone()));
                }
                ferrite::BatchOp::Delete { key } => {
                    self.batch.delete(key).map_err(|e| engine_error(&e))?;
                    self.writes.insert(key.clone(), None);
                }
                ferrite::BatchOp::DeleteRange { start, end } => {
                    self.batch
                        .delete_range(start, end)
                        .map_err(|e| engine_error(&e))?;
                    let range = (Bound::Included(start.clone()), Bound::Excluded(end.clone()));
                    self.writes.retain(|k, _| !(k >= start && k < end));
                    self.cleared.push(range);
                }
            }
        }
        Ok(())
    }

    fn cas(
        &mut self,
        key: &[u8],
        expected: Option<&[u8]>,
        new: Option<&[u8]>,
    ) -> Result<bool, Reply> {
        if self.get(key)?.as_deref() != expected {
            return Ok(false);
        }
        let mut b = WriteBatch::new();
        match new {
            Some(v) => b.put(key, v),
            None => b.delete(key),
        }
        .map_err(|e| engine_error(&e))?;
        self.write(b)?;
        Ok(true)
    }

    fn scan(&mut self, range: Span, visit: &mut Visit<'_>) -> Result<(), Reply> {
        // The store's pairs merged with the transaction's writes.
        let mut merged: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let r = KeyRange {
            start: range.0.as_ref().map(Vec::as_slice),
            end: range.1.as_ref().map(Vec::as_slice),
        };
        self.db
            .store
            .scan(r, &mut |k, v| {
                merged.insert(k.to_vec(), v.to_vec());
                ControlFlow::Continue(())
            })
            .map_err(|e| engine_error(&e))?;
        merged.retain(|k, _| !self.cleared(k));
        for (k, v) in self
            .writes
            .range::<Vec<u8>, _>((range.0.as_ref(), range.1.as_ref()))
        {
            match v {
                Some(v) => merged.insert(k.clone(), v.clone()),
                None => merged.remove(k),
            };
        }
        for (k, v) in &merged {
            if visit(k, v).is_break() {
                break;
            }
        }
        Ok(())
    }

    fn alone(
        &mut self,
        f: &mut dyn FnMut(&mut dyn Access) -> Result<Reply, Reply>,
    ) -> Result<Reply, Reply> {
        f(self)
    }
}
