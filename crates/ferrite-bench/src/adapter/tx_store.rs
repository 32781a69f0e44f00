//! The `KvStore` face shared by transactional baselines (LMDB, redb):
//! each write is one transaction of batch operations, so a backend only
//! supplies get, apply, scan and sync, and this type adds validation and
//! the order check (`Counted` around it counts the calls).

use ferrite::{
    check_key, check_value, BatchOp, KeyRange, KvStore, Result, ScanVisitor, Stats, WriteBatch,
};

/// A store whose writes are transactions of batch operations.
pub(crate) trait TxBackend: Send + Sync {
    const NAME: &'static str;
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Applies `ops` in one transaction.
    fn apply(&self, ops: &[BatchOp]) -> Result<()>;
    fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()>;
    fn sync(&self) -> Result<()>;
}

pub(crate) struct TxStore<B> {
    backend: B,
}

impl<B: TxBackend> TxStore<B> {
    pub fn new(backend: B) -> Self {
        Self { backend }
    }
}

impl<B: TxBackend> KvStore for TxStore<B> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        check_key(key)?;
        self.backend.get(key)
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        check_key(key)?;
        check_value(value)?;
        self.backend.apply(&[BatchOp::Put {
            key: key.to_vec(),
            value: value.to_vec(),
        }])
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        check_key(key)?;
        self.backend.apply(&[BatchOp::Delete { key: key.to_vec() }])
    }

    fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.backend.scan(range, visit)
    }

    fn write_batch(&self, batch: &WriteBatch) -> Result<()> {
        self.backend.apply(batch.ops())
    }

    fn flush(&self) -> Result<()> {
        self.backend.sync()
    }

    fn sync(&self) -> Result<()> {
        self.backend.sync()
    }

    fn stats(&self) -> Stats {
        Stats { ..Stats::default() }
    }

    fn verify(&self) -> Result<()> {
        super::verify_by_scan(self, B::NAME)
    }
}
