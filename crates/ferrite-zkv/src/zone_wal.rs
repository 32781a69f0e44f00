//! The write-ahead log area: several instances that buffer records, and
//! one ring of zones they flush to, written only at write pointers.
//!
//! Records use `ferrite-wal`'s checksummed framing with the record's
//! sequence number in the epoch field, and claim the sequence number below
//! which every record was durable when they were appended: a record past
//! a gap that claims the gap's record was durable proves the gap is
//! damage, not a torn tail, and recovery refuses it rather than drop the
//! acknowledged writes after it. A writer appends to an *instance*
//! (the one its thread last used, or any free one), so concurrent writers
//! do not contend on one buffer. An instance holds whole records and
//! leaves as a *unit* when the next record would pass 4 KiB (the paper's
//! flush unit): the unit is padded to whole blocks and written at the
//! ring's write pointer, so a record never straddles a unit and the units
//! of different instances can interleave on the device. A record larger
//! than a block leaves as a unit of its own.
//!
//! Sequence numbers are handed out by the caller under the lock that
//! orders applies to memory (see `store.rs`), while it holds its
//! instance, so memory and the log agree on the order of every key's
//! writes. Units reach the device out of sequence order; replay collects
//! records from the position a MetaLog recorded, reorders them, and
//! applies the longest gap-free run, so a crash loses a suffix of the
//! writes and never a write in the middle. To keep that suffix short, an
//! instance whose buffer has lagged `lag_bytes` behind the log is flushed
//! by the next writer that writes a unit.
//!
//! Each checkpoint ends with a *mark*, a record of its own sequence number
//! naming the MetaLog version it follows ([`ZoneWal::write_mark`]), written
//! and synced before any record after it. A mark replay cannot reach
//! (stranded past a gap) proves a MetaLog newer than the one replay
//! started from was committed, and that the log between is gone: the
//! newer snapshot is damaged, not torn, and recovery refuses to fall back.
//!
//! Invariants: an acknowledged durable commit of sequence `s` wrote and
//! synced every buffered record below `s`, in every instance, so replay's
//! gap-free run reaches it. A checkpoint holds every instance, so every
//! handed-out sequence number is applied and in the snapshot: it drops the
//! buffers instead of writing them. When the ring has no empty zone left,
//! units stay buffered and writers checkpoint first ([`ZoneWal::has_room`],
//! [`Commit::NeedsCheckpoint`]). After a failed write or sync the log is
//! poisoned.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use ferrite_core::engine::Poison;
use ferrite_core::{Error, Result};
use ferrite_io::{AlignedBuf, ZonedDevice};
use ferrite_wal::{decode_record, encode_claiming_record, CLAIM_LEN, HEADER_LEN};
use parking_lot::{Mutex, MutexGuard};

/// The payload of a checkpoint mark: this magic, then the MetaLog version.
/// A write batch's encoding never starts with it (its count would be 1.3
/// billion operations in 16 bytes).
const MARK_MAGIC: &[u8; 8] = b"ZKVCKPT1";

/// A checkpoint mark's payload.
pub fn mark(version: u64) -> Vec<u8> {
    let mut out = MARK_MAGIC.to_vec();
    out.extend_from_slice(&version.to_le_bytes());
    out
}

/// The MetaLog version a payload marks, if it is a checkpoint mark.
pub fn mark_version(payload: &[u8]) -> Option<u64> {
    let rest = payload.strip_prefix(MARK_MAGIC)?;
    Some(u64::from_le_bytes(rest.try_into().ok()?))
}

/// What replay found.
#[derive(Debug)]
pub struct Replayed {
    /// The sequence number after the gap-free run.
    pub next_seq: u64,
    /// Ring index of the last zone holding log bytes (where the log
    /// continues, behind anything replay left out).
    pub tail: u32,
    /// Records past the first gap, by sequence number.
    pub stranded: Vec<(u64, Vec<u8>)>,
    /// A record past the gap that claims every record below a sequence
    /// number past the gap was durable, as (its sequence, the claim):
    /// the gap is damage.
    pub vouched: Option<(u64, u64)>,
}

/// Where replay starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalPosition {
    /// Index into the WAL ring.
    pub ring: u32,
    /// Device byte address (block aligned).
    pub addr: u64,
    /// Sequence number of the first record at `addr`.
    pub seq: u64,
}

/// One instance's buffer of whole records.
pub struct Instance {
    index: usize,
    tail: Vec<u8>,
    /// Log bytes written when the buffer took its first record.
    started: u64,
}

/// The ring's write position and counters.
struct Ring {
    cur: usize,
    /// Device address of the next unit.
    at: u64,
    /// The next unit did not fit and the next zone is not empty yet.
    full: bool,
    bytes_written: u64,
    bytes_since_checkpoint: u64,
    poisoned: Poison,
}

/// Outcome of [`ZoneWal::commit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commit {
    Durable,
    /// The ring is full: a checkpoint makes the records durable instead.
    NeedsCheckpoint,
}

pub struct ZoneWal {
    dev: Arc<dyn ZonedDevice>,
    zones: Vec<u32>,
    instances: Vec<Mutex<Instance>>,
    ring: Mutex<Ring>,
    next_seq: AtomicU64,
    /// Records with a smaller sequence are durable.
    durable: AtomicU64,
    /// Serialises commits (a group commit covers every waiter) and holds
    /// the time of the last sync.
    sync: Mutex<Instant>,
    /// Log bytes an instance's buffer may lag before another writer
    /// flushes it.
    lag_bytes: u64,
    rr: AtomicUsize,
}

thread_local! {
    /// The instance this thread last appended to.
    static HOME: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
}

impl ZoneWal {
    pub fn new(dev: Arc<dyn ZonedDevice>, zones: Vec<u32>, pos: WalPosition, n: usize) -> Self {
        let n = n.max(1);
        let bs = u64::from(dev.geometry().block_size);
        Self {
            instances: (0..n)
                .map(|index| {
                    Mutex::new(Instance {
                        index,
                        tail: Vec::new(),
                        started: 0,
                    })
                })
                .collect(),
            ring: Mutex::new(Ring {
                cur: pos.ring as usize % zones.len().max(1),
                at: pos.addr,
                full: false,
                bytes_written: 0,
                bytes_since_checkpoint: 0,
                poisoned: Poison::new(),
            }),
            next_seq: AtomicU64::new(pos.seq),
            durable: AtomicU64::new(pos.seq),
            sync: Mutex::new(Instant::now()),
            lag_bytes: 4 * n as u64 * bs,
            rr: AtomicUsize::new(0),
            zones,
            dev,
        }
    }

    fn bs(&self) -> u64 {
        u64::from(self.dev.geometry().block_size)
    }

    pub fn check(&self) -> Result<()> {
        self.ring.lock().poisoned.check()
    }

    /// An instance for this thread: the one it used last if free, else
    /// any free one, else it waits for its own.
    pub fn enter(&self) -> MutexGuard<'_, Instance> {
        let n = self.instances.len();
        let home = HOME.with(|h| {
            if h.get() >= n {
                h.set(self.rr.fetch_add(1, Ordering::Relaxed) % n);
            }
            h.get()
        });
        for i in 0..n {
            if let Some(g) = self.instances[(home + i) % n].try_lock() {
                HOME.with(|h| h.set(g.index));
                return g;
            }
        }
        self.instances[home].lock()
    }

    /// Every instance, in index order: no record can be appended while
    /// they are held.
    pub fn enter_all(&self) -> Vec<MutexGuard<'_, Instance>> {
        self.instances.iter().map(|i| i.lock()).collect()
    }

    /// The next sequence number. Call it while holding an instance and
    /// the lock that orders applies, then [`ZoneWal::append`] the record
    /// before leaving the instance.
    pub fn next_seq(&self) -> u64 {
        self.next_seq.fetch_add(1, Ordering::AcqRel)
    }

    /// Whether a record of `payload_len` bytes can be appended without
    /// the ring running into a zone a checkpoint has not freed yet, with
    /// room to spare for every instance's buffer.
    pub fn has_room(&self, payload_len: usize) -> bool {
        let bs = self.bs();
        let need = (HEADER_LEN + CLAIM_LEN + payload_len) as u64;
        let spare = self.instances.len() as u64 * bs;
        let r = self.ring.lock();
        if r.full {
            return false;
        }
        if r.at + need.div_ceil(bs) * bs + spare <= self.zone_end(r.cur) {
            return true;
        }
        self.zone_empty(self.zones[(r.cur + 1) % self.zones.len()])
    }

    fn zone_end(&self, cur: usize) -> u64 {
        let g = self.dev.geometry();
        u64::from(self.zones[cur]) * g.zone_size + g.zone_capacity
    }

    fn zone_empty(&self, z: u32) -> bool {
        let g = self.dev.geometry();
        self.dev
            .report_zones(z, 1)
            .first()
            .is_some_and(|i| i.write_pointer == u64::from(z) * g.zone_size)
    }

    /// Buffers the record `seq` in `inst`, writing units as they fill.
    pub fn append(&self, inst: &mut Instance, seq: u64, payload: &[u8]) -> Result<()> {
        self.check()?;
        let bs = self.bs() as usize;
        let need = HEADER_LEN + CLAIM_LEN + payload.len();
        let cap = self.dev.geometry().zone_capacity;
        if need as u64 > cap / 2 {
            return Err(Error::InvalidOptions(format!(
                "a WAL record of {need} bytes exceeds half a zone ({cap} bytes); use larger zones"
            )));
        }
        let mut wrote = false;
        if !inst.tail.is_empty() && inst.tail.len() + need > bs {
            wrote |= self.flush(inst)?;
        }
        if inst.tail.is_empty() {
            inst.started = self.ring.lock().bytes_written;
        }
        // Every record below `durable` is synced, and `seq` is not yet
        // (a commit covering it waits for this instance).
        let durable = self.durable.load(Ordering::Acquire);
        encode_claiming_record(seq, durable, false, payload, &mut inst.tail);
        if inst.tail.len() >= bs {
            wrote |= self.flush(inst)?;
        }
        if wrote && self.instances.len() > 1 {
            self.flush_laggards(inst.index)?;
        }
        Ok(())
    }

    /// Flushes other instances whose buffers lag far behind the log, if
    /// they are free (a busy one is being appended to).
    fn flush_laggards(&self, mine: usize) -> Result<()> {
        let written = self.ring.lock().bytes_written;
        for (i, m) in self.instances.iter().enumerate() {
            if i == mine {
                continue;
            }
            if let Some(mut g) = m.try_lock() {
                if !g.tail.is_empty() && written.saturating_sub(g.started) > self.lag_bytes {
                    self.flush(&mut g)?;
                }
            }
        }
        Ok(())
    }

    /// Writes `inst`'s buffer as one unit. Returns false (and keeps the
    /// buffer) when the ring is full.
    fn flush(&self, inst: &mut Instance) -> Result<bool> {
        if inst.tail.is_empty() {
            return Ok(true);
        }
        let mut r = self.ring.lock();
        self.write_unit(&mut r, &mut inst.tail)
    }

    fn write_unit(&self, r: &mut Ring, unit: &mut Vec<u8>) -> Result<bool> {
        r.poisoned.check()?;
        let bs = self.bs();
        let len = (unit.len() as u64).div_ceil(bs) * bs;
        if r.at + len > self.zone_end(r.cur) {
            let next = (r.cur + 1) % self.zones.len();
            let nz = self.zones[next];
            if !self.zone_empty(nz) {
                r.full = true;
                return Ok(false);
            }
            if let Err(e) = self.dev.finish_zone(self.zones[r.cur]) {
                return Err(poison(r, e.into()));
            }
            r.cur = next;
            r.at = u64::from(nz) * self.dev.geometry().zone_size;
        }
        let n = match crate::block_tail::write_blocks(self.dev.as_ref(), unit, r.at, true) {
            Ok(n) => n,
            Err(e) => return Err(poison(r, e.into())),
        };
        r.bytes_written += n;
        // Ring space consumed, padding included: what the checkpoint
        // threshold must bound.
        r.bytes_since_checkpoint += n;
        r.at += n;
        Ok(true)
    }

    /// Makes every record up to `seq` durable: writes every instance's
    /// buffer (one unit) and syncs, unless an earlier commit covered it.
    pub fn commit(&self, seq: u64) -> Result<Commit> {
        self.check()?;
        if seq < self.durable.load(Ordering::Acquire) {
            return Ok(Commit::Durable);
        }
        let mut last = self.sync.lock();
        if seq < self.durable.load(Ordering::Acquire) {
            return Ok(Commit::Durable);
        }
        // Every sequence below `target` was handed out under an instance
        // lock and appended before that lock was released, so locking each
        // instance below finds it buffered or written.
        let target = self.next_seq.load(Ordering::Acquire);
        let mut held = self.enter_all();
        let mut unit = Vec::new();
        for g in held.iter_mut() {
            unit.append(&mut g.tail);
        }
        let mut r = self.ring.lock();
        if !self.write_unit(&mut r, &mut unit)? {
            // Give the records back; the checkpoint takes them from memory.
            if let Some(g) = held.first_mut() {
                g.tail = unit;
            }
            return Ok(Commit::NeedsCheckpoint);
        }
        drop(held);
        // (Skipped only under a crash test's negative control.)
        if !ferrite_wal::commit_sync_skipped() {
            if let Err(e) = self.dev.sync() {
                return Err(poison(&mut r, e.into()));
            }
        }
        drop(r);
        self.durable.fetch_max(target, Ordering::AcqRel);
        *last = Instant::now();
        Ok(Commit::Durable)
    }

    /// Writes a checkpoint mark as the next record, after whatever the
    /// instances still buffer (a checkpoint has dropped it all), and syncs
    /// it. The caller holds every instance (`held`), so the mark follows
    /// every record handed out before it. False, with nothing written and
    /// the buffers kept, when the ring has no room.
    pub fn write_mark(&self, held: &mut [MutexGuard<'_, Instance>], version: u64) -> Result<bool> {
        debug_assert_eq!(held.len(), self.instances.len());
        self.check()?;
        let seq = self.next_seq.load(Ordering::Acquire);
        let mut unit = Vec::new();
        for g in held.iter_mut() {
            unit.append(&mut g.tail);
        }
        let buffered = unit.len();
        let durable = self.durable.load(Ordering::Acquire);
        encode_claiming_record(seq, durable, false, &mark(version), &mut unit);
        let mut r = self.ring.lock();
        if !self.write_unit(&mut r, &mut unit)? {
            unit.truncate(buffered);
            if let Some(g) = held.first_mut() {
                g.tail = unit;
            }
            return Ok(false);
        }
        if let Err(e) = self.dev.sync() {
            return Err(poison(&mut r, e.into()));
        }
        self.next_seq.store(seq + 1, Ordering::Release);
        self.durable.fetch_max(seq + 1, Ordering::AcqRel);
        Ok(true)
    }

    pub fn since_last_sync(&self) -> std::time::Duration {
        self.sync.lock().elapsed()
    }

    /// The position a MetaLog taken now replays from. `held` must be every
    /// instance ([`ZoneWal::enter_all`]) and every applied record must be
    /// in the snapshot: the buffers are dropped, not written.
    ///
    /// Every record written so far is then dead once the MetaLog is
    /// durable, so when the next ring zone is empty the log moves on to
    /// it (the current zone finished): the resets after the MetaLog
    /// ([`ZoneWal::retired_zones`]) then take every zone holding records,
    /// and a checkpointed log occupies one zone's mark, not a zone's worth
    /// of records.
    pub fn position(&self, held: &mut [MutexGuard<'_, Instance>]) -> Result<WalPosition> {
        debug_assert_eq!(held.len(), self.instances.len());
        for g in held.iter_mut() {
            g.tail.clear();
        }
        let mut r = self.ring.lock();
        r.poisoned.check()?;
        let start = u64::from(self.zones[r.cur]) * self.dev.geometry().zone_size;
        let next = (r.cur + 1) % self.zones.len().max(1);
        if next != r.cur && r.at > start && self.zone_empty(self.zones[next]) {
            if let Err(e) = self.dev.finish_zone(self.zones[r.cur]) {
                return Err(poison(&mut r, e.into()));
            }
            r.cur = next;
            r.at = u64::from(self.zones[next]) * self.dev.geometry().zone_size;
        }
        Ok(WalPosition {
            ring: r.cur as u32,
            addr: r.at,
            seq: self.next_seq.load(Ordering::Acquire),
        })
    }

    /// Ring zones other than the current one (free them after a MetaLog).
    pub fn retired_zones(&self) -> Vec<u32> {
        let cur = self.ring.lock().cur;
        self.zones
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != cur)
            .map(|(_, &z)| z)
            .collect()
    }

    /// A MetaLog covering every record is durable and the retired zones
    /// are empty.
    pub fn checkpointed(&self) {
        self.durable
            .fetch_max(self.next_seq.load(Ordering::Acquire), Ordering::AcqRel);
        let mut r = self.ring.lock();
        r.full = false;
        r.bytes_since_checkpoint = 0;
    }

    /// Continues the log at `pos` (after recovery): buffers are dropped
    /// and every record below `pos.seq` counts as durable.
    pub fn restart(&self, pos: WalPosition) {
        let mut held = self.enter_all();
        for g in held.iter_mut() {
            g.tail.clear();
        }
        let mut r = self.ring.lock();
        r.cur = pos.ring as usize % self.zones.len().max(1);
        r.at = pos.addr;
        r.full = false;
        self.next_seq.store(pos.seq, Ordering::Release);
        self.durable.store(pos.seq, Ordering::Release);
    }

    /// The sequence number of the newest record handed out (0: none).
    pub fn last_seq(&self) -> u64 {
        self.next_seq.load(Ordering::Acquire).saturating_sub(1)
    }

    pub fn bytes_written(&self) -> u64 {
        self.ring.lock().bytes_written
    }

    pub fn bytes_since_checkpoint(&self) -> u64 {
        self.ring.lock().bytes_since_checkpoint
    }
}

fn poison(r: &mut Ring, e: Error) -> Error {
    r.poisoned.set_in("WAL", &e);
    e
}

/// Replays records from `pos` into `apply(seq, payload)` in sequence
/// order, up to the first missing sequence number.
pub fn replay(
    dev: &dyn ZonedDevice,
    ring: &[u32],
    pos: WalPosition,
    apply: &mut dyn FnMut(u64, &[u8]) -> Result<()>,
) -> Result<Replayed> {
    let g = *dev.geometry();
    let bs = u64::from(g.block_size) as usize;
    let n = ring.len().max(1);
    let mut cur = pos.ring as usize % n;
    let mut addr = pos.addr;
    let mut seq = pos.seq;
    let mut last = cur as u32;
    // Records that arrived before an earlier sequence number did.
    let mut early: std::collections::BTreeMap<u64, Vec<u8>> = Default::default();
    // The largest claim of a record of this log's life (a claim is never
    // past the record's own sequence number; one that is, is noise).
    let mut claimed: Option<(u64, u64)> = None;
    for step in 0..n {
        let z = ring[cur];
        let start = u64::from(z) * g.zone_size;
        if step > 0 {
            addr = start;
        }
        let wp = dev
            .report_zones(z, 1)
            .first()
            .map_or(start, |i| i.write_pointer);
        if wp <= addr {
            if step > 0 {
                break;
            }
        } else {
            last = cur as u32;
            let mut buf = AlignedBuf::zeroed((wp - addr) as usize);
            dev.read_at(&mut buf, addr)?;
            let mut at = 0usize;
            while at < buf.len() {
                match decode_record(&buf[at..]) {
                    Some((h, payload)) => {
                        if let Some(c) = h.durable.filter(|&c| c <= h.epoch && h.epoch >= pos.seq) {
                            if claimed.is_none_or(|(_, m)| c > m) {
                                claimed = Some((h.epoch, c));
                            }
                        }
                        if h.epoch == seq {
                            apply(seq, payload)?;
                            seq += 1;
                            while let Some(p) = early.remove(&seq) {
                                apply(seq, &p)?;
                                seq += 1;
                            }
                        } else if h.epoch > seq {
                            early.insert(h.epoch, payload.to_vec());
                        }
                        at += h.encoded_len();
                    }
                    // Zero padding or a torn unit: units start on a block.
                    None => at = (at / bs + 1) * bs,
                }
            }
        }
        cur = (cur + 1) % n;
    }
    Ok(Replayed {
        next_seq: seq,
        tail: last,
        stranded: early.into_iter().collect(),
        vouched: claimed.filter(|&(_, c)| c > seq),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_io::{BlockDevice, EmulatedZonedDevice, MemDevice, ZoneGeometry};

    fn wal(instances: usize) -> (Arc<dyn ZonedDevice>, ZoneWal, WalPosition) {
        let dev: Arc<dyn ZonedDevice> = Arc::new(
            EmulatedZonedDevice::format(MemDevice::new(), ZoneGeometry::small(6, 6, 6)).unwrap(),
        );
        let zone = dev.geometry().zone_size;
        let pos = WalPosition {
            ring: 0,
            addr: 2 * zone,
            seq: 1,
        };
        let w = ZoneWal::new(dev.clone(), vec![2, 3, 4], pos, instances);
        (dev, w, pos)
    }

    fn replayed(dev: &dyn ZonedDevice, pos: WalPosition) -> Vec<u64> {
        let mut seen = Vec::new();
        replay(dev, &[2, 3, 4], pos, &mut |s, p| {
            assert_eq!(p, s.to_le_bytes().repeat(40), "payload of {s}");
            seen.push(s);
            Ok(())
        })
        .unwrap();
        seen
    }

    fn put(w: &ZoneWal, inst: &mut Instance) -> u64 {
        let s = w.next_seq();
        w.append(inst, s, &s.to_le_bytes().repeat(40)).unwrap();
        s
    }

    #[test]
    fn units_from_several_instances_replay_in_sequence_order() {
        let (dev, w, pos) = wal(3);
        let mut held = w.enter_all();
        // Round-robin over instances: every unit on the device holds every
        // third record, and the units land out of sequence order.
        let mut last = 0;
        for i in 0..1000 {
            last = put(&w, &mut held[i % 3]);
        }
        drop(held);
        assert_eq!(w.commit(last).unwrap(), Commit::Durable);
        assert_eq!(replayed(dev.as_ref(), pos), (1..=last).collect::<Vec<_>>());
        assert!(
            w.bytes_written() > 3 * 4096,
            "the records span several units"
        );
    }

    #[test]
    fn a_mark_replay_cannot_reach_is_reported_stranded() {
        let (dev, w, pos) = wal(2);
        let mut held = w.enter_all();
        let mut last = 0;
        for _ in 0..20 {
            last = put(&w, &mut held[0]);
        }
        assert!(w.write_mark(&mut held, 7).unwrap());
        drop(held);
        w.commit(last).unwrap();
        // From its own position the mark is one more record in the run.
        let from_start = replay(dev.as_ref(), &[2, 3, 4], pos, &mut |_, _| Ok(())).unwrap();
        assert_eq!(from_start.next_seq, last + 2);
        assert!(from_start.stranded.is_empty());
        // From a position whose first record is gone, the records and the
        // mark are stranded, and the mark names its checkpoint.
        let gone = WalPosition { seq: 0, ..pos };
        let r = replay(dev.as_ref(), &[2, 3, 4], gone, &mut |_, _| Ok(())).unwrap();
        assert_eq!(r.next_seq, 0);
        assert_eq!(r.stranded.len() as u64, last + 1);
        let marks: Vec<u64> = r
            .stranded
            .iter()
            .filter_map(|(_, p)| mark_version(p))
            .collect();
        assert_eq!(marks, vec![7]);
        assert_eq!(mark_version(&mark(u64::MAX)), Some(u64::MAX));
        assert_eq!(mark_version(b"ZKVCKPT1short"), None);
    }

    /// A record lost to damage is told from one lost to a crash: the
    /// records after it were appended once it was synced, and say so.
    #[test]
    fn a_gap_a_later_record_vouches_for_is_reported() {
        for damaged in [4u64, 30] {
            let mem = Arc::new(MemDevice::new());
            let geo = ZoneGeometry::small(6, 6, 6);
            let dev: Arc<dyn ZonedDevice> =
                Arc::new(EmulatedZonedDevice::format(mem.clone(), geo).unwrap());
            let pos = WalPosition {
                ring: 0,
                addr: 2 * geo.zone_size,
                seq: 1,
            };
            let w = ZoneWal::new(dev.clone(), vec![2, 3, 4], pos, 1);
            for _ in 0..30 {
                let s = put(&w, &mut w.enter());
                assert_eq!(w.commit(s).unwrap(), Commit::Durable);
            }
            // One record per synced unit, one unit per block.
            let base = mem.len() - geo.address_space();
            let at = base + pos.addr + (damaged - 1) * 4096 + 40;
            ferrite_core::testkit::flip_bit(mem.as_ref(), at, 3);
            let r = replay(dev.as_ref(), &[2, 3, 4], pos, &mut |_, _| Ok(())).unwrap();
            assert_eq!(r.next_seq, damaged);
            if damaged < 30 {
                assert_eq!(r.vouched, Some((30, 30)), "damage to record {damaged}");
            } else {
                assert_eq!(r.vouched, None, "the last record is a torn tail");
            }
        }
    }

    #[test]
    fn replay_stops_at_the_first_missing_record() {
        let (dev, w, pos) = wal(2);
        let mut held = w.enter_all();
        let (a, b) = held.split_at_mut(1);
        for _ in 0..10 {
            put(&w, &mut a[0]);
        }
        // Record 11 waits in instance 1, which is never written; instance 0
        // goes on and fills units past it.
        let lost = put(&w, &mut b[0]);
        for _ in 0..300 {
            put(&w, &mut a[0]);
        }
        drop(held);
        assert!(w.bytes_written() > 0);
        // Only what instance 0 wrote reached the device; replay keeps the
        // gap-free run and leaves everything after the missing record out.
        assert_eq!(
            replayed(dev.as_ref(), pos),
            (1..lost).collect::<Vec<_>>(),
            "a crash loses a suffix, never a write in the middle"
        );
    }

    #[test]
    fn a_commit_writes_every_instance_and_a_full_ring_asks_for_a_checkpoint() {
        let (dev, w, pos) = wal(4);
        let mut seqs = Vec::new();
        {
            let mut held = w.enter_all();
            for (i, g) in held.iter_mut().enumerate() {
                for _ in 0..=i {
                    seqs.push(put(&w, g));
                }
            }
        }
        assert_eq!(w.bytes_written(), 0, "nothing filled a unit yet");
        assert_eq!(w.commit(seqs[0]).unwrap(), Commit::Durable);
        assert_eq!(w.bytes_written(), 4096, "one padded unit for all four");
        assert_eq!(replayed(dev.as_ref(), pos), seqs);
        // Fill the ring: the zone after the last is not empty again until
        // a checkpoint resets it.
        let mut inst = w.enter();
        while w.has_room(330) {
            put(&w, &mut inst);
        }
        let mut full = false;
        for _ in 0..2000 {
            let s = put(&w, &mut inst);
            if w.ring.lock().full {
                drop(inst);
                assert_eq!(w.commit(s).unwrap(), Commit::NeedsCheckpoint);
                full = true;
                break;
            }
        }
        assert!(full, "the ring never filled");
    }
}
