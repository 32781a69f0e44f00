//! redb: a copy-on-write B-tree with its own page cache.
//!
//! Its cache is set to the byte budget. redb reads through the OS page
//! cache (no O_DIRECT option), so pages evicted from its cache may still be
//! served from RAM: an advantage the report notes. Every write is one
//! transaction; `SyncMode::Never` commits with `Durability::None`, and
//! `sync` commits an empty transaction with `Durability::Immediate`.

use std::ops::{Bound, ControlFlow};
use std::path::Path;

use ferrite::internals::Instrumented;
use ferrite::{BatchOp, KeyRange, Result, ScanVisitor, SyncMode};
use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};

use super::counted::Counted;
use super::tx_store::{TxBackend, TxStore};
use super::{foreign, StoreConfig, TargetInfo};

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kv");

struct Redb {
    db: std::sync::Arc<Database>,
    durability: SyncMode,
    _ticker: Option<ferrite::internals::PeriodicSync>,
}

fn commit_empty(db: &Database) -> Result<()> {
    let err = foreign("redb");
    let mut w = db.begin_write().map_err(|e| err(&e))?;
    w.set_durability(Durability::Immediate)
        .map_err(|e| err(&e))?;
    w.commit().map_err(|e| err(&e))
}

pub fn open(dir: &Path, cfg: &StoreConfig) -> Result<(Box<dyn Instrumented>, TargetInfo)> {
    let err = foreign("redb");
    let db = Database::builder()
        .set_cache_size(cfg.cache_bytes as usize)
        .create(dir.join("data.redb"))
        .map_err(|e| err(&e))?;
    {
        let w = db.begin_write().map_err(|e| err(&e))?;
        w.open_table(TABLE).map_err(|e| err(&e))?;
        w.commit().map_err(|e| err(&e))?;
    }
    let db = std::sync::Arc::new(db);
    let ticker = match cfg.sync {
        SyncMode::Batched(every) => {
            let db2 = db.clone();
            Some(
                ferrite::internals::PeriodicSync::start("redb-sync", every, move || {
                    // A failed sync shows in the store's next write.
                    let _ = commit_empty(&db2);
                    Ok(())
                })
                .map_err(|e| err(&e))?,
            )
        }
        _ => None,
    };
    let info = TargetInfo {
        name: "redb".into(),
        cache_bytes: cfg.cache_bytes,
        o_direct: false,
        durability: cfg.sync.to_string(),
        notes: "own page cache set to the budget; reads go through the OS page cache (no O_DIRECT)"
            .into(),
    };
    Ok((
        Box::new(Counted::new(TxStore::new(Redb {
            db,
            durability: cfg.sync,
            _ticker: ticker,
        }))),
        info,
    ))
}

impl TxBackend for Redb {
    const NAME: &'static str = "redb";

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let err = foreign("redb");
        let r = self.db.begin_read().map_err(|e| err(&e))?;
        let t = r.open_table(TABLE).map_err(|e| err(&e))?;
        Ok(t.get(key).map_err(|e| err(&e))?.map(|g| g.value().to_vec()))
    }

    fn apply(&self, ops: &[BatchOp], check: Option<(&[u8], Option<&[u8]>)>) -> Result<bool> {
        let err = foreign("redb");
        let mut w = self.db.begin_write().map_err(|e| err(&e))?;
        let d = match self.durability {
            SyncMode::Always => Durability::Immediate,
            _ => Durability::None,
        };
        w.set_durability(d).map_err(|e| err(&e))?;
        {
            let mut t = w.open_table(TABLE).map_err(|e| err(&e))?;
            if let Some((key, expected)) = check {
                let now = t.get(key).map_err(|e| err(&e))?;
                if now.as_ref().map(|g| g.value()) != expected {
                    drop(now);
                    drop(t);
                    w.abort().map_err(|e| err(&e))?;
                    return Ok(false);
                }
            }
            for op in ops {
                match op {
                    BatchOp::Put { key, value } => {
                        t.insert(key.as_slice(), value.as_slice())
                            .map_err(|e| err(&e))?;
                    }
                    BatchOp::Delete { key } => {
                        t.remove(key.as_slice()).map_err(|e| err(&e))?;
                    }
                    BatchOp::DeleteRange { start, end } => {
                        t.retain_in::<&[u8], _>(start.as_slice()..end.as_slice(), |_, _| false)
                            .map_err(|e| err(&e))?;
                    }
                }
            }
        }
        w.commit().map_err(|e| err(&e))?;
        Ok(true)
    }

    fn scan(&self, range: KeyRange<'_>, rev: bool, visit: &mut ScanVisitor<'_>) -> Result<()> {
        let err = foreign("redb");
        let r = self.db.begin_read().map_err(|e| err(&e))?;
        let t = r.open_table(TABLE).map_err(|e| err(&e))?;
        let bounds: (Bound<&[u8]>, Bound<&[u8]>) = (range.start, range.end);
        let it = t.range::<&[u8]>(bounds).map_err(|e| err(&e))?;
        let mut each =
            |item: std::result::Result<_, redb::StorageError>| -> Result<ControlFlow<()>> {
                let (k, v): (redb::AccessGuard<&[u8]>, redb::AccessGuard<&[u8]>) =
                    item.map_err(|e| err(&e))?;
                Ok(visit(k.value(), v.value()))
            };
        if rev {
            for item in it.rev() {
                if each(item)?.is_break() {
                    break;
                }
            }
        } else {
            for item in it {
                if each(item)?.is_break() {
                    break;
                }
            }
        }
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        commit_empty(&self.db)
    }
}
