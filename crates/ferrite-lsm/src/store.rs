//! [`LsmStore`]: the write path, reads through memtables and levels, the
//! flush and compaction threads, recovery, and the `KvStore` contract.
//!
//! Invariants:
//! - writes are sequenced under one writer lock: WAL append, memtable
//!   insert, then the visible sequence number moves; a write is durable per
//!   the sync mode before its call returns, and under `Batched(d)` a
//!   background thread syncs the live WAL every `d` so writes become
//!   durable within `d` even when no later write comes;
//! - memtable `m` logs to WAL device `m % WAL_DEVICES` with epoch `m`; a
//!   device is reset for a new memtable only after the memtable that used
//!   it before is in a table listed by a durable manifest (with
//!   partitions, after every partition's flush buffer has written it out:
//!   `partition_buffer`);
//! - the manifest is written before a new version is installed, and a
//!   table's extent is freed only after a durable manifest dropped it;
//! - readers take the current [`SuperVersion`] (memtable, immutable
//!   memtables, version) as one `Arc`, so a scan sees one consistent state;
//! - after any failed write or sync, foreground or background, every call
//!   returns `Error::Poisoned`.

use std::ops::{Bound, ControlFlow};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ferrite_core::{
    check_counter, check_key, check_value, ApiCounters, BatchOp, EngineKind, Error, KeyRange,
    KvStore, Options, PeriodicSync, Poison, Result, ScanVisitor, Stats, StoreIdentity, SyncMode,
    WalRecovery, WriteBatch,
};
use ferrite_io::{BlockDevice, DirectFile, DirectFileOptions};
use ferrite_wal::Wal;
use parking_lot::{Condvar, Mutex, RwLock};

use crate::block_cache::BlockCache;
use crate::build_policy::{self, Candidate, LevelHistory};
use crate::compaction::{self, LevelShape};
use crate::manifest::{Manifest, ManifestState};
use crate::memtable::Memtable;
use crate::merge::{LevelIter, MemSource, Merge, Source};
use crate::options::LsmOptions;
use crate::partition_buffer::{self, PartitionBuffers, Pending};
use crate::table::bloom::Bloom;
use crate::table::{BuiltTable, Found, Table, TableBuilder, TableIter};
use crate::table_space::TableSpace;
use crate::version::Version;

/// On-disk format version of an LSM store directory. Format 2 writes WAL
/// records that claim how far the log was synced (`docs/format/wal.md`),
/// which a format-1 build would read as the log's end. Format 3 writes
/// tables of version 2 (learned indexes with block-boundary thresholds),
/// which earlier builds refuse. Stores of formats 1 and 2 are read and
/// upgraded.
pub const FORMAT_VERSION: u32 = 3;
/// The oldest format this engine reads.
pub const OLDEST_READABLE_FORMAT: u32 = 1;
/// WAL devices, used in turn by successive memtables.
pub const WAL_DEVICES: usize = 4;

/// The devices a store runs on.
pub struct Devices {
    pub tables: Arc<dyn BlockDevice>,
    pub manifest: [Arc<dyn BlockDevice>; 2],
    pub wal: [Arc<dyn BlockDevice>; WAL_DEVICES],
}

impl Devices {
    /// The store's files in `dir`, with O_DIRECT if `direct`.
    pub fn open_dir(dir: &Path, direct: bool) -> Result<Self> {
        let open = |name: &str| -> Result<Arc<dyn BlockDevice>> {
            let opts = DirectFileOptions {
                direct,
                block_size: 4096,
                ..DirectFileOptions::default()
            };
            Ok(Arc::new(DirectFile::open_with(dir.join(name), opts)?))
        };
        Ok(Self {
            tables: open("tables")?,
            manifest: [open("manifest-0")?, open("manifest-1")?],
            wal: [
                open("wal-0")?,
                open("wal-1")?,
                open("wal-2")?,
                open("wal-3")?,
            ],
        })
    }

    fn all(&self) -> impl Iterator<Item = &Arc<dyn BlockDevice>> {
        std::iter::once(&self.tables)
            .chain(self.manifest.iter())
            .chain(self.wal.iter())
    }
}

/// What readers see: one consistent state.
struct SuperVersion {
    mem: Arc<Memtable>,
    /// Newest first.
    imms: Vec<Arc<Memtable>>,
    /// Flushed memtables whose entries of some partitions wait for a
    /// table (partitioned stores only).
    buffers: Arc<PartitionBuffers>,
    version: Arc<Version>,
}

struct Writer {
    mem: Arc<Memtable>,
    wal: Arc<Wal>,
    next_seq: u64,
    last_sync: Instant,
    /// The WAL of each device's last memtable, so a reset waits for
    /// stragglers still committing to it.
    wal_slots: [Option<Arc<Wal>>; WAL_DEVICES],
}

struct Meta {
    state: ManifestState,
    /// Per level, the key its last compaction ended at.
    cursors: Vec<Option<Vec<u8>>>,
    /// Per level, lookups and lifetimes of its tables (load-aware builds).
    history: Vec<LevelHistory>,
    /// Smoothed fitting cost, nanoseconds per entry.
    train_ns_per_entry: f64,
}

#[derive(Default)]
struct Counters {
    api: ApiCounters,
    flushes: AtomicU64,
    /// L0 tables written by flushes (of memtables or flush buffers).
    l0_flushed: AtomicU64,
    compactions: AtomicU64,
    moves: AtomicU64,
    compaction_read: AtomicU64,
    compaction_written: AtomicU64,
    stalls: AtomicU64,
    stall_micros: AtomicU64,
    max_stall_micros: AtomicU64,
    slowdowns: AtomicU64,
    training_micros: AtomicU64,
    partition_drops: AtomicU64,
    /// Load-aware decisions for compaction outputs.
    learned_builds: AtomicU64,
    sparse_builds: AtomicU64,
}

struct Inner {
    opts: LsmOptions,
    sync: SyncMode,
    devices: Devices,
    space: Arc<TableSpace>,
    cache: Arc<BlockCache>,
    manifest: Manifest,
    writer: Mutex<Writer>,
    /// Writers waiting for room (memtable slots, L0) wait here.
    room: Condvar,
    current: RwLock<Arc<SuperVersion>>,
    visible: AtomicU64,
    meta: Mutex<Meta>,
    /// Background threads sleep here; `shutdown` wakes them for good.
    bg: Mutex<bool>,
    bg_wake: Condvar,
    poisoned: Poison,
    counters: Counters,
    /// Set by `flush_locked` for the flush thread: write every partition's
    /// buffer out.
    drain: AtomicBool,
}

/// The LSM-tree engine (SwiftKV's base).
pub struct LsmStore {
    inner: Arc<Inner>,
    threads: Vec<JoinHandle<()>>,
    /// Syncs the live WAL every interval under `SyncMode::Batched`.
    ticker: Option<PeriodicSync>,
}

impl LsmStore {
    /// Opens or creates the store in directory `dir`.
    pub fn open(dir: &Path, options: &Options, lsm: LsmOptions) -> Result<Self> {
        options.validate()?;
        StoreIdentity::establish(
            dir,
            EngineKind::Lsm,
            OLDEST_READABLE_FORMAT..=FORMAT_VERSION,
            options,
        )?;
        Self::open_on(Devices::open_dir(dir, options.direct_io)?, options, lsm)
    }

    /// Opens or creates a store on the given devices (tests use
    /// fault-injecting ones).
    pub fn open_on(devices: Devices, options: &Options, lsm: LsmOptions) -> Result<Self> {
        options.validate()?;
        lsm.validate().map_err(Error::InvalidOptions)?;
        if lsm.max_immutable >= WAL_DEVICES {
            return Err(Error::InvalidOptions(format!(
                "max_immutable {} needs more than {WAL_DEVICES} WAL devices",
                lsm.max_immutable
            )));
        }
        let manifest = Manifest::new(devices.manifest.clone());
        let loaded = manifest.load()?;
        check_logs_behind(&devices, loaded.as_ref())?;
        let mut state = match loaded {
            Some(s) => s,
            None => {
                let s = ManifestState {
                    generation: 1,
                    next_table: 1,
                    log_number: 1,
                    last_seq: 0,
                    partitions: lsm.partitions as u32,
                    tables: Vec::new(),
                    part_logs: vec![1; lsm.partitions],
                };
                manifest.store(&s)?;
                s
            }
        };
        if state.partitions as usize != lsm.partitions {
            return Err(Error::InvalidOptions(format!(
                "the store has {} partitions; it cannot be opened with {}",
                state.partitions, lsm.partitions
            )));
        }
        let extents: Vec<_> = state
            .tables
            .iter()
            .map(|r| crate::table_space::Extent {
                start: r.start,
                pages: r.pages,
            })
            .collect();
        let space = Arc::new(TableSpace::open(devices.tables.clone(), &extents)?);
        let cache = Arc::new(BlockCache::new(options.cache_bytes));
        let mut tables = Vec::new();
        for r in &state.tables {
            if r.level as usize >= lsm.levels || r.partition as usize >= lsm.partitions {
                return Err(Error::corruption(
                    "manifest",
                    format!(
                        "table {} on level {} of partition {} ({} levels, {} partitions)",
                        r.id, r.level, r.partition, lsm.levels, lsm.partitions
                    ),
                ));
            }
            let extent = crate::table_space::Extent {
                start: r.start,
                pages: r.pages,
            };
            let t = Table::open(r.id, extent, space.clone(), cache.clone())?;
            tables.push((r.partition as usize, r.level as usize, Arc::new(t)));
        }
        let mut version = Version::from_tables(lsm.partitions, lsm.levels, tables);

        // Replay the WALs of memtables not yet in tables. An operation of a
        // partition whose flush buffer had already written its memtable out
        // is in that partition's tables: it is skipped rather than copied
        // into a new table again (what is replayed is never older than
        // what the tables hold, so either way the newest version wins).
        let recovered = Memtable::with_partitions(state.log_number, lsm.partitions);
        let part_logs = state.part_logs.clone();
        let replays = |m: u64, key: &[u8]| {
            part_logs
                .get(lsm.partition_of(key))
                .is_none_or(|&first| m >= first)
        };
        let mut max_seq = state.last_seq;
        let mut next_mem = state.log_number;
        let salvage = options.wal_recovery == WalRecovery::TruncateAtDamage;
        let cut = check_wal_ends(&devices, state.log_number, salvage)?;
        for m in state.log_number..state.log_number + WAL_DEVICES as u64 {
            let dev = devices.wal[(m % WAL_DEVICES as u64) as usize].clone();
            let mut records = 0u64;
            let (_, salvaged) = Wal::open_with(dev, m, options.wal_recovery, &mut |payload| {
                let (seq, batch) = decode_record(payload)?;
                for (i, op) in batch.ops().iter().enumerate() {
                    let s = seq + i as u64;
                    match op {
                        BatchOp::Put { key, value } if replays(m, key) => {
                            recovered.insert(key, s, Some(value))
                        }
                        BatchOp::Delete { key } if replays(m, key) => {
                            recovered.insert(key, s, None)
                        }
                        _ => {}
                    }
                    max_seq = max_seq.max(s);
                }
                records += 1;
                Ok(())
            })?;
            if let Some(s) = salvaged {
                log::warn!(
                    "lsm: the WAL of memtable {m} is damaged at offset {}: recovered up to \
                     it, {} bytes after it dropped",
                    s.offset,
                    s.dropped_bytes
                );
            }
            if records == 0 {
                break;
            }
            next_mem = m + 1;
            if cut == Some(m) {
                break;
            }
        }
        if let Some(m) = cut {
            // Salvaging past a damaged WAL: the WALs after it hold writes
            // made after the lost ones, which must not be replayed over the
            // hole. Emptied before the manifest moves on, so a crash in
            // between recovers the same prefix.
            log::warn!("lsm: the WALs after memtable {m}'s are dropped");
            for later in next_mem..state.log_number + WAL_DEVICES as u64 {
                let dev = &devices.wal[(later % WAL_DEVICES as u64) as usize];
                dev.set_len(0)?;
                dev.sync()?;
            }
        }
        let counters = Counters::default();
        if !recovered.is_empty() {
            // Make the replayed writes a table, so the WAL devices can be
            // reused from a clean slate.
            let mut added = Vec::new();
            for (part, built) in build_from_memtable(&recovered, &lsm) {
                let id = state.next_table;
                state.next_table += 1;
                added.push((part, 0, write_table(&space, &cache, id, built)?));
            }
            space.sync()?;
            version = version.edit(&[], &added);
        }
        let all_replayed = vec![next_mem; lsm.partitions];
        if next_mem != state.log_number
            || max_seq != state.last_seq
            || state.part_logs != all_replayed
        {
            state.log_number = next_mem;
            state.part_logs = all_replayed;
            state.last_seq = max_seq;
            state.tables = version.records();
            state.generation += 1;
            manifest.store(&state)?;
        }
        let mem_id = next_mem;
        let wal = Arc::new(fresh_wal(&devices, mem_id)?);
        let mem = Arc::new(Memtable::with_partitions(mem_id, lsm.partitions));
        let mut wal_slots: [Option<Arc<Wal>>; WAL_DEVICES] = Default::default();
        wal_slots[(mem_id % WAL_DEVICES as u64) as usize] = Some(wal.clone());
        let levels = lsm.levels;
        let parts = lsm.partitions;
        let inner = Arc::new(Inner {
            sync: options.sync,
            devices,
            space,
            cache,
            manifest,
            writer: Mutex::new(Writer {
                mem: mem.clone(),
                wal,
                next_seq: max_seq + 1,
                last_sync: Instant::now(),
                wal_slots,
            }),
            room: Condvar::new(),
            current: RwLock::new(Arc::new(SuperVersion {
                mem,
                imms: Vec::new(),
                buffers: Arc::new(PartitionBuffers::new(parts)),
                version: Arc::new(version),
            })),
            visible: AtomicU64::new(max_seq),
            meta: Mutex::new(Meta {
                state,
                cursors: vec![None; levels * parts],
                history: vec![LevelHistory::default(); levels],
                train_ns_per_entry: 200.0,
            }),
            bg: Mutex::new(false),
            bg_wake: Condvar::new(),
            poisoned: Poison::new(),
            counters,
            drain: AtomicBool::new(false),
            opts: lsm,
        });
        let spawn = |name: &str, f: fn(&Inner)| -> Result<JoinHandle<()>> {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || f(&inner))
                .map_err(|e| Error::InvalidOptions(format!("cannot start {name}: {e}")))
        };
        let threads = vec![
            spawn("lsm-flush", Inner::flush_loop)?,
            spawn("lsm-compact", Inner::compaction_loop)?,
        ];
        let ticker = match options.sync {
            SyncMode::Batched(every) => {
                let inner = inner.clone();
                let sync = move || {
                    inner.check()?;
                    let wal = inner.writer.lock().wal.clone();
                    wal.sync().inspect_err(|e| inner.poison(e))
                };
                Some(
                    PeriodicSync::start("lsm-wal-sync", every, sync).map_err(|e| {
                        Error::InvalidOptions(format!("cannot start lsm-wal-sync: {e}"))
                    })?,
                )
            }
            _ => None,
        };
        Ok(Self {
            inner,
            threads,
            ticker,
        })
    }

    /// Waits until no compaction is due (for benchmarks that measure a
    /// settled tree, and for tests).
    pub fn wait_for_compactions(&self) -> Result<()> {
        loop {
            self.inner.check()?;
            let sv = self.inner.current.read().clone();
            if sv.imms.is_empty() && self.inner.due_compaction(&sv.version).is_none() {
                return Ok(());
            }
            self.inner.wake();
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Compacts every partition's L0 into L1 now (what RocksDB's
    /// `CompactRange` does for L0), then waits for the compactions that
    /// causes below. Memtables are not flushed first: call
    /// [`KvStore::flush`] before for everything to leave memory.
    pub fn compact_l0(&self) -> Result<()> {
        // A background compaction of the same L0 may win the install; the
        // loop then finds less to do.
        for _ in 0..16 {
            self.inner.check()?;
            let v = self.inner.current.read().version.clone();
            let busy: Vec<usize> = (0..v.parts.len())
                .filter(|&p| v.levels(p).first().is_some_and(|l0| !l0.is_empty()))
                .collect();
            if busy.is_empty() {
                break;
            }
            for p in busy {
                self.inner
                    .compact(&v, p, 0)
                    .inspect_err(|e| self.inner.poison(e))?;
            }
        }
        self.wait_for_compactions()
    }

    /// Deletes every key of partition `part` at once, without tombstones
    /// (SwiftKV's per-partition range deletion): the memtables are flushed
    /// first, so every write so far is in tables, then the partition's
    /// tables leave the version in one manifest write. Writers wait
    /// meanwhile; a compaction of the partition in flight is discarded.
    pub fn drop_partition(&self, part: usize) -> Result<()> {
        let inner = &self.inner;
        if part >= inner.opts.partitions {
            return Err(Error::InvalidOptions(format!(
                "partition {part} does not exist (the store has {})",
                inner.opts.partitions
            )));
        }
        let mut w = inner.writer.lock();
        inner.flush_locked(&mut w)?;
        let mut meta = inner.meta.lock();
        let cur = inner.current.read().clone();
        let removed: Vec<Arc<Table>> = cur.version.levels(part).iter().flatten().cloned().collect();
        let ids: Vec<u64> = removed.iter().map(|t| t.id).collect();
        inner.publish(&mut meta, cur.version.edit(&ids, &[]), None)?;
        for t in &removed {
            t.mark_obsolete();
        }
        inner
            .counters
            .partition_drops
            .fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Levels, tables and index blocks, for `ferrite inspect` and reports.
    pub fn report(&self) -> LsmReport {
        let sv = self.inner.current.read().clone();
        let levels = (0..self.inner.opts.levels)
            .map(|l| {
                let ts: Vec<&Arc<Table>> = sv
                    .version
                    .tables()
                    .filter(|(_, tl, _)| *tl == l)
                    .map(|(_, _, t)| t)
                    .collect();
                ts
            })
            .map(|ts| LevelReport {
                tables: ts.len(),
                bytes: ts.iter().map(|t| t.bytes()).sum(),
                entries: ts.iter().map(|t| t.footer.entries).sum(),
                learned_tables: ts.iter().filter(|t| t.index.is_learned()).count(),
                index_bytes: ts.iter().map(|t| t.footer.index_len as u64).sum(),
                model_segments: ts.iter().map(|t| t.index.model_segments() as u64).sum(),
                index_memory: ts.iter().map(|t| t.memory_bytes() as u64).sum(),
            })
            .collect();
        LsmReport {
            levels,
            memtable_bytes: sv.mem.bytes() as u64
                + sv.imms.iter().map(|m| m.bytes() as u64).sum::<u64>()
                + sv.buffers
                    .memtables()
                    .iter()
                    .map(|m| m.bytes() as u64)
                    .sum::<u64>(),
            buffered_bytes: sv.buffers.bytes() as u64,
            cache_bytes: self.inner.cache.bytes() as u64,
        }
    }
}

/// One level in an [`LsmReport`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LevelReport {
    pub tables: usize,
    pub bytes: u64,
    pub entries: u64,
    pub learned_tables: usize,
    /// Encoded index-block bytes of the level's tables.
    pub index_bytes: u64,
    pub model_segments: u64,
    /// Filters, indexes and table handles in memory.
    pub index_memory: u64,
}

/// The shape of the tree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LsmReport {
    pub levels: Vec<LevelReport>,
    /// Memtables in memory: the active one, the immutable ones and those
    /// flush buffers still hold.
    pub memtable_bytes: u64,
    /// Table bytes the partitions' flush buffers hold.
    pub buffered_bytes: u64,
    pub cache_bytes: u64,
}

impl LsmReport {
    pub fn index_bytes(&self) -> u64 {
        self.levels.iter().map(|l| l.index_bytes).sum()
    }
}

/// A new, empty WAL for memtable `mem_id`, on the device it takes in turn.
/// Its first record, synced at once, is an empty batch: it marks the
/// device as memtable `mem_id`'s from the start, which is what
/// [`check_logs_behind`] reads.
fn fresh_wal(devices: &Devices, mem_id: u64) -> Result<Wal> {
    let dev = devices.wal[(mem_id % WAL_DEVICES as u64) as usize].clone();
    dev.set_len(0)?;
    dev.sync()?;
    let wal = Wal::open(dev, mem_id, &mut |_| Ok(()))?;
    let lsn = wal.append(&encode_record(0, &WriteBatch::new()))?;
    wal.commit(lsn, true)?;
    Ok(wal)
}

/// Refuses WALs that replay would read with a hole in them. A memtable's
/// WAL is synced before the next memtable's WAL begins, so only the last
/// WAL can end short (torn by a crash) or hold nothing yet; an earlier one
/// that stops before its end, or holds no record, is damaged. Replay
/// would stop there and silently drop the acknowledged writes of it and
/// of every WAL after it. Surveyed before any is opened, since opening a
/// WAL cuts it off at its end. When `salvage`, the damaged WAL's memtable
/// is returned instead: replay stops after it.
fn check_wal_ends(devices: &Devices, log_number: u64, salvage: bool) -> Result<Option<u64>> {
    let mut surveys = Vec::with_capacity(WAL_DEVICES);
    for m in log_number..log_number + WAL_DEVICES as u64 {
        let dev = &devices.wal[(m % WAL_DEVICES as u64) as usize];
        surveys.push((m, ferrite_wal::survey(dev.as_ref(), m)?));
    }
    let Some(last) = surveys.iter().rposition(|(_, s)| s.records > 0) else {
        return Ok(None);
    };
    for &(m, s) in &surveys[..last] {
        if s.records == 0 || s.end != ferrite_wal::LogEnd::Clean {
            if salvage {
                return Ok(Some(m));
            }
            return Err(Error::corruption(
                "lsm wal",
                format!(
                    "the WAL of memtable {m} ends short ({:?}) after {} records, yet \
                     memtable {}'s WAL follows it",
                    s.end, s.records, surveys[last].0
                ),
            ));
        }
    }
    Ok(None)
}

/// Refuses a manifest the WALs have moved past. A WAL device is given to
/// memtable `m + WAL_DEVICES` only after memtable `m` is in tables a
/// manifest names, so a device holding a memtable at least
/// `WAL_DEVICES` past the manifest's log number proves a newer manifest
/// was committed: the one that should have loaded is damaged, and
/// replaying from the older one would drop what it named (and cut off
/// the WALs it does not expect). `loaded` is `None` for a new store,
/// whose log number is 1.
fn check_logs_behind(devices: &Devices, loaded: Option<&ManifestState>) -> Result<()> {
    let log_number = loaded.map_or(1, |s| s.log_number);
    for dev in &devices.wal {
        let Some(mem) = ferrite_wal::first_epoch(dev.as_ref())? else {
            continue;
        };
        if mem >= log_number.saturating_add(WAL_DEVICES as u64) {
            return Err(Error::corruption(
                "manifest",
                format!(
                    "a WAL holds memtable {}, so a manifest with log number {} or later \
                     was committed, but the newest valid one{} has log number {log_number}",
                    mem,
                    mem.saturating_sub(WAL_DEVICES as u64 - 1),
                    loaded.map_or(" (none: the store looks new)".to_string(), |s| format!(
                        ", generation {},",
                        s.generation
                    )),
                ),
            ));
        }
    }
    Ok(())
}

/// A WAL record: `seq: u64 LE` then the batch's encoding.
fn encode_record(seq: u64, ops: &WriteBatch) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + ops.encoded_len());
    out.extend_from_slice(&seq.to_le_bytes());
    ops.encode(&mut out);
    out
}

fn decode_record(payload: &[u8]) -> Result<(u64, WriteBatch)> {
    let (seq, rest) = payload
        .split_first_chunk::<8>()
        .ok_or_else(|| Error::corruption("lsm wal", "record shorter than its sequence number"))?;
    let seq = u64::from_le_bytes(*seq);
    let batch = WriteBatch::decode(rest)?;
    // The batch's last sequence number must be one a store can reach, so
    // the numbers replay hands out after it cannot overflow.
    seq.checked_add(batch.len() as u64)
        .and_then(check_counter)
        .ok_or_else(|| {
            Error::corruption(
                "lsm wal",
                format!("sequence number {seq} is past any a store reaches"),
            )
        })?;
    Ok((seq, batch))
}

/// What a flush moves on: the memtable it took from the immutable list
/// (none when it only empties the buffers), the flush buffers after it,
/// and the oldest memtable not yet flushed.
struct Flushed {
    mem: Option<Arc<Memtable>>,
    buffers: Arc<PartitionBuffers>,
    next: u64,
}

/// One table per partition in `due`, from what its flush buffer holds
/// (each key's newest version over the buffered memtables), in one pass
/// over the memtables.
fn build_from_buffers(
    buffers: &PartitionBuffers,
    due: &[usize],
    opts: &LsmOptions,
) -> Result<Vec<(usize, BuiltTable)>> {
    let parts = opts.partitions;
    let mut is_due = vec![false; parts];
    for &p in due {
        if let Some(d) = is_due.get_mut(p) {
            *d = true;
        }
    }
    let sources: Vec<Box<dyn Source>> = buffers
        .memtables()
        .into_iter()
        .map(|m| {
            let wanted: Vec<bool> = (0..parts)
                .map(|p| is_due[p] && buffers.holds(p, m.id()))
                .collect();
            Box::new(buffered_source(m, u64::MAX, Bound::Unbounded, wanted)) as Box<dyn Source>
        })
        .collect();
    let mut merged = Merge::new(sources);
    let mut builders: Vec<Option<TableBuilder>> = (0..parts).map(|_| None).collect();
    let (mut k, mut v) = (Vec::new(), Vec::new());
    while let Some(live) = merged.next_into(&mut k, &mut v)? {
        if let Some(slot) = builders.get_mut(opts.partition_of(&k)) {
            slot.get_or_insert_with(|| {
                TableBuilder::new(opts.index, opts.bloom_bits_per_key, opts.training_threads)
            })
            .add(&k, live.then_some(v.as_slice()));
        }
    }
    Ok(builders
        .into_iter()
        .enumerate()
        .filter_map(|(p, b)| Some((p, b?.finish()?)))
        .collect())
}

/// A buffered memtable as a merge source: only the keys of partitions
/// `wanted` marks (its other partitions' entries are in tables, where
/// newer versions may be).
fn buffered_source(
    mem: Arc<Memtable>,
    seq: u64,
    start: Bound<&[u8]>,
    wanted: Vec<bool>,
) -> MemSource {
    let keep = move |k: &[u8]| {
        wanted
            .get(crate::options::partition_of(k, wanted.len()))
            .copied()
            .unwrap_or(false)
    };
    MemSource::filtered(mem, seq, start, Some(Box::new(keep)))
}

/// One table per partition with entries, from a memtable's newest
/// versions (the shared memtable is split by partition at flush).
fn build_from_memtable(mem: &Memtable, opts: &LsmOptions) -> Vec<(usize, BuiltTable)> {
    let mut builders: Vec<Option<TableBuilder>> = (0..opts.partitions).map(|_| None).collect();
    mem.for_each_newest(|k, v| {
        if let Some(slot) = builders.get_mut(opts.partition_of(k)) {
            slot.get_or_insert_with(|| {
                TableBuilder::new(opts.index, opts.bloom_bits_per_key, opts.training_threads)
            })
            .add(k, v);
        }
    });
    builders
        .into_iter()
        .enumerate()
        .filter_map(|(p, b)| Some((p, b?.finish()?)))
        .collect()
}

fn write_table(
    space: &Arc<TableSpace>,
    cache: &Arc<BlockCache>,
    id: u64,
    built: BuiltTable,
) -> Result<Arc<Table>> {
    let extent = space.allocate(built.pages());
    if let Err(e) = space.write(extent, &built.bytes) {
        space.release(extent);
        return Err(e);
    }
    Ok(Arc::new(Table::open(
        id,
        extent,
        space.clone(),
        cache.clone(),
    )?))
}

impl Inner {
    fn check(&self) -> Result<()> {
        self.poisoned.check()
    }

    fn poison(&self, e: &Error) {
        self.poisoned.set(e);
        self.room.notify_all();
        self.wake();
    }

    fn wake(&self) {
        let _g = self.bg.lock();
        self.bg_wake.notify_all();
    }

    fn shutting_down(&self) -> bool {
        *self.bg.lock()
    }

    fn write(&self, batch: &WriteBatch) -> Result<()> {
        self.check()?;
        if batch.is_empty() {
            return Ok(());
        }
        let payload_bytes = batch.payload_bytes() as u64;
        let (wal, lsn, sync_now) = {
            let mut w = self.writer.lock();
            self.make_room(&mut w)?;
            let seq = w.next_seq;
            let n = batch.len() as u64;
            // Replay refuses a record whose numbers reach the limit.
            ferrite_core::persistable_counter(seq + n, "lsm wal")?;
            let lsn = w
                .wal
                .append(&encode_record(seq, batch))
                .inspect_err(|e| self.poison(e))?;
            for (i, op) in batch.ops().iter().enumerate() {
                let s = seq + i as u64;
                match op {
                    BatchOp::Put { key, value } => w.mem.insert(key, s, Some(value)),
                    BatchOp::Delete { key } => w.mem.insert(key, s, None),
                }
            }
            w.next_seq += n;
            self.visible.store(seq + n - 1, Ordering::Release);
            let sync_now = match self.sync {
                SyncMode::Always => true,
                SyncMode::Batched(d) if w.last_sync.elapsed() >= d => {
                    w.last_sync = Instant::now();
                    true
                }
                _ => false,
            };
            (w.wal.clone(), lsn, sync_now)
        };
        self.counters.api.add_written(payload_bytes);
        let r = if sync_now {
            wal.commit(lsn, true)
        } else {
            wal.write_if_over(1 << 20)
        };
        r.inspect_err(|e| self.poison(e))
    }

    /// Makes room for a write: rotates a full memtable and waits while
    /// too many memtables or L0 tables are waiting for the background.
    fn make_room(&self, w: &mut parking_lot::MutexGuard<'_, Writer>) -> Result<()> {
        let mut stalled: Option<Instant> = None;
        let mut slowed = false;
        loop {
            self.check()?;
            let (imms, l0) = {
                let sv = self.current.read();
                (sv.imms.len(), sv.version.max_l0())
            };
            let full = w.mem.bytes() >= self.opts.memtable_bytes;
            if l0 >= self.opts.l0_stop || (full && imms >= self.opts.max_immutable) {
                stalled.get_or_insert_with(Instant::now);
                self.wake();
                self.room.wait_for(w, Duration::from_millis(20));
                continue;
            }
            if l0 >= self.opts.l0_slowdown && !slowed {
                // Delay the write, once, to let compaction catch up before
                // writers must stop.
                slowed = true;
                self.counters.slowdowns.fetch_add(1, Ordering::Relaxed);
                self.room.wait_for(w, Duration::from_millis(1));
                continue;
            }
            if full {
                self.rotate(w)?;
            }
            break;
        }
        if let Some(t) = stalled {
            let us = t.elapsed().as_micros() as u64;
            self.counters.stalls.fetch_add(1, Ordering::Relaxed);
            self.counters.stall_micros.fetch_add(us, Ordering::Relaxed);
            self.counters
                .max_stall_micros
                .fetch_max(us, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Makes the memtable immutable and starts the next one on its own WAL
    /// device.
    fn rotate(&self, w: &mut Writer) -> Result<()> {
        let id = w.mem.id() + 1;
        let slot = (id % WAL_DEVICES as u64) as usize;
        // The device's previous memtable is flushed (at most
        // `max_immutable` wait); a writer that appended to its WAL may
        // still be committing, so wait until none holds it.
        if let Some(old) = w.wal_slots[slot].take() {
            while Arc::strong_count(&old) > 1 {
                std::thread::yield_now();
            }
        }
        // The old memtable's WAL is made durable before the next one
        // starts: recovery replays WALs in order and stops at the first
        // empty one, so a later WAL must never outlive an earlier one.
        w.wal.sync().inspect_err(|e| self.poison(e))?;
        let wal = Arc::new(fresh_wal(&self.devices, id).inspect_err(|e| self.poison(e))?);
        w.wal_slots[slot] = Some(wal.clone());
        let mem = Arc::new(Memtable::with_partitions(id, self.opts.partitions));
        let old = std::mem::replace(&mut w.mem, mem.clone());
        w.wal = wal;
        {
            let mut cur = self.current.write();
            let mut imms = Vec::with_capacity(cur.imms.len() + 1);
            imms.push(old);
            imms.extend(cur.imms.iter().cloned());
            *cur = Arc::new(SuperVersion {
                mem,
                imms,
                buffers: cur.buffers.clone(),
                version: cur.version.clone(),
            });
        }
        self.wake();
        Ok(())
    }

    /// Makes every memtable a table (the caller holds the writer lock, so
    /// no write slips in).
    fn flush_locked(&self, w: &mut parking_lot::MutexGuard<'_, Writer>) -> Result<()> {
        self.check()?;
        if !w.mem.is_empty() {
            while self.current.read().imms.len() >= self.opts.max_immutable {
                self.check()?;
                self.wake();
                self.room.wait_for(w, Duration::from_millis(20));
            }
            self.rotate(w)?;
        }
        while !self.current.read().imms.is_empty() {
            self.check()?;
            self.wake();
            self.room.wait_for(w, Duration::from_millis(20));
        }
        // The flush buffers' entries go to tables too (the flush thread
        // writes them; no memtable can be flushed meanwhile).
        while self.current.read().buffers.bytes() > 0 {
            self.check()?;
            self.drain.store(true, Ordering::Release);
            self.wake();
            self.room.wait_for(w, Duration::from_millis(20));
        }
        self.check()
    }

    fn next_table_id(&self) -> u64 {
        let mut m = self.meta.lock();
        let id = m.state.next_table;
        m.state.next_table += 1;
        id
    }

    /// Writes a new version: manifest first, then the in-memory switch,
    /// then the removed tables may go.
    /// Returns false (installing nothing) when an input is no longer live
    /// (its partition was dropped meanwhile); the caller discards its
    /// outputs.
    fn install(
        &self,
        removed: &[Arc<Table>],
        added: &[(usize, usize, Arc<Table>)],
        flushed: Option<&Flushed>,
    ) -> Result<bool> {
        let mut meta = self.meta.lock();
        let cur = self.current.read().clone();
        let ids: Vec<u64> = removed.iter().map(|t| t.id).collect();
        if !cur.version.contains_all(&ids) {
            return Ok(false);
        }
        self.publish(&mut meta, cur.version.edit(&ids, added), flushed)?;
        for t in removed {
            t.mark_obsolete();
        }
        Ok(true)
    }

    /// Makes `v` current (the caller holds the meta lock): the manifest
    /// first, with `flushed` advancing the log numbers, then one swap of
    /// the `SuperVersion`, which drops `flushed`'s memtable from the
    /// immutables and adopts its buffers.
    fn publish(&self, meta: &mut Meta, v: Version, flushed: Option<&Flushed>) -> Result<()> {
        let mut state = meta.state.clone();
        state.tables = v.records();
        if let Some(f) = flushed {
            state.part_logs = f.buffers.part_logs(f.next);
            state.log_number = state.part_logs.iter().copied().min().unwrap_or(f.next);
            if let Some(m) = &f.mem {
                state.last_seq = state.last_seq.max(m.max_seq());
            }
        }
        self.store_manifest(meta, state)?;
        {
            let mut c = self.current.write();
            let gone = flushed.and_then(|f| f.mem.as_ref()).map(|m| m.id());
            let imms = c
                .imms
                .iter()
                .filter(|m| gone != Some(m.id()))
                .cloned()
                .collect();
            *c = Arc::new(SuperVersion {
                mem: c.mem.clone(),
                imms,
                buffers: flushed.map_or_else(|| c.buffers.clone(), |f| f.buffers.clone()),
                version: Arc::new(v),
            });
        }
        self.room.notify_all();
        Ok(())
    }

    /// Writes `state` as the next generation and adopts it. The in-memory
    /// state changes only once the write is durable, and a poisoned store
    /// writes nothing: a manifest written after a failure could pair the
    /// failed step's counters with a table list that lacks its tables.
    fn store_manifest(&self, meta: &mut Meta, mut state: ManifestState) -> Result<()> {
        self.check()?;
        state.generation = meta.state.generation + 1;
        if let Err(e) = self.manifest.store(&state) {
            self.poison(&e);
            return Err(e);
        }
        // Table ids handed out meanwhile stay reserved.
        state.next_table = state.next_table.max(meta.state.next_table);
        meta.state = state;
        Ok(())
    }

    fn flush_loop(&self) {
        loop {
            let job = {
                let mut stop = self.bg.lock();
                loop {
                    if *stop || self.poisoned.is_set() {
                        return;
                    }
                    let cur = self.current.read().clone();
                    if let Some(m) = cur.imms.last().cloned() {
                        break Some(m);
                    }
                    if self.drain.load(Ordering::Acquire) {
                        if cur.buffers.bytes() > 0 {
                            break None;
                        }
                        self.drain.store(false, Ordering::Release);
                    }
                    self.bg_wake.wait_for(&mut stop, Duration::from_millis(100));
                }
            };
            let r = match &job {
                Some(imm) => self.flush_one(imm),
                None => self.drain_buffers(),
            };
            if let Err(e) = r {
                log::error!("flush failed: {e}");
                self.poison(&e);
                return;
            }
        }
    }

    /// The options L0 tables are written with.
    fn l0_options(&self) -> LsmOptions {
        let mut opts = self.opts.clone();
        if opts.load_aware.is_some() {
            // L0 tables live briefly (SwiftKV builds models from L1 on).
            opts.index = crate::options::IndexKind::Sparse;
        }
        opts
    }

    /// Moves the oldest immutable memtable out: unpartitioned, into one L0
    /// table; partitioned, into the flush buffers, writing the partitions
    /// [`partition_buffer::due`] names to L0.
    fn flush_one(&self, imm: &Arc<Memtable>) -> Result<()> {
        let opts = self.l0_options();
        let cur = self.current.read().clone();
        let mut buffers = (*cur.buffers).clone();
        let built = if opts.partitions == 1 {
            build_from_memtable(imm, &opts)
        } else {
            for (p, part) in buffers.parts.iter_mut().enumerate() {
                let bytes = imm.partition_bytes(p);
                if bytes > 0 {
                    part.insert(
                        0,
                        Pending {
                            mem: imm.clone(),
                            bytes,
                        },
                    );
                }
            }
            let due = partition_buffer::due(
                &buffers.summary(),
                opts.table_bytes,
                imm.id(),
                partition_buffer::retained(WAL_DEVICES, opts.max_immutable),
            );
            let built = build_from_buffers(&buffers, &due, &opts)?;
            for p in due {
                if let Some(part) = buffers.parts.get_mut(p) {
                    part.clear();
                }
            }
            built
        };
        let flushed = Flushed {
            mem: Some(imm.clone()),
            buffers: Arc::new(buffers),
            next: imm.id() + 1,
        };
        self.install_l0(built, &flushed)
    }

    /// Writes every partition's flush buffer to L0 (for `flush`).
    fn drain_buffers(&self) -> Result<()> {
        let opts = self.l0_options();
        let cur = self.current.read().clone();
        let due: Vec<usize> = (0..opts.partitions)
            .filter(|&p| cur.buffers.pending(p).next().is_some())
            .collect();
        let built = build_from_buffers(&cur.buffers, &due, &opts)?;
        let flushed = Flushed {
            mem: None,
            buffers: Arc::new(PartitionBuffers::new(opts.partitions)),
            next: cur.imms.last().map_or(cur.mem.id(), |m| m.id()),
        };
        self.install_l0(built, &flushed)
    }

    /// Writes `built` as L0 tables and installs them with `flushed`.
    fn install_l0(&self, built: Vec<(usize, BuiltTable)>, flushed: &Flushed) -> Result<()> {
        let mut added = Vec::new();
        for (part, built) in built {
            self.counters
                .training_micros
                .fetch_add(built.training_micros, Ordering::Relaxed);
            let t = write_table(&self.space, &self.cache, self.next_table_id(), built)?;
            added.push((part, 0, t));
        }
        if !added.is_empty() {
            self.space.sync()?;
        }
        self.install(&[], &added, Some(flushed))?;
        self.counters.flushes.fetch_add(1, Ordering::Relaxed);
        self.counters
            .l0_flushed
            .fetch_add(added.len() as u64, Ordering::Relaxed);
        self.wake();
        Ok(())
    }

    /// The most overdue (partition, level), if any.
    fn due_compaction(&self, v: &Version) -> Option<(usize, usize, f64)> {
        (0..v.parts.len())
            .filter_map(|p| {
                let shape: Vec<LevelShape> = v
                    .levels(p)
                    .iter()
                    .enumerate()
                    .map(|(l, ts)| LevelShape {
                        tables: ts.len(),
                        bytes: v.level_bytes(p, l),
                    })
                    .collect();
                compaction::pick_level(&shape, &self.opts).map(|(l, score)| (p, l, score))
            })
            .max_by(|a, b| a.2.total_cmp(&b.2))
    }

    fn compaction_loop(&self) {
        loop {
            if self.shutting_down() || self.poisoned.is_set() {
                return;
            }
            let v = self.current.read().version.clone();
            let Some((part, level, _)) = self.due_compaction(&v) else {
                let mut stop = self.bg.lock();
                if !*stop {
                    self.bg_wake.wait_for(&mut stop, Duration::from_millis(100));
                }
                continue;
            };
            if let Err(e) = self.compact(&v, part, level) {
                log::error!("compaction of level {level} failed: {e}");
                self.poison(&e);
                return;
            }
        }
    }

    fn compact(&self, v: &Version, part: usize, level: usize) -> Result<()> {
        let slot = part * self.opts.levels + level;
        let cursor = self.meta.lock().cursors.get(slot).cloned().flatten();
        let Some(job) = compaction::plan(v, part, level, cursor.as_deref()) else {
            return Ok(());
        };
        if let Some(last) = job.upper.iter().map(|t| t.largest()).max() {
            if let Some(c) = self.meta.lock().cursors.get_mut(slot) {
                *c = Some(last.to_vec());
            }
        }
        if job.is_move() {
            let t = job.upper[0].clone();
            // Same table, one level down: no bytes move.
            self.install_move(&t, part, level + 1)?;
            self.counters.moves.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let opts = self.output_options(&job);
        let mut outputs = Vec::new();
        let mut written = 0u64;
        compaction::merge(&job, v, &opts, &mut |built| {
            if self.shutting_down() {
                return Err(Error::InvalidOptions("store is closing".into()));
            }
            written += built.bytes.len() as u64;
            self.counters
                .training_micros
                .fetch_add(built.training_micros, Ordering::Relaxed);
            if built.training_micros > 0 && built.entries > 0 {
                let ns = built.training_micros as f64 * 1e3 / built.entries as f64;
                let mut m = self.meta.lock();
                m.train_ns_per_entry = 0.75 * m.train_ns_per_entry + 0.25 * ns;
            }
            let t = write_table(&self.space, &self.cache, self.next_table_id(), built)?;
            outputs.push((part, level + 1, t));
            Ok(())
        })
        .or_else(|e| match e {
            // Closing abandons the job; its outputs are not in any manifest.
            Error::InvalidOptions(_) if self.shutting_down() => Ok(()),
            e => Err(e),
        })?;
        if self.shutting_down() {
            for (_, _, t) in &outputs {
                t.mark_obsolete();
            }
            return Ok(());
        }
        self.space.sync()?;
        let inputs: Vec<Arc<Table>> = job.upper.iter().chain(&job.lower).cloned().collect();
        if !self.install(&inputs, &outputs, None)? {
            for (_, _, t) in &outputs {
                t.mark_obsolete();
            }
            return Ok(());
        }
        {
            // The consumed tables' lookups and lifetimes feed their levels.
            let mut m = self.meta.lock();
            for (lvl, tables) in [(level, &job.upper), (level + 1, &job.lower)] {
                if tables.is_empty() {
                    continue;
                }
                let (c, t) = mean_use(tables);
                if let Some(h) = m.history.get_mut(lvl) {
                    h.observe(c, t);
                }
            }
        }
        let c = &self.counters;
        c.compactions.fetch_add(1, Ordering::Relaxed);
        c.compaction_read
            .fetch_add(job.input_bytes(), Ordering::Relaxed);
        c.compaction_written.fetch_add(written, Ordering::Relaxed);
        Ok(())
    }

    /// The options a compaction writes its outputs with: the configured
    /// index, or under load-aware construction the policy's choice.
    fn output_options(&self, job: &compaction::Job) -> LsmOptions {
        let mut opts = self.opts.clone();
        let Some(la) = opts.load_aware.filter(|_| opts.index.is_learned()) else {
            return opts;
        };
        let inputs: Vec<Arc<Table>> = job.upper.iter().chain(&job.lower).cloned().collect();
        let (c, t) = mean_use(&inputs);
        let entries: u64 = inputs.iter().map(|x| x.footer.entries).sum();
        let m = self.meta.lock();
        let cand = Candidate {
            lookups: c,
            lifetime_secs: t,
            saving_secs: la.saving_ns * 1e-9,
            training_secs: m.train_ns_per_entry * 1e-9 * entries as f64
                / inputs.len().max(1) as f64,
        };
        let level = m.history.get(job.level + 1).copied().unwrap_or_default();
        drop(m);
        if build_policy::should_learn(&cand, &level) {
            self.counters.learned_builds.fetch_add(1, Ordering::Relaxed);
        } else {
            self.counters.sparse_builds.fetch_add(1, Ordering::Relaxed);
            opts.index = crate::options::IndexKind::Sparse;
        }
        opts
    }

    fn install_move(&self, t: &Arc<Table>, part: usize, to: usize) -> Result<()> {
        let mut meta = self.meta.lock();
        let cur = self.current.read().clone();
        if !cur.version.contains_all(&[t.id]) {
            return Ok(());
        }
        self.publish(
            &mut meta,
            cur.version.edit(&[t.id], &[(part, to, t.clone())]),
            None,
        )
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let seq = self.visible.load(Ordering::Acquire);
        let sv = self.current.read().clone();
        if let Some(v) = sv.mem.get(key, seq) {
            return Ok(v);
        }
        for m in &sv.imms {
            if let Some(v) = m.get(key, seq) {
                return Ok(v);
            }
        }
        let part = self.opts.partition_of(key);
        for m in sv.buffers.pending(part) {
            if let Some(v) = m.get(key, seq) {
                return Ok(v);
            }
        }
        Ok(match sv.version.get(part, key, Bloom::hash(key))? {
            Some(Found::Value(v)) => Some(v),
            Some(Found::Deleted) | None => None,
        })
    }

    fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<u64> {
        let seq = self.visible.load(Ordering::Acquire);
        let sv = self.current.read().clone();
        let start = match range.start {
            Bound::Included(k) | Bound::Excluded(k) => Some(k),
            Bound::Unbounded => None,
        };
        let mut sources: Vec<Box<dyn Source>> = Vec::new();
        sources.push(Box::new(MemSource::new(sv.mem.clone(), seq, range.start)));
        for m in &sv.imms {
            sources.push(Box::new(MemSource::new(m.clone(), seq, range.start)));
        }
        for m in sv.buffers.memtables() {
            let wanted = (0..self.opts.partitions)
                .map(|p| sv.buffers.holds(p, m.id()))
                .collect();
            sources.push(Box::new(buffered_source(m, seq, range.start, wanted)));
        }
        // Partitions split keys by hash, not range: a scan merges every
        // partition's levels (what partitioning costs scans).
        for levels in &sv.version.parts {
            for (level, tables) in levels.iter().enumerate() {
                if level == 0 {
                    for t in tables {
                        sources.push(Box::new(TableIter::new(t.clone(), start)?));
                    }
                } else if !tables.is_empty() {
                    sources.push(Box::new(LevelIter::new(tables.clone(), start)?));
                }
            }
        }
        let mut merged = Merge::new(sources);
        let mut read = 0u64;
        let (mut k, mut v) = (Vec::new(), Vec::new());
        while let Some(live) = merged.next_into(&mut k, &mut v)? {
            if !range.before_end(&k) {
                break;
            }
            if !range.after_start(&k) {
                continue;
            }
            if live {
                read += (k.len() + v.len()) as u64;
                if visit(&k, &v) == ControlFlow::Break(()) {
                    break;
                }
            }
        }
        Ok(read)
    }

    /// Checks every table: blocks' checksums, key order, the recorded key
    /// range, every learned window, and the levels' order.
    fn verify(&self) -> Result<()> {
        let sv = self.current.read().clone();
        for levels in &sv.version.parts {
            for (level, tables) in levels.iter().enumerate().skip(1) {
                for pair in tables.windows(2) {
                    if let [a, b] = pair {
                        if a.largest() >= b.smallest() {
                            return Err(Error::corruption(
                                format!("level {level}"),
                                format!("tables {} and {} overlap or are out of order", a.id, b.id),
                            ));
                        }
                    }
                }
            }
        }
        for (part, _, t) in sv.version.tables() {
            verify_table(t, part, &self.opts)?;
        }
        Ok(())
    }
}

/// Mean lookups and lifetime (seconds) of `tables`.
fn mean_use(tables: &[Arc<Table>]) -> (f64, f64) {
    let n = tables.len().max(1) as f64;
    let c = tables
        .iter()
        .map(|t| t.lookups.load(Ordering::Relaxed) as f64)
        .sum::<f64>()
        / n;
    let t = tables
        .iter()
        .map(|t| t.created.elapsed().as_secs_f64())
        .sum::<f64>()
        / n;
    (c, t)
}

fn verify_table(t: &Arc<Table>, part: usize, opts: &LsmOptions) -> Result<()> {
    let bad = |why: String| Error::corruption(format!("table {}", t.id), why);
    let mut it = TableIter::sequential(t.clone())?;
    let mut prev: Option<Vec<u8>> = None;
    let mut n = 0u64;
    while let Some((k, _)) = it.peek() {
        if prev.as_deref().is_some_and(|p| p >= k) {
            return Err(bad("keys out of order".into()));
        }
        if opts.partition_of(k) != part {
            return Err(bad(format!(
                "entry {n} belongs to another partition than {part}"
            )));
        }
        if n == 0 && k != t.smallest() {
            return Err(bad("first key differs from the recorded smallest".into()));
        }
        // Every key must be found where the index sends a lookup.
        let found = t.seek(k, false)?;
        if found
            .as_ref()
            .and_then(|(_, b, s)| b.entry(*s))
            .map(|(fk, _)| fk)
            != Some(k)
        {
            return Err(bad(format!("index does not find entry {n}")));
        }
        prev = Some(k.to_vec());
        n += 1;
        it.advance()?;
    }
    if n != t.footer.entries {
        return Err(bad(format!(
            "{n} entries, footer says {}",
            t.footer.entries
        )));
    }
    if prev.as_deref() != Some(t.largest()) {
        return Err(bad("last key differs from the recorded largest".into()));
    }
    Ok(())
}

impl KvStore for LsmStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        check_key(key)?;
        self.inner.check()?;
        let v = self.inner.get(key)?;
        self.inner.counters.api.count_get(key, v.as_deref());
        Ok(v)
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        check_key(key)?;
        check_value(value)?;
        let mut b = WriteBatch::new();
        b.put(key, value)?;
        self.inner.write(&b)?;
        self.inner.counters.api.count_puts(1);
        Ok(())
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        check_key(key)?;
        let mut b = WriteBatch::new();
        b.delete(key)?;
        self.inner.write(&b)?;
        self.inner.counters.api.count_delete();
        Ok(())
    }

    fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.inner.check()?;
        let read = self.inner.scan(range, visit)?;
        let c = &self.inner.counters;
        c.api.count_scan();
        c.api.add_read(read);
        Ok(())
    }

    fn write_batch(&self, batch: &WriteBatch) -> Result<()> {
        self.inner.write(batch)?;
        self.inner.counters.api.count_batch();
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        let mut w = self.inner.writer.lock();
        self.inner.flush_locked(&mut w)
    }

    fn settle(&self) -> Result<()> {
        self.flush()?;
        self.wait_for_compactions()
    }

    fn sync(&self) -> Result<()> {
        self.inner.check()?;
        let wal = self.inner.writer.lock().wal.clone();
        wal.sync().inspect_err(|e| self.inner.poison(e))
    }

    fn stats(&self) -> Stats {
        let inner = &self.inner;
        let c = &inner.counters;
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let device = inner
            .devices
            .all()
            .map(|d| ferrite_core::DeviceCounts::from(d.io_stats()))
            .fold(Default::default(), |a, b| a + b);
        let report = self.report();
        let table_memory: u64 = report.levels.iter().map(|l| l.index_memory).sum();
        let mut extra = vec![
            ("flushes".to_string(), ld(&c.flushes) as f64),
            ("l0_flushed_tables".to_string(), ld(&c.l0_flushed) as f64),
            ("compactions".to_string(), ld(&c.compactions) as f64),
            ("trivial_moves".to_string(), ld(&c.moves) as f64),
            (
                "compaction_bytes_read".to_string(),
                ld(&c.compaction_read) as f64,
            ),
            (
                "compaction_bytes_written".to_string(),
                ld(&c.compaction_written) as f64,
            ),
            ("write_stalls".to_string(), ld(&c.stalls) as f64),
            ("write_stall_micros".to_string(), ld(&c.stall_micros) as f64),
            (
                "max_write_stall_micros".to_string(),
                ld(&c.max_stall_micros) as f64,
            ),
            ("write_slowdowns".to_string(), ld(&c.slowdowns) as f64),
            ("training_micros".to_string(), ld(&c.training_micros) as f64),
            (
                "load_aware_learned".to_string(),
                ld(&c.learned_builds) as f64,
            ),
            ("load_aware_sparse".to_string(), ld(&c.sparse_builds) as f64),
            ("partition_drops".to_string(), ld(&c.partition_drops) as f64),
            ("index_bytes".to_string(), report.index_bytes() as f64),
            ("table_memory_bytes".to_string(), table_memory as f64),
            ("memtable_bytes".to_string(), report.memtable_bytes as f64),
            (
                "flush_buffer_bytes".to_string(),
                report.buffered_bytes as f64,
            ),
        ];
        for (l, lr) in report.levels.iter().enumerate() {
            extra.push((format!("l{l}_tables"), lr.tables as f64));
            extra.push((format!("l{l}_bytes"), lr.bytes as f64));
            extra.push((format!("l{l}_learned_tables"), lr.learned_tables as f64));
            extra.push((format!("l{l}_index_bytes"), lr.index_bytes as f64));
            extra.push((format!("l{l}_model_segments"), lr.model_segments as f64));
        }
        Stats {
            ops: c.api.ops(),
            user_bytes_written: c.api.bytes_written(),
            user_bytes_read: c.api.bytes_read(),
            device,
            cache: inner.cache.counts(),
            memory_bytes: report.cache_bytes + report.memtable_bytes + table_memory,
            extra,
        }
    }

    fn verify(&self) -> Result<()> {
        self.inner.check()?;
        self.inner.verify()
    }
}

impl Drop for LsmStore {
    fn drop(&mut self) {
        drop(self.ticker.take());
        *self.inner.bg.lock() = true;
        self.inner.bg_wake.notify_all();
        self.inner.room.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        if !self.inner.poisoned.is_set() {
            // Sealed, so damage to any of the log is told from a torn tail.
            let wal = self.inner.writer.lock().wal.clone();
            if let Err(e) = wal.seal() {
                log::error!("closing sync of the WAL failed: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_whose_sequence_numbers_pass_the_counter_limit_is_damage() {
        let mut batch = WriteBatch::new();
        batch.put(b"a", b"1").unwrap().delete(b"b").unwrap();
        let last_ok = ferrite_core::COUNTER_LIMIT - 3;
        let (seq, got) = decode_record(&encode_record(last_ok, &batch)).unwrap();
        assert_eq!((seq, got.len()), (last_ok, 2));
        for seq in [last_ok + 1, u64::MAX - 1] {
            assert!(matches!(
                decode_record(&encode_record(seq, &batch)),
                Err(Error::Corruption { .. })
            ));
        }
    }
}
