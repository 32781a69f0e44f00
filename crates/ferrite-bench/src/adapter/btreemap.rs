//! `std::collections::BTreeMap` behind a read-write lock: the in-memory
//! ceiling. No durability, no cache budget; it shows what the workload
//! costs with no storage at all.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use ferrite::{
    check_key, check_value, BatchOp, KeyRange, KvStore, Result, ScanVisitor, Stats, WriteBatch,
};
use parking_lot::RwLock;

use super::counted::Counted;
use super::{StoreConfig, TargetInfo};

/// Heap bytes per entry beyond key and value: two Vec headers (48 B) and a
/// share of a B-tree node (~1/11 of a ~300 B node for 11 slots, plus
/// allocator rounding). An estimate; the counting allocator measures exactly.
const ENTRY_OVERHEAD: u64 = 80;

#[derive(Default)]
struct Map {
    map: RwLock<BTreeMap<Vec<u8>, Vec<u8>>>,
    payload: AtomicU64,
}

pub fn open(cfg: &StoreConfig) -> (Box<dyn KvStore>, TargetInfo) {
    let info = TargetInfo {
        name: "btreemap".into(),
        cache_bytes: 0,
        o_direct: false,
        durability: "none (in memory)".into(),
        notes: format!(
            "in-memory ceiling: holds all data in RAM regardless of the {} B budget; sync is a no-op",
            cfg.cache_bytes
        ),
    };
    (Box::new(Counted::new(Map::default())), info)
}

impl Map {
    fn apply(map: &mut BTreeMap<Vec<u8>, Vec<u8>>, payload: &AtomicU64, op: &BatchOp) {
        match op {
            BatchOp::Put { key, value } => {
                payload.fetch_add((key.len() + value.len()) as u64, Relaxed);
                if let Some(old) = map.insert(key.clone(), value.clone()) {
                    payload.fetch_sub((key.len() + old.len()) as u64, Relaxed);
                }
            }
            BatchOp::Delete { key } => {
                if let Some(old) = map.remove(key) {
                    payload.fetch_sub((key.len() + old.len()) as u64, Relaxed);
                }
            }
        }
    }
}

impl KvStore for Map {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        check_key(key)?;
        Ok(self.map.read().get(key).cloned())
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        check_key(key)?;
        check_value(value)?;
        let op = BatchOp::Put {
            key: key.to_vec(),
            value: value.to_vec(),
        };
        Self::apply(&mut self.map.write(), &self.payload, &op);
        Ok(())
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        check_key(key)?;
        Self::apply(
            &mut self.map.write(),
            &self.payload,
            &BatchOp::Delete { key: key.to_vec() },
        );
        Ok(())
    }

    fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        let map = self.map.read();
        for (k, v) in map.range::<[u8], _>((range.start, range.end)) {
            if visit(k, v) == ControlFlow::Break(()) {
                break;
            }
        }
        Ok(())
    }

    fn write_batch(&self, batch: &WriteBatch) -> Result<()> {
        let mut map = self.map.write();
        for op in batch.ops() {
            Self::apply(&mut map, &self.payload, op);
        }
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        Ok(())
    }

    fn stats(&self) -> Stats {
        let entries = self.map.read().len() as u64;
        Stats {
            memory_bytes: self.payload.load(Relaxed) + entries * ENTRY_OVERHEAD,
            ..Stats::default()
        }
    }

    fn verify(&self) -> Result<()> {
        super::verify_by_scan(self, "btreemap")
    }
}
