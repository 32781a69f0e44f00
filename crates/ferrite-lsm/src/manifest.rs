//! The manifest: the durable list of live tables and the counters recovery
//! needs, written whole to one of two slots in turn.
//!
//! Each write is a complete snapshot with a generation number one above
//! the last, written to slot `generation % 2` and synced. Recovery reads
//! both slots and keeps the valid one with the higher generation, so a
//! torn write falls back to the previous snapshot, which the torn write
//! never touched. A snapshot of a few hundred tables is a few KiB, so
//! rewriting it whole at each flush or compaction costs less than an
//! edit log would in complexity.
//!
//! Layout (spec: `docs/format/sstable.md`), little-endian:
//! `magic u32 | generation u64 | next_table u64 | log_number u64 |
//! last_seq u64 | partitions u32 | count u32 | count × (id u64, partition u16, level u8,
//! start u64, pages u64) | partitions × part_log u64 | range deletes |
//! crc32c u32`, zero-padded to the device block; range deletes as
//! `range_del::encode` writes them (magic `MNF3`). Generations, ids, log
//! numbers and sequence numbers are below
//! `ferrite_core::engine::COUNTER_LIMIT`. Snapshots of the older formats
//! still decode: `MNF2` without range deletes, `MNF1` also without
//! `part_log`s (every partition at `log_number`).

use std::sync::Arc;

use ferrite_core::engine::{check_counter, COUNTER_LIMIT};
use ferrite_core::{Error, Result};
use ferrite_io::{AlignedBuf, BlockDevice};

use crate::range_del::RangeDel;

const MAGIC: u32 = 0x4d4e_4633; // "MNF3"
/// The second format: no range deletes.
const MAGIC_V2: u32 = 0x4d4e_4632; // "MNF2"
/// The first format: no per-partition log numbers.
const MAGIC_V1: u32 = 0x4d4e_4631; // "MNF1"
const RECORD: usize = 8 + 2 + 1 + 8 + 8;
const HEADER: usize = 4 + 8 * 4 + 4 + 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableRecord {
    pub id: u64,
    pub partition: u16,
    pub level: u8,
    pub start: u64,
    pub pages: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ManifestState {
    pub generation: u64,
    /// Ids from here on are unused.
    pub next_table: u64,
    /// The first memtable whose WAL recovery must replay.
    pub log_number: u64,
    /// Every write with a lower or equal sequence number is in a table.
    pub last_seq: u64,
    /// Partitions the store was made with (keys route by it, so it never
    /// changes).
    pub partitions: u32,
    pub tables: Vec<TableRecord>,
    /// Per partition, the first memtable whose entries of that partition
    /// may be in no table (its flush buffer's oldest memtable, SwiftKV
    /// §3.2): recovery replays an operation of memtable `m` only if `m`
    /// is at least its partition's entry (older ones are in its tables).
    /// `log_number` is the smallest of them.
    pub part_logs: Vec<u64>,
    /// Range deletes flushed out of their memtables.
    pub range_dels: Vec<RangeDel>,
}

impl ManifestState {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + self.tables.len() * RECORD + 4);
        out.extend_from_slice(&MAGIC.to_le_bytes());
        for v in [
            self.generation,
            self.next_table,
            self.log_number,
            self.last_seq,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.partitions.to_le_bytes());
        out.extend_from_slice(&(self.tables.len() as u32).to_le_bytes());
        for t in &self.tables {
            out.extend_from_slice(&t.id.to_le_bytes());
            out.extend_from_slice(&t.partition.to_le_bytes());
            out.push(t.level);
            out.extend_from_slice(&t.start.to_le_bytes());
            out.extend_from_slice(&t.pages.to_le_bytes());
        }
        for p in 0..self.partitions as usize {
            let log = self.part_logs.get(p).copied().unwrap_or(self.log_number);
            out.extend_from_slice(&log.to_le_bytes());
        }
        crate::range_del::encode(&self.range_dels, &mut out);
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes a slot's bytes (trailing zero padding allowed); `None` if
    /// the slot is empty, torn or damaged.
    pub fn decode(b: &[u8]) -> Option<Self> {
        let u64_at = |at: usize| -> Option<u64> {
            Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
        };
        let (v1, v2) = match u32::from_le_bytes(b.get(0..4)?.try_into().ok()?) {
            MAGIC => (false, false),
            MAGIC_V2 => (false, true),
            MAGIC_V1 => (true, false),
            _ => return None,
        };
        let partitions = u32::from_le_bytes(b.get(36..40)?.try_into().ok()?);
        // Table records name partitions with 16 bits.
        if partitions > u16::MAX as u32 + 1 {
            return None;
        }
        let count = u32::from_le_bytes(b.get(40..44)?.try_into().ok()?) as usize;
        let logs_at = HEADER.checked_add(count.checked_mul(RECORD)?)?;
        let logs = if v1 { 0 } else { partitions as usize };
        let dels_at = logs_at.checked_add(logs.checked_mul(8)?)?;
        let (range_dels, dels_len) = if v1 || v2 {
            (Vec::new(), 0)
        } else {
            crate::range_del::decode(b.get(dels_at..)?)?
        };
        let end = dels_at + dels_len;
        let crc = u32::from_le_bytes(b.get(end..end + 4)?.try_into().ok()?);
        if crc32c::crc32c(b.get(..end)?) != crc {
            return None;
        }
        let mut tables = Vec::with_capacity(count);
        for i in 0..count {
            let at = HEADER + i * RECORD;
            tables.push(TableRecord {
                id: u64_at(at)?,
                partition: u16::from_le_bytes(b.get(at + 8..at + 10)?.try_into().ok()?),
                level: *b.get(at + 10)?,
                start: u64_at(at + 11)?,
                pages: u64_at(at + 19)?,
            });
        }
        let log_number = u64_at(20)?;
        let part_logs = if v1 {
            vec![log_number; partitions as usize]
        } else {
            (0..logs)
                .map(|p| u64_at(logs_at + 8 * p))
                .collect::<Option<Vec<u64>>>()?
        };
        if part_logs.iter().any(|&l| l < log_number) {
            return None;
        }
        // Counters a store keeps raising stay below the limit, so every
        // raise after recovery is safe; a snapshot past it is damaged.
        let counter = |at: usize| u64_at(at).and_then(check_counter);
        let last_log = part_logs.iter().copied().max().unwrap_or(log_number);
        if tables.iter().any(|t| t.id >= COUNTER_LIMIT) || check_counter(last_log).is_none() {
            return None;
        }
        Some(Self {
            generation: counter(4)?,
            next_table: counter(12)?,
            log_number,
            last_seq: counter(28)?,
            partitions,
            tables,
            part_logs,
            range_dels,
        })
    }
}

/// The two slots.
pub struct Manifest {
    slots: [Arc<dyn BlockDevice>; 2],
}

impl Manifest {
    pub fn new(slots: [Arc<dyn BlockDevice>; 2]) -> Self {
        Self { slots }
    }

    /// The newest valid snapshot, or `None` for a store never written.
    pub fn load(&self) -> Result<Option<ManifestState>> {
        let mut best: Option<ManifestState> = None;
        let mut slots_with_bytes = 0;
        for dev in &self.slots {
            let len = dev.len() - dev.len() % dev.block_size() as u64;
            if len == 0 {
                continue;
            }
            slots_with_bytes += 1;
            let mut buf = AlignedBuf::zeroed(len as usize);
            dev.read_at(&mut buf, 0)?;
            if let Some(s) = ManifestState::decode(&buf) {
                if best.as_ref().is_none_or(|b| s.generation > b.generation) {
                    best = Some(s);
                }
            }
        }
        // One slot with bytes and no snapshot is the torn first write of a
        // new store (generation 1 goes to slot 1, before any data); both
        // slots written and neither valid is damage.
        if best.is_none() && slots_with_bytes == 2 {
            return Err(Error::corruption(
                "manifest",
                "neither manifest slot holds a valid snapshot",
            ));
        }
        Ok(best)
    }

    /// Writes `state` (whose generation the caller has advanced) durably.
    /// A state that would not read back (a counter at its limit, or table
    /// extents recovery would refuse) is refused before the slot is
    /// touched: the slot holds the snapshot a crash falls back to.
    pub fn store(&self, state: &ManifestState) -> Result<()> {
        let dev = &self.slots[(state.generation % 2) as usize];
        let bytes = state.encode();
        if ManifestState::decode(&bytes).as_ref() != Some(state) {
            ferrite_core::engine::persistable_counter(state.generation, "manifest")?;
            return Err(Error::corruption(
                "manifest",
                "the state to store would not read back",
            ));
        }
        let bs = dev.block_size();
        let len = bytes.len().div_ceil(bs) * bs;
        let mut buf = AlignedBuf::zeroed(len);
        buf[..bytes.len()].copy_from_slice(&bytes);
        dev.write_at(&buf, 0)?;
        if dev.len() > len as u64 {
            dev.set_len(len as u64)?;
        }
        dev.sync()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_io::MemDevice;

    fn state(g: u64) -> ManifestState {
        ManifestState {
            generation: g,
            next_table: 9,
            log_number: 3,
            last_seq: 77,
            partitions: 8,
            tables: vec![TableRecord {
                id: 4,
                partition: 3,
                level: 1,
                start: 10,
                pages: 3,
            }],
            part_logs: vec![3, 4, 5, 3, 3, 3, 6, 3],
            range_dels: vec![RangeDel {
                start: b"a".to_vec(),
                end: b"m".to_vec(),
                seq: 70,
                mem: 3,
            }],
        }
    }

    #[test]
    fn counters_no_store_reaches_are_damage() {
        let edits: [fn(&mut ManifestState); 6] = [
            |s| s.generation = u64::MAX,
            |s| s.next_table = COUNTER_LIMIT,
            |s| s.last_seq = u64::MAX,
            |s| s.tables[0].id = COUNTER_LIMIT,
            |s| s.part_logs[6] = u64::MAX,
            |s| {
                s.log_number = u64::MAX;
                s.part_logs = vec![u64::MAX; 8];
            },
        ];
        assert_eq!(ManifestState::decode(&state(2).encode()), Some(state(2)));
        for edit in edits {
            let mut s = state(2);
            edit(&mut s);
            // Checksummed, yet a later raise of the counter would overflow.
            assert_eq!(ManifestState::decode(&s.encode()), None, "{s:?}");
        }
    }

    #[test]
    fn first_format_snapshots_still_decode() {
        let mut s = state(3);
        s.part_logs = vec![s.log_number; 8];
        s.range_dels.clear();
        // The second format: its magic, and no range deletes.
        let mut v2 = s.encode();
        let crc_at = v2.len() - 4 - 4;
        v2.truncate(crc_at);
        v2[..4].copy_from_slice(&MAGIC_V2.to_le_bytes());
        let crc = crc32c::crc32c(&v2);
        v2.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(ManifestState::decode(&v2), Some(s.clone()));
        // The first format: its magic, and no per-partition logs.
        let mut v1 = s.encode();
        let crc_at = v1.len() - 4 - 4 - 8 * 8;
        v1.truncate(crc_at);
        v1[..4].copy_from_slice(&MAGIC_V1.to_le_bytes());
        let crc = crc32c::crc32c(&v1);
        v1.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(ManifestState::decode(&v1), Some(s));
    }

    #[test]
    fn newest_valid_slot_wins() {
        let a: Arc<dyn BlockDevice> = Arc::new(MemDevice::new());
        let b: Arc<dyn BlockDevice> = Arc::new(MemDevice::new());
        let m = Manifest::new([a.clone(), b.clone()]);
        assert_eq!(m.load().unwrap(), None);
        m.store(&state(1)).unwrap();
        m.store(&state(2)).unwrap();
        assert_eq!(m.load().unwrap().unwrap().generation, 2);
        // Damage slot 0 (generation 2): generation 1 in slot 1 is used.
        let mut page = AlignedBuf::zeroed(4096);
        a.read_at(&mut page, 0).unwrap();
        page[20] ^= 1;
        a.write_at(&page, 0).unwrap();
        assert_eq!(m.load().unwrap().unwrap(), state(1));
        let enc = state(5).encode();
        for cut in 0..enc.len() {
            assert!(ManifestState::decode(&enc[..cut]).is_none());
        }
    }
}
