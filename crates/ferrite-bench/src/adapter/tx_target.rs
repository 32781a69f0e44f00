//! Stores that run read-modify-write transactions, for the transaction
//! benchmark: ferrite's engines through `Store::transaction` (and, as the
//! reference without validation, the same reads and a plain batch),
//! fjall's `OptimisticTxDatabase`, and RocksDB's
//! `OptimisticTransactionDB` (reads by `get_for_update`, so they are
//! validated at commit as ferrite's are).
//!
//! Durability is the same for all: each commit's log record stays in the
//! store's own buffer until that fills (ferrite `SyncMode::Never`, fjall
//! `manual_journal_persist`, RocksDB `manual_wal_flush`); nothing is
//! synced per commit.

use std::path::Path;

use ferrite::{Config, EngineKind, Error, Result, Store, SyncMode, WriteBatch};

/// A store that runs one read-modify-write of two keys.
pub trait TxTarget: Send + Sync {
    fn name(&self) -> String;

    /// Writes `key -> value` for every pair, in batches (the load).
    fn load(&self, pairs: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>) -> Result<()>;

    /// Reads `a` and `b`, and writes each the value `update` makes of what
    /// was read, atomically: `Ok(true)` committed, `Ok(false)` a conflict
    /// (nothing written).
    fn rmw(&self, a: &[u8], b: &[u8], update: &dyn Fn(Option<&[u8]>) -> Vec<u8>) -> Result<bool>;
}

/// How a ferrite engine runs the read-modify-write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FerriteMode {
    /// `Store::transaction`: snapshot reads, validated commit.
    Transaction,
    /// `Store::get` twice and `Store::write` of a batch: the same I/O
    /// with no snapshot and no validation (not safe against a concurrent
    /// writer; the reference a transaction's cost is measured against).
    PlainBatch,
}

pub struct FerriteTx {
    store: Store,
    mode: FerriteMode,
}

impl FerriteTx {
    pub fn open(dir: &Path, kind: EngineKind, cache_bytes: u64, mode: FerriteMode) -> Result<Self> {
        let store = Config::builder(kind)
            .cache_bytes(cache_bytes)
            .sync(SyncMode::Never)
            .open(dir)?;
        Ok(Self { store, mode })
    }
}

impl TxTarget for FerriteTx {
    fn name(&self) -> String {
        match self.mode {
            FerriteMode::Transaction => format!("{}-tx", self.store.engine()),
            FerriteMode::PlainBatch => format!("{}-batch", self.store.engine()),
        }
    }

    fn load(&self, pairs: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>) -> Result<()> {
        load_batches(pairs, |b| self.store.write(b))
    }

    fn rmw(&self, a: &[u8], b: &[u8], update: &dyn Fn(Option<&[u8]>) -> Vec<u8>) -> Result<bool> {
        match self.mode {
            FerriteMode::Transaction => {
                let mut tx = self.store.transaction()?;
                let (va, vb) = (tx.get(a)?, tx.get(b)?);
                tx.put(a, update(va.as_deref()))?;
                tx.put(b, update(vb.as_deref()))?;
                match tx.commit() {
                    Ok(()) => Ok(true),
                    Err(Error::Conflict(_)) => Ok(false),
                    Err(e) => Err(e),
                }
            }
            FerriteMode::PlainBatch => {
                let (va, vb) = (self.store.get(a)?, self.store.get(b)?);
                let mut batch = WriteBatch::new();
                batch.put(a, &update(va.as_deref()))?;
                batch.put(b, &update(vb.as_deref()))?;
                self.store.write(&batch).map(|()| true)
            }
        }
    }
}

fn load_batches(
    pairs: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>,
    mut write: impl FnMut(&WriteBatch) -> Result<()>,
) -> Result<()> {
    let mut batch = WriteBatch::new();
    for (k, v) in pairs {
        batch.put(&k, &v)?;
        if batch.len() >= 1000 {
            write(&batch)?;
            batch = WriteBatch::new();
        }
    }
    if !batch.is_empty() {
        write(&batch)?;
    }
    Ok(())
}

#[cfg(feature = "fjall")]
pub use self::fjall_tx::FjallTx;

#[cfg(feature = "fjall")]
mod fjall_tx {
    use super::*;
    use fjall::{KeyspaceCreateOptions, OptimisticTxDatabase, OptimisticTxKeyspace, Readable};

    fn err(e: impl std::fmt::Display) -> Error {
        Error::Foreign {
            store: "fjall",
            message: e.to_string(),
        }
    }

    pub struct FjallTx {
        db: OptimisticTxDatabase,
        ks: OptimisticTxKeyspace,
    }

    impl FjallTx {
        pub fn open(dir: &Path, cache_bytes: u64) -> Result<Self> {
            let db = OptimisticTxDatabase::builder(dir)
                .cache_size(cache_bytes)
                .manual_journal_persist(true)
                .open()
                .map_err(err)?;
            let ks = db
                .keyspace("kv", KeyspaceCreateOptions::default)
                .map_err(err)?;
            Ok(Self { db, ks })
        }
    }

    impl TxTarget for FjallTx {
        fn name(&self) -> String {
            "fjall-tx".into()
        }

        fn load(&self, pairs: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>) -> Result<()> {
            for (k, v) in pairs {
                self.ks.insert(k, v).map_err(err)?;
            }
            Ok(())
        }

        fn rmw(
            &self,
            a: &[u8],
            b: &[u8],
            update: &dyn Fn(Option<&[u8]>) -> Vec<u8>,
        ) -> Result<bool> {
            let mut tx = self.db.write_tx().map_err(err)?;
            let va = tx.get(&self.ks, a).map_err(err)?;
            let vb = tx.get(&self.ks, b).map_err(err)?;
            tx.insert(&self.ks, a, update(va.as_deref()));
            tx.insert(&self.ks, b, update(vb.as_deref()));
            Ok(tx.commit().map_err(err)?.is_ok())
        }
    }
}

#[cfg(feature = "rocksdb")]
pub use self::rocksdb_tx::RocksTx;

#[cfg(feature = "rocksdb")]
mod rocksdb_tx {
    use super::*;
    use rocksdb::{
        BlockBasedOptions, Cache, ErrorKind, MultiThreaded, OptimisticTransactionDB,
        OptimisticTransactionOptions, Options, WriteOptions,
    };

    fn err(e: impl std::fmt::Display) -> Error {
        Error::Foreign {
            store: "rocksdb",
            message: e.to_string(),
        }
    }

    pub struct RocksTx {
        db: OptimisticTransactionDB<MultiThreaded>,
        _cache: Cache,
    }

    impl RocksTx {
        pub fn open(dir: &Path, cache_bytes: u64) -> Result<Self> {
            let cache = Cache::new_lru_cache(cache_bytes as usize).map_err(err)?;
            let mut table = BlockBasedOptions::default();
            table.set_block_cache(&cache);
            table.set_bloom_filter(10.0, false);
            let mut opts = Options::default();
            opts.create_if_missing(true);
            opts.set_block_based_table_factory(&table);
            opts.set_manual_wal_flush(true);
            let cores = std::thread::available_parallelism().map_or(2, |n| n.get()) as i32;
            opts.increase_parallelism(cores);
            let db = OptimisticTransactionDB::open(&opts, dir).map_err(err)?;
            Ok(Self { db, _cache: cache })
        }
    }

    impl TxTarget for RocksTx {
        fn name(&self) -> String {
            "rocksdb-tx".into()
        }

        fn load(&self, pairs: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>) -> Result<()> {
            for (k, v) in pairs {
                self.db.put(k, v).map_err(err)?;
            }
            Ok(())
        }

        fn rmw(
            &self,
            a: &[u8],
            b: &[u8],
            update: &dyn Fn(Option<&[u8]>) -> Vec<u8>,
        ) -> Result<bool> {
            // A snapshot at the start, as ferrite's and fjall's
            // transactions read one.
            let mut topts = OptimisticTransactionOptions::default();
            topts.set_snapshot(true);
            let tx = self.db.transaction_opt(&WriteOptions::default(), &topts);
            let va = tx.get_for_update(a, true).map_err(err)?;
            let vb = tx.get_for_update(b, true).map_err(err)?;
            tx.put(a, update(va.as_deref())).map_err(err)?;
            tx.put(b, update(vb.as_deref())).map_err(err)?;
            match tx.commit() {
                Ok(()) => Ok(true),
                Err(e) if matches!(e.kind(), ErrorKind::Busy | ErrorKind::TryAgain) => Ok(false),
                Err(e) => Err(err(e)),
            }
        }
    }
}
