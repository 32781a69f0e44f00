//! Checkpoints: a MetaLog snapshot (WAL position, zone roles, leaf list,
//! every buffered pair, the batches not yet in the tree among them) taken
//! with every WAL instance and the filter, array and tree locks held, so
//! every handed-out sequence number is applied. It writes no leaf page (it
//! may be the one that frees the zones leaves need); after it, WAL zones
//! other than the current one, and zones reclamation emptied, are reset.

use std::sync::atomic::Ordering;

use ferrite_core::Result;
use ferrite_io::ZoneCondition;

use super::Inner;
use crate::metalog::Snapshot;
use crate::pair::Val;
use crate::zone_space::Role;

/// Where a checkpoint's snapshot goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Snapshots {
    /// Appended to the MetaLog's active slot (or the other, reset, when it
    /// is full).
    Append,
    /// Both slots reset to hold it alone (a clean close).
    Alone,
}

impl Inner {
    pub(super) fn checkpoint(&self) -> Result<()> {
        self.checkpoint_to(Snapshots::Append)
    }

    pub(super) fn checkpoint_to(&self, to: Snapshots) -> Result<()> {
        let _work = ferrite_core::background::begin(ferrite_core::background::Work::Checkpoint);
        // Holding every WAL instance: every handed-out sequence number is
        // applied, and none is handed out until the snapshot is durable.
        let mut held = self.wal.enter_all();
        let mf = self.mf.lock();
        // The batches not in the tree yet go into the snapshot as buffered
        // pairs rather than into the leaves: this checkpoint may be the one
        // that frees the zones those leaf pages would need.
        let arr = self.batches.read().clone();
        let tree = self.tree.write();

        let ctx = self.ctx();
        tree.write_dirty(&ctx)?;
        self.io.drain()?;
        self.vlog.lock().flush()?;
        let pos = self.wal.position(&mut held)?;
        self.dev.sync()?;
        // The snapshot keeps the newest buffered pair per key. The older
        // ones it drops still count in memory (their buffers hold them),
        // but will not exist after a recovery from it: its value-log
        // counts leave them out, or their zones could never empty.
        let mut shadowed = Vec::new();
        let buffered = tree.buffered(&mut shadowed);
        let pending = arr.not_inserted().cloned().collect();
        let buffered = crate::pair::merge_over(buffered, pending, &mut shadowed);
        let buffered = crate::pair::merge_over(buffered, mf.all(), &mut shadowed);
        let snap = {
            let s = self.io.space.lock();
            let mut zones: Vec<(Role, u64)> = s
                .zones
                .iter()
                .map(|z| {
                    let role = if z.pending_reset { Role::Free } else { z.role };
                    (role, z.valid)
                })
                .collect();
            for v in shadowed {
                if let Val::Vlog(loc) = v {
                    let zone = crate::vlog::loc_addr(loc) / self.dev.geometry().zone_size;
                    if let Some((Role::Vlog, valid)) = zones.get_mut(zone as usize) {
                        *valid = valid
                            .saturating_sub(crate::vlog::RECORD_HEADER + crate::vlog::loc_len(loc));
                    }
                }
            }
            Snapshot {
                version: self.version.load(Ordering::Acquire) + 1,
                leaf_size: self.opts.leaf_size as u32,
                wal: pos,
                zones,
                leaves: tree.leaf_list(),
                buffered,
            }
        };
        match to {
            Snapshots::Append => self.metalog.lock().write(&snap)?,
            Snapshots::Alone => self.metalog.lock().write_alone(&snap)?,
        }
        self.version.store(snap.version, Ordering::Release);
        for z in self.wal.retired_zones() {
            let empty = self
                .dev
                .report_zones(z, 1)
                .first()
                .is_some_and(|i| i.condition == ZoneCondition::Empty);
            if !empty {
                self.dev.reset_zone(z)?;
            }
        }
        let pending = self.io.space.lock().pending_resets();
        for z in pending {
            self.dev.reset_zone(z)?;
            self.io.space.lock().freed(z);
        }
        // After the resets, so the ring has room for it.
        self.wal.write_mark(&mut held, snap.version)?;
        self.wal.checkpointed();
        self.c.checkpoints.fetch_add(1, Ordering::Relaxed);
        drop(tree);
        drop(mf);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

    use std::collections::BTreeMap;

    use std::sync::Arc;

    use ferrite_core::{KeyRange, KvStore, KvStoreExt, Options, SyncMode};
    use ferrite_io::{EmulatedZonedDevice, MemDevice, ZoneGeometry, ZonedDevice};

    use crate::batch_array::BatchArray;
    use crate::pair::{Bytes, Pair, Val};
    use crate::store::ZkvStore;
    use crate::ZkvOptions;

    fn opts() -> ZkvOptions {
        ZkvOptions::default()
            .geometry(ZoneGeometry::small(24, 8, 8))
            .wal_zones(2)
            .flushers(2)
            .mf_node_pairs(8)
            .inline_value_max(64)
    }

    fn open(dev: &Arc<dyn ZonedDevice>) -> ZkvStore {
        let o = Options::default()
            .sync(SyncMode::Never)
            .cache_bytes(64 << 10);
        ZkvStore::open_on(dev.clone(), &o, opts()).unwrap()
    }

    /// A checkpoint leaves the batches not yet in the tree where they are
    /// and records them as buffered pairs, newer than the tree's and older
    /// than the merged filter's: a store recovered from it (nothing
    /// written after it) reads exactly what the store read.
    #[test]
    fn a_checkpoint_records_the_batches_not_yet_in_the_tree() {
        let dev: Arc<dyn ZonedDevice> =
            Arc::new(EmulatedZonedDevice::format(MemDevice::new(), opts().geometry).unwrap());
        let db = open(&dev);
        let mut model = BTreeMap::new();
        let value = |k: u32, round: u32| -> Vec<u8> {
            // Every third value goes to the value log.
            let len = if k.is_multiple_of(3) { 100 } else { 20 };
            vec![(k + round) as u8; len]
        };
        for k in 0..600u32 {
            let key = format!("key{k:06}").into_bytes();
            db.put(&key, &value(k, 0)).unwrap();
            model.insert(key, value(k, 0));
        }
        // Newer versions and deletes of keys the tree holds, then all of
        // the merged filter evicted into an array of which only the first
        // batch reaches the tree.
        for k in (0..600u32).step_by(4) {
            let key = format!("key{k:06}").into_bytes();
            if k.is_multiple_of(8) {
                db.delete(&key).unwrap();
                model.remove(&key);
            } else {
                db.put(&key, &value(k, 1)).unwrap();
                model.insert(key, value(k, 1));
            }
        }
        let me = &db.inner;
        me.finish_batches().unwrap();
        let arr = {
            let mut mf = me.mf.lock();
            let evicted = mf.evict(usize::MAX);
            assert!(evicted.len() > 2, "{} batches", evicted.len());
            let arr = Arc::new(BatchArray::new(evicted));
            *me.batches.write() = arr.clone();
            arr
        };
        assert!(me.insert_next(&arr).unwrap());
        // Newest of all: in the filter, over a waiting batch's pair (put
        // there directly: a write's maintenance would insert the batches;
        // the checkpoint makes it durable).
        let last = format!("key{:06}", 596).into_bytes();
        assert!(arr.not_inserted().any(|p| p.key() == last));
        let old = me
            .mf
            .lock()
            .insert(Pair::new(&last, Val::Put(Bytes::new(b"newest"))));
        assert!(old.is_none());
        model.insert(last, b"newest".to_vec());
        me.checkpoint().unwrap();
        assert!(
            !me.batches.read().finished(),
            "the checkpoint inserted the batches"
        );
        let read = |db: &ZkvStore| -> BTreeMap<Vec<u8>, Vec<u8>> {
            db.scan_collect(KeyRange::all(), usize::MAX)
                .unwrap()
                .into_iter()
                .collect()
        };
        assert!(read(&db) == model);
        // A crash right after the checkpoint: nothing else reaches the
        // device (the store's closing checkpoint never runs).
        std::mem::forget(db);
        let db = open(&dev);
        db.verify().unwrap();
        assert!(read(&db) == model, "recovered store differs");
        for (k, v) in &model {
            assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
        }
    }
}
