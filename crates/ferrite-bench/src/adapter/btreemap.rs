//! `std::collections::BTreeMap` behind a read-write lock: the in-memory
//! ceiling. No durability, no cache budget; it shows what the workload
//! costs with no storage at all. A snapshot copies the map (there is no
//! cheaper consistent view of a `BTreeMap` under a lock).

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use ferrite::internals::{check_key, check_value, Instrumented};
use ferrite::{BatchOp, KeyRange, KvStore, Result, ScanVisitor, Stats, StoreSnapshot, WriteBatch};
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

pub fn open(cfg: &StoreConfig) -> (Box<dyn Instrumented>, TargetInfo) {
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
            BatchOp::DeleteRange { start, end } => {
                let doomed: Vec<Vec<u8>> = map
                    .range::<[u8], _>((
                        std::ops::Bound::Included(start.as_slice()),
                        std::ops::Bound::Excluded(end.as_slice()),
                    ))
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in doomed {
                    Self::apply(map, payload, &BatchOp::Delete { key: k });
                }
            }
        }
    }
}

/// A copy of the map.
struct MapSnapshot(BTreeMap<Vec<u8>, Vec<u8>>);

fn visit_all<'a>(
    pairs: impl Iterator<Item = (&'a Vec<u8>, &'a Vec<u8>)>,
    visit: &mut ScanVisitor<'_>,
) {
    for (k, v) in pairs {
        if visit(k, v) == ControlFlow::Break(()) {
            break;
        }
    }
}

impl StoreSnapshot for MapSnapshot {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.0.get(key).cloned())
    }

    fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        visit_all(self.0.range::<[u8], _>(range), visit);
        Ok(())
    }

    fn scan_rev(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        visit_all(self.0.range::<[u8], _>(range).rev(), visit);
        Ok(())
    }
}

impl Instrumented for Map {}

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
        visit_all(self.map.read().range::<[u8], _>(range), visit);
        Ok(())
    }

    fn scan_rev(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        visit_all(self.map.read().range::<[u8], _>(range).rev(), visit);
        Ok(())
    }

    fn compare_and_swap(
        &self,
        key: &[u8],
        expected: Option<&[u8]>,
        new: Option<&[u8]>,
    ) -> Result<bool> {
        check_key(key)?;
        let mut map = self.map.write();
        if map.get(key).map(Vec::as_slice) != expected {
            return Ok(false);
        }
        let op = BatchOp::write(key, new)?;
        Self::apply(&mut map, &self.payload, &op);
        Ok(true)
    }

    fn snapshot(&self) -> Result<Box<dyn StoreSnapshot>> {
        Ok(Box::new(MapSnapshot(self.map.read().clone())))
    }

    fn close(self: Box<Self>) -> Result<()> {
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
