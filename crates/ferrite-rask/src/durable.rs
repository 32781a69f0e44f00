//! Persistence for the index (beyond the paper, which leaves it to the
//! block store): a checksummed snapshot plus an append-only redo log.
//!
//! Files (each a `BlockDevice`, so tests run them on `FaultyDevice`):
//! `snapshot-0`, `snapshot-1` and `log`. Snapshot `e` (an epoch) goes to
//! slot `e % 2` and holds every mapped run, disjoint and ascending; the
//! log holds the puts and deletes since snapshot `e`, as records of epoch
//! `e` (format: `docs/format/rask-snapshot.md`, log: `docs/format/wal.md`).
//!
//! Invariants:
//! - the newest valid snapshot plus the log records of its epoch is the
//!   index as of the last acknowledged write (with `SyncMode::Always`);
//! - a snapshot is written and synced before the log moves to its epoch,
//!   so a crash at any point leaves either the old snapshot with the whole
//!   old log, or the new snapshot (which includes that log);
//! - a log moved to epoch `e` starts with a synced epoch mark, so a log
//!   ahead of the newest valid snapshot can only mean snapshot `e` is
//!   damaged: recovery refuses it rather than fall back to `e - 1`, whose
//!   log is gone;
//! - log records are appended and applied to the index in one order, under
//!   the writer lock, so replay rebuilds exactly the live index;
//! - after a failed log write or sync the store is poisoned: every later
//!   write fails (the log reports it) until the store is reopened;
//! - under `SyncMode::Batched(d)` a background thread syncs the log every
//!   `d`, and closing the index syncs it, in every mode.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrite_core::engine::{PeriodicSync, Poison};
use ferrite_core::{EngineKind, Options, StoreIdentity, SyncMode};
use ferrite_io::{AlignedBuf, BlockDevice, DirectFile, DirectFileOptions};
use ferrite_wal::Wal;
use parking_lot::Mutex;

use crate::entry::Segment;
use crate::error::{RaskError, Result};
use crate::index::{Rask, RaskOptions, RaskStats};
use crate::range::BlockRange;
use crate::value::RangeValue;

/// The store's format in its identity file. Format 2 adds the log's epoch
/// marks; format 3 writes log records that claim how far the log was
/// synced (`docs/format/wal.md`), which an older build would read as the
/// log's end. Older stores are read and upgraded.
const STORE_FORMAT: u32 = 3;
const OLDEST_READABLE_STORE_FORMAT: u32 = 1;
/// The snapshot header's format.
const SNAPSHOT_FORMAT: u32 = 1;
const MAGIC: &[u8; 8] = b"FRRASKSN";
const HEADER_LEN: usize = 48;
const OP_PUT: u8 = 1;
const OP_DELETE: u8 = 2;
/// The first record of a log reset to a new epoch (no body): it says the
/// snapshot of that epoch was complete, so recovery can tell a damaged
/// snapshot from one a crash interrupted.
const OP_EPOCH: u8 = 3;
/// Snapshot payload is written in pieces of this size.
const WRITE_CHUNK: usize = 4 << 20;

/// The devices a durable index lives on.
pub struct RaskDevices {
    pub snapshots: [Arc<dyn BlockDevice>; 2],
    pub log: Arc<dyn BlockDevice>,
}

/// How a durable index is opened.
#[derive(Debug, Clone)]
pub struct DurableOptions {
    /// Durability mode, creation flags and O_DIRECT (its `cache_bytes` is
    /// unused: the index is wholly in memory).
    pub store: Options,
    pub index: RaskOptions,
    /// A snapshot is taken once the log passes this many bytes.
    pub checkpoint_log_bytes: u64,
    /// Unsynced log records are written (not synced) once more than this
    /// many bytes wait in memory. `usize::MAX` keeps them in memory until
    /// [`DurableRask::sync`], for an owner that must order the log's
    /// writes after its own (a block store syncs its data first).
    pub log_write_threshold: usize,
}

impl Default for DurableOptions {
    fn default() -> Self {
        Self {
            store: Options::default(),
            index: RaskOptions::default(),
            checkpoint_log_bytes: 64 << 20,
            log_write_threshold: 1 << 20,
        }
    }
}

/// What recovery found and how long it took.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RecoveryReport {
    /// Epoch of the snapshot loaded (0 and no runs for a new store).
    pub snapshot_epoch: u64,
    pub snapshot_runs: u64,
    pub replayed_records: u64,
    /// Bytes of a damaged log dropped after the damage, when the options
    /// asked to salvage it ([`ferrite_core::WalRecovery`]).
    pub dropped_log_bytes: u64,
    pub seconds: f64,
}

struct WriterState {
    epoch: u64,
    last_sync: Instant,
    /// Set when a snapshot failed after its header may have reached the
    /// device: the log can no longer be trusted to follow it.
    poisoned: Poison,
}

/// A [`Rask`] index that survives restarts and crashes.
pub struct DurableRask<V: RangeValue> {
    index: Rask<V>,
    wal: Arc<Wal>,
    /// Syncs the log every interval under `SyncMode::Batched`.
    ticker: Option<PeriodicSync>,
    devices: RaskDevices,
    writer: Mutex<WriterState>,
    opts: DurableOptions,
    recovery: RecoveryReport,
}

fn open_file(dir: &Path, name: &str, direct: bool) -> Result<Arc<dyn BlockDevice>> {
    let opts = DirectFileOptions {
        direct,
        ..DirectFileOptions::default()
    };
    Ok(Arc::new(DirectFile::open_with(dir.join(name), opts)?))
}

impl<V: RangeValue> DurableRask<V> {
    /// Opens or creates the index in directory `dir`.
    pub fn open(dir: &Path, opts: DurableOptions) -> Result<Self> {
        opts.store.validate()?;
        StoreIdentity::establish(
            dir,
            EngineKind::Rask,
            OLDEST_READABLE_STORE_FORMAT..=STORE_FORMAT,
            &opts.store,
        )?;
        let d = opts.store.direct_io;
        let devices = RaskDevices {
            snapshots: [
                open_file(dir, "snapshot-0", d)?,
                open_file(dir, "snapshot-1", d)?,
            ],
            log: open_file(dir, "log", d)?,
        };
        Self::open_on(devices, opts)
    }

    /// Opens or creates the index on the given devices.
    pub fn open_on(devices: RaskDevices, opts: DurableOptions) -> Result<Self> {
        let started = Instant::now();
        let index = Rask::with_options(opts.index)?;
        let mut best: Option<(u64, usize)> = None;
        for (slot, dev) in devices.snapshots.iter().enumerate() {
            if let Some(h) = read_header(dev.as_ref(), V::ENCODED_LEN)? {
                if best.is_none_or(|(e, _)| h.epoch > e) {
                    best = Some((h.epoch, slot));
                }
            }
        }
        let mut report = RecoveryReport::default();
        let epoch = match best {
            Some((epoch, slot)) => {
                report.snapshot_runs = load_snapshot(devices.snapshots[slot].as_ref(), &index)?;
                report.snapshot_epoch = epoch;
                epoch
            }
            None => 0,
        };
        if let Some(logged) = ferrite_wal::first_epoch(devices.log.as_ref())? {
            // The log moves to epoch `e` only after snapshot `e` is synced:
            // a log ahead of every valid snapshot means that snapshot is
            // damaged, and replaying an older one would silently drop it
            // (and the log, which opening cuts off).
            if logged > epoch {
                return Err(corrupt(
                    "rask snapshot",
                    format!(
                        "the log continues snapshot {logged}, which is missing or damaged \
                         (the newest valid snapshot is {epoch})"
                    ),
                ));
            }
        }
        let mut replayed = 0u64;
        let (wal, salvaged) = Wal::open_with(
            devices.log.clone(),
            epoch,
            opts.store.wal_recovery,
            &mut |payload| {
                if apply_record(&index, payload).map_err(ferrite_core::Error::from)? {
                    replayed += 1;
                }
                Ok(())
            },
        )?;
        if let Some(s) = salvaged {
            log::warn!(
                "rask: redo log damaged at offset {}: recovered up to it, {} bytes after it dropped",
                s.offset,
                s.dropped_bytes
            );
            report.dropped_log_bytes = s.dropped_bytes;
        }
        report.replayed_records = replayed;
        report.seconds = started.elapsed().as_secs_f64();
        let wal = Arc::new(wal);
        let ticker = match opts.store.sync {
            SyncMode::Batched(every) => {
                let wal = wal.clone();
                Some(
                    PeriodicSync::start("rask-log-sync", every, move || wal.sync()).map_err(
                        |e| ferrite_core::Error::resource("the rask-log-sync thread", e),
                    )?,
                )
            }
            _ => None,
        };
        Ok(Self {
            index,
            wal,
            ticker,
            devices,
            writer: Mutex::new(WriterState {
                epoch,
                last_sync: Instant::now(),
                poisoned: Poison::new(),
            }),
            opts,
            recovery: report,
        })
    }

    /// What the last open recovered.
    pub fn recovery(&self) -> RecoveryReport {
        self.recovery
    }

    /// The in-memory index (reads go straight to it).
    pub fn index(&self) -> &Rask<V> {
        &self.index
    }

    pub fn get(&self, range: BlockRange) -> Vec<Segment<V>> {
        self.index.get(range)
    }

    pub fn put(&self, range: BlockRange, value: V) -> Result<()> {
        crate::value::validate(range, &value)?;
        let mut rec = Vec::with_capacity(17 + V::ENCODED_LEN);
        encode_head(&mut rec, OP_PUT, range);
        value.encode(&mut rec);
        self.logged(&rec, |ix| ix.put(range, value))
    }

    pub fn delete(&self, range: BlockRange) -> Result<()> {
        let mut rec = Vec::with_capacity(17);
        encode_head(&mut rec, OP_DELETE, range);
        self.logged(&rec, |ix| {
            ix.delete(range);
            Ok(())
        })
    }

    fn logged(&self, rec: &[u8], apply: impl FnOnce(&Rask<V>) -> Result<()>) -> Result<()> {
        let (lsn, sync_now) = {
            let mut w = self.writer.lock();
            w.poisoned.check()?;
            let lsn = self.wal.append(rec)?;
            apply(&self.index)?;
            let sync_now = match self.opts.store.sync {
                SyncMode::Always => true,
                SyncMode::Batched(every) => {
                    let due = w.last_sync.elapsed() >= every;
                    if due {
                        w.last_sync = Instant::now();
                    }
                    due
                }
                SyncMode::Never => false,
            };
            (lsn, sync_now)
        };
        if sync_now {
            self.wal.commit(lsn, true)?;
        } else {
            self.wal.write_if_over(self.opts.log_write_threshold)?;
        }
        if self.wal.len() > self.opts.checkpoint_log_bytes {
            self.snapshot()?;
        }
        Ok(())
    }

    /// Refuses every later write and sync, and makes closing skip the
    /// closing sync: for an owner whose own data failed to reach its
    /// device, so log records pointing at that data must never become
    /// durable. Reopening recovers the index as of the last sync.
    pub fn abandon(&self) {
        self.writer.lock().poisoned.set_text(
            "abandoned by its owner after a failure".into(),
            false,
            false,
        );
    }

    /// Makes every write so far durable.
    pub fn sync(&self) -> Result<()> {
        self.writer.lock().poisoned.check()?;
        Ok(self.wal.sync()?)
    }

    /// Where the redo log ends now: every write so far lies before it.
    pub fn log_position(&self) -> u64 {
        self.wal.position()
    }

    /// Makes the writes before `position` (a [`DurableRask::log_position`])
    /// durable and writes none after it to the device: for an owner whose
    /// later writes point at data not yet durable.
    pub fn sync_to(&self, position: u64) -> Result<()> {
        self.writer.lock().poisoned.check()?;
        Ok(self.wal.sync_prefix(position)?)
    }

    /// Writes a snapshot of the whole index and empties the log. Writers
    /// wait while it runs; readers do not.
    pub fn snapshot(&self) -> Result<()> {
        let _work = ferrite_core::background::begin(ferrite_core::background::Work::Checkpoint);
        let mut w = self.writer.lock();
        w.poisoned.check()?;
        let epoch = w.epoch + 1;
        if ferrite_core::engine::check_counter(epoch).is_none() {
            // A reader would take the snapshot for damage and fall back to
            // the older one without this log: refuse before writing.
            return Err(corrupt(
                "rask snapshot",
                format!("epoch {epoch} reached the limit; it rose from a damaged one"),
            ));
        }
        let dev = self.devices.snapshots[(epoch % 2) as usize].as_ref();
        let written = write_snapshot(dev, &self.index, epoch).and_then(|()| {
            self.wal.reset(epoch)?;
            let lsn = self.wal.append(&[OP_EPOCH])?;
            Ok(self.wal.commit(lsn, true)?)
        });
        if let Err(e) = written {
            w.poisoned.set_text(
                format!("snapshot {epoch} failed: {e}"),
                e.is_no_space(),
                e.is_corruption(),
            );
            return Err(e);
        }
        w.epoch = epoch;
        w.last_sync = Instant::now();
        Ok(())
    }

    pub fn stats(&self) -> RaskStats {
        self.index.stats()
    }

    /// Bytes in the redo log now.
    pub fn log_bytes(&self) -> u64 {
        self.wal.len()
    }

    /// The interval `SyncMode::Batched` syncs at, if it is the mode.
    pub fn sync_interval(&self) -> Option<Duration> {
        match self.opts.store.sync {
            SyncMode::Batched(d) => Some(d),
            _ => None,
        }
    }
}

impl<V: RangeValue> Drop for DurableRask<V> {
    /// Closing makes every write durable, whatever the sync mode, and
    /// seals the log, so damage to any of it is told from a torn tail.
    fn drop(&mut self) {
        drop(self.ticker.take());
        if !self.writer.lock().poisoned.is_set() {
            if let Err(e) = self.wal.seal() {
                log::warn!("closing sync of the RASK redo log failed: {e}");
            }
        }
    }
}

fn encode_head(out: &mut Vec<u8>, op: u8, r: BlockRange) {
    out.push(op);
    out.extend_from_slice(&r.l().to_le_bytes());
    out.extend_from_slice(&r.r().to_le_bytes());
}

fn corrupt(what: &'static str, reason: impl Into<String>) -> RaskError {
    RaskError::Corruption {
        what,
        reason: reason.into(),
    }
}

fn read_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    if let Some(s) = b.get(at..at + 8) {
        a.copy_from_slice(s);
    }
    u64::from_le_bytes(a)
}

fn read_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    if let Some(s) = b.get(at..at + 4) {
        a.copy_from_slice(s);
    }
    u32::from_le_bytes(a)
}

/// Decodes one log record and applies it; false for an epoch mark, which
/// changes nothing.
fn apply_record<V: RangeValue>(index: &Rask<V>, p: &[u8]) -> Result<bool> {
    let (&op, rest) = p
        .split_first()
        .ok_or_else(|| corrupt("rask log record", "empty record"))?;
    if op == OP_EPOCH && rest.is_empty() {
        return Ok(false);
    }
    if rest.len() < 16 {
        return Err(corrupt(
            "rask log record",
            format!("{} bytes is too short", p.len()),
        ));
    }
    let range = BlockRange::new(read_u64(rest, 0), read_u64(rest, 8))
        .map_err(|e| corrupt("rask log record", e.to_string()))?;
    let body = &rest[16..];
    match op {
        OP_PUT if body.len() == V::ENCODED_LEN => {
            let v =
                V::decode(body).ok_or_else(|| corrupt("rask log record", "undecodable value"))?;
            index
                .put(range, v)
                .map_err(|e| corrupt("rask log record", e.to_string()))?;
            Ok(true)
        }
        OP_DELETE if body.is_empty() => {
            index.delete(range);
            Ok(true)
        }
        _ => Err(corrupt(
            "rask log record",
            format!("op {op} with a {}-byte body", body.len()),
        )),
    }
}

struct Header {
    epoch: u64,
    runs: u64,
    payload_len: u64,
    payload_crc: u32,
}

/// The header of the snapshot in `dev`, or `None` if there is no valid one.
fn read_header(dev: &dyn BlockDevice, value_len: usize) -> Result<Option<Header>> {
    let bs = dev.block_size();
    if dev.len() < bs as u64 {
        return Ok(None);
    }
    let mut b = AlignedBuf::zeroed(bs);
    dev.read_at(&mut b, 0)?;
    if &b[..8] != MAGIC || crc32c::crc32c(&b[..HEADER_LEN - 4]) != read_u32(&b, HEADER_LEN - 4) {
        return Ok(None);
    }
    if read_u32(&b, 8) != SNAPSHOT_FORMAT || read_u32(&b, 12) as usize != value_len {
        return Err(corrupt(
            "rask snapshot",
            format!(
                "format {} with {}-byte values; expected format {SNAPSHOT_FORMAT} with {value_len}",
                read_u32(&b, 8),
                read_u32(&b, 12)
            ),
        ));
    }
    let h = Header {
        epoch: read_u64(&b, 16),
        runs: read_u64(&b, 24),
        payload_len: read_u64(&b, 32),
        payload_crc: read_u32(&b, 40),
    };
    if ferrite_core::engine::check_counter(h.epoch).is_none() {
        return Err(corrupt(
            "rask snapshot",
            format!("epoch {} is past any a store reaches", h.epoch),
        ));
    }
    let run_len = 16 + value_len as u64;
    if h.runs.checked_mul(run_len) != Some(h.payload_len)
        || (bs as u64)
            .checked_add(h.payload_len)
            .is_none_or(|end| end > dev.len())
    {
        // A header whose payload never fully reached the device.
        return Ok(None);
    }
    Ok(Some(h))
}

fn load_snapshot<V: RangeValue>(dev: &dyn BlockDevice, index: &Rask<V>) -> Result<u64> {
    let Some(h) = read_header(dev, V::ENCODED_LEN)? else {
        return Ok(0);
    };
    let bs = dev.block_size();
    let padded = (h.payload_len as usize).div_ceil(bs) * bs;
    let mut buf = AlignedBuf::zeroed(padded.max(bs));
    if padded > 0 {
        dev.read_at(&mut buf[..padded], bs as u64)?;
    }
    let payload = &buf[..h.payload_len as usize];
    if crc32c::crc32c(payload) != h.payload_crc {
        return Err(corrupt("rask snapshot", "payload checksum mismatch"));
    }
    let run_len = 16 + V::ENCODED_LEN;
    let mut prev_end: Option<u64> = None;
    for run in payload.chunks_exact(run_len) {
        let range = BlockRange::new(read_u64(run, 0), read_u64(run, 8))
            .map_err(|e| corrupt("rask snapshot", e.to_string()))?;
        if prev_end.is_some_and(|e| range.l() <= e) {
            return Err(corrupt(
                "rask snapshot",
                format!("run {range} is out of order"),
            ));
        }
        prev_end = Some(range.r());
        let v =
            V::decode(&run[16..]).ok_or_else(|| corrupt("rask snapshot", "undecodable value"))?;
        index
            .put(range, v)
            .map_err(|e| corrupt("rask snapshot", e.to_string()))?;
    }
    Ok(h.runs)
}

fn write_snapshot<V: RangeValue>(dev: &dyn BlockDevice, index: &Rask<V>, epoch: u64) -> Result<()> {
    let mut payload = Vec::new();
    let mut runs = 0u64;
    index.for_each_mapped(|r, v| {
        payload.extend_from_slice(&r.l().to_le_bytes());
        payload.extend_from_slice(&r.r().to_le_bytes());
        v.encode(&mut payload);
        runs += 1;
    });
    let bs = dev.block_size();
    // Payload first, header last: a header is only valid with its payload.
    for (i, chunk) in payload.chunks(WRITE_CHUNK).enumerate() {
        let mut buf = AlignedBuf::zeroed(chunk.len().div_ceil(bs) * bs);
        buf[..chunk.len()].copy_from_slice(chunk);
        dev.write_at(&buf, (bs + i * WRITE_CHUNK) as u64)?;
    }
    dev.sync()?;
    let mut h = AlignedBuf::zeroed(bs);
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&SNAPSHOT_FORMAT.to_le_bytes());
    h[12..16].copy_from_slice(&(V::ENCODED_LEN as u32).to_le_bytes());
    h[16..24].copy_from_slice(&epoch.to_le_bytes());
    h[24..32].copy_from_slice(&runs.to_le_bytes());
    h[32..40].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    h[40..44].copy_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
    let crc = crc32c::crc32c(&h[..HEADER_LEN - 4]);
    h[HEADER_LEN - 4..HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
    dev.write_at(&h, 0)?;
    dev.sync()?;
    Ok(())
}
