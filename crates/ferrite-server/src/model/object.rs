//! Keys as commands see them: looking one up ([`Found`]: its record,
//! live or expired) and replacing what it holds ([`Tx::set`]), with
//! everything a change of a key's metadata implies.
//!
//! Invariants kept by [`Tx::set`], the only writer of metadata records:
//! - a collection whose record stops naming its version (overwritten,
//!   deleted, expired, turned into another type) leaves a dead-collection
//!   record in the same batch, so the sweeper finds its elements; an
//!   empty one leaves none (its elements were removed one by one);
//! - a key with an expiry has an expiry-index record at that time (older
//!   index records of the key may remain: the expiry cycle checks each
//!   against the metadata before acting on it);
//! - the per-slot key and volatile-key counts follow every change;
//! - an expired key is never live: [`Found::live`] checks the
//!   transaction's clock, so no command sees it, whether or not the
//!   expiry cycle has removed it yet.

use std::borrow::Cow;

use super::layout;
use super::meta::{Body, Coll, Kind, Meta};
use super::tx::Tx;
use super::ModelError;

/// A key, as a transaction found it.
#[derive(Debug, Clone)]
pub struct Found {
    pub db: u8,
    pub slot: u8,
    pub key: Vec<u8>,
    mkey: Vec<u8>,
    /// The record as stored, expired or not.
    stored: Option<Meta>,
    now: u64,
}

impl Found {
    /// What the key holds, unless absent or expired.
    pub fn live(&self) -> Option<&Meta> {
        self.stored.as_ref().filter(|m| !m.expired(self.now))
    }

    pub fn exists(&self) -> bool {
        self.live().is_some()
    }

    /// Whether a record is stored but expired (a stale key).
    pub fn stale(&self) -> bool {
        self.stored.as_ref().is_some_and(|m| m.expired(self.now))
    }

    /// What the key holds if it is of `kind`; `WrongType` if it holds
    /// another.
    pub fn typed(&self, kind: Kind) -> Result<Option<&Meta>, ModelError> {
        match self.live() {
            Some(m) if m.kind() != kind => Err(ModelError::WrongType),
            other => Ok(other),
        }
    }

    /// The string value, if the key holds a string (an integer string's
    /// decimal text).
    pub fn string(&self) -> Result<Option<Cow<'_, [u8]>>, ModelError> {
        Ok(self.typed(Kind::String)?.and_then(|m| match &m.body {
            Body::String(v) => Some(Cow::Borrowed(v.as_slice())),
            Body::Int(n) => Some(Cow::Owned(n.to_string().into_bytes())),
            Body::Coll(_) | Body::PackedHash(_) => None,
        }))
    }

    /// The collection header, if the key holds a collection of `kind`.
    pub fn coll(&self, kind: Kind) -> Result<Option<Coll>, ModelError> {
        Ok(self.typed(kind)?.and_then(|m| m.coll().copied()))
    }

    /// The stored record's expiry, live or not.
    pub fn expire_at(&self) -> Option<u64> {
        self.stored.as_ref().and_then(|m| m.expire_at)
    }

    /// Milliseconds left to live: `None` without an expiry.
    pub fn ttl_ms(&self) -> Option<i64> {
        self.live()
            .and_then(|m| m.expire_at)
            .map(|at| at.saturating_sub(self.now) as i64)
    }
}

impl Tx<'_> {
    /// Looks up `key` of database `db`.
    pub fn lookup(&self, db: u8, key: &[u8]) -> Result<Found, ModelError> {
        let slot = self.slot(db);
        let mkey = layout::meta_key(slot, key)?;
        let stored = match self.get(&mkey)? {
            Some(b) => Some(Meta::decode(&b)?),
            None => None,
        };
        if stored.as_ref().is_some_and(|m| m.expired(self.now)) {
            self.saw_stale(db, key);
        }
        Ok(Found {
            db,
            slot,
            key: key.to_vec(),
            mkey,
            stored,
            now: self.now,
        })
    }

    /// An empty collection of `kind` with a fresh version, no expiry.
    pub fn new_coll(&mut self, kind: Kind) -> Result<Meta, ModelError> {
        let version = self.new_version()?;
        Ok(Meta {
            expire_at: None,
            body: Body::Coll(Coll {
                kind,
                version,
                size: 0,
                head: 1 << 63,
                packed: false,
            }),
        })
    }

    /// Replaces what `f`'s key holds with `new` (`None` or an empty
    /// collection: the key is deleted), and updates `f` to match. A record
    /// whose time has already passed is written as it is, stale, as Redis
    /// keeps such a key until it expires it (`SET ... PXAT` of a past
    /// time); the expiry cycle removes it. See the module documentation
    /// for what comes with a change.
    pub fn set(&mut self, f: &mut Found, new: Option<Meta>) -> Result<(), ModelError> {
        let new = new.filter(|m| !m.is_empty_collection());
        let old = f.stored.take();
        if let Some(o) = &old {
            if o.expired(self.now) {
                self.count_expired();
                self.notify('x', "expired", f.db, &f.key);
            }
            if let Some(c) = o.coll() {
                if c.size > 0 && new.as_ref().and_then(Meta::version) != Some(c.version) {
                    self.put(layout::trash(f.slot, c.version), Vec::new())?;
                }
            }
        }
        // Redis's `new` event: a key added where none was live.
        if new.is_some() && old.as_ref().is_none_or(|o| o.expired(self.now)) {
            self.notify('n', "new", f.db, &f.key);
        }
        let had = |m: &Option<Meta>| m.is_some() as i64;
        let volatile = |m: &Option<Meta>| m.as_ref().is_some_and(|m| m.expire_at.is_some()) as i64;
        self.count_key(f.slot, had(&new) - had(&old));
        self.count_volatile(f.slot, volatile(&new) - volatile(&old));
        if let Some(at) = new.as_ref().and_then(|m| m.expire_at) {
            if old.as_ref().and_then(|m| m.expire_at) != Some(at) {
                let record = layout::expiry(at, f.slot, &f.key);
                self.keyspace().expiry_resume().lower_to(&record);
                self.put(record, Vec::new())?;
            }
        }
        match &new {
            Some(m) if old.as_ref() != Some(m) => self.put(f.mkey.clone(), m.encode())?,
            Some(_) => {}
            None if old.is_some() => self.delete(f.mkey.clone())?,
            None => {}
        }
        self.touch(f.db, &f.key, new.is_some());
        if let Some(c) = new.as_ref().and_then(Meta::coll) {
            let before = old
                .as_ref()
                .filter(|o| !o.expired(self.now))
                .and_then(Meta::coll)
                .filter(|o| o.version == c.version)
                .map_or(0, |o| o.size);
            if Tx::blocks_on(c.kind) && c.size > before {
                self.mark_ready(f.db, &f.key);
            }
        }
        f.stored = new;
        Ok(())
    }

    /// Records that `f`'s elements changed without its metadata changing
    /// (a hash field overwritten): watchers see a change.
    pub fn changed(&mut self, f: &Found) {
        self.touch(f.db, &f.key, f.exists());
    }

    /// Deletes `f`'s metadata record without giving its elements to the
    /// sweeper: another record (a rename's destination) now names them.
    pub fn detach(&mut self, f: &mut Found) -> Result<(), ModelError> {
        let Some(old) = f.stored.take() else {
            return Ok(());
        };
        self.count_key(f.slot, -1);
        self.count_volatile(f.slot, -(old.expire_at.is_some() as i64));
        self.delete(f.mkey.clone())?;
        self.touch(f.db, &f.key, false);
        Ok(())
    }

    /// Copies every element record of collection `from` (in `from_slot`)
    /// to collection `to_version` in `to_slot`.
    pub fn copy_elements(
        &mut self,
        from_slot: u8,
        from: &Coll,
        to_slot: u8,
        to_version: u64,
    ) -> Result<(), ModelError> {
        let (start, end) = layout::collection(from_slot, from.version);
        let mut records = Vec::with_capacity(from.size.min(1 << 20) as usize);
        self.scan(&start, Some(&end), false, &mut |k, v| {
            records.push((k[start.len()..].to_vec(), v.to_vec()));
            std::ops::ControlFlow::Continue(())
        })?;
        let prefix = layout::collection(to_slot, to_version).0;
        for (rest, v) in records {
            let mut k = prefix.clone();
            k.extend_from_slice(&rest);
            self.put(k, v)?;
        }
        Ok(())
    }

    /// Deletes every key of database `db` (two range deletes and one for
    /// its dead collections, whatever it holds). An empty database writes
    /// nothing: the sweeper removes what dead collections it still has,
    /// and range tombstones cost an LSM-tree's reads until compacted.
    pub fn clear_db(&mut self, db: u8) -> Result<(), ModelError> {
        if self.db_size(db).0 == 0 {
            return Ok(());
        }
        let slot = self.slot(db);
        let (ms, me) = layout::meta_span(slot, b"");
        self.delete_range(ms, me.unwrap_or_else(|| vec![slot + 1]))?;
        let (es, ee) = layout::slot_elements(slot);
        self.delete_range(es, ee)?;
        let (ts, te) = layout::slot_trash(slot);
        self.delete_range(ts, te)?;
        let (keys, volatile) = self.db_size(db);
        self.count_key(slot, -(keys as i64));
        self.count_volatile(slot, -(volatile as i64));
        Ok(())
    }

    /// Visits the live keys of `db` from `from` (a user key, included)
    /// with their metadata, in key order, until `visit` breaks; `prefix`
    /// bounds the scan to keys starting with it.
    pub fn scan_keys(
        &self,
        db: u8,
        prefix: &[u8],
        from: Option<&[u8]>,
        visit: &mut dyn FnMut(&[u8], &Meta) -> std::ops::ControlFlow<()>,
    ) -> Result<(), ModelError> {
        let slot = self.slot(db);
        let (start, end) = layout::meta_span(slot, prefix);
        let start = match from {
            Some(k) => {
                let mut s = vec![slot];
                s.extend_from_slice(k);
                s.max(start)
            }
            None => start,
        };
        let end = end.unwrap_or_else(|| vec![slot + 1]);
        let now = self.now;
        let mut bad = None;
        self.scan(
            &start,
            Some(&end),
            false,
            &mut |k, v| match Meta::decode(v) {
                Ok(m) if m.expired(now) => std::ops::ControlFlow::Continue(()),
                Ok(m) => visit(&k[1..], &m),
                Err(e) => {
                    bad = Some(e);
                    std::ops::ControlFlow::Break(())
                }
            },
        )?;
        bad.map_or(Ok(()), Err)
    }

    /// Deletes `f`'s key if it is live; says whether it was.
    pub fn remove(&mut self, f: &mut Found) -> Result<bool, ModelError> {
        let was = f.exists();
        if f.stored.is_some() {
            self.set(f, None)?;
        }
        Ok(was)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::testing::keyspace;

    #[test]
    fn overwriting_a_collection_leaves_it_for_the_sweeper_and_counts_keys() {
        let ks = keyspace();
        let mut tx = ks.write();
        let mut f = tx.lookup(0, b"h").unwrap();
        let mut m = tx.new_coll(Kind::Hash).unwrap();
        let v = m.version().unwrap();
        tx.put(
            layout::field(f.slot, v, Kind::Hash, b"a").unwrap(),
            b"1".to_vec(),
        )
        .unwrap();
        m.coll_mut().unwrap().size = 1;
        tx.set(&mut f, Some(m)).unwrap();
        assert_eq!(tx.db_size(0), (1, 0));
        tx.set(&mut f, Some(Meta::string(b"x".to_vec()))).unwrap();
        assert_eq!(tx.get(&layout::trash(f.slot, v)).unwrap(), Some(vec![]));
        assert_eq!(f.string().unwrap().as_deref(), Some(&b"x"[..]));
        assert!(matches!(f.typed(Kind::Hash), Err(ModelError::WrongType)));
        tx.commit().unwrap();
        assert_eq!(ks.db_sizes()[0], (1, 0));
    }

    #[test]
    fn an_expired_key_is_not_live_and_an_expiry_is_indexed() {
        let ks = keyspace();
        let mut tx = ks.write();
        let mut f = tx.lookup(2, b"k").unwrap();
        let mut m = Meta::string(b"v".to_vec());
        m.expire_at = Some(tx.now + 1000);
        tx.set(&mut f, Some(m)).unwrap();
        let at = tx.now + 1000;
        assert_eq!(tx.db_size(2), (1, 1));
        assert!(tx.get(&layout::expiry(at, f.slot, b"k")).unwrap().is_some());
        tx.commit().unwrap();
        let mut tx = ks.write();
        tx.now += 2000;
        let mut f = tx.lookup(2, b"k").unwrap();
        assert!(f.live().is_none() && f.stale());
        // A write over a stale key counts it expired.
        tx.set(&mut f, Some(Meta::string(b"w".to_vec()))).unwrap();
        assert_eq!(tx.db_size(2), (1, 0));
        tx.commit().unwrap();
        assert_eq!(ks.stats().counts().expired_keys, 1);
    }
}
