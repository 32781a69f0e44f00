//! What the crash test opens: a key-value store of any engine, or a
//! `DurableRask` block map, behind one [`Target`] the worker writes and
//! the driver checks.
//!
//! Stores open with small caches, logs and devices, so background work
//! (flushes, compactions, checkpoints, SHORTCUT rebuilds, TurboIndex
//! loads, ZKV reclamation, RASK snapshots) runs every few hundred
//! operations and kills land on it.

use std::path::Path;

use anyhow::{bail, Context, Result};
use ferrite::{Config, EngineKind, Store, SyncMode, WriteBatch};
use ferrite_rask::{BlockRange, DurableOptions, DurableRask, PhysicalRun};

use crate::ops::{block_key, Op};
use crate::oracle::State;

/// Physical runs of the crash test live in this file number.
const FILE: u16 = 1;

/// A store under test.
pub enum Target {
    Kv(Store),
    Rask(Box<DurableRask<PhysicalRun>>),
}

/// `partitions`: the LSM's (SwiftKV's) partitions; other engines ignore it.
/// `cache_kib`: the store's cache.
pub fn open(
    engine: EngineKind,
    path: &Path,
    sync: SyncMode,
    partitions: usize,
    cache_kib: u64,
) -> Result<Target> {
    if engine == EngineKind::Rask {
        let mut opts = DurableOptions::default();
        opts.store.sync = sync;
        opts.store.direct_io = false;
        opts.checkpoint_log_bytes = 256 << 10;
        let db = DurableRask::open(path, opts)
            .with_context(|| format!("opening {} as rask", path.display()))?;
        return Ok(Target::Rask(Box::new(db)));
    }
    let b = Config::builder(engine)
        .sync(sync)
        .cache_bytes(cache_kib << 10)
        .direct_io(false);
    let b = match engine {
        EngineKind::Btree | EngineKind::Shortcut | EngineKind::TurboIndex => {
            b.btree(ferrite::btree::BTreeOptions::default().checkpoint_wal_bytes(1 << 20))
        }
        EngineKind::Lsm => b.lsm(
            ferrite::lsm::LsmOptions::default()
                .memtable_bytes(128 << 10)
                .table_bytes(128 << 10)
                .l1_bytes(1 << 20)
                .l0_compaction_trigger(2)
                .l0_slowdown(8)
                .l0_stop(16)
                .partitions(partitions),
        ),
        EngineKind::Zkv => b.zkv(
            ferrite::zkv::ZkvOptions::default()
                .geometry(ferrite::zkv::ZoneGeometry::small(32, 8, 8))
                .checkpoint_wal_bytes(Some(256 << 10)),
        ),
        _ => b,
    };
    let store = b
        .open(path)
        .with_context(|| format!("opening {} as {engine}", path.display()))?;
    Ok(Target::Kv(store))
}

fn lba(key: &[u8]) -> Result<u64> {
    Ok(u64::from_be_bytes(
        key.try_into().context("a block key is 8 bytes")?,
    ))
}

impl Target {
    /// Everything stored, as the oracle's state (a block map: one entry
    /// per mapped block).
    pub fn state(&self) -> Result<State> {
        match self {
            Target::Kv(s) => Ok(s.iter().collect::<ferrite::Result<_>>()?),
            Target::Rask(db) => {
                let mut out = State::new();
                db.index().for_each_mapped(|range, run| {
                    for i in 0..range.len() {
                        let phys = run.offset(i).block();
                        out.insert(block_key(range.l() + i), phys.to_be_bytes().to_vec());
                    }
                });
                Ok(out)
            }
        }
    }

    /// Runs `op`; a read is checked against `state`. With `transactions`
    /// a key-value batch is a transaction that reads each of its keys
    /// (checked too) before it writes them.
    pub fn execute(&self, op: &Op, state: &State, transactions: bool) -> Result<()> {
        match (self, op) {
            (_, Op::Get(k)) => {
                let got = self.get(k)?;
                if got.as_ref() != state.get(k) {
                    bail!(
                        "read {} and found {:?} bytes, expected {:?}",
                        String::from_utf8_lossy(k),
                        got.map(|v| v.len()),
                        state.get(k).map(Vec::len)
                    );
                }
            }
            (Target::Kv(s), Op::Put(k, v)) => s.put(k, v)?,
            (Target::Kv(s), Op::Delete(k)) => s.delete(k)?,
            (Target::Kv(s), Op::Batch(items)) if transactions => {
                let mut tx = s.transaction()?;
                // What the batch wrote so far: its reads see it.
                let mut mine: std::collections::HashMap<&[u8], Option<&Vec<u8>>> =
                    std::collections::HashMap::new();
                for (k, v) in items {
                    let got = tx.get(k)?;
                    let want = mine.get(k.as_slice()).copied().unwrap_or(state.get(k));
                    if got.as_ref() != want {
                        bail!(
                            "a transaction read {} and found {:?} bytes, expected {:?}",
                            String::from_utf8_lossy(k),
                            got.map(|v| v.len()),
                            want.map(Vec::len)
                        );
                    }
                    match v {
                        Some(v) => tx.put(k, v)?,
                        None => tx.delete(k)?,
                    }
                    mine.insert(k, v.as_ref());
                }
                // One writer: a conflict here is a failure like any error.
                tx.commit()?;
            }
            (Target::Kv(s), Op::Batch(items)) => {
                let mut b = WriteBatch::new();
                for (k, v) in items {
                    match v {
                        Some(v) => b.put(k, v)?,
                        None => b.delete(k)?,
                    };
                }
                s.write(&b)?;
            }
            (Target::Kv(s), Op::DeleteRange(a, b)) => s.delete_range(a.clone()..b.clone())?,
            (Target::Rask(db), Op::Batch(items)) => {
                // A range put: consecutive blocks onto consecutive blocks.
                let (Some((first, Some(v))), Some((last, _))) = (items.first(), items.last())
                else {
                    bail!("a block-map put needs mapped blocks");
                };
                let range = BlockRange::new(lba(first)?, lba(last)?)?;
                let run =
                    PhysicalRun::new(FILE, lba(v)?).context("a physical run past its file")?;
                db.put(range, run)?;
            }
            (Target::Rask(db), Op::DeleteRange(a, b)) => {
                db.delete(BlockRange::new(lba(a)?, lba(b)? - 1)?)?;
            }
            (Target::Rask(_), op) => bail!("not a block-map operation: {op:?}"),
        }
        Ok(())
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match self {
            Target::Kv(s) => Ok(s.get(key)?),
            Target::Rask(db) => {
                let seg = db.get(BlockRange::block(lba(key)?));
                Ok(seg
                    .first()
                    .and_then(|s| s.value)
                    .map(|run| run.block().to_be_bytes().to_vec()))
            }
        }
    }

    pub fn sync(&self) -> Result<()> {
        match self {
            Target::Kv(s) => s.sync()?,
            Target::Rask(db) => db.sync()?,
        }
        Ok(())
    }

    pub fn verify(&self) -> Result<()> {
        match self {
            Target::Kv(s) => s.verify()?,
            Target::Rask(db) => db
                .index()
                .verify()
                .map_err(|e| anyhow::anyhow!("the index fails its check: {e}"))?,
        }
        Ok(())
    }

    pub fn close(self) -> Result<()> {
        match self {
            Target::Kv(s) => s.close()?,
            // Dropping the index syncs it too, but reports nothing.
            Target::Rask(db) => db.sync()?,
        }
        Ok(())
    }
}
