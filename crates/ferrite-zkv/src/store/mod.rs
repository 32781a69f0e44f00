//! [`ZkvStore`]: the ZKV engine and its baselines, and the [`KvStore`]
//! contract.
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
//! Under `SyncMode::Always` concurrent writers form a write group: one
//! leader writes every queued batch, then syncs and maintains once.
//! Once writes stop for two seconds after many deletes, a background
//! thread settles the store: the buffers go into the leaves a slice at a
//! time and reclamation takes the zones that leaves garbage, stopping at
//! the next write (`gc_policy::settles`), so a mass delete or expiry gives
//! its space back without further writes.
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
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | [`ZkvStore`], its shared state and memory budget, `KvStore` |
//! | `open.rs` | the zoned device, recovery (MetaLog snapshot, buffered pairs, WAL replay) |
//! | `write.rs` | the write path: admission, WAL, merged filter, maintenance |
//! | `read.rs` | lookups and scans through the buffers and the tree |
//! | `reclaim.rs` | zone reclamation: leaf and value-log victims, relocation, draining, settling when idle |
//! | `checkpoint.rs` | MetaLog snapshots and what they make obsolete |
//! | `stats.rs` | the engine's counters as [`Stats`] |

mod checkpoint;
mod open;
mod read;
mod reclaim;
mod snapshot;
mod stats;
mod write;

pub use stats::ZkvStats;

use std::ops::ControlFlow;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use ferrite_core::engine::{
    check_key, check_value, ApiCounters, Instrumented, PeriodicSync, Poison, SnapshotChain,
};
use ferrite_core::{
    BatchOp, Error, KeyRange, KvStore, Result, ScanVisitor, Stats, StoreSnapshot, SyncMode,
    WriteBatch, WriteCheck,
};
use ferrite_io::ZonedDevice;
use parking_lot::{Mutex, RwLock};

use crate::batch_array::BatchArray;
use crate::gc_policy::Deferral;
use crate::lru_pool::LruPool;
use crate::merged_filter::MergedFilter;
use crate::metalog::MetaLog;
use crate::options::{Variant, ZkvOptions};
use crate::page_io::PageIo;
use crate::tree::{Ctx, Tree};
use crate::vlog::Vlog;
use crate::zone_space::Role;
use crate::zone_wal::ZoneWal;

/// On-disk format version in the identity file. Format 5 adds checkpoint
/// marks to the WAL; format 6 makes WAL records claim how far the log was
/// synced (`docs/format/zkv.md`); format 7 logs range deletes (tag 3 of
/// `docs/format/write-batch.md`), which older builds refuse; format 8 may
/// store value-log values compressed (`vlog`), which older builds would
/// return as stored. Format-4 to -7 stores are read and upgraded.
pub const FORMAT_VERSION: u32 = 8;
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
    /// Batches applied (any path); the idle pass's clock of writes.
    applied: AtomicU64,
    /// Deletes applied (a range delete counts each key it removed).
    deletes: AtomicU64,
    /// Times an idle store settled (see `Inner::settle`).
    settles: AtomicU64,
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
    /// Writers grouped behind one leader (`Options::write_group`), or
    /// `None` when each writes for itself.
    group: Option<ferrite_core::engine::WriteGroup>,
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
    /// Old versions kept for live snapshots (buffers and leaves update in
    /// place).
    snapshots: Arc<SnapshotChain>,
    /// Value-log zones not to scan again until what kept them from
    /// being emptied has changed.
    deferred: Mutex<std::collections::HashMap<u32, Deferral>>,
    c: Counters,
}

/// The ZKV engine (and its two baselines, by [`Variant`]).
pub struct ZkvStore {
    inner: Arc<Inner>,
    /// Set by the first close (explicit or on drop).
    closed: bool,
    /// Syncs the WAL every interval under `SyncMode::Batched`.
    ticker: Option<PeriodicSync>,
    /// Settles the store once writes stop (`Inner::settle`).
    idle: Option<PeriodicSync>,
}

impl ZkvStore {
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
    pub(super) fn sync_all(&self) -> Result<()> {
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
}

impl Inner {
    /// A scan in either direction, counted.
    fn scan_counted(
        &self,
        range: KeyRange<'_>,
        rev: bool,
        visit: &mut ScanVisitor<'_>,
    ) -> Result<()> {
        self.check()?;
        self.c.api.count_scan();
        let bytes = if rev {
            self.scan_rev(range, visit)?
        } else {
            self.scan(range, visit)?
        };
        self.c.api.add_read(bytes);
        Ok(())
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
        self.inner.scan_counted(range, false, visit)
    }

    fn scan_rev(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.inner.scan_counted(range, true, visit)
    }

    fn write_batch_if(&self, batch: &WriteBatch, check: &mut WriteCheck<'_>) -> Result<bool> {
        if batch.is_empty() {
            return Ok(true);
        }
        let done = self.inner.write_if(batch, check)?;
        if done {
            self.inner.c.api.count_batch();
            self.inner.c.api.add_written(batch.payload_bytes() as u64);
        }
        Ok(done)
    }

    fn snapshot(&self) -> Result<Box<dyn StoreSnapshot>> {
        self.inner.check()?;
        Ok(Box::new(snapshot::ZkvSnapshot::take(&self.inner)))
    }

    fn close(self: Box<Self>) -> Result<()> {
        (*self).close()
    }

    fn write_batch(&self, batch: &WriteBatch) -> Result<()> {
        for op in batch.ops() {
            for k in op.keys() {
                check_key(k)?;
            }
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
        self.collect_stats()
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

impl Instrumented for ZkvStore {}

impl ZkvStore {
    /// Stops the sync thread, puts the buffered pairs into the leaves,
    /// reclaims the zones whose garbage keeps space amplification above
    /// its bound, and writes a MetaLog snapshot as the only one of both
    /// slots, so recovery has no log to replay and the
    /// MetaLog holds two copies of one snapshot; reports what failed.
    pub fn close(mut self) -> Result<()> {
        self.shut_down()
    }

    fn shut_down(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        drop(self.ticker.take());
        drop(self.idle.take());
        self.inner.check()?;
        let r = self
            .inner
            .drain_buffers()
            .and_then(|()| self.inner.compact_for_space())
            .and_then(|_| self.inner.checkpoint_to(checkpoint::Snapshots::Alone));
        self.inner.poison_on(r)
    }
}

impl Drop for ZkvStore {
    fn drop(&mut self) {
        if let Err(e) = self.shut_down() {
            if !self.inner.poisoned.is_set() {
                log::warn!("zkv: checkpoint at close failed: {e}");
            }
        }
    }
}
