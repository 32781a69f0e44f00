//! LMDB through `heed`.
//!
//! Known unfairness: LMDB reads through a memory map and has no cache of
//! its own, so its memory is bounded only by the OS page cache, not by the
//! byte budget the other stores get, and it cannot use O_DIRECT. The report
//! says so. `NO_READ_AHEAD` keeps the kernel from reading neighbouring pages
//! on random lookups, as LMDB's authors recommend when data exceeds RAM.

use std::ops::{Bound, ControlFlow};
use std::path::Path;

use ferrite::internals::Instrumented;
use ferrite::{BatchOp, KeyRange, Result, ScanVisitor, SyncMode};
use heed::types::Bytes;
use heed::{CommitOrAbort, Database, Env, EnvFlags, EnvOpenOptions, WithoutTls};

use super::counted::Counted;
use super::tx_store::{TxBackend, TxStore};
use super::{foreign, StoreConfig, TargetInfo};

/// Address space reserved for the map; the file grows only as data is written.
const MAP_SIZE: usize = 256 << 30;

struct Lmdb {
    env: Env<WithoutTls>,
    db: Database<'static, Bytes, Bytes>,
    _ticker: Option<ferrite::internals::PeriodicSync>,
}

pub fn open(dir: &Path, cfg: &StoreConfig) -> Result<(Box<dyn Instrumented>, TargetInfo)> {
    let err = foreign("lmdb");
    let mut flags = EnvFlags::NO_READ_AHEAD;
    if cfg.sync != SyncMode::Always {
        flags |= EnvFlags::NO_SYNC | EnvFlags::NO_META_SYNC;
    }
    let mut opts = EnvOpenOptions::new().read_txn_without_tls();
    opts.map_size(MAP_SIZE).max_dbs(1);
    // SAFETY: the directory is private to this benchmark and opened once.
    let env = unsafe {
        opts.flags(flags);
        opts.open(dir)
    }
    .map_err(|e| err(&e))?;
    let wtxn = env.write_txn().map_err(|e| err(&e))?;
    let db: Database<'static, Bytes, Bytes> = env
        .create_databases_and_commit(wtxn, |opener, wtxn| {
            opener
                .create_database::<Bytes, Bytes>(wtxn, None)
                .map(CommitOrAbort::<_, ()>::Commit)
        })
        .map_err(|e: heed::Error| err(&e))?
        .unwrap_commit();
    let ticker = match cfg.sync {
        SyncMode::Batched(every) => {
            let env2 = env.clone();
            Some(
                ferrite::internals::PeriodicSync::start("lmdb-sync", every, move || {
                    // A failed sync shows in the store's next write.
                    let _ = env2.force_sync();
                    Ok(())
                })
                .map_err(|e| err(&e))?,
            )
        }
        _ => None,
    };
    let info = TargetInfo {
        name: "lmdb".into(),
        cache_bytes: cfg.cache_bytes,
        o_direct: false,
        durability: cfg.sync.to_string(),
        notes: "memory-mapped: no cache of its own, so the byte budget does not bind it; cached by the OS page cache; no O_DIRECT".into(),
    };
    Ok((
        Box::new(Counted::new(TxStore::new(Lmdb {
            env,
            db,
            _ticker: ticker,
        }))),
        info,
    ))
}

impl TxBackend for Lmdb {
    const NAME: &'static str = "lmdb";

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let err = foreign("lmdb");
        let r = self.env.read_txn().map_err(|e| err(&e))?;
        Ok(self
            .db
            .get(&r, key)
            .map_err(|e| err(&e))?
            .map(<[u8]>::to_vec))
    }

    fn apply(&self, ops: &[BatchOp], check: Option<(&[u8], Option<&[u8]>)>) -> Result<bool> {
        let err = foreign("lmdb");
        let mut w = self.env.write_txn().map_err(|e| err(&e))?;
        if let Some((key, expected)) = check {
            if self.db.get(&w, key).map_err(|e| err(&e))? != expected {
                return Ok(false);
            }
        }
        for op in ops {
            match op {
                BatchOp::Put { key, value } => {
                    self.db.put(&mut w, key, value).map_err(|e| err(&e))?
                }
                BatchOp::Delete { key } => {
                    self.db.delete(&mut w, key).map_err(|e| err(&e))?;
                }
                BatchOp::DeleteRange { start, end } => {
                    let r: (Bound<&[u8]>, Bound<&[u8]>) =
                        (Bound::Included(start), Bound::Excluded(end));
                    self.db.delete_range(&mut w, &r).map_err(|e| err(&e))?;
                }
            }
        }
        w.commit().map_err(|e| err(&e))?;
        Ok(true)
    }

    fn scan(&self, range: KeyRange<'_>, rev: bool, visit: &mut ScanVisitor<'_>) -> Result<()> {
        let err = foreign("lmdb");
        let r = self.env.read_txn().map_err(|e| err(&e))?;
        let bounds: (Bound<&[u8]>, Bound<&[u8]>) = (range.start, range.end);
        let mut each = |item: heed::Result<(&[u8], &[u8])>| -> Result<ControlFlow<()>> {
            let (k, v) = item.map_err(|e| err(&e))?;
            Ok(visit(k, v))
        };
        if rev {
            for item in self.db.rev_range(&r, &bounds).map_err(|e| err(&e))? {
                if each(item)?.is_break() {
                    break;
                }
            }
        } else {
            for item in self.db.range(&r, &bounds).map_err(|e| err(&e))? {
                if each(item)?.is_break() {
                    break;
                }
            }
        }
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        self.env.force_sync().map_err(|e| foreign("lmdb")(&e))
    }
}
