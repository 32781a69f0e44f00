//! The `KvStore` face shared by transactional baselines (LMDB, redb):
//! each write is one transaction of batch operations (a compare-and-swap
//! is one that reads its key first), so a backend supplies get, apply,
//! scan and sync, and this type adds validation (`Counted` around it
//! counts the calls). Snapshots are not offered through these adapters
//! (`Error::Unsupported`); the harness does not need them of a peer.

use ferrite::internals::{check_key, check_value, Instrumented};
use ferrite::{
    BatchOp, Error, KeyRange, KvStore, Result, ScanVisitor, Stats, StoreSnapshot, WriteBatch,
};

/// A store whose writes are transactions of batch operations.
pub(crate) trait TxBackend: Send + Sync {
    const NAME: &'static str;
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Applies `ops` in one transaction, if the value the transaction
    /// reads for `check`'s key is `check`'s expected one; says whether it
    /// applied them.
    fn apply(&self, ops: &[BatchOp], check: Option<(&[u8], Option<&[u8]>)>) -> Result<bool>;
    /// Visits `range` ascending, or descending with `rev`.
    fn scan(&self, range: KeyRange<'_>, rev: bool, visit: &mut ScanVisitor<'_>) -> Result<()>;
    fn sync(&self) -> Result<()>;
}

pub(crate) struct TxStore<B> {
    backend: B,
}

impl<B: TxBackend> TxStore<B> {
    pub fn new(backend: B) -> Self {
        Self { backend }
    }

    fn apply(&self, ops: &[BatchOp]) -> Result<()> {
        self.backend.apply(ops, None).map(drop)
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
        self.apply(&[BatchOp::Put {
            key: key.to_vec(),
            value: value.to_vec(),
        }])
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        check_key(key)?;
        self.apply(&[BatchOp::Delete { key: key.to_vec() }])
    }

    fn compare_and_swap(
        &self,
        key: &[u8],
        expected: Option<&[u8]>,
        new: Option<&[u8]>,
    ) -> Result<bool> {
        let op = BatchOp::write(key, new)?;
        self.backend.apply(&[op], Some((key, expected)))
    }

    fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.backend.scan(range, false, visit)
    }

    fn scan_rev(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.backend.scan(range, true, visit)
    }

    fn write_batch(&self, batch: &WriteBatch) -> Result<()> {
        self.apply(batch.ops())
    }

    fn snapshot(&self) -> Result<Box<dyn StoreSnapshot>> {
        Err(Error::Unsupported {
            store: B::NAME,
            operation: "snapshots",
        })
    }

    fn flush(&self) -> Result<()> {
        self.backend.sync()
    }

    fn sync(&self) -> Result<()> {
        self.backend.sync()
    }

    fn stats(&self) -> Stats {
        Stats::default()
    }

    fn verify(&self) -> Result<()> {
        super::verify_by_scan(self, B::NAME)
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.backend.sync()
    }
}

impl<B: TxBackend> Instrumented for TxStore<B> {}
