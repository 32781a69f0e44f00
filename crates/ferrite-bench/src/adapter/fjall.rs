//! fjall: a Rust LSM-tree.
//!
//! Its block cache is set to the byte budget; it reads through the OS page
//! cache (no O_DIRECT option). Writes go to its journal buffered
//! (`SyncMode::Never`), or persisted with `SyncAll` after each write
//! (`Always`) or on a timer (`Batched`). Snapshots are fjall's own.
//! fjall has no range delete (its `drop_range` only drops whole tables),
//! so a range delete is what a fjall user writes: the range's keys read
//! and removed in one batch. It has no compare-and-swap outside its
//! transactional keyspaces (`Error::Unsupported` here).

use std::ops::{Bound, ControlFlow};
use std::path::Path;

use ferrite::internals::{check_key, check_value, Instrumented};
use ferrite::{
    BatchOp, Error, KeyRange, KvStore, Result, ScanVisitor, Stats, StoreSnapshot, SyncMode,
    WriteBatch,
};
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode, Readable};

use super::counted::Counted;
use super::{foreign, StoreConfig, TargetInfo};

struct Fjall {
    db: Database,
    ks: Keyspace,
    always: bool,
    _ticker: Option<ferrite::internals::PeriodicSync>,
}

pub fn open(dir: &Path, cfg: &StoreConfig) -> Result<(Box<dyn Instrumented>, TargetInfo)> {
    let err = foreign("fjall");
    let db = Database::builder(dir)
        .cache_size(cfg.cache_bytes)
        .open()
        .map_err(|e| err(&e))?;
    // fjall compresses with lz4 or not at all.
    let codec = match cfg.compression {
        super::Compression::None => fjall::CompressionType::None,
        _ => fjall::CompressionType::Lz4,
    };
    let ks = db
        .keyspace("kv", || {
            KeyspaceCreateOptions::default()
                .data_block_compression_policy(fjall::config::CompressionPolicy::all(codec))
        })
        .map_err(|e| err(&e))?;
    let ticker = match cfg.sync {
        SyncMode::Batched(every) => {
            let db2 = db.clone();
            Some(
                ferrite::internals::PeriodicSync::start("fjall-sync", every, move || {
                    // A failed sync shows in the store's next write.
                    let _ = db2.persist(PersistMode::SyncAll);
                    Ok(())
                })
                .map_err(|e| err(&e))?,
            )
        }
        _ => None,
    };
    let info = TargetInfo {
        name: "fjall".into(),
        cache_bytes: cfg.cache_bytes,
        o_direct: false,
        durability: cfg.sync.to_string(),
        notes: format!(
            "block cache set to the budget; reads go through the OS page cache (no O_DIRECT); data blocks {codec}"
        ),
    };
    Ok((
        Box::new(Counted::new(Fjall {
            db,
            ks,
            always: cfg.sync == SyncMode::Always,
            _ticker: ticker,
        })),
        info,
    ))
}

/// Visits the pairs of a fjall iterator (either direction).
fn visit_iter(it: impl Iterator<Item = fjall::Guard>, visit: &mut ScanVisitor<'_>) -> Result<()> {
    for guard in it {
        let (k, v) = guard.into_inner().map_err(|e| foreign("fjall")(&e))?;
        if visit(&k, &v) == ControlFlow::Break(()) {
            break;
        }
    }
    Ok(())
}

fn bounds<'a>(range: &KeyRange<'a>) -> (Bound<&'a [u8]>, Bound<&'a [u8]>) {
    (range.start, range.end)
}

/// fjall's cross-keyspace snapshot, read in the one keyspace.
struct FjallSnapshot {
    snap: fjall::Snapshot,
    ks: Keyspace,
}

impl StoreSnapshot for FjallSnapshot {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self
            .snap
            .get(&self.ks, key)
            .map_err(|e| foreign("fjall")(&e))?
            .map(|v| v.to_vec()))
    }

    fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        visit_iter(self.snap.range::<&[u8], _>(&self.ks, bounds(&range)), visit)
    }

    fn scan_rev(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        visit_iter(
            self.snap.range::<&[u8], _>(&self.ks, bounds(&range)).rev(),
            visit,
        )
    }
}

impl Instrumented for Fjall {}

impl Fjall {
    fn persist_if_always(&self) -> Result<()> {
        if self.always {
            self.sync()?;
        }
        Ok(())
    }
}

impl KvStore for Fjall {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        check_key(key)?;
        Ok(self
            .ks
            .get(key)
            .map_err(|e| foreign("fjall")(&e))?
            .map(|v| v.to_vec()))
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        check_key(key)?;
        check_value(value)?;
        self.ks
            .insert(key, value)
            .map_err(|e| foreign("fjall")(&e))?;
        self.persist_if_always()
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        check_key(key)?;
        self.ks.remove(key).map_err(|e| foreign("fjall")(&e))?;
        self.persist_if_always()
    }

    fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        visit_iter(self.ks.range::<&[u8], _>(bounds(&range)), visit)
    }

    fn scan_rev(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        visit_iter(self.ks.range::<&[u8], _>(bounds(&range)).rev(), visit)
    }

    fn compare_and_swap(&self, _: &[u8], _: Option<&[u8]>, _: Option<&[u8]>) -> Result<bool> {
        Err(Error::Unsupported {
            store: "fjall",
            operation: "compare-and-swap",
        })
    }

    fn snapshot(&self) -> Result<Box<dyn StoreSnapshot>> {
        Ok(Box::new(FjallSnapshot {
            snap: self.db.snapshot(),
            ks: self.ks.clone(),
        }))
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.sync()
    }

    fn write_batch(&self, batch: &WriteBatch) -> Result<()> {
        let mut b = self.db.batch();
        for op in batch.ops() {
            match op {
                BatchOp::Put { key, value } => b.insert(&self.ks, key.as_slice(), value.as_slice()),
                BatchOp::Delete { key } => b.remove(&self.ks, key.as_slice()),
                BatchOp::DeleteRange { start, end } => {
                    let range = (
                        Bound::Included(start.as_slice()),
                        Bound::Excluded(end.as_slice()),
                    );
                    for guard in self.ks.range::<&[u8], _>(range) {
                        let k = guard.key().map_err(|e| foreign("fjall")(&e))?;
                        b.remove(&self.ks, k);
                    }
                }
            }
        }
        b.commit().map_err(|e| foreign("fjall")(&e))?;
        self.persist_if_always()
    }

    fn flush(&self) -> Result<()> {
        self.sync()
    }

    fn sync(&self) -> Result<()> {
        self.db
            .persist(PersistMode::SyncAll)
            .map_err(|e| foreign("fjall")(&e))
    }

    fn stats(&self) -> Stats {
        Stats {
            memory_bytes: self.db.cache_size() + self.db.write_buffer_size(),
            ..Stats::default()
        }
    }

    fn verify(&self) -> Result<()> {
        super::verify_by_scan(self, "fjall")
    }
}
