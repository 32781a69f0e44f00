//! The active expiry cycle: one pass removes keys whose time has come,
//! in the order they expire, within a budget, so expired keys give their
//! space back without anyone reading them.
//!
//! A pass resumes where the last one stopped: the records before it were
//! deleted (an LSM-tree keeps their traces for a while, and a scan from
//! the index's start would read them all again). A record written behind
//! that point (a time already past: `SET ... PXAT` of the past) moves the
//! point back to it; a clock set back could still hide records, so every
//! [`FULL_SCAN_EVERY`] passes one starts from the beginning.
//!
//! Invariants: a pass acts on an expiry-index record only if the key's
//! metadata still names that time (the index may hold records of
//! expiries since changed or removed, which are simply dropped); the
//! removal is an ordinary [`Tx::set`] to nothing, so counts, watchers,
//! the dead collection's elements and the `expired` event follow as for
//! any other change.

use std::ops::ControlFlow;

use super::keyspace::Keyspace;
use super::layout;
use super::tx::Committed;
use super::ModelError;

/// Passes between two that start at the index's beginning.
pub const FULL_SCAN_EVERY: u64 = 600;

/// What one pass did.
#[derive(Debug, Default)]
pub struct ExpirePass {
    /// Index records looked at.
    pub examined: usize,
    /// Keys removed because they expired.
    pub expired: usize,
    /// Whether the budget ran out before the due records did.
    pub more: bool,
    /// The commit's effects (events to publish).
    pub committed: Committed,
}

/// Removes up to `budget` due keys in one transaction.
pub fn pass(ks: &Keyspace, budget: usize) -> Result<ExpirePass, ModelError> {
    let mut tx = ks.write();
    let (first, end) = layout::expiries_until(tx.now);
    let resume = if ks
        .stats()
        .counts()
        .expire_cycles
        .is_multiple_of(FULL_SCAN_EVERY)
    {
        None
    } else {
        ks.expiry_resume().get()
    };
    let start = resume.filter(|r| *r > first).unwrap_or(first);
    let mut due: Vec<Vec<u8>> = Vec::new();
    let mut more = false;
    tx.scan(&start, Some(&end), false, &mut |k, _| {
        if due.len() == budget {
            more = true;
            return ControlFlow::Break(());
        }
        due.push(k.to_vec());
        ControlFlow::Continue(())
    })?;
    let mut out = ExpirePass {
        examined: due.len(),
        more,
        ..ExpirePass::default()
    };
    let last = due.last().cloned();
    for k in due {
        let Some((at, slot, key)) = layout::decode_expiry(&k) else {
            return Err(ModelError::Corrupt(
                "an expiry-index key is malformed".into(),
            ));
        };
        let db = tx.db_of_slot(slot);
        let mut f = tx.lookup(db, key)?;
        if f.stale() && f.expire_at() == Some(at) {
            tx.set(&mut f, None)?;
            out.expired += 1;
        }
        tx.delete(k)?;
    }
    ks.stats().count_expire_cycle();
    // Moved while the write lock is held, so a record written behind the
    // new point by the next writer lowers it again rather than being
    // overwritten by this pass.
    if last.is_some() {
        ks.expiry_resume().set(last);
    }
    out.committed = tx.commit().inspect_err(|_| ks.expiry_resume().set(None))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::meta::Meta;
    use crate::model::testing::keyspace;

    #[test]
    fn a_pass_removes_due_keys_only_and_drops_outdated_index_records() {
        let ks = keyspace();
        let mut tx = ks.write();
        let now = tx.now;
        for (key, at) in [
            (&b"soon"[..], now + 50),
            (b"later", now + 1_000_000),
            (b"moved", now + 50),
        ] {
            let mut f = tx.lookup(0, key).unwrap();
            let mut m = Meta::string(b"v".to_vec());
            m.expire_at = Some(at);
            tx.set(&mut f, Some(m)).unwrap();
        }
        // "moved" gets a later expiry: its first index record is outdated.
        let mut f = tx.lookup(0, b"moved").unwrap();
        let mut m = f.live().unwrap().clone();
        m.expire_at = Some(now + 2_000_000);
        tx.set(&mut f, Some(m)).unwrap();
        tx.commit().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(60));
        let p = pass(&ks, 100).unwrap();
        assert_eq!((p.examined, p.expired, p.more), (2, 1, false));
        assert_eq!(ks.db_sizes()[0], (2, 2));
        assert_eq!(ks.stats().counts().expired_keys, 1);
        let tx = ks.read();
        assert!(!tx.lookup(0, b"soon").unwrap().stale());
        assert!(tx.lookup(0, b"moved").unwrap().exists());
    }

    #[test]
    fn a_key_given_a_past_time_behind_the_resume_point_is_still_removed() {
        let ks = keyspace();
        let set = |key: &[u8], at: u64| {
            let mut tx = ks.write();
            let mut f = tx.lookup(0, key).unwrap();
            let mut m = Meta::string(b"v".to_vec());
            m.expire_at = Some(at);
            tx.set(&mut f, Some(m)).unwrap();
            tx.commit().unwrap();
        };
        let now = ks.read().now;
        set(b"recent", now);
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(pass(&ks, 100).unwrap().expired, 1);
        assert!(ks.expiry_resume().get().is_some());
        // Long past: its index record sorts before where the last pass
        // stopped.
        set(b"ancient", 1_000);
        assert_eq!(ks.db_sizes()[0], (1, 1));
        let p = pass(&ks, 100).unwrap();
        assert_eq!((p.examined, p.expired), (1, 1));
        assert_eq!(ks.db_sizes()[0], (0, 0));
    }
}
