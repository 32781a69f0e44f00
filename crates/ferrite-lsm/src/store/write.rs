//! The write path: a batch takes sequence numbers under the writer lock,
//! is appended to the live memtable's WAL and inserted into the memtable,
//! then the visible sequence number moves; the WAL commit (group-committed,
//! per `SyncMode`) happens after the lock is released. Writers that arrive
//! together form a write group (`ferrite_core::engine::WriteGroup`): one
//! of them logs and inserts all their batches under one acquisition of the
//! lock and commits them once.
//!
//! A full memtable is rotated: its WAL is synced, the next WAL device is
//! emptied and takes the new epoch, and the old memtable joins the
//! immutable list the flush thread drains. Writers wait (counted) while
//! the immutable list or L0 is full, and are delayed a millisecond once
//! past the L0 slowdown mark.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrite_core::engine::check_counter;
use ferrite_core::{
    BatchOp, CommitView, Error, KeyRange, Result, ScanVisitor, SyncMode, WriteBatch, WriteCheck,
};
use ferrite_wal::Wal;

use super::devices::Devices;
use super::{Inner, SuperVersion, Writer, WAL_DEVICES};
use crate::memtable::Memtable;

/// A WAL record: `seq: u64 LE` then the batch's encoding.
pub(super) fn encode_record(seq: u64, ops: &WriteBatch) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + ops.encoded_len());
    out.extend_from_slice(&seq.to_le_bytes());
    ops.encode(&mut out);
    out
}

pub(super) fn decode_record(payload: &[u8]) -> Result<(u64, WriteBatch)> {
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

/// A new, empty WAL for memtable `mem_id`, on the device it takes in turn.
/// Its first record, synced at once, is an empty batch: it marks the
/// device as memtable `mem_id`'s from the start, which is what
/// [`check_logs_behind`] reads.
pub(super) fn fresh_wal(devices: &Devices, mem_id: u64) -> Result<Wal> {
    let dev = devices.wal[(mem_id % WAL_DEVICES as u64) as usize].clone();
    dev.set_len(0)?;
    dev.sync()?;
    let wal = Wal::open(dev, mem_id, &mut |_| Ok(()))?;
    let lsn = wal.append(&encode_record(0, &WriteBatch::new()))?;
    wal.commit(lsn, true)?;
    Ok(wal)
}

impl Inner {
    /// Empties every WAL device whose memtable lies below the log floor
    /// (in tables both manifest copies name), so a log does not outlive
    /// its memtable until its device comes round again. Under the writer lock, since a rotation may be
    /// handing the same device to a new memtable. Not synced: a log that
    /// comes back after a crash is one recovery does not read.
    pub(super) fn retire_logs(&self) -> Result<()> {
        let floor = self.log_floor.load(Ordering::Acquire);
        let mut w = self.writer.lock();
        let active = w.mem.id();
        for (slot, dev) in self.devices.wal.iter().enumerate() {
            if dev.is_empty() {
                continue;
            }
            let Some(mem) = ferrite_wal::first_epoch(dev.as_ref())? else {
                continue;
            };
            if mem >= floor || mem == active {
                continue;
            }
            // As in a rotation: a writer that appended to this log may
            // still be committing to it.
            if let Some(old) = w.wal_slots[slot].take() {
                while Arc::strong_count(&old) > 1 {
                    std::thread::yield_now();
                }
            }
            dev.set_len(0)?;
            self.counters.retired_logs.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// After a flush, and at a clean close after the last one: writes the
    /// manifest once more if the older copy still names an older log
    /// number, so both copies are past the flushed memtables, then empties
    /// their logs. A flushed memtable's log is gone as soon as its table is
    /// installed (one small manifest write per flush, against holding a
    /// memtable's worth of log on disk until the next one), and a store at
    /// rest holds its tables and the live memtable's (empty) log.
    pub(super) fn retire_flushed_logs(&self) -> Result<()> {
        {
            let mut meta = self.meta.lock();
            if self.log_floor.load(Ordering::Acquire) < meta.state.log_number {
                let state = meta.state.clone();
                self.store_manifest(&mut meta, state)?;
            }
        }
        self.retire_logs()
    }
}

/// What a conditional write's check reads: the current view, taken with
/// the writer lock held, so every earlier write shows and no later one.
struct CheckView<'a>(&'a Inner);

impl CommitView for CheckView<'_> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.0.get(key)
    }

    fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.0.scan(range, false, visit).map(drop)
    }

    fn write_sequence(&self) -> Option<u64> {
        Some(self.0.visible.load(Ordering::Acquire))
    }
}

impl Inner {
    pub(super) fn write(&self, batch: &WriteBatch) -> Result<()> {
        match &self.group {
            Some(g) => g.write(batch, &|batches| self.write_group(batches)),
            None => self.write_if(batch, &mut |_| Ok(true)).map(drop),
        }
    }

    /// Writes a write group's batches: each logged and inserted in turn
    /// under one acquisition of the writer lock, then one commit (or
    /// sync) of the log for all. One result per batch.
    fn write_group(&self, batches: &[&WriteBatch]) -> Vec<Result<()>> {
        if self.check().is_err() {
            return batches.iter().map(|_| self.check()).collect();
        }
        let mut results = Vec::with_capacity(batches.len());
        let mut bytes = 0;
        let (last, sync_now) = {
            let mut w = self.writer.lock();
            let mut last = None;
            for batch in batches {
                results.push(self.log_and_insert(&mut w, batch).map(|logged| {
                    if let Some(l) = logged {
                        last = Some(l);
                    }
                    bytes += batch.payload_bytes() as u64;
                }));
            }
            let sync_now = last.is_some() && self.sync_due(&mut w);
            (last, sync_now)
        };
        self.counters.api.add_written(bytes);
        if let Some((wal, lsn)) = last {
            let r = if sync_now {
                wal.commit(lsn, true)
            } else {
                wal.write_if_over(1 << 20)
            };
            if let Err(e) = r {
                self.poison(&e);
                for r in &mut results {
                    if r.is_ok() {
                        *r = self.check();
                    }
                }
            }
        }
        results
    }

    /// Writes `batch` if `cond` says so, reading keys under the writer
    /// lock (every earlier write applied, no later one started); returns
    /// whether it did.
    pub(super) fn write_if(&self, batch: &WriteBatch, cond: &mut WriteCheck<'_>) -> Result<bool> {
        self.check()?;
        if batch.is_empty() {
            return Ok(true);
        }
        let payload_bytes = batch.payload_bytes() as u64;
        let (logged, sync_now) = {
            let mut w = self.writer.lock();
            // Room first: making it may wait with the lock let go, and
            // no other write may come between the check and the batch.
            self.make_room(&mut w)?;
            if !cond(&CheckView(self))? {
                return Ok(false);
            }
            let logged = self.append_and_insert(&mut w, batch)?;
            (logged, self.sync_due(&mut w))
        };
        self.counters.api.add_written(payload_bytes);
        let Some((wal, lsn)) = logged else {
            return Ok(true);
        };
        let r = if sync_now {
            wal.commit(lsn, true)
        } else {
            wal.write_if_over(1 << 20)
        };
        r.inspect_err(|e| self.poison(e)).map(|()| true)
    }

    /// Under the writer lock: gives `batch` its sequence numbers, logs it
    /// and inserts it into the memtable, then makes it visible; returns
    /// the log it went to and its position there (`None` for an empty
    /// batch, which writes nothing).
    fn log_and_insert(
        &self,
        w: &mut parking_lot::MutexGuard<'_, Writer>,
        batch: &WriteBatch,
    ) -> Result<Option<(Arc<Wal>, ferrite_wal::Lsn)>> {
        if !batch.is_empty() {
            self.check()?;
            self.make_room(w)?;
        }
        self.append_and_insert(w, batch)
    }

    /// [`Self::log_and_insert`] once the memtable has room: never lets the
    /// writer lock go.
    fn append_and_insert(
        &self,
        w: &mut parking_lot::MutexGuard<'_, Writer>,
        batch: &WriteBatch,
    ) -> Result<Option<(Arc<Wal>, ferrite_wal::Lsn)>> {
        self.check()?;
        if batch.is_empty() {
            return Ok(None);
        }
        let seq = w.next_seq;
        let n = batch.len() as u64;
        // Replay refuses a record whose numbers reach the limit.
        ferrite_core::engine::persistable_counter(seq + n, "lsm wal")?;
        let lsn = w
            .wal
            .append(&encode_record(seq, batch))
            .inspect_err(|e| self.poison(e))?;
        for (i, op) in batch.ops().iter().enumerate() {
            let s = seq + i as u64;
            match op {
                BatchOp::Put { key, value } => w.mem.insert(key, s, Some(value)),
                BatchOp::Delete { key } => w.mem.insert(key, s, None),
                BatchOp::DeleteRange { start, end } => w.mem.delete_range(start, end, s),
            }
        }
        w.next_seq += n;
        self.visible.store(seq + n - 1, Ordering::Release);
        Ok(Some((w.wal.clone(), lsn)))
    }

    /// Whether the write just logged syncs the log: always under
    /// `SyncMode::Always`, once an interval has passed under `Batched`.
    fn sync_due(&self, w: &mut parking_lot::MutexGuard<'_, Writer>) -> bool {
        match self.sync {
            SyncMode::Always => true,
            SyncMode::Batched(d) if w.last_sync.elapsed() >= d => {
                w.last_sync = Instant::now();
                true
            }
            _ => false,
        }
    }

    /// Makes room for a write: rotates a full memtable and waits while
    /// too many memtables or L0 tables are waiting for the background.
    fn make_room(&self, w: &mut parking_lot::MutexGuard<'_, Writer>) -> Result<()> {
        let mut stalled: Option<Instant> = None;
        let mut slowed = false;
        loop {
            self.check()?;
            let (imms, l0, tables) = {
                let sv = self.current.read();
                (sv.imms.len(), sv.version.max_l0(), sv.version.table_bytes())
            };
            let full = self.opts.rotation_due(w.mem.bytes(), w.wal.len(), tables);
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
    pub(super) fn rotate(&self, w: &mut Writer) -> Result<()> {
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
        let mem = Arc::new(Memtable::with_partitions(
            id,
            self.opts.partitions,
            self.opts.memtable_bytes,
        ));
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
    pub(super) fn flush_locked(&self, w: &mut parking_lot::MutexGuard<'_, Writer>) -> Result<()> {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_whose_sequence_numbers_pass_the_counter_limit_is_damage() {
        let mut batch = WriteBatch::new();
        batch.put(b"a", b"1").unwrap().delete(b"b").unwrap();
        let last_ok = ferrite_core::engine::COUNTER_LIMIT - 3;
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
