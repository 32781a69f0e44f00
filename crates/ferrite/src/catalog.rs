//! [`Catalog`]: a store's named keyspaces, kept in the store itself, and
//! the gate between their writes and their creation and drop.
//!
//! The byte layout (spec: `docs/format/keyspaces.md`) lives in the engine
//! keys that start `0xFF 0xFF`: a marker `FF FF 00 00` (a magic text and
//! the next keyspace id), one record `FF FF 00 01 name` → id per live
//! keyspace, one `FF FF 00 02 id` per dropped keyspace whose keys are
//! still being removed, and each keyspace's pairs under
//! `FF FF 01 id` (id a big-endian u32). A store without the marker has
//! no named keyspaces and its default key space is every key, so stores
//! made before keyspaces existed open and read as they did.
//!
//! Invariants:
//! - `active` is set once the marker is durable and never cleared; while
//!   it is set the default key space holds no key at or above `FF FF`
//!   (the first keyspace is created only over an empty region, and the
//!   default region refuses such keys after);
//! - ids are never reused, so a dropped keyspace's keys cannot show in a
//!   keyspace created later, whatever is left of them;
//! - a write into a named keyspace holds the gate shared and checks its
//!   entry is live; a drop holds it exclusive while its batch applies and
//!   marks the entry, so no write lands in a keyspace after its drop.

use std::collections::{BTreeMap, HashMap};
use std::ops::{Bound, ControlFlow};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ferrite_core::{BatchOp, Error, KeyRange, KvStore, OwnedKeyRange, Result, WriteBatch};
use parking_lot::{Mutex, RwLock, RwLockReadGuard};

use crate::region::Region;

/// The first engine key of the region the catalog and named keyspaces use.
pub(crate) const RESERVED: &[u8] = &[0xFF, 0xFF];
pub(crate) const MARKER: &[u8] = &[0xFF, 0xFF, 0, 0];
const NAME: &[u8] = &[0xFF, 0xFF, 0, 1];
const DROPPED: &[u8] = &[0xFF, 0xFF, 0, 2];
const DATA: &[u8] = &[0xFF, 0xFF, 1];
const MAGIC: &[u8] = b"ferrite keyspaces 1";
/// Longest keyspace name, in bytes.
pub const MAX_KEYSPACE_NAME: usize = 255;

/// The engine key of keyspace `name`'s catalog record.
pub(crate) fn name_key(name: &str) -> Vec<u8> {
    [NAME, name.as_bytes()].concat()
}

fn dropped_key(id: u32) -> Vec<u8> {
    [DROPPED, &id.to_be_bytes()].concat()
}

/// The prefix of keyspace `id`'s pairs.
pub(crate) fn data_prefix(id: u32) -> Vec<u8> {
    [DATA, &id.to_be_bytes()].concat()
}

/// The engine keys keyspace `id`'s pairs may have.
pub(crate) fn data_range(id: u32) -> (Vec<u8>, Vec<u8>) {
    let lo = data_prefix(id);
    let hi = match OwnedKeyRange::prefix(&lo).end {
        Bound::Excluded(e) => e,
        // A data prefix ends below 0xFF bytes: its range is bounded.
        _ => unreachable!("a data prefix has a bounded range"),
    };
    (lo, hi)
}

fn marker_value(next_id: u32) -> Vec<u8> {
    [MAGIC, &next_id.to_le_bytes()].concat()
}

/// The next id a marker holds, or `None` when the value is not a marker
/// (a key a user wrote there before keyspaces existed).
fn parse_marker(v: &[u8]) -> Option<u32> {
    let id = v.strip_prefix(MAGIC)?;
    Some(u32::from_le_bytes(id.try_into().ok()?))
}

fn check_name(name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        "it is empty"
    } else if name.len() > MAX_KEYSPACE_NAME {
        "it is longer than 255 bytes"
    } else {
        return Ok(());
    };
    Err(Error::InvalidKeyspaceName {
        name: name.into(),
        reason,
    })
}

/// One live (or just dropped) keyspace.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) name: String,
    pub(crate) id: u32,
    pub(crate) region: Region,
    dropped: AtomicBool,
}

impl Entry {
    fn new(name: String, id: u32) -> Self {
        Self {
            name,
            id,
            region: Region::prefixed(data_prefix(id)),
            dropped: AtomicBool::new(false),
        }
    }

    pub(crate) fn is_dropped(&self) -> bool {
        self.dropped.load(Ordering::Acquire)
    }
}

#[derive(Default)]
struct State {
    by_name: BTreeMap<String, Arc<Entry>>,
    by_id: HashMap<u32, Arc<Entry>>,
    next_id: u32,
}

/// The keyspaces of one open store.
pub(crate) struct Catalog {
    active: AtomicBool,
    gate: RwLock<()>,
    state: Mutex<State>,
}

/// What loading a catalog found besides the keyspaces.
pub(crate) struct Loaded {
    pub(crate) catalog: Catalog,
    /// Dropped keyspaces whose keys are still to be removed.
    pub(crate) dropped: Vec<u32>,
}

impl Catalog {
    /// Reads the catalog of the store `kv`.
    pub(crate) fn load(kv: &dyn KvStore) -> Result<Loaded> {
        let mut state = State::default();
        let mut dropped = Vec::new();
        let next = kv.get(MARKER)?.as_deref().and_then(parse_marker);
        if let Some(next_id) = next {
            state.next_id = next_id;
            let mut bad: Option<Error> = None;
            let names = OwnedKeyRange::prefix(NAME);
            kv.scan(names.as_range(), &mut |k, v| {
                let name = std::str::from_utf8(&k[NAME.len()..]);
                let id = <[u8; 4]>::try_from(v).map(u32::from_le_bytes);
                match (name, id) {
                    (Ok(name), Ok(id)) if id < next_id => {
                        let e = Arc::new(Entry::new(name.to_string(), id));
                        state.by_id.insert(id, e.clone());
                        state.by_name.insert(name.to_string(), e);
                        ControlFlow::Continue(())
                    }
                    _ => {
                        bad = Some(Error::corruption(
                            "keyspace catalog",
                            format!("record {} holds {} bytes", k.escape_ascii(), v.len()),
                        ));
                        ControlFlow::Break(())
                    }
                }
            })?;
            let gone = OwnedKeyRange::prefix(DROPPED);
            kv.scan(gone.as_range(), &mut |k, _| {
                match <[u8; 4]>::try_from(&k[DROPPED.len()..]) {
                    Ok(id) => dropped.push(u32::from_be_bytes(id)),
                    Err(_) => {
                        bad = Some(Error::corruption(
                            "keyspace catalog",
                            format!("dropped record {}", k.escape_ascii()),
                        ));
                        return ControlFlow::Break(());
                    }
                }
                ControlFlow::Continue(())
            })?;
            if let Some(e) = bad {
                return Err(e);
            }
        }
        Ok(Loaded {
            catalog: Catalog {
                active: AtomicBool::new(next.is_some()),
                gate: RwLock::new(()),
                state: Mutex::new(state),
            },
            dropped,
        })
    }

    /// Whether the store has (or had) named keyspaces.
    pub(crate) fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    /// Where the default key space's keys are.
    pub(crate) fn default_region(&self) -> Region {
        if self.is_active() {
            Region::below(RESERVED)
        } else {
            Region::everything()
        }
    }

    /// The live keyspaces' names, ascending.
    pub(crate) fn names(&self) -> Vec<String> {
        self.state.lock().by_name.keys().cloned().collect()
    }

    /// The live keyspace `name`, if there is one.
    pub(crate) fn find(&self, name: &str) -> Option<Arc<Entry>> {
        self.state.lock().by_name.get(name).cloned()
    }

    /// Keyspace `name`, created (durably, in one batch) if it is new.
    /// Errors besides the engine's: [`Error::InvalidKeyspaceName`], and
    /// [`Error::ReservedKey`] for the first keyspace of a store whose
    /// default key space already holds keys starting `FF FF`.
    pub(crate) fn open(&self, kv: &dyn KvStore, name: &str) -> Result<Arc<Entry>> {
        check_name(name)?;
        if let Some(e) = self.find(name) {
            return Ok(e);
        }
        let _gate = self.gate.write();
        let mut state = self.state.lock();
        if let Some(e) = state.by_name.get(name) {
            return Ok(e.clone());
        }
        let id = state.next_id.max(1);
        let next = id
            .checked_add(1)
            .ok_or_else(|| Error::InvalidKeyspaceName {
                name: name.into(),
                reason: "the store has used every keyspace id",
            })?;
        let mut batch = WriteBatch::new();
        batch.put(MARKER, &marker_value(next))?;
        batch.put(&name_key(name), &id.to_le_bytes())?;
        if self.is_active() {
            kv.write_batch(&batch)?;
        } else {
            // The first keyspace: only over a region no key of the
            // default space has reached, checked with writes held off.
            let mut found: Option<Vec<u8>> = None;
            let applied = kv.write_batch_if(&batch, &mut |now| {
                found = None;
                let region = KeyRange {
                    start: Bound::Included(RESERVED),
                    end: Bound::Unbounded,
                };
                now.scan(region, &mut |k, _| {
                    found = Some(k.to_vec());
                    ControlFlow::Break(())
                })?;
                Ok(found.is_none())
            })?;
            if !applied {
                return Err(Error::ReservedKey {
                    key: found.unwrap_or_default().escape_ascii().to_string(),
                });
            }
            self.active.store(true, Ordering::Release);
        }
        state.next_id = next;
        let e = Arc::new(Entry::new(name.to_string(), id));
        state.by_id.insert(id, e.clone());
        state.by_name.insert(name.to_string(), e.clone());
        Ok(e)
    }

    /// Drops keyspace `name` in one small batch, whatever its size: its
    /// record goes and a dropped record names its id, whose keys the
    /// reclaimer then removes. Returns the id, or `None` when there was
    /// no such keyspace.
    pub(crate) fn drop_keyspace(&self, kv: &dyn KvStore, name: &str) -> Result<Option<u32>> {
        let _gate = self.gate.write();
        let mut state = self.state.lock();
        let Some(e) = state.by_name.get(name).cloned() else {
            return Ok(None);
        };
        let mut batch = WriteBatch::new();
        batch.delete(&name_key(name))?;
        batch.put(&dropped_key(e.id), b"")?;
        kv.write_batch(&batch)?;
        e.dropped.store(true, Ordering::Release);
        state.by_name.remove(name);
        state.by_id.remove(&e.id);
        Ok(Some(e.id))
    }

    /// Forgets dropped keyspace `id` once its keys are gone.
    pub(crate) fn reclaimed(&self, kv: &dyn KvStore, id: u32) -> Result<()> {
        kv.delete(&dropped_key(id))
    }

    /// Holds off the first keyspace's creation (and drops) while a write
    /// that may reach the reserved region applies.
    pub(crate) fn hold(&self) -> RwLockReadGuard<'_, ()> {
        self.gate.read()
    }

    /// Holds off drops while a write into `entry` applies; fails when the
    /// keyspace is already dropped.
    pub(crate) fn enter(&self, entry: &Entry) -> Result<RwLockReadGuard<'_, ()>> {
        let gate = self.gate.read();
        if entry.is_dropped() {
            return Err(Error::KeyspaceDropped(entry.name.clone()));
        }
        Ok(gate)
    }

    /// Checks a batch given to the store as a whole: keys at or above
    /// `FF FF` must be a live keyspace's (written through
    /// [`crate::KeyspaceBatch`]); a default-space range delete that
    /// reaches them is cut at `FF FF`. Returns the batch to apply (a cut
    /// copy when one was cut) and, when the batch writes in the reserved
    /// region, the gate to hold while it applies.
    pub(crate) fn admit<'b>(
        &self,
        batch: &'b WriteBatch,
    ) -> Result<(
        std::borrow::Cow<'b, WriteBatch>,
        Option<RwLockReadGuard<'_, ()>>,
    )> {
        let reaches = |op: &BatchOp| op.keys().any(|k| k >= RESERVED);
        if !batch.ops().iter().any(reaches) {
            return Ok((std::borrow::Cow::Borrowed(batch), None));
        }
        let gate = self.gate.read();
        if !self.is_active() {
            // Plain keys of a store without keyspaces; the gate keeps a
            // first keyspace from being made under them.
            return Ok((std::borrow::Cow::Borrowed(batch), Some(gate)));
        }
        let state = self.state.lock();
        let id_of = |k: &[u8]| -> Option<u32> {
            let id = k.strip_prefix(DATA)?.get(..4)?;
            Some(u32::from_be_bytes(id.try_into().ok()?))
        };
        let live = |k: &[u8]| id_of(k).filter(|id| state.by_id.contains_key(id));
        // A keyspace's key whose keyspace is gone, or any other key of
        // the reserved region.
        let refuse = |k: &[u8]| match id_of(k) {
            Some(id) if id < state.next_id => Error::KeyspaceDropped(format!("with id {id}")),
            _ => Error::ReservedKey {
                key: k.escape_ascii().to_string(),
            },
        };
        let mut cut: Option<WriteBatch> = None;
        for (i, op) in batch.ops().iter().enumerate() {
            let mut replaced: Option<BatchOp> = None;
            match op {
                BatchOp::Put { key, .. } | BatchOp::Delete { key } => {
                    if key.as_slice() >= RESERVED && live(key).is_none() {
                        return Err(refuse(key));
                    }
                }
                BatchOp::DeleteRange { start, end } => {
                    if start.as_slice() < RESERVED {
                        if end.as_slice() > RESERVED {
                            replaced = Some(BatchOp::DeleteRange {
                                start: start.clone(),
                                end: RESERVED.to_vec(),
                            });
                        }
                    } else {
                        // Inside one live keyspace's keys, or refused.
                        match live(start) {
                            Some(id) if end.as_slice() <= data_range(id).1.as_slice() => {}
                            _ => return Err(refuse(start)),
                        }
                    }
                }
            }
            if replaced.is_some() && cut.is_none() {
                let mut c = WriteBatch::new();
                for earlier in &batch.ops()[..i] {
                    push(&mut c, earlier)?;
                }
                cut = Some(c);
            }
            if let Some(c) = cut.as_mut() {
                push(c, replaced.as_ref().unwrap_or(op))?;
            }
        }
        drop(state);
        Ok((
            cut.map_or(std::borrow::Cow::Borrowed(batch), std::borrow::Cow::Owned),
            Some(gate),
        ))
    }
}

fn push(batch: &mut WriteBatch, op: &BatchOp) -> Result<()> {
    match op {
        BatchOp::Put { key, value } => batch.put(key, value)?,
        BatchOp::Delete { key } => batch.delete(key)?,
        BatchOp::DeleteRange { start, end } => batch.delete_range(start, end)?,
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_round_trip_and_user_values_are_not_markers() {
        assert_eq!(parse_marker(&marker_value(7)), Some(7));
        assert_eq!(parse_marker(b"a user's value"), None);
        assert_eq!(parse_marker(&[MAGIC, b"12345"].concat()), None);
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("users").is_ok());
        assert!(check_name(&"n".repeat(255)).is_ok());
        assert!(matches!(
            check_name(""),
            Err(Error::InvalidKeyspaceName { .. })
        ));
        assert!(matches!(
            check_name(&"n".repeat(256)),
            Err(Error::InvalidKeyspaceName { .. })
        ));
    }

    #[test]
    fn every_catalog_key_lies_in_the_reserved_region_in_its_own_part() {
        for k in [
            MARKER.to_vec(),
            name_key("x"),
            dropped_key(3),
            data_prefix(u32::MAX - 1),
        ] {
            assert!(k.as_slice() >= RESERVED);
        }
        assert!(name_key(&"\u{10ffff}".repeat(60)) < dropped_key(0));
        assert!(dropped_key(u32::MAX) < data_prefix(0));
        let (lo, hi) = data_range(5);
        assert!(lo < hi && hi == data_prefix(6));
        let (_, top) = data_range(u32::MAX);
        assert_eq!(top, vec![0xFF, 0xFF, 2]);
    }
}
