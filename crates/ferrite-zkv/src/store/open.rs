//! Opening a store: the emulated zoned device in the store's directory,
//! and recovery. Recovery reads the newest MetaLog snapshot, rebuilds the
//! leaf map and zone accounting, resets data zones written after it,
//! hands partly written leaf zones back to the flushers and finishes the
//! others, re-applies the buffered pairs, replays the WAL (refusing a gap
//! a later record vouches for), and writes a new snapshot at once, so a
//! torn WAL tail lies behind the next replay start.

use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use ferrite_core::engine::{PeriodicSync, Poison, WriteGroup};
use ferrite_core::{
    EngineKind, Error, Options, Result, StoreIdentity, SyncMode, WalRecovery, WriteBatch,
};
use ferrite_io::{EmulatedZonedDevice, ZoneCondition, ZonedDevice};
use parking_lot::{Mutex, RwLock};

use super::{
    Budget, Counters, Inner, ZkvStore, DEVICE_FILE, FORMAT_VERSION, OLDEST_READABLE_FORMAT,
};
use crate::batch_array::BatchArray;
use crate::flusher::Flusher;
use crate::lru_pool::LruPool;
use crate::merged_filter::MergedFilter;
use crate::metalog::{Layout, MetaLog, Snapshot};
use crate::options::{Variant, ZkvOptions};
use crate::page_io::PageIo;
use crate::tree::Tree;
use crate::vlog::Vlog;
use crate::zone_space::{Role, ZoneSpace};
use crate::zone_wal::{self, WalPosition, ZoneWal};
use ferrite_core::engine::SnapshotChain;

/// Old-version bytes live snapshots may keep at least, whatever the cache
/// budget (past the larger of the two they are cut off).
const SNAPSHOT_FLOOR: u64 = 16 << 20;

impl ZkvStore {
    /// Opens or creates the store in `dir` (a zoned device emulated in
    /// `dir/zones.img` with `zkv.geometry`).
    pub fn open(dir: &Path, options: &Options, zkv: ZkvOptions) -> Result<Self> {
        options.validate()?;
        zkv.validate().map_err(Error::InvalidOptions)?;
        StoreIdentity::establish(
            dir,
            EngineKind::Zkv,
            OLDEST_READABLE_FORMAT..=FORMAT_VERSION,
            options,
        )?;
        // An existing device keeps the geometry it was formatted with:
        // tools that open any store (inspect, dump, the server) need not
        // know it.
        let path = dir.join(DEVICE_FILE);
        let formatted = std::fs::metadata(&path).is_ok_and(|m| m.len() > 0);
        let dev = if formatted {
            EmulatedZonedDevice::open(&path)?
        } else {
            EmulatedZonedDevice::open_or_create(&path, zkv.geometry)?
        };
        Self::open_on(Arc::new(dev), options, zkv)
    }

    /// Opens or creates a store on `dev` (tests stack it on a faulty device).
    pub fn open_on(dev: Arc<dyn ZonedDevice>, options: &Options, zkv: ZkvOptions) -> Result<Self> {
        options.validate()?;
        let (metalog, snap) = MetaLog::load(dev.clone(), zkv.meta_zones)?;
        // The device fixes the geometry and the MetaLog the leaf size.
        let leaf_size = snap
            .as_ref()
            .map_or(zkv.leaf_size, |s| s.leaf_size as usize);
        let zkv = zkv.geometry(*dev.geometry()).leaf_size(leaf_size);
        zkv.validate().map_err(Error::InvalidOptions)?;
        let budget = Budget::new(options.cache_bytes, &zkv);
        let g = *dev.geometry();
        let ps = zkv.leaf_size as u64;
        let meta = 2 * zkv.meta_zones;
        let ring: Vec<u32> = (meta..meta + zkv.wal_zones).collect();
        let mut space = ZoneSpace::new(
            g.zone_count,
            meta,
            zkv.wal_zones,
            g.zone_size / ps,
            g.zone_capacity / ps,
            zkv.flushers,
        );
        let fresh = snap.is_none();
        // Partly written leaf zones the flushers take back, as (zone,
        // bytes written).
        let mut resumed: Vec<(u32, u64)> = Vec::new();
        let tree = match &snap {
            None => {
                // A new device, or one whose first MetaLog never became
                // durable: nothing on it is referenced. That first
                // snapshot is written before anything else (and followed
                // by its WAL mark), so data outside the MetaLog's zones
                // means the snapshots are damaged: wiping would lose it.
                let written = (meta..g.zone_count).find(|&z| {
                    dev.report_zones(z, 1)
                        .first()
                        .is_some_and(|i| i.write_pointer > i.start)
                });
                if let Some(z) = written {
                    return Err(Error::corruption(
                        "zkv MetaLog",
                        format!(
                            "no valid snapshot, yet zone {z} holds data: the MetaLog is \
                             damaged, or the device holds something else (reset its zones \
                             to start a new store)"
                        ),
                    ));
                }
                for z in 0..g.zone_count {
                    let info = dev.report_zones(z, 1);
                    if info
                        .first()
                        .is_some_and(|i| i.condition != ZoneCondition::Empty)
                    {
                        dev.reset_zone(z)?;
                    }
                }
                Tree::new(&zkv, budget.adb, budget.delta)
            }
            Some(s) => {
                s.check_layout(&Layout {
                    geometry: g,
                    meta,
                    wal: zkv.wal_zones,
                })?;
                s.check_written(dev.as_ref())?;
                for (z, &(role, valid)) in s.zones.iter().enumerate() {
                    space.zones[z].role = role;
                    space.zones[z].valid = if role == Role::Vlog { valid } else { 0 };
                }
                let ppz = space.pages_per_zone;
                let roles: Vec<Role> = s.zones.iter().map(|z| z.0).collect();
                let tree = Tree::restore(&zkv, budget.adb, budget.delta, &s.leaves, |p| {
                    roles.get((p / ppz) as usize) == Some(&Role::Leaf)
                })?;
                for (z, n) in tree
                    .pages_per_zone(g.zone_count as usize, ppz)
                    .into_iter()
                    .enumerate()
                {
                    if space.zones[z].role == Role::Leaf {
                        space.zones[z].valid = n;
                    }
                }
                // Zones written after the MetaLog hold nothing it refers
                // to: free zones are emptied. Partly written leaf zones go
                // back to the flushers, as many as there are flushers: a
                // crash would otherwise cost each flusher the rest of its
                // zone, and the zones a crash costs come out of the
                // reserve reclamation needs (its checkpoint writes into
                // the flushers' zones). The value log's zone and any other
                // partly written data zone are finished so they stop
                // holding open/active resources. Finishing the log's zone
                // also makes it a reclamation candidate at once (an open
                // zone never is): carrying on in it instead kept a zone's
                // worth of records out of reach, and a full store that was
                // reopened and then lost two thirds of its keys put back
                // about half as much in its next round.
                let mut partly = Vec::new();
                for z in meta + zkv.wal_zones..g.zone_count {
                    let Some(info) = dev.report_zones(z, 1).first().copied() else {
                        continue;
                    };
                    let role = space.zones[z as usize].role;
                    if role == Role::Free && info.condition != ZoneCondition::Empty {
                        dev.reset_zone(z)?;
                    } else if matches!(role, Role::Leaf | Role::Vlog)
                        && !matches!(info.condition, ZoneCondition::Full | ZoneCondition::Empty)
                    {
                        if role == Role::Leaf {
                            partly.push((z, info.write_pointer.saturating_sub(info.start)));
                        } else {
                            dev.finish_zone(z)?;
                        }
                    }
                }
                resumed = crate::zone_space::resumed_leaf_zones(
                    &partly,
                    ps,
                    g.zone_capacity,
                    zkv.flushers,
                );
                for &(z, _) in &partly {
                    if !resumed.iter().any(|&(r, _)| r == z) {
                        dev.finish_zone(z)?;
                    }
                }
                for &(z, written) in &resumed {
                    space.resume(z as usize, written / ps);
                }
                space.rebuild_free();
                tree
            }
        };
        let admit = zkv.variant == Variant::Zkv;
        let (cap, group) = if zkv.variant == Variant::Zkv || zkv.baseline_zflusher {
            (zkv.sequencer_pages(), zkv.group_pages)
        } else {
            // The baselines write each evicted page as it leaves: a
            // zone write of one page at the write pointer.
            (0, 1)
        };
        let flushers = (0..zkv.flushers)
            .map(|i| {
                let mut f =
                    Flusher::new(cap, group, zkv.cache_threshold, Role::Leaf, zkv.leaf_size);
                if let Some(&(z, written)) = resumed.get(i) {
                    f.resume(z, written, g.zone_size, g.zone_capacity);
                }
                f
            })
            .collect();
        let io = PageIo::new(
            dev.clone(),
            zkv.leaf_size,
            space,
            flushers,
            budget.cache_pages,
            admit,
        );
        let wal_pos = snap.as_ref().map_or(
            WalPosition {
                ring: 0,
                addr: u64::from(ring[0]) * g.zone_size,
                seq: 1,
            },
            |s| s.wal,
        );
        let inner = Inner {
            wal: ZoneWal::new(dev.clone(), ring.clone(), wal_pos, zkv.wal_instances),
            mf: Mutex::new(MergedFilter::new(zkv.mf_node_pairs)),
            batches: RwLock::new(Arc::new(BatchArray::default())),
            tree: RwLock::new(tree),
            io,
            lru: Mutex::new(LruPool::new(budget.lru_pages)),
            vlog: Mutex::new(Vlog::new(dev.clone()).with_compression(zkv.compress_values)),
            metalog: Mutex::new(metalog),
            version: AtomicU64::new(snap.as_ref().map_or(0, |s| s.version)),
            ring,
            poisoned: Poison::new(),
            gc_lock: Mutex::new(()),
            deferred: Mutex::new(std::collections::HashMap::new()),
            snapshots: SnapshotChain::new(options.cache_bytes.max(SNAPSHOT_FLOOR)),
            c: Counters::default(),
            dev,
            sync: options.sync,
            group: options.groups_writes().then(WriteGroup::new),
            budget,
            opts: zkv,
        };
        let mut store = Self {
            inner: Arc::new(inner),
            closed: false,
            ticker: None,
            idle: None,
        };
        if let Some(s) = snap {
            if let Err(e) = store.recover(s, options.wal_recovery) {
                // Closing checkpoints unless the store is poisoned, and a
                // checkpoint of a recovery cut short would record part of
                // the buffered pairs and the replay with the snapshot's
                // WAL position: the rest would be lost.
                store.inner.poisoned.set(&e);
                return Err(e);
            }
        }
        if fresh {
            store.checkpoint()?;
        }
        if let SyncMode::Batched(every) = options.sync {
            let inner = store.inner.clone();
            let ticker = PeriodicSync::start("zkv-wal-sync", every, move || inner.sync_all())
                .map_err(|e| Error::resource("the zkv-wal-sync thread", e))?;
            store.ticker = Some(ticker);
        }
        let inner = store.inner.clone();
        let mut idle = super::reclaim::Idle::default();
        let settler = PeriodicSync::start("zkv-settle", Duration::from_secs(1), move || {
            inner.tick_idle(&mut idle)
        })
        .map_err(|e| Error::resource("the zkv-settle thread", e))?;
        store.idle = Some(settler);
        Ok(store)
    }

    fn recover(&self, snap: Snapshot, recovery: WalRecovery) -> Result<()> {
        let me = &self.inner;
        for p in snap.buffered {
            me.apply_pair(p)?;
            me.maintain_buffers(false)?;
        }
        let replayed = zone_wal::replay(me.dev.as_ref(), &me.ring, snap.wal, &mut |_, payload| {
            if zone_wal::mark_version(payload).is_some() {
                return Ok(());
            }
            let batch = WriteBatch::decode(payload)?;
            me.apply_batch(&batch, &mut |_| Ok(true), &mut || {})?;
            me.maintain_buffers(false)
        })?;
        // A checkpoint's mark follows its MetaLog snapshot: one past the
        // gap means a newer snapshot was committed and the log from this
        // one to it is gone. Falling back would silently lose those writes.
        let newer = replayed
            .stranded
            .iter()
            .filter_map(|(seq, p)| zone_wal::mark_version(p).map(|v| (seq, v)))
            .find(|&(_, v)| v > snap.version);
        if let Some((seq, v)) = newer {
            return Err(Error::corruption(
                "zkv MetaLog",
                format!(
                    "WAL record {seq} marks checkpoint {v}, but the newest valid MetaLog \
                     snapshot is {} and the log between them is gone: snapshot {v} is damaged",
                    snap.version
                ),
            ));
        }
        // A record past the gap appended after the missing one was synced:
        // the gap is damage to acknowledged writes, not a torn tail.
        if let Some((seq, claim)) = replayed.vouched {
            if recovery == WalRecovery::TruncateAtDamage {
                log::warn!(
                    "zkv: WAL record {} is missing or damaged though record {seq} vouches for \
                     it: recovered up to it, {} later records dropped",
                    replayed.next_seq,
                    replayed.stranded.len()
                );
            } else {
                return Err(Error::corruption(
                    "zkv WAL",
                    format!(
                        "record {} is missing or damaged, but record {seq} was appended after \
                     every record below {claim} was synced; recovery stops rather than drop \
                     the acknowledged writes after the damage",
                        replayed.next_seq
                    ),
                ));
            }
        }
        let (next_seq, tail) = (replayed.next_seq, replayed.tail);
        let g = *me.dev.geometry();
        let z = me.ring[tail as usize];
        let wp = me
            .dev
            .report_zones(z, 1)
            .first()
            .map_or(u64::from(z) * g.zone_size, |i| i.write_pointer);
        me.wal.restart(WalPosition {
            ring: tail,
            addr: wp,
            seq: next_seq,
        });
        // A fresh MetaLog puts any torn WAL tail behind the replay start.
        self.checkpoint()
    }
}
