//! # ferrite-wal: the write-ahead log engines share
//!
//! A [`Wal`] appends checksummed records to a [`BlockDevice`] and makes them
//! durable with group commit: concurrent committers share one `sync`. It
//! owns the log's byte layout (spec: `docs/format/wal.md`) and keeps these
//! invariants:
//! - records are written in LSN order, contiguously from offset 0;
//! - a record is durable once [`Wal::commit`] returns for its LSN (or any
//!   later one); nothing is reported durable before its sync completed;
//! - every record claims the offset below which the log was synced when
//!   it was appended, so a claim is true whenever the record is on the
//!   device at all;
//! - replay stops at the first record that is torn, fails its checksum or
//!   belongs to another epoch. That end is a torn tail (never an error or a
//!   panic) unless a record of the epoch past it claims the log was
//!   synced beyond it: then the bytes there were durable and are damaged,
//!   and opening refuses with [`Error::Corruption`], changing nothing,
//!   where cutting the log off would silently drop every acknowledged
//!   write after the damage (a caller salvaging the store asks for that
//!   cut with [`WalRecovery::TruncateAtDamage`], and is told). Opening a
//!   log otherwise cuts off whatever lies past its end, so no record from
//!   before a crash can follow one written after it;
//! - after a failed write or sync the log is poisoned: every later call
//!   fails, because what reached the device is unknown;
//! - [`survey`] reads a log without changing it, so a caller holding
//!   several logs can tell a torn last one from a damaged earlier one
//!   before opening (and so cutting off) any.
//!
//! Damage past the last claim (in records synced by the last sync, with
//! no record appended since) looks like a torn tail; [`Wal::seal`] closes
//! that window at a clean shutdown.
//!
//! The device is written in whole blocks (O_DIRECT rules): the partially
//! filled last block is kept in memory and rewritten as it grows.

mod record;

pub use record::{
    decode_record, encode_claiming_record, encode_record, RecordHeader, CLAIM_LEN, HEADER_LEN,
    MAX_PAYLOAD,
};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ferrite_core::engine::Poison;
use ferrite_core::{Error, Result, WalRecovery};
use ferrite_io::{AlignedBuf, BlockDevice};
use parking_lot::{Condvar, Mutex};

/// A deliberate fault, off unless a crash test's negative control turns it
/// on: commits skip the device sync that makes them durable and still
/// report them durable. A crash test that cannot catch this cannot see a
/// missing sync either, so the power-cut mode proves itself with it.
static SKIP_COMMIT_SYNC: AtomicBool = AtomicBool::new(false);

/// Turns on, for this process, the fault above: commits no longer sync.
/// Only crash tests call it.
pub fn inject_skipped_commit_sync() {
    SKIP_COMMIT_SYNC.store(true, Ordering::Relaxed);
}

/// Whether that fault is on: logs kept elsewhere in this record format
/// (ZKV's zone log) skip their commit sync too.
pub fn commit_sync_skipped() -> bool {
    SKIP_COMMIT_SYNC.load(Ordering::Relaxed)
}

/// Log sequence number: the position just past a record, counted over the
/// log's whole life (it keeps growing across [`Wal::reset`]).
pub type Lsn = u64;

struct Tail {
    /// Bytes appended but not yet written to the device.
    pending: Vec<u8>,
    /// Device offset where `pending` starts.
    pending_at: u64,
    /// Content of the last, partially filled block already written.
    partial: Vec<u8>,
    /// End of the log (next record's offset).
    end: u64,
    /// Everything below this is durable.
    durable: u64,
    /// A thread is writing and syncing; others wait for it.
    leader_active: bool,
    poisoned: Poison,
    epoch: u64,
    /// LSN of device offset 0 (the log's total length before the last reset).
    base: u64,
}

/// An append-only, checksummed, group-committed log.
pub struct Wal {
    dev: Arc<dyn BlockDevice>,
    bs: usize,
    tail: Mutex<Tail>,
    synced: Condvar,
}

/// How a log's run of records of one epoch ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogEnd {
    /// At zero bytes or the end of the device: nothing was cut short.
    Clean,
    /// At a record of another epoch.
    Foreign { epoch: u64 },
    /// At bytes that are no valid record: a torn write, or damage.
    Broken { offset: u64 },
    /// At `offset`, though the record at `witness`, further on, claims
    /// the log was synced below `durable`, past `offset`: damage.
    Damaged {
        offset: u64,
        witness: u64,
        durable: u64,
    },
}

/// What [`survey`] found on a log device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Survey {
    /// Valid records of the epoch, from the start.
    pub records: u64,
    pub end: LogEnd,
}

/// Reads a log without changing it: how many records of `epoch` it holds
/// from the start, and how they end. Opening a log cuts off whatever lies
/// past its end, so a caller that must judge that end (a torn tail is the
/// end of the last log, but a log another one followed was complete)
/// surveys first.
pub fn survey(dev: &dyn BlockDevice, epoch: u64) -> Result<Survey> {
    let bs = dev.block_size();
    let len = dev.len() - dev.len() % bs as u64;
    let mut buf = AlignedBuf::zeroed(len as usize);
    if len > 0 {
        dev.read_at(&mut buf, 0)?;
    }
    let (records, at, foreign) = run_of(&buf, epoch);
    let end = match (witness(&buf, at, epoch), foreign) {
        (Some((w, d)), _) => LogEnd::Damaged {
            offset: at as u64,
            witness: w,
            durable: d,
        },
        (None, Some(epoch)) => LogEnd::Foreign { epoch },
        (None, None) => {
            let rest = buf.get(at..).unwrap_or_default();
            if rest.iter().take(HEADER_LEN).all(|&b| b == 0) {
                LogEnd::Clean
            } else {
                LogEnd::Broken { offset: at as u64 }
            }
        }
    };
    Ok(Survey { records, end })
}

/// The records of `epoch` from the start of `buf`: how many there are
/// (seals not counted), where they end, and the epoch of the valid record
/// of another epoch that ends them, if one does.
fn run_of(buf: &[u8], epoch: u64) -> (u64, usize, Option<u64>) {
    let mut at = 0usize;
    let mut records = 0;
    while let Some((hdr, _)) = buf.get(at..).and_then(decode_record) {
        if hdr.epoch != epoch {
            return (records, at, Some(hdr.epoch));
        }
        records += u64::from(!hdr.seal);
        at += hdr.encoded_len();
    }
    (records, at, None)
}

/// A record of `epoch` past `end` whose claim says the log was synced
/// beyond `end`, as (its offset, its claim): proof that the records stop
/// at `end` because of damage, not a crash. Records are not aligned, so
/// every offset is tried; the epoch and the claim flag are checked before
/// the checksum, which keeps the scan cheap. A claim past the record's own
/// offset is impossible for a record the log wrote, and is ignored.
fn witness(buf: &[u8], end: usize, epoch: u64) -> Option<(u64, u64)> {
    let want = epoch.to_le_bytes();
    let mut at = end + 1;
    while let Some(head) = buf.get(at..at + HEADER_LEN + CLAIM_LEN) {
        let flags_len = head
            .get(4..8)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes);
        let claims = flags_len.is_some_and(|f| f & record::CLAIM != 0);
        if claims && head.get(8..16) == Some(&want[..]) {
            if let Some((h, _)) = buf.get(at..).and_then(decode_record) {
                if let Some(d) = h.durable.filter(|&d| d > end as u64 && d <= at as u64) {
                    return Some((at as u64, d));
                }
            }
        }
        at += 1;
    }
    None
}

/// The epoch of the log's first record, if its first block holds a valid
/// one: which epoch a log device was last reset to, when that reset wrote a
/// first record at once.
pub fn first_epoch(dev: &dyn BlockDevice) -> Result<Option<u64>> {
    let bs = dev.block_size();
    if dev.len() < bs as u64 {
        return Ok(None);
    }
    let mut b = AlignedBuf::zeroed(bs);
    dev.read_at(&mut b, 0)?;
    Ok(decode_record(&b).map(|(h, _)| h.epoch))
}

/// Where [`Wal::open_with`] cut off a damaged log it was told to salvage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Salvaged {
    /// Offset of the damage: the log now ends here.
    pub offset: u64,
    /// Bytes dropped after it (records, padding and the damage itself).
    pub dropped_bytes: u64,
}

impl Wal {
    /// Opens the log on `dev`, replaying every valid record of `epoch` into
    /// `replay` in order, and positions the log after the last one. A log
    /// damaged where a later record proves it had been synced is refused
    /// ([`Error::Corruption`]) and left as it is.
    pub fn open(
        dev: Arc<dyn BlockDevice>,
        epoch: u64,
        replay: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<Self> {
        Self::open_with(dev, epoch, WalRecovery::Refuse, replay).map(|(wal, _)| wal)
    }

    /// [`Wal::open`], with `recovery` saying what to do with a damaged log:
    /// refuse it, or replay up to the damage and cut the log off there
    /// (reported as [`Salvaged`]).
    pub fn open_with(
        dev: Arc<dyn BlockDevice>,
        epoch: u64,
        recovery: WalRecovery,
        replay: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<(Self, Option<Salvaged>)> {
        let bs = dev.block_size();
        let len = dev.len() - dev.len() % bs as u64;
        let mut end = 0u64;
        let mut salvaged = None;
        if len > 0 {
            let mut buf = AlignedBuf::zeroed(len as usize);
            dev.read_at(&mut buf, 0)?;
            let (_, at, _) = run_of(&buf, epoch);
            let damage = witness(&buf, at, epoch);
            if let (Some(_), WalRecovery::TruncateAtDamage) = (damage, recovery) {
                salvaged = Some(Salvaged {
                    offset: at as u64,
                    dropped_bytes: len - at as u64,
                });
            } else if let Some((w, d)) = damage {
                return Err(Error::corruption(
                    format!("wal offset {at} (epoch {epoch}) on {}", dev.describe()),
                    format!(
                        "the log's records stop here, but the record at offset {w} was \
                         appended after the log was synced below offset {d}: the bytes here \
                         were durable and are damaged; the log is left as it is rather than \
                         cut off with the {} bytes after the damage",
                        len - at as u64
                    ),
                ));
            }
            let mut off = 0usize;
            while off < at {
                let Some((hdr, payload)) = buf.get(off..).and_then(decode_record) else {
                    break;
                };
                if !hdr.seal {
                    replay(payload)?;
                }
                off += hdr.encoded_len();
            }
            end = at as u64;
        }
        // Blocks past the end can still hold records of this epoch: a
        // crash can keep some blocks of an unsynced write and lose an
        // earlier one. Left there, they would become the log's
        // continuation as soon as new records end on a block boundary, and
        // a later replay would apply those lost writes after newer ones.
        // Cut them off, durably, before anything is appended. The sync
        // also makes what was replayed durable (a reopen without a crash
        // can find it still in a cache), which the records appended from
        // now on claim.
        let kept = end.div_ceil(bs as u64) * bs as u64;
        if dev.len() > kept {
            dev.set_len(kept)?;
        }
        if len > 0 {
            dev.sync()?;
        }
        let block_start = end - end % bs as u64;
        let mut partial = Vec::new();
        if end > block_start {
            let mut b = AlignedBuf::zeroed(bs);
            dev.read_at(&mut b, block_start)?;
            partial.extend_from_slice(&b[..(end - block_start) as usize]);
        }
        let wal = Self {
            dev,
            bs,
            tail: Mutex::new(Tail {
                pending: Vec::new(),
                pending_at: end,
                partial,
                end,
                durable: end,
                leader_active: false,
                poisoned: Poison::new(),
                epoch,
                base: 0,
            }),
            synced: Condvar::new(),
        };
        Ok((wal, salvaged))
    }

    /// Appends a record; returns the LSN to pass to [`Wal::commit`].
    pub fn append(&self, payload: &[u8]) -> Result<Lsn> {
        let mut t = self.tail.lock();
        t.poisoned.check()?;
        if payload.len() > MAX_PAYLOAD {
            return Err(Error::BatchTooLarge {
                len: payload.len(),
                max: MAX_PAYLOAD,
            });
        }
        let (epoch, durable) = (t.epoch, t.durable);
        encode_claiming_record(epoch, durable, false, payload, &mut t.pending);
        t.end += (HEADER_LEN + CLAIM_LEN + payload.len()) as u64;
        Ok(t.base + t.end)
    }

    /// Syncs the log, then appends and syncs a record that only claims
    /// it, so damage anywhere before it is told from a torn tail at the
    /// next open. For a clean shutdown: without it, the records of the
    /// last sync have no later record to vouch for them.
    pub fn seal(&self) -> Result<()> {
        self.sync()?;
        let lsn = {
            let mut t = self.tail.lock();
            t.poisoned.check()?;
            let (epoch, durable) = (t.epoch, t.durable);
            encode_claiming_record(epoch, durable, true, &[], &mut t.pending);
            t.end += (HEADER_LEN + CLAIM_LEN) as u64;
            t.base + t.end
        };
        self.commit(lsn, true)
    }

    /// Writes and, if `sync`, makes durable everything up to `lsn`. Concurrent
    /// callers share one write and one sync (group commit).
    pub fn commit(&self, lsn: Lsn, sync: bool) -> Result<()> {
        self.commit_upto(lsn, sync, false)
    }

    /// Makes the records up to `lsn` (a [`Wal::position`] taken earlier)
    /// durable without writing any record appended after it: for an owner
    /// whose later records describe data not yet durable themselves, so
    /// they must not reach the device before it is.
    pub fn sync_prefix(&self, lsn: Lsn) -> Result<()> {
        self.commit_upto(lsn, true, true)
    }

    /// The LSN just past the last record appended.
    pub fn position(&self) -> Lsn {
        let t = self.tail.lock();
        t.base + t.end
    }

    /// [`Wal::commit`]; with `prefix_only`, the leader writes the records
    /// up to `lsn` and leaves the rest pending.
    fn commit_upto(&self, lsn: Lsn, sync: bool, prefix_only: bool) -> Result<()> {
        let mut t = self.tail.lock();
        // A prefix past the end is the whole log.
        let lsn = if prefix_only {
            lsn.min(t.base + t.end)
        } else {
            lsn
        };
        loop {
            t.poisoned.check()?;
            // Positions are relative to the epoch's start (`base`); LSNs
            // are not, so they stay ordered across resets.
            let done = if sync {
                t.base + t.durable >= lsn
            } else {
                t.base + t.pending_at >= lsn
            };
            if done {
                return Ok(());
            }
            if !t.leader_active {
                break;
            }
            self.synced.wait(&mut t);
        }
        // Become the leader: take everything appended so far (or up to
        // `lsn`: records end exactly there, so the cut is between two).
        t.leader_active = true;
        let start = t.pending_at;
        let base = t.base;
        let (pending, target) = if prefix_only {
            let cut =
                (lsn.saturating_sub(base).saturating_sub(start) as usize).min(t.pending.len());
            let rest = t.pending.split_off(cut);
            (std::mem::replace(&mut t.pending, rest), start + cut as u64)
        } else {
            (std::mem::take(&mut t.pending), t.end)
        };
        let mut image = std::mem::take(&mut t.partial);
        drop(t);
        let block_start = start - start % self.bs as u64;
        image.extend_from_slice(&pending);
        let result = self.write_image(&image, block_start, sync);
        let mut t = self.tail.lock();
        t.leader_active = false;
        match result {
            Ok(()) => {
                let full = image.len() - image.len() % self.bs;
                t.partial = image.get(full..).map(<[u8]>::to_vec).unwrap_or_default();
                t.pending_at = target;
                if sync {
                    t.durable = target;
                }
                self.synced.notify_all();
                drop(t);
                if lsn <= base + target {
                    return Ok(());
                }
                self.commit_upto(lsn, sync, prefix_only)
            }
            Err(e) => {
                t.poisoned.set(&e);
                self.synced.notify_all();
                Err(e)
            }
        }
    }

    fn write_image(&self, image: &[u8], at: u64, sync: bool) -> Result<()> {
        if !image.is_empty() {
            let len = image.len().div_ceil(self.bs) * self.bs;
            let mut buf = AlignedBuf::zeroed(len);
            if let Some(dst) = buf.get_mut(..image.len()) {
                dst.copy_from_slice(image);
            }
            self.dev.write_at(&buf, at)?;
        }
        if sync && !commit_sync_skipped() {
            self.dev.sync()?;
        }
        Ok(())
    }

    /// Syncs everything appended so far.
    pub fn sync(&self) -> Result<()> {
        let lsn = {
            let t = self.tail.lock();
            t.base + t.end
        };
        self.commit(lsn, true)
    }

    /// Writes (without syncing) once more than `threshold` bytes are
    /// waiting, so an unsynced log does not grow without bound in memory.
    pub fn write_if_over(&self, threshold: usize) -> Result<()> {
        let lsn = {
            let t = self.tail.lock();
            if t.pending.len() <= threshold {
                return Ok(());
            }
            t.base + t.end
        };
        self.commit(lsn, false)
    }

    /// Empties the log and starts `epoch`: called after a checkpoint made
    /// every record so far redundant. Durable when it returns.
    pub fn reset(&self, epoch: u64) -> Result<()> {
        let mut t = self.tail.lock();
        while t.leader_active {
            self.synced.wait(&mut t);
        }
        t.poisoned.check()?;
        let r = self.dev.set_len(0).and_then(|_| self.dev.sync());
        if let Err(e) = r {
            let e = Error::from(e);
            t.poisoned.set(&e);
            return Err(e);
        }
        let base = t.base + t.end;
        *t = Tail {
            pending: Vec::new(),
            pending_at: 0,
            partial: Vec::new(),
            end: 0,
            durable: 0,
            leader_active: false,
            poisoned: Poison::new(),
            epoch,
            base,
        };
        Ok(())
    }

    /// Bytes in the log.
    pub fn len(&self) -> u64 {
        self.tail.lock().end
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The device's I/O counters.
    pub fn io_stats(&self) -> ferrite_io::IoStats {
        self.dev.io_stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_io::{CrashMode, FaultKind, FaultOp, FaultRule, FaultyDevice, MemDevice};

    fn replay_all(dev: Arc<dyn BlockDevice>, epoch: u64) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        Wal::open(dev, epoch, &mut |p| {
            out.push(p.to_vec());
            Ok(())
        })
        .unwrap();
        out
    }

    #[test]
    fn records_survive_reopen_in_order() {
        let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new());
        let wal = Wal::open(dev.clone(), 1, &mut |_| Ok(())).unwrap();
        for i in 0..500u32 {
            let lsn = wal.append(&vec![i as u8; (i % 300) as usize]).unwrap();
            wal.commit(lsn, i % 7 == 0).unwrap();
        }
        wal.sync().unwrap();
        let got = replay_all(dev.clone(), 1);
        assert_eq!(got.len(), 500);
        for (i, p) in got.iter().enumerate() {
            assert_eq!(p, &vec![i as u8; i % 300]);
        }
        // Appending after a reopen continues the log.
        let wal = Wal::open(dev.clone(), 1, &mut |_| Ok(())).unwrap();
        let lsn = wal.append(b"more").unwrap();
        wal.commit(lsn, true).unwrap();
        assert_eq!(replay_all(dev.clone(), 1).len(), 501);
        assert!(replay_all(dev, 2).is_empty(), "another epoch sees nothing");
    }

    #[test]
    fn a_synced_prefix_writes_nothing_after_it() {
        let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new());
        let wal = Wal::open(dev.clone(), 1, &mut |_| Ok(())).unwrap();
        let mut cuts = Vec::new();
        for i in 0..40u32 {
            // Records of all sizes, so cuts fall inside and on block ends.
            wal.append(&vec![i as u8; (i as usize * 397) % 5000])
                .unwrap();
            cuts.push(wal.position());
        }
        for &k in &[3usize, 3, 17, 39] {
            wal.sync_prefix(cuts[k]).unwrap();
            let got = replay_all(dev.clone(), 1);
            assert_eq!(got.len(), k + 1, "records up to the cut, none after");
            for (i, p) in got.iter().enumerate() {
                assert_eq!(p, &vec![i as u8; (i * 397) % 5000]);
            }
        }
        // Appends after a prefix sync follow it; a position past the end
        // is the whole log.
        wal.append(b"after").unwrap();
        wal.sync_prefix(u64::MAX).unwrap();
        assert_eq!(replay_all(dev.clone(), 1).len(), 41);
        let wal = Wal::open(dev.clone(), 1, &mut |_| Ok(())).unwrap();
        let before = wal.position();
        wal.append(b"x").unwrap();
        wal.sync_prefix(before).unwrap();
        assert_eq!(
            replay_all(dev, 1).len(),
            41,
            "an empty prefix writes nothing"
        );
    }

    #[test]
    fn only_synced_records_survive_a_crash() {
        let faulty = Arc::new(FaultyDevice::new(MemDevice::new()));
        let dev: Arc<dyn BlockDevice> = faulty.clone();
        let wal = Wal::open(dev.clone(), 0, &mut |_| Ok(())).unwrap();
        for i in 0..10u8 {
            let lsn = wal.append(&[i; 100]).unwrap();
            wal.commit(lsn, true).unwrap();
        }
        for i in 10..20u8 {
            let lsn = wal.append(&[i; 100]).unwrap();
            wal.commit(lsn, false).unwrap();
        }
        faulty
            .crash(CrashMode::KeepRandom { seed: 3, keep: 0.5 })
            .unwrap();
        faulty.restart();
        let got = replay_all(dev, 0);
        assert!(got.len() >= 10 && got.len() <= 20, "{}", got.len());
        for (i, p) in got.iter().enumerate() {
            assert_eq!(p, &vec![i as u8; 100], "records replay as a prefix");
        }
    }

    #[test]
    fn a_survey_counts_records_and_tells_a_clean_end_from_a_broken_one() {
        let mem = Arc::new(MemDevice::new());
        let dev: Arc<dyn BlockDevice> = mem.clone();
        assert_eq!(first_epoch(dev.as_ref()).unwrap(), None);
        let empty = survey(dev.as_ref(), 4).unwrap();
        assert_eq!(
            empty,
            Survey {
                records: 0,
                end: LogEnd::Clean
            }
        );
        let wal = Wal::open(dev.clone(), 4, &mut |_| Ok(())).unwrap();
        let mut ends = Vec::new();
        for i in 0..40u8 {
            let lsn = wal.append(&[i; 300]).unwrap();
            wal.commit(lsn, true).unwrap();
            ends.push(lsn);
        }
        assert_eq!(first_epoch(dev.as_ref()).unwrap(), Some(4));
        let whole = survey(dev.as_ref(), 4).unwrap();
        assert_eq!(
            whole,
            Survey {
                records: 40,
                end: LogEnd::Clean
            }
        );
        assert_eq!(
            survey(dev.as_ref(), 5).unwrap(),
            Survey {
                records: 0,
                end: LogEnd::Foreign { epoch: 4 }
            }
        );
        // A flipped bit in the last record ends the run there, broken,
        // like a torn tail: no record after it vouches for it.
        let flip = |at: u64| {
            let mut b = AlignedBuf::zeroed(4096);
            let block = at / 4096 * 4096;
            mem.read_at(&mut b, block).unwrap();
            b[(at - block) as usize] ^= 2;
            mem.write_at(&b, block).unwrap();
        };
        flip(ends[38] + 30);
        let len = mem.len();
        assert_eq!(
            survey(dev.as_ref(), 4).unwrap(),
            Survey {
                records: 39,
                end: LogEnd::Broken { offset: ends[38] }
            }
        );
        // One in record 10 is damage: record 11 was appended after record
        // 10 was synced, and says so. The survey changed nothing.
        flip(ends[9] + 30);
        assert_eq!(
            survey(dev.as_ref(), 4).unwrap(),
            Survey {
                records: 10,
                end: LogEnd::Damaged {
                    offset: ends[9],
                    witness: ends[10],
                    durable: ends[10],
                }
            }
        );
        assert_eq!(mem.len(), len);
    }

    fn splitmix(x: &mut u64) -> u64 {
        *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// However a crash treats the unsynced blocks, across several lives of
    /// one log, opening never mistakes what it left for damage, and
    /// replays a prefix holding every synced record.
    #[test]
    fn crashes_never_read_as_damage() {
        for seed in 0..300u64 {
            let mut rng = seed;
            let faulty = Arc::new(FaultyDevice::new(MemDevice::new()));
            let dev: Arc<dyn BlockDevice> = faulty.clone();
            let mut written: Vec<Vec<u8>> = Vec::new();
            // Records a crash must not take: every one synced (opening
            // syncs what it replays).
            let mut durable = 0;
            for life in 0..4 {
                let mut got = Vec::new();
                let wal = Wal::open(dev.clone(), 7, &mut |p| {
                    got.push(p.to_vec());
                    Ok(())
                })
                .unwrap_or_else(|e| panic!("seed {seed} life {life}: {e}"));
                assert!(
                    got.len() >= durable,
                    "seed {seed} life {life}: synced record lost"
                );
                assert_eq!(got[..], written[..got.len()], "seed {seed}: not a prefix");
                written.truncate(got.len());
                durable = written.len();
                for _ in 0..splitmix(&mut rng) % 40 {
                    let r = splitmix(&mut rng);
                    let p = vec![(r >> 8) as u8; 1 + (r % 3000) as usize];
                    let lsn = wal.append(&p).unwrap();
                    written.push(p);
                    let sync = r.is_multiple_of(4);
                    if sync || r.is_multiple_of(3) {
                        wal.commit(lsn, sync).unwrap();
                    }
                    if sync {
                        durable = written.len();
                    }
                }
                drop(wal);
                // Some lives end in a plain reopen, whose unsynced blocks
                // a later crash can still take.
                if splitmix(&mut rng).is_multiple_of(3) {
                    continue;
                }
                let keep = (splitmix(&mut rng) % 100) as f64 / 100.0;
                faulty
                    .crash(CrashMode::KeepRandom {
                        seed: splitmix(&mut rng),
                        keep,
                    })
                    .unwrap();
                faulty.restart();
            }
        }
    }

    /// Told to salvage, opening replays a damaged log up to the damage,
    /// cuts it off there and says so; the log then goes on from there.
    #[test]
    fn a_salvaging_open_keeps_what_precedes_the_damage() {
        let mem = Arc::new(MemDevice::new());
        let dev: Arc<dyn BlockDevice> = mem.clone();
        let wal = Wal::open(dev.clone(), 1, &mut |_| Ok(())).unwrap();
        let mut ends = Vec::new();
        for i in 0..20u8 {
            let lsn = wal.append(&[i; 300]).unwrap();
            wal.commit(lsn, true).unwrap();
            ends.push(lsn);
        }
        drop(wal);
        let at = ends[6] + 50;
        let mut b = AlignedBuf::zeroed(4096);
        let block = at / 4096 * 4096;
        mem.read_at(&mut b, block).unwrap();
        b[(at - block) as usize] ^= 4;
        mem.write_at(&b, block).unwrap();
        assert!(Wal::open(dev.clone(), 1, &mut |_| Ok(())).is_err());
        let mut got = Vec::new();
        let (wal, salvaged) =
            Wal::open_with(dev.clone(), 1, WalRecovery::TruncateAtDamage, &mut |p| {
                got.push(p.to_vec());
                Ok(())
            })
            .unwrap();
        let s = salvaged.expect("the cut is reported");
        assert_eq!(s.offset, ends[6]);
        assert!(s.dropped_bytes >= ends[19] - ends[6], "{s:?}");
        assert_eq!(got, (0..7u8).map(|i| vec![i; 300]).collect::<Vec<_>>());
        let lsn = wal.append(b"after").unwrap();
        wal.commit(lsn, true).unwrap();
        drop(wal);
        got.push(b"after".to_vec());
        assert_eq!(replay_all(dev, 1), got);
    }

    /// Records without claims, as logs held before claims existed, replay;
    /// the log continues with claiming records, which vouch for them.
    #[test]
    fn logs_written_before_claims_replay_and_continue() {
        let mem = Arc::new(MemDevice::new());
        let dev: Arc<dyn BlockDevice> = mem.clone();
        let mut old = Vec::new();
        for i in 0..6u8 {
            encode_record(2, &[i; 700], &mut old);
        }
        let mut b = AlignedBuf::zeroed(old.len().div_ceil(4096) * 4096);
        b[..old.len()].copy_from_slice(&old);
        mem.write_at(&b, 0).unwrap();
        let mut got = replay_all(dev.clone(), 2);
        let wal = Wal::open(dev.clone(), 2, &mut |_| Ok(())).unwrap();
        let lsn = wal.append(b"new").unwrap();
        wal.commit(lsn, true).unwrap();
        drop(wal);
        got.push(b"new".to_vec());
        assert_eq!(replay_all(dev.clone(), 2), got);
        // Damage to an old record is now provable.
        mem.read_at(&mut b, 0).unwrap();
        b[100] ^= 1;
        mem.write_at(&b, 0).unwrap();
        assert!(survey(dev.as_ref(), 2)
            .map(|s| matches!(s.end, LogEnd::Damaged { .. }))
            .unwrap());
    }

    #[test]
    fn damage_to_durable_records_is_refused_and_left_in_place() {
        let mem = Arc::new(MemDevice::new());
        let dev: Arc<dyn BlockDevice> = mem.clone();
        let wal = Wal::open(dev.clone(), 1, &mut |_| Ok(())).unwrap();
        for i in 0..30u8 {
            let lsn = wal.append(&[i; 500]).unwrap();
            wal.commit(lsn, i % 3 == 2).unwrap();
        }
        wal.seal().unwrap();
        drop(wal);
        let image = |m: &MemDevice| {
            let mut b = AlignedBuf::zeroed(m.len() as usize);
            m.read_at(&mut b, 0).unwrap();
            b.to_vec()
        };
        let before = image(&mem);
        // Damage anywhere in the sealed log, even in its last record, is
        // told from a torn tail.
        let last_record = 29 * (HEADER_LEN + CLAIM_LEN + 500);
        for at in [40usize, 5000, last_record + 100] {
            let mut bad = before.clone();
            bad[at] ^= 0x10;
            let mut b = AlignedBuf::zeroed(bad.len());
            b.copy_from_slice(&bad);
            mem.write_at(&b, 0).unwrap();
            let err = Wal::open(dev.clone(), 1, &mut |_| Ok(()))
                .err()
                .unwrap_or_else(|| panic!("damage at {at} opened"));
            assert!(err.is_corruption(), "{err}");
            assert_eq!(image(&mem), bad, "opening changed the damaged log");
        }
        // The seal is not replayed; the records are.
        let mut b = AlignedBuf::zeroed(before.len());
        b.copy_from_slice(&before);
        mem.write_at(&b, 0).unwrap();
        let got = replay_all(dev, 1);
        assert_eq!(got, (0..30u8).map(|i| vec![i; 500]).collect::<Vec<_>>());
    }

    /// Records of 1 KiB, four to a block, so record boundaries fall on
    /// block boundaries.
    fn kib_record(i: u8) -> Vec<u8> {
        vec![i; 1024 - HEADER_LEN - CLAIM_LEN]
    }

    #[test]
    fn records_a_crash_left_past_a_torn_one_never_return() {
        // Find a crash that keeps the third block of an unsynced write and
        // loses the second: the log ends at the first block, while the
        // third still holds whole records of the same epoch.
        let found = (0..64u64).find_map(|seed| {
            let faulty = Arc::new(FaultyDevice::new(MemDevice::new()));
            let wal = Wal::open(faulty.clone(), 0, &mut |_| Ok(())).unwrap();
            for i in 0..4 {
                wal.append(&kib_record(i)).unwrap();
            }
            wal.sync().unwrap();
            for i in 4..12 {
                let lsn = wal.append(&kib_record(i)).unwrap();
                if i == 11 {
                    wal.commit(lsn, false).unwrap();
                }
            }
            drop(wal);
            faulty
                .crash(CrashMode::KeepRandom { seed, keep: 0.5 })
                .unwrap();
            faulty.restart();
            let mut third = AlignedBuf::zeroed(4096);
            faulty.read_at(&mut third, 8192).ok()?;
            let lost_second = replay_all(faulty.clone(), 0).len() == 4;
            (lost_second && third[HEADER_LEN + CLAIM_LEN] == 8).then_some(faulty)
        });
        let faulty = found.expect("some seed keeps the third block alone");
        // Reopen and write four new records: they end on the boundary
        // where the stale third block began.
        let wal = Wal::open(faulty.clone(), 0, &mut |_| Ok(())).unwrap();
        for i in 100..104 {
            wal.append(&kib_record(i)).unwrap();
        }
        wal.sync().unwrap();
        drop(wal);
        faulty.crash(CrashMode::DropAll).unwrap();
        faulty.restart();
        let want: Vec<Vec<u8>> = (0..4).chain(100..104).map(kib_record).collect();
        assert_eq!(replay_all(faulty, 0), want, "stale records replayed");
    }

    #[test]
    fn a_durable_record_is_not_synced_again_after_a_reset() {
        let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new());
        let wal = Wal::open(dev.clone(), 0, &mut |_| Ok(())).unwrap();
        let old = wal.append(b"before").unwrap();
        wal.commit(old, true).unwrap();
        wal.reset(1).unwrap();
        let lsn = wal.append(b"after").unwrap();
        assert!(lsn > old, "LSNs stay ordered across resets");
        wal.commit(lsn, true).unwrap();
        let syncs = dev.io_stats().syncs;
        // Both are durable: committing either again costs no I/O.
        wal.commit(lsn, true).unwrap();
        wal.commit(old, true).unwrap();
        assert_eq!(dev.io_stats().syncs, syncs);
    }

    #[test]
    fn a_failed_sync_poisons_the_log() {
        let faulty = Arc::new(FaultyDevice::new(MemDevice::new()));
        let wal = Wal::open(faulty.clone(), 0, &mut |_| Ok(())).unwrap();
        faulty.inject(FaultRule::nth(FaultOp::Sync, 1, FaultKind::Eio));
        let lsn = wal.append(b"x").unwrap();
        assert!(wal.commit(lsn, true).is_err());
        assert!(matches!(wal.append(b"y"), Err(Error::Poisoned { .. })));
    }

    #[test]
    fn concurrent_committers_all_become_durable() {
        let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new());
        let wal = Arc::new(Wal::open(dev.clone(), 0, &mut |_| Ok(())).unwrap());
        let hs: Vec<_> = (0..4u8)
            .map(|t| {
                let wal = wal.clone();
                std::thread::spawn(move || {
                    for i in 0..200u8 {
                        let lsn = wal.append(&[t, i]).unwrap();
                        wal.commit(lsn, true).unwrap();
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        let syncs = dev.io_stats().syncs;
        assert!(syncs <= 800, "group commit shares syncs ({syncs})");
        let got = replay_all(dev.clone(), 0);
        assert_eq!(got.len(), 800);
    }

    #[test]
    fn reset_starts_an_empty_epoch() {
        let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new());
        let wal = Wal::open(dev.clone(), 0, &mut |_| Ok(())).unwrap();
        let lsn = wal.append(b"old").unwrap();
        let unsynced = wal.append(b"covered by a checkpoint").unwrap();
        wal.commit(lsn, true).unwrap();
        wal.reset(1).unwrap();
        // A record made redundant by the reset commits at once.
        wal.commit(unsynced, true).unwrap();
        let lsn = wal.append(b"new").unwrap();
        wal.commit(lsn, true).unwrap();
        assert_eq!(replay_all(dev, 1), vec![b"new".to_vec()]);
    }
}
