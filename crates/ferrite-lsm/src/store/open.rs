//! Opening a store: its devices, and recovery.
//!
//! Recovery loads the newer manifest slot, opens its tables (rebuilding
//! the free-extent list from them), replays the WALs from the log number
//! on, writes the replayed records as L0 tables and advances the log
//! number before a WAL device is reused. WALs that would replay with a
//! hole in them, and a manifest the WALs have moved past, are refused as
//! damage rather than read short.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use ferrite_core::engine::{PeriodicSync, Poison};
use ferrite_core::{
    BatchOp, EngineKind, Error, Options, Result, StoreIdentity, SyncMode, WalRecovery,
};
use ferrite_io::BlockDevice;
use ferrite_wal::Wal;
use parking_lot::{Condvar, Mutex, RwLock};

use super::devices::Devices;
use super::flush::build_from_memtable;
use super::publish::write_table;
use super::write::{decode_record, fresh_wal};
use super::{
    Counters, Inner, LsmStore, Meta, SuperVersion, Writer, FORMAT_VERSION, OLDEST_READABLE_FORMAT,
    WAL_DEVICES,
};
use crate::block_cache::BlockCache;
use crate::build_policy::LevelHistory;
use crate::manifest::{Manifest, ManifestState};
use crate::memtable::Memtable;
use crate::options::LsmOptions;
use crate::partition_buffer::PartitionBuffers;
use crate::range_del::RangeDels;
use crate::table::Table;
use crate::table_space::TableSpace;
use crate::version::Version;

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
    pub fn open_on(devices: Devices, options: &Options, mut lsm: LsmOptions) -> Result<Self> {
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
                    range_dels: Vec::new(),
                };
                manifest.store(&s)?;
                s
            }
        };
        if state.partitions as usize != lsm.partitions {
            // The partitioning is the layout of the data, fixed at
            // creation: tools that open any store (inspect, dump, the
            // server) need not know it.
            log::info!(
                "lsm: the store has {} partitions; opening it with those, not {}",
                state.partitions,
                lsm.partitions
            );
            if !(1..=1024).contains(&state.partitions) {
                return Err(Error::corruption(
                    "manifest",
                    format!("{} partitions", state.partitions),
                ));
            }
            lsm.partitions = state.partitions as usize;
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
        let mut version = Version::from_tables(lsm.partitions, lsm.levels, tables)
            .with_range_dels(state.range_dels.clone());

        // Replay the WALs of memtables not yet in tables. An operation of a
        // partition whose flush buffer had already written its memtable out
        // is in that partition's tables: it is skipped rather than copied
        // into a new table again (what is replayed is never older than
        // what the tables hold, so either way the newest version wins).
        let recovered =
            Memtable::with_partitions(state.log_number, lsm.partitions, lsm.memtable_bytes);
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
                        // A range delete whose memtable was flushed is in
                        // the manifest already.
                        BatchOp::DeleteRange { start, end }
                            if !state.range_dels.iter().any(|d| d.seq == s) =>
                        {
                            recovered.delete_range(start, end, s)
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
            let replayed_dels = recovered.range_dels();
            let dels =
                RangeDels::visible(version.range_dels.iter().chain(&replayed_dels), u64::MAX);
            let cuts: Vec<Vec<Vec<u8>>> = (0..lsm.partitions)
                .map(|p| version.flush_cuts(p, lsm.flush_pieces()))
                .collect();
            for (part, built) in build_from_memtable(&recovered, &lsm, &dels, &cuts) {
                let id = state.next_table;
                state.next_table += 1;
                added.push((part, 0, write_table(&space, &cache, id, &built)?));
            }
            space.sync()?;
            version = version.edit(&[], &added).with_range_dels(replayed_dels);
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
            state.range_dels = (*version.range_dels).clone();
            state.generation += 1;
            manifest.store(&state)?;
        }
        let mem_id = next_mem;
        let wal = Arc::new(fresh_wal(&devices, mem_id)?);
        let mem = Arc::new(Memtable::with_partitions(
            mem_id,
            lsm.partitions,
            lsm.memtable_bytes,
        ));
        let mut wal_slots: [Option<Arc<Wal>>; WAL_DEVICES] = Default::default();
        wal_slots[(mem_id % WAL_DEVICES as u64) as usize] = Some(wal.clone());
        let levels = lsm.levels;
        let parts = lsm.partitions;
        let inner = Arc::new(Inner {
            sync: options.sync,
            group: options
                .groups_writes()
                .then(ferrite_core::engine::WriteGroup::new),
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
            compacting: Mutex::new(()),
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
            log_floor: AtomicU64::new(0),
            snapshots: Default::default(),
            opts: lsm,
        });
        let spawn = |name: &str, f: fn(&Inner)| -> Result<JoinHandle<()>> {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || f(&inner))
                .map_err(|e| Error::resource(format!("the {name} thread"), e))
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
                    PeriodicSync::start("lsm-wal-sync", every, sync)
                        .map_err(|e| Error::resource("the lsm-wal-sync thread", e))?,
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
