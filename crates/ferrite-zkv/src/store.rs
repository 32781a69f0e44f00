//! `ZkvStore`: the write path, lookups, checkpoints (MetaLog), recovery,
//! zone reclamation and the [`KvStore`] implementation.
//!
//! Write path (ZKV): validate → under the WAL lock, append the batch to the
//! zone WAL and apply it to the merged filter (values above the inline
//! limit go to the value log first), so WAL order is apply order → commit
//! per [`SyncMode`] (under `Batched(d)` a background thread also syncs
//! every `d`, so writes become durable within `d` when no later write
//! comes) → maintenance: help insert the current batch array,
//! evict the merged filter's coldest nodes into a new one when it is over
//! budget, checkpoint when the WAL has grown, reclaim zones when free ones
//! run short. The baselines apply the batch to the tree under the WAL lock.
//!
//! Lookups check the merged filter, the batch array, then the tree (ADB or
//! delta chain, then the page through sequencer, read cache or device).
//!
//! Lock order: WAL → merged filter → batch array → tree → LRU pool →
//! flusher → value log → zone space → deferred value zones. A checkpoint
//! holds the first four.
//!
//! Failure: an I/O error on any write path poisons the store: every later
//! call returns [`Error::Poisoned`], and reopening recovers the newest
//! MetaLog plus the WAL, so nothing acknowledged is lost.
//!
//! Space: a write is admitted only while reclamation can keep enough data
//! zones free (`gc_policy::admission_floor`); otherwise it is refused with
//! [`Error::StoreFull`] before anything changes, and the store stays open.
//! Deletes have a lower floor than puts, so they go through on a full
//! device and, once whole leaves or value-log zones die, return space;
//! with the merged filter a delete takes no zone at all and is not
//! counted. The leaf pages that inserting evicted batches writes are not
//! bounded by one write's admission: that work goes on only while the
//! zones cover the deletes' floor, and otherwise waits in the batch array
//! for reclamation (whose checkpoints record the waiting batches rather
//! than insert them).
//! Reclamation empties a value-log zone that still holds live records by
//! moving them to the log's head when that frees a quarter of the zone or
//! more, rewriting the leaves that point at them or, when that costs too
//! much, sending the copies through the leaves' buffers and letting the
//! zone drain (see `relocate_values`).

use std::ops::{Bound, ControlFlow};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ferrite_core::{
    check_key, check_value, ApiCounters, BatchOp, CacheCounts, DeviceCounts, EngineKind, Error,
    KeyRange, KvStore, Options, PeriodicSync, Poison, Result, ScanVisitor, Stats, StoreIdentity,
    SyncMode, WalRecovery, WriteBatch,
};
use ferrite_io::{EmulatedZonedDevice, ZoneCondition, ZonedDevice};
use parking_lot::{Mutex, RwLock};

use crate::batch_array::BatchArray;
use crate::flusher::Flusher;
use crate::gc_policy::{self, Candidate, Deferral};
use crate::lru_pool::LruPool;
use crate::merged_filter::MergedFilter;
use crate::metalog::{Layout, MetaLog, Snapshot};
use crate::options::{Variant, ZkvOptions};
use crate::page_io::PageIo;
use crate::pair::{Bytes, Pair, Val};
use crate::tree::{Ctx, Tree};
use crate::vlog::{Vlog, ZoneRecord};
use crate::zone_space::{Role, ZoneSpace};
use crate::zone_wal::{self, Commit, WalPosition, ZoneWal};

/// On-disk format version in the identity file. Format 5 adds checkpoint
/// marks to the WAL; format 6 makes WAL records claim how far the log was
/// synced (`docs/format/zkv.md`). Format-4 and -5 stores are read and
/// upgraded.
pub const FORMAT_VERSION: u32 = 6;
/// The oldest format this engine reads.
pub const OLDEST_READABLE_FORMAT: u32 = 4;
const DEVICE_FILE: &str = "zones.img";
/// Page fill of a bulk load: room for inserts before the first split.
const BULK_FILL: f64 = 0.8;
/// Buffered pairs fetched per round of a scan.
const OVERLAY_CHUNK: usize = 64;

#[derive(Default)]
struct Counters {
    api: ApiCounters,
    checkpoints: AtomicU64,
    evictions: AtomicU64,
    gc_zones: AtomicU64,
    mf_hits: AtomicU64,
    batch_hits: AtomicU64,
    maintenance: AtomicU64,
    /// Writes refused for want of zones.
    refused: AtomicU64,
    /// Value-log records copied out of zones being reclaimed.
    relocated_values: AtomicU64,
    /// Relocations that left a zone draining (through the buffers).
    drained_relocations: AtomicU64,
}

/// Memory shares of the budget, in bytes.
#[derive(Debug, Clone, Copy)]
struct Budget {
    mf: usize,
    adb: usize,
    delta: usize,
    cache_pages: usize,
    lru_pages: usize,
}

impl Budget {
    fn new(total: u64, o: &ZkvOptions) -> Self {
        let total = total as usize;
        let frame = o.leaf_size + 64;
        match o.variant {
            Variant::Zkv => {
                let s: u32 = o.split.iter().sum::<u32>().max(1);
                let part = |i: usize| total / s as usize * o.split[i] as usize;
                let mut mf = part(0);
                let mut adb = part(1);
                let mut flush = part(2);
                if !o.merged_filter {
                    flush += mf;
                    mf = 0;
                }
                if !o.adb {
                    flush += adb;
                    adb = 0;
                }
                let seq = o.flushers * o.sequencer_pages() * frame;
                Self {
                    mf,
                    adb,
                    delta: 0,
                    cache_pages: flush.saturating_sub(seq) / frame,
                    lru_pages: 0,
                }
            }
            Variant::BPlusTree => Self {
                mf: 0,
                adb: 0,
                delta: 0,
                cache_pages: 0,
                lru_pages: total / frame,
            },
            Variant::BdTree => Self {
                mf: 0,
                adb: 0,
                delta: total / 8 * 3,
                cache_pages: 0,
                lru_pages: total / 8 * 5 / frame,
            },
        }
    }
}

struct Inner {
    dev: Arc<dyn ZonedDevice>,
    opts: ZkvOptions,
    sync: SyncMode,
    budget: Budget,
    wal: ZoneWal,
    mf: Mutex<MergedFilter>,
    batches: RwLock<Arc<BatchArray>>,
    tree: RwLock<Tree>,
    io: PageIo,
    lru: Mutex<LruPool>,
    vlog: Mutex<Vlog>,
    metalog: Mutex<MetaLog>,
    version: AtomicU64,
    ring: Vec<u32>,
    poisoned: Poison,
    gc_lock: Mutex<()>,
    /// Value-log zones not to scan again until what kept them from
    /// being emptied has changed.
    deferred: Mutex<std::collections::HashMap<u32, Deferral>>,
    c: Counters,
}

/// The ZKV engine (and its two baselines, by [`Variant`]).
pub struct ZkvStore {
    inner: Arc<Inner>,
    /// Syncs the WAL every interval under `SyncMode::Batched`.
    ticker: Option<PeriodicSync>,
}

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
        let dev = EmulatedZonedDevice::open_or_create(dir.join(DEVICE_FILE), zkv.geometry)?;
        Self::open_on(Arc::new(dev), options, zkv)
    }

    /// Opens or creates a store on `dev` (tests stack it on a faulty device).
    pub fn open_on(dev: Arc<dyn ZonedDevice>, options: &Options, zkv: ZkvOptions) -> Result<Self> {
        options.validate()?;
        let (metalog, snap) = MetaLog::load(dev.clone(), zkv.meta_zones)?;
        // The device fixes the geometry and the MetaLog the leaf size.
        let zkv = ZkvOptions {
            geometry: *dev.geometry(),
            leaf_size: snap
                .as_ref()
                .map_or(zkv.leaf_size, |s| s.leaf_size as usize),
            ..zkv
        };
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
            vlog: Mutex::new(Vlog::new(dev.clone())),
            metalog: Mutex::new(metalog),
            version: AtomicU64::new(snap.as_ref().map_or(0, |s| s.version)),
            ring,
            poisoned: Poison::new(),
            gc_lock: Mutex::new(()),
            deferred: Mutex::new(std::collections::HashMap::new()),
            c: Counters::default(),
            dev,
            sync: options.sync,
            budget,
            opts: zkv,
        };
        let mut store = Self {
            inner: Arc::new(inner),
            ticker: None,
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
                .map_err(|e| Error::InvalidOptions(format!("cannot start zkv-wal-sync: {e}")))?;
            store.ticker = Some(ticker);
        }
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
            me.apply_batch(&batch, &mut || {})?;
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

    /// Writes a MetaLog snapshot and frees what it makes obsolete.
    pub fn checkpoint(&self) -> Result<()> {
        self.inner.check()?;
        let r = self.inner.checkpoint();
        self.inner.poison_on(r)
    }

    /// Runs zone reclamation now (it also runs by itself when free zones
    /// fall below the reserve); returns zones reclaimed.
    pub fn collect_garbage(&self, min_zones: usize) -> Result<usize> {
        self.inner.check()?;
        let r = self.inner.gc(min_zones);
        self.inner.poison_on(r)
    }

    /// Space amplification: bytes of zones holding data over live bytes.
    pub fn space_amplification(&self) -> f64 {
        let me = &self.inner;
        let cap = me.dev.geometry().zone_capacity;
        me.io
            .space
            .lock()
            .amplification(cap, me.io.page_size as u64, false)
    }

    pub fn options(&self) -> &ZkvOptions {
        &self.inner.opts
    }
}

impl Inner {
    /// Makes every write so far durable.
    fn sync_all(&self) -> Result<()> {
        self.check()?;
        let r = self.commit(self.wal.last_seq());
        self.poison_on(r)
    }

    fn ctx(&self) -> Ctx<'_> {
        Ctx {
            io: &self.io,
            lru: &self.lru,
            vlog: &self.vlog,
            opts: &self.opts,
        }
    }

    fn check(&self) -> Result<()> {
        self.poisoned.check()
    }

    fn poison_on<T>(&self, r: Result<T>) -> Result<T> {
        if let Err(e) = &r {
            if !e.is_invalid_input() {
                self.poisoned.set(e);
            }
        }
        r
    }

    fn value_of(&self, key: &[u8], value: &[u8]) -> Result<Val> {
        if value.len() > self.opts.inline_value_max {
            let loc = self.vlog.lock().append(key, value, &self.io.space)?;
            Ok(Val::Vlog(loc))
        } else {
            Ok(Val::Put(Bytes::new(value)))
        }
    }

    fn release(&self, v: Option<Val>) {
        if let Some(Val::Vlog(loc)) = v {
            self.vlog.lock().release(loc, &self.io.space);
        }
    }

    /// Applies one buffered pair to the first buffer of this variant.
    fn apply_pair(&self, pair: Pair) -> Result<()> {
        if self.opts.buffers_writes() {
            let old = self.mf.lock().insert(pair);
            self.release(old);
            Ok(())
        } else if self.opts.variant == Variant::Zkv {
            // Without the merged filter every write is a batch of one.
            self.tree
                .write()
                .insert_batch(std::slice::from_ref(&pair), &self.ctx())
        } else {
            self.tree.write().apply_baseline(pair, &self.ctx())
        }
    }

    /// Applies a batch under one hold of the first buffer's lock, so a
    /// reader sees all of it or none of it. `order` runs under that lock
    /// (it takes the batch's WAL sequence number), so the log orders every
    /// key's writes as memory does.
    fn apply_batch(&self, batch: &WriteBatch, order: &mut dyn FnMut()) -> Result<()> {
        let mut pairs = Vec::with_capacity(batch.len());
        for op in batch.ops() {
            pairs.push(match op {
                BatchOp::Put { key, value } => Pair::new(key, self.value_of(key, value)?),
                BatchOp::Delete { key } => Pair::new(key, Val::Del),
            });
        }
        if self.opts.buffers_writes() {
            let replaced: Vec<Option<Val>> = {
                let mut mf = self.mf.lock();
                order();
                pairs.into_iter().map(|p| mf.insert(p)).collect()
            };
            replaced.into_iter().for_each(|v| self.release(v));
            return Ok(());
        }
        let mut tree = self.tree.write();
        order();
        let ctx = self.ctx();
        for p in pairs {
            if self.opts.variant == Variant::Zkv {
                tree.insert_batch(std::slice::from_ref(&p), &ctx)?;
            } else {
                tree.apply_baseline(p, &ctx)?;
            }
        }
        Ok(())
    }

    /// Refuses, before anything changes, a write the device may not have
    /// the zones for (see [`gc_policy::admission_floor`] and
    /// [`ZoneSpace::admit`]), once reclamation has had its chance to free
    /// them. An admitted write must end with [`ZoneSpace::finish`].
    fn admit(&self, adds: bool) -> Result<()> {
        let floor =
            gc_policy::admission_floor(adds, self.opts.gc_reserve_zones, self.opts.flushers);
        let need = {
            let mut space = self.io.space.lock();
            if space.admit(floor) {
                return Ok(());
            }
            space.admission_need(floor)
        };
        let r = self.gc(need);
        self.poison_on(r)?;
        let mut space = self.io.space.lock();
        if space.admit(floor) {
            return Ok(());
        }
        let room = space.room();
        drop(space);
        self.c.refused.fetch_add(1, Ordering::Relaxed);
        Err(Error::StoreFull {
            reason: format!(
                "{room} data zones are free and {floor} are kept for reclamation{}; \
                 delete data to make room",
                if adds { " and deletes" } else { "" }
            ),
        })
    }

    fn write(&self, batch: &WriteBatch) -> Result<()> {
        self.check()?;
        let adds = batch
            .ops()
            .iter()
            .any(|op| matches!(op, BatchOp::Put { .. }));
        let admitted = gc_policy::takes_zones(adds, self.opts.buffers_writes());
        if admitted {
            self.admit(adds)?;
        }
        let r = self.admitted_write(batch, admitted);
        if admitted {
            self.io.space.lock().finish();
        }
        r
    }

    /// The part of [`Self::write`] after admission (`admitted`: the write
    /// counts among the admitted ones; one that takes no zone does not).
    fn admitted_write(&self, batch: &WriteBatch, admitted: bool) -> Result<()> {
        let mut payload = Vec::with_capacity(batch.encoded_len());
        batch.encode(&mut payload);
        if !self.wal.has_room(payload.len()) {
            // The ring is short of empty zones: free WAL zones first.
            let r = self.checkpoint();
            self.poison_on(r)?;
        }
        let seq = {
            let mut inst = self.wal.enter();
            let mut seq = None;
            let r = self.apply_batch(batch, &mut || seq = Some(self.wal.next_seq()));
            if let Some(seq) = seq {
                // Logged even if the apply failed (the store is poisoned
                // then): a handed-out sequence number must not leave a gap.
                let a = self.wal.append(&mut inst, seq, &payload);
                self.poison_on(a)?;
            }
            self.poison_on(r)?;
            seq.unwrap_or(0)
        };
        let r = match self.sync {
            SyncMode::Always => self.commit(seq),
            SyncMode::Batched(d) if self.wal.since_last_sync() >= d => self.commit(seq),
            SyncMode::Batched(_) | SyncMode::Never => Ok(()),
        };
        self.poison_on(r)?;
        let r = self.maintain(admitted);
        self.poison_on(r)
    }

    /// Makes the WAL durable up to `seq` (a checkpoint when the ring is full).
    fn commit(&self, seq: u64) -> Result<()> {
        match self.wal.commit(seq)? {
            Commit::Durable => Ok(()),
            Commit::NeedsCheckpoint => self.checkpoint(),
        }
    }

    /// Helps insert the batch array; evicts the merged filter when over
    /// budget. Batches are inserted only while the zones allow it
    /// ([`Inner::leaf_work_allowed`]); the rest wait in the array, which
    /// keeps answering reads, and the filter is not evicted again until
    /// they are in. `admitted`: the caller is an admitted write.
    fn maintain_buffers(&self, admitted: bool) -> Result<()> {
        if !self.opts.buffers_writes() {
            return Ok(());
        }
        loop {
            let arr = self.batches.read().clone();
            self.insert_batches(&arr, admitted)?;
            if !arr.finished() {
                // Short of zones, or another writer is inserting the last.
                return Ok(());
            }
            let mut mf = self.mf.lock();
            if mf.bytes <= self.budget.mf {
                return Ok(());
            }
            if !self.batches.read().finished() {
                return Ok(());
            }
            let target = mf.bytes - self.budget.mf * 3 / 4;
            let evicted = mf.evict(target);
            self.c.evictions.fetch_add(1, Ordering::Relaxed);
            *self.batches.write() = Arc::new(BatchArray::new(evicted));
        }
    }

    /// Claims and inserts batches of `arr` while the zones allow it.
    fn insert_batches(&self, arr: &BatchArray, admitted: bool) -> Result<()> {
        while self.leaf_work_allowed(admitted) && self.insert_next(arr)? {}
        Ok(())
    }

    /// Claims the next batch of `arr` and inserts it; false when none is
    /// left to claim.
    fn insert_next(&self, arr: &BatchArray) -> Result<bool> {
        let Some((i, batch)) = arr.claim() else {
            return Ok(false);
        };
        let r = {
            let mut tree = self.tree.write();
            let r = tree.insert_batch(batch, &self.ctx());
            // Under the tree's lock (see `BatchArray::not_inserted`).
            arr.mark_inserted(i);
            r
        };
        arr.finish_one();
        r.map(|()| true)
    }

    /// Whether deferred leaf writes may take pages now: the free zones
    /// and the flushers' room cover the deletes' admission floor beside
    /// the admitted writes ([`ZoneSpace::admits_leaf_work`]). A batch
    /// writes far less than a zone, so checking before each keeps those
    /// zones for reclamation, which needs them to free more.
    fn leaf_work_allowed(&self, admitted: bool) -> bool {
        let floor =
            gc_policy::admission_floor(false, self.opts.gc_reserve_zones, self.opts.flushers);
        self.io.space.lock().admits_leaf_work(floor, admitted)
    }

    fn maintain(&self, admitted: bool) -> Result<()> {
        self.maintain_buffers(admitted)?;
        if self.wal.bytes_since_checkpoint() >= self.opts.checkpoint_bytes() {
            self.checkpoint()?;
        }
        let n = self.c.maintenance.fetch_add(1, Ordering::Relaxed);
        let free = self.io.space.lock().free_zones();
        let over = n.is_multiple_of(64) && self.tight(free) && self.amp_over(false);
        if gc_policy::should_collect(free, self.opts.gc_reserve_zones) || over {
            self.gc(self.opts.gc_reserve_zones)?;
        } else if n.is_multiple_of(8)
            && gc_policy::drain_early(free, self.opts.gc_reserve_zones)
            && self.drains_values()
        {
            self.drain_values()?;
        }
        Ok(())
    }

    /// Early value-log reclamation: one value-log zone emptied (mostly
    /// through the buffers, which frees it only once it has drained), so
    /// zones drain before the reserve is reached. Skipped while a
    /// collection runs.
    fn drain_values(&self) -> Result<()> {
        let Some(_collector) = self.gc_lock.try_lock() else {
            return Ok(());
        };
        if self.zones_for_moves() <= self.opts.gc_reserve_zones as u64 {
            return Ok(()); // no room above the reserve for copies
        }
        // The best candidates in turn, until one is emptied or starts to
        // drain (a few: each costs a zone scan).
        let mut passed = Vec::new();
        for _ in 0..4 {
            let room = self.zones_for_moves();
            let victim = {
                let s = self.io.space.lock();
                let mut cands = self.value_candidates(&s, room);
                cands.retain(|c| !passed.contains(&c.zone));
                gc_policy::choose_victim(self.opts.gc, &cands)
            };
            let Some(z) = victim else {
                break;
            };
            let drains = self.c.drained_relocations.load(Ordering::Relaxed);
            if self.empty_value_zone(z)? {
                // Free at the next checkpoint, like the zones a collection
                // empties.
                self.io.space.lock().mark_pending_reset(z as usize);
                self.deferred.lock().remove(&z);
                self.c.gc_zones.fetch_add(1, Ordering::Relaxed);
                break;
            }
            if self.c.drained_relocations.load(Ordering::Relaxed) != drains {
                break;
            }
            passed.push(z);
        }
        Ok(())
    }

    /// Value-log zones reclamation may look at, with `room` free zones
    /// for moves: those not deferred, or whose deferral is due.
    fn value_candidates(&self, s: &ZoneSpace, room: u64) -> Vec<Candidate> {
        let deferred = self.deferred.lock();
        s.candidates(Role::Vlog, self.dev.geometry().zone_capacity)
            .into_iter()
            .filter(|c| deferred.get(&c.zone).is_none_or(|d| d.due(c.valid, room)))
            .collect()
    }

    /// Whether value-log zones may be emptied through the buffers (and
    /// need time to drain): the store has the merged filter and a value
    /// log.
    fn drains_values(&self) -> bool {
        self.opts.buffers_writes()
            && self
                .io
                .space
                .lock()
                .zones
                .iter()
                .any(|z| z.role == Role::Vlog)
    }

    /// Space is tight: fewer than a quarter of the data zones are free.
    /// Only then is reclamation worth running for amplification alone.
    fn tight(&self, free: usize) -> bool {
        let g = self.dev.geometry();
        let data = g.zone_count - 2 * self.opts.meta_zones - self.opts.wal_zones;
        free < data as usize / 4
    }

    /// Whether space amplification is above its bound.
    fn amp_over(&self, after_resets: bool) -> bool {
        let Some(bound) = self.opts.gc_space_amp else {
            return false;
        };
        let g = self.dev.geometry();
        let s = self.io.space.lock();
        s.used_data_zones() > self.opts.flushers + 1
            && s.amplification(g.zone_capacity, self.io.page_size as u64, after_resets) > bound
    }

    /// Reclaims zones until `want` are free and space amplification is
    /// within its bound (or nothing more can be freed). Emptied zones
    /// become free only at the next checkpoint, so one runs whenever
    /// migration would otherwise eat the last free zones.
    fn gc(&self, want: usize) -> Result<usize> {
        // One collector at a time: two could pick the same victim, and the
        // second mark it for reset after it was already reset and reopened.
        let _collector = self.gc_lock.lock();
        let mut total = 0;
        // The checkpoint that frees the emptied zones writes out buffered
        // pages and may take zones itself: go again while that leaves the
        // store short and the last pass got somewhere.
        for _ in 0..4 {
            let n = self.gc_pass(want)?;
            total += n;
            if n == 0 || self.io.space.lock().room() >= want {
                break;
            }
        }
        self.c.gc_zones.fetch_add(total as u64, Ordering::Relaxed);
        Ok(total)
    }

    /// One round of [`Inner::gc`], ending with the checkpoint that frees
    /// what it emptied.
    fn gc_pass(&self, want: usize) -> Result<usize> {
        let mut reclaimed = 0;
        // Value-log zones that could not be emptied in this pass.
        let mut passed: Vec<u32> = Vec::new();
        loop {
            let (free, pending) = {
                let s = self.io.space.lock();
                (s.free_zones(), s.pending_resets().len())
            };
            let short = free + pending < want;
            let over = self.tight(free + pending) && self.amp_over(true);
            // For amplification alone, a bounded amount of work per call.
            if !short && (!over || reclaimed >= 4) {
                break;
            }
            if pending > 0 && free <= self.opts.flushers {
                self.checkpoint()?;
                continue;
            }
            let room = self.zones_for_moves();
            let victim = {
                let s = self.io.space.lock();
                // A leaf zone's live pages must fit where migration writes.
                let fits = s.movable_pages();
                let mut cands: Vec<Candidate> = s.candidates(Role::Leaf, s.capacity_pages);
                cands.retain(|c| c.valid <= fits);
                cands.extend(self.value_candidates(&s, room));
                cands.retain(|c| !passed.contains(&c.zone));
                if !short {
                    // For amplification alone, only zones emptier than the
                    // bound's utilisation: migrating them lowers it.
                    let bound = self.opts.gc_space_amp.unwrap_or(f64::INFINITY);
                    cands.retain(|c| gc_policy::lowers_amplification(c, bound));
                }
                gc_policy::choose_victim(self.opts.gc, &cands)
            };
            let Some(z) = victim else {
                // Value-log zones that do not pay alone may together
                // (deferred ones too: the group's cost is bounded without
                // scanning them).
                if short {
                    let emptied = self.empty_value_zones_together()?;
                    if !emptied.is_empty() {
                        let mut s = self.io.space.lock();
                        for &z in &emptied {
                            s.mark_pending_reset(z as usize);
                            self.deferred.lock().remove(&z);
                        }
                        reclaimed += emptied.len();
                        passed.clear();
                        continue;
                    }
                }
                break;
            };
            let mut tree = self.tree.write();
            let role = {
                // Still a victim now that writers are held off?
                let s = self.io.space.lock();
                let zs = &s.zones[z as usize];
                (!zs.open && !zs.pending_reset).then_some(zs.role)
            };
            match role {
                Some(Role::Leaf) => {
                    tree.migrate_zone(z, &self.ctx())?;
                    drop(tree);
                }
                Some(Role::Vlog) => {
                    drop(tree);
                    if !self.empty_value_zone(z)? {
                        // Not now: the other candidates may still do.
                        passed.push(z);
                        continue;
                    }
                }
                _ => continue,
            }
            self.io.space.lock().mark_pending_reset(z as usize);
            self.deferred.lock().remove(&z);
            reclaimed += 1;
        }
        if !self.io.space.lock().pending_resets().is_empty() {
            self.checkpoint()?;
        }
        Ok(reclaimed)
    }

    /// Makes value-log zone `z` hold nothing live, moving its live records
    /// if it has any; false when that cannot be done now.
    fn empty_value_zone(&self, z: u32) -> Result<bool> {
        let valid = self.io.space.lock().zones[z as usize].valid;
        if valid == 0 {
            return Ok(true);
        }
        // The copies need free zones, and cannot pay if they alone fill
        // most of a zone (no scan needed to tell).
        let zone_bytes = self.dev.geometry().zone_capacity;
        if !gc_policy::relocation_pays(valid, zone_bytes, self.zones_for_moves()) {
            return Ok(false);
        }
        self.relocate_values(&[z])
    }

    /// Empties the value-log zones of a [`gc_policy::relocation_group`]
    /// with one direct move of all their live records, when none of them
    /// pays alone; returns the zones emptied (none if no group pays).
    fn empty_value_zones_together(&self) -> Result<Vec<u32>> {
        let leaf_bytes = self.tree.read().leaf_count() as u64 * self.io.page_size as u64;
        let room = self.zones_for_moves();
        let zone_bytes = self.dev.geometry().zone_capacity;
        let group = {
            let s = self.io.space.lock();
            let zones: Vec<(u32, u64)> = s
                .candidates(Role::Vlog, zone_bytes)
                .iter()
                .map(|c| (c.zone, c.valid))
                .collect();
            gc_policy::relocation_group(&zones, leaf_bytes, zone_bytes, room)
        };
        let Some(group) = group.filter(|g| g.len() > 1) else {
            return Ok(Vec::new());
        };
        self.relocate_values(&group)?;
        let s = self.io.space.lock();
        Ok(group
            .into_iter()
            .filter(|&z| s.zones[z as usize].valid == 0)
            .collect())
    }

    /// Free zones that moving value-log records may fill: all but those
    /// the admitted writes may take ([`ZoneSpace::movable`]) and those the
    /// checkpoint after the moves may take for the pool's dirty pages
    /// (baselines), so that checkpoint, which frees the emptied zones,
    /// always has room.
    fn zones_for_moves(&self) -> u64 {
        let dirty = self.lru.lock().dirty_frames() as u64 * self.io.page_size as u64;
        let checkpoint = dirty.div_ceil(self.dev.geometry().zone_capacity);
        self.io.space.lock().movable(checkpoint)
    }

    /// Copies the live records of the value-log `zones` to the log's head
    /// and points their pairs at the copies; true when nothing in them is
    /// live afterwards. The zones are scanned beside the writers
    /// ([`Inner::live_records`]); only the moves hold them off. Several
    /// zones are emptied together only the direct way, which rewrites
    /// each leaf pointing into any of them once.
    ///
    /// A record is live while any pair holds its location: the merged
    /// filter's, or the tree's for that key, visible or shadowed by a
    /// newer buffered pair. The merged filter's pair is replaced in place.
    /// For the tree's there are two ways, chosen by what they write:
    ///
    /// - *direct*: a leaf holding such a pair is merged with the copies of
    ///   its visible ones, which drops its shadowed ones, so the zone is
    ///   empty at once; it costs a page per leaf, which pays only when
    ///   few leaves point into the zone (large values);
    /// - *through the buffers*: the visible pairs' copies enter their
    ///   leaves' buffers as a batch and shadow them; the zone keeps counting
    ///   the shadowed pairs until their leaves merge their buffers (the
    ///   write path's own merges, amortised over many pairs), and is
    ///   deferred until then. This is the way for small values, whose
    ///   records are spread over many leaves.
    ///
    /// Each replaced location is released when its pair is dropped, so
    /// the zone's live count reaches zero exactly when no pair refers to
    /// it. The copies are durable with the next checkpoint, which comes
    /// before the zone is reset; a crash before it recovers a state in
    /// which the zone's records are still where its pairs point.
    fn relocate_values(&self, zones: &[u32]) -> Result<bool> {
        let (live, need, copies) = self.live_records(zones)?;
        // Worth it only if what is written takes at most three quarters of
        // the zones it frees, and fits in the free zones but one (a
        // flusher's next).
        let zone_bytes = self.dev.geometry().zone_capacity;
        let free = self.zones_for_moves();
        let use_mf = self.opts.buffers_writes();
        let n = zones.len() as u64;
        let direct = gc_policy::zones_relocation_pays(need, n, zone_bytes, free);
        // Moves through the buffers free nothing until the zone drains, so
        // they may not eat into the reserve that leaf migration, direct
        // moves and checkpoints count on. Zones emptied together go the
        // direct way only.
        let slack = free.saturating_sub(self.opts.gc_reserve_zones as u64);
        let buffered = n == 1 && use_mf && gc_policy::relocation_pays(copies, zone_bytes, u64::MAX);
        let buffered_fits = buffered && gc_policy::relocation_pays(copies, zone_bytes, slack);
        if !(direct || buffered_fits) {
            if let [z] = *zones {
                let valid = self.io.space.lock().zones[z as usize].valid;
                let why = if gc_policy::relocation_pays(need, zone_bytes, u64::MAX) || buffered {
                    // It would pay but does not fit.
                    gc_policy::retry_with_room(valid, free)
                } else {
                    // Too costly either way until more of it dies.
                    gc_policy::retry_below(valid)
                };
                self.deferred.lock().insert(z, why);
            }
            return Ok(false);
        }
        let held = self.wal.enter_all();
        let mut mf = self.mf.lock();
        if !self.finish_batches()? {
            // Not now: the leaves cannot take the rest of the array.
            return Ok(false);
        }
        // The finished array still answers reads ahead of the tree, with
        // the locations about to be replaced: retire it, now that the tree
        // holds all of it.
        *self.batches.write() = Arc::new(BatchArray::default());
        let mut tree = self.tree.write();
        let ctx = self.ctx();
        let mut in_mf = Vec::new();
        let mut to_tree = Vec::new();
        let mut direct_moves: Vec<(ZoneRecord, bool)> = Vec::new();
        let mut groups: std::collections::BTreeMap<u32, Vec<ZoneRecord>> = Default::default();
        for r in live {
            groups.entry(tree.find(&r.key)).or_default().push(r);
        }
        for (id, group) in groups {
            let items: Vec<(&[u8], u64)> = group.iter().map(|r| (&r.key[..], r.loc)).collect();
            let held = tree.holds_all(id, &items, &ctx)?;
            for (r, (visible, anywhere)) in group.into_iter().zip(held) {
                let above = if use_mf { mf.get(&r.key) } else { None };
                if above == Some(Val::Vlog(r.loc)) {
                    in_mf.push((r.key.clone(), r.value.clone()));
                }
                if direct && anywhere {
                    direct_moves.push((r, visible));
                } else if visible && above.is_none() {
                    // Through the buffers: only a pair nothing shadows
                    // needs a copy; a shadowed one dies at its leaf's next
                    // merge.
                    to_tree.push((r.key, r.value));
                }
            }
        }
        let copy = |key: &[u8], value: &[u8]| -> Result<Val> {
            self.c.relocated_values.fetch_add(1, Ordering::Relaxed);
            let mut v = self.vlog.lock();
            v.append(key, value, &self.io.space).map(Val::Vlog)
        };
        for (key, value) in in_mf {
            let old = mf.insert(Pair::new(&key, copy(&key, &value)?));
            self.release(old);
        }
        if !direct_moves.is_empty() {
            // By key, not by the leaves found above: rewriting one leaf may
            // join it with its neighbour or split it.
            let mut keys = Vec::with_capacity(direct_moves.len());
            let mut incoming = Vec::new();
            for (r, visible) in direct_moves {
                if visible {
                    incoming.push(Pair::new(&r.key, copy(&r.key, &r.value)?));
                }
                keys.push(r.key);
            }
            keys.sort();
            incoming.sort_by(|a, b| a.key().cmp(b.key()));
            tree.rewrite_leaves(&keys, incoming, &ctx)?;
        }
        if !to_tree.is_empty() {
            // Nothing above the tree holds these keys (the merged filter
            // was checked, the batch array is empty), so the copies are the
            // newest pairs: they go to the leaves' buffers like a batch.
            let mut batch = Vec::with_capacity(to_tree.len());
            for (key, value) in to_tree {
                batch.push(Pair::new(&key, copy(&key, &value)?));
            }
            batch.sort_by(|a, b| a.key().cmp(b.key()));
            tree.insert_batch(&batch, &ctx)?;
        }
        drop(tree);
        drop(mf);
        drop(held);
        let mut emptied = true;
        for &z in zones {
            let valid = self.io.space.lock().zones[z as usize].valid;
            if valid == 0 {
                continue;
            }
            emptied = false;
            if direct {
                log::warn!("zkv: value-log zone {z} keeps {valid} live bytes after relocation");
            } else {
                // Draining: look again once leaf merges have dropped most
                // of the shadowed pairs, when the direct way is cheap.
                self.c.drained_relocations.fetch_add(1, Ordering::Relaxed);
                self.deferred.lock().insert(z, gc_policy::drain_mark(valid));
            }
        }
        Ok(emptied)
    }

    /// The records of the value-log `zones` that a pair still points to, the
    /// bytes moving them directly would write (copies and rewritten
    /// leaves), and the bytes of the copies alone.
    /// Runs beside writers: a pair only moves down (merged filter → batch
    /// array → tree) or dies, so looking at the levels in that order misses
    /// no live record, and a record found dead stays dead (locations are
    /// never reused while the zone holds them).
    fn live_records(&self, zones: &[u32]) -> Result<(Vec<ZoneRecord>, u64, u64)> {
        let mut records = Vec::new();
        for &z in zones {
            records.extend(crate::vlog::records(self.dev.as_ref(), z)?);
        }
        let use_mf = self.opts.buffers_writes();
        let ctx = self.ctx();
        // By leaf, so that each leaf's page is read once.
        let mut groups: std::collections::BTreeMap<u32, Vec<ZoneRecord>> = Default::default();
        {
            let tree = self.tree.read();
            for r in records {
                groups.entry(tree.find(&r.key)).or_default().push(r);
            }
        }
        let mut live = Vec::new();
        let mut leaves = std::collections::HashSet::new();
        let mut bytes = 0;
        for group in groups.into_values() {
            let above: Vec<bool> = if use_mf {
                let mf = self.mf.lock();
                let arr = self.batches.read().clone();
                group
                    .iter()
                    .map(|r| {
                        let target = Some(Val::Vlog(r.loc));
                        mf.get(&r.key) == target || arr.get(&r.key) == target
                    })
                    .collect()
            } else {
                vec![false; group.len()]
            };
            // The tree after the buffers, under one hold: the leaf each key
            // belongs to now (a split may have moved it since grouping).
            let tree = self.tree.read();
            let mut by_leaf: std::collections::BTreeMap<u32, Vec<usize>> = Default::default();
            for (i, r) in group.iter().enumerate() {
                by_leaf.entry(tree.find(&r.key)).or_default().push(i);
            }
            let mut held = vec![(0u32, false, false); group.len()];
            for (id, idx) in by_leaf {
                let items: Vec<(&[u8], u64)> = idx
                    .iter()
                    .map(|&i| (&group[i].key[..], group[i].loc))
                    .collect();
                for (&i, (visible, anywhere)) in idx.iter().zip(tree.holds_all(id, &items, &ctx)?) {
                    held[i] = (id, visible, anywhere);
                }
            }
            drop(tree);
            for ((r, above), (id, visible, anywhere)) in group.into_iter().zip(above).zip(held) {
                if !(above || anywhere) {
                    continue;
                }
                if above || visible {
                    bytes += crate::vlog::RECORD_HEADER + crate::vlog::loc_len(r.loc);
                }
                leaves.insert(id);
                live.push(r);
            }
        }
        let pages = leaves.len() as u64 * self.io.page_size as u64;
        Ok((live, bytes + pages, bytes))
    }

    /// Inserts the batch array into the tree as far as the zones allow
    /// and waits for batches other writers are inserting; true when the
    /// whole array is in. The caller holds the merged filter, so no new
    /// array replaces it meanwhile.
    fn finish_batches(&self) -> Result<bool> {
        let arr = self.batches.read().clone();
        self.insert_batches(&arr, false)?;
        while !arr.settled() {
            std::thread::yield_now();
        }
        Ok(arr.finished())
    }

    fn checkpoint(&self) -> Result<()> {
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
        let pos = self.wal.position(&mut held);
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
        self.metalog.lock().write(&snap)?;
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

    fn resolve(&self, v: Val) -> Result<Option<Vec<u8>>> {
        match v {
            Val::Put(b) => Ok(Some(b.as_slice().to_vec())),
            Val::Vlog(loc) => self.vlog.lock().read(loc).map(Some),
            Val::Del => Ok(None),
        }
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if self.opts.buffers_writes() {
            if let Some(v) = self.mf.lock().get(key) {
                self.c.mf_hits.fetch_add(1, Ordering::Relaxed);
                return self.resolve(v);
            }
            let arr = self.batches.read().clone();
            if let Some(v) = arr.get(key) {
                self.c.batch_hits.fetch_add(1, Ordering::Relaxed);
                return self.resolve(v);
            }
        }
        let v = self.tree.read().get(key, &self.ctx())?;
        match v {
            Some(v) => self.resolve(v),
            None => Ok(None),
        }
    }

    /// Up to [`OVERLAY_CHUNK`] buffered pairs from `lo` on, merged (filter
    /// newest), and the key up to which they are complete (`None`: to `end`).
    fn overlay_chunk(&self, lo: Bound<&[u8]>, end: Bound<&[u8]>) -> (Vec<Pair>, Option<Vec<u8>>) {
        if !self.opts.buffers_writes() {
            return (Vec::new(), None);
        }
        let mf = self.mf.lock().range(lo, end, OVERLAY_CHUNK);
        let arr = self.batches.read().clone().range(lo, end, OVERLAY_CHUNK);
        let mut upto: Option<Vec<u8>> = None;
        for c in [&mf, &arr] {
            if c.len() >= OVERLAY_CHUNK {
                if let Some(last) = c.last() {
                    if upto.as_ref().is_none_or(|u| last.key() < u.as_slice()) {
                        upto = Some(last.key().to_vec());
                    }
                }
            }
        }
        let mut merged = crate::pair::merge_sorted(arr, mf);
        if let Some(u) = &upto {
            merged.retain(|p| p.key() <= u.as_slice());
        }
        (merged, upto)
    }

    /// Merges the tree with the buffers in rounds: a bounded chunk of
    /// buffered pairs is fetched without the tree lock (the lock order puts
    /// the buffers first), then the tree is scanned up to where that chunk
    /// is complete, so a short scan never copies the whole buffer.
    fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<u64> {
        let end = range.end;
        let mut lo: Bound<Vec<u8>> = match range.start {
            Bound::Included(k) => Bound::Included(k.to_vec()),
            Bound::Excluded(k) => Bound::Excluded(k.to_vec()),
            Bound::Unbounded => Bound::Unbounded,
        };
        let mut bytes = 0u64;
        let mut emit = |p: &Pair, bytes: &mut u64| -> Result<ControlFlow<()>> {
            match self.resolve(p.val.clone())? {
                Some(v) => {
                    *bytes += (p.key().len() + v.len()) as u64;
                    Ok(visit(p.key(), &v))
                }
                None => Ok(ControlFlow::Continue(())),
            }
        };
        loop {
            let lo_ref = match &lo {
                Bound::Included(k) => Bound::Included(k.as_slice()),
                Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
                Bound::Unbounded => Bound::Unbounded,
            };
            let (chunk, upto) = self.overlay_chunk(lo_ref, end);
            let hi = match &upto {
                Some(u) => Bound::Included(u.as_slice()),
                None => end,
            };
            let mut over = chunk.into_iter().peekable();
            let mut stop = false;
            {
                let tree = self.tree.read();
                tree.scan(lo_ref, hi, &self.ctx(), &mut |p| {
                    while let Some(o) = over.next_if(|o| o.key() < p.key()) {
                        if emit(&o, &mut bytes)?.is_break() {
                            stop = true;
                            return Ok(ControlFlow::Break(()));
                        }
                    }
                    let newer = over.next_if(|o| o.key() == p.key());
                    let cf = emit(newer.as_ref().unwrap_or(&p), &mut bytes)?;
                    stop = cf.is_break();
                    Ok(cf)
                })?;
            }
            if !stop {
                for o in over {
                    if emit(&o, &mut bytes)?.is_break() {
                        stop = true;
                        break;
                    }
                }
            }
            match upto {
                Some(u) if !stop => lo = Bound::Excluded(u),
                _ => return Ok(bytes),
            }
        }
    }
}

impl KvStore for ZkvStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        check_key(key)?;
        let me = &self.inner;
        me.check()?;
        let v = me.get(key)?;
        me.c.api.count_get(key, v.as_deref());
        Ok(v)
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let mut b = WriteBatch::new();
        b.put(key, value)?;
        self.inner.c.api.count_puts(1);
        self.inner
            .c
            .api
            .add_written((key.len() + value.len()) as u64);
        self.inner.write(&b)
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete(key)?;
        self.inner.c.api.count_delete();
        self.inner.write(&b)
    }

    fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        let me = &self.inner;
        me.check()?;
        me.c.api.count_scan();
        let bytes = me.scan(range, visit)?;
        me.c.api.add_read(bytes);
        Ok(())
    }

    fn write_batch(&self, batch: &WriteBatch) -> Result<()> {
        for op in batch.ops() {
            check_key(op.key())?;
            if let BatchOp::Put { value, .. } = op {
                check_value(value)?;
            }
        }
        self.inner.c.api.count_batch();
        self.inner.c.api.add_written(batch.payload_bytes() as u64);
        self.inner.write(batch)
    }

    fn flush(&self) -> Result<()> {
        self.checkpoint()
    }

    fn sync(&self) -> Result<()> {
        self.inner.sync_all()
    }

    fn stats(&self) -> Stats {
        let me = &self.inner;
        let c = &me.c;
        let tree = me.tree.read();
        let t = tree.c.clone();
        let (zone_writes, pages_written) = me.io.write_counts();
        let lru = me.lru.lock();
        let (hits, misses, evictions) = if me.opts.variant == Variant::Zkv {
            (
                me.io.cache.hits.load(Ordering::Relaxed),
                me.io.cache.misses.load(Ordering::Relaxed),
                0,
            )
        } else {
            (lru.hits, lru.misses, lru.evictions)
        };
        let mf = me.mf.lock();
        let mf_bytes = mf.bytes;
        let batch_bytes = me.batches.read().mem_bytes();
        let (wal_bytes, free_zones) = (me.wal.bytes_written(), me.io.space.lock().free_zones());
        let memory = mf_bytes
            + batch_bytes
            + tree.pool.bytes
            + tree.delta_bytes
            + me.io.cache.len() * (me.io.page_size + 64)
            + me.io.waiting_pages() * (me.io.page_size + 64)
            + lru.mem_bytes(me.io.page_size);
        let extra = vec![
            (
                "variant_zkv".into(),
                f64::from(u8::from(me.opts.variant == Variant::Zkv)),
            ),
            ("leaves".into(), tree.leaf_count() as f64),
            ("index_bytes".into(), tree.index_bytes() as f64),
            ("mf_bytes".into(), mf_bytes as f64),
            ("mf_valid_nodes".into(), mf.valid_nodes as f64),
            ("mf_shadow_removed".into(), mf.shadow_removed as f64),
            (
                "mf_evictions".into(),
                c.evictions.load(Ordering::Relaxed) as f64,
            ),
            ("mf_hits".into(), c.mf_hits.load(Ordering::Relaxed) as f64),
            (
                "batch_hits".into(),
                c.batch_hits.load(Ordering::Relaxed) as f64,
            ),
            ("adb_bytes".into(), tree.pool.bytes as f64),
            ("delta_bytes".into(), tree.delta_bytes as f64),
            ("pages_written".into(), pages_written as f64),
            ("zone_writes".into(), zone_writes as f64),
            ("pairs_to_pages".into(), t.pairs_to_pages as f64),
            ("adb_absorbs".into(), t.adb_absorbs as f64),
            ("direct_merges".into(), t.direct_merges as f64),
            ("pressure_merges".into(), t.pressure_merges as f64),
            ("consolidations".into(), t.consolidations as f64),
            ("splits".into(), t.splits as f64),
            ("removed_leaves".into(), t.removed_leaves as f64),
            ("joined_leaves".into(), t.joined_leaves as f64),
            ("batches".into(), t.batches as f64),
            ("batch_pairs".into(), t.batch_pairs as f64),
            ("traversals".into(), t.traversals as f64),
            ("migrated_pages".into(), t.migrated_pages as f64),
            ("gc_zones".into(), c.gc_zones.load(Ordering::Relaxed) as f64),
            (
                "refused_writes".into(),
                c.refused.load(Ordering::Relaxed) as f64,
            ),
            (
                "relocated_values".into(),
                c.relocated_values.load(Ordering::Relaxed) as f64,
            ),
            (
                "drained_relocations".into(),
                c.drained_relocations.load(Ordering::Relaxed) as f64,
            ),
            (
                "checkpoints".into(),
                c.checkpoints.load(Ordering::Relaxed) as f64,
            ),
            ("wal_bytes".into(), wal_bytes as f64),
            ("leaf_size".into(), me.io.page_size as f64),
            (
                "metalog_bytes".into(),
                me.metalog.lock().bytes_written as f64,
            ),
            ("vlog_bytes".into(), me.vlog.lock().bytes_written as f64),
            (
                "device_page_reads".into(),
                me.io.device_page_reads.load(Ordering::Relaxed) as f64,
            ),
            ("free_zones".into(), free_zones as f64),
        ];
        drop(mf);
        drop(lru);
        drop(tree);
        let mut extra = extra;
        extra.push(("space_amplification".into(), self.space_amplification()));
        Stats {
            ops: c.api.ops(),
            user_bytes_written: c.api.bytes_written(),
            user_bytes_read: c.api.bytes_read(),
            device: DeviceCounts::from(me.dev.io_stats()),
            cache: CacheCounts {
                hits,
                misses,
                evictions,
            },
            memory_bytes: memory as u64,
            extra,
        }
    }

    fn bulk_load(&self, sorted: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>) -> Result<u64> {
        let me = &self.inner;
        me.check()?;
        let r = {
            let _wal = me.wal.enter_all();
            let mf = me.mf.lock();
            let mut tree = me.tree.write();
            if !mf.is_empty() || !me.batches.read().finished() {
                return Err(Error::InvalidOptions(
                    "bulk load needs an empty store".into(),
                ));
            }
            tree.bulk_load(sorted, &mut |k, v| me.value_of(k, v), BULK_FILL, &me.ctx())
        };
        let n = me.poison_on(r)?;
        me.c.api.count_puts(n);
        let r = me.checkpoint();
        me.poison_on(r)?;
        Ok(n)
    }

    fn verify(&self) -> Result<()> {
        let me = &self.inner;
        me.check()?;
        me.mf
            .lock()
            .check()
            .map_err(|r| Error::corruption("zkv merged filter", r))?;
        // The tree's leaves and the zones' accounting of them; the guards
        // go before the scan below takes them again.
        {
            let tree = me.tree.read();
            tree.verify(&me.ctx())?;
            let s = me.io.space.lock();
            let counted = tree.pages_per_zone(s.zones.len(), s.pages_per_zone);
            for (z, zs) in s.zones.iter().enumerate() {
                if zs.role == Role::Leaf && zs.valid != counted[z] {
                    return Err(Error::corruption(
                        "zkv zone accounting",
                        format!(
                            "zone {z} counts {} valid pages; leaves point to {}",
                            zs.valid, counted[z]
                        ),
                    ));
                }
                if counted[z] > 0 && zs.role != Role::Leaf {
                    return Err(Error::corruption(
                        "zkv zone accounting",
                        format!("leaves point into zone {z}, which is not a leaf zone"),
                    ));
                }
            }
        }
        // Every answer the store gives, through the read path: buffered
        // pairs, leaf pages and the value-log records they point to (the
        // checks above read no value).
        me.scan(KeyRange::all(), &mut |_, _| ControlFlow::Continue(()))?;
        Ok(())
    }
}

impl Drop for ZkvStore {
    fn drop(&mut self) {
        drop(self.ticker.take());
        if self.inner.check().is_ok() {
            if let Err(e) = self.inner.checkpoint() {
                log::warn!("zkv: checkpoint at close failed: {e}");
            }
        }
    }
}

/// The facade's opener: ZKV with default options.
pub fn open_store(dir: &Path, options: &Options) -> Result<Box<dyn KvStore>> {
    Ok(Box::new(ZkvStore::open(
        dir,
        options,
        ZkvOptions::default(),
    )?))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

    use std::collections::BTreeMap;

    use ferrite_core::KvStoreExt;
    use ferrite_io::{MemDevice, ZoneGeometry};

    use super::*;

    fn opts() -> ZkvOptions {
        ZkvOptions {
            geometry: ZoneGeometry::small(24, 8, 8),
            wal_zones: 2,
            flushers: 2,
            mf_node_pairs: 8,
            inline_value_max: 64,
            ..ZkvOptions::default()
        }
    }

    fn open(dev: &Arc<dyn ZonedDevice>) -> ZkvStore {
        let o = Options {
            sync: SyncMode::Never,
            cache_bytes: 64 << 10,
            ..Options::default()
        };
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
