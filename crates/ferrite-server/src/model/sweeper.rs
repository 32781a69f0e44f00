//! The sweeper: removes the elements of dead collections (overwritten,
//! deleted, expired) in passes of bounded work, so dropping a collection
//! of any size costs its writer one metadata write.
//!
//! It writes without the keyspace lock: a dead collection's version is
//! named by no metadata record and never reused, so no command reads or
//! writes its elements, and what the sweeper deletes no one sees. Its
//! writes are plain deletes, safe to repeat after a crash.
//!
//! Invariants: a dead-collection record goes only in the batch that
//! deletes the last of its elements; a pass removes at most its budget
//! of elements (point deletes for a small collection, one range delete
//! for each part of a large one).

use std::ops::{Bound, ControlFlow};

use ferrite::{KeyRange, WriteBatch};

use super::keyspace::Keyspace;
use super::layout;
use super::ModelError;

/// Dead collections one pass looks at, at most.
const COLLECTIONS_PER_PASS: usize = 256;

/// A dead collection of at most this many elements goes by point
/// deletes, a larger one by one range delete. Range tombstones cost an
/// LSM-tree's every read until compaction drops them, where a point
/// delete costs only reads of its key: a workload that drops many small
/// collections (expiring session hashes) must not pile them up.
const POINT_DELETES_UP_TO: u64 = 64;

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SweepPass {
    pub elements: u64,
    /// Dead collections wholly removed.
    pub collections: u64,
    /// Dead collections left (at most what one pass looks at, plus one).
    pub backlog: u64,
}

fn range<'a>(start: &'a [u8], end: &'a [u8]) -> KeyRange<'a> {
    KeyRange {
        start: Bound::Included(start),
        end: Bound::Excluded(end),
    }
}

/// Removes up to `budget` elements of dead collections.
pub fn pass(ks: &Keyspace, budget: u64) -> Result<SweepPass, ModelError> {
    let store = ks.store();
    let (first, te) = layout::all_trash();
    // Resume after the records the last pass removed (their traces lie
    // behind); a pass that finds nothing from there starts over next time.
    let resume = ks.trash_resume().get();
    let ts = resume.clone().filter(|r| *r > first).unwrap_or(first);
    let mut dead = Vec::new();
    store.scan(range(&ts, &te), &mut |k, _| {
        dead.push(k.to_vec());
        if dead.len() > COLLECTIONS_PER_PASS {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })?;
    if dead.is_empty() && resume.is_some() {
        ks.trash_resume().set(None);
    }
    let mut out = SweepPass {
        backlog: dead.len() as u64,
        ..SweepPass::default()
    };
    for tk in dead.iter().take(COLLECTIONS_PER_PASS) {
        let left = budget.saturating_sub(out.elements);
        if left == 0 {
            break;
        }
        let Some((slot, version)) = layout::decode_trash(tk) else {
            return Err(ModelError::Corrupt(
                "a dead-collection key is malformed".into(),
            ));
        };
        let (s, e) = layout::collection(slot, version);
        let mut n = 0u64;
        let mut stop: Option<Vec<u8>> = None;
        let mut few: Vec<Vec<u8>> = Vec::new();
        store.scan(range(&s, &e), &mut |k, _| {
            if n == left {
                stop = Some(k.to_vec());
                return ControlFlow::Break(());
            }
            if n < POINT_DELETES_UP_TO {
                few.push(k.to_vec());
            }
            n += 1;
            ControlFlow::Continue(())
        })?;
        let mut batch = WriteBatch::new();
        match &stop {
            Some(at) => {
                batch.delete_range(&s, at)?;
            }
            None => {
                if n > POINT_DELETES_UP_TO {
                    batch.delete_range(&s, &e)?;
                } else {
                    for k in &few {
                        batch.delete(k)?;
                    }
                }
                batch.delete(tk)?;
                out.collections += 1;
                out.backlog = out.backlog.saturating_sub(1);
            }
        }
        store.write(&batch)?;
        if stop.is_none() {
            ks.trash_resume().set(Some(tk.clone()));
        }
        out.elements += n;
    }
    ks.stats()
        .count_sweep(out.elements, out.collections, out.backlog);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::meta::{Kind, Meta};
    use crate::model::testing::keyspace;

    /// Element records of collection `version` (slot 0) still stored.
    fn elements_left(ks: &Keyspace, version: u64) -> usize {
        let (s, e) = layout::collection(0, version);
        let mut left = 0;
        ks.store()
            .scan(range(&s, &e), &mut |_, _| {
                left += 1;
                ControlFlow::Continue(())
            })
            .unwrap();
        left
    }

    #[test]
    fn a_deleted_collection_is_swept_in_bounded_passes() {
        let ks = keyspace();
        let mut tx = ks.write();
        let mut f = tx.lookup(0, b"big").unwrap();
        let mut m = tx.new_coll(Kind::Set).unwrap();
        let c = *m.coll().unwrap();
        for i in 0..25u32 {
            tx.put_field(f.slot, &c, &i.to_be_bytes(), vec![]).unwrap();
        }
        m.coll_mut().unwrap().size = 25;
        tx.set(&mut f, Some(m)).unwrap();
        tx.commit().unwrap();
        let mut tx = ks.write();
        let mut f = tx.lookup(0, b"big").unwrap();
        tx.set(&mut f, Some(Meta::string(b"now a string".to_vec())))
            .unwrap();
        tx.commit().unwrap();
        let p = pass(&ks, 10).unwrap();
        assert_eq!((p.elements, p.collections, p.backlog), (10, 0, 1));
        assert_eq!(pass(&ks, 10).unwrap().elements, 10);
        let p = pass(&ks, 10).unwrap();
        assert_eq!((p.elements, p.collections, p.backlog), (5, 1, 0));
        assert_eq!(elements_left(&ks, c.version), 0);
        assert_eq!(pass(&ks, 10).unwrap(), SweepPass::default());
        assert_eq!(ks.stats().counts().swept_elements, 25);
        // The string is untouched.
        assert!(ks.read().lookup(0, b"big").unwrap().exists());
    }

    #[test]
    fn small_and_large_dead_collections_both_go_in_one_pass() {
        let ks = keyspace();
        let mut versions = Vec::new();
        for (key, n) in [(&b"small"[..], 3u32), (b"large", 100)] {
            let mut tx = ks.write();
            let mut f = tx.lookup(0, key).unwrap();
            let mut m = tx.new_coll(Kind::Set).unwrap();
            let c = *m.coll().unwrap();
            for i in 0..n {
                tx.put_field(f.slot, &c, &i.to_be_bytes(), vec![]).unwrap();
            }
            m.coll_mut().unwrap().size = u64::from(n);
            tx.set(&mut f, Some(m)).unwrap();
            tx.commit().unwrap();
            let mut tx = ks.write();
            let mut f = tx.lookup(0, key).unwrap();
            tx.set(&mut f, None).unwrap();
            tx.commit().unwrap();
            versions.push(c.version);
        }
        let p = pass(&ks, 1000).unwrap();
        assert_eq!((p.elements, p.collections, p.backlog), (103, 2, 0));
        for v in versions {
            assert_eq!(elements_left(&ks, v), 0);
        }
    }
}
